"""Ledger kind ``drill-namespace``: not a failure, but what a drill creates.

A drill's namespace (its workloads, its Service on a fixed NodePort, its probe pods) is written to
the ledger before it is created and removed from the ledger only once the namespace is gone. After
a crash or ``kill -9``, ``kdrill recover`` deletes it like it reverts a fault, so the next drill
does not meet ``provided port is already allocated``.
"""

from __future__ import annotations

from typing import Any

from harness.faults import Fault, FaultNotReverted
from harness.providers import Cluster

# A deadline for the deletion, not a measurement: namespace finalisation on a loaded 2-core machine.
DELETE_DEADLINE_SECONDS = 240


class DrillNamespace(Fault):
    """The drill namespace ``namespace``: :meth:`inject` deletes what an earlier run left and
    creates it afresh; :meth:`revert` deletes it."""

    kind = "drill-namespace"

    def __init__(self, cluster: Cluster, namespace: str, labels: dict[str, str] | None = None) -> None:
        super().__init__(cluster)
        self.namespace, self.labels = namespace, dict(labels or {})

    def target(self) -> dict[str, Any]:
        return {"namespace": self.namespace}

    def inject(self) -> None:
        from harness.workloads import delete_namespace, ensure_namespace

        delete_namespace(self.cluster, self.namespace, wait_seconds=DELETE_DEADLINE_SECONDS)
        ensure_namespace(self.cluster, self.namespace, self.labels)

    def revert(self) -> None:
        from harness.expectations import wait_until
        from harness.workloads import delete_namespace

        def deleted() -> bool:
            delete_namespace(self.cluster, self.namespace, wait_seconds=DELETE_DEADLINE_SECONDS)
            return True

        # Right after another revert (recover undoes a control-plane fault first) the API can
        # still be closing connections behind the load balancer: an error is "not yet", retried.
        wait_until(deleted, DELETE_DEADLINE_SECONDS, interval_seconds=2.0)

    def verify_reverted(self) -> None:
        from kubernetes.client.exceptions import ApiException

        from harness.expectations import wait_until

        def gone() -> bool:
            try:
                self.cluster.core.read_namespace(self.namespace, _request_timeout=10)
            except ApiException as exc:
                if exc.status == 404:
                    return True
                raise
            return False

        if not wait_until(gone, 60, interval_seconds=2.0).ok:
            raise FaultNotReverted(f"namespace {self.namespace} still exists (or the API does not answer) "
                                   f"{DELETE_DEADLINE_SECONDS} s after its deletion")

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "DrillNamespace":
        return cls(cluster, target["namespace"])
