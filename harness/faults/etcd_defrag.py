"""Fault ``etcd-defrag``: defragment one etcd member while the cluster is in use.

Defragmentation rebuilds the member's backend database file; while it runs, that member serves
no reads or writes. The fault runs ``etcdctl defrag`` against the member's own endpoint from its
etcd static pod container (``crictl exec`` on its control-plane node), so exactly one member is
defragmented. Nothing is left to undo once it returns, and a defragmentation interrupted from
outside still completes inside etcd; the revert and its verification wait until the member
answers a quorum read again (``kdrill recover`` does the same after a crash).

Source: etcd "Maintenance", Defragmentation (https://etcd.io/docs/v3.6/op-guide/maintenance/#defragmentation).
"""

from __future__ import annotations

from typing import Any

from harness.components.etcd import defragment, wait_member_healthy
from harness.faults import Fault, FaultError, FaultNotReverted
from harness.kube.providers import Cluster
from harness.spec.params import Param

# A deadline for the command, not an expectation: defragmenting the drill's fill (tens of MB) on
# a loaded 2-core machine; etcdctl's own --command-timeout is set to it.
DEFRAG_DEADLINE_SECONDS = 120
# A deadline for the verification: a member that finished its defragmentation answers at once.
HEALTHY_DEADLINE_SECONDS = 60


class EtcdDefrag(Fault):
    """Defragment the etcd member on control-plane node ``node``."""

    kind = "etcd-defrag"
    needs_node_access = True
    node_access_level = "exec"
    node_capability = "runs etcdctl in the etcd static pod's container on a control-plane node (crictl exec)"
    params = {
        "target_role": Param("choice", "which member: a follower (etcd's advice: one member at a time, "
                             "followers first) or the leader", choices=("follower", "leader")),
        "fill_megabytes": Param("integer", "data written (ConfigMaps of 900 KiB) before, so the member has "
                                "a database worth rebuilding; bounded", minimum=0, maximum=256),
        "baseline_seconds": Param("seconds", "probes before the defragmentation", minimum=1, maximum=120),
        "after_seconds": Param("seconds", "probes after it", minimum=1, maximum=120),
    }

    def __init__(self, cluster: Cluster, node: str) -> None:
        super().__init__(cluster)
        self.node = node
        self.wall_seconds: float | None = None  # etcdctl defrag, start to return (includes the exec)
        self.took_seconds: float | None = None  # as etcdctl reports it
        self.output = ""

    def target(self) -> dict[str, Any]:
        return {"nodes": [self.node]}

    def evidence(self) -> dict[str, Any]:
        return {"defrag_wall_seconds": self.wall_seconds, "defrag_took_seconds": self.took_seconds,
                "etcdctl": self.output[-300:]}

    def inject(self) -> None:
        try:
            done = defragment(self.cluster, self.node, DEFRAG_DEADLINE_SECONDS)
        except RuntimeError as exc:
            raise FaultError(str(exc)) from exc
        self.wall_seconds, self.took_seconds, self.output = done.wall_seconds, done.took_seconds, done.output

    def revert(self) -> None:
        """Nothing to undo: wait until the member answers (see :meth:`verify_reverted`)."""

    def verify_reverted(self) -> None:

        if not wait_member_healthy(self.cluster, self.node, HEALTHY_DEADLINE_SECONDS):
            raise FaultNotReverted(f"etcd member on {self.node} does not answer a quorum read "
                                   f"{HEALTHY_DEADLINE_SECONDS} s after its defragmentation")

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "EtcdDefrag":
        return cls(cluster, target["nodes"][0])
