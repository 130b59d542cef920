"""How the report writes the values it shows: times, durations, numbers, table cells cut to size,
verdict classes, anchors and labels. Plain text only: the templates escape it.

Absolute times are UTC ISO-8601; times in a drill are seconds relative to its ``started_at``.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from harness.evidence.reading import as_float

FAILING_VERDICTS = frozenset({"failed", "error"})
CELL_CHARS = 300  # a record's strings are the drill's (or a forger's): a table cell shows this much
TABLE_MAX_ROWS = 500  # rows a table of the report shows; the rest is counted in a last row


def as_text(value: Any) -> str:
    """``value`` as text for the templates (which escape it): None is empty."""
    return "" if value is None else str(value)


def cell_text(value: Any) -> str:
    """``value`` as text of at most :data:`CELL_CHARS` characters (a list joined with ", " as far
    as it fits), marked when cut."""
    if isinstance(value, list):
        parts, size = [], 0
        for item in value:
            text = as_text(item)
            parts.append(text)
            size += len(text) + 2
            if size > CELL_CHARS:
                break
        text = ", ".join(parts) + (" …" if len(parts) < len(value) else "")
    else:
        text = as_text(value)
    return text if len(text) <= CELL_CHARS else text[:CELL_CHARS] + "… (cut)"


def capped_rows(rows: list[dict[str, Any]], what: str) -> list[dict[str, Any]]:
    """At most :data:`TABLE_MAX_ROWS` rows, the last saying how many more the record holds."""
    if len(rows) <= TABLE_MAX_ROWS:
        return rows
    return rows[:TABLE_MAX_ROWS] + [{"more": f"{len(rows) - TABLE_MAX_ROWS} more {what} not shown: the record holds them"}]


def utc_text(epoch: Any) -> str:
    """Epoch seconds as UTC ISO-8601 with milliseconds (``...T22:13:20.000Z``); "—" for no number,
    the value as given when it is out of a date's range."""
    t = as_float(epoch)
    if t is None:
        return "—"
    try:
        stamp = datetime.fromtimestamp(t, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return str(epoch)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def number_text(value: float) -> str:
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


def seconds_text(value: Any) -> str:
    """A duration in seconds as ``"1.5 s"``; "—" for no number."""
    t = as_float(value)
    return "—" if t is None else f"{number_text(t)} s"


def relative_text(epoch: Any, t0: float | None) -> str:
    """Epoch seconds as seconds since ``t0`` (``"+3 s"``, ``"−2 s"`` before it); "—" without both."""
    t = as_float(epoch)
    if t is None or t0 is None:
        return "—"
    return f"+{number_text(t - t0)} s" if t >= t0 else f"−{number_text(t0 - t)} s"


def compact_json(value: Any) -> str:
    """``value`` as one line of JSON with sorted keys (its ``str`` when it is not JSON-able)."""
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def verdict_class(verdict: Any) -> str:
    """The CSS class of a verdict: pass, fail, error, skip or unknown (the templates' filter)."""
    v = str(verdict).lower() if verdict is not None else ""
    return {"passed": "pass", "failed": "fail", "error": "error", "skipped": "skip", "refused": "skip",
            "not-run": "skip"}.get(v, "unknown")


def safe_href(url: Any) -> str | None:
    """``url`` when it is an http(s) URL, fit for a link; None otherwise (no javascript: links)."""
    if isinstance(url, str) and url.strip().lower().startswith(("https://", "http://")):
        return url.strip()
    return None


def drill_label(record: Mapping[str, Any]) -> str:
    """``drill`` or ``drill [case]``."""
    case = record.get("case")
    drill = str(record.get("drill"))
    return f"{drill} [{case}]" if case not in (None, "") else drill


def record_anchor(record_path: Path) -> str:
    """The HTML id of a record's section: ``drill-`` and its file stem, other characters as ``-``."""
    stem = record_path.name[: -len(".json")]
    return "drill-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in stem)


def tally_text(expectations: Any) -> str:
    """E.g. ``"2 of 3 passed"`` for a record's expectation list."""
    items = [x for x in expectations if isinstance(x, dict)] if isinstance(expectations, list) else []
    if not items:
        return "none recorded"
    passed = sum(1 for x in items if x.get("verdict") == "passed")
    return f"{passed} of {len(items)} passed"
