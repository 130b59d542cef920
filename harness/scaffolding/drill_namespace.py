"""Ledger kind ``drill-namespace``: not a failure, but what a drill creates.

A drill's namespace (its workloads, its Service on a fixed NodePort, its probe pods) is written to
the ledger before it is created and removed from the ledger only once the namespace is gone. After
a crash or ``kill -9``, ``kdrill recover`` deletes it like it reverts a fault, so the next drill
does not meet ``provided port is already allocated``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.core.waiting import wait_until
from harness.faults import Fault, FaultNotReverted
from harness.kube.providers import Cluster
from harness.kube.workloads import delete_namespace, ensure_namespace

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

        delete_namespace(self.cluster, self.namespace, wait_seconds=DELETE_DEADLINE_SECONDS)
        ensure_namespace(self.cluster, self.namespace, self.labels)

    def start_deletion(self) -> str | None:
        """Delete the namespace's Services (they hold the fixed NodePorts the next drill asks for),
        then ask for the namespace's deletion without waiting for its finalisation (several
        seconds even when empty). Returns the namespace's UID, for :meth:`gone`; None when it is
        gone already. Raises ApiException."""
        from kubernetes.client.exceptions import ApiException

        try:
            uid = self.cluster.core.read_namespace(self.namespace, _request_timeout=10).metadata.uid
            for svc in self.cluster.core.list_namespaced_service(self.namespace, _request_timeout=10).items:
                try:
                    self.cluster.core.delete_namespaced_service(svc.metadata.name, self.namespace,
                                                                _request_timeout=10)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
            self.cluster.core.delete_namespace(self.namespace, grace_period_seconds=0, _request_timeout=10)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return uid

    def gone(self, uid: str | None) -> bool:
        """Whether the namespace whose deletion :meth:`start_deletion` started (``uid``) is gone:
        no namespace of that name, or one of that name made since (another UID). Raises
        ApiException."""
        from kubernetes.client.exceptions import ApiException

        if uid is None:
            return True
        try:
            return self.cluster.core.read_namespace(self.namespace, _request_timeout=10).metadata.uid != uid
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise

    def revert(self) -> None:

        def deleted() -> bool:
            delete_namespace(self.cluster, self.namespace, wait_seconds=DELETE_DEADLINE_SECONDS)
            return True

        # Right after another revert (recover undoes a control-plane fault first) the API can
        # still be closing connections behind the load balancer: an error is "not yet", retried.
        wait_until(deleted, DELETE_DEADLINE_SECONDS, interval_seconds=2.0)

    def verify_reverted(self) -> None:
        from kubernetes.client.exceptions import ApiException

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


@dataclass
class PendingDeletion:
    """A drill namespace being deleted, whose ledger entry ``entry_id`` stays until :func:`settle`
    sees it gone. ``started``: whether :meth:`DrillNamespace.start_deletion` went through (if not,
    :func:`settle` asks again); ``uid``: what it returned; ``started_at``: epoch seconds."""

    namespace: DrillNamespace
    entry_id: str
    started_at: float
    uid: str | None = None
    started: bool = False
    error: str | None = None

    def start(self, retry_seconds: float = 0.0) -> bool:
        """Ask for the deletion (again), retrying API errors for up to ``retry_seconds`` (right
        after a control-plane fault the API may still be settling). Returns whether it went
        through; the last error stays in ``error``."""

        def attempt() -> bool:
            try:
                self.uid, self.started, self.error = self.namespace.start_deletion(), True, None
            except Exception as exc:  # noqa: BLE001 - kept, and asked again later
                self.error = f"{type(exc).__name__}: {exc}"[:300]
            return self.started

        if not attempt() and retry_seconds > 0:
            wait_until(attempt, retry_seconds, interval_seconds=2.0,
                       description=f"deletion of namespace {self.namespace.namespace} asked for")
        return self.started


def settle(pending: list[PendingDeletion], ledger, wait_seconds: float = 0.0) -> list[PendingDeletion]:
    """Drop from ``ledger`` the entry of every namespace in ``pending`` that is gone, asking again
    for the deletions that did not go through, and waiting up to ``wait_seconds`` for the rest
    (0: look once). Returns those still there (their entries stay, for the next call or
    ``kdrill recover``). An API error counts as "still there"."""

    left = list(pending)

    def all_gone() -> bool:
        for p in list(left):
            if not p.started and not p.start():
                continue
            try:
                gone = p.namespace.gone(p.uid)
            except Exception:  # noqa: BLE001 - the API may be down (a drill's fault): not yet
                gone = False
            if gone:
                ledger.remove(p.entry_id)
                left.remove(p)
        return not left

    if not all_gone() and wait_seconds > 0:
        wait_until(all_gone, wait_seconds, interval_seconds=1.0,
                   description=f"drill namespaces deleted: {', '.join(p.namespace.namespace for p in left)}")
    return left
