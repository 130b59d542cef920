"""Fault ``control-plane-stop``: stop the control plane of a kind cluster.

Two methods, two different failures:

``stop-components`` (the control plane stops, its machines do not): on every control-plane node the
kubelet is stopped and the kube-apiserver, etcd, kube-controller-manager and kube-scheduler
containers are killed through the container runtime (see :mod:`harness.components.static_pods` for
why the kubelet has to stand aside). Everything else on those nodes keeps running: CoreDNS,
kube-proxy, the pod network. This is what a managed platform's control-plane outage looks like from
the workers. The revert starts the kubelets, which restart the exited static-pod containers.

``pause-node-containers`` (control-plane *node* loss): ``docker pause`` freezes every process
on each control-plane node container at once (cgroup freezer), including CoreDNS and any other
pod placed there; ``docker unpause`` undoes it exactly. Workers and kind's API load balancer
keep running.

Behaviour it exercises (Kubernetes documentation, "Kubernetes Components" and "Nodes"): the
kubelet keeps the pods it was given running, and restarts their containers, with no control
plane; the control plane is what reschedules, scales and replaces.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

from harness import proc
from harness.components import static_pods
from harness.faults import Fault, FaultError, FaultNotReverted
from harness.params import Param
from harness.providers import Cluster

METHODS = ("stop-components", "pause-node-containers")

# A deadline for the revert's verification, not an expectation (the scenario bounds the API's
# recovery): well above any restore measured on this 2-core machine (3 to 15 s).
RESTORE_DEADLINE_SECONDS = 300

JOURNAL_PATTERN = "mirror pod|[Mm]irror|kube-apiserver|etcd"


def _docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        return proc.run(["docker", *args], timeout_seconds=60, check=check)
    except proc.CommandFailed as exc:
        raise FaultError(str(exc)) from None


def container_state(name: str) -> tuple[bool, bool]:
    """(running, paused) of a container. Raises FaultError when it does not exist."""
    out = _docker("inspect", "--format", "{{.State.Running}} {{.State.Paused}}", name).stdout.split()
    return out[0] == "true", out[1] == "true"


class ControlPlaneStop(Fault):
    """Stop the control plane on ``nodes`` (default: every control-plane node container) by
    ``method``, one of :data:`METHODS`. Raises FaultError for an unknown method or no nodes."""

    kind = "control-plane-stop"
    needs_node_access = True
    node_access_level = "kubelet"  # pause-node-containers needs "container" too (checked at inject)
    node_capability = ("stops the kubelet and kills the control-plane static pods' containers through the container "
                       "runtime on every control-plane node, or freezes those node containers (docker pause)")
    params = {
        "method": Param("choice", "how the control plane stops", choices=METHODS),
        "hold_seconds": Param("seconds", "how long it stays stopped", minimum=10, maximum=600),
        "recovery_seconds": Param("seconds", "how long the probes go on after the revert", minimum=10, maximum=600),
    }

    def __init__(self, cluster: Cluster, nodes: list[str] | None = None, method: str = "stop-components") -> None:
        super().__init__(cluster)
        if method not in METHODS:
            raise FaultError(f"control-plane-stop method must be one of {', '.join(METHODS)}, got {method!r}")
        self.method = method
        self.nodes = list(nodes or cluster.nodes_by_role.get("control-plane", []))
        if not self.nodes:
            raise FaultError(f"cluster {cluster.name} has no control-plane node containers")
        self.restore_seconds: dict[str, float | None] = {}
        self.restore_journal: dict[str, list[str]] = {}

    def target(self) -> dict[str, Any]:
        return {"method": self.method, "nodes": self.nodes}

    def restarts_by_design(self) -> list[str]:
        if self.method != "stop-components":
            return []
        return [f"{component}-{node}" for node in self.nodes for component in static_pods.CONTROL_PLANE_COMPONENTS]

    def evidence(self) -> dict[str, Any]:
        evidence: dict[str, Any] = {"restore_seconds": self.restore_seconds}
        if self.method == "stop-components":
            evidence["restore_journal"] = self.restore_journal
            evidence["side_effect"] = "the control-plane nodes' kubelets are stopped for the window"
        return evidence

    def inject(self) -> None:
        if self.method == "pause-node-containers":
            self.cluster.require_node_access("docker pause of the control-plane nodes", "container")
        for node in self.nodes:
            if self.method == "pause-node-containers":
                _docker("pause", node)
            else:
                static_pods.stop_kubelet_and_kill(self.cluster, node, static_pods.CONTROL_PLANE_COMPONENTS)

    def revert(self) -> None:
        errors = []
        for node in self.nodes:  # every node gets its revert, whatever happened on the others
            try:
                running, paused = container_state(node)
                if paused:
                    _docker("unpause", node)
                elif not running:
                    _docker("start", node)
                # Idempotent, and right for both methods: a node that was paused has its kubelet.
                static_pods.start_kubelet(self.cluster, node)
            except Exception as exc:
                errors.append(f"{node}: {exc}")
        if errors:
            raise FaultError("; ".join(errors))

    def verify_reverted(self) -> None:
        from harness.expectations import wait_until

        since = self.reverted_at or time.time()
        problems = []
        for node in self.nodes:
            running, paused = container_state(node)
            if not running or paused:
                problems.append(f"node container {node}: running={running} paused={paused}")
                continue
            # Each node's own API server must be ready again, not merely started.
            check = ["sh", "-c", "curl -sk --max-time 2 https://127.0.0.1:6443/readyz"]
            left = max(1.0, since + RESTORE_DEADLINE_SECONDS - time.time())
            ready = wait_until(lambda n=node: self.cluster.node_exec(n, check, check=False).stdout.strip() == "ok",
                               left, interval_seconds=1.0)
            self.restore_seconds[node] = ready.became_true_at - since if ready.ok else None
            if self.method == "stop-components":
                self.restore_journal[node] = static_pods.kubelet_journal(self.cluster, node, since - 1, JOURNAL_PATTERN)
            if not ready.ok:
                problems.append(f"{node}: kube-apiserver /readyz not ok {RESTORE_DEADLINE_SECONDS} s after the revert")
        if problems:
            raise FaultNotReverted("; ".join(problems))

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "ControlPlaneStop":
        # Entries written before there were two methods are pause-node-containers.
        return cls(cluster, nodes=target["nodes"], method=target.get("method", "pause-node-containers"))
