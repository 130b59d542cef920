"""Ledger kind ``node-units``: not a failure, but work a drill set on the nodes to run later (a
container kill at a set moment, a sampler of the node's containers; see
:mod:`harness.components.node_units`).

They are written to the ledger before they are set, so a drill that dies never leaves one to fire
on a cluster it no longer watches: the revert (at the end of the drill, on Ctrl-C, or by
``kdrill recover`` after a crash) stops every timer and service that has not finished, and
removes their records from the node's ``/run``. A fault's own timers (control-plane-stop's stop
and kubelet start) are the fault's, in its own ledger entry.

No built-in drill writes this kind any more: control-plane-stop's kills and sampler on the workers
are in its own entry (``work_units``). It stays so that ``kdrill recover`` still reverts an entry
an earlier version wrote, and for a drill file of a team's own.
"""

from __future__ import annotations

from typing import Any

from harness.components import node_units
from harness.faults import Fault, FaultError, FaultNotReverted
from harness.kube.providers import Cluster


class NodeUnits(Fault):
    """Units named ``units`` (node -> unit names) that a drill sets on the nodes after
    :meth:`inject` (which sets nothing itself). Raises FaultError for an empty mapping or a name
    outside kdrill's (``kdrill-...``)."""

    kind = "node-units"
    needs_node_access = True
    node_access_level = "exec"
    node_capability = "sets timers and samplers on the nodes (systemd-run) and stops them"

    def __init__(self, cluster: Cluster, units: dict[str, list[str]]) -> None:
        super().__init__(cluster)
        if not units or not all(units.values()):
            raise FaultError(f"node-units needs at least one unit per node, got {units!r}")
        for names in units.values():
            for name in names:
                node_units.check_name(name)
        self.units = {node: sorted(set(names)) for node, names in units.items()}

    def target(self) -> dict[str, Any]:
        return {"units": self.units}

    def where(self) -> list[Any]:
        return sorted(self.units)

    def inject(self) -> None:
        """Nothing: the drill sets the units once this entry is in the ledger."""

    def revert(self) -> None:
        errors = node_units.remove_units(self.cluster, self.units)  # every node, whatever the others did
        if errors:
            raise FaultError("; ".join(errors))

    def verify_reverted(self) -> None:
        left = {node: [u for u in node_units.pending(self.cluster, node) if u in names]
                for node, names in self.units.items()}
        left = {node: names for node, names in left.items() if names}
        if left:
            raise FaultNotReverted(f"timers still set: {left}")

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "NodeUnits":
        return cls(cluster, units=target["units"])
