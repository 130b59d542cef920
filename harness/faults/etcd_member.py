"""Fault ``etcd-member``: stop the etcd member on chosen control-plane nodes.

Method ``park-static-pod-manifest``: etcd runs as a kubelet static pod, which the API cannot
stop (its mirror pod is read-only). Moving ``/etc/kubernetes/manifests/etcd.yaml`` out of the
kubelet's static pod directory makes the kubelet stop the member's container through the
container runtime; moving it back makes the kubelet start it again with the same data directory,
so the member rejoins as itself. Targets are chosen by role (``leader`` or ``follower``) as etcd
itself reports it (see :mod:`harness.etcd`).

Source: Kubernetes "Operating etcd clusters for Kubernetes"
(https://kubernetes.io/docs/tasks/administer-cluster/configure-upgrade-etcd/) and "Create static
Pods" (https://kubernetes.io/docs/tasks/configure-pod-container/static-pod/).
"""

from __future__ import annotations

from typing import Any

from harness.faults import Fault, FaultError, FaultNotReverted
from harness.providers import Cluster

MANIFEST = "/etc/kubernetes/manifests/etcd.yaml"
PARKED = "/etc/kubernetes/kdrill-parked/etcd.yaml"


def etcd_running(cluster: Cluster, node: str) -> bool:
    out = cluster.node_exec(node, ["crictl", "ps", "--name", "^etcd$", "--state", "Running", "-q"],
                            timeout_seconds=15).stdout.split()
    return bool(out)


class EtcdMember(Fault):
    """Stop the etcd members on ``nodes`` (control-plane node container names)."""

    kind = "etcd-member"
    method = "park-static-pod-manifest"
    needs_node_access = True

    def __init__(self, cluster: Cluster, nodes: list[str], kill: bool = True) -> None:
        super().__init__(cluster)
        if not nodes:
            raise FaultError("etcd-member needs at least one control-plane node")
        self.nodes = list(nodes)
        self.kill = kill

    def target(self) -> dict[str, Any]:
        return {"method": self.method, "nodes": self.nodes, "kill": self.kill, "manifest": MANIFEST,
                "parked": PARKED}

    def inject(self) -> None:
        # One exec per node, the kill first: a failed member, not a graceful stop (a stopping
        # leader hands leadership over, and no election would be seen). Parking the manifest
        # right after keeps the kubelet from starting it again; mv within one filesystem is
        # atomic, so the kubelet sees the manifest or it does not.
        stop = "for c in $(crictl ps --name '^etcd$' -q); do crictl stop --timeout 0 $c; done; " if self.kill else ""
        for node in self.nodes:
            self.cluster.node_exec(node, ["sh", "-c", f"mkdir -p $(dirname {PARKED}); {stop}mv {MANIFEST} {PARKED}"])

    def revert(self) -> None:
        errors = []
        for node in self.nodes:  # every node gets its revert, whatever happened on the others
            try:
                self.cluster.node_exec(node, ["sh", "-c",
                                              f"if [ -f {PARKED} ] && [ ! -f {MANIFEST} ]; then mv {PARKED} {MANIFEST}; fi"])
            except Exception as exc:
                errors.append(f"{node}: {exc}")
        if errors:
            raise FaultError("; ".join(errors))

    def verify_reverted(self) -> None:
        from harness.expectations import wait_until

        for node in self.nodes:
            present = self.cluster.node_exec(node, ["test", "-f", MANIFEST], check=False).returncode == 0
            if not present:
                raise FaultNotReverted(f"{node}: {MANIFEST} is missing (parked copy: {PARKED})")
            # The kubelet restarts the static pod on its own; wait for it rather than assume it.
            started = wait_until(lambda n=node: etcd_running(self.cluster, n), 120, interval_seconds=1.0)
            if not started.ok:
                raise FaultNotReverted(f"{node}: the etcd container did not start within 120 s of the revert")
        from harness.etcd import member_healthy

        for node in self.nodes:
            # Running is not enough: the member must serve a quorum read again.
            healthy = wait_until(lambda n=node: member_healthy(self.cluster, n), 120, interval_seconds=1.0)
            if not healthy.ok:
                raise FaultNotReverted(f"{node}: the etcd member is running but not healthy 120 s after the revert")

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "EtcdMember":
        return cls(cluster, nodes=target["nodes"], kill=target.get("kill", True))
