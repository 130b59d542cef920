"""Drill: a worker node is lost (scenarios/worker-node-loss.yaml).

The worker's node container is frozen: its kubelet stops renewing the node's Lease and posting
status. After ``node-monitor-grace-period`` the node lifecycle controller marks it Ready=Unknown,
taints it ``node.kubernetes.io/unreachable:NoExecute`` and marks its pods not Ready, so the
EndpointSlice controller drops them from the Service. Pods that tolerate the taint for
``tolerationSeconds`` are evicted after that long, and their ReplicaSet starts replacements on
the other worker. Until the pods are dropped from the Service, calls routed to them fail.

Why a Python drill: each step (Unknown, taint, endpoints dropped, eviction, replacement) is timed
from the one before it, for the pods found on the frozen worker at run time, as the node lifecycle
controller takes them; node-freeze is not a fault a data-only scenario can use.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from harness.core.timeline import success_ratio
from harness.core.waiting import hold_until, wait_until
from harness.engine.workload import serve_web
from harness.faults.node_freeze import NodeFreeze
from harness.probes import Probes
from harness.probes.endpoints import EndpointReadyProbe
from harness.probes.incluster import InClusterProbe, service_targets
from harness.probes.nodes import NODE_TAINTS, NodeReadyProbe, node_transitions
from harness.spec.manifests import APP

UNREACHABLE = "node.kubernetes.io/unreachable"


def _on_workers(workers: list[str], toleration_seconds: int):
    """Shapes the web Deployment: its pods only on ``workers``, tolerating an unreachable or
    not-ready node for ``toleration_seconds`` instead of the 300 s DefaultTolerationSeconds adds,
    so the eviction fits in the drill."""
    def shape(deployment: client.V1Deployment) -> None:
        deployment.spec.template.spec.affinity = client.V1Affinity(node_affinity=client.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=client.V1NodeSelector(node_selector_terms=[
                client.V1NodeSelectorTerm(match_expressions=[client.V1NodeSelectorRequirement(
                    key="kubernetes.io/hostname", operator="In", values=workers)])])))
        deployment.spec.template.spec.tolerations = [
            client.V1Toleration(key=key, operator="Exists", effect="NoExecute", toleration_seconds=toleration_seconds)
            for key in NODE_TAINTS]
    return shape


def _node(cluster, name: str) -> client.V1Node:
    return cluster.core.read_node(name, _request_timeout=5)


def _ready(node: client.V1Node) -> str | None:
    return next((c.status for c in node.status.conditions or [] if c.type == "Ready"), None)


def _ready_endpoints(cluster, ns: str) -> dict[str, str]:
    """pod name -> node of every ready endpoint of the Service."""
    slices = client.DiscoveryV1Api(cluster.api).list_namespaced_endpoint_slice(
        ns, label_selector=f"kubernetes.io/service-name={APP}", _request_timeout=5).items
    return {e.target_ref.name: e.node_name for s in slices for e in s.endpoints or []
            if e.conditions and e.conditions.ready and e.target_ref}


def _pods(cluster, ns: str) -> list[client.V1Pod]:
    return cluster.core.list_namespaced_pod(ns, label_selector=f"app={APP}", _request_timeout=5).items


def _window_ratio(timeline, start: float, end: float) -> tuple[float | None, int]:
    samples = [s for s in timeline.samples() if start <= s.t < end]
    return (success_ratio(samples) if samples else None), len(samples)


@pytest.mark.cluster
@pytest.mark.destructive
@pytest.mark.node_access
@pytest.mark.scenario("worker-node-loss")
def test_worker_node_loss(drill):
    cluster, ns, p = drill.cluster, drill.namespace, drill.params
    hold, tolerate = float(p["hold_seconds"]), int(p["toleration_seconds"])
    workers = drill.topology.workers
    assert len(workers) >= 2, "this drill needs two workers: one is lost, the other takes its pods"
    # The vital-sign probe pod and this drill's probe run on the last worker: it is the one kept.
    lost, kept = workers[0], workers[-1]
    replicas = int(drill.workload.get("replicas", 4))

    with drill.phase("setup"):
        drill.fresh_namespace()
        serve_web(drill, replicas, shape=_on_workers([lost, kept], tolerate))
        before = {pod.metadata.name: pod.spec.node_name for pod in _pods(cluster, ns)}
        on_lost = sorted(name for name, node in before.items() if node == lost)
        drill.observe("pods_before", before)
        assert on_lost and len(on_lost) < replicas, f"pods must run on both workers, got {before}"
        targets = service_targets(cluster, ns, APP, f"app={APP}")
        incluster = InClusterProbe(cluster, ns, "incluster-probe",
                                   {"clusterip": targets["clusterip"], "name": targets["name"]},
                                   interval_seconds=drill.interval_seconds, duration_seconds=hold + 300,
                                   node=kept).start()

    nodes = NodeReadyProbe("nodes", cluster, interval_seconds=1.0, max_seconds=hold + 600)
    endpoints = EndpointReadyProbe("ready-endpoints", cluster, ns, APP, interval_seconds=0.5, max_seconds=hold + 600)
    try:
        with Probes(nodes, endpoints):
            with drill.phase("baseline"):
                steady = wait_until(lambda: sum(s.labels.get("ready") == str(replicas)
                                                for s in endpoints.timeline.samples()) >= 10, 60)
                assert steady.ok, f"the Service never had {replicas} ready endpoints"
                baseline_end = time.time()

            fault = NodeFreeze(cluster, lost)
            with drill.inject(fault):
                t0 = fault.injected_at
                with drill.phase("node-lost"):
                    not_ready = wait_until(lambda: _ready(_node(cluster, lost)) != "True", hold, interval_seconds=0.5,
                                           description=f"{lost} not Ready")
                    after = not_ready.became_true_at - t0 if not_ready.ok else None
                    drill.measure("node_not_ready_seconds", after,
                                  detail=f"{lost} Ready={_ready(_node(cluster, lost))} {after and round(after, 1)} s "
                                         "after it was frozen", became_true_at=not_ready.became_true_at)
                    drill.measure("node_not_ready_not_before_grace_seconds", after,
                                  detail="the node is marked only once its heartbeats are older than the grace period")
                    tainted = wait_until(lambda: any(t.key == UNREACHABLE and t.effect == "NoExecute"
                                                     for t in _node(cluster, lost).spec.taints or []),
                                         60, interval_seconds=0.5, description="unreachable NoExecute taint")
                    drill.measure("unreachable_taint_seconds_after_not_ready",
                                  tainted.became_true_at - not_ready.became_true_at
                                  if tainted.ok and not_ready.ok else None,
                                  became_true_at=tainted.became_true_at)
                    dropped = wait_until(lambda: not set(_ready_endpoints(cluster, ns)) & set(on_lost), 60,
                                         interval_seconds=0.25, description="the lost node's pods dropped")
                    drill.measure("endpoints_dropped_seconds_after_not_ready",
                                  dropped.became_true_at - not_ready.became_true_at
                                  if dropped.ok and not_ready.ok else None,
                                  detail=f"{on_lost} no longer ready endpoints", became_true_at=dropped.became_true_at)

                    def evicted():
                        pods = {pod.metadata.name: pod for pod in _pods(cluster, ns)}
                        return all(name not in pods or pods[name].metadata.deletion_timestamp for name in on_lost)

                    gone = wait_until(evicted, tolerate + 120, interval_seconds=0.5, description="pods evicted")
                    evicted_after = gone.became_true_at - tainted.became_true_at if gone.ok and tainted.ok else None
                    drill.measure("eviction_seconds_after_taint", evicted_after,
                                  detail=f"tolerationSeconds {tolerate}", became_true_at=gone.became_true_at)
                    drill.measure("eviction_not_before_toleration_seconds", evicted_after,
                                  detail=f"tolerationSeconds {tolerate}")

                    def replaced():
                        ready = _ready_endpoints(cluster, ns)
                        return len([n for n, node in ready.items() if n not in before and node == kept]) >= len(on_lost)

                    back = wait_until(replaced, 120, interval_seconds=0.5, description="replacements ready")
                    drill.measure("replacements_ready_seconds_after_eviction",
                                  back.became_true_at - gone.became_true_at if back.ok and gone.ok else None,
                                  detail=f"{len(on_lost)} new ready endpoints on {kept}", became_true_at=back.became_true_at)
                    # The rest of the window: the node stays lost (a timed window, not a synchronisation).
                    hold_until(t0 + hold)
            with drill.phase("node-back"):
                back_ready = wait_until(lambda: len(_ready_endpoints(cluster, ns)) >= replicas, 120,
                                        interval_seconds=0.5)
                drill.observe("ready_endpoints_after_return", _ready_endpoints(cluster, ns))
                assert back_ready.ok, "the Service never had its replicas ready again after the node returned"
    finally:
        timelines = incluster.timelines("incluster-")
        drill.add_timelines({**timelines, nodes.name: nodes.timeline, endpoints.name: endpoints.timeline})
        incluster.delete()

    calls = timelines.get("incluster-clusterip")
    assert calls is not None, "the in-cluster probe logged nothing"
    drill.observe("node_transitions", node_transitions(nodes.timeline, start=baseline_end - 5))
    lost_until = dropped.became_true_at if dropped.ok else fault.revert_started_at
    ratio, n = _window_ratio(calls, t0, lost_until)
    drill.measure("clusterip_success_ratio_until_dropped", ratio,
                  detail=f"{n} calls by ClusterIP from {kept} between the freeze and the drop; "
                         f"{len(on_lost)} of {replicas} endpoints were on the lost node")
    ratio, n = _window_ratio(calls, lost_until + 2.0, fault.revert_started_at)
    failed = [f"{s.t - t0:.1f} s ({s.detail[:40]})" for s in calls.samples()
              if lost_until + 2.0 <= s.t < fault.revert_started_at and not s.ok]
    drill.measure("clusterip_success_ratio_after_dropped", ratio,
                  detail=f"{n} calls from 2 s after the drop (kube-proxy's update) until the revert; "
                         f"failed at {', '.join(failed) or 'none'} after the freeze "
                         f"(drop at {lost_until - t0:.1f} s)")
    drill.expectations.assert_all()
