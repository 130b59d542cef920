"""Fault ``node-freeze``: a node is lost: its node container is frozen whole (``docker pause``).

Everything on the node stops at once, the kubelet (no more heartbeats or Lease renewals), the
container runtime and every pod, as when a machine hangs or drops off the network; nothing on it
is told. The revert unfreezes it (``docker unpause``) and its verification waits until the node
is Ready again through the API.

Source: "Nodes" (heartbeats, node controller; https://kubernetes.io/docs/concepts/architecture/nodes/),
"Taints and Tolerations" (taint-based evictions;
https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/).
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

from harness.core import proc
from harness.core.waiting import wait_until
from harness.faults import Fault, FaultError, FaultNotReverted
from harness.kube.providers import Cluster
from harness.kube.providers.kind import pause_container
from harness.spec.params import Param

# A deadline for the verification, not an expectation: a thawed kubelet reports Ready within a
# status update or two; well above that on a loaded 2-core machine.
READY_DEADLINE_SECONDS = 180


def _docker(*args: str) -> subprocess.CompletedProcess:
    try:
        return proc.run(["docker", *args], timeout_seconds=60)
    except proc.CommandFailed as exc:
        raise FaultError(str(exc)) from None


def paused(container: str) -> bool:
    """Whether the node container is paused. Raises FaultError when it does not exist."""
    return _docker("inspect", "--format", "{{.State.Paused}}", container).stdout.strip() == "true"


class NodeFreeze(Fault):
    """Freeze the node container ``node`` (a worker; the drill picks it)."""

    kind = "node-freeze"
    method = "docker-pause"
    needs_node_access = True
    node_access_level = "container"
    node_capability = "freezes a worker's node container whole (docker pause)"
    params = {
        "hold_seconds": Param("seconds", "how long the node stays lost (must outlast the grace period and the "
                              "pods' tolerationSeconds)", minimum=30, maximum=900),
        "toleration_seconds": Param("integer", "tolerationSeconds of the workload's unreachable/not-ready "
                                    "tolerations (the default toleration is 300 s)", minimum=0, maximum=600),
    }

    def __init__(self, cluster: Cluster, node: str) -> None:
        super().__init__(cluster)
        if node not in cluster.nodes_by_role.get("worker", []):
            raise FaultError(f"node-freeze takes a worker node container of {cluster.name}, got {node!r}")
        self.node = node
        self.ready_after_seconds: float | None = None

    def target(self) -> dict[str, Any]:
        return {"method": self.method, "node": self.node}

    def where(self) -> list[Any]:
        return [self.node]

    def evidence(self) -> dict[str, Any]:
        return {"ready_after_revert_seconds": self.ready_after_seconds}

    def inject(self) -> None:

        try:
            pause_container(self.node)
        except proc.CommandFailed as exc:
            raise FaultError(str(exc)) from None

    def revert(self) -> None:
        if paused(self.node):
            _docker("unpause", self.node)

    def verify_reverted(self) -> None:

        if paused(self.node):
            raise FaultNotReverted(f"node container {self.node} is still paused")
        since = self.reverted_at or time.time()

        def ready() -> bool:
            node = self.cluster.core.read_node(self.node, _request_timeout=5)
            return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])

        result = wait_until(ready, READY_DEADLINE_SECONDS, interval_seconds=1.0)
        if not result.ok:
            raise FaultNotReverted(f"node {self.node} is not Ready {READY_DEADLINE_SECONDS} s after it was "
                                   f"unfrozen (last error: {result.last_error})")
        self.ready_after_seconds = round(result.became_true_at - since, 3)

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "NodeFreeze":
        return cls(cluster, target["node"])
