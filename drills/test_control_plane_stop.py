"""Drill: stop the whole control plane and measure static stability (scenarios/control-plane-stop.yaml)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from kubernetes import client

from harness.expectations import wait_until
from harness.faults.control_plane_stop import ControlPlaneStop
from harness.probes import Probes
from harness.probes.api import ApiReadProbe
from harness.probes.http import HttpProbe
from harness.probes.incluster import InClusterProbe
from harness.probes.pods import NodeContainerProbe, node_containers, pod_snapshot, running_container_ids
from harness.timeline import success_ratio
from harness.workloads import delete_namespace, deploy_http_server, http_server_deployment, wait_deployment_available

APP = "web"
# The container killed during the outage belongs to a Deployment of its own, outside the
# Service: the kubelet's restart is measured without taking a serving backend away from the
# HTTP probes (with no control plane, no endpoint would be removed for it).
RESTART = "restart-me"
BOTH = f"app in ({APP},{RESTART})"


def replicasets(cluster, namespace):
    return sorted(rs.metadata.uid for rs in cluster.apps.list_namespaced_replica_set(namespace).items)


def api_answers(core):
    return core.list_namespace(limit=1, _request_timeout=2) is not None


@pytest.mark.cluster
@pytest.mark.destructive
@pytest.mark.node_access
@pytest.mark.scenario("control-plane-stop")
def test_control_plane_stop(drill):
    cluster, ns = drill.cluster, drill.namespace
    hold = float(drill.params["hold_seconds"])
    replicas = int(drill.workload.get("replicas", 4))
    workers = drill.topology.workers
    assert workers, "the drill needs worker nodes: the control-plane nodes are what stops"

    with drill.phase("setup"):
        drill.fresh_namespace()
        deploy_http_server(cluster, ns, APP, replicas, node_port=int(drill.workload.get("node_port", 30080)))
        cluster.apps.create_namespaced_deployment(ns, http_server_deployment(RESTART, 1), _request_timeout=10)
        wait_deployment_available(cluster, ns, RESTART, 1, 120)
        victim_pod, victim_info = next(iter(pod_snapshot(cluster, ns, f"app={RESTART}").items()))
        victim_node = victim_info["node"]
        before = pod_snapshot(cluster, ns, BOTH)
        assert all(p["node"] in workers for p in before.values()), f"workload pods must run on workers: {before}"
        pod_ips = {p.metadata.name: p.status.pod_ip for p in cluster.core.list_namespaced_pod(ns, label_selector=f"app={APP}").items}
        rs_before = replicasets(cluster, ns)
        # The in-cluster probe calls every pod IP from a worker, bounded to the drill's length.
        incluster = InClusterProbe(cluster, ns, "pod-ip-probe", {f"pod-{n}": f"http://{ip}:8080/" for n, ip in pod_ips.items()},
                                   interval_seconds=drill.interval_seconds, duration_seconds=hold + 240,
                                   node=workers[-1]).start()

    probes = Probes(
        HttpProbe("host-http", f"http://127.0.0.1:{drill.workload.get('node_port', 30080)}/",
                  interval_seconds=drill.interval_seconds, max_seconds=hold + 600),
        ApiReadProbe("api-read", cluster, ns, interval_seconds=drill.interval_seconds, max_seconds=hold + 600),
        NodeContainerProbe("worker-containers", cluster, workers, ns, interval_seconds=1.0, max_seconds=hold + 600),
    )
    try:
        with probes:
            with drill.phase("baseline"):
                # Steady state: both probes have answered a few times before anything is broken.
                steady = wait_until(lambda: sum(s.ok for s in probes["host-http"].timeline.samples()) >= 6
                                    and sum(s.ok for s in probes["api-read"].timeline.samples()) >= 6, 60)
                assert steady.ok, "no steady state before the fault: the workload or the API does not answer"
                baseline_ids = running_container_ids(probes["worker-containers"].timeline.samples()[-1])

            fault = ControlPlaneStop(cluster)
            with drill.inject(fault):
                with drill.phase("control-plane-stopped"):
                    down = wait_until(lambda: not _api_ok_now(cluster), 30)
                    drill.observe("api_unreachable_after_seconds", (down.became_true_at or 0) - fault.injected_at
                                  if down.ok else None)
                    victim = next(cid for cid, c in node_containers(cluster, victim_node, ns).items()
                                  if c["state"] == "CONTAINER_RUNNING" and c["pod_uid"] == victim_pod)
                    killed_at = time.time()
                    cluster.node_exec(victim_node, ["crictl", "stop", "--timeout", "0", victim])
                    drill.say(f"killed container {victim[:13]} on {victim_node}")
                    restarted = wait_until(lambda: _replacement(cluster, victim_node, ns, victim_pod, victim), 60)
                    drill.measure("killed_container_restart_seconds",
                                  restarted.became_true_at - killed_at if restarted.ok else None,
                                  detail=f"container {victim[:13]} of pod {victim_pod} on {victim_node}",
                                  became_true_at=restarted.became_true_at)
                    # Hold the fault for its window: the drill's duration, not a synchronisation.
                    threading.Event().wait(max(0.0, fault.injected_at + hold - time.time()))
            reverted_at = fault.reverted_at

            with drill.phase("restore"):
                # From the API probe that ran through the revert (the revert itself waits for
                # every node's /readyz, which must not be counted twice).
                api = probes["api-read"].timeline
                back = wait_until(lambda: [s for s in api.samples(start=reverted_at) if s.ok], 180)
                back_at = back.value[0].t if back.ok else None
                drill.measure("api_recovery_seconds", back_at - reverted_at if back_at else None,
                              detail="first successful API read after the unpause", became_true_at=back_at)
                wait_deployment_available(cluster, ns, APP, replicas, 180)
    finally:
        probes.stop()
        drill.add_timelines(probes.timelines())

    window = (fault.injected_at, reverted_at)
    drill.measure("api_success_ratio_while_stopped",
                  success_ratio(probes["api-read"].timeline.samples(), window[0] + 5, window[1]),
                  detail="from 5 s after the pause (requests in flight may still complete) to the unpause")
    drill.measure("workload_http_success_ratio", success_ratio(probes["host-http"].timeline.samples(), *window))

    pod_ip_timelines = incluster.timelines(prefix="pod-ip/")
    incluster.delete()
    drill.add_timelines(pod_ip_timelines)
    ratios = {name: success_ratio(tl.samples(), *window) for name, tl in pod_ip_timelines.items()}
    measured = [r for r in ratios.values() if r is not None]
    drill.observe("pod_ip_success_ratios", ratios)
    drill.measure("pod_ip_http_success_ratio", min(measured) if len(measured) == len(ratios) else None,
                  detail=f"lowest over {len(ratios)} pods behind the Service")

    changed = set()
    for sample in probes["worker-containers"].timeline.samples(*window):
        if sample.ok:
            changed |= baseline_ids - running_container_ids(sample)
    changed.discard(victim)
    drill.measure("worker_container_changes", len(changed), detail=json.dumps(sorted(c[:13] for c in changed)))

    after = pod_snapshot(cluster, ns, BOTH)
    moved = [uid for uid, p in before.items() if uid not in after or after[uid]["node"] != p["node"]]
    moved += [uid for uid in after if uid not in before]
    drill.observe("pods_before", before)
    drill.observe("pods_after", after)
    drill.measure("pods_rescheduled_or_replaced", len(moved))
    drill.measure("new_replicasets", len(set(replicasets(cluster, ns)) - set(rs_before)))
    drill.observe("killed_pod_restart_count_after_restore", after.get(victim_pod, {}).get("restarts"))

    delete_namespace(cluster, ns)
    drill.expectations.assert_all()


def _api_ok_now(cluster) -> bool:
    """One API request, no retries: does the API server answer right now?"""
    try:
        return api_answers(_no_retry_core(cluster))
    except Exception:
        return False


_cores: dict = {}


def _no_retry_core(cluster):
    if cluster.name not in _cores:
        _cores[cluster.name] = client.CoreV1Api(cluster.new_api())
    return _cores[cluster.name]


def _replacement(cluster, node, ns, pod_uid, old_id) -> bool:
    """True once the node's runtime runs a new container for the pod whose container was killed."""
    for cid, c in node_containers(cluster, node, ns).items():
        if c["pod_uid"] == pod_uid and cid != old_id and c["state"] == "CONTAINER_RUNNING":
            return True
    return False
