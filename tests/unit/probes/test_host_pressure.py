"""Host CPU pressure (harness/probes/host_pressure.py): the PSI file read as the kernel writes it,
and the per-phase summary each drill records. Pure logic."""

from __future__ import annotations

import pytest

from harness.core.timeline import Sample, Timeline
from harness.probes.host_pressure import at, by_phase, stalled_microseconds

PSI = "some avg10=66.95 avg60=51.58 avg300=49.04 total=1040491903\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n"


def test_the_some_line_total_is_read():
    assert stalled_microseconds(PSI) == 1040491903


@pytest.mark.parametrize("text", ["", "full avg10=0.00 total=7\n", "some avg10=1.0\n"])
def test_a_file_without_some_total_is_refused(text):
    with pytest.raises(ValueError):
        stalled_microseconds(text)


def test_phases_get_the_mean_and_highest_stall_of_their_samples():
    timeline = Timeline("host/cpu-pressure")
    timeline.add(Sample(t=99.0, ok=True, detail="first reading", labels={"stalled": "0"}))
    for t, stalled in [(100.0, 0.2), (101.0, 0.4), (105.0, 0.9)]:
        timeline.add(Sample(t=t, ok=True, detail="x", labels={"stalled": str(stalled)}))
    got = by_phase(timeline, [{"name": "baseline", "started_at": 99.0, "ended_at": 102.0},
                              {"name": "fault", "started_at": 104.0, "ended_at": 106.0},
                              {"name": "empty", "started_at": 200.0, "ended_at": 201.0}])
    assert got == {"baseline": {"mean": 0.3, "max": 0.4}, "fault": {"mean": 0.9, "max": 0.9},
                   "empty": {"mean": None, "max": None}}
    assert at(timeline, 104.5) == 0.9 and at(timeline, 99.5) == 0.2 and at(timeline, 300.0) is None
