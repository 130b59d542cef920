"""A team's plug-ins for kdrill, written against kdrill's plug-in interfaces only."""

from harness.core.timeline import Sample
from harness.faults import Fault, Param


class QueueFreeze(Fault):
    """Freezes a queue's consumers (here: records that it would)."""

    kind = "queue-freeze"
    needs_node_access = False
    params = {"queue": Param("name", "the queue whose consumers stop")}

    def __init__(self, cluster, queue):
        super().__init__(cluster)
        self.queue = queue

    @classmethod
    def for_scenario(cls, cluster, namespace, params):
        return cls(cluster, params["queue"])

    def target(self):
        return {"queue": self.queue}

    def inject(self):
        pass

    def revert(self):
        pass

    def verify_reverted(self):
        pass

    @classmethod
    def from_target(cls, cluster, target):
        return cls(cluster, target["queue"])


class QueueDepth:
    """A probe kind reading a queue's depth."""

    kind = "queue-depth"
    in_probe_pod = False
    required = ("queue",)
    fields = {"queue": {"type": "string", "pattern": "^[a-z]+$", "x-expected": "a queue name"}}

    @classmethod
    def for_scenario(cls, spec, context):
        raise NotImplementedError("never started in this test")


def max_queue_depth(samples: list[Sample], start: float, end: float) -> float | None:
    depths = [float(s.detail) for s in samples if start <= s.t < end and s.ok]
    return max(depths) if depths else None
