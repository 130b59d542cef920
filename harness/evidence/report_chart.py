"""A probe's timeline chart in the report: inline SVG, drawn from the probe's samples with the
drill's fault windows and phases over it.

The one piece of markup the report builds outside its templates; every text and attribute value
in it is escaped here (markupsafe) and the rest are numbers computed here. Times on the chart are
seconds since the drill's start, latencies seconds.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from markupsafe import Markup, escape

from harness.evidence.reading import as_float
from harness.evidence.report_format import number_text

#: Most marks drawn per probe chart; longer timelines are bucketed in time.
MAX_MARKS = 2000

# The chart's geometry in SVG units: width; left, right and top margins; the status band's
# height, the gap below it, the latency band's height and the bottom margin.
_W = 1100.0
_ML, _MR, _MT = 64.0, 18.0, 38.0
_BAND_H, _GAP, _LAT_H, _MB = 16.0, 12.0, 104.0, 30.0
_H = _MT + _BAND_H + _GAP + _LAT_H + _MB
_PW = _W - _ML - _MR  # the plot's width
_X_RIGHT = _ML + _PW
_BAND_Y = _MT
_LAT_TOP = _MT + _BAND_H + _GAP
_LAT_BOTTOM = _LAT_TOP + _LAT_H
_LAT_MIDDLE = (_LAT_TOP + _LAT_BOTTOM) / 2
_FONT = "system-ui, -apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif"


@dataclass(frozen=True)
class _Sample:
    """One drawn point: a raw sample, or a time bucket of ``count`` samples."""

    t: float
    ok: bool
    ok_latency: float | None  # slowest successful sample, seconds
    fail_latency: float | None  # slowest failed sample, seconds
    count: int = 1


@dataclass(frozen=True)
class _Frame:
    """The chart's axes: ``x_min`` to ``x_max`` seconds since ``t0`` (epoch seconds) across the
    plot; 0 to ``lat_max`` seconds of latency up the latency band, a grid line every ``lat_step``."""

    t0: float
    x_min: float
    x_max: float
    lat_max: float
    lat_step: float

    def x(self, t_rel: float) -> float:
        """The x coordinate of ``t_rel`` seconds since ``t0``."""
        return _ML + (t_rel - self.x_min) / (self.x_max - self.x_min) * _PW

    def y(self, latency: float) -> float:
        """The y coordinate of ``latency`` seconds (the band's top for anything slower than ``lat_max``)."""
        return _LAT_BOTTOM - min(latency / self.lat_max, 1.0) * _LAT_H


def _nice_step(span: float, target: int) -> float:
    """A round step (1, 2, 2.5 or 5 times a power of ten) cutting ``span`` into about ``target`` parts."""
    raw = span / max(target, 1)
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _clean_samples(raw: Iterable[Mapping[str, Any]]) -> tuple[list[_Sample], int]:
    """The samples with a numeric time, in time order, and how many had none (dropped)."""
    samples: list[_Sample] = []
    dropped = 0
    for s in raw:
        t = as_float(s.get("t"))
        if t is None:
            dropped += 1
            continue
        ok = s.get("ok") is True
        latency = as_float(s.get("latency_seconds"))
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
    """A text label of font size 10 at (``x``, ``y``)."""
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
    frame = _frame(samples, drawn, t0, t_end, fault_window)
    failed = sum(1 for s in samples if not s.ok)
    parts = [_el("title", f"probe {probe}: {len(samples)} samples, {failed} failed")]
    parts += _fault_windows(frame, fault_window, earlier_windows)  # first, so everything else is drawn over them
    parts += _time_axis(frame)
    parts += _latency_axis(frame)
    if drawn:
        parts += _sample_marks(drawn, frame)
    else:
        parts.append(_el(
            "text", "no samples recorded for this probe", class_="no-samples", x=_ML + _PW / 2, y=_LAT_MIDDLE,
            text_anchor="middle", font_size=13, fill="#6b7280",
        ))
    parts += _phase_markers(frame, phases)
    notes = _notes(len(samples), len(drawn), dropped)
    if notes:
        parts.append(_label(_ML, _LAT_BOTTOM + 27, "; ".join(notes), "start", "#6b7280", class_="chart-note"))
    return _el(
        "svg", Markup("").join(parts), class_="timeline", data_probe=probe, data_samples=len(samples),
        data_drawn=len(drawn), data_note="; ".join(notes) or None, xmlns="http://www.w3.org/2000/svg",
        viewBox=f"0 0 {_W:.0f} {_H:.0f}", width="100%", role="img", font_family=_FONT,
    )


def _frame(samples: list[_Sample], drawn: list[_Sample], t0: float, t_end: float,
           fault_window: tuple[float, float | None] | None) -> _Frame:
    """The axes: time from the earlier of the drill's start and the first sample to the latest of
    its end, the last sample and the fault window (at least 1 s); latency from 0 to a round step
    at or above the slowest drawn sample."""
    rel = [s.t - t0 for s in samples]
    x_min = min([0.0] + rel[:1])
    x_max = max([t_end - t0, 1.0] + rel[-1:])
    if fault_window is not None:
        x_max = max(x_max, fault_window[0] - t0, (fault_window[1] or t0) - t0)
    x_max = max(x_max, x_min + 1.0)
    lats = [v for smp in drawn for v in (smp.ok_latency, smp.fail_latency) if v is not None]
    lat_max = max(lats) if lats else 0.0
    lat_step = _nice_step(lat_max, 4) if lat_max > 0 else 0.25
    return _Frame(t0=t0, x_min=x_min, x_max=x_max, lat_max=max(lat_step * math.ceil(lat_max / lat_step), lat_step),
                  lat_step=lat_step)


def _window_rect(x1: float, x2: float, tooltip: Markup) -> Markup:
    """A shaded fault window from ``x1`` to ``x2`` over both bands."""
    return _el(
        "rect", tooltip, class_="fault-window", x=x1, y=_BAND_Y - 4.0, width=max(x2 - x1, 1.0),
        height=_LAT_BOTTOM - _BAND_Y + 4, fill="#f59e0b", fill_opacity=0.16,
        stroke="#d97706", stroke_opacity=0.5, stroke_dasharray="3 2",
    )


def _fault_windows(frame: _Frame, fault_window: tuple[float, float | None] | None,
                   earlier_windows: Sequence[tuple[float, float]]) -> list[Markup]:
    """The earlier fault windows, then the drill's fault window with its label (to the chart's
    end when it was not reverted); times are epoch seconds."""
    t0, parts = frame.t0, []
    for start, end in earlier_windows:
        x1, x2 = frame.x(max(start - t0, frame.x_min)), frame.x(min(end - t0, frame.x_max))
        tooltip = _el("title", f"earlier fault window: +{number_text(start - t0)} s to +{number_text(end - t0)} s")
        parts.append(_window_rect(x1, x2, tooltip))
    if fault_window is not None:
        f_start = fault_window[0] - t0
        f_end = (fault_window[1] - t0) if fault_window[1] is not None else frame.x_max
        x1, x2 = frame.x(max(f_start, frame.x_min)), frame.x(min(f_end, frame.x_max))
        label = "fault window" if fault_window[1] is not None else "fault (not reverted)"
        tooltip = _el("title", f"{label}: +{number_text(f_start)} s to +{number_text(f_end)} s")
        parts.append(_window_rect(x1, x2, tooltip))
        parts.append(_label(x2 - 4, _LAT_BOTTOM - 6, label, "end", "#b45309", class_="fault-label"))
    return parts


def _time_axis(frame: _Frame) -> list[Markup]:
    """Grid lines and labels in seconds since the drill started, and the axis' title."""
    parts = []
    step = _nice_step(frame.x_max - frame.x_min, 10)
    tick = math.ceil(frame.x_min / step) * step
    while tick <= frame.x_max + 1e-9:
        x = frame.x(tick)
        parts.append(_el("line", class_="grid", x1=x, y1=_LAT_TOP, x2=x, y2=_LAT_BOTTOM, stroke="#e5e7eb"))
        parts.append(_label(x, _LAT_BOTTOM + 14, number_text(tick), "middle"))
        tick += step
    parts.append(_label(_X_RIGHT, _LAT_BOTTOM + 27, "seconds since drill start", "end", "#6b7280"))
    return parts


def _latency_axis(frame: _Frame) -> list[Markup]:
    """Grid lines and labels in seconds of latency with the axis' title, the status band's label
    and background, and the line under the plot."""
    parts = []
    value = 0.0
    while value <= frame.lat_max + 1e-12:
        y = frame.y(value)
        parts.append(_el("line", class_="grid", x1=_ML, y1=y, x2=_X_RIGHT, y2=y, stroke="#eef0f3"))
        parts.append(_label(_ML - 6, y + 3, number_text(value), "end"))
        value += frame.lat_step
    rotate = f"rotate(-90 14 {_LAT_MIDDLE:.1f})"
    parts.append(_label(14, _LAT_MIDDLE, "latency (s)", "middle", "#1d4ed8", transform=rotate))
    parts.append(_label(_ML - 6, _BAND_Y + 12, "status", "end"))
    parts.append(_el("rect", class_="band-bg", x=_ML, y=_BAND_Y, width=_PW, height=_BAND_H, fill="#f3f4f6"))
    parts.append(_el("line", x1=_ML, y1=_LAT_BOTTOM, x2=_X_RIGHT, y2=_LAT_BOTTOM, stroke="#9ca3af"))
    return parts


def _phase_markers(frame: _Frame, phases: Sequence[tuple[str, float]]) -> list[Markup]:
    """Each phase on the chart (``(name, started_at)``, epoch seconds) as a labelled vertical line,
    labels staggered over up to 3 rows."""
    parts = []
    row_end = [-math.inf, -math.inf, -math.inf]
    for name, started in phases:
        t_rel = started - frame.t0
        if not (frame.x_min <= t_rel <= frame.x_max):
            continue
        x = frame.x(t_rel)
        row = next((r for r, end in enumerate(row_end) if end < x), len(row_end) - 1)
        row_end[row] = x + 6.2 * len(name) + 10  # rough label width at font size 10
        y_label = 11.0 + 11 * row
        parts.append(_el(
            "line", class_="phase-marker", x1=x, y1=y_label + 2, x2=x, y2=_LAT_BOTTOM,
            stroke="#6d28d9", stroke_width=1, stroke_dasharray="4 3",
        ))
        tooltip = _el("title", f"phase {name} starts at +{number_text(t_rel)} s")
        parts.append(_el(
            "text", escape(name) + tooltip, class_="phase-label", x=x + 3, y=y_label, font_size=10, fill="#5b21b6",
        ))
    return parts


def _notes(samples: int, drawn: int, dropped: int) -> list[str]:
    """What the chart leaves out or merges, given how many samples there were, were drawn (marks)
    and were dropped (no numeric time)."""
    notes = []
    if drawn < samples:
        notes.append(
            f"{samples} samples drawn as {drawn} time buckets: "
            "a bucket is red if any of its samples failed; latency is its maximum"
        )
    if dropped:
        notes.append(f"{dropped} samples without a numeric time not drawn")
    return notes


def _sample_marks(drawn: list[_Sample], frame: _Frame) -> list[Markup]:
    """The status band's marks and the latency line and points for ``drawn``."""
    # Each sample covers the time until the next one, capped at three typical intervals.
    gaps = [b.t - a.t for a, b in zip(drawn, drawn[1:]) if b.t > a.t]
    typical = statistics.median(gaps) if gaps else 1.0
    return _status_marks(drawn, frame, typical) + _latency_marks(drawn, frame, typical)


def _status_marks(drawn: list[_Sample], frame: _Frame, typical: float) -> list[Markup]:
    """The status band: a green or red mark per run of samples with the same outcome; a sample
    covers the time until the next one, at most ``3 * typical`` seconds, so sampling gaps stay
    visible."""
    t0 = frame.t0
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
        x = frame.x(start)
        width = max(frame.x(end) - x, 1.0) + 0.5  # overlap neighbours: no hairline seams
        marks[ok].append(_el("rect", x=x, y=_BAND_Y, width=width, height=_BAND_H))
    return [_el("g", Markup("").join(marks[ok]), class_=cls, fill=colour, shape_rendering="crispEdges")
            for ok, cls, colour in ((True, "marks marks-ok", "#16a34a"), (False, "marks marks-fail", "#dc2626"))
            if marks[ok]]


def _latency_marks(drawn: list[_Sample], frame: _Frame, typical: float) -> list[Markup]:
    """The latency of successful samples as a line, broken where no successful sample was taken
    or sampling paused for more than ``3 * typical`` seconds (isolated samples are points); failed
    samples that recorded a latency (e.g. a timeout) are red points."""
    parts: list[Markup] = []
    lines: list[list[tuple[float, float]]] = []
    fail_points: list[Markup] = []
    prev_t: float | None = None
    for smp in drawn:
        x = frame.x(smp.t - frame.t0)
        if smp.fail_latency is not None:
            fail_points.append(_el("circle", cx=x, cy=frame.y(smp.fail_latency), r=2.2))
        if smp.ok_latency is None:
            prev_t = None
            continue
        if prev_t is None or smp.t - prev_t > 3 * typical:
            lines.append([])
        lines[-1].append((x, frame.y(smp.ok_latency)))
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
