"""Probe ``host-cpu-pressure``: how much of each second runnable work on this machine waited for a
CPU (Linux pressure stall information, ``/proc/pressure/cpu``, line ``some``).

Not a signal of the drilled platform but of the machine it runs on: a kind cluster's nodes are
containers sharing this machine's CPUs, so a control plane restarting on three "nodes" at once
starves the workers' pods as it never would on separate machines. Every drill records it
(observation ``host_cpu_pressure``, per phase), so a timing that failed can be told apart from
one that failed while the machine itself was saturated.

A sample's ``labels["stalled"]`` is the fraction (0 to 1) of the interval during which at least
one runnable task waited for a CPU; a sample is ``ok`` when it could be read. Source: Linux
kernel documentation, "PSI - Pressure Stall Information"
(https://docs.kernel.org/accounting/psi.html: ``total`` is the stall time in microseconds).
"""

from __future__ import annotations

import time
from pathlib import Path

from harness.core.timeline import Sample
from harness.probes import Probe

PRESSURE_FILE = Path("/proc/pressure/cpu")


def stalled_microseconds(text: str) -> int:
    """The ``total`` of the ``some`` line of a pressure file's ``text``. Raises ValueError when
    there is none."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "some":
            for field in fields[1:]:
                key, _, value = field.partition("=")
                if key == "total":
                    return int(value)
    raise ValueError(f"no 'some ... total=' line in {text[:200]!r}")


class HostCpuPressure(Probe):
    """Every ``interval_seconds`` (default 1 s), the stalled fraction of the interval since the
    previous sample. ``available()`` says whether this machine reports CPU pressure at all."""

    def __init__(self, name: str = "host/cpu-pressure", interval_seconds: float = 1.0, **kwargs) -> None:
        super().__init__(name, interval_seconds=interval_seconds, **kwargs)
        self._last: tuple[float, int] | None = None

    @staticmethod
    def available() -> bool:
        try:
            stalled_microseconds(PRESSURE_FILE.read_text())
            return True
        except (OSError, ValueError):
            return False

    def sample(self) -> Sample:
        now, total = time.monotonic(), stalled_microseconds(PRESSURE_FILE.read_text())
        last, self._last = self._last, (now, total)
        if last is None or now <= last[0]:
            return Sample(t=time.time(), ok=True, detail="first reading", labels={"stalled": "0"})
        fraction = min(1.0, max(0.0, (total - last[1]) / 1e6 / (now - last[0])))
        return Sample(t=time.time(), ok=True, detail=f"{fraction:.0%} of the time stalled",
                      labels={"stalled": f"{fraction:.3f}"})


def by_phase(timeline, phases: list[dict]) -> dict[str, dict[str, float | None]]:
    """Per phase (``{"name", "started_at", "ended_at"}``, epoch seconds): the mean and the highest
    stalled fraction of its samples (None where it has none)."""
    out = {}
    for phase in phases:
        start, end = phase.get("started_at"), phase.get("ended_at") or time.time()
        values = [float(s.labels["stalled"]) for s in timeline.samples()
                  if s.ok and "stalled" in s.labels and s.detail != "first reading" and start <= s.t <= end]
        out[phase["name"]] = {"mean": round(sum(values) / len(values), 3) if values else None,
                              "max": round(max(values), 3) if values else None}
    return out


def at(timeline, t: float) -> float | None:
    """The stalled fraction of the sample covering epoch second ``t`` (the first at or after it)."""
    for s in timeline.samples():
        if s.t >= t and s.ok and s.detail != "first reading":
            return float(s.labels["stalled"])
    return None
