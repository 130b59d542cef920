"""The runner's phases, each handed its collaborators (harness/engine/runner.py): the fault is
reverted on every way out of its window, an abort is in the record before the revert, and the
probe pod and the runner's stack go even when deleting the pod fails."""

from __future__ import annotations

import contextlib
from contextlib import ExitStack

import pytest

from harness.engine import runner


class Fault:
    injected_at = revert_started_at = reverted_at = None


class Drill:
    """Records what the runner does through it, in order."""
    cluster, namespace, params = object(), "kdrill-x", {}

    def __init__(self) -> None:
        self.done: list = []

    @contextlib.contextmanager
    def phase(self, name, seconds=None):
        self.done.append(("phase", name))
        yield

    @contextlib.contextmanager
    def inject(self, fault):
        self.done.append("inject")
        fault.injected_at = 1.0
        try:
            yield fault
        finally:
            fault.revert_started_at, fault.reverted_at = 2.0, 3.0
            self.done.append("revert")

    def observe(self, key, value):
        self.done.append(("observe", key))

    def say(self, text):
        self.done.append(("say", text.split(":")[0]))


class Actions:
    def __init__(self, drill, window) -> None:
        self.drill, self.window, self.results = drill, window, []

    def start(self, at, objects):
        self.drill.done.append(("actions start", self.window, at))
        return self

    def finish(self):
        self.drill.done.append(("actions finish", self.window))
        return []


def fault_phase(drill, guarded_hold, guard=None):
    plan = runner.Plan(spec={"probes": [], **({"abort": guard} if guard else {})},
                       windows={"baseline_seconds": 1.0, "hold_seconds": 2.0, "after_seconds": 3.0},
                       fault_type=type("FaultType", (), {"for_scenario": staticmethod(lambda *a: Fault())}),
                       replicas=2, wanted={}, dns_views=[])
    made = runner.Made(ExitStack(), {w: Actions(drill, w) for w in ("fault", "after")},
                       probe=type("Probe", (), {"timeout_seconds": 1.0})())
    return runner.hold_fault(drill, plan, made, runner.Collaborators(guarded_hold=guarded_hold))


def test_an_abort_is_recorded_before_the_fault_is_reverted():
    drill = Drill()
    abort = {"probe": "p", "reason": "failing", "failing_seconds": 3, "max_failing_seconds": 2}
    fault, aborted = fault_phase(drill, lambda *a, **k: abort, guard={"probe": "p", "max_failing_seconds": 2})
    assert drill.done == ["inject", ("phase", "fault"), ("actions start", "fault", 1.0), ("actions finish", "fault"),
                          ("observe", "abort"), ("say", "ABORT"), "revert"]
    assert aborted is abort and aborted["revert_started_at"] == fault.revert_started_at == 2.0


@pytest.mark.parametrize("stop", [KeyboardInterrupt, RuntimeError])
def test_the_fault_is_reverted_when_its_hold_is_interrupted(stop):
    drill = Drill()

    def interrupted(*args, **kwargs):
        raise stop("stopped")

    with pytest.raises(stop):
        fault_phase(drill, interrupted)
    assert drill.done[-2:] == [("actions finish", "fault"), "revert"]


def test_the_stack_closes_even_when_the_probe_pod_cannot_be_deleted():
    closed = []

    class Probe:
        def delete(self):
            raise ConnectionError("the API did not answer")

    stack = ExitStack()
    stack.callback(closed.append, "declared objects")
    with pytest.raises(ConnectionError):
        runner.clean_up(runner.Made(stack, {}, probe=Probe()))
    assert closed == ["declared objects"]
