"""Fault ``etcd-member``: stop the etcd member on chosen control-plane nodes.

Method ``stop-kubelet-kill-container``: the node's kubelet is stopped, then the member's
container is killed through the container runtime (``crictl stop --timeout 0``: a failed member,
not a graceful stop, which would hand leadership over and no election would be seen). With the
kubelet stopped nothing starts it again; the static pod manifest, the pod and its mirror pod stay
as they are. The revert stops the node's kube-apiserver (it serves nothing without its member) and starts the
kubelet, which restarts the exited containers of the same pods, so the member rejoins as itself
with its own data directory. Why not move the manifest out of the static pod directory, or start
the kubelet with that kube-apiserver still hanging: see :mod:`harness.components.static_pods`
(the restore then waits minutes on the node's own API server, which waits on this member).

Targets are chosen by role (``leader`` or ``follower``) as etcd itself reports it (see
:mod:`harness.components.etcd`). The revert's verification waits for the member to serve a quorum
read again, and records per node how long that took (``restore_seconds``) and what the kubelet
logged about etcd and mirror pods meanwhile (``restore_journal``), for the evidence.

Source: Kubernetes "Operating etcd clusters for Kubernetes"
(https://kubernetes.io/docs/tasks/administer-cluster/configure-upgrade-etcd/) and "Create static
Pods" (https://kubernetes.io/docs/tasks/configure-pod-container/static-pod/).
"""

from __future__ import annotations

import time
from typing import Any

from harness.components import static_pods
from harness.faults import Fault, FaultError, FaultNotReverted
from harness.params import Param
from harness.providers import Cluster

# Left by the method used before ``stop-kubelet-kill-container``; a ledger entry from that
# time is still reverted by moving the parked manifest back.
MANIFEST = "/etc/kubernetes/manifests/etcd.yaml"
PARKED = "/etc/kubernetes/kdrill-parked/etcd.yaml"

# A deadline for the revert's verification, not an expectation: how long to wait for a restored
# member before declaring the revert failed (and keeping the ledger entry). The drill's bound on
# the restore time is in the scenario; this only has to be well above any real restore on a
# loaded 2-core machine (168 s with the parked manifest, 123 s starting the kubelet beside a
# hanging kube-apiserver, 3 to 7 s with this method; see harness/components/static_pods.py).
RESTORE_DEADLINE_SECONDS = 300

JOURNAL_PATTERN = "etcd|mirror pod|[Mm]irror"


class EtcdMember(Fault):
    """Stop the etcd members on ``nodes`` (control-plane node container names)."""

    kind = "etcd-member"
    method = "stop-kubelet-kill-container"
    needs_node_access = True
    node_access_level = "kubelet"
    node_capability = ("stops kubelets and kills etcd members' containers through the container runtime on "
                       "control-plane nodes")
    params = {
        "one_down_hold_seconds": Param("seconds", "how long one member stays stopped", minimum=11, maximum=600),
        "quorum_lost_hold_seconds": Param("seconds", "how long quorum stays lost", minimum=11, maximum=600),
        "settle_seconds": Param("seconds", "failures this soon after a stop are the load balancer's and the "
                                "election's, reported apart (must be below both holds)", minimum=0, maximum=60),
    }

    def __init__(self, cluster: Cluster, nodes: list[str]) -> None:
        super().__init__(cluster)
        if not nodes:
            raise FaultError("etcd-member needs at least one control-plane node")
        self.nodes = list(nodes)
        self.kubelet_started_at: dict[str, float] = {}
        self.apiserver_restarted: list[str] = []
        self.restore_seconds: dict[str, float | None] = {}
        self.restore_journal: dict[str, list[str]] = {}

    def target(self) -> dict[str, Any]:
        return {"method": self.method, "nodes": self.nodes}

    def restarts_by_design(self) -> list[str]:
        return [f"etcd-{node}" for node in self.nodes] + [f"kube-apiserver-{node}" for node in self.apiserver_restarted]

    def evidence(self) -> dict[str, Any]:
        return {"restore_seconds": self.restore_seconds, "restore_journal": self.restore_journal,
                "kube_apiserver_restarted_at_restore": self.apiserver_restarted,
                "side_effect": "the node's kubelet is stopped for the window (pods keep running; node lease not "
                               "renewed); at the restore the node's kube-apiserver, which serves nothing without "
                               "its member, is restarted with it"}

    def inject(self) -> None:
        for node in self.nodes:
            static_pods.stop_kubelet_and_kill(self.cluster, node, ["etcd"])

    def revert(self) -> None:
        errors = []
        for node in self.nodes:  # every node gets its revert, whatever happened on the others
            try:
                self.cluster.node_exec(node, ["sh", "-c",
                                              f"if [ -f {PARKED} ] && [ ! -f {MANIFEST} ]; then mv {PARKED} {MANIFEST}; fi"])
                self.kubelet_started_at[node] = time.time()
                if static_pods.restart_kubelet(self.cluster, node):
                    self.apiserver_restarted.append(node)
            except Exception as exc:
                errors.append(f"{node}: {exc}")
        if errors:
            raise FaultError("; ".join(errors))

    def verify_reverted(self) -> None:
        from harness.components.etcd import member_healthy
        from harness.expectations import wait_until

        started = time.time()
        problems = []
        for node in self.nodes:
            if not static_pods.kubelet_active(self.cluster, node):
                problems.append(f"{node}: the kubelet is not active")
                continue
            # Running is not enough: the member must serve a quorum read again.
            left = max(1.0, started + RESTORE_DEADLINE_SECONDS - time.time())
            healthy = wait_until(lambda n=node: member_healthy(self.cluster, n), left, interval_seconds=1.0)
            since = self.kubelet_started_at.get(node) or self.reverted_at or started
            self.restore_seconds[node] = healthy.became_true_at - since if healthy.ok else None
            # The kubelet's own view of the restore, for the evidence (and for the error below).
            self.restore_journal[node] = static_pods.kubelet_journal(self.cluster, node, since - 1, JOURNAL_PATTERN)
            if not healthy.ok:
                problems.append(f"{node}: the etcd member does not serve a quorum read {RESTORE_DEADLINE_SECONDS} s "
                                f"after the kubelet was started again (last error: {healthy.last_error}); kubelet: "
                                + " | ".join(self.restore_journal[node][-3:]))
        if problems:
            raise FaultNotReverted("; ".join(problems))

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "EtcdMember":
        return cls(cluster, nodes=target["nodes"])
