"""The pure logic of drills/test_etcd_slow_disk.py: which metrics reads of a member cover a window,
so that a counter's growth over it can be read."""

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


def test_a_counter_read_across_the_window_gives_its_growth():
    probe = member([(9.5, 0.05, 10), (12.0, 0.05, 14), (29.5, 0.05, 30), (31.0, 0.05, 31)])
    assert drill._counter(probe, COUNT, 10.0, 30.0) == [10, 14, 30]
    assert drill._delta(probe, COUNT, 10.0, 30.0) == 20


def test_a_slow_last_read_covers_the_window_until_it_answered():
    # The catalogue's case: the last read in the window was sent 3.45 s before its end and took 3.69 s.
    probe = member([(9.5, 0.05, 10), (12.0, 0.05, 14), (26.55, 3.69, 26), (30.3, 0.05, 27)])
    assert drill._delta(probe, COUNT, 10.0, 30.0) == 16


@pytest.mark.parametrize("reads", [
    [(9.5, 0.05, 10), (12.0, 0.05, 14), (26.55, 0.05, 26)],   # the last one answered 3.4 s before the end
    [(9.5, 0.05, 10)],                                        # nothing read in the window
    [(9.5, 0.05, 10), (20.0, 0.05, 4), (29.5, 0.05, 6)],      # went down: the member restarted
    [],
])
def test_reads_that_do_not_cover_the_window_give_no_growth(reads):
    assert drill._delta(member(reads), COUNT, 10.0, 30.0) is None
