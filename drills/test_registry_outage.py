"""Drill: the image registry goes away, connections accepted and never answered
(scenarios/registry-outage-unresponsive.yaml). The refused case, scenarios/registry-outage.yaml,
is a data-only scenario; this one stays Python until data can say "no pull error was ever
reported" (a count of samples in given states) and "the kubelet's first Pulling event" (an event
probe), which is what distinguishes a hung pull from a failed one.

A real registry container beside the kind nodes (harness/components/registry.py) serves a workload
image pushed for this run only; the nodes pull it from there. Two replicas run on one worker (the
"cached" node, which pulled the image); the other worker ("fresh" node) has never pulled it. During
the outage the drill kills a running container on the cached node (restarted from the cached image,
IfNotPresent), scales the Deployment out so the new replica must land on the fresh node, and starts
a pod with imagePullPolicy Always on the cached node. After the restore the pending pods start by
themselves.
"""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest
from kubernetes import client

from harness.components.registry import (REGISTRY_HOST, REGISTRY_PORT, LocalRegistry, image_tag,
                                         max_retry_wait_after_restore, node_has_image, remove_image_from_nodes)
from harness.expectations import wait_until
from harness.faults import revert_and_verify
from harness.faults.drill_registry import DrillRegistry
from harness.faults.registry_outage import RegistryOutage
from harness.ledger import Ledger
from harness.probes import Probe
from harness.probes.incluster import InClusterProbe
from harness.probes.pods import node_containers, pod_events, pod_snapshot
from harness.scenario import ScenarioError
from harness.timeline import Sample, first_time, success_ratio
from harness.workloads import delete_namespace, http_server_deployment, wait_deployment_available

APP = "web"
ALWAYS_POD = "web-always"
REPOSITORY = "kdrill/web"
HOSTNAME_LABEL = "kubernetes.io/hostname"
PULL_ERRORS = ("ErrImagePull", "ImagePullBackOff")
log = logging.getLogger("kdrill.drills.registry_outage")


# --- the registry, for every drill in this module ------------------------------------------------

@pytest.fixture(scope="module")
def local_registry(kdrill_cluster):
    """The registry container and every node's hosts.toml for it. Removed after the module,
    with the namespaces and images the drills left (so no pod keeps pulling from it)."""
    if not kdrill_cluster.node_access:
        pytest.skip(f"the registry drills need node access; {kdrill_cluster.name} has none")
    registry = LocalRegistry.for_cluster(kdrill_cluster)
    nodes = kdrill_cluster.nodes_by_role.get("control-plane", []) + kdrill_cluster.nodes_by_role.get("worker", [])
    # The container and the nodes' configuration are in the ledger from before they exist, so
    # `kdrill recover` removes them after a crash.
    ledger = Ledger()
    setup = DrillRegistry(kdrill_cluster, registry.name, nodes)
    entry = ledger.record(setup.kind, cluster=kdrill_cluster.describe(), target=setup.target(),
                          drill="registry drills")
    setup.inject()
    left = {"namespaces": set()}
    yield registry, left
    # Pods first: while one may still pull, its node keeps the configuration and the registry.
    for namespace in sorted(left["namespaces"]):
        delete_namespace(kdrill_cluster, namespace)
    pending = [e.id for e in ledger.entries() if getattr(e, "kind", None) == RegistryOutage.kind
               and (e.target or {}).get("container") == registry.name]
    if pending:
        # A revert failed: the container is what `kdrill recover` restores, so it stays (and the
        # drill-registry entry with it, which recover undoes after the outage).
        log.warning("keeping registry container %s for kdrill recover (ledger entries %s)", registry.name, pending)
        return
    # Also what an interrupted earlier run left: every image pulled from the drill's registry host.
    revert_and_verify(setup, ledger, entry.id)


# --- workload --------------------------------------------------------------------------------

def _hostname_term(*nodes: str) -> client.V1NodeSelectorTerm:
    return client.V1NodeSelectorTerm(match_expressions=[
        client.V1NodeSelectorRequirement(key=HOSTNAME_LABEL, operator="In", values=list(nodes))])


def web_deployment(image: str, replicas: int, cached_node: str, fresh_node: str) -> client.V1Deployment:
    """``replicas`` pods of kdrill-http on ``cached_node``; one more goes to ``fresh_node``.

    Required node affinity keeps the pods on the two workers; preferred affinity (weight 100)
    scores ``cached_node`` first; a topology spread constraint (DoNotSchedule) with maxSkew =
    ``replicas`` lets ``replicas`` pods share one node and forces replica ``replicas + 1`` onto
    the other (the placement is asserted, not assumed)."""
    deployment = http_server_deployment(APP, replicas, image=image, pull_policy="IfNotPresent", spread=False)
    spec = deployment.spec.template.spec
    spec.affinity = client.V1Affinity(node_affinity=client.V1NodeAffinity(
        required_during_scheduling_ignored_during_execution=client.V1NodeSelector(
            node_selector_terms=[_hostname_term(cached_node, fresh_node)]),
        preferred_during_scheduling_ignored_during_execution=[
            client.V1PreferredSchedulingTerm(weight=100, preference=_hostname_term(cached_node))]))
    spec.topology_spread_constraints = [client.V1TopologySpreadConstraint(
        max_skew=replicas, topology_key=HOSTNAME_LABEL, when_unsatisfiable="DoNotSchedule",
        label_selector=client.V1LabelSelector(match_labels={"app": APP}))]
    return deployment


def always_pull_pod(image: str, node: str) -> client.V1Pod:
    """One kdrill-http pod with imagePullPolicy Always on ``node`` (which has the image cached)."""
    template = http_server_deployment(ALWAYS_POD, 1, node_selector={HOSTNAME_LABEL: node}, image=image,
                                      pull_policy="Always", spread=False).spec.template
    return client.V1Pod(metadata=client.V1ObjectMeta(name=ALWAYS_POD, labels=template.metadata.labels),
                        spec=template.spec)


# --- observing pulls -------------------------------------------------------------------------

def pod_states(cluster, namespace: str) -> dict[str, dict]:
    """pod name -> {"node", "phase", "ready", "waiting", "running", "restarts", "app"}: ``waiting``
    is the first container's state.waiting.reason (kubelet's view of the pull)."""
    out = {}
    for pod in cluster.core.list_namespaced_pod(namespace, _request_timeout=3).items:
        statuses = pod.status.container_statuses or []
        first = statuses[0] if statuses else None
        waiting = first.state.waiting.reason if first and first.state and first.state.waiting else None
        out[pod.metadata.name] = {
            "app": (pod.metadata.labels or {}).get("app"), "node": pod.spec.node_name, "phase": pod.status.phase,
            "ready": bool(first and first.ready), "running": bool(first and first.state and first.state.running),
            "waiting": waiting, "restarts": sum(s.restart_count for s in statuses)}
    return out


class PullStateProbe(Probe):
    """Every interval: the namespace's pods (:func:`pod_states`) and the Deployment's desired and
    available replicas, through the API. ``detail`` holds the pods as JSON; ``labels`` holds
    ``desired`` and ``available``."""

    def __init__(self, name: str, cluster, namespace: str, deployment: str, **kwargs) -> None:
        super().__init__(name, **kwargs)
        self.cluster, self.namespace, self.deployment = cluster, namespace, deployment

    def sample(self) -> Sample:
        started = time.time()
        pods = pod_states(self.cluster, self.namespace)
        d = self.cluster.apps.read_namespaced_deployment(self.deployment, self.namespace, _request_timeout=3)
        return Sample(t=started, ok=True, latency_seconds=time.time() - started, detail=json.dumps(pods),
                      labels={"desired": str(d.spec.replicas), "available": str(d.status.available_replicas or 0)})


def states(sample: Sample) -> dict[str, dict]:
    return json.loads(sample.detail) if sample.ok else {}


def transitions(samples: list[Sample], pod: str) -> list[dict]:
    """Each change of the pod's (phase, waiting reason, ready), with its time."""
    out, last = [], None
    for s in samples:
        p = states(s).get(pod)
        if p is None:
            continue
        key = (p["phase"], p["waiting"], p["ready"])
        if key != last:
            out.append({"t": s.t, "phase": p["phase"], "waiting": p["waiting"], "ready": p["ready"]})
            last = key
    return out


def registry_check_from_node(cluster, node: str, container: str) -> str:
    """What a node sees calling the registry now: the HTTP code, or curl's error (3 s timeout)."""
    result = cluster.node_exec(node, ["curl", "-sS", "-o", "/dev/null", "-m", "3", "-w", "%{http_code}",
                                      f"http://{container}:{REGISTRY_PORT}/v2/"], timeout_seconds=15, check=False)
    return f"HTTP {result.stdout.strip()}" if result.returncode == 0 else result.stderr.strip()[:200]


def _replacement(cluster, node, namespace, pod_uid, old_id) -> bool:
    """True once the node's runtime runs a new container for the pod whose container was killed."""
    return any(c["pod_uid"] == pod_uid and cid != old_id and c["state"] == "CONTAINER_RUNNING"
               for cid, c in node_containers(cluster, node, namespace).items())


# --- the drill -------------------------------------------------------------------------------

def run_registry_outage(drill, registry: LocalRegistry, left: dict) -> None:
    cluster, ns = drill.cluster, drill.namespace
    if "hold_seconds" not in drill.params:  # optional for the fault, which data-only scenarios also use
        raise ScenarioError(drill.scenario.path, "fault.params.hold_seconds",
                            "how long the registry stays down, in seconds (this drill file reads it)", "nothing")
    mode, hold = drill.params["mode"], float(drill.params["hold_seconds"])
    replicas = int(drill.workload.get("replicas", 2))
    workers = drill.topology.workers
    assert len(workers) >= 2, f"the drill needs two workers (one pulls the image, one never has): {workers}"
    cached_node, fresh_node = workers[0], workers[1]
    tag = image_tag(drill.record.run_id, drill.scenario.name)
    image = f"{REGISTRY_HOST}/{REPOSITORY}:{tag}"
    left["namespaces"].add(ns)

    with drill.phase("setup"):
        drill.fresh_namespace()
        pushed_at = time.time()
        digest = registry.push_unique_image(REPOSITORY, tag, marker=f"{drill.record.run_id}/{drill.scenario.name}")
        drill.observe("image", {"reference": image, "digest": digest, "registry_container": registry.name,
                                "push_seconds": round(time.time() - pushed_at, 1)})
        cached_before = {n: node_has_image(cluster, n, image) for n in (cached_node, fresh_node)}
        assert not any(cached_before.values()), f"{image} is already on a node before the drill: {cached_before}"
        cluster.apps.create_namespaced_deployment(ns, web_deployment(image, replicas, cached_node, fresh_node))
        wait_deployment_available(cluster, ns, APP, replicas, 180)
        before = pod_snapshot(cluster, ns, f"app={APP}")
        assert all(p["node"] == cached_node for p in before.values()), \
            f"the {replicas} replicas must all run on {cached_node} (preferred node affinity): {before}"
        on_nodes = {n: node_has_image(cluster, n, image) for n in (cached_node, fresh_node)}
        assert on_nodes == {cached_node: True, fresh_node: False}, f"image cached after setup: {on_nodes}"
        drill.observe("setup", {"cached_node": cached_node, "fresh_node": fresh_node, "pods": before,
                                "pull_events": {p["name"]: [e for e in pod_events(cluster, ns, p["name"])
                                                            if e["reason"] in ("Pulling", "Pulled")]
                                                for p in before.values()}})
        pod_ips = {p.metadata.name: p.status.pod_ip
                   for p in cluster.core.list_namespaced_pod(ns, label_selector=f"app={APP}").items}
        targets = {f"pod-{n}": f"http://{ip}:8080/" for n, ip in pod_ips.items()}
        # The trailing dot makes the name absolute: the pod's search domains are not tried.
        targets["registry"] = f"http://{registry.name}.:{REGISTRY_PORT}/v2/"
        incluster = InClusterProbe(cluster, ns, "http-probe", targets, interval_seconds=drill.interval_seconds,
                                   duration_seconds=hold + 300, node=fresh_node).start()

    pulls = PullStateProbe("pull-states", cluster, ns, APP, interval_seconds=drill.interval_seconds,
                           max_seconds=hold + 600)
    try:
        pulls.start()
        with drill.phase("baseline"):
            def steady():
                results = [r for r in incluster.results() if not r.get("done")]
                return all(sum(1 for r in results if r["target"] == t and r["ok"]) >= 4 for t in targets)
            assert wait_until(steady, 60, interval_seconds=1.0).ok, \
                "no steady state: a workload pod or the registry does not answer the in-cluster probe"

        fault = RegistryOutage(cluster, registry.name, mode, verify_image=f"{REPOSITORY}:{tag}")
        with drill.inject(fault):
            with drill.phase("registry-outage"):
                drill.observe("node_sees_registry_during_outage", registry_check_from_node(cluster, fresh_node,
                                                                                           registry.name))
                # Capacity is needed now: one more replica (only the fresh node may take it) and a
                # pod that must pull even though its node has the image.
                scaled_at = time.time()
                cluster.apps.patch_namespaced_deployment_scale(APP, ns, {"spec": {"replicas": replicas + 1}})
                always_created_at = time.time()
                cluster.core.create_namespaced_pod(ns, always_pull_pod(image, cached_node))

                victim, victim_pod = next((cid, c["pod_uid"])
                                          for cid, c in node_containers(cluster, cached_node, ns).items()
                                          if c["state"] == "CONTAINER_RUNNING" and c["name"] == "http"
                                          and c["pod"] in pod_ips)
                killed_at = time.time()
                cluster.node_exec(cached_node, ["crictl", "stop", "--timeout", "0", victim])
                drill.say(f"killed container {victim[:13]} on {cached_node}")
                restarted = wait_until(lambda: _replacement(cluster, cached_node, ns, victim_pod, victim), 60)
                victim_name = next(p["name"] for uid, p in before.items() if uid == victim_pod)
                victim_events = [e for e in pod_events(cluster, ns, victim_name)
                                 if e["last"] and e["last"] >= killed_at - 1]
                drill.measure("cached_container_restart_seconds",
                              restarted.became_true_at - killed_at if restarted.ok else None,
                              detail=f"container {victim[:13]} of pod {victim_name} on {cached_node}; events after "
                                     f"the kill: {[(e['reason'], e['message'][:80]) for e in victim_events]}",
                              became_true_at=restarted.became_true_at)
                drill.observe("killed_container_events", victim_events)
                # Hold the outage for its window: the drill's duration, not a synchronisation.
                threading.Event().wait(max(0.0, fault.injected_at + hold - time.time()))
                pending_at_restore = pod_states(cluster, ns)
                hold_ended_at = time.time()  # the revert starts now; reverted_at is when it answers again
        reverted_at = fault.reverted_at

        new_pods = [name for name, p in pod_states(cluster, ns).items()
                    if p["app"] == APP and name not in pod_ips]
        assert len(new_pods) == 1, f"expected one scale-out pod, found {new_pods}"
        new_pod = new_pods[0]
        assert pending_at_restore.get(new_pod, {}).get("node") == fresh_node, \
            f"the scale-out replica must run on {fresh_node}, the node without the image: {pending_at_restore}"
        drill.observe("node_sees_registry_after_restore", registry_check_from_node(cluster, fresh_node, registry.name))

        with drill.phase("restore"):
            def started(pod_name, need_ready):
                p = pod_states(cluster, ns).get(pod_name)
                return p is not None and (p["ready"] if need_ready else p["running"])
            # Times count from the start of the revert (the registry answered again
            # reverted_at - hold_ended_at seconds later, once restored and checked).
            wait_seconds = max_retry_wait_after_restore(reverted_at - scaled_at) + 120
            new_ready = wait_until(lambda: started(new_pod, True), wait_seconds, interval_seconds=0.5)
            always_running = wait_until(lambda: started(ALWAYS_POD, False), wait_seconds, interval_seconds=0.5)
            restored_note = f"registry restored and checked {reverted_at - hold_ended_at:.1f} s after the revert began"
            at_restore = pending_at_restore.get(new_pod, {})
            drill.measure("scale_out_pod_ready_after_restore_seconds",
                          new_ready.became_true_at - hold_ended_at if new_ready.ok else None,
                          detail=f"pod {new_pod} on {at_restore.get('node')}, waiting {at_restore.get('waiting')} "
                                 f"at the restore; {restored_note}", became_true_at=new_ready.became_true_at)
            drill.measure("always_pull_pod_running_after_restore_seconds",
                          always_running.became_true_at - hold_ended_at if always_running.ok else None,
                          detail=f"waiting {pending_at_restore.get(ALWAYS_POD, {}).get('waiting')} at the restore; "
                                 f"{restored_note}", became_true_at=always_running.became_true_at)
            wait_deployment_available(cluster, ns, APP, replicas + 1, 120)
    finally:
        pulls.stop()
        drill.add_timelines({pulls.name: pulls.timeline})
        try:
            drill.add_timelines(incluster.timelines(prefix="http/"))
        finally:
            incluster.delete()

    samples = pulls.timeline.samples()
    outage = (fault.injected_at, hold_ended_at)

    # The outage was real: nothing got an answer from the registry. A probe request is stamped
    # when it starts and lasts up to its timeout, so one started within a timeout of either end
    # may be answered by the registry before the fault or after the revert: leave those out.
    http = drill.timelines
    margin = incluster.timeout_seconds
    drill.measure("registry_success_ratio_during_outage",
                  success_ratio(http["http/registry"].samples(), outage[0] + margin, outage[1] - margin),
                  detail=f"in-cluster probe on {fresh_node} to http://{registry.name}:{REGISTRY_PORT}/v2/, "
                         f"requests started from {margin} s after the injection to {margin} s before the revert")

    ratios = {name: success_ratio(tl.samples(), *outage) for name, tl in http.items()
              if name.startswith("http/pod-")}
    others = [r for name, r in ratios.items() if not name.endswith(victim_name) and r is not None]
    drill.observe("pod_ip_success_ratios_during_outage", ratios)
    drill.measure("running_pods_http_success_ratio", min(others) if others else None,
                  detail=f"lowest over {len(others)} running pods not killed; killed pod {victim_name} reported "
                         "separately")

    # The Deployment stayed short of its desired replicas throughout the outage.
    window = [s for s in samples if s.ok and scaled_at + 2 <= s.t <= outage[1]]
    shortfalls = [int(s.labels["desired"]) - int(s.labels["available"]) for s in window]
    drill.measure("deployment_shortfall_min_during_outage", min(shortfalls) if shortfalls else None,
                  detail=f"desired - available replicas, lowest over {len(window)} samples from 2 s after the "
                         "scale-out to the restore")
    seen_always = [states(s)[ALWAYS_POD] for s in samples
                   if outage[0] <= s.t <= outage[1] and ALWAYS_POD in states(s)]
    drill.measure("always_pull_pod_started_during_outage",
                  any(p["running"] for p in seen_always) if seen_always else None,
                  detail=f"imagePullPolicy Always on {cached_node}, which has the image cached; "
                         f"seen in {len(seen_always)} samples")

    def first_reason(pod, reason, since):
        return first_time(samples, lambda s: states(s).get(pod, {}).get("waiting") == reason, after=since,
                          before=outage[1])

    def elapsed(at, since):
        return None if at is None else at - since

    new_events, always_events = pod_events(cluster, ns, new_pod), pod_events(cluster, ns, ALWAYS_POD)
    drill.observe("scale_out_pod_transitions", transitions(samples, new_pod))
    drill.observe("always_pull_pod_transitions", transitions(samples, ALWAYS_POD))
    drill.observe("scale_out_pod_events", new_events)
    drill.observe("always_pull_pod_events", always_events)

    if mode == "refused":
        first_error = first_reason(new_pod, "ErrImagePull", scaled_at)
        first_backoff = first_reason(new_pod, "ImagePullBackOff", scaled_at)
        drill.measure("scale_out_first_pull_error_seconds", elapsed(first_error, scaled_at),
                      detail=f"scale-out to the first ErrImagePull of {new_pod}", became_true_at=first_error)
        drill.measure("scale_out_image_pull_backoff_seconds", elapsed(first_backoff, scaled_at),
                      detail=f"scale-out to the first ImagePullBackOff of {new_pod}", became_true_at=first_backoff)
        always_error = first_reason(ALWAYS_POD, "ErrImagePull", always_created_at)
        drill.measure("always_pull_pod_first_pull_error_seconds", elapsed(always_error, always_created_at),
                      detail=f"pod creation to the first ErrImagePull on {cached_node}", became_true_at=always_error)
        failing = hold_ended_at - first_error if first_error else None
        drill.observe("pull_attempts_of_scale_out_pod",
                      sum(e["count"] for e in new_events if e["reason"] == "Pulling"))
        drill.observe("retry_wait_bound_after_restore_seconds",
                      None if failing is None else max_retry_wait_after_restore(failing))
    else:
        seen = [states(s)[pod] for s in samples if outage[0] <= s.t <= outage[1]
                for pod in (new_pod, ALWAYS_POD) if pod in states(s)]
        errors = sum(1 for p in seen if p["waiting"] in PULL_ERRORS)
        drill.measure("pull_error_states_during_outage", errors if seen else None,
                      detail=f"pod states of {new_pod} and {ALWAYS_POD} reporting ErrImagePull/ImagePullBackOff, "
                             f"of {len(seen)} sampled; the others: "
                             f"{sorted({str(p['waiting']) for p in seen if p['waiting'] not in PULL_ERRORS})}")
        pulling = [e["first"] for e in new_events if e["reason"] == "Pulling" and e["first"]]
        drill.measure("scale_out_pull_started_seconds", (min(pulling) - scaled_at) if pulling else None,
                      detail=f"scale-out to the kubelet's first Pulling event for {new_pod} "
                             "(event times are truncated to whole seconds)")
        failed = [e for e in new_events + always_events if e["reason"] in ("Failed", "BackOff")
                  and e["first"] and e["first"] <= outage[1]]
        drill.observe("pull_failure_events_during_outage", failed)

    delete_namespace(cluster, ns)
    left["namespaces"].discard(ns)
    remove_image_from_nodes(cluster, [cached_node, fresh_node], image)
    drill.expectations.assert_all()


@pytest.mark.cluster
@pytest.mark.destructive
@pytest.mark.node_access
@pytest.mark.scenario("registry-outage-unresponsive")
def test_registry_outage_unresponsive(drill, local_registry):
    run_registry_outage(drill, *local_registry)
