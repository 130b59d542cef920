"""Ledger kind ``node-agent``: not a failure, but privileged pods kdrill runs on the nodes.

The node agent (:mod:`harness.kube.providers.node_agent`) gives node access on a cluster reached only
through its kubeconfig. Its namespace is written to the ledger before the first agent pod is
created and removed from it only once the namespace is gone, so privileged pods never stay behind
a session: not on Ctrl-C, not after ``kill -9`` (``kdrill recover`` deletes the namespace).
"""

from __future__ import annotations

from typing import Any

from harness.faults import Fault, FaultNotReverted
from harness.kube.providers import Cluster
from harness.kube.providers.node_agent import NAMESPACE
from harness.kube.workloads import delete_namespace

# A deadline for the namespace's deletion, not a measurement (as for a drill's namespace).
DELETE_DEADLINE_SECONDS = 240


class NodeAgentPods(Fault):
    """The node agent's namespace: :meth:`inject` creates it (the pods come on first use),
    :meth:`revert` deletes it with every agent pod in it."""

    kind = "node-agent"

    def target(self) -> dict[str, Any]:
        return {"namespace": NAMESPACE}

    def inject(self) -> None:
        agent = getattr(self.cluster, "node_agent", None)
        if agent is not None:
            agent.ensure_namespace()

    def revert(self) -> None:

        delete_namespace(self.cluster, NAMESPACE, wait_seconds=DELETE_DEADLINE_SECONDS)
        agent = getattr(self.cluster, "node_agent", None)
        if agent is not None:
            agent.forget()

    def verify_reverted(self) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.cluster.core.read_namespace(NAMESPACE, _request_timeout=10)
        except ApiException as exc:
            if exc.status == 404:
                return
            raise
        raise FaultNotReverted(f"namespace {NAMESPACE} (node agent pods) still exists")

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "NodeAgentPods":
        return cls(cluster)
