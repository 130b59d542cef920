"""Drill: a validating admission webhook goes down, in the two cases data cannot say yet
(scenarios/webhook-outage-blackhole.yaml, scenarios/webhook-outage-ignore.yaml; the refused
case, scenarios/webhook-outage.yaml, is a data-only scenario).

Why Python here: the black hole needs the webhook's Service rerouted to a second backend that
never answers (a fault that edits a selector to another declared backend, with its own revert),
and the Ignore case needs the canary: a second, always fail-closed configuration whose
rejections prove the API server could not reach the webhook that the case's own Ignore hides.

A real HTTPS webhook (``kdrill-webhook --mode admit``, a Deployment behind a Service, trusted by
a CA the harness generates) is registered with a ValidatingWebhookConfiguration that matches
Pods and Deployments (CREATE, UPDATE, and the scale subresource) in the drill's namespaces and in
the webhook's own namespace. The fault makes it unavailable: ``refused`` (scaled to zero: no
endpoints) or ``blackhole`` (the Service selects a backend that accepts connections and never
answers). Every check is a set of real, individually timed API writes.

Namespaces (``<ns>`` is the drill's namespace):
  <ns>           matched by the webhook: the writes under test
  <ns>-webhook   the webhook's own namespace, matched too (the deadlock)
  <ns>-excluded  not labelled, so outside the webhook's namespaceSelector
  <ns>-policy    outside the webhook; a ValidatingAdmissionPolicy (CEL, in the API server) is bound here
  <ns>-canary    matched only by a second, always fail-closed configuration for the same webhook: a write
                 admitted there proves the API server reached the webhook, a write rejected there that it
                 could not (what the scenario's own failurePolicy, Ignore, would hide)

Sources: https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/
and https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Callable

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.components.webhook import (POLICY_SCOPE_LABEL, SCOPE_LABEL, WebhookTLS, generate_webhook_tls, is_webhook_call_failure,
                                        policy_message, tls_secret, validating_admission_policy,
                                        validating_admission_policy_binding, validating_webhook_configuration,
                                        webhook_deployment, webhook_service)
from harness.expectations import wait_until, wait_until_or_raise
from harness.faults.webhook_outage import WebhookOutage
from harness.timeline import Sample, Timeline, latency_percentile
from harness.workloads import DRILL_LABEL, TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY, wait_deployment_available

WEBHOOK = "webhook"  # the admitting Deployment and the Service the API server calls
BLACKHOLE = "webhook-blackhole"  # the never-answering backend (blackhole mode)
WEBHOOK_NAME = "admit-all.kdrill.io"
OWNER_LABEL = "kdrill.io/owner"  # what the ValidatingAdmissionPolicy requires
SCENARIO_LABEL = "kdrill.io/scenario"
SCHEDULING_GATE = "kdrill.io/admission-only"


@dataclass(frozen=True)
class Namespaces:
    matched: str
    webhook: str
    excluded: str
    policy: str
    canary: str

    def all(self) -> list[str]:
        return [self.matched, self.webhook, self.excluded, self.policy, self.canary]


def error_message(exc: BaseException) -> tuple[int | None, str]:
    """(HTTP status, the API's Status message) of a failed request."""
    if isinstance(exc, ApiException):
        try:
            return exc.status, json.loads(exc.body or "{}").get("message") or str(exc.reason)
        except (ValueError, AttributeError):
            return exc.status, str(exc.body or exc.reason)
    return None, f"{type(exc).__name__}: {exc}"


class Writer:
    """Real API writes, one request each (no client retries), timed and kept in timelines.

    A sample is ``ok`` when the API server admitted the write; ``labels`` hold the object kind,
    namespace and the HTTP status of a rejection, ``detail`` the API's message.
    """

    def __init__(self, cluster, read_timeout_seconds: float) -> None:
        api = cluster.new_api()
        self.core, self.apps = client.CoreV1Api(api), client.AppsV1Api(api)
        self.request_timeout = read_timeout_seconds
        self.timelines: dict[str, Timeline] = {}
        self.sequence = 0

    def timeline(self, name: str) -> Timeline:
        return self.timelines.setdefault(name, Timeline(name))

    def call(self, timeline: str, what: str, namespace: str, request: Callable[[], object]) -> Sample:
        started, t0 = time.time(), time.monotonic()
        try:
            request()
            sample = Sample(t=started, ok=True, latency_seconds=time.monotonic() - t0, detail="admitted",
                            labels={"what": what, "namespace": namespace})
        except Exception as exc:  # every outcome is data; the drill judges it
            status, message = error_message(exc)
            sample = Sample(t=started, ok=False, latency_seconds=time.monotonic() - t0, detail=message[:600],
                            labels={"what": what, "namespace": namespace, "status": str(status)})
        self.timeline(timeline).add(sample)
        return sample

    def create(self, timeline: str, kind: str, namespace: str, labels: dict[str, str] | None = None) -> Sample:
        """Create a Deployment (0 replicas) or a Pod (scheduling-gated) named ``w-<n>``: the
        admission decision is what is measured, so neither makes the nodes run anything."""
        self.sequence += 1
        name = f"w-{self.sequence:04d}"
        labels = {DRILL_LABEL: "true", **(labels or {})}
        if kind == "Pod":
            return self.call(timeline, "create Pod", namespace, lambda: self.core.create_namespaced_pod(
                namespace, gated_pod(name, labels), _request_timeout=self.request_timeout))
        return self.call(timeline, "create Deployment", namespace, lambda: self.apps.create_namespaced_deployment(
            namespace, idle_deployment(name, labels), _request_timeout=self.request_timeout))

    def creates(self, timeline: str, namespace: str, count: int, labels: dict[str, str] | None = None) -> list[Sample]:
        """``count`` creates, alternating Deployments and Pods."""
        return [self.create(timeline, ("Deployment", "Pod")[i % 2], namespace, labels) for i in range(count)]


def gated_pod(name: str, labels: dict[str, str]) -> dict:
    # A scheduling gate keeps the Pod out of the scheduler: a real object, admitted or not, that
    # never lands on a node.
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"schedulingGates": [{"name": SCHEDULING_GATE}], "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "idle", "image": TOOLBOX_IMAGE, "imagePullPolicy": TOOLBOX_PULL_POLICY,
                                     "command": ["sleep", "infinity"]}]}}


def idle_deployment(name: str, labels: dict[str, str]) -> dict:
    selector = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": 0, "selector": {"matchLabels": selector},
                     "template": {"metadata": {"labels": {**selector, **labels}},
                                  "spec": {"containers": [{"name": "idle", "image": TOOLBOX_IMAGE,
                                                           "imagePullPolicy": TOOLBOX_PULL_POLICY,
                                                           "command": ["sleep", "infinity"]}]}}}}


def latency_stats(samples: list[Sample]) -> dict:
    """count, min, p50, max of the samples' latencies (seconds), whatever their outcome."""
    values = sorted(s.latency_seconds for s in samples if s.latency_seconds is not None)
    if not values:
        return {"count": 0, "min": None, "p50": None, "max": None}
    return {"count": len(values), "min": round(values[0], 3),
            "p50": round(latency_percentile(samples, 50, ok_only=False), 3), "max": round(values[-1], 3)}


def ratio(samples: list[Sample], predicate: Callable[[Sample], bool]) -> float | None:
    return sum(1 for s in samples if predicate(s)) / len(samples) if samples else None


def stats_text(samples: list[Sample]) -> str:
    s = latency_stats(samples)
    return f"{s['count']} writes, latency min {s['min']} / p50 {s['p50']} / max {s['max']} s"


# --- cluster objects ----------------------------------------------------------------------------

def admission(cluster) -> client.AdmissionregistrationV1Api:
    return client.AdmissionregistrationV1Api(cluster.api)


def remove_leftovers(cluster, scenario: str, namespaces: Namespaces) -> None:
    """Delete admission objects and namespaces a crashed earlier run of ``scenario`` left behind
    (a crash between creating them and recording the fault would leave them unledgered)."""
    api = admission(cluster)
    selector = f"{SCENARIO_LABEL}={scenario}"
    for obj in api.list_validating_webhook_configuration(label_selector=selector, _request_timeout=10).items:
        api.delete_validating_webhook_configuration(obj.metadata.name, _request_timeout=10)
    for obj in api.list_validating_admission_policy_binding(label_selector=selector, _request_timeout=10).items:
        api.delete_validating_admission_policy_binding(obj.metadata.name, _request_timeout=10)
    for obj in api.list_validating_admission_policy(label_selector=selector, _request_timeout=10).items:
        api.delete_validating_admission_policy(obj.metadata.name, _request_timeout=10)
    delete_namespaces(cluster, namespaces.all())


def delete_namespaces(cluster, names: list[str], wait_seconds: float = 150) -> None:
    """Delete the namespaces together and wait until all are gone (ConditionTimeout)."""
    for name in names:
        try:
            cluster.core.delete_namespace(name, grace_period_seconds=0, _request_timeout=10)
        except ApiException as exc:
            if exc.status not in (404, 409):  # gone, or already terminating
                raise

    def gone() -> bool:
        present = {n.metadata.name for n in cluster.core.list_namespace(_request_timeout=10).items}
        return not present & set(names)

    wait_until_or_raise(gone, wait_seconds, interval_seconds=1.0, description=f"namespaces {names} deleted")


def delete_admission_objects(cluster, configurations: list[str], policy: str | None) -> None:
    """Idempotent cleanup for the window before the fault is recorded (setup errors)."""
    api = admission(cluster)
    calls = [(api.delete_validating_webhook_configuration, name) for name in configurations]
    if policy:
        calls += [(api.delete_validating_admission_policy_binding, policy),
                  (api.delete_validating_admission_policy, policy)]
    for delete, name in calls:
        try:
            delete(name, _request_timeout=10)
        except ApiException as exc:
            if exc.status != 404:
                raise


def admission_objects_left(cluster, configurations: list[str], policy: str | None) -> list[str]:
    api = admission(cluster)
    reads = [("validatingwebhookconfiguration", api.read_validating_webhook_configuration, name)
             for name in configurations]
    if policy:
        reads += [("validatingadmissionpolicybinding", api.read_validating_admission_policy_binding, policy),
                  ("validatingadmissionpolicy", api.read_validating_admission_policy, policy)]
    left = []
    for kind, read, name in reads:
        try:
            read(name, _request_timeout=10)
            left.append(f"{kind}/{name}")
        except ApiException as exc:
            if exc.status != 404:
                raise
    return left


def service_endpoints(cluster, namespace: str, service: str) -> list[dict]:
    """Every endpoint of the Service: ``{"ip", "ready", "pod"}``."""
    slices = client.DiscoveryV1Api(cluster.api).list_namespaced_endpoint_slice(
        namespace, label_selector=f"kubernetes.io/service-name={service}", _request_timeout=5)
    return [{"ip": (e.addresses or [""])[0], "ready": bool(e.conditions and e.conditions.ready),
             "pod": e.target_ref.name if e.target_ref else None}
            for s in slices.items for e in (s.endpoints or [])]


def admitting_endpoints(cluster, namespace: str) -> list[dict]:
    """Endpoints of the webhook Service that are pods of the admitting Deployment."""
    return [e for e in service_endpoints(cluster, namespace, WEBHOOK) if (e["pod"] or "").startswith(f"{WEBHOOK}-")
            and not (e["pod"] or "").startswith(f"{BLACKHOLE}-")]


def deploy_webhook(cluster, ns: Namespaces, mode: str) -> WebhookTLS:
    """The CA, the serving Secret, the admitting Deployment (and the blackhole backend in
    blackhole mode) and the Service; waits until the Service has a ready admitting endpoint."""
    tls = generate_webhook_tls(WEBHOOK, ns.webhook)
    cluster.core.create_namespaced_secret(ns.webhook, tls_secret(f"{WEBHOOK}-tls", tls), _request_timeout=10)
    cluster.apps.create_namespaced_deployment(ns.webhook, webhook_deployment(WEBHOOK, "admit", f"{WEBHOOK}-tls"),
                                              _request_timeout=10)
    if mode == "blackhole":
        cluster.apps.create_namespaced_deployment(
            ns.webhook, webhook_deployment(BLACKHOLE, "blackhole", f"{WEBHOOK}-tls"), _request_timeout=10)
    cluster.core.create_namespaced_service(ns.webhook, webhook_service(WEBHOOK, {"app": WEBHOOK}), _request_timeout=10)
    wait_deployment_available(cluster, ns.webhook, WEBHOOK, 1, 180)
    if mode == "blackhole":
        wait_deployment_available(cluster, ns.webhook, BLACKHOLE, 1, 180)
    wait_until_or_raise(lambda: any(e["ready"] for e in admitting_endpoints(cluster, ns.webhook)), 60,
                        description="a ready admitting endpoint behind the webhook Service")
    return tls


# --- the drill ----------------------------------------------------------------------------------

@pytest.mark.cluster
@pytest.mark.destructive
@pytest.mark.scenario("webhook-outage-blackhole")
def test_webhook_outage_blackhole(drill):
    run_webhook_outage(drill)


@pytest.mark.cluster
@pytest.mark.destructive
@pytest.mark.scenario("webhook-outage-ignore")
def test_webhook_outage_ignore(drill):
    run_webhook_outage(drill)


def run_webhook_outage(drill) -> None:
    cluster, p = drill.cluster, drill.params
    mode, failure_policy = p["mode"], p["failure_policy"]
    timeout_seconds = int(p["timeout_seconds"])
    writes = int(p.get("writes_per_check", 6))
    with_policy, way_out = bool(p.get("admission_policy")), bool(p.get("way_out"))
    fail_closed = failure_policy == "Fail"
    base = drill.namespace[:50]
    ns = Namespaces(base, f"{base}-webhook", f"{base}-excluded", f"{base}-policy", f"{base}-canary")
    vwc = drill.namespace  # cluster-scoped: one per scenario and case
    canary = f"{vwc}-canary"
    policy = f"{drill.namespace}-require-owner" if with_policy else None
    labels = {SCENARIO_LABEL: drill.scenario.name}
    # The client waits longer than the API server's webhook deadline, so what is timed is the API's answer.
    writer = Writer(cluster, read_timeout_seconds=timeout_seconds + 30)
    drill.observe("namespaces", ns.__dict__)
    drill.observe("webhook", {"configuration": vwc, "canary_configuration": canary, "webhook": WEBHOOK_NAME,
                              "failure_policy": failure_policy, "timeout_seconds": timeout_seconds, "mode": mode,
                              "service": f"{ns.webhook}/{WEBHOOK}"})

    fault = WebhookOutage(cluster, mode=mode, namespace=ns.webhook, deployment=WEBHOOK, service=WEBHOOK,
                          blackhole_selector={"app": BLACKHOLE} if mode == "blackhole" else None,
                          validating_webhook_configurations=[vwc, canary],
                          validating_admission_policies=[policy] if policy else [],
                          validating_admission_policy_bindings=[policy] if policy else [])
    # The fail-closed configurations exist from setup on, before the outage is injected: the
    # ledger knows them from the start, so `kdrill recover` deletes them after a crash in setup
    # or baseline too (with no original replicas or selector recorded, that revert only deletes).
    # The namespaces are ledgered before the configurations, so `kdrill recover` (newest first)
    # deletes the fail-closed configurations before the namespaces their webhook guards.
    setup_entry = None
    try:
        with drill.phase("setup"):
            remove_leftovers(cluster, drill.scenario.name, ns)
            for name, labels in ((ns.matched, {SCOPE_LABEL: vwc}), (ns.webhook, {SCOPE_LABEL: vwc}),
                                 (ns.canary, {SCOPE_LABEL: canary}), (ns.excluded, {}),
                                 (ns.policy, {POLICY_SCOPE_LABEL: vwc})):
                drill.fresh_namespace(labels, name=name)
            setup_entry = drill.ledger.record(fault.kind, cluster=cluster.describe(), target=fault.target(),
                                              drill=f"{drill.name} setup")
            tls = deploy_webhook(cluster, ns, mode)
            for name, scope, policy_on_failure in ((vwc, vwc, failure_policy), (canary, canary, "Fail")):
                admission(cluster).create_validating_webhook_configuration(validating_webhook_configuration(
                    name, WEBHOOK_NAME, ns.webhook, WEBHOOK, tls.ca_bundle, scope=scope,
                    failure_policy=policy_on_failure, timeout_seconds=timeout_seconds, labels=labels),
                    _request_timeout=10)
            if policy:
                admission(cluster).create_validating_admission_policy(
                    validating_admission_policy(policy, OWNER_LABEL, scope=vwc, labels=labels), _request_timeout=10)
                admission(cluster).create_validating_admission_policy_binding(
                    validating_admission_policy_binding(policy, policy, scope=vwc, labels=labels), _request_timeout=10)
                # The policy acts once the API server has loaded and type-checked it.
                active = wait_until(lambda: not writer.create("policy-warmup", "Deployment", ns.policy).ok, 60,
                                    interval_seconds=0.5)
                assert active.ok, "the ValidatingAdmissionPolicy never started denying non-compliant objects"

        with drill.phase("baseline"):
            # The Service answers the API server once kube-proxy has programmed it, a moment after
            # its endpoint is ready; a fail-closed canary write admitted proves the webhook answered.
            reachable = wait_until(lambda: writer.create("canary-writes", "Deployment", ns.canary).ok, 60,
                                   interval_seconds=0.5)
            assert reachable.ok, "the API server never reached the healthy webhook: " + \
                str([s.detail[:200] for s in writer.timeline("canary-writes").samples()[-2:]])
            # A healthy webhook admits everything it is asked about.
            baseline = writer.creates("baseline-writes", ns.matched, writes)
            drill.measure("baseline_write_success_ratio", ratio(baseline, lambda s: s.ok), detail=stats_text(baseline))
            drill.observe("baseline_latency_seconds", latency_stats(baseline))

        with drill.inject(fault):
            with drill.phase("outage"):
                outage_in_force(drill, cluster, writer, ns, mode, fault.injected_at)
                check_matched_writes(drill, writer, ns, writes, fail_closed, timeout_seconds)
                check_excluded_writes(drill, writer, ns, writes)
                if policy:
                    check_policy(drill, writer, ns, writes)
                check_own_deployment(drill, writer, ns, mode, fail_closed)
            if way_out:
                with drill.phase("way-out"):
                    delete_configuration(drill, cluster, writer, ns, vwc, timeout_seconds)
            revert_started = time.time()

        with drill.phase("restore"):
            left = admission_objects_left(cluster, [vwc, canary], policy)
            drill.measure("admission_objects_removed_after_revert", not left,
                          detail=f"still present: {left}" if left else
                          "webhook configurations (and policy, binding) are gone")
            restored = wait_until(lambda: any(e["ready"] for e in admitting_endpoints(cluster, ns.webhook)), 120)
            drill.measure("webhook_restored_seconds",
                          restored.became_true_at - revert_started if restored.ok else None,
                          detail="from the revert until a ready admitting endpoint is behind the Service again",
                          became_true_at=restored.became_true_at)
            after = writer.creates("after-revert-writes", ns.matched, 2)
            drill.measure("post_revert_write_success_ratio", ratio(after, lambda s: s.ok), detail=stats_text(after))
    finally:
        drill.add_timelines(writer.timelines)
        # Normally already gone with the fault's revert; this covers a failure during setup.
        delete_admission_objects(cluster, [vwc, canary], policy)
        if setup_entry is not None and not admission_objects_left(cluster, [vwc, canary], policy):
            drill.ledger.remove(setup_entry.id)
        delete_namespaces(cluster, ns.all())
    drill.expectations.assert_all()


def outage_in_force(drill, cluster, writer: Writer, ns: Namespaces, mode: str, injected_at: float) -> None:
    """Wait until no admitting pod is behind the webhook Service (blackhole: only the black hole
    is), then until the API server's own calls fail: a canary write rejected with "failed
    calling webhook" (kube-proxy applies Service changes a moment after the EndpointSlices)."""
    def down() -> bool:
        if admitting_endpoints(cluster, ns.webhook):
            return False
        return mode == "refused" or any(e["ready"] for e in service_endpoints(cluster, ns.webhook, WEBHOOK))

    result = wait_until(down, 60, interval_seconds=0.25)
    endpoints = service_endpoints(cluster, ns.webhook, WEBHOOK)
    drill.observe("webhook_service_endpoints_during_outage", endpoints)
    drill.measure("admitting_endpoints_during_outage", len(admitting_endpoints(cluster, ns.webhook)),
                  detail=f"{len(endpoints)} endpoint(s) behind the Service: {[e['pod'] for e in endpoints]}",
                  became_true_at=result.became_true_at)
    onset = wait_until(lambda: is_call_failure(writer.create("canary-writes", "Deployment", ns.canary)), 60,
                       interval_seconds=0.5)
    assert onset.ok, "the API server kept reaching the webhook: " + \
        str([s.detail[:200] for s in writer.timeline("canary-writes").samples()[-2:]])
    drill.observe("outage_onset_seconds", round(onset.became_true_at - injected_at, 3))


def check_matched_writes(drill, writer: Writer, ns: Namespaces, writes: int, fail_closed: bool,
                         timeout_seconds: int) -> None:
    samples = writer.creates("matched-writes", ns.matched, writes)
    stats = latency_stats(samples)
    drill.observe("matched_write_latency_seconds", stats)
    drill.observe("matched_write_messages", sorted({s.detail for s in samples}))
    drill.observe("matched_write_statuses", sorted({s.labels.get("status", "admitted") for s in samples}))
    if fail_closed:
        rejected = [s for s in samples if is_call_failure(s)]
        drill.measure("matched_writes_rejected_by_webhook_ratio", ratio(samples, is_call_failure),
                      detail=f"{len(rejected)}/{len(samples)} rejected with 'failed calling webhook'; {stats_text(samples)}")
        rejected_stats = latency_stats(rejected)
        detail = f"{stats_text(rejected)} (timeoutSeconds {timeout_seconds})"
        drill.observe("rejection_latency_seconds", rejected_stats)
        if expects(drill, "rejection_latency_min_seconds"):  # blackhole: every rejection waits for the deadline
            drill.measure("rejection_latency_min_seconds", rejected_stats["min"], detail=detail)
        drill.measure("rejection_latency_max_seconds", rejected_stats["max"], detail=detail)
        drill.measure("rejection_latency_p50_seconds", rejected_stats["p50"], detail=detail)
    else:
        drill.measure("matched_write_success_ratio", ratio(samples, lambda s: s.ok), detail=stats_text(samples))
        drill.measure("matched_write_latency_max_seconds", stats["max"],
                      detail=f"{stats_text(samples)} (timeoutSeconds {timeout_seconds})")


def check_excluded_writes(drill, writer: Writer, ns: Namespaces, writes: int) -> None:
    samples = writer.creates("excluded-writes", ns.excluded, writes)
    drill.observe("excluded_write_latency_seconds", latency_stats(samples))
    drill.measure("excluded_write_success_ratio", ratio(samples, lambda s: s.ok), detail=stats_text(samples))
    drill.measure("excluded_write_latency_max_seconds", latency_stats(samples)["max"], detail=stats_text(samples))


def check_policy(drill, writer: Writer, ns: Namespaces, writes: int) -> None:
    noncompliant = writer.creates("policy-writes", ns.policy, writes)
    compliant = writer.creates("policy-writes", ns.policy, writes, labels={OWNER_LABEL: "kdrill"})
    message = policy_message(OWNER_LABEL)
    denied = [s for s in noncompliant if not s.ok and message in s.detail]
    drill.observe("policy_denial_messages", sorted({s.detail for s in noncompliant}))
    drill.measure("policy_noncompliant_rejected_ratio", len(denied) / len(noncompliant),
                  detail=f"denied with '{message}': {len(denied)}/{len(noncompliant)}; {stats_text(noncompliant)}")
    drill.measure("policy_compliant_admitted_ratio", ratio(compliant, lambda s: s.ok), detail=stats_text(compliant))


def check_own_deployment(drill, writer: Writer, ns: Namespaces, mode: str, fail_closed: bool) -> None:
    """What an operator would do to bring the webhook back: scale it up (``kubectl scale``),
    restart it (``kubectl rollout restart``), and the Pod creation its ReplicaSet needs."""
    apps, timeout = writer.apps, writer.request_timeout
    current = apps.read_namespaced_deployment(WEBHOOK, ns.webhook, _request_timeout=10).spec.replicas
    target = 1 if mode == "refused" else current + 1
    restart = {"spec": {"template": {"metadata": {"annotations": {
        "kubectl.kubernetes.io/restartedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}}}}
    samples = [
        writer.call("own-deployment-writes", f"scale {WEBHOOK} to {target}", ns.webhook,
                    lambda: apps.patch_namespaced_deployment_scale(WEBHOOK, ns.webhook, {"spec": {"replicas": target}},
                                                                   _request_timeout=timeout)),
        writer.call("own-deployment-writes", f"rollout restart {WEBHOOK}", ns.webhook,
                    lambda: apps.patch_namespaced_deployment(WEBHOOK, ns.webhook, restart, _request_timeout=timeout)),
    ]
    samples.append(writer.create("own-deployment-writes", "Pod", ns.webhook))
    detail = "; ".join(f"{s.labels['what']}: {'admitted' if s.ok else s.detail[:160]}" for s in samples)
    drill.observe("own_deployment_writes", [{"what": s.labels["what"], "ok": s.ok, "latency_seconds": s.latency_seconds,
                                             "detail": s.detail} for s in samples])
    if fail_closed:
        drill.measure("own_deployment_writes_rejected_ratio", ratio(samples, is_call_failure), detail=detail)
    else:
        drill.measure("own_deployment_write_success_ratio", ratio(samples, lambda s: s.ok), detail=detail)


def delete_configuration(drill, cluster, writer: Writer, ns: Namespaces, vwc: str, timeout_seconds: int) -> None:
    """The way out: delete the ValidatingWebhookConfiguration, then write until a matched write
    is admitted. Each attempt waits for the API's answer, so one attempt still meeting the
    configuration (an API server's informer not yet updated) can take up to timeoutSeconds."""
    sample = writer.call("way-out", f"delete validatingwebhookconfiguration {vwc}", "",
                         lambda: admission(cluster).delete_validating_webhook_configuration(vwc, _request_timeout=10))
    deleted_at = sample.t + (sample.latency_seconds or 0)
    drill.measure("webhook_configuration_delete_succeeded", sample.ok,
                  detail=f"{sample.latency_seconds:.3f} s; {sample.detail[:200]}")
    admitted = wait_until(lambda: writer.create("after-delete-writes", "Deployment", ns.matched).ok,
                          timeout_seconds + 30, interval_seconds=0.2)
    attempts = writer.timeline("after-delete-writes").samples()
    drill.observe("after_delete_attempts", [{"ok": s.ok, "latency_seconds": s.latency_seconds, "detail": s.detail[:200]}
                                            for s in attempts])
    drill.measure("writes_admitted_after_delete_seconds",
                  admitted.became_true_at - deleted_at if admitted.ok else None,
                  detail=f"from the delete's answer to the first admitted write; {len(attempts)} attempt(s)",
                  became_true_at=admitted.became_true_at)


def expects(drill, name: str) -> bool:
    """Whether the scenario lists expectation ``name`` (some apply to one outage mode only)."""
    return any(e.name == name for e in drill.scenario.expectations)


def is_call_failure(sample: Sample) -> bool:
    return is_webhook_call_failure(_status(sample), sample.detail, WEBHOOK_NAME)


def _status(sample: Sample) -> int | None:
    try:
        return int(sample.labels.get("status", ""))
    except ValueError:
        return None
