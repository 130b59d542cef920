"""Ledger kind ``drill-registry``: not a failure, but what the registry drills set up.

The registry container beside the cluster, every node's ``hosts.toml`` for it and the images the
nodes pulled from it (harness/components/registry.py) are written to the ledger before they are
made and leave it only once they are gone, so ``kdrill recover`` removes them after a crash or
``kill -9`` like a drill's namespace. Recover goes newest first: a ``registry-outage`` entry (the
paused or stopped registry) is undone before this one removes the container.
"""

from __future__ import annotations

from typing import Any

from harness.components.registry import (
    REGISTRY_HOST,
    LocalRegistry,
    configure_nodes,
    hosts_dir,
    remove_registry_images,
    unconfigure_nodes,
)
from harness.faults import Fault, FaultNotReverted
from harness.kube.providers import Cluster


class DrillRegistry(Fault):
    """The registry container ``container`` and the containerd configuration on ``nodes`` that
    sends pulls for ``registry_host`` (``host:port`` in image references) to it: :meth:`inject`
    creates (or brings back) both; :meth:`revert` removes the images pulled from it, the
    configuration and the container."""

    kind = "drill-registry"
    needs_node_access = True
    node_access_level = "container"
    node_capability = ("runs a registry container beside the kind nodes and writes every node's containerd registry "
                       "configuration (hosts.toml)")

    def __init__(self, cluster: Cluster, container: str, nodes: list[str],
                 registry_host: str = REGISTRY_HOST) -> None:
        super().__init__(cluster)
        self.registry, self.nodes, self.registry_host = LocalRegistry(container), list(nodes), registry_host
        hosts_dir(registry_host)  # raises ValueError for a malformed host before anything is recorded

    def target(self) -> dict[str, Any]:
        return {"container": self.registry.name, "nodes": self.nodes, "registry_host": self.registry_host}

    def inject(self) -> None:
        self.registry.ensure(self.cluster.name)
        configure_nodes(self.cluster, self.nodes, self.registry, self.registry_host)

    def revert(self) -> None:
        # Images first, while the nodes still resolve the registry host; the container last.
        remove_registry_images(self.cluster, self.nodes, self.registry_host)
        unconfigure_nodes(self.cluster, self.nodes, self.registry_host)
        self.registry.remove()

    def verify_reverted(self) -> None:
        left = []
        if self.registry.state() is not None:
            left.append(f"container {self.registry.name} still exists")
        directory = hosts_dir(self.registry_host)
        for node in self.nodes:
            if self.cluster.node_exec(node, ["test", "-e", directory], timeout_seconds=20,
                                      check=False).returncode == 0:
                left.append(f"{node}: {directory} still exists")
        if left:
            raise FaultNotReverted("; ".join(left))

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "DrillRegistry":
        # Entries written before registry_host was recorded are for the default host.
        return cls(cluster, target["container"], target["nodes"], target.get("registry_host", REGISTRY_HOST))
