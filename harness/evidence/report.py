"""Self-contained HTML audit report for one kdrill run.

``build_report(run_dir)`` reads the evidence a run left in ``reports/<run-id>/``
(``run.json``, one JSON record per drill case and each record's
``<stem>.timeline.json``) and writes ``<run_dir>/report.html``: one file with
inline CSS and inline SVG charts, no scripts and no external resources, so it
opens offline and can be archived with the evidence.

The report is rendered at the end of a run, before the run is sealed, so the
manifest covers it; the seal it will get (signer key, previous run) is passed
in and shown. Rendering is a pure function of the evidence, the seal and
``generated_at``, so a sealed report can be re-rendered byte for byte
(``kdrill report``). A top-level ``*.json`` that should be a drill record but
does not parse as one is never left out: it is listed as an unreadable record
with verdict "error" and counted in the headline.

All times in the evidence are epoch seconds; the report shows absolute times as
UTC ISO-8601 and chart/expectation times as seconds relative to the drill's
``started_at``.

The page's HTML is in Jinja2 templates, harness/templates/report.html.j2 and the
``report_*.html.j2`` it imports (``report.css.j2`` is its stylesheet), rendered
with autoescape on: this module loads and checks the evidence and computes what
each section shows as plain values (``_*_view`` and friends), and the templates
escape every value taken from the evidence. The one piece of markup built here
is each probe's chart, inline SVG drawn by :func:`timeline_svg` from numbers and
text it escapes itself (markupsafe), handed to the templates as ``Markup``.

Besides its verdict, each drill shows its vital signs (``record["vital_signs"]``,
harness/engine/vitals.py) in a "What else broke" panel: a sign that degraded with no
expectation about it is FLAGGED there, at the top of the drill's section, in the
verdicts summary and in the page's headline, so a passed verdict cannot hide it.
Every injection window of ``record["observations"]["injections"]`` is a row of
the drill's injections-and-reverts table.
"""

from __future__ import annotations

import functools
import json
import math
import shlex
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape

from harness import __version__

from harness.core.files import write_text_atomic
from harness.spec.scenario import Bound

__all__ = [
    "REPORT_NAME",
    "MAX_MARKS",
    "ReportError",
    "build_report",
    "render_report",
    "load_drill_records",
    "scan_records",
    "timeline_svg",
]

REPORT_NAME = "report.html"
#: Most marks drawn per probe chart; longer timelines are bucketed in time.
MAX_MARKS = 2000
_NOT_RECORDS = frozenset({"run.json", "manifest.json"})
_FAILING = frozenset({"failed", "error"})


class ReportError(Exception):
    """The report cannot be built from the given directory."""


# --------------------------------------------------------------------------- #
# Loading evidence
# --------------------------------------------------------------------------- #


@dataclass
class _Run:
    run_dir: Path
    meta: dict[str, Any]
    records: list[tuple[Path, dict[str, Any]]]
    problems: list[str] = field(default_factory=list)
    unreadable: list[tuple[Path, str]] = field(default_factory=list)


def _read_json(path: Path) -> Any:
    with path.open("r", encoding="utf-8") as fh:
        return json.load(fh)


def scan_records(run_dir: Path) -> tuple[list[tuple[Path, dict[str, Any]]], list[tuple[Path, str]]]:
    """Every drill record slot in ``run_dir`` (top level only): ``(records, unreadable)``.

    Every top-level ``*.json`` but ``run.json``, ``manifest.json`` and
    ``*.timeline.json`` is a drill record by the run directory's layout. One
    that is an object with both a ``drill`` and a ``verdict`` key is in
    ``records`` as ``(path, record)``, sorted by ``started_at`` (epoch
    seconds) then file name; any other (unreadable, not JSON, truncated, not
    a record) is in ``unreadable`` as ``(path, reason)``, sorted by name.
    """
    records: list[tuple[Path, dict[str, Any]]] = []
    unreadable: list[tuple[Path, str]] = []
    for path in sorted(Path(run_dir).glob("*.json")):
        if path.name in _NOT_RECORDS or path.name.endswith(".timeline.json"):
            continue
        if path.is_symlink() or not path.is_file():
            # A link reads content from outside the run (never sealed); a FIFO would block the read.
            unreadable.append((path, "is not a regular file (a symbolic link, FIFO or directory): not read"))
            continue
        try:
            data = _read_json(path)
        except OSError as exc:
            unreadable.append((path, f"cannot be read: {exc.strerror or exc}"))
            continue
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep to be a record
            unreadable.append((path, f"does not parse as JSON ({type(exc).__name__}: {str(exc)[:200]}); "
                                     "it may be truncated"))
            continue
        if not isinstance(data, dict):
            unreadable.append((path, f"is JSON but not an object ({type(data).__name__})"))
        elif "drill" not in data or "verdict" not in data:
            absent = " and ".join(repr(k) for k in ("drill", "verdict") if k not in data)
            unreadable.append((path, f"is not a drill record: it has no {absent} key"))
        else:
            records.append((path, data))

    def order(item: tuple[Path, dict[str, Any]]) -> tuple[float, str]:
        started = _as_float(item[1].get("started_at"))
        return (started if started is not None else math.inf, item[0].name)

    return sorted(records, key=order), unreadable


def load_drill_records(run_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The readable drill records of :func:`scan_records`, in run order.

    Callers that show or count a run's verdicts must use ``scan_records``:
    this leaves out the records that do not parse.
    """
    return scan_records(run_dir)[0]


# What a record's ``verdict`` may be (harness/plugin.py writes the last three for drills that did not run).
RECORD_VERDICTS = ("passed", "failed", "error", "skipped", "refused", "not-run")


def expectation_problem(x: Any) -> str | None:
    """Why a record's expectation entry does not support "passed" (None when it does): its own
    verdict, a measured value its bound does not hold for, a bound that is not finite or whose
    text says something else."""
    if not isinstance(x, dict):
        return "entry is not an object"
    name = x.get("name")
    if x.get("verdict") != "passed":
        return f"{name} is {str(x.get('verdict'))[:40]}"
    bound = x.get("bound") if isinstance(x.get("bound"), dict) else {}
    value = bound.get("value")
    try:
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("a bound must be finite")
        spec = Bound(bound.get("op"), value)
        holds = spec.holds(x.get("measured"))
        measured = x.get("measured")
        if isinstance(measured, float) and not math.isfinite(measured):
            holds = False
    except (ValueError, TypeError, OverflowError):
        return f"{name}: its bound {str(bound)[:80]} is not a bound"
    if not holds:
        return f"{name}: measured {str(x.get('measured'))[:40]} does not satisfy {spec.describe()}"
    if x.get("bound_text") not in (None, spec.describe()):
        return f"{name}: its bound says {spec.describe()} but its text says {str(x.get('bound_text'))[:40]}"
    return None


def _against_scenario(record: Mapping[str, Any], expectations: list) -> list[str]:
    """The record's expectations against the scenario it carries: each one there, with its bound."""
    scenario = record.get("scenario") if isinstance(record.get("scenario"), dict) else {}
    specs = scenario.get("expectations")
    if not isinstance(specs, list):
        return []
    specs = list(specs)
    for case in scenario.get("cases") or []:
        if isinstance(case, dict) and case.get("name") == record.get("case"):
            specs += case.get("expectations") or []
    wanted = {str(e.get("name")): e.get("bound") for e in specs if isinstance(e, dict)}
    got = {str(x.get("name")): x.get("bound") for x in expectations if isinstance(x, dict)}
    problems = [f"expectation {n} of its scenario is missing" for n in wanted if n not in got]
    problems += [f"expectation {n} has bound {got[n]} but its scenario says {wanted[n]}"
                 for n in wanted if n in got and got[n] != wanted[n]]
    return problems


def checked_verdict(record: Mapping[str, Any]) -> tuple[Any, str | None]:
    """The verdict a drill record's own content supports, and why it differs from the one it
    states (None when it does not). A record that says "passed" is an "error" unless it has
    expectations, each one "passed" with a measured value that satisfies its bound, and no
    errors: a hand-edited verdict does not turn a failure green in the report."""
    stated = record.get("verdict")
    if stated not in RECORD_VERDICTS:
        return "error", f"the record's verdict {str(stated)[:40]!r} is none of {', '.join(RECORD_VERDICTS)}"
    if stated != "passed":
        return stated, None
    problems = []
    expectations = record.get("expectations")
    if not isinstance(expectations, list) or not expectations:
        problems.append("it has no expectations")
    else:
        problems += [f"expectation {problem}" for x in expectations for problem in [expectation_problem(x)] if problem]
        names = [x.get("name") for x in expectations if isinstance(x, dict)]
        if len(names) != len(set(map(str, names))):
            problems.append("an expectation is listed twice")
        problems += _against_scenario(record, expectations)
    if record.get("errors"):
        problems.append("it records errors")
    if problems:
        return "error", "the record says passed, but " + "; ".join(problems)
    return "passed", None


def _load_run(run_dir: Path) -> _Run:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ReportError(f"cannot build a report: {run_dir} is not a directory")
    problems: list[str] = []
    meta: dict[str, Any] = {}
    run_json = run_dir / "run.json"
    has_run_json = run_json.is_file()
    if has_run_json:
        try:
            loaded = _read_json(run_json)
            if isinstance(loaded, dict):
                meta = loaded
            else:
                problems.append("run.json is not a JSON object; run metadata not shown")
        except (OSError, ValueError) as exc:
            problems.append(f"run.json could not be read ({exc}); run metadata not shown")
    records, unreadable = scan_records(run_dir)
    for _, record in records:
        # The report shows the verdict a record's own expectations support, not only what it says.
        verdict, why = checked_verdict(record)
        if why:
            record["stated_verdict"], record["verdict"] = record.get("verdict"), verdict
            record.setdefault("errors", [])
            if isinstance(record["errors"], list):
                record["errors"] = [f"report: {why}"] + record["errors"]
    if not has_run_json and not records and not unreadable:
        raise ReportError(
            f"cannot build a report: {run_dir} has no run.json and no drill records "
            "(*.json files with 'drill' and 'verdict' keys)"
        )
    return _Run(run_dir=run_dir, meta=meta, records=records, problems=problems, unreadable=unreadable)


def _load_timeline(
    run_dir: Path, record_path: Path, record: Mapping[str, Any]
) -> tuple[dict[str, list[dict[str, Any]]] | None, str, str | None]:
    """Returns (timeline or None, file name, problem message or None)."""
    files = record.get("evidence_files")
    name = files.get("timeline") if isinstance(files, dict) else None
    if not isinstance(name, str) or not name:
        name = record_path.name[: -len(".json")] + ".timeline.json"
    root = run_dir.resolve()
    path = (run_dir / name).resolve()
    if not path.is_relative_to(root):
        return None, name, f"timeline path {name!r} points outside the run directory; not read"
    if not path.is_file():
        return None, name, f"timeline file {name} is missing; no charts can be drawn for this drill"
    try:
        data = _read_json(path)
    except (OSError, ValueError) as exc:
        return None, name, f"timeline file {name} could not be read: {exc}"
    if not isinstance(data, dict):
        return None, name, f"timeline file {name} is not a JSON object of probe samples"
    timeline = {str(k): [s for s in v if isinstance(s, dict)] for k, v in data.items() if isinstance(v, list)}
    return timeline, name, None


# --------------------------------------------------------------------------- #
# Formatting helpers
# --------------------------------------------------------------------------- #


def _text(value: Any) -> str:
    """``value`` as text for the templates (which escape it): None is empty, as it always was."""
    return "" if value is None else str(value)


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:  # a JSON integer past float's range: a forged or broken number
        return None
    return value if math.isfinite(value) else None


CELL_CHARS = 300  # a record's strings are the drill's (or a forger's): a table cell shows this much
TABLE_MAX_ROWS = 500  # rows a table of the report shows; the rest is counted in a last row


def _cell(value: Any) -> str:
    """``value`` as text of at most :data:`CELL_CHARS` characters (a list joined with ", " as far
    as it fits), marked when cut."""
    if isinstance(value, list):
        parts, size = [], 0
        for item in value:
            text = _text(item)
            parts.append(text)
            size += len(text) + 2
            if size > CELL_CHARS:
                break
        text = ", ".join(parts) + (" …" if len(parts) < len(value) else "")
    else:
        text = _text(value)
    return text if len(text) <= CELL_CHARS else text[:CELL_CHARS] + "… (cut)"


def _capped(rows: list[dict[str, Any]], what: str) -> list[dict[str, Any]]:
    """At most :data:`TABLE_MAX_ROWS` rows, the last saying how many more the record holds."""
    if len(rows) <= TABLE_MAX_ROWS:
        return rows
    return rows[:TABLE_MAX_ROWS] + [{"more": f"{len(rows) - TABLE_MAX_ROWS} more {what} not shown: the record holds them"}]


def _utc(epoch: Any) -> str:
    t = _as_float(epoch)
    if t is None:
        return "—"
    try:
        stamp = datetime.fromtimestamp(t, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return str(epoch)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _num(value: float) -> str:
    """Compact human number: 3 significant digits below 100, integers above."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{value:.3g}"


def _seconds(value: Any) -> str:
    t = _as_float(value)
    return "—" if t is None else f"{_num(t)} s"


def _rel(epoch: Any, t0: float | None) -> str:
    t = _as_float(epoch)
    if t is None or t0 is None:
        return "—"
    return f"+{_num(t - t0)} s" if t >= t0 else f"−{_num(t0 - t)} s"


def _json_compact(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _verdict_class(verdict: Any) -> str:
    v = str(verdict).lower() if verdict is not None else ""
    return {"passed": "pass", "failed": "fail", "error": "error", "skipped": "skip", "refused": "skip",
            "not-run": "skip"}.get(v, "unknown")


def _safe_href(url: Any) -> str | None:
    if isinstance(url, str) and url.strip().lower().startswith(("https://", "http://")):
        return url.strip()
    return None


def _drill_label(record: Mapping[str, Any]) -> str:
    case = record.get("case")
    drill = str(record.get("drill"))
    return f"{drill} [{case}]" if case not in (None, "") else drill


def _anchor(record_path: Path) -> str:
    stem = record_path.name[: -len(".json")]
    return "drill-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in stem)


def _tally(expectations: Any) -> str:
    """E.g. ``"2 of 3 passed"`` for a record's expectation list."""
    items = [x for x in expectations if isinstance(x, dict)] if isinstance(expectations, list) else []
    if not items:
        return "none recorded"
    passed = sum(1 for x in items if x.get("verdict") == "passed")
    return f"{passed} of {len(items)} passed"


# --------------------------------------------------------------------------- #
# Timeline chart (inline SVG)
# --------------------------------------------------------------------------- #

_W = 1100.0
_ML, _MR, _MT = 64.0, 18.0, 38.0
_BAND_H, _GAP, _LAT_H, _MB = 16.0, 12.0, 104.0, 30.0
_H = _MT + _BAND_H + _GAP + _LAT_H + _MB


@dataclass(frozen=True)
class _Sample:
    """One drawn point: a raw sample, or a time bucket of ``count`` samples."""

    t: float
    ok: bool
    ok_latency: float | None  # slowest successful sample, seconds
    fail_latency: float | None  # slowest failed sample, seconds
    count: int = 1


def _nice_step(span: float, target: int) -> float:
    raw = span / max(target, 1)
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _clean_samples(raw: Iterable[Mapping[str, Any]]) -> tuple[list[_Sample], int]:
    samples: list[_Sample] = []
    dropped = 0
    for s in raw:
        t = _as_float(s.get("t"))
        if t is None:
            dropped += 1
            continue
        ok = s.get("ok") is True
        latency = _as_float(s.get("latency_seconds"))
        samples.append(_Sample(t=t, ok=ok, ok_latency=latency if ok else None, fail_latency=None if ok else latency))
    samples.sort(key=lambda s: s.t)
    return samples, dropped


def _downsample(samples: list[_Sample], limit: int) -> list[_Sample]:
    """Buckets samples into at most ``limit`` equal time bins.

    A bucket is a failure if any sample in it failed (failures are never
    hidden); its latencies are the maxima of its successful and of its
    failed samples.
    """
    if len(samples) <= limit:
        return samples
    first, last = samples[0].t, samples[-1].t
    width = (last - first) / limit or 1.0
    buckets: dict[int, list[_Sample]] = {}
    for s in samples:
        buckets.setdefault(min(int((s.t - first) / width), limit - 1), []).append(s)
    out = []
    for _, group in sorted(buckets.items()):
        ok_lats = [s.ok_latency for s in group if s.ok_latency is not None]
        fail_lats = [s.fail_latency for s in group if s.fail_latency is not None]
        out.append(
            _Sample(
                t=group[0].t,
                ok=all(s.ok for s in group),
                ok_latency=max(ok_lats) if ok_lats else None,
                fail_latency=max(fail_lats) if fail_lats else None,
                count=len(group),
            )
        )
    return out


def _el(tag: str, content: str | None = None, **attrs: Any) -> Markup:
    """Markup for one SVG element: the only markup the report builds outside its templates.

    ``content`` is escaped unless it is already :class:`Markup` (an element built here, or
    ``escape``'s result). Attribute names come from this module: ``_`` for ``-`` (a trailing
    ``_`` is dropped, so ``class_`` is ``class``); None values are left out, floats are written
    with at most 2 decimals, every value is escaped.
    """
    rendered = []
    for key, value in attrs.items():
        if value is None:
            continue
        if isinstance(value, float):
            value = f"{value:.2f}".rstrip("0").rstrip(".")
        rendered.append(f' {key.rstrip("_").replace("_", "-")}="{escape(value)}"')
    joined = "".join(rendered)
    return Markup(f"<{tag}{joined}/>" if content is None else f"<{tag}{joined}>{escape(content)}</{tag}>")


def _label(x: float, y: float, text: str, anchor: str = "start", fill: str = "#4b5563", **attrs: Any) -> Markup:
    return _el("text", text, x=x, y=y, text_anchor=anchor, font_size=10, fill=fill, **attrs)


def timeline_svg(
    probe: str,
    raw_samples: Sequence[Mapping[str, Any]],
    *,
    t0: float,
    t_end: float,
    fault_window: tuple[float, float | None] | None = None,
    phases: Sequence[tuple[str, float]] = (),
    max_marks: int = MAX_MARKS,
    earlier_windows: Sequence[tuple[float, float]] = (),
) -> Markup:
    """Inline SVG chart of one probe's samples.

    ``raw_samples`` are timeline entries ``{"t": epoch s, "ok": bool,
    "latency_seconds": float|None, ...}``; ``t0``/``t_end`` are the drill's
    start and end (epoch seconds) and set the x axis, drawn as seconds since
    ``t0``. ``fault_window`` is ``(injected_at, reverted_at|None)`` in epoch
    seconds and is shaded (to the chart's end when not reverted); ``phases``
    are ``(name, started_at)`` drawn as labelled vertical lines;
    ``earlier_windows`` are further ``(injected_at, reverted_at)`` of a drill
    that injected more than once, shaded without a label. At most
    ``max_marks`` samples are drawn; longer series are bucketed in time.
    Returns ``<svg class="timeline" data-probe="...">...</svg>`` as :class:`Markup` (a ``str``):
    built by :func:`_el` alone, so every text and attribute value in it is escaped and the rest
    is numbers computed here.
    """
    samples, dropped = _clean_samples(raw_samples)
    drawn = _downsample(samples, max_marks)
    rel = [s.t - t0 for s in samples]
    x_min = min([0.0] + rel[:1])
    x_max = max([t_end - t0, 1.0] + rel[-1:])
    if fault_window is not None:
        x_max = max(x_max, fault_window[0] - t0, (fault_window[1] or t0) - t0)
    x_max = max(x_max, x_min + 1.0)
    pw = _W - _ML - _MR
    x_right = _ML + pw
    band_y = _MT
    lat_top = _MT + _BAND_H + _GAP
    lat_bottom = lat_top + _LAT_H
    lat_middle = (lat_top + lat_bottom) / 2

    def xs(t_rel: float) -> float:
        return _ML + (t_rel - x_min) / (x_max - x_min) * pw

    failed = sum(1 for s in samples if not s.ok)
    parts = [_el("title", f"probe {probe}: {len(samples)} samples, {failed} failed")]

    # Fault windows first, so everything else is drawn over them.
    for start, end in earlier_windows:
        x1, x2 = xs(max(start - t0, x_min)), xs(min(end - t0, x_max))
        tooltip = _el("title", f"earlier fault window: +{_num(start - t0)} s to +{_num(end - t0)} s")
        parts.append(_el(
            "rect", tooltip, class_="fault-window", x=x1, y=band_y - 4.0, width=max(x2 - x1, 1.0),
            height=lat_bottom - band_y + 4, fill="#f59e0b", fill_opacity=0.16,
            stroke="#d97706", stroke_opacity=0.5, stroke_dasharray="3 2",
        ))
    if fault_window is not None:
        f_start = fault_window[0] - t0
        f_end = (fault_window[1] - t0) if fault_window[1] is not None else x_max
        x1, x2 = xs(max(f_start, x_min)), xs(min(f_end, x_max))
        label = "fault window" if fault_window[1] is not None else "fault (not reverted)"
        tooltip = _el("title", f"{label}: +{_num(f_start)} s to +{_num(f_end)} s")
        parts.append(_el(
            "rect", tooltip, class_="fault-window", x=x1, y=band_y - 4.0, width=max(x2 - x1, 1.0),
            height=lat_bottom - band_y + 4, fill="#f59e0b", fill_opacity=0.16,
            stroke="#d97706", stroke_opacity=0.5, stroke_dasharray="3 2",
        ))
        parts.append(_label(x2 - 4, lat_bottom - 6, label, "end", "#b45309", class_="fault-label"))

    # Time axis: grid lines and labels in seconds since the drill started.
    step = _nice_step(x_max - x_min, 10)
    tick = math.ceil(x_min / step) * step
    while tick <= x_max + 1e-9:
        x = xs(tick)
        parts.append(_el("line", class_="grid", x1=x, y1=lat_top, x2=x, y2=lat_bottom, stroke="#e5e7eb"))
        parts.append(_label(x, lat_bottom + 14, _num(tick), "middle"))
        tick += step
    parts.append(_label(x_right, lat_bottom + 27, "seconds since drill start", "end", "#6b7280"))

    # Latency axis, in seconds.
    lats = [v for smp in drawn for v in (smp.ok_latency, smp.fail_latency) if v is not None]
    lat_max = max(lats) if lats else 0.0
    lat_step = _nice_step(lat_max, 4) if lat_max > 0 else 0.25
    lat_top_value = max(lat_step * math.ceil(lat_max / lat_step), lat_step)

    def ys(lat: float) -> float:
        return lat_bottom - min(lat / lat_top_value, 1.0) * _LAT_H

    value = 0.0
    while value <= lat_top_value + 1e-12:
        y = ys(value)
        parts.append(_el("line", class_="grid", x1=_ML, y1=y, x2=x_right, y2=y, stroke="#eef0f3"))
        parts.append(_label(_ML - 6, y + 3, _num(value), "end"))
        value += lat_step
    rotate = f"rotate(-90 14 {lat_middle:.1f})"
    parts.append(_label(14, lat_middle, "latency (s)", "middle", "#1d4ed8", transform=rotate))
    parts.append(_label(_ML - 6, band_y + 12, "status", "end"))
    parts.append(_el("rect", class_="band-bg", x=_ML, y=band_y, width=pw, height=_BAND_H, fill="#f3f4f6"))
    parts.append(_el("line", x1=_ML, y1=lat_bottom, x2=x_right, y2=lat_bottom, stroke="#9ca3af"))

    if drawn:
        parts += _sample_marks(drawn, t0, xs, ys, band_y)
    else:
        parts.append(_el(
            "text", "no samples recorded for this probe", class_="no-samples", x=_ML + pw / 2, y=lat_middle,
            text_anchor="middle", font_size=13, fill="#6b7280",
        ))

    # Phases: labelled vertical lines, labels staggered over up to 3 rows.
    row_end = [-math.inf, -math.inf, -math.inf]
    for name, started in phases:
        t_rel = started - t0
        if not (x_min <= t_rel <= x_max):
            continue
        x = xs(t_rel)
        row = next((r for r, end in enumerate(row_end) if end < x), len(row_end) - 1)
        row_end[row] = x + 6.2 * len(name) + 10  # rough label width at font size 10
        y_label = 11.0 + 11 * row
        parts.append(_el(
            "line", class_="phase-marker", x1=x, y1=y_label + 2, x2=x, y2=lat_bottom,
            stroke="#6d28d9", stroke_width=1, stroke_dasharray="4 3",
        ))
        tooltip = _el("title", f"phase {name} starts at +{_num(t_rel)} s")
        parts.append(_el(
            "text", escape(name) + tooltip, class_="phase-label", x=x + 3, y=y_label, font_size=10, fill="#5b21b6",
        ))

    notes = []
    if len(drawn) < len(samples):
        notes.append(
            f"{len(samples)} samples drawn as {len(drawn)} time buckets: "
            "a bucket is red if any of its samples failed; latency is its maximum"
        )
    if dropped:
        notes.append(f"{dropped} samples without a numeric time not drawn")
    if notes:
        parts.append(_label(_ML, lat_bottom + 27, "; ".join(notes), "start", "#6b7280", class_="chart-note"))
    return _el(
        "svg", Markup("").join(parts), class_="timeline", data_probe=probe, data_samples=len(samples),
        data_drawn=len(drawn), data_note="; ".join(notes) or None, xmlns="http://www.w3.org/2000/svg",
        viewBox=f"0 0 {_W:.0f} {_H:.0f}", width="100%", role="img",
        font_family="system-ui, -apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif",
    )


def _sample_marks(drawn: list[_Sample], t0: float, xs: Any, ys: Any, band_y: float) -> list[Markup]:
    """The status band's marks and the latency line/points for ``drawn``."""
    parts: list[Markup] = []
    # Each sample covers the time until the next one (capped at three typical
    # intervals, so sampling gaps stay visible); neighbours with the same
    # outcome are merged into one mark.
    gaps = [b.t - a.t for a, b in zip(drawn, drawn[1:]) if b.t > a.t]
    typical = statistics.median(gaps) if gaps else 1.0
    runs: list[list[Any]] = []  # [ok, start, end], seconds since t0
    for i, smp in enumerate(drawn):
        nxt = drawn[i + 1].t if i + 1 < len(drawn) else smp.t + typical
        start, end = smp.t - t0, smp.t - t0 + min(max(nxt - smp.t, 0.0), 3 * typical)
        if runs and runs[-1][0] == smp.ok and start - runs[-1][2] <= 1e-9:
            runs[-1][2] = end
        else:
            runs.append([smp.ok, start, end])
    marks: dict[bool, list[Markup]] = {True: [], False: []}
    for ok, start, end in runs:
        x = xs(start)
        width = max(xs(end) - x, 1.0) + 0.5  # overlap neighbours: no hairline seams
        marks[ok].append(_el("rect", x=x, y=band_y, width=width, height=_BAND_H))
    for ok, cls, colour in ((True, "marks marks-ok", "#16a34a"), (False, "marks marks-fail", "#dc2626")):
        if marks[ok]:
            parts.append(_el("g", Markup("").join(marks[ok]), class_=cls, fill=colour, shape_rendering="crispEdges"))

    # Latency of successful samples: a line, broken where no successful sample
    # was taken or sampling paused (isolated samples are points). Failed
    # samples that recorded a latency (e.g. a timeout) are red points.
    lines: list[list[tuple[float, float]]] = []
    fail_points: list[Markup] = []
    prev_t: float | None = None
    for smp in drawn:
        x = xs(smp.t - t0)
        if smp.fail_latency is not None:
            fail_points.append(_el("circle", cx=x, cy=ys(smp.fail_latency), r=2.2))
        if smp.ok_latency is None:
            prev_t = None
            continue
        if prev_t is None or smp.t - prev_t > 3 * typical:
            lines.append([])
        lines[-1].append((x, ys(smp.ok_latency)))
        prev_t = smp.t
    path = " ".join("M" + " L".join(f"{x:.1f},{y:.1f}" for x, y in line) for line in lines if len(line) > 1)
    if path:
        parts.append(_el(
            "path", class_="latency", d=path, fill="none", stroke="#2563eb",
            stroke_width=1.3, stroke_linejoin="round",
        ))
    show_all = sum(len(line) for line in lines) <= 300
    ok_points = [_el("circle", cx=x, cy=y, r=1.8) for line in lines if len(line) == 1 or show_all for x, y in line]
    if ok_points:
        parts.append(_el("g", Markup("").join(ok_points), class_="latency-points", fill="#2563eb"))
    if fail_points:
        parts.append(_el("g", Markup("").join(fail_points), class_="latency-fail", fill="#dc2626"))
    return parts


# --------------------------------------------------------------------------- #
# What the sections show: plain values for the templates (harness/templates)
# --------------------------------------------------------------------------- #


def _run_view(run: _Run) -> dict[str, Any]:
    """The page header's headline and the Run section: run metadata as shown."""
    meta = run.meta
    records = [r for _, r in run.records]
    # A drill that was planned (run.json) and left no record at all counts as not passed too.
    stems = {str(r.get("drill")) + (f"--{r['case']}" if r.get("case") else "") for r in records}
    planned = [str(p) for p in meta.get("planned") or [] if isinstance(p, str)]
    missing = [p for p in planned if p not in stems]
    # An unreadable record counts as a drill that did not pass: its verdict is unknown.
    total = len(records) + len(run.unreadable) + len(missing)
    failing = sum(1 for r in records if r.get("verdict") != "passed") + len(run.unreadable) + len(missing)
    unreadable = f" ({len(run.unreadable)} unreadable)" if run.unreadable else ""
    if missing:
        unreadable += f" ({len(missing)} planned, no record: {', '.join(missing)})"
    # A verdict says nothing about what the drill did not assert: drills whose vital signs were
    # flagged are named in the headline too, so a green verdict cannot hide them.
    flagged = sum(1 for r in records if _vitals_state(r)[1])
    passed_flagged = sum(1 for r in records if r.get("verdict") == "passed" and _vitals_state(r)[1])
    with_flagged = f"{flagged} with flagged vital signs"
    if not total:
        headline = [{"cls": "badge-unknown", "text": "no drill records"}]
    elif failing:
        headline = [{"cls": "badge-fail", "text": f"{failing} of {total} not passed{unreadable}"}]
        if flagged:
            headline.append({"cls": "badge-flagged headline-flagged", "text": with_flagged})
    elif passed_flagged:
        headline = [{"cls": "badge-flagged headline-flagged",
                     "text": f"{total} drill{'s' if total != 1 else ''} passed, {with_flagged}"}]
    else:
        headline = [{"cls": "badge-pass", "text": f"all {total} passed"}]
    started = _as_float(meta.get("started_at"))
    finished = _as_float(meta.get("finished_at"))
    command = meta.get("command")
    if isinstance(command, list):
        command = shlex.join(str(c) for c in command)
    view: dict[str, Any] = {
        "dir_name": run.run_dir.name,
        "headline": headline,
        "problems": run.problems,
        "user": _text(meta.get("user") or "unknown"),
        "host": _text(meta.get("host") or "unknown host"),
        "started": _utc(started),
        "finished": _utc(finished) if finished is not None else None,
        "duration": _seconds(finished - started) if started is not None and finished is not None else "—",
        "commit": _text(meta.get("git_commit") or "unknown"),
        "dirty": meta.get("git_dirty") if isinstance(meta.get("git_dirty"), bool) else None,
        "kdrill_version": _text(meta.get("kdrill_version") or "unknown"),
        "python": _text(meta.get("python") or "unknown"),
        "command": _text(command or "unknown"),
        "ticket": _text(meta.get("ticket") or "none given"),
        "approved_by": _text(meta.get("approved_by") or "nobody named"),
        "cluster": None,
        "platform": None,
        "image_sources": _image_sources_view(meta.get("image_sources")),
        "workers": _workers_view(meta.get("workers")),
    }
    platform = meta.get("platform") if isinstance(meta.get("platform"), dict) else {}
    if platform:
        # The record is what the cluster says; only a run given the profile's directory checked it.
        checked = meta.get("platform_checked_against")
        view["platform"] = (f"{_text(platform.get('name'))}, sha256 {_text(platform.get('hash'))} "
                            f"({len(platform.get('files') or {})} files) as the cluster records it, "
                            + (f"matching {_text(checked)}" if checked else "not checked against a profile directory")
                            if platform.get("hash") else _text(platform.get("note") or "none recorded"))
    cluster = meta.get("cluster") if isinstance(meta.get("cluster"), dict) else {}
    if cluster:
        offsets = cluster.get("clock_offsets") if isinstance(cluster.get("clock_offsets"), dict) else {}
        worst = [abs(v["offset_seconds"]) for v in offsets.values()
                 if isinstance(v, dict) and isinstance(v.get("offset_seconds"), (int, float))]
        view["cluster"] = {
            "name": _text(cluster.get("name")),
            "provider": _text(cluster.get("provider")),
            "server": _text(cluster.get("server")),
            "kube_system_uid": _text(cluster.get("kube_system_uid")),
            "clocks": (f"largest offset from the host {max(worst):.3f} s over {len(worst)} nodes" if worst
                       else _text(offsets.get("note") or "not compared")),
        }
    return view


def _workers_view(workers: Any) -> list[dict[str, str]] | None:
    """run.json's ``workers`` (a run across parallel clusters, harness/core/workers.py): a row per
    worker with its cluster, server, kube-system UID, creation time and the cases it ran; None
    when the run had no workers."""
    if not isinstance(workers, dict) or not workers:
        return None
    rows = []
    for worker, seen in sorted(workers.items()):
        seen = seen if isinstance(seen, dict) else {"note": f"malformed: {_cell(seen)}"}
        cluster = seen.get("cluster") if isinstance(seen.get("cluster"), dict) else {}
        created = seen.get("cluster_create_seconds")
        ran = seen.get("ran") if isinstance(seen.get("ran"), list) else []
        rows.append({"worker": _text(worker), "cluster": _text(cluster.get("name") or "—"),
                     "server": _text(cluster.get("server") or "—"),
                     "uid": _text(cluster.get("kube_system_uid") or "—"),
                     "created": _seconds(created) if isinstance(created, (int, float)) else "reused or not made here",
                     "ran": _cell(ran) if ran else "none", "note": _text(seen.get("note") or "")})
    return rows


def _node_list(value: Any) -> list[str] | None:
    """A list of node names as recorded, or None when it is not one."""
    if isinstance(value, list) and all(isinstance(n, str) and n for n in value):
        return value
    return None


def _image_sources_view(recorded: Any) -> dict[str, Any] | None:
    """run.json's ``image_sources`` (harness/components/image_sources.py): a row per image with
    its source, workloads, pull policies, the nodes without it (and those it cannot tell for) and
    what an outage would do, or the note saying why it was not read. None when the run has none;
    malformed parts are shown as such, cells cut at :data:`CELL_CHARS` characters,
    at most :data:`TABLE_MAX_ROWS` rows."""
    if not isinstance(recorded, dict):
        return None

    sources = recorded.get("sources")
    note = _cell(recorded["note"]) if recorded.get("note") else None
    if not isinstance(sources, list):
        return {"note": note or "malformed: no list of sources", "rows": []}
    rows = []
    for source in sources:
        images = source.get("images") if isinstance(source, dict) else None
        if not isinstance(images, list):
            rows.append({"source": _cell(source), "image": "", "malformed": True})
            continue
        for image in images:
            if not isinstance(image, dict) or not isinstance(image.get("image"), str):
                rows.append({"source": _cell(source.get("source")) + ": " + _cell(image), "image": "", "malformed": True})
                continue
            without, unknown = _node_list(image.get("nodes_without")), _node_list(image.get("nodes_unknown", []))
            if without is None or unknown is None:
                nodes = "malformed: " + _cell(image.get("nodes_without")) + "; " + _cell(image.get("nodes_unknown"))
            else:
                nodes = "; ".join(filter(None, [_cell(without) if without else "",
                                                ("cannot tell for " + _cell(unknown)) if unknown else ""])) or "none"
            rows.append({"source": _cell(source.get("source")), "image": _cell(image["image"]),
                         "workloads": _cell(image.get("workloads") or []),
                         "policies": _cell(image.get("pull_policies") or []),
                         "without": nodes, "risk": _cell(image.get("risk"))})
    return {"note": note, "rows": _capped(rows, "images"), "read_at": _utc(recorded.get("read_at")),
            "empty": not rows}


def _run_id(run: _Run) -> str:
    records = [r for _, r in run.records]
    return str(run.meta.get("run_id") or (records[0].get("run_id") if records else None) or run.run_dir.name)


def _cluster_view(records: list[tuple[Path, dict[str, Any]]]) -> dict[str, Any] | None:
    """The cluster as the first drill that recorded one saw it (None: none did)."""
    cluster = next((r.get("cluster") for _, r in records if isinstance(r.get("cluster"), dict)), None)
    if not cluster:
        return None
    nodes = []
    for node in cluster.get("nodes") or []:
        if not isinstance(node, dict):
            continue
        roles = node.get("roles") or []
        roles_text = ", ".join(str(r) for r in roles) if isinstance(roles, list) else str(roles)
        nodes.append({"name": _text(node.get("name")), "roles": roles_text or "—",
                      "kubelet_version": _text(node.get("kubelet_version") or "—")})
    return {
        "name": _text(cluster.get("name") or "unknown"),
        "provider": _text(cluster.get("provider") or "unknown"),
        "kubernetes_version": _text(cluster.get("kubernetes_version") or "unknown"),
        "context": _text(cluster.get("context") or "—"),
        "nodes": nodes,
    }


def _summary_view(records: list[tuple[Path, dict[str, Any]]],
                  unreadable: Sequence[tuple[Path, str]] = ()) -> dict[str, Any]:
    """The Verdicts section: a row per drill record and per unreadable record, the tally of
    verdicts, the drills with flagged vital signs and how the others' vital signs went."""
    counts: dict[str, int] = {}
    vitals: dict[str, int] = {}
    flagged_drills: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    for path, r in records:
        verdict = r.get("verdict")
        counts[str(verdict)] = counts.get(str(verdict), 0) + 1
        state, flagged = _vitals_state(r)
        vitals[state if not flagged else "flagged"] = vitals.get(state if not flagged else "flagged", 0) + 1
        if flagged:
            flagged_drills.append({"anchor": _anchor(path), "label": _drill_label(r), "signs": flagged})
        case = r.get("case")
        rows.append({
            "unreadable": False,
            "cls": "row-fail" if verdict in _FAILING else "row-flagged" if flagged else "",
            "anchor": _anchor(path),
            "drill": _text(r.get("drill")),
            "case": None if case in (None, "") else str(case),
            "title": _text(r.get("title") or ""),
            "verdict": verdict,
            "tally": _tally(r.get("expectations")),
            "vitals": state,
            "flagged": flagged,
            "duration": _seconds(r.get("duration_seconds")),
        })
    for path, reason in unreadable:
        counts["error"] = counts.get("error", 0) + 1
        rows.append({"unreadable": True, "anchor": _anchor(path), "name": path.name, "reason": reason})
    others = [f"{vitals[k]} {label}" for k, label in (("recorded", "with nothing flagged"),
                                                       ("error", "not watched"), ("not recorded", "not recorded"))
              if vitals.get(k)]
    return {
        "rows": rows,
        "tally": ", ".join(f"{n} {v}" for v, n in sorted(counts.items())),
        "flagged": flagged_drills,
        "vitals_line": others if records else [],
    }


def _seal_view(seal: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The Seal section: signer key, fingerprint, previous run (see render_report); None: unsealed."""
    if not seal:
        return None
    previous = seal.get("previous")
    return {
        "fingerprint": str(seal.get("fingerprint_sha256") or "unknown"),
        "public_key": _text(seal.get("public_key") or ""),
        "previous": ({"run_id": _text(previous.get("run_id")), "manifest_sha256": _text(previous.get("manifest_sha256"))}
                     if isinstance(previous, Mapping) else None),
    }


# Keys of an injection window that have their own column; any other key is the fault's own
# evidence (``Fault.evidence()``, e.g. ``restore_seconds``) and is shown in the last column.
_INJECTION_COLUMNS = ("kind", "method", "where", "injected_at", "revert_started_at", "reverted_at",
                      "revert_verified")


def _injections(fault: Mapping[str, Any], injections: Any) -> list[dict[str, Any]]:
    """Every injection window: ``observations.injections`` when recorded, else the one window of
    ``fault`` (older records, or a drill that failed before ``inject`` recorded its window)."""
    windows = [i for i in injections if isinstance(i, dict)] if isinstance(injections, list) else []
    if windows:
        return windows
    if fault.get("injected_at") is not None or fault.get("reverted_at") is not None:
        return [{k: fault.get(k) for k in ("kind", "where", "injected_at", "reverted_at", "revert_verified")}]
    return []


def _first_injection(record: Mapping[str, Any]) -> float | None:
    """Epoch seconds of the drill's first injection, or None when it injected nothing."""
    fault = record.get("fault") if isinstance(record.get("fault"), dict) else {}
    observations = record.get("observations") if isinstance(record.get("observations"), dict) else {}
    times = [_as_float(w.get("injected_at")) for w in _injections(fault, observations.get("injections"))]
    found = [t for t in times if t is not None]
    return min(found) if found else None


# --------------------------------------------------------------------------- #
# Vital signs ("What else broke")
# --------------------------------------------------------------------------- #

#: Mirrors harness.engine.vitals.HEALTHY_RATIO (not imported: the report reads evidence only and must
#: not need the Kubernetes client); a window below it is drawn as degraded.
_HEALTHY_RATIO = 0.99
_VITAL_WINDOWS = (("baseline", "Baseline"), ("fault", "During fault"), ("after", "After"))
_VITAL_SIGNS = {
    "api_read": "LIST through the API server, from the host",
    "api_write": "UPDATE through the API server, from the host",
    "service_name": "HTTP to a Service by its DNS name, from a pod (CoreDNS)",
    "service_clusterip": "HTTP to the same Service by ClusterIP, from a pod",
    "nodes_ready": "share of samples with every node Ready",
    "kube_system_restarts": "container restarts added in kube-system",
}


def _vitals_state(record: Mapping[str, Any]) -> tuple[str, list[str]]:
    """(state, flagged sign names) of a record's vital signs; state is ``"recorded"``,
    ``"not recorded"`` (no or empty ``vital_signs``: older records) or ``"error"``."""
    vs = record.get("vital_signs")
    if not isinstance(vs, dict) or not vs:
        return "not recorded", []
    signs = vs.get("signs")
    if not isinstance(signs, dict):
        return "error", []
    listed = vs.get("flagged") if isinstance(vs.get("flagged"), list) else []
    flagged = [str(n) for n in listed]
    flagged += [str(n) for n, v in signs.items() if isinstance(v, dict) and v.get("flagged") is True
                and str(n) not in flagged]
    order = list(_VITAL_SIGNS)
    flagged.sort(key=lambda n: (order.index(n) if n in order else len(order), n))
    return "recorded", flagged


def _ratio(value: Any) -> dict[str, Any] | None:
    """A window's ratio as a percentage for its cell; None: no sample in that window."""
    r = _as_float(value)
    if r is None:
        return None
    # Never round a degraded ratio up to 100 %: truncate to one decimal below 1.
    text = "100" if r >= 1 else f"{math.floor(r * 100 * 10) / 10:.1f}".removesuffix(".0")
    return {"text": text, "low": r < _HEALTHY_RATIO}


def _sign_order(signs: Mapping[str, Any]) -> list[str]:
    known = [n for n in _VITAL_SIGNS if n in signs]
    return known + sorted(str(n) for n in signs if n not in _VITAL_SIGNS)


def _restart_counts(value: Any) -> dict[str, Any]:
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}


def _restarts_text(counts: Mapping[str, Any]) -> str:
    total = sum(int(v) for v in counts.values() if isinstance(v, (int, float)) and not isinstance(v, bool))
    pods = len(counts)
    return f"{total} restart{'' if total == 1 else 's'} in {pods} pod{'' if pods == 1 else 's'}"


def _sign_status(sign: Mapping[str, Any], flagged: bool) -> tuple[str, str]:
    """(status, row class) of one vital sign: "flagged", "covered", "degraded", "not read",
    "ok" or "not assessed"."""
    degraded = sign.get("degraded") is True
    if flagged:
        return "flagged", "row-flagged"
    if degraded and sign.get("covered_by"):
        return "covered", "row-covered"
    if degraded:
        return "degraded", "row-covered"
    if sign.get("error"):
        return "not read", "row-warn"
    if "degraded" in sign:
        return "ok", "row-ok"
    return "not assessed", "row-other"


def _vitals_view(record: Mapping[str, Any], t0: float | None) -> dict[str, Any]:
    """The "What else broke" panel (report_vitals.html.j2): every vital sign of
    ``record["vital_signs"]`` (harness/engine/vitals.py) per window, its status, and the details of
    restarts and nodes. ``state`` is that of :func:`_vitals_state`."""
    vs = record.get("vital_signs")
    state, flagged_signs = _vitals_state(record)
    if state == "not recorded":
        return {"state": state}
    if state == "error":
        reason = vs.get("error") if isinstance(vs, dict) else None
        return {"state": state, "reason": _text(reason or "no signs recorded")}
    signs = vs["signs"]
    rows = []
    details: list[dict[str, Any]] = []
    first = _first_injection(record)
    for name in _sign_order(signs):
        sign = signs[name] if isinstance(signs[name], dict) else {}
        flagged = name in flagged_signs
        status, cls = _sign_status(sign, flagged)
        row = {
            "name": name, "description": _VITAL_SIGNS.get(name), "flagged": flagged, "cls": cls,
            "status": status, "reason": _text(sign.get("reason") or "degraded, and no expectation is about it"),
            "covered_by": _text(sign.get("covered_by")), "error": _text(sign.get("error")) if sign.get("error") else None,
            "restarts": None, "ratios": [],
        }
        if name == "kube_system_restarts" or "added" in sign:
            added, by_design = _restart_counts(sign.get("added")), _restart_counts(sign.get("by_design"))
            row["restarts"] = {"added": _restarts_text(added) if added else None,
                               "by_design": _restarts_text(by_design) if by_design else None}
            if added or by_design:
                details.append({
                    "kind": "restarts",
                    "added": _restarts_text(added) if added else None,
                    "added_pods": [(pod, _text(n)) for pod, n in sorted(added.items())],
                    "by_design": _restarts_text(by_design) if by_design else None,
                    "by_design_pods": [(pod, _text(n)) for pod, n in sorted(by_design.items())],
                })
        else:
            row["ratios"] = [_ratio(sign.get(w)) for w, _ in _VITAL_WINDOWS]
        if name == "nodes_ready" or isinstance(sign.get("transitions"), list):
            nodes = _node_transitions(sign.get("transitions"), first, t0)
            if nodes is not None:
                details.append(nodes)
        rows.append(row)
    windows = vs.get("windows") if isinstance(vs.get("windows"), dict) else {}
    spans = []
    for key, label in _VITAL_WINDOWS:
        parts = [f"{_rel(a, t0)} → {_rel(b, t0)}" for span in windows.get(key) or []
                 if isinstance(span, (list, tuple)) and len(span) == 2 for a, b in [span]]
        spans.append(f"{label.lower()} {', '.join(parts) if parts else 'none'}")
    return {"state": state, "threshold": _num(_HEALTHY_RATIO * 100), "windows": "; ".join(spans),
            "rows": rows, "details": details}


def _node_transitions(transitions: Any, first: float | None, t0: float | None) -> dict[str, Any] | None:
    """The not-Ready transitions of ``nodes_ready`` (and each node's return to Ready), with
    times since the first injection (since the drill start when nothing was injected); None
    when none was recorded."""
    items = [t for t in transitions if isinstance(t, dict)] if isinstance(transitions, list) else []
    if not items:
        return None
    origin, origin_label = (first, "first injection") if first is not None else (t0, "drill start")
    rows = []
    seen_bad: set[str] = set()
    nodes = []
    for t in items:
        node = str(t.get("node"))
        if node not in nodes:
            nodes.append(node)
        taints = t.get("taints") if isinstance(t.get("taints"), list) else []
        bad = t.get("ready") != "True" or bool(taints)
        if not bad and node not in seen_bad:
            continue  # first sight of a healthy node, or no change worth listing
        if bad:
            seen_bad.add(node)
        else:
            seen_bad.discard(node)
        ready = str(t.get("ready") or "no Ready condition")
        if t.get("ready") != "True" and t.get("reason"):  # who said so: the kubelet or the node lifecycle controller
            ready += f" ({t.get('reason')}{': ' + str(t.get('message')) if t.get('message') else ''})"
        rows.append({"node": node, "bad": bad, "ready": _cell(ready),
                     "taints": [_text(x) for x in taints], "since": _rel(t.get("t"), origin)})
    return {"kind": "nodes", "rows": rows, "since": origin_label, "seen": len(nodes),
            # The record keeps the first 50 changes.
            "capped": len(items) >= 50}


# --------------------------------------------------------------------------- #
# A drill's section (report_drill.html.j2)
# --------------------------------------------------------------------------- #


def _drill_t0(record: Mapping[str, Any], timeline: Mapping[str, list[dict[str, Any]]] | None) -> float | None:
    t0 = _as_float(record.get("started_at"))
    if t0 is not None:
        return t0
    candidates = [_as_float(p.get("started_at")) for p in record.get("phases") or [] if isinstance(p, dict)]
    fault = record.get("fault")
    if isinstance(fault, dict):
        candidates.append(_as_float(fault.get("injected_at")))
    for samples in (timeline or {}).values():
        candidates += [_as_float(s.get("t")) for s in samples]
    found = [c for c in candidates if c is not None]
    return min(found) if found else None


def _value(value: Any, unit: Any = None) -> dict[str, str]:
    """A measured/observed value for the ``value`` macro: numbers with their unit, structures as
    JSON (kind "json"), None as not measured (kind "missing")."""
    if value is None:
        return {"kind": "missing", "text": ""}
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, float)):
        text = _num(value)
    elif isinstance(value, (dict, list)):
        return {"kind": "json", "text": _json_compact(value)}
    else:
        text = str(value)
    if unit and not isinstance(value, bool):
        text = f"{text} {unit}"
    return {"kind": "text", "text": text}


def _time(epoch: Any, t0: float | None) -> dict[str, str] | None:
    """A time since the drill start and its UTC time (the ``time_cell`` macro); None: no time."""
    if _as_float(epoch) is None:
        return None
    return {"rel": _rel(epoch, t0), "utc": _utc(epoch)}


def _where_items(where: Any) -> list[str]:
    items = where if isinstance(where, list) else [where] if where not in (None, "", []) else []
    return [_text(_json_compact(w) if isinstance(w, (dict, list)) else w) for w in items]


def _sources(source: Any) -> list[dict[str, str | None]]:
    """The claim's sources: title, a link only for an http(s) URL, the URL as text, the section."""
    items = source if isinstance(source, list) else [source] if source else []
    out = []
    for s in items:
        if isinstance(s, str):
            s = {"title": s, "url": s if _safe_href(s) else None}
        if not isinstance(s, dict):
            continue
        out.append({
            "title": _text(s.get("title") or s.get("url") or "source"),
            "href": _safe_href(s.get("url")),
            "url": _text(s.get("url")) if s.get("url") else None,
            "section": _text(s.get("section")) if s.get("section") else None,
        })
    return out


def _fault_view(fault: Any, t0: float | None, windows: int) -> dict[str, Any] | None:
    """The Fault table (None: no fault recorded); ``windows`` is how many injection windows there were."""
    if not isinstance(fault, dict):
        return None
    params = fault.get("params")
    injected = _as_float(fault.get("injected_at"))
    reverted = _as_float(fault.get("reverted_at"))
    if injected is not None and reverted is not None:
        window = {"state": "reverted", "injected": _utc(injected), "reverted": _utc(reverted),
                  "injected_rel": _rel(injected, t0), "reverted_rel": _rel(reverted, t0),
                  "length": _num(reverted - injected)}
    elif injected is not None:
        window = {"state": "not reverted", "injected": _utc(injected), "injected_rel": _rel(injected, t0)}
    else:
        window = {"state": "not injected"}
    return {
        "kind": _text(fault.get("kind") or "unknown"),
        "method": _text(fault.get("method") or "—"),
        "params": [(str(k), _value(v)) for k, v in params.items()] if isinstance(params, dict) else [],
        "where": _where_items(fault.get("where")) if fault.get("where") else [],
        "window": window,
        "verified": fault.get("revert_verified") is True,
        "windows": windows,
    }


def _extra(key: str, value: Any) -> dict[str, Any]:
    """One extra key of an injection window (the fault's own evidence), for the ``extra`` macro:
    ``{node: seconds}`` as ``node 0.26 s`` (kind "kv"), ``{node: [log lines]}`` (e.g.
    ``restore_journal``, kind "journal") and anything long collapsed (``collapsed``)."""
    unit = " s" if key.endswith("_seconds") else ""
    if isinstance(value, dict) and value and all(isinstance(v, list) for v in value.values()):
        entries = [{"name": str(k), "lines": len(v), "text": "\n".join(str(line) for line in v)}
                   for k, v in value.items()]
        return {"kind": "journal", "key": key, "collapsed": True, "entries": entries,
                "lines": sum(len(v) for v in value.values())}
    if isinstance(value, dict) and value and all(
        v is None or isinstance(v, (str, int, float, bool)) for v in value.values()
    ):
        items = [(str(k), f"{_num(v)}{unit}" if _as_float(v) is not None else "—" if v is None else str(v))
                 for k, v in value.items()]
        return {"kind": "kv", "key": key, "collapsed": False, "pairs": items}
    if isinstance(value, list) and value and all(isinstance(v, (str, int, float)) for v in value):
        text = ", ".join(str(v) for v in value)
        if len(text) > 160:
            return {"kind": "list", "key": key, "collapsed": True, "count": len(value),
                    "text": "\n".join(str(v) for v in value)}
        return {"kind": "text", "key": key, "collapsed": False, "text": text}
    if isinstance(value, (dict, list)):
        text = _json_compact(value)
        if len(text) > 160:
            return {"kind": "json", "key": key, "collapsed": True,
                    "text": json.dumps(value, indent=2, sort_keys=True, default=str)}
        return {"kind": "code", "key": key, "collapsed": False, "text": text}
    shown = _num(value) + unit if _as_float(value) is not None else value
    return {"kind": "text", "key": key, "collapsed": False, "text": _text("—" if shown is None else shown)}


def _injection_rows(windows: Sequence[Mapping[str, Any]], t0: float | None) -> list[dict[str, Any]]:
    """One row per injection window (see :func:`_injections`); times since the drill start."""
    rows = []
    for n, w in enumerate(windows, 1):
        injected, reverted = _as_float(w.get("injected_at")), _as_float(w.get("reverted_at"))
        verified = w.get("revert_verified") is True
        extras = sorted(
            (_extra(str(k), v) for k, v in w.items() if k not in _INJECTION_COLUMNS and v not in (None, [], {}, "")),
            key=lambda x: x["collapsed"],  # the collapsed (long) ones last
        )
        rows.append({
            "n": n,
            "ok": reverted is not None and verified,
            "kind": _text(w.get("kind") or "unknown"),
            "method": _text(w.get("method") or "—"),
            "where": _where_items(w.get("where")),
            "injected": _time(injected, t0),
            "revert_started": _time(w.get("revert_started_at"), t0),
            "reverted": _time(reverted, t0),
            "length": _num(reverted - injected) if injected is not None and reverted is not None else None,
            "verified": verified,
            "extras": extras,
        })
    return rows


def _expectation_rows(expectations: Any, t0: float | None) -> list[dict[str, Any]] | None:
    """A row per expectation entry (None: no expectations recorded)."""
    if not isinstance(expectations, list) or not expectations:
        return None
    rows = []
    for x in expectations:
        if not isinstance(x, dict):
            continue
        verdict = x.get("verdict")
        bound = x.get("bound_text")
        if not bound and isinstance(x.get("bound"), dict):
            b = x["bound"]
            bound = f"{b.get('op', '')} {b.get('value', '')} {x.get('unit') or ''}".strip()
        rows.append({
            "cls": "row-fail" if verdict in _FAILING else "row-pass" if verdict == "passed" else "row-other",
            "verdict": verdict,
            "name": _text(x.get("name")),
            "phase": _text(x.get("phase")) if x.get("phase") else None,
            "description": _text(x.get("description") or ""),
            "measured": _value(x.get("measured"), x.get("unit")),
            "bound": _text(bound or "—"),
            "became_true": _rel(x.get("became_true_at"), t0),
            "detail": _text(x.get("detail") or ""),
        })
    return rows


def _waits_view(record: Mapping[str, Any], t0: float | None) -> dict[str, Any] | None:
    """The drill's waits that did not hold or met errors on the way, with the last error (None: no
    waits recorded, a record from before kdrill recorded them)."""
    waits = record.get("waits")
    if not isinstance(waits, list):
        return None
    shown = [w for w in waits if isinstance(w, dict) and (w.get("ok") is not True or w.get("errors"))]
    return {
        "count": len(waits),
        "dropped": _text(record.get("waits_dropped") or "") or None,
        "rows": [{
            "held": w.get("ok") is True,
            "what": _text(w.get("what") or "—"),
            "where": _text(w.get("where")),
            "started": _rel(w.get("started_at"), t0),
            "took": _seconds(w.get("elapsed_seconds")),
            "timeout": _seconds(w.get("timeout_seconds")),
            "attempts": _text(w.get("attempts")),
            "errors": _text(w.get("errors")),
            "last_error": _text(w.get("last_error") or ""),
        } for w in shown],
    }


def _probe_rows(probes: Any, t0: float | None) -> list[dict[str, Any]] | None:
    """A row per probe summary (None: no probe summaries recorded)."""
    if not isinstance(probes, dict) or not probes:
        return None
    rows = []
    for name, p in probes.items():
        if not isinstance(p, dict):
            continue
        samples = p.get("samples")
        failures = p.get("failures")
        ratio = _as_float(p.get("success_ratio"))
        rows.append({
            "name": _text(name),
            "warn": not samples,
            "samples": _text(samples if samples is not None else "—"),
            "successes": _text(p.get("successes", "—")),
            "failures": _text(failures if failures is not None else "—"),
            "failed": isinstance(failures, int) and failures > 0,
            "ratio": "—" if ratio is None else f"{ratio * 100:.2f} %",
            "longest_gap": _seconds(p.get("longest_gap_seconds")),
            "p50": _seconds(p.get("latency_p50_seconds")),
            "p99": _seconds(p.get("latency_p99_seconds")),
            "sampled": (_rel(p.get("first_sample_at"), t0), _rel(p.get("last_sample_at"), t0)) if samples else None,
        })
    return rows


def _observation_rows(observations: Any) -> list[dict[str, Any]] | None:
    """A row per observation (None: none recorded); injection windows are only counted here."""
    if not isinstance(observations, dict) or not observations:
        return None
    rows = []
    for k, v in observations.items():
        if k == "injections" and isinstance(v, list) and v:
            rows.append({"key": str(k), "kind": "injections", "count": len(v)})
        elif k == "blast_radius" and isinstance(v, dict) and v:
            # Shown once, in its table (cut and counted there); the record file holds it whole.
            rows.append({"key": str(k), "kind": "value", "value": _value("in the Blast radius table above; the record holds it whole")})
        elif isinstance(v, (dict, list)):
            rows.append({"key": str(k), "kind": "json", "text": json.dumps(v, indent=2, sort_keys=True, default=str)})
        else:
            rows.append({"key": str(k), "kind": "value", "value": _value(v)})
    return rows


def _blast_radius_rows(observations: Any) -> list[dict[str, Any]] | None:
    """The webhook blast-radius map (observation ``blast_radius``: backend -> its writes), a row
    per backend and write: outcome with its latency and the webhook the rejection named, beside
    what the configuration predicted and why; a backend not taken down is one row saying why.
    None when the record has no map; anything malformed is shown as text, said to be malformed,
    never trusted; every cell at most :data:`CELL_CHARS` characters, at most
    :data:`TABLE_MAX_ROWS` rows."""
    blast = observations.get("blast_radius") if isinstance(observations, dict) else None
    if not isinstance(blast, dict) or not blast:
        return None

    rows = []
    for backend, entry in blast.items():
        if not isinstance(entry, dict):
            rows.append({"backend": _cell(backend), "write": "", "malformed": _cell(entry)})
            continue
        writes = entry.get("writes")
        if entry.get("not_drilled"):
            rows.append({"backend": _cell(backend), "write": "", "not_drilled": _cell(entry["not_drilled"])})
            if not writes:
                continue
            # Not taken down, yet answers recorded: shown, never hidden behind the "not taken down".
            rows.append({"backend": _cell(backend), "write": "", "malformed": "writes recorded for a backend "
                         "said not to be taken down"})
        if not isinstance(writes, dict) or not writes:
            rows.append({"backend": _cell(backend), "write": "", "malformed": "no writes: " + _cell(writes)})
            continue
        for name, w in writes.items():
            if not isinstance(w, dict) or not isinstance(w.get("outcome"), str):
                rows.append({"backend": _cell(backend), "write": _cell(name), "malformed": _cell(w)})
                continue
            outcome, predicted = w["outcome"], w.get("predicted")
            if predicted is not None and not isinstance(predicted, str):
                rows.append({"backend": _cell(backend), "write": _cell(name), "malformed": "prediction "
                             + _cell(predicted) + " is not text"})
                continue
            seconds = _as_float(w.get("seconds"))
            rows.append({"backend": _cell(backend), "write": _cell(name), "outcome": _cell(outcome),
                         "seconds": _seconds(seconds) if seconds is not None and 0 <= seconds < 1e6 else
                                    ("—" if w.get("seconds") is None else "not a duration: " + _cell(w.get("seconds"))),
                         "webhook": _cell(w.get("webhook") or ""),
                         "predicted": _cell(predicted if predicted is not None else "cannot tell"),
                         "differs": predicted is not None and outcome != predicted,
                         "kind": ", ".join(k for k, flag in (("platform's own", w.get("system")),
                                                             ("webhook's repair", w.get("repair"))) if flag is True),
                         "why": _cell(w.get("why") or "")})
    return _capped(rows, "writes")


def _evidence_files(run_dir: Path, record_path: Path, record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The record and the files it names, each with whether it is in the run directory."""
    files = record.get("evidence_files")
    entries = [("record", record_path.name)]
    if isinstance(files, dict):
        entries += [(str(k), str(v)) for k, v in files.items() if isinstance(v, str)]
    return [{"label": label, "name": name,
             "exists": (run_dir / name).is_file() and not name.startswith(("/", ".."))}
            for label, name in entries]


def _charts_view(record: Mapping[str, Any], timeline: dict[str, list[dict[str, Any]]],
                 t0: float) -> list[dict[str, Any]]:
    """A figure per probe (the record's probes, then any other in its timeline): name, sample
    counts and its chart."""
    probes = record.get("probes") if isinstance(record.get("probes"), dict) else {}
    names = list(probes) + [n for n in timeline if n not in probes]
    fault = record.get("fault") if isinstance(record.get("fault"), dict) else {}
    injected = _as_float(fault.get("injected_at"))
    window = (injected, _as_float(fault.get("reverted_at"))) if injected is not None else None
    observations = record.get("observations") if isinstance(record.get("observations"), dict) else {}
    injections = observations.get("injections") if isinstance(observations.get("injections"), list) else []
    earlier = [(a, b) for i in injections if isinstance(i, dict)
               and (a := _as_float(i.get("injected_at"))) is not None and (b := _as_float(i.get("reverted_at"))) is not None
               and a != injected]
    raw_phases = record.get("phases")
    phase_list = [p for p in raw_phases if isinstance(p, dict)] if isinstance(raw_phases, list) else []
    phases = [(str(p.get("name")), t) for p in phase_list if (t := _as_float(p.get("started_at"))) is not None]
    ends = [_as_float(record.get("finished_at"))] + [_as_float(p.get("ended_at")) for p in phase_list]
    t_end = max([t0 + 1.0] + [t for t in ends if t is not None])
    figures = []
    for name in names:
        samples = timeline.get(name, [])
        failed = sum(1 for smp in samples if smp.get("ok") is not True)
        figures.append({
            "probe": str(name),
            "counts": f"{len(samples)} samples, {failed} failed" if samples else "no samples",
            # The one piece of markup the templates insert as is: Markup built by timeline_svg
            # (its _el escapes every text and attribute value; the rest are numbers it computed).
            "svg": timeline_svg(name, samples, t0=t0, t_end=t_end, fault_window=window, phases=phases,
                                earlier_windows=earlier),
        })
    return figures


def _glance(record: Mapping[str, Any], windows: Sequence[Mapping[str, Any]], vitals_state: str,
            flagged: Sequence[str]) -> list[tuple[str, str]]:
    """The drill's one-line summary: (style, text) items; style "" (plain), "fail", "flag" or "muted"."""
    glance = [("", f"Expectations: {_tally(record.get('expectations'))}")]
    if any(w.get("injected_at") is not None for w in windows):
        bad = sum(1 for w in windows if w.get("reverted_at") is None or w.get("revert_verified") is not True)
        if len(windows) == 1:
            glance.append(("fail", "fault revert not verified") if bad else ("", "fault reverted and verified"))
        else:
            glance.append(("fail", f"{bad} of {len(windows)} injections: revert not verified") if bad
                          else ("", f"all {len(windows)} injections reverted and verified"))
    if flagged:
        glance.append(("flag", f"{len(flagged)} flagged vital sign{'s' if len(flagged) != 1 else ''}"))
    elif vitals_state == "recorded":
        glance.append(("", "vital signs: nothing flagged"))
    else:
        glance.append(("muted", f"vital signs {'not recorded' if vitals_state == 'not recorded' else 'not watched'}"))
    errors = record.get("errors")
    if isinstance(errors, list) and errors:
        glance.append(("fail", f"{len(errors)} error{'s' if len(errors) != 1 else ''}"))
    return glance


def _drill_view(run_dir: Path, record_path: Path, record: dict[str, Any]) -> dict[str, Any]:
    """Everything a drill's section shows (report_drill.html.j2 drill_section)."""
    timeline, _, timeline_problem = _load_timeline(run_dir, record_path, record)
    t0 = _drill_t0(record, timeline)
    observations = record.get("observations") if isinstance(record.get("observations"), dict) else {}
    fault = record.get("fault") if isinstance(record.get("fault"), dict) else {}
    windows = _injections(fault, observations.get("injections"))
    vitals_state, flagged = _vitals_state(record)
    case = record.get("case")
    claim = record.get("claim")
    errors = record.get("errors")
    scenario = record.get("scenario")
    replaced = record.get("replaced_measurements")
    return {
        "anchor": _anchor(record_path),
        "drill": None if record.get("drill") is None else str(record.get("drill")),
        "case": "" if case is None else str(case),
        "verdict": record.get("verdict"),
        "vitals_state": vitals_state,
        "flagged": flagged,
        "flag_reasons": [(n, _sign_reason(record, n)) for n in flagged],
        "heading": _text(record.get("title") or _drill_label(record)),
        "label": _drill_label(record),
        "started": _utc(record.get("started_at")),
        "finished": _utc(record.get("finished_at")),
        # Which cluster ran it: in a run across parallel clusters (harness/core/workers.py) each record names its own.
        "cluster_name": _text((record.get("cluster") or {}).get("name")) if isinstance(record.get("cluster"), dict)
        and (record.get("cluster") or {}).get("name") else None,
        "duration": _seconds(record.get("duration_seconds")),
        "kdrill_version": _text(record.get("kdrill_version") or "—"),
        "glance": _glance(record, windows, vitals_state, flagged),
        "claim": {"text": str(claim), "sources": _sources(record.get("source"))} if claim else None,
        "fault": _fault_view(record.get("fault"), t0, len(windows)),
        "timeline_problem": timeline_problem,
        "no_start": t0 is None,
        "figures": _charts_view(record, timeline or {}, t0) if t0 is not None and not timeline_problem else [],
        "expectations": _expectation_rows(record.get("expectations"), t0),
        "vitals": _vitals_view(record, t0),
        "probes": _probe_rows(record.get("probes"), t0),
        "observations": _observation_rows(record.get("observations")),
        "blast_radius": _blast_radius_rows(record.get("observations")),
        "replaced": _expectation_rows(replaced, t0) if isinstance(replaced, list) and replaced else None,
        "waits": _waits_view(record, t0),
        "errors": [_text(e) for e in errors] if isinstance(errors, list) else [],
        "injections": _injection_rows(windows, t0),
        "evidence": _evidence_files(run_dir, record_path, record),
        "scenario": json.dumps(scenario, indent=2, sort_keys=True, default=str) if scenario else None,
    }


def _unreadable_view(path: Path, reason: str) -> dict[str, Any]:
    """A record slot that does not hold a readable record: its file, why, its size."""
    return {"anchor": _anchor(path), "name": path.name, "reason": reason,
            "size": path.stat().st_size if path.is_file() else None}


# --------------------------------------------------------------------------- #
# Page
# --------------------------------------------------------------------------- #


@functools.lru_cache(maxsize=1)
def _environment() -> Environment:
    """The templates of harness/templates/report*.j2, autoescaped (every ``*.j2`` and ``*.html``)."""
    env = Environment(loader=PackageLoader("harness", "templates"), autoescape=select_autoescape(["html", "j2"]),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["verdict_class"] = _verdict_class
    return env


def render_report(run_dir: Path, *, seal: Mapping[str, Any] | None = None,
                  generated_at: datetime | None = None) -> str:
    """The HTML page for the run in ``run_dir`` (a ``reports/<run-id>/`` directory), as text.

    ``seal`` describes the seal the run gets right after rendering:
    ``{"public_key": PEM str, "fingerprint_sha256": hex str, "previous": {"run_id": str,
    "manifest_sha256": hex str} | None}`` (None: rendered outside a sealed run).
    ``generated_at`` (default now, UTC) is the time shown; with the same evidence, seal,
    time and kdrill version the page is the same bytes. Raises ``ReportError`` if ``run_dir``
    is not a directory or holds neither ``run.json`` nor any drill record slot.
    """
    run_dir = Path(run_dir)
    run = _load_run(run_dir)
    records = run.records
    when = generated_at or datetime.now(tz=timezone.utc)
    drills = [_drill_view(run_dir, path, record) for path, record in records]
    return _environment().get_template("report.html.j2").render(
        kdrill_version=__version__,
        run_id=_run_id(run),
        run=_run_view(run),
        seal=_seal_view(seal),
        cluster=_cluster_view(records),
        summary=_summary_view(records, run.unreadable),
        drills=drills,
        unreadable=[_unreadable_view(path, reason) for path, reason in run.unreadable],
        generated_at=_utc(when.timestamp()),
    )


def build_report(run_dir: Path, *, seal: Mapping[str, Any] | None = None,
                 generated_at: datetime | None = None) -> Path:
    """Writes :func:`render_report`'s page to ``<run_dir>/report.html``; returns its path.

    The file is written atomically (temporary file then rename) and is fully
    self-contained. Raises ``ReportError`` as ``render_report`` does, OSError
    when the file cannot be written.
    """
    page = render_report(run_dir, seal=seal, generated_at=generated_at)
    return write_text_atomic(Path(run_dir) / REPORT_NAME, page)


def _sign_reason(record: dict[str, Any], sign: str) -> str:
    """Why a vital sign is flagged, as the record says (older records: degraded, not covered)."""
    vitals = record.get("vital_signs") if isinstance(record.get("vital_signs"), dict) else {}
    signs = vitals.get("signs") if isinstance(vitals.get("signs"), dict) else {}
    entry = signs.get(sign) if isinstance(signs.get(sign), dict) else {}
    return str(entry.get("reason") or "degraded, and no expectation is about it")
