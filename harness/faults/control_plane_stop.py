"""Fault ``control-plane-stop``: freeze every control-plane node container.

Method ``pause-node-containers``: ``docker pause`` on each control-plane node of a kind cluster
freezes (cgroup freezer) every process on it at once: kube-apiserver, etcd,
kube-controller-manager, kube-scheduler, and that node's kubelet. It is the closest a kind
cluster gets to losing its control-plane machines, and ``docker unpause`` undoes it exactly.
Workers and kind's API load balancer keep running.

Behaviour it exercises (Kubernetes documentation, "Kubernetes Components" and "Nodes"): the
kubelet keeps the pods it was given running, and restarts their containers, with no control
plane; the control plane is what reschedules, scales and issues new secrets.
"""

from __future__ import annotations

import subprocess
from typing import Any

from harness.faults import Fault, FaultError, FaultNotReverted
from harness.providers import Cluster


def _docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60)
    if check and result.returncode != 0:
        raise FaultError(f"docker {' '.join(args)}: {result.stderr.strip()}")
    return result


def container_state(name: str) -> tuple[bool, bool]:
    """(running, paused) of a container. Raises FaultError when it does not exist."""
    out = _docker("inspect", "--format", "{{.State.Running}} {{.State.Paused}}", name).stdout.split()
    return out[0] == "true", out[1] == "true"


class ControlPlaneStop(Fault):
    """Pause the control-plane node containers ``nodes`` (default: all of them)."""

    kind = "control-plane-stop"
    method = "pause-node-containers"
    needs_node_access = True

    def __init__(self, cluster: Cluster, nodes: list[str] | None = None) -> None:
        super().__init__(cluster)
        self.nodes = list(nodes or cluster.nodes_by_role.get("control-plane", []))
        if not self.nodes:
            raise FaultError(f"cluster {cluster.name} has no control-plane node containers")

    def target(self) -> dict[str, Any]:
        return {"method": self.method, "nodes": self.nodes}

    def inject(self) -> None:
        for node in self.nodes:
            _docker("pause", node)

    def revert(self) -> None:
        errors = []
        for node in self.nodes:  # every node gets its revert, whatever happened on the others
            try:
                running, paused = container_state(node)
                if paused:
                    _docker("unpause", node)
                elif not running:
                    _docker("start", node)
            except FaultError as exc:
                errors.append(str(exc))
        if errors:
            raise FaultError("; ".join(errors))

    def verify_reverted(self) -> None:
        for node in self.nodes:
            running, paused = container_state(node)
            if not running or paused:
                raise FaultNotReverted(f"node container {node}: running={running} paused={paused}")
        # Each node's own API server must be ready again, not merely unfrozen.
        from harness.expectations import wait_until

        for node in self.nodes:
            check = ["sh", "-c", "curl -sk --max-time 2 https://127.0.0.1:6443/readyz"]
            ready = wait_until(lambda n=node: self.cluster.node_exec(n, check, check=False).stdout.strip() == "ok",
                               120, interval_seconds=1.0)
            if not ready.ok:
                raise FaultNotReverted(f"{node}: kube-apiserver /readyz not ok 120 s after the unpause")

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "ControlPlaneStop":
        return cls(cluster, nodes=target["nodes"])
