"""Fault ``etcd-space-quota``: every etcd member runs with a small ``--quota-backend-bytes``.

etcd refuses writes that would grow its backend database beyond the space quota: the member
raises the cluster-wide ``NOSPACE`` alarm and the cluster accepts only reads and deletes until
space is freed (compact, defragment) and the alarm disarmed. The fault sets a small quota on
every member, one at a time, saving each original manifest first (:data:`ORIGINAL`, outside the
manifests directory, so the kubelet does not run it); quorum holds meanwhile.

Each member is restarted the way :func:`harness.components.static_pods.rerun_with_edit` says: the
node's kubelet stopped, the manifest edited, the member and the node's kube-apiserver killed, the
kubelet started, in one script that the node's systemd runs to its end (through the node agent,
whose commands go through that kubelet, nothing could be sent while it is stopped). Only editing
the manifest costs 46 to 51 s per member on kubeadm's stacked
control plane (the kubelet deletes the old mirror pod through the API server beside it, which
waits on that very member: kubernetes/kubernetes#139502), six times per drill. Either way the
node's kube-apiserver is briefly down (the load balancer sends its clients to the other two) and
its controller-manager and scheduler may restart; the drill measures and reports this cost.

The revert deletes the drill's fill (deletes are accepted under ``NOSPACE``), puts every original
manifest back (one member at a time) and disarms the alarm; the verification waits until every
member serves a quorum read, no alarm is left and the API accepts a write. ``kdrill recover``
does the same from the ledger, which holds the nodes, the quota and where the originals are.

Source: etcd "Maintenance", Space quota (https://etcd.io/docs/v3.6/op-guide/maintenance/#space-quota).
"""

from __future__ import annotations

import time
from typing import Any

from harness.components.etcd import endpoint_status, etcdctl, member_healthy
from harness.components.static_pods import apiserver_ready, kubelet_active, rerun_with_edit, start_kubelet
from harness.core.waiting import wait_until
from harness.faults import Fault, FaultError, FaultNotReverted
from harness.kube.health import api_accepts_write
from harness.kube.providers import Cluster
from harness.spec.params import Param

MANIFEST = "/etc/kubernetes/manifests/etcd.yaml"
ORIGINAL = "/etc/kubernetes/kdrill-etcd.yaml.orig"
FILL_LABEL = "kdrill.io/fill"
# Deadlines, not measurements: a restarted member serving a quorum read beside a ready
# kube-apiserver, on a loaded 2-core machine (measured times are in the drill's evidence).
MEMBER_RESTART_DEADLINE_SECONDS = 120
HEALTHY_DEADLINE_SECONDS = 180


def alarms(cluster: Cluster, node: str) -> list[str]:
    """The cluster's active alarms as etcd lists them (e.g. ``["NOSPACE"]``). Raises RuntimeError."""
    result = etcdctl(cluster, node, ["https://127.0.0.1:2379"], "alarm", "list")
    if result.returncode != 0:
        raise RuntimeError(f"etcdctl alarm list on {node}: {result.stderr.strip()[-300:]}")
    return sorted({line.split("alarm:")[-1].strip() for line in result.stdout.splitlines() if "alarm:" in line})


def answers(cluster: Cluster, node: str) -> bool:
    """Whether the member on ``node`` answers ``endpoint status`` (it does under an alarm)."""

    return endpoint_status(cluster, node, ["https://127.0.0.1:2379"])["https://127.0.0.1:2379"].healthy


class EtcdSpaceQuota(Fault):
    """Set ``--quota-backend-bytes=quota_bytes`` on the etcd member of every node in ``nodes``."""

    kind = "etcd-space-quota"
    needs_node_access = True
    # The kubelet is stopped only inside one script the node runs to its end, kubelet start
    # included (static_pods.rerun_with_edit): node commands alone do, even through the node agent.
    node_access_level = "exec"
    node_capability = ("edits the etcd static pod manifest on every control-plane node and restarts its member with the "
                       "kubelet stopped, in one script held on the node that starts the kubelet again")
    params = {
        "quota_headroom_megabytes": Param("integer", "quota: the largest member's database after a defragmentation "
                                          "plus this much", minimum=1, maximum=256),
        "max_fill_megabytes": Param("integer", "the fill stops here even without NOSPACE", minimum=1, maximum=512),
        "nospace_hold_seconds": Param("seconds", "how long the alarm is left raised", minimum=1, maximum=120),
        "baseline_seconds": Param("seconds", "probes before the fault", minimum=1, maximum=120),
        "after_seconds": Param("seconds", "probes after the revert", minimum=1, maximum=120),
    }

    def __init__(self, cluster: Cluster, nodes: list[str], quota_bytes: int, namespace: str) -> None:
        super().__init__(cluster)
        self.nodes, self.quota_bytes, self.namespace = list(nodes), int(quota_bytes), namespace
        # "inject"/"revert" -> node -> seconds from the manifest's edit to a serving member
        self.restarted_after: dict[str, dict[str, float]] = {"inject": {}, "revert": {}}

    def target(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "quota_bytes": self.quota_bytes, "namespace": self.namespace,
                "originals": ORIGINAL}

    def evidence(self) -> dict[str, Any]:
        return {"quota_bytes": self.quota_bytes,
                "member_restarted_after_seconds": {when: {n: round(s, 2) for n, s in by_node.items()}
                                                   for when, by_node in self.restarted_after.items()}}

    def restarts_by_design(self) -> list[str]:
        # The node's kube-apiserver is killed with its member (rerun_with_edit), twice per drill.
        return [f"{component}-{n}" for n in self.nodes for component in ("etcd", "kube-apiserver")]

    def quota_running(self, node: str) -> bool | None:
        """Whether the etcd process on ``node`` runs with this fault's quota (from its command
        line, as the node sees it); None while there is no etcd process or one of each (the
        kubelet restarting the member)."""
        lines = self.cluster.node_exec(node, ["ps", "-ww", "-C", "etcd", "-o", "args="], timeout_seconds=15,
                                       check=False).stdout.splitlines()
        kinds = {f"--quota-backend-bytes={self.quota_bytes}" in line.split() for line in lines if line.strip()}
        return kinds.pop() if len(kinds) == 1 else None

    def _roll(self, node: str, script: str, when: str, serving=member_healthy) -> None:
        """Edit ``node``'s etcd manifest with ``script``, restart the member from it (see the
        module doc), and wait until the member runs as the edited manifest says (with this fault's
        quota on inject, without it on revert), ``serving(cluster, node)`` holds (default: it
        serves a quorum read; under an alarm, which makes etcd report itself unhealthy,
        :func:`answers`) and the node's kube-apiserver is ready again, so no two nodes' API servers
        are down at once. Judged by the running process, not by a new container: after a crash
        mid-inject the kubelet may never have run the edited manifest the revert puts back.
        Raises FaultError."""

        want = when == "inject"
        started = time.time()
        rerun_with_edit(self.cluster, node, script, "etcd")

        def restarted() -> bool:
            return (self.quota_running(node) is want and serving(self.cluster, node)
                    and apiserver_ready(self.cluster, node))

        if not wait_until(restarted, MEMBER_RESTART_DEADLINE_SECONDS, interval_seconds=1.0,
                          description=f"etcd member on {node} running from its edited manifest").ok:
            raise FaultError(f"the etcd member on {node} (or its kube-apiserver) did not run healthy from its "
                             f"edited manifest within {MEMBER_RESTART_DEADLINE_SECONDS} s of the edit")
        self.restarted_after[when][node] = time.time() - started

    def inject(self) -> None:
        flag = f"--quota-backend-bytes={self.quota_bytes}"
        for node in self.nodes:  # one member at a time: the other two keep quorum
            self._roll(node, f"[ -f {ORIGINAL} ] || cp -p {MANIFEST} {ORIGINAL}; "
                             f"if grep -q -- '--quota-backend-bytes=' {MANIFEST}; then "
                             f"sed -i 's/--quota-backend-bytes=[0-9]*/{flag}/' {MANIFEST}; else "
                             f"sed -i 's/^    - etcd$/&\\n    - {flag}/' {MANIFEST}; fi; "
                             f"grep -q -- '{flag}' {MANIFEST}", "inject")

    def revert(self) -> None:
        errors = []
        try:  # deletes are accepted under NOSPACE; the namespace may be gone already
            self.cluster.core.delete_collection_namespaced_config_map(self.namespace, label_selector=FILL_LABEL,
                                                                      _request_timeout=30)
        except Exception as exc:  # noqa: BLE001 - the manifests go back whatever happened here
            errors.append(f"deleting the fill: {exc}")
        for node in self.nodes:
            try:
                has_original = self.cluster.node_exec(node, ["test", "-f", ORIGINAL], check=False).returncode == 0
                if has_original:  # the alarm may still be raised: a restarted member that answers will do
                    self._roll(node, f"cp -p {ORIGINAL} {MANIFEST}", "revert", serving=answers)
                    # Only now: a crash before this leaves the original for kdrill recover.
                    self.cluster.node_exec(node, ["rm", "-f", ORIGINAL])
                elif not kubelet_active(self.cluster, node):  # a crash between stop and start
                    start_kubelet(self.cluster, node)
            except Exception as exc:  # noqa: BLE001 - every node gets its revert
                errors.append(f"{node}: {exc}")
        # With the default quota back, disarming makes the cluster writable (the alarm is
        # cluster-wide: one disarm through any member).
        if not any(etcdctl(self.cluster, node, ["https://127.0.0.1:2379"], "alarm", "disarm").returncode == 0
                   for node in self.nodes):
            errors.append("etcdctl alarm disarm failed on every member")
        if errors:
            raise FaultError("; ".join(errors))

    def verify_reverted(self) -> None:

        problems = []
        for node in self.nodes:
            left = self.cluster.node_exec(node, ["sh", "-c", f"ls {ORIGINAL} 2>/dev/null; grep -c -- "
                                                 f"'--quota-backend-bytes={self.quota_bytes}' {MANIFEST}"],
                                          check=False).stdout.split()
            if left and left != ["0"]:
                problems.append(f"{node}: the small quota or its saved original is still there ({left})")
            if not kubelet_active(self.cluster, node):
                problems.append(f"{node}: the kubelet is not running")
            if not wait_until(lambda n=node: member_healthy(self.cluster, n), HEALTHY_DEADLINE_SECONDS,
                              interval_seconds=1.0).ok:
                problems.append(f"{node}: the etcd member does not serve a quorum read")
        if not wait_until(lambda: alarms(self.cluster, self.nodes[0]) == [], 30, interval_seconds=1.0).ok:
            problems.append("an etcd alarm is still raised")

        if not wait_until(lambda: api_accepts_write(self.cluster, "default", keep=False), 60, interval_seconds=1.0).ok:
            problems.append("the API does not accept a write")
        if problems:
            raise FaultNotReverted("; ".join(problems))

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "EtcdSpaceQuota":
        return cls(cluster, target["nodes"], target["quota_bytes"], target["namespace"])
