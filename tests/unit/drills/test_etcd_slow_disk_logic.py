"""The pure logic of drills/test_etcd_slow_disk.py: which metrics reads of a member bracket a
window, so that a counter's growth over it can be read."""

import importlib

import pytest

from harness.probes.node_http import NodeMetricsProbe

drill = importlib.import_module("drills.test_etcd_slow_disk")
COUNT = drill.FSYNC_COUNT


def member(reads):
    """A metrics probe holding ``reads``: (sent, seconds taken, value) each."""
    probe = NodeMetricsProbe("m", None, "cp1", drill.METRICS_URL, [COUNT], interval_seconds=0.5)
    for sent, took, value in reads:
        probe.timeline.add(probe.sample(sent, sent + took, f"{COUNT} {value}"))
    return probe


def test_a_counter_read_across_the_window_gives_its_growth_from_the_reads_that_bracket_it():
    probe = member([(9.5, 0.05, 10), (12.0, 0.05, 14), (29.5, 0.05, 30), (30.2, 0.05, 31), (31.0, 0.05, 33)])
    assert drill._counter(probe, COUNT, 10.0, 30.0) == [10, 14, 30, 31]
    assert drill._delta(probe, COUNT, 10.0, 30.0) == 21


def test_a_slow_read_at_the_end_is_bracketed_by_the_next_one():
    # The catalogue's case: the last read sent in the window took 3.69 s; the next was sent 0.75 s after it.
    probe = member([(9.5, 0.05, 10), (12.0, 0.05, 14), (26.55, 3.69, 26), (30.75, 0.02, 54)])
    assert drill._delta(probe, COUNT, 10.0, 30.0) == 44


def test_a_read_still_running_at_the_start_does_not_open_the_window():
    probe = member([(9.0, 0.05, 8), (9.8, 0.5, 12), (20.0, 0.05, 20), (30.1, 0.05, 30)])
    assert drill._counter(probe, COUNT, 10.0, 30.0) == [8, 12, 20, 30]


@pytest.mark.parametrize("reads", [
    [(9.5, 0.05, 10), (12.0, 0.05, 14), (29.5, 0.05, 26)],                   # nothing read after the end
    [(9.5, 0.05, 10), (29.5, 0.05, 26), (35.5, 0.05, 27)],                   # the next read 5.5 s after it
    [(9.5, 0.05, 10), (20.0, 0.05, 4), (30.5, 0.05, 6)],                     # went down: the member restarted
    [],
])
def test_reads_that_do_not_bracket_the_window_give_no_growth(reads):
    assert drill._delta(member(reads), COUNT, 10.0, 30.0) is None
