"""Drill: etcd backup and restore after losing every member (scenarios/etcd-backup-restore.yaml).

A snapshot is taken with ``etcdctl snapshot save`` and copied off the cluster; marker ConfigMaps
are written before it and after it. Then every member's data is lost (the control plane stopped
on every control-plane node, the data moved aside), and the cluster is restored from the snapshot
as documented for kubeadm clusters (harness/faults/etcd_restore.py). Measured: the recovery time
(loss to the API accepting a write again), the recovery point (markers written before the
snapshot are back, those after it are gone: counted), the objects in the snapshot, whether the
workloads kept serving through the loss, and the cluster's health after.

Why a Python drill: it copies files between this machine and the nodes and runs etcdutl there.

Through the node agent the loss and the restore are held on the nodes as timers set beforehand
(harness/faults/etcd_restore.py): the lost phase lasts until the restore's due time, and the
recovery time counts from the loss's due time.

The snapshot holds every Secret of the cluster unencrypted (see secrets-at-rest): it lives in a
private temporary directory on this machine (mode 0700) for the drill's duration and is deleted;
evidence keeps its SHA-256, size and revision.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from pathlib import Path

import pytest
from kubernetes import client

from harness.components import node_units
from harness.components.etcd import etcd_members, etcdctl, member_healthy, running_member_node
from harness.core import proc
from harness.core.waiting import hold, hold_until, wait_until
from harness.engine.measures import success_ratio
from harness.engine.workload import serve_web
from harness.faults.etcd_restore import EtcdRestore
from harness.kube.health import api_accepts_write, wait_healthy
from harness.kube.images import Build
from harness.probes import Probes
from harness.probes.api import ApiWriteProbe
from harness.probes.http import host_http
from harness.probes.nodes import NodeReadyProbe, node_transitions

SNAPSHOT_IN_CONTAINER = "/var/lib/etcd/kdrill-snapshot.db"  # the etcd pod's data hostPath: on the node too
# Deadlines, not measurements: the API accepting a write once the kubelets run the restored
# control plane, and the whole cluster healthy after (a loaded 2-core machine).
API_BACK_DEADLINE_SECONDS = 300
HEALTHY_DEADLINE_SECONDS = 300


def _markers(cluster, ns: str, prefix: str, count: int) -> None:
    for i in range(count):
        cluster.core.create_namespaced_config_map(ns, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=f"{prefix}-{i:03d}", labels={"kdrill.io/marker": prefix}),
            data={"written_at": repr(time.time())}), _request_timeout=10)


def _restart_kubelet(cluster, node: str) -> None:
    """``systemctl restart kubelet`` on ``node`` as a unit of its own, waited for: through the node
    agent the restart cuts the very exec that asks for it. Raises RuntimeError."""
    unit = f"kdrill-kubelet-restart-{int(time.time() * 1000) % 10**8}"
    cut = node_units.run_now(cluster, node, unit, "systemctl restart kubelet", 60, stop_post="systemctl start kubelet")
    ended = wait_until(lambda: node_units.ended(cluster, node, unit), 90, interval_seconds=1.0)
    if not ended.ok or ended.value != (0,):
        raise RuntimeError(f"restarting the kubelet on {node}: {ended.value if ended.ok else 'no outcome'}"
                           + (f" (starting it: {cut})" if cut else ""))
    node_units.forget(cluster, node, [unit])


def _count(cluster, ns: str, prefix: str) -> int:
    return len(cluster.core.list_namespaced_config_map(ns, label_selector=f"kdrill.io/marker={prefix}",
                                                       _request_timeout=10).items)


@pytest.mark.cluster
@pytest.mark.destructive
@pytest.mark.node_access
@pytest.mark.scenario("etcd-backup-restore")
def test_etcd_backup_restore(drill, tmp_path_factory):
    cluster, ns, p = drill.cluster, drill.namespace, drill.params
    control_plane, markers = drill.topology.control_plane, int(p["markers"])
    etcdutl = Build().step("go-etcdutl").out / "etcdutl"
    if not etcdutl.is_file():
        raise FileNotFoundError(f"{etcdutl}: etcdutl is not built; run `kdrill images build`")
    private = Path(tempfile.mkdtemp(prefix="kdrill-etcd-snapshot-"))  # mode 0700: the snapshot holds Secrets
    snapshot = private / "snapshot.db"

    with drill.phase("setup"):
        drill.fresh_namespace()
        node_port = serve_web(drill, from_host=True)

    probes = Probes(
        host_http(drill.cluster, node_port, drill.interval_seconds, max_seconds=1200),
        ApiWriteProbe("api-write", cluster, ns, prefix="probe", interval_seconds=1.0, max_seconds=1200),
        NodeReadyProbe("nodes", cluster, interval_seconds=1.0, max_seconds=1200))
    fault = EtcdRestore(cluster, control_plane, token=f"kdrill-restore-{int(time.time())}",
                        hold_seconds=float(p["lost_hold_seconds"]), snapshot=str(snapshot), etcdutl=str(etcdutl))
    probes.start()
    try:
        with drill.phase("baseline"):
            hold(float(p["baseline_seconds"]))  # the baseline window's length
        with drill.phase("backup"):
            _markers(cluster, ns, "before", markers)
            via = running_member_node(cluster, control_plane)
            started = time.time()
            saved = etcdctl(cluster, via, ["https://127.0.0.1:2379"], "snapshot", "save", SNAPSHOT_IN_CONTAINER,
                            "--command-timeout=120s", timeout_seconds=180)
            took = time.time() - started
            if saved.returncode != 0:
                raise RuntimeError(f"etcdctl snapshot save on {via}: {saved.stderr.strip()[-300:]}")
            cluster.copy_from_node(via, SNAPSHOT_IN_CONTAINER, str(snapshot))
            cluster.node_exec(via, ["rm", "-f", SNAPSHOT_IN_CONTAINER])
            status = json.loads(proc.run([etcdutl, "snapshot", "status", snapshot, "-w", "json"],
                                         timeout_seconds=60).stdout)
            drill.observe("snapshot", {"from_node": via, "bytes": snapshot.stat().st_size,
                                       "sha256": hashlib.sha256(snapshot.read_bytes()).hexdigest(),
                                       "revision": status.get("revision"), "total_keys": status.get("totalKey")})
            drill.measure("snapshot_seconds", took, detail=f"etcdctl snapshot save on {via}: "
                                                           f"{snapshot.stat().st_size} bytes, {status.get('totalKey')} keys")
            _markers(cluster, ns, "after", markers)  # written after the snapshot: the restore cannot have them

        with drill.inject(fault):
            with drill.phase("lost"):
                if fault.held:  # the nodes lose their data and restore it at the due times set on them
                    drill.say(f"every etcd member's data to be moved aside on {', '.join(control_plane)} in "
                              f"{fault.lost_at - time.time():.1f} s; the nodes restore it "
                              f"{p['lost_hold_seconds']} s later")
                    hold_until(fault.restore_started_at)  # until it is due
                else:
                    drill.say(f"every etcd member's data moved aside on {', '.join(control_plane)}")
                    hold(float(p["lost_hold_seconds"]))  # the outage before anyone restores
            with drill.phase("restore"):
                fault.restore(str(snapshot), str(etcdutl))
                restore_started = fault.restore_started_at
                back = wait_until(lambda: api_accepts_write(cluster, ns), API_BACK_DEADLINE_SECONDS, interval_seconds=1.0,
                                  description="the API accepts a write after the restore")
                drill.measure("restore_seconds", back.became_true_at - restore_started if back.ok else None,
                              detail=f"from the start of the restore until the API accepted a write; "
                                     f"{fault.evidence()['timings_seconds']}", became_true_at=back.became_true_at)
                drill.measure("rto_seconds", back.became_true_at - fault.lost_at if back.ok else None,
                              detail=f"from the loss until the API accepted a write (the loss held "
                                     f"{p['lost_hold_seconds']} s before the restore started"
                                     + ("; held on the nodes: from the loss's due time" if fault.held else "") + ")",
                              became_true_at=back.became_true_at)
                # The documentation's advice after a restore: restart the components that may hold
                # stale data. The control plane's were started afresh; the workers' kubelets here.
                for node in drill.topology.workers:
                    _restart_kubelet(cluster, node)
                if back.ok:
                    drill.measure("markers_before_snapshot_restored", _count(cluster, ns, "before"),
                                  detail=f"of {markers} ConfigMaps written before the snapshot")
                    drill.measure("markers_after_snapshot_lost", markers - _count(cluster, ns, "after"),
                                  detail=f"of {markers} ConfigMaps written after the snapshot (the recovery point)")
        with drill.phase("after"):
            healthy = wait_healthy(cluster, HEALTHY_DEADLINE_SECONDS)
            drill.measure("cluster_healthy_after_seconds", healthy.became_true_at - fault.reverted_at if healthy.ok else None,
                          detail="every node Ready and every kube-system pod Running and Ready, from the end of the "
                                 f"revert (last error: {healthy.last_error})")
            members = etcd_members(cluster, running_member_node(cluster, control_plane))
            drill.measure("etcd_members_healthy_after", sum(member_healthy(cluster, n) for n in control_plane),
                          detail=f"members: {[m.name for m in members]}")
            hold(float(p["after_seconds"]))
    finally:
        timelines = probes.stop()
        snapshot.unlink(missing_ok=True)
        private.rmdir()
    drill.add_timelines(timelines)

    window = (fault.lost_at, back.became_true_at if back.ok else fault.reverted_at)
    drill.measure("workload_success_ratio_without_etcd",
                  success_ratio(timelines["host-http"].samples(), *window),
                  detail="calls from the host through the NodePort from the loss until the API accepted a write")
    marks = [t for t in node_transitions(timelines["nodes"], fault.lost_at) if t.get("ready") != "True"]
    drill.observe("node_not_ready_marks", marks[:20])
    drill.expectations.assert_all()
