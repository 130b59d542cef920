"""The report's views of detection: the failure matrix first (harness/evidence/failure_matrix.py),
and each drill's "Would the team notice?" panel from its record's ``detection``
(harness/plugin/detection.py). Values are shown as the record holds them; nothing is inferred."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from harness.evidence.failure_matrix import matrix_rows, objects
from harness.evidence.reading import real_number
from harness.evidence.report_format import as_text, record_anchor

DETECTION_CLASSES = {"detected": "ok-text", "undetected": "fail-text", "error": "fail-text", "not checked": "muted",
                    "none expected": "muted"}


def matrix_view(records: list[tuple[Path, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """The matrix's rows with each drill's anchor and its detection's CSS class."""
    rows = matrix_rows([record for _, record in records])
    return [{**row, "anchor": record_anchor(path), "cls": DETECTION_CLASSES.get(row["detection_verdict"], "muted"),
             "recovery": "—" if row["recovery_seconds"] is None else f"{row['recovery_seconds']:.0f} s"}
            for (path, _), row in zip(records, rows)]


def _seconds(value: Any) -> str:
    number = real_number(value)
    return "—" if number is None else f"{number:.1f} s"


def _notifications(value: Any) -> str:
    """What Prometheus handed its Alertmanagers from the fault on, in words ("" when not read)."""
    if not isinstance(value, dict):
        return ""
    if "error" in value:
        return f"not read: {as_text(value['error'])}"
    counts = {k: real_number(value.get(k)) for k in ("sent", "errors", "dropped")}
    return ", ".join(f"{'—' if n is None else f'{n:g}'} {k}" for k, n in counts.items())


def _delivery_cell(delivery: Any) -> dict[str, str]:
    """The "In Alertmanager" cell: delivered after N s to its receivers, or how it was not."""
    if not isinstance(delivery, dict):
        return {"delivery": "—", "delivery_cls": "muted"}
    if delivery.get("outcome") == "delivered":
        receivers = ", ".join(str(r) for r in delivery.get("receivers") or []) or "no receiver"
        return {"delivery": as_text(f"after {_seconds(delivery.get('after_seconds'))}, to {receivers}"),
                "delivery_cls": "ok-text"}
    return {"delivery": as_text(delivery.get("outcome")), "delivery_cls": "fail-text"}


def detection_view(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """``{"verdict", "why", "source", "alerts": [...], "also_fired": [...], "already_firing"}`` as
    text, or None when the record has no detection."""
    d = record.get("detection")
    if not isinstance(d, dict) or not d:
        return None
    source = d.get("source") if isinstance(d.get("source"), dict) else {}
    alerts = [{"alert": as_text(a.get("alert")), "outcome": as_text(a.get("outcome")),
               "cls": "ok-text" if a.get("outcome") == "detected" else "fail-text",
               "fired": _seconds(a.get("fired_after_seconds")), "fires_within": _seconds(a.get("fires_within_seconds")),
               "condition": _seconds(a.get("condition_after_seconds")), "for": _seconds(a.get("for_seconds")),
               "resolved": _seconds(a.get("resolved_after_seconds")),
               "resolves_within": _seconds(a.get("resolves_within_seconds")), "why": as_text(a.get("why") or ""),
               **_delivery_cell(a.get("delivery"))}
              for a in objects(d.get("alerts"))]
    also = [{"alert": as_text(a.get("alert")), "fired": _seconds(a.get("fired_after_seconds")),
             "resolved": _seconds(a.get("resolved_after_seconds")),
             "labels": as_text(", ".join(f"{k}={v}" for k, v in sorted(a["labels"].items(), key=str)))
             if isinstance(a.get("labels"), dict) else ""}
            for a in objects(d.get("also_fired"))]
    return {"verdict": as_text(d.get("verdict")), "why": as_text(d.get("why") or ""),
            "source": as_text(f"{source.get('prometheus')} (named by {source.get('named_by')})") if source else "",
            "alertmanager": as_text(source.get("alertmanager") or ""),
            "alerts": alerts, "also_fired": also,
            "notifications": _notifications(d.get("notifications")),
            "already_firing": [as_text(a) for a in d.get("already_firing")] if isinstance(d.get("already_firing"), list)
            else []}
