"""The runner's abort guard (harness/engine/runner.py): when a failure run begins, and that a guarded
hold stops early only once its probe has failed without a break for longer than allowed. The
guard reverting a real fault is shown on a cluster by tests/cluster/test_abort_guard.py."""

from __future__ import annotations

import time

import pytest

from harness.core.timeline import Sample
from harness.engine import runner
from harness.spec.scenario import ScenarioError, load_scenario


def samples(*points):
    return [Sample(t=t, ok=ok) for t, ok in points]


def test_a_failure_run_begins_at_the_first_failure_after_the_last_success():
    assert runner.failing_since(samples((1, True), (2, False), (3, False)), since=0) == 2
    assert runner.failing_since(samples((1, False), (2, True), (3, False), (4, False)), since=0) == 3


def test_no_failure_run_when_the_latest_sample_succeeded_or_there_is_none():
    assert runner.failing_since(samples((1, False), (2, True)), since=0) is None
    assert runner.failing_since([], since=0) is None
    assert runner.failing_since(samples((1, False)), since=5) is None  # before the hold: not counted


def test_samples_are_taken_in_time_order():
    assert runner.failing_since(samples((3, False), (1, True), (2, False)), since=0) == 2


def guarded_hold(*args, **kwargs):
    """The runner's guarded hold, its guard reading every 0.02 s."""
    return runner.guarded_hold(*args, check_seconds=0.02, **kwargs)


def test_the_guard_stops_the_hold_once_the_probe_fails_for_longer_than_allowed():
    def always_failing(since):
        return samples(*[(t, False) for t in (since + 0.001 * i for i in range(1, 1000)) if t <= time.time()])

    started = time.time()
    aborted = guarded_hold(5.0, {"probe": "p", "max_failing_seconds": 0.2}, always_failing)
    took = time.time() - started
    assert aborted is not None and aborted["probe"] == "p" and aborted["hold_seconds_planned"] == 5.0
    assert aborted["failing_seconds"] >= 0.2 and took < 1.0


def test_failures_broken_by_a_success_do_not_trip_the_guard():
    def flapping(since):  # fails, but succeeds every 0.1 s
        now = time.time()
        return samples(*[(since + 0.05 * i, i % 2 == 0) for i in range(int((now - since) / 0.05) + 1)])

    assert guarded_hold(0.5, {"probe": "p", "max_failing_seconds": 0.2}, flapping) is None


def test_without_a_guard_the_hold_runs_its_length_and_reads_nothing():
    def never(since):
        raise AssertionError("read without a guard")

    started = time.time()
    assert guarded_hold(0.3, None, never) is None
    assert time.time() - started >= 0.3


def test_a_guard_that_cannot_read_its_probe_stops_the_fault_rather_than_hold_it_blind():
    def unreadable(since):
        raise ConnectionError("API down")

    aborted = guarded_hold(5.0, {"probe": "p", "max_failing_seconds": 0.1}, unreadable)
    assert aborted is not None and aborted["reason"].startswith("unreadable: ConnectionError")


def test_a_probe_that_stops_answering_trips_the_guard():
    # A call hung on a lookup logs nothing until it ends: silence longer than the allowance.
    def silent(since):
        return samples((since + 0.01, True))

    aborted = guarded_hold(5.0, {"probe": "p", "max_failing_seconds": 0.1}, silent,
                           quiet_allowance_seconds=0.1)
    assert aborted is not None and aborted["reason"] == "no answer" and aborted["held_seconds"] < 1.0


def test_a_short_read_failure_does_not_trip_the_guard():
    calls = []

    def once_unreadable(since):
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("blip")
        now = time.time()
        return samples(*[(since + 0.02 * i, True) for i in range(int((now - since) / 0.02) + 1)])

    assert guarded_hold(0.3, {"probe": "p", "max_failing_seconds": 0.2}, once_unreadable) is None


def test_the_guard_names_a_declared_probe(tmp_path):
    from pathlib import Path

    import yaml

    data = yaml.safe_load((Path(__file__).parents[3] / "scenarios" / "service-without-endpoints.yaml").read_text())
    data["runner"]["abort"] = {"probe": "by-nothing", "max_failing_seconds": 5}
    path = tmp_path / "service-without-endpoints.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert info.value.field == "runner.abort.probe" and "by-clusterip" in info.value.expected
    data["runner"]["abort"] = {"probe": "by-name", "max_failing_seconds": 0}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert info.value.field == "runner.abort.max_failing_seconds"
    data["runner"]["abort"] = {"probe": "by-name", "max_failing_seconds": data["runner"]["windows"]["hold_seconds"]}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert info.value.field == "runner.abort.max_failing_seconds" and "a guard that can trip" in info.value.expected
