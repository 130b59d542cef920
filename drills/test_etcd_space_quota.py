"""Drill: etcd out of space (scenarios/etcd-space-quota.yaml).

Every member is defragmented (so each database file is what is in use), then given a space quota
a few MiB above the largest (harness.faults.etcd_space_quota.py). A bounded fill of ConfigMaps then
grows the database until etcd refuses a write: the member raises the NOSPACE alarm and the whole
cluster accepts only reads and deletes. Measured: the refusal and its message, the alarm, writes,
consistent reads and the workloads while it is raised; then the documented recovery, timed:
delete what filled it, compact, defragment every member, disarm the alarm, until a write is
accepted again (still under the small quota). The revert puts the default quota back.

Why a Python drill: it runs etcdctl on the control-plane nodes (defragment, compact, alarms).
"""

from __future__ import annotations

import time

import pytest

from harness.components.etcd import db_size, defragment, etcdctl, revision, running_member_node
from harness.core.waiting import hold, wait_until
from harness.engine.measures import success_ratio
from harness.engine.workload import serve_web
from harness.faults.etcd_space_quota import FILL_LABEL, EtcdSpaceQuota, alarms
from harness.kube.health import api_accepts_write
from harness.kube.workloads import FILL_OBJECT_KIB, fill_configmaps
from harness.probes import Probes
from harness.probes.api import ApiReadProbe, ApiWriteProbe
from harness.probes.http import host_http

NOSPACE_MESSAGE = "database space exceeded"
# A deadline, not a measurement: the recovery's writes accepted again.
WRITABLE_DEADLINE_SECONDS = 120


def _defragment_all(cluster, nodes: list[str]) -> dict[str, float]:
    """Defragment every member, one at a time; returns seconds per node. Raises RuntimeError."""
    return {node: round(defragment(cluster, node).wall_seconds, 2) for node in nodes}


@pytest.mark.cluster
@pytest.mark.destructive
@pytest.mark.node_access
@pytest.mark.scenario("etcd-space-quota")
def test_etcd_space_quota(drill):
    cluster, ns, p = drill.cluster, drill.namespace, drill.params
    nodes = drill.topology.control_plane

    with drill.phase("setup"):
        drill.fresh_namespace()
        node_port = serve_web(drill, from_host=True)
        defrag = _defragment_all(cluster, nodes)
        sizes = {n: db_size(cluster, n) for n in nodes}
        largest = max(s["db_size_bytes"] or 0 for s in sizes.values())
        quota = largest + int(p["quota_headroom_megabytes"]) * 1024 * 1024
        drill.observe("before", {"defrag_seconds": defrag, "db_sizes": sizes, "quota_bytes": quota})

    probes = Probes(
        ApiWriteProbe("api-write", cluster, ns, prefix="probe", interval_seconds=drill.interval_seconds, max_seconds=900),
        ApiReadProbe("api-read-consistent", cluster, ns, interval_seconds=drill.interval_seconds, max_seconds=900),
        host_http(drill.cluster, node_port, drill.interval_seconds, max_seconds=900))
    fault = EtcdSpaceQuota(cluster, nodes, quota, ns)
    nospace = None
    probes.start()
    try:
        with drill.phase("baseline"):
            hold(float(p["baseline_seconds"]))  # the baseline window's length
        with drill.inject(fault):
            drill.observe("quota_set", fault.evidence())
            with drill.phase("fill"):
                created, refusal = fill_configmaps(cluster, ns, int(p["max_fill_megabytes"]), labels={FILL_LABEL: "true"},
                                                   stop_on_refusal=True)
                drill.observe("fill", {"objects": created, "object_kib": FILL_OBJECT_KIB, "refusal": refusal})
                drill.measure("write_refused_with_nospace", refusal is not None and NOSPACE_MESSAGE in refusal,
                              detail=f"after {created} ConfigMaps of {FILL_OBJECT_KIB} KiB: {refusal or 'never refused'}")
                via = running_member_node(cluster, nodes)
                raised = alarms(cluster, via)
                drill.measure("nospace_alarm_raised", "NOSPACE" in raised, detail=f"etcdctl alarm list: {raised}")
            with drill.phase("nospace"):
                nospace = (time.time(), None)
                hold(float(p["nospace_hold_seconds"]))  # the window the alarm is left raised
                nospace = (nospace[0], time.time())
            with drill.phase("recovery"):
                # The documented way back, under the same small quota: free the space, compact the
                # history, defragment every member, disarm the alarm.
                started = time.time()
                cluster.core.delete_collection_namespaced_config_map(ns, label_selector=FILL_LABEL, _request_timeout=60)
                compacted = etcdctl(cluster, via, ["https://127.0.0.1:2379"], "compact", str(revision(cluster, via)),
                                    "--physical", "--command-timeout=60s", timeout_seconds=90)
                steps = {"deleted": round(time.time() - started, 2), "compact_ok": compacted.returncode == 0}
                steps["defrag_seconds"] = _defragment_all(cluster, nodes)
                disarmed = etcdctl(cluster, via, ["https://127.0.0.1:2379"], "alarm", "disarm")
                steps["disarm_ok"] = disarmed.returncode == 0
                writable = wait_until(lambda: api_accepts_write(cluster, ns), WRITABLE_DEADLINE_SECONDS, interval_seconds=1.0,
                                      description="a write accepted after the recovery")
                drill.observe("recovery_steps", steps)
                drill.measure("recovery_seconds", writable.became_true_at - started if writable.ok else None,
                              detail=f"delete, compact, defragment every member, disarm, until a write was accepted "
                                     f"(still under the small quota): {steps}", became_true_at=writable.became_true_at)
                drill.measure("alarms_after_recovery", len(alarms(cluster, via)), detail="etcdctl alarm list")
                drill.observe("db_sizes_after_recovery", {n: db_size(cluster, n) for n in nodes})
        with drill.phase("after"):
            hold(float(p["after_seconds"]))
    finally:
        timelines = probes.stop()
    drill.add_timelines(timelines)

    if nospace is not None and nospace[1] is not None:
        start, end = nospace
        drill.measure("write_success_ratio_nospace", success_ratio(timelines["api-write"].samples(), start, end),
                      detail="ConfigMap creations through the load balancer while the alarm was raised")
        drill.measure("read_success_ratio_nospace",
                      success_ratio(timelines["api-read-consistent"].samples(), start, end),
                      detail="consistent LISTs (served by quorum) while the alarm was raised")
        drill.measure("workload_success_ratio_nospace", success_ratio(timelines["host-http"].samples(), start, end),
                      detail="calls from the host through the NodePort while the alarm was raised")
    else:
        for name in ("write_success_ratio_nospace", "read_success_ratio_nospace", "workload_success_ratio_nospace"):
            drill.expectations.error(name, "the drill never reached the NOSPACE window")
    restarts = [s for by_node in fault.restarted_after.values() for s in by_node.values()]
    drill.measure("member_restart_seconds_max", max(restarts) if len(restarts) == 2 * len(nodes) else None,
                  detail=f"from each manifest edit to a serving member, setting the quota and putting it back: "
                         f"{fault.evidence()['member_restarted_after_seconds']}")
    drill.measure("writes_after_revert_ratio", success_ratio(timelines["api-write"].samples(), fault.reverted_at or 0,
                                                             time.time()),
                  detail="writes through the load balancer after the default quota was back")
    drill.expectations.assert_all()
