"""Fault ``leader-kill``: kill the leading instance of a leader-elected control-plane component.

kube-controller-manager and kube-scheduler run one instance per control-plane node; only the one
holding the Lease ``kube-system/<component>`` acts. The fault reads the Lease's holder
(``<node>_<uuid>``) and kills that instance's container on its node through the container
runtime (``crictl stop --timeout 0``: SIGKILL, a crash, so nothing releases the Lease). The
kubelet restarts the container by itself, as a new candidate with a new identity; the revert only
makes sure the kubelet runs, and the verification waits until the killed component runs again
on that node and the Lease is being renewed.

Source: "kube-controller-manager" and "kube-scheduler" command-line references
(--leader-elect-lease-duration 15s, --leader-elect-renew-deadline 10s,
--leader-elect-retry-period 2s), "Leases" (https://kubernetes.io/docs/concepts/architecture/leases/).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from kubernetes import client

from harness.components import static_pods
from harness.core.waiting import wait_until
from harness.faults import Fault, FaultError, FaultNotReverted
from harness.kube.providers import Cluster
from harness.spec.params import Param

COMPONENTS = ("kube-controller-manager", "kube-scheduler")
# A deadline for the verification, not an expectation: the kubelet restarts a crashed static-pod
# container at once the first time (then with a back-off); well above that on a loaded 2-core node.
RESTORE_DEADLINE_SECONDS = 180


def lease(cluster: Cluster, component: str) -> client.V1Lease:
    """The component's leader-election Lease in kube-system. Raises ApiException."""
    return client.CoordinationV1Api(cluster.api).read_namespaced_lease(component, "kube-system", _request_timeout=5)


def holder(cluster: Cluster, component: str) -> tuple[str | None, float | None]:
    """(holderIdentity, renewTime in epoch seconds) of the component's Lease. Raises ApiException."""
    spec = lease(cluster, component).spec
    renew = spec.renew_time
    if isinstance(renew, datetime):
        renew = renew.replace(tzinfo=renew.tzinfo or timezone.utc).timestamp()
    return spec.holder_identity, renew


def node_of(identity: str | None) -> str | None:
    """The node of a holder identity ``<hostname>_<uuid>`` (kind node names have no ``_``)."""
    return identity.rsplit("_", 1)[0] if identity and "_" in identity else None


class LeaderKill(Fault):
    """Kill the instance of ``component`` that holds its Lease (found at :meth:`inject` unless
    ``node`` is given)."""

    kind = "leader-kill"
    method = "crictl-kill-lease-holder"
    needs_node_access = True
    node_access_level = "exec"
    node_capability = ("kills the leading kube-controller-manager or kube-scheduler container through its node's "
                       "container runtime (crictl)")
    params = {
        "component": Param("choice", "the leader-elected component whose leader is killed", choices=COMPONENTS),
        "observe_seconds": Param("seconds", "how long the drill watches for a new leader and the delayed work",
                                 minimum=20, maximum=180),
        "scale_to": Param("integer", "replicas the drill's Deployment is scaled to right after the kill",
                          minimum=2, maximum=6),
        "recovery_seconds": Param("seconds", "how long the probes go on after the revert", minimum=5, maximum=300),
    }

    def __init__(self, cluster: Cluster, component: str, node: str | None = None, holder_identity: str | None = None):
        super().__init__(cluster)
        if component not in COMPONENTS:
            raise FaultError(f"leader-kill component must be one of {', '.join(COMPONENTS)}, got {component!r}")
        self.component, self.node, self.holder_identity = component, node, holder_identity
        self.restored_after_seconds: float | None = None

    def target(self) -> dict[str, Any]:
        return {"method": self.method, "component": self.component, "node": self.node,
                "holder_identity": self.holder_identity}

    def where(self) -> list[Any]:
        return [{"component": self.component, "node": self.node, "holder_identity": self.holder_identity}]

    def restarts_by_design(self) -> list[str]:
        return [f"{self.component}-{self.node}"] if self.node else []

    def evidence(self) -> dict[str, Any]:
        return {"killed_holder": self.holder_identity, "restored_after_seconds": self.restored_after_seconds}

    def inject(self) -> None:
        if self.node is None:
            self.holder_identity, _ = holder(self.cluster, self.component)
            self.node = node_of(self.holder_identity)
            if self.node not in self.cluster.nodes_by_role.get("control-plane", []):
                raise FaultError(f"the {self.component} Lease holder {self.holder_identity!r} is not on a "
                                 f"control-plane node container of {self.cluster.name}")
            self.checkpoint()  # the node is in the ledger before the kill
        script = (f"c=$(crictl ps -q --state Running --name '^{self.component}$'); "
                  f"[ -n \"$c\" ] || {{ echo 'not running' >&2; exit 1; }}; {static_pods.CRICTL_KILL} $c >/dev/null")
        # Longer than crictl's own 30 s runtime deadline, so a slow runtime's error is crictl's to report.
        self.cluster.node_exec(self.node, ["sh", "-c", script], timeout_seconds=60)

    def revert(self) -> None:
        # The kubelet restarts the container; it only has to be running (idempotent).
        if self.node is not None:
            static_pods.start_kubelet(self.cluster, self.node)

    def verify_reverted(self) -> None:

        if self.node is None:
            return  # nothing was killed
        started = self.reverted_at or time.time()

        def back() -> bool:
            if not static_pods.running(self.cluster, self.node, self.component):
                return False
            identity, renewed = holder(self.cluster, self.component)
            lease_seconds = lease(self.cluster, self.component).spec.lease_duration_seconds or 15
            return bool(identity) and renewed is not None and time.time() - renewed < lease_seconds

        ok = wait_until(back, RESTORE_DEADLINE_SECONDS, interval_seconds=1.0)
        if not ok.ok:
            raise FaultNotReverted(f"{self.component} does not run again on {self.node}, or its Lease is not "
                                   f"renewed, {RESTORE_DEADLINE_SECONDS} s after the revert (last error: {ok.last_error})")
        self.restored_after_seconds = round(ok.became_true_at - (self.injected_at or started), 3)

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "LeaderKill":
        return cls(cluster, target["component"], target.get("node"), target.get("holder_identity"))
