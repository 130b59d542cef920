"""Fault ``scale-to-zero``: a Deployment (or StatefulSet) is scaled to zero replicas.

A generic fault for data-only scenarios (harness/engine/runner.py): it needs no node access, only the
API. The number of replicas before is recorded (in the ledger) before the scale; the revert
scales back to it and the verification waits until that many replicas are ready again.

Source: "Deployments" (scaling; https://kubernetes.io/docs/concepts/workloads/controllers/deployment/#scaling-a-deployment).
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from harness.core.waiting import wait_until
from harness.faults import Fault, FaultError, FaultNotReverted
from harness.kube.providers import Cluster
from harness.spec.params import Param

KINDS = ("Deployment", "StatefulSet")
# A deadline for the verification, not an expectation: pods of a small workload ready again.
READY_DEADLINE_SECONDS = 180


class ScaleToZero(Fault):
    """Scale ``namespace/name`` (a ``kind`` of :data:`KINDS`) to zero."""

    kind = "scale-to-zero"
    method = "scale-subresource"
    params = {
        "target_kind": Param("choice", "what is scaled", choices=KINDS),
        "target_name": Param("name", "its name"),
        "target_namespace": Param("name", "its namespace (default: the drill's own); e.g. kube-system to take "
                                  "a platform component away", required=False),
    }

    def __init__(self, cluster: Cluster, namespace: str, name: str, target_kind: str = "Deployment",
                 original_replicas: int | None = None) -> None:
        super().__init__(cluster)
        if target_kind not in KINDS:
            raise FaultError(f"scale-to-zero scales one of {', '.join(KINDS)}, got {target_kind!r}")
        self.namespace, self.name, self.target_kind = namespace, name, target_kind
        self.original_replicas = original_replicas
        self.ready_after_seconds: float | None = None

    @classmethod
    def for_scenario(cls, cluster: Cluster, namespace: str, params: dict[str, Any]) -> "ScaleToZero":
        return cls(cluster, params.get("target_namespace") or namespace, params["target_name"],
                   params.get("target_kind", "Deployment"))

    @classmethod
    def acts_on(cls, params: dict[str, Any]) -> list[tuple[str, str, str, str | None]]:
        """The Deployment or StatefulSet scaled (harness/faults/targets.py: check_targets)."""
        return [("target_name", params.get("target_kind", "Deployment"), params["target_name"],
                 params.get("target_namespace"))]

    def target(self) -> dict[str, Any]:
        return {"method": self.method, "namespace": self.namespace, "name": self.name,
                "target_kind": self.target_kind, "original_replicas": self.original_replicas}

    def where(self) -> list[Any]:
        return [f"{self.target_kind.lower()} {self.namespace}/{self.name}"]

    def evidence(self) -> dict[str, Any]:
        return {"original_replicas": self.original_replicas, "ready_after_revert_seconds": self.ready_after_seconds}

    def _scale(self, replicas: int | None = None):
        api = self.cluster.apps
        if self.target_kind == "Deployment":
            if replicas is None:
                return api.read_namespaced_deployment_scale(self.name, self.namespace, _request_timeout=10)
            return api.patch_namespaced_deployment_scale(self.name, self.namespace, {"spec": {"replicas": replicas}},
                                                         _request_timeout=10)
        if replicas is None:
            return api.read_namespaced_stateful_set_scale(self.name, self.namespace, _request_timeout=10)
        return api.patch_namespaced_stateful_set_scale(self.name, self.namespace, {"spec": {"replicas": replicas}},
                                                       _request_timeout=10)

    def _ready(self) -> int:
        api = self.cluster.apps
        read = api.read_namespaced_deployment if self.target_kind == "Deployment" else api.read_namespaced_stateful_set
        return read(self.name, self.namespace, _request_timeout=10).status.ready_replicas or 0

    def inject(self) -> None:
        self.original_replicas = int(self._scale().spec.replicas or 0)
        self.checkpoint()  # the replicas to restore are in the ledger before anything changes
        self._scale(0)

    def revert(self) -> None:
        if self.original_replicas is None:
            return  # never scaled
        try:
            self._scale(self.original_replicas)
        except ApiException as exc:
            if exc.status != 404:  # gone with its namespace: nothing left to restore
                raise

    def verify_reverted(self) -> None:

        if self.original_replicas is None:
            return
        since = self.reverted_at or time.time()

        def restored() -> bool:
            try:
                return int(self._scale().spec.replicas or 0) == self.original_replicas and \
                    self._ready() >= self.original_replicas
            except ApiException as exc:
                if exc.status == 404:
                    return True  # the namespace went (kdrill recover deletes it after this)
                raise

        done = wait_until(restored, READY_DEADLINE_SECONDS, interval_seconds=0.5)
        if not done.ok:
            raise FaultNotReverted(f"{self.target_kind} {self.namespace}/{self.name} is not back to "
                                   f"{self.original_replicas} ready replicas (last error: {done.last_error})")
        self.ready_after_seconds = round(done.became_true_at - since, 3)

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "ScaleToZero":
        return cls(cluster, target["namespace"], target["name"], target.get("target_kind", "Deployment"),
                   target.get("original_replicas"))
