"""Measures: the values a data-only scenario's expectations are checked against.

An expectation of a data-only scenario names a measure (``kind``: a ``kdrill.measures`` entry
point, so a plug-in package can add its own; kdrill's are below), the probe whose samples it
reads and the window: ``baseline`` (before the injection), ``fault`` (from the injection until
the revert starts) or ``after`` (from the revert's end to the end of the drill). Every measure
takes the window's samples and returns a value in the expectation's unit, or None when the
window holds nothing to measure (the expectation is then an error, never a pass).

Each measure's docstring says what it returns, in which unit (seconds, a ratio, or a metric
probe's own unit for ``max_value``, ``min_value`` and ``rate_per_second``, which read each
sample's ``labels["value"]``); ``docs/reference.md`` lists them (``kdrill schema --markdown``).

``predicted_by: <fact>`` judges a ``success_ratio`` against a ratio the fault measured: the share of
the path's backends it takes away (e.g. the CoreDNS replicas on the nodes it freezes). The value
is true or false (:func:`as_predicted`): with none away the calls work (>= 0.99), with all away
they fail (<= 0.05), with some away some fail (strictly between 0 and 0.99).

``within_seconds`` makes a success that took longer than that (or has no latency) a failure
before any measure reads the samples: "failed or slower than N s" (e.g. a lookup that answered,
but too late for its client).

A fault may mark times inside the drill (its ``marks_offered``, e.g. when a load it started really
began and ended): ``from_mark`` / ``until_mark`` narrow the window to them, and ``settle_seconds``
then starts it that much later (e.g. past the first seconds of a flood). A mark the fault did
not set leaves nothing to measure: the expectation is an error. An expectation may also bound a
value the fault measured itself (``measure: {fact: <name>}``, its ``facts_offered``).

An expectation may narrow its window to the time of an action of that window: ``from_action``
starts it when the named action ran, ``until_action`` ends it then (e.g. the rejections before a
webhook configuration is deleted, and the writes after). An action that did not run leaves
nothing to measure: the expectation is an error. ``from_first_success: true`` then starts the
window at the probe's first successful sample in it: once a state was reached (a fault in force,
as the probe sees it, measured by its own ``first_success_seconds``), how it held for the rest of
the window; a probe that never succeeded there leaves nothing to measure.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Callable

from harness.core.entry_points import installed
from harness.core.timeline import Sample, latency_percentile, success_ratio  # noqa: F401  the success_ratio measure
from harness.core.timeline import window as in_window
from harness.spec.plugins import LATENCY_MEASURES, MEASURE_ENTRY_POINTS, VALUE_MEASURES, measure_kinds  # noqa: F401


def within(samples: list[Sample], seconds: float) -> list[Sample]:
    """``samples`` with each success that took longer than ``seconds`` (or whose latency is not
    known) made a failure: "failed or slower than N s", for a measure's ``within_seconds``."""
    out = []
    for s in samples:
        slow = s.ok and (s.latency_seconds is None or not s.latency_seconds <= seconds)
        out.append(dataclasses.replace(s, ok=False, detail=f"slower than {seconds:g} s ({s.detail})") if slow else s)
    return out


def as_predicted(success: float | None, share_away: float | None) -> bool | None:
    """Whether a success ratio is what taking ``share_away`` (0 to 1) of a path's backends away
    predicts: >= 0.99 with none away, <= 0.05 with all, strictly between 0 and 0.99 otherwise.
    None when either is None (nothing to judge)."""
    if success is None or share_away is None:
        return None
    if share_away <= 0:
        return success >= 0.99
    if share_away >= 1:
        return success <= 0.05
    return 0.0 < success < 0.99


def first_failure_seconds(samples: list[Sample], start: float, end: float) -> float | None:
    """From the window's start to its first failed sample (seconds; None when none failed)."""
    failed = next((s for s in in_window(samples, start, end) if not s.ok), None)
    return failed.t - start if failed else None


def first_success_seconds(samples: list[Sample], start: float, end: float) -> float | None:
    """From the window's start to its first successful sample (seconds; None when none succeeded):
    how long until a state was reached, e.g. a condition was set."""
    reached = next((s for s in in_window(samples, start, end) if s.ok), None)
    return reached.t - start if reached else None


def recovery_seconds(samples: list[Sample], start: float, end: float) -> float | None:
    """From the window's start to the first successful sample after which every sample of the window
    succeeded (seconds; None when the window ends failing)."""
    window = in_window(samples, start, end)
    if not window or not window[-1].ok:
        return None
    first_of_last_run = len(window) - 1
    while first_of_last_run > 0 and window[first_of_last_run - 1].ok:
        first_of_last_run -= 1
    return window[first_of_last_run].t - start


def longest_failure_seconds(samples: list[Sample], start: float, end: float) -> float | None:
    """The longest run of consecutive failed samples, from its first failure to the next success or
    the window's end (seconds; 0 when none failed)."""
    window = in_window(samples, start, end)
    if not window:
        return None
    longest, began = 0.0, None
    for s in window:
        if not s.ok and began is None:
            began = s.t
        elif s.ok and began is not None:
            longest, began = max(longest, s.t - began), None
    if began is not None:
        longest = max(longest, end - began)
    return longest


def flips(samples: list[Sample], start: float, end: float) -> float | None:
    """How many times the window's samples changed between success and failure, either way (a
    count; None for an empty window): e.g. how often a Pod's Ready condition flapped. A state that
    held throughout gives 0."""
    window = in_window(samples, start, end)
    if not window:
        return None
    return float(sum(1 for a, b in zip(window, window[1:]) if a.ok != b.ok))


def longest_unanswered_seconds(samples: list[Sample], start: float, end: float) -> float | None:
    """The longest time inside the window without a successful answer (each taken when its request
    *completed*: ``t`` plus its latency), so a request that hung is a stall as much as one that
    failed; silence before the first answer and after the last one, while the probe was still
    asking, counts too (seconds; None for an empty window or no samples)."""
    if end <= start:
        return None
    done = [(s.t + max(0.0, s.latency_seconds or 0.0), s.ok) for s in samples
            if math.isfinite(s.t) and (s.latency_seconds is None or math.isfinite(s.latency_seconds))]
    if not done:
        return None
    # Silence runs between answers, and also from when the probe began asking until its first
    # answer and from its last answer until its last request ended (answers that stopped for good).
    points = sorted({min(s.t for s in samples if math.isfinite(s.t)), max(t for t, _ in done),
                     *(t for t, ok in done if ok)})
    gaps = [min(b, end) - max(a, start) for a, b in zip(points, points[1:]) if b > start and a < end]
    return max(gaps) if gaps else None


def max_latency_seconds(samples: list[Sample], start: float, end: float) -> float | None:
    """The largest latency among the window's samples that have one (seconds; None when none has):
    for an ``image-pulls`` probe, the longest an image pull request waited behind another pull on
    its node."""
    timed = [s.latency_seconds for s in in_window(samples, start, end)
             if s.latency_seconds is not None and math.isfinite(s.latency_seconds)]
    return max(timed) if timed else None


def median_latency_seconds(samples: list[Sample], start: float, end: float) -> float | None:
    """The median (p50) of the latencies of the window's samples that have one (seconds; None when
    none has one): e.g. how long the API server took to reject a write it could not send to its
    webhook."""
    timed = [s.latency_seconds for s in in_window(samples, start, end)
             if s.latency_seconds is not None and math.isfinite(s.latency_seconds)]
    return statistics.median(timed) if timed else None


def p99_latency_seconds(samples: list[Sample], start: float, end: float) -> float | None:
    """The 99th percentile of the latencies of the window's samples that have one, nearest rank
    (seconds; None when none has one): e.g. how long name lookups took while CoreDNS was healthy."""
    timed = [s for s in in_window(samples, start, end)
             if s.latency_seconds is not None and math.isfinite(s.latency_seconds)]
    return latency_percentile(timed, 99, ok_only=False)


def first_success_at(samples: list[Sample], start: float, end: float) -> float | None:
    """When the window's first successful sample was taken (epoch seconds), or None: where a
    window narrowed with ``from_first_success`` starts."""
    return next((s.t for s in in_window(samples, start, end) if s.ok), None)


def min_latency_seconds(samples: list[Sample], start: float, end: float) -> float | None:
    """The smallest latency among the window's samples that have one (seconds; None when none has
    one): e.g. that every write the webhook's black hole held waited for the API server's deadline."""
    timed = [s.latency_seconds for s in in_window(samples, start, end)
             if s.latency_seconds is not None and math.isfinite(s.latency_seconds)]
    return min(timed) if timed else None


def _values(samples: list[Sample], start: float, end: float) -> list[tuple[float, float]]:
    """(t, value) of the window's samples that carry a number in ``labels["value"]`` (a metric
    read): NaN is no value; +Inf and -Inf are kept (a metric may say them, and an extreme measured
    without them would claim less than was read); a flag (True/False) is not a number read."""
    found = []
    for s in in_window(samples, start, end):
        raw = (s.labels or {}).get("value") if isinstance(s.labels, dict) else None
        if raw is None or isinstance(raw, bool):
            continue
        try:
            value = float(raw)
        except OverflowError:  # an integer past float's range: beyond any float, as "1e309" reads
            value = math.inf if raw > 0 else -math.inf
        except (TypeError, ValueError):
            continue
        if not math.isnan(value):
            found.append((s.t, value))
    return found


def max_value(samples: list[Sample], start: float, end: float) -> float | None:
    """The largest value read in the window (None when no read gave one; ``inf`` /
    ``-inf`` when the metric said so)."""
    values = [v for _, v in _values(samples, start, end)]
    return max(values) if values else None


def min_value(samples: list[Sample], start: float, end: float) -> float | None:
    """The smallest value read in the window (None when no read gave one; ``inf`` /
    ``-inf`` when the metric said so)."""
    values = [v for _, v in _values(samples, start, end)]
    return min(values) if values else None


def rate_per_second(samples: list[Sample], start: float, end: float) -> float | None:
    """How fast a counter grew in the window: its increase from the first to the last value read, a
    drop counted as a counter reset (the process restarted; the new value is what it counted since),
    divided by the seconds between those two reads (None with fewer than two values or no time
    between them, and when a value read is negative or infinite, or two reads at one time differ: no
    counter's). Prometheus's ``rate()`` without its extrapolation to the window's edges
    (https://prometheus.io/docs/prometheus/latest/querying/functions/#rate)."""
    values = _values(samples, start, end)
    if len(values) < 2 or values[-1][0] <= values[0][0]:
        return None
    if any(not math.isfinite(v) or v < 0 for _, v in values):
        return None  # a counter is finite and never negative: these reads are not a counter's
    if any(a == c and b != d for (a, b), (c, d) in zip(values, values[1:])):
        return None  # two reads at one time that differ: which came first, and so a reset, is unknown
    increase = 0.0
    for (_, before), (_, after) in zip(values, values[1:]):
        increase += after - before if after >= before else after  # a drop is a reset: counted from 0
    rate = increase / (values[-1][0] - values[0][0])
    return rate if math.isfinite(rate) else None



ENTRY_POINTS = MEASURE_ENTRY_POINTS


def measure_function(kind: str) -> Callable[[list[Sample], float, float], float | None]:
    """The function registered for ``kind``: (samples, start, end) -> value or None. Raises
    KeyError naming the known kinds."""
    found = [ep for ep in installed(group=ENTRY_POINTS) if ep.name == kind]
    if not found:
        raise KeyError(f"no measure {kind!r} is installed (known: {', '.join(measure_kinds())})")
    return found[0].load()


def measure(kind: str, samples: list[Sample], start: float, end: float) -> float | None:
    """The ``kind`` measure of ``samples`` over ``[start, end)`` (epoch seconds). Raises KeyError
    for an unknown kind."""
    return measure_function(kind)(samples, start, end)
