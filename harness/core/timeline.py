"""Probe samples over time, and the numbers drills assert on.

All times are epoch seconds (``time.time()``); all durations are seconds.
Windows are half-open, ``start <= t < end`` (:func:`window`), in every measure, Python drill
or data scenario alike: consecutive windows (steady state, hold, recovery) then never count one
sample twice, and ``None`` leaves that side open. The summary functions
are pure: they sort samples by time themselves and never mutate their input.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence


@dataclass(frozen=True)
class Sample:
    """One probe attempt: when it ran (``t``), whether it succeeded, how long
    it took (seconds, None if unknown), free text, and labels such as
    ``{"target": "pod-x"}``. Labels are excluded from the hash so samples stay hashable."""

    t: float
    ok: bool
    latency_seconds: float | None = None
    detail: str = ""
    labels: dict[str, str] = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {"t": self.t, "ok": self.ok, "latency_seconds": self.latency_seconds,
                "detail": self.detail, "labels": dict(self.labels)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sample:
        """Raises KeyError if ``t`` or ``ok`` is missing."""
        return cls(t=float(data["t"]), ok=bool(data["ok"]), latency_seconds=data.get("latency_seconds"),
                   detail=data.get("detail", ""), labels=dict(data.get("labels") or {}))


class Timeline:
    """Append-only, thread-safe list of samples for one probe (``name``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._samples: list[Sample] = []
        self._lock = threading.Lock()

    def add(self, sample: Sample) -> None:
        with self._lock:
            self._samples.append(sample)

    def samples(self, start: float | None = None, end: float | None = None) -> list[Sample]:
        """A copy of the samples in ``[start, end)``, ordered by time."""
        with self._lock:
            snapshot = list(self._samples)
        return window(snapshot, start, end)

    def to_list(self) -> list[dict[str, Any]]:
        """Samples as dicts, ordered by time (for the evidence timeline file)."""
        return [s.to_dict() for s in self.samples()]

    def summary(self, start: float | None = None, end: float | None = None) -> dict[str, Any]:
        return summarize(self.name, self.samples(start, end))

    def __len__(self) -> int:
        with self._lock:
            return len(self._samples)


def window(samples: Iterable[Sample], start: float | None = None, end: float | None = None) -> list[Sample]:
    """The samples with ``start <= t < end`` (epoch seconds; None: that side open), in time order."""
    return sorted((s for s in samples if (start is None or s.t >= start) and (end is None or s.t < end)),
                  key=lambda s: s.t)


def success_ratio(samples: Iterable[Sample], start: float | None = None, end: float | None = None) -> float | None:
    """Successes / samples in ``[start, end)``, or None when the window has no samples. The one
    implementation: the ``success_ratio`` measure of data scenarios is this function."""
    chosen = window(samples, start, end)
    if not chosen:
        return None
    return sum(1 for s in chosen if s.ok) / len(chosen)


def longest_gap_seconds(samples: Iterable[Sample], start: float | None = None,
                        end: float | None = None) -> float:
    """The longest time, in seconds, without a successful sample, where a gap
    needs at least one failed sample in it.

    A gap runs from the last success before a run of failures (or from
    ``start``, or the first sample when no ``start`` is given) to the next
    success (or to ``end``, or the last sample when no ``end`` is given).
    Returns 0.0 when every sample succeeds and when the window has no samples
    at all; use ``success_ratio`` (None) to tell "no data" apart.
    """
    chosen = window(samples, start, end)
    if not chosen:
        return 0.0
    since = start if start is not None else chosen[0].t  # last success, or the window's start
    failing = False
    longest = 0.0
    for sample in chosen:
        if sample.ok:
            if failing:
                longest = max(longest, sample.t - since)
            since, failing = sample.t, False
        else:
            failing = True
    if failing:
        stop = end if end is not None else chosen[-1].t
        longest = max(longest, stop - since)
    return longest


def latency_percentile(samples: Iterable[Sample], q: float, ok_only: bool = True) -> float | None:
    """The q-th percentile (0 <= q <= 100) of ``latency_seconds`` by the
    nearest-rank method: the smallest latency with at least q% of values at
    or below it (q=0 gives the minimum). Samples without a latency, and
    failed samples when ``ok_only``, are ignored. None when nothing is left.

    Raises ValueError if q is outside [0, 100].
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within [0, 100], got {q}")
    values = sorted(s.latency_seconds for s in samples
                    if s.latency_seconds is not None and (s.ok or not ok_only))
    if not values:
        return None
    rank = max(1, math.ceil(q / 100 * len(values)))
    return values[rank - 1]


def summarize(name: str, samples: Sequence[Sample] | Iterable[Sample],
              start: float | None = None, end: float | None = None) -> dict[str, Any]:
    """JSON-ready summary of one probe over ``[start, end)``:
    ``name, samples, successes, failures, success_ratio, longest_gap_seconds,
    first_sample_at, last_sample_at, latency_p50_seconds, latency_p99_seconds``
    (times in epoch seconds, durations in seconds, None where there is no data)."""
    chosen = window(samples, start, end)
    successes = sum(1 for s in chosen if s.ok)
    return {
        "name": name,
        "samples": len(chosen),
        "successes": successes,
        "failures": len(chosen) - successes,
        "success_ratio": success_ratio(chosen),
        "longest_gap_seconds": longest_gap_seconds(chosen, start, end),
        "first_sample_at": chosen[0].t if chosen else None,
        "last_sample_at": chosen[-1].t if chosen else None,
        "latency_p50_seconds": latency_percentile(chosen, 50),
        "latency_p99_seconds": latency_percentile(chosen, 99),
    }


def failure_reasons(samples: Iterable[Sample], start: float | None = None, end: float | None = None,
                    limit: int = 3) -> list[tuple[str, int]]:
    """The ``limit`` commonest failure details in ``[start, end)`` (epoch seconds), each cut to 80
    characters, with their counts, commonest first: what a bare success ratio does not say."""
    counts: dict[str, int] = {}
    for s in window(samples, start, end):
        if not s.ok:
            key = (s.detail or "no detail")[:80]
            counts[key] = counts.get(key, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
