"""Drill: the blast radius of every admission webhook installed in the cluster
(scenarios/webhook-blast-radius.yaml).

Python, not data: what is drilled is found in the cluster when the drill runs (every Validating
and Mutating webhook configuration, grouped by the Service behind them), and each backend is
taken down in turn. For each, the same catalogue of dry-run writes (harness/probes/blast_radius.py)
is sent with the backend down, and every answer is put beside what the webhooks' configurations
say should happen (harness/components/admission.py: rules, namespaceSelector, objectSelector,
failurePolicy; matchConditions are CEL, not evaluated: "cannot tell"). The result is the blast
radius map (observation ``blast_radius``): per backend and webhook, which writes were rejected,
with what latency, which of them the platform itself makes, and whether the webhook's repair was
blocked.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest

from harness.components import admission
from harness.core.waiting import wait_until
from harness.faults import injected
from harness.faults.webhook_backend_down import WebhookBackendDown
from harness.kube.workloads import TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY
from harness.probes import blast_radius
from harness.scaffolding.drill_objects import DrillObjects

BLACKHOLE_POD = "kdrill-webhook-blackhole"
BLACKHOLE_LABELS = {"app.kubernetes.io/name": "kdrill-webhook-blackhole"}
# What the Pod Security Standards' "restricted" profile asks of a container: a webhook's namespace
# may enforce it (Gatekeeper's published manifest labels gatekeeper-system so).
# https://kubernetes.io/docs/concepts/security/pod-security-standards/#restricted
RESTRICTED = {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534, "allowPrivilegeEscalation": False,
              "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
# A deadline for the black-hole pod's readiness, not an expectation.
POD_READY_DEADLINE_SECONDS = 120


def _namespace_labels(cluster):
    cache: dict[str, dict[str, str]] = {}

    def labels(name: str) -> dict[str, str]:
        if name not in cache:
            try:
                cache[name] = dict(cluster.core.read_namespace(name, _request_timeout=10).metadata.labels or {})
            except Exception:  # not there (yet): the API server sets this one label on every namespace
                cache[name] = {"kubernetes.io/metadata.name": name}
        return cache[name]
    return labels


def _backends(webhooks: list[admission.Webhook]) -> tuple[dict[tuple[str, str], list[admission.Webhook]], list[dict]]:
    """Webhooks grouped by their Service (namespace, name); and those kdrill cannot take down."""
    backends: dict[tuple[str, str], list[admission.Webhook]] = {}
    not_drilled = []
    for hook in webhooks:
        if hook.service is None:
            not_drilled.append({"webhook": hook.id, "why": f"called by URL ({hook.url}): kdrill takes down Services only"})
            continue
        backends.setdefault(hook.service[:2], []).append(hook)
    return backends, not_drilled


def _target_port(service, port: int) -> tuple[int | str, int]:
    """(the Service port's targetPort, the port the black-hole pod listens on)."""
    for p in service.spec.ports or []:
        if p.port == port:
            target = p.target_port if p.target_port is not None else port
            if isinstance(target, str) and target.isdigit():
                target = int(target)
            return target, target if isinstance(target, int) else 8443
    raise AssertionError(f"Service {service.metadata.namespace}/{service.metadata.name} has no port {port}")


def _blackhole_pod(namespace: str, target: int | str, listen: int) -> dict[str, Any]:
    port = {"containerPort": listen, **({"name": target} if isinstance(target, str) else {})}
    # A port under 1024 for a user that is not root: a "safe" sysctl the restricted profile allows.
    pod_security = {"sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": str(listen)}]} \
        if listen < 1024 else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": BLACKHOLE_POD, "namespace": namespace, "labels": dict(BLACKHOLE_LABELS)},
            "spec": {"terminationGracePeriodSeconds": 0, "securityContext": pod_security, "containers": [{
                "name": "blackhole", "image": TOOLBOX_IMAGE, "imagePullPolicy": TOOLBOX_PULL_POLICY,
                "command": ["kdrill-webhook", "--mode", "blackhole", "--port", str(listen)], "ports": [port],
                "readinessProbe": {"tcpSocket": {"port": listen}, "periodSeconds": 1},
                "securityContext": RESTRICTED}]}}


def _pod_ready(cluster, namespace: str) -> bool:
    pod = cluster.core.read_namespaced_pod(BLACKHOLE_POD, namespace, _request_timeout=5)
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


@pytest.mark.cluster
@pytest.mark.destructive
@pytest.mark.scenario("webhook-blast-radius")
def test_webhook_blast_radius(drill):
    cluster, ns, p = drill.cluster, drill.namespace, drill.params
    mode = p["mode"]
    onset_deadline, recovery_deadline = float(p["onset_deadline_seconds"]), float(p["recovery_deadline_seconds"])
    node = (drill.topology.workers or drill.topology.control_plane)[0]
    labels_of = _namespace_labels(cluster)

    with drill.phase("setup"):
        drill.fresh_namespace()
        webhooks = admission.discover(cluster)
        drill.observe("webhooks_discovered", [{
            "id": h.id, "failure_policy": h.failure_policy, "timeout_seconds": h.timeout_seconds,
            "service": list(h.service) if h.service else None, "url": h.url, "rules": list(h.rules),
            "namespace_selector": h.namespace_selector, "object_selector": h.object_selector,
            "match_conditions": [c.get("name") for c in h.match_conditions], "side_effects": h.side_effects}
            for h in webhooks])
        backends, not_drilled = _backends(webhooks)
        if not backends:
            drill.observe("not_drilled", not_drilled)
            pytest.skip(f"no admission webhook with a Service backend is installed in {cluster.name} "
                        f"({len(webhooks)} webhook(s) found): nothing to take down")
        timeout = max(h.timeout_seconds for h in webhooks) + 10.0  # the client outwaits every webhook

    blast: dict[str, Any] = {}
    onsets, rejected_latency, over_timeout, recoveries = [], [], [], []
    mismatches, system_blocked, repair_blocked = [], [], []

    for (svc_ns, svc_name), hooks in sorted(backends.items()):
        key = f"{svc_ns}/{svc_name}"
        down = {h.id for h in hooks}
        # One write the backend's objectSelector leaves out, when a label can do it: does it protect?
        opt_out = next((labels for h in hooks if (labels := blast_radius.excluding_labels(h.object_selector))), None)
        writes = blast_radius.catalogue(cluster, ns, node, (svc_ns, svc_name), labels_of, opt_out)
        predicted = {}
        for w in writes:
            found = [(h, admission.matches(h, w.write)) for h in webhooks]
            outcome, why = admission.expected_outcome(found, down)
            predicted[w.name] = {"predicted": outcome, "why": why,
                                 "sent_to": {h.id: {"sent": m.sent, "reason": m.reason} for h, m in found if h.id in down}}
        entry: dict[str, Any] = {"webhooks": sorted(down), "mode": mode, "writes": {}}
        blast[key] = entry
        repair = [w.name for w in writes if w.repair and w.name.startswith("service-update@")
                  and predicted[w.name]["predicted"] != "admitted"]
        if repair:
            # Its revert is this very write: taking it down would lock the drill out of its repair.
            entry["not_drilled"] = (f"the revert (an UPDATE of Service {key}) would itself be sent to the webhook "
                                    f"with failurePolicy Fail: {predicted[repair[0]]['why']}")
            repair_blocked.append({"backend": key, "write": repair[0], "how": "predicted from the configuration; "
                                   "not taken down"})
            drill.say(f"not taking {key} down: {entry['not_drilled']}")
            continue

        with drill.phase(f"baseline {key}"):
            baseline = blast_radius.send_all(writes, timeout)
            kept = [w for w in writes if baseline[w.name].outcome == "admitted"]
            entry["baseline_not_admitted"] = {n: o.to_dict() for n, o in baseline.items() if o.outcome != "admitted"}
            # Refused by the healthy platform is its policy; not sent at all is kdrill's failure.
            mismatches += [f"{key} {n}: no answer with every backend up ({o.message[:120]})"
                           for n, o in baseline.items() if o.outcome == "no answer"]
            # A write the healthy platform refuses (its own policy) says nothing about an outage.
            writes = kept
        if not writes:
            entry["not_drilled"] = "every catalogue write was refused with every backend up: nothing to compare"
            drill.say(f"not taking {key} down: {entry['not_drilled']}")
            continue

        with contextlib.ExitStack() as stack:
            reroute = None
            if mode == "blackhole":
                service = cluster.core.read_namespaced_service(svc_name, svc_ns, _request_timeout=10)
                target, listen = _target_port(service, next(h.service[2] for h in hooks))
                objects = DrillObjects(cluster, [_blackhole_pod(svc_ns, target, listen)])
                stack.enter_context(injected(objects, drill.ledger, drill=drill.name))
                ready = wait_until(lambda: _pod_ready(cluster, svc_ns), POD_READY_DEADLINE_SECONDS,
                                   description=f"black-hole pod in {svc_ns} ready")
                assert ready.ok, f"the black-hole pod in {svc_ns} is not ready: {ready.last_error}"
                reroute = dict(BLACKHOLE_LABELS)
            fault = WebhookBackendDown(cluster, svc_ns, svc_name, reroute_to=reroute)
            with drill.inject(fault), drill.phase(f"{mode} {key}"):
                entry["connections_cut"] = fault.connections_cut
                canary = next((w for w in writes if predicted[w.name]["predicted"] == "rejected"), None)
                if canary is not None:
                    def rejected():
                        outcome = blast_radius.send(canary, timeout)
                        return outcome if outcome.outcome == "rejected" else None
                    shown = wait_until(rejected, onset_deadline, interval_seconds=0.5,
                                       description=f"{canary.name} rejected with {key} down")
                    # From the fault to the sending of the first write rejected (a black hole
                    # answers only after timeoutSeconds: its return would overstate the onset).
                    onset = shown.became_true_at - shown.value.seconds - fault.injected_at if shown.ok else None
                    onsets.append(onset if onset is not None else float("inf"))
                    entry["outage_onset_seconds"] = round(onset, 3) if onset is not None else None
                outcomes = blast_radius.send_all(writes, timeout)
            revert_done = fault.reverted_at or time.time()
            def all_admitted():
                outcomes = blast_radius.send_all(writes, timeout)
                return max(o.seconds for o in outcomes.values()) if all(
                    o.outcome == "admitted" for o in outcomes.values()) else None
            recovered = wait_until(all_admitted, recovery_deadline, interval_seconds=0.5,
                                   description=f"every write admitted with {key} back")
            # To the sending of the first round of writes all admitted (the round takes its slowest).
            recoveries.append(recovered.became_true_at - recovered.value - revert_done if recovered.ok
                              else float("inf"))
            entry["recovery_seconds"] = round(recoveries[-1], 3) if recovered.ok else None

        timeouts = {h.name: h.timeout_seconds for h in hooks}
        for w in writes:
            o, want = outcomes[w.name], predicted[w.name]
            entry["writes"][w.name] = {**o.to_dict(), **want, "system": w.system, "repair": w.repair}
            if want["predicted"] is not None and o.outcome != want["predicted"]:
                mismatches.append(f"{key} {w.name}: {o.outcome}, configuration says {want['predicted']}")
            if o.outcome == "rejected":
                if o.webhook in timeouts:
                    rejected_latency.append(o.seconds)
                    over_timeout.append(o.seconds - timeouts[o.webhook])
                if w.system:
                    system_blocked.append(f"{key} {w.name}")
                if w.repair:
                    repair_blocked.append({"backend": key, "write": w.name, "how": "observed"})

    drill.observe("blast_radius", blast)
    drill.observe("not_drilled", not_drilled + [{"backend": k, "why": v["not_drilled"]}
                                                for k, v in blast.items() if "not_drilled" in v])
    drilled = [k for k, v in blast.items() if "not_drilled" not in v]
    drill.measure("backends_taken_down", len(drilled), detail=", ".join(drilled) or "none")
    drill.measure("outcome_mismatches", len(mismatches), detail="; ".join(mismatches) or
                  "every write's answer is what the webhooks' configurations say")
    uncut = [f"{k}: {v['connections_cut']['why']}" for k, v in blast.items() if v.get("connections_cut", {}).get("why")]
    drill.measure("outage_onset_seconds_max", max(onsets) if onsets and max(onsets) != float("inf") else None,
                  detail=f"{len(onsets)} backend(s) with a write their configuration says is rejected"
                         + (f"; {'; '.join(uncut)}" if uncut else ""))
    if mode == "refused":
        drill.measure("rejection_latency_max_seconds", max(rejected_latency, default=None),
                      detail=f"{len(rejected_latency)} rejected write(s)")
    else:
        drill.measure("rejection_wait_short_of_timeout_seconds_max",
                      max((-x for x in over_timeout), default=None),
                      detail=f"how much sooner than its webhook's timeoutSeconds a rejected write came back; "
                             f"{len(over_timeout)} rejected write(s)")
        drill.measure("rejection_wait_over_timeout_seconds_max", max(over_timeout, default=None),
                      detail="how much longer than its webhook's timeoutSeconds a rejected write took")
    drill.measure("system_writes_blocked", len(system_blocked), detail="; ".join(system_blocked) or "none")
    drill.measure("own_repair_blocked", len(repair_blocked),
                  detail="; ".join(f"{r['backend']} {r['write']} ({r['how']})" for r in repair_blocked) or "none")
    drill.measure("recovery_seconds_max", max(recoveries) if recoveries and max(recoveries) != float("inf") else None,
                  detail="from the revert until every write is admitted again")
    drill.expectations.assert_all()
