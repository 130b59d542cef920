"""Fault ``etcd-slow-disk``: one etcd member's disk becomes slow for its writes.

Method ``blkio-write-iops``: the etcd static pod container on one control-plane node gets a limit
of ``write_iops`` write requests per second on the disk that holds its data directory
(``/var/lib/etcd``, kubeadm's ``--data-dir``), through its own block-I/O cgroup
(:mod:`harness.components.io_limits`). etcd waits on ``fdatasync`` for every batch of entries it
appends to its write-ahead log, so each append then waits its turn; nothing else on the node, and
no other member, is held. The injection refuses a disk that already has a write limit there, so
the revert only ever removes the limit; it verifies the line is gone, then waits for the member to
answer a quorum read. A member restarted meanwhile (its liveness probe) runs in a new cgroup
without the limit: the evidence says whether the limited container ran through the window.

Source: etcd "Tuning" (https://etcd.io/docs/v3.6/tuning/: slow disks on the leader and followers
delay requests and responses; "Disk"), etcd "Hardware recommendations"
(https://etcd.io/docs/v3.6/op-guide/hardware/#disks).
"""

from __future__ import annotations

from typing import Any

from harness.components import io_limits
from harness.components.etcd import wait_member_healthy
from harness.faults import Fault, FaultError, FaultNotReverted
from harness.kube.providers import Cluster, ProviderError
from harness.spec.params import Param

# kubeadm's etcd data directory, the same path on the node (a hostPath volume).
DATA_DIR = "/var/lib/etcd"
# A deadline for the verification, not an expectation: a member whose disk is fast again answers
# a quorum read within seconds; well above that on a loaded 2-core machine.
HEALTHY_DEADLINE_SECONDS = 60


class EtcdSlowDisk(Fault):
    """Limit the write IOPS of the etcd member on control-plane node ``node`` to ``write_iops``."""

    kind = "etcd-slow-disk"
    method = "blkio-write-iops"
    needs_node_access = True
    node_access_level = "exec"
    node_capability = ("limits the write IOPS of the etcd static pod's container on a control-plane node "
                       "(its block-I/O cgroup)")
    params = {
        "write_iops": Param("integer", "write requests per second the member's container may send its disk",
                            minimum=1, maximum=1000),
        "baseline_seconds": Param("seconds", "probes before the first slow member", minimum=5, maximum=120),
        "slow_seconds": Param("seconds", "how long each member stays slow (a follower, then the leader; below "
                              "the etcd liveness probe's 80 s, which would restart the member)",
                              minimum=10, maximum=60),
        "settle_seconds": Param("seconds", "probes between the two slow members and after the second",
                                minimum=5, maximum=120),
    }

    def __init__(self, cluster: Cluster, node: str, write_iops: int,
                 located: dict[str, Any] | None = None) -> None:
        super().__init__(cluster)
        if type(write_iops) is not int or not 1 <= write_iops <= 1000:
            raise FaultError(f"etcd-slow-disk: write_iops: expected an integer from 1 to 1000, "
                             f"got {write_iops!r}"[:300])
        control_plane = cluster.nodes_by_role.get("control-plane", []) if cluster is not None else []
        if node not in control_plane:
            raise FaultError(f"etcd-slow-disk: node: expected a control-plane node of the cluster "
                             f"({', '.join(control_plane) or 'none known'}), got {node!r}"[:300])
        self.node, self.write_iops = node, write_iops
        self.located = io_limits.IoLimitTarget.from_dict(located) if located is not None else None
        self.same_container_at_revert: bool | None = None

    def target(self) -> dict[str, Any]:
        return {"method": self.method, "node": self.node, "write_iops": self.write_iops,
                **({"located": self.located.to_dict()} if self.located else {})}

    def where(self) -> list[Any]:
        return [self.node]

    def evidence(self) -> dict[str, Any]:
        located = self.located
        return {"write_iops": self.write_iops, "device": located and located.device,
                "cgroup_version": located and located.version, "container": located and located.container[:13],
                "limited_container_ran_through_window": self.same_container_at_revert}

    def inject(self) -> None:
        try:
            self.located = io_limits.locate(self.cluster, self.node, "etcd", DATA_DIR)
        except (LookupError, ProviderError, ValueError) as exc:  # ValueError: e.g. the disk has a limit already
            raise FaultError(f"etcd-slow-disk: on {self.node}: {exc}") from exc
        self.checkpoint()  # the ledger knows the cgroup file and its line before the write
        io_limits.write_limit(self.cluster, self.node, self.located,
                              io_limits.limit_line(self.located, self.write_iops))

    def revert(self) -> None:
        """Remove the limit (the disk had none before: :meth:`inject` refuses one that had)."""
        if self.located is None:
            return
        self.same_container_at_revert = io_limits.write_limit(self.cluster, self.node, self.located,
                                                              io_limits.limit_line(self.located, None))

    def verify_reverted(self) -> None:
        if self.located is None:
            return
        line = io_limits.current_line(self.cluster, self.node, self.located)
        if line is not None and not io_limits.unlimited(line):
            raise FaultNotReverted(f"etcd on {self.node}: {self.located.cgroup_file} still has {line!r}")
        if not wait_member_healthy(self.cluster, self.node, HEALTHY_DEADLINE_SECONDS):
            raise FaultNotReverted(f"etcd member on {self.node} does not answer a quorum read "
                                   f"{HEALTHY_DEADLINE_SECONDS} s after its disk limit was removed")

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "EtcdSlowDisk":
        """Raises FaultError on a record whose ``located`` is not a container's write-IOPS limit."""
        try:
            located = target.get("located")
            if located is not None and not isinstance(located, dict):
                raise ValueError(f"located: expected the record of a cgroup limit, got {located!r}")
            return cls(cluster, target["node"], target["write_iops"], located)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise FaultError(f"etcd-slow-disk: ledger record {repr(target)[:200]}: {str(exc)[:300]}") from exc
