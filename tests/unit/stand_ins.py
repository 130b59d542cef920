"""Stand-in faults for the unit tests of the ledger and recover protocols around a fault (what
the fault itself does is not what those tests are about)."""

from harness.faults import Fault


class Nothing(Fault):
    """A stand-in fault that does nothing (the recover protocol around it is what is tested)."""

    kind = "nothing"

    def target(self):
        return {}

    def inject(self):
        pass

    def revert(self):
        pass

    def verify_reverted(self):
        pass

    @classmethod
    def from_target(cls, cluster, target):
        return cls(cluster)


class OnNodes(Nothing):
    kind = "on-nodes"
    needs_node_access = True
    node_access_level = "exec"
