"""Every measurement of a run as an OpenMetrics text file, for Prometheus and Grafana.

``metrics.openmetrics.txt`` is written into the run directory before it is sealed, so it is
evidence like the records it comes from. Each sample carries the drill's finish time as its
timestamp (seconds), so ``promtool tsdb create-blocks-from openmetrics`` can backfill a history
of runs. Families (labels ``drill``, ``case``; expectations also ``expectation``, ``unit``):

- ``kdrill_expectation_measured``: the measured value (booleans as 1/0; unmeasured: absent);
- ``kdrill_expectation_bound``: the bound's value, with label ``op``;
- ``kdrill_expectation_passed``: 1 when the expectation passed, else 0;
- ``kdrill_drill_passed``: 1 when the drill case's checked verdict is "passed", else 0;
- ``kdrill_drill_duration_seconds``: how long the drill case took;
- ``kdrill_run_info``: 1, with label ``run_id`` (the series carry no run id, so each is one
  line across runs).

Written with ``prometheus_client``'s OpenMetrics exposition (the format's escaping and ``# EOF``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from harness.core.files import write_text_atomic
from harness.evidence.reading import checked_verdict, expectation_problem, scan_records

METRICS_NAME = "metrics.openmetrics.txt"


def _value(value: Any) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:
            return None
        return number if math.isfinite(number) else None
    return None


def _time(value: Any) -> float | None:
    """An epoch timestamp in seconds, or None (a boolean or an absurd value is no time)."""
    number = None if isinstance(value, bool) else _value(value)
    return number if number is not None and 0 < number < 1e11 else None


class _RunCollector(Collector):
    def __init__(self, records: list[dict[str, Any]], run_id: str) -> None:
        self.records, self.run_id = records, run_id

    def collect(self) -> Iterable[GaugeMetricFamily]:
        # No run id on the series: one drill's expectation is one series across runs (its trend);
        # kdrill_run_info names the run.
        drill_labels = ["drill", "case"]
        labels = drill_labels + ["expectation", "unit"]
        measured = GaugeMetricFamily("kdrill_expectation_measured", "The measured value of an expectation, in its unit",
                                     labels=labels)
        bound = GaugeMetricFamily("kdrill_expectation_bound", "The bound an expectation's value is checked against",
                                  labels=labels + ["op"])
        passed = GaugeMetricFamily("kdrill_expectation_passed", "1 when the expectation passed, else 0", labels=labels)
        drill_passed = GaugeMetricFamily("kdrill_drill_passed", "1 when the drill case passed, else 0",
                                         labels=drill_labels)
        duration = GaugeMetricFamily("kdrill_drill_duration_seconds", "How long the drill case took",
                                     labels=drill_labels, unit="seconds")
        seen: set[tuple[str, ...]] = set()  # a series once: a record or expectation listed twice is the first
        for record in self.records:
            base = [str(record.get("drill")), str(record.get("case") or "")]
            if tuple(base) in seen:
                continue
            seen.add(tuple(base))
            at = _time(record.get("finished_at")) or _time(record.get("started_at"))
            verdict, _ = checked_verdict(record)
            drill_passed.add_metric(base, 1.0 if verdict == "passed" else 0.0, timestamp=at)
            if _value(record.get("duration_seconds")) is not None:
                duration.add_metric(base, _value(record["duration_seconds"]), timestamp=at)
            for x in record.get("expectations") or []:
                if not isinstance(x, dict):
                    continue
                key = base + [str(x.get("name")), str(x.get("unit") or "")]
                if tuple(key) in seen:
                    continue
                seen.add(tuple(key))
                value = _value(x.get("measured"))
                if value is not None:
                    measured.add_metric(key, value, timestamp=at)
                b = x.get("bound") if isinstance(x.get("bound"), dict) else {}
                if _value(b.get("value")) is not None:
                    bound.add_metric(key + [str(b.get("op"))], _value(b["value"]), timestamp=at)
                # As the report judges it: a "passed" whose value breaks its bound is not one.
                passed.add_metric(key, 1.0 if expectation_problem(x) is None else 0.0, timestamp=at)
        info = GaugeMetricFamily("kdrill_run_info", "The run these samples come from", labels=["run_id"])
        info.add_metric([self.run_id], 1.0)
        yield from (info, measured, bound, passed, drill_passed, duration)


def render(run_dir: Path) -> str:
    """The run's OpenMetrics text (ends with ``# EOF``)."""
    records = [r for _, r in scan_records(Path(run_dir))[0]]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_RunCollector(records, Path(run_dir).name))
    return generate_latest(registry).decode("utf-8")


def write(run_dir: Path) -> Path:
    """Write ``metrics.openmetrics.txt`` into ``run_dir``; returns its path. Raises OSError."""
    path = Path(run_dir) / METRICS_NAME
    write_text_atomic(path, render(run_dir))
    return path
