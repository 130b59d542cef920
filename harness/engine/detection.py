"""Would the team notice? Each alert a scenario's ``detection`` names, judged from what the
platform's own Prometheus recorded (harness/probes/alerts.py): fired within
``fires_within_seconds`` of the fault taking effect (the first injection's ``injected_at``) and
resolved within ``resolves_within_seconds`` of the revert (the last ``reverted_at``).

Outcomes, each with its verdict ("passed" only for the first):

- ``detected``: fired in time and resolved in time;
- ``undetected``: the platform has no alerting rule of that name, or it never fired;
- ``late``: it fired, after its bound;
- ``already firing``: it was firing when the fault took effect, so it cannot tell this failure;
- ``not resolved`` / ``resolved late``: it fired in time but was still firing at the end of the
  reading, or resolved after its bound.

Times are the ``ALERTS`` series' own, good to one rule evaluation (the profile's: 5 s) and one
sampled second; ``condition_after_seconds`` is when the rule's condition first held (its
pending state began, or it fired at once when its ``for:`` is 0), so a late alert says whether
the failure was slow to show or the rule slow to fire. Alerts that fired in the window without
being expected are listed as ``also_fired``: what else noticed.
"""

from __future__ import annotations

from typing import Any

from harness.probes.alerts import AlertInterval
from harness.spec.model import DetectionSpec

OUTCOMES = ("detected", "undetected", "late", "already firing", "not resolved", "resolved late")


def detection_window(injections: list[dict[str, Any]]) -> tuple[float, float | None] | None:
    """(injected_at of the first injection, reverted_at of the last, None when never reverted),
    or None when the drill injected nothing."""
    times = [i for i in injections if isinstance(i.get("injected_at"), (int, float))]
    if not times:
        return None
    return float(times[0]["injected_at"]), times[-1].get("reverted_at")


def reading_deadline(expected: list[DetectionSpec], injected_at: float, reverted_at: float | None,
                     slack_seconds: float) -> float:
    """Epoch seconds until which an alert may still fire or resolve within its bounds (plus
    ``slack_seconds`` for the reading itself)."""
    reverted = reverted_at if reverted_at is not None else injected_at
    latest = max([injected_at + d.fires_within_seconds for d in expected]
                 + [reverted + d.resolves_within_seconds for d in expected])
    return latest + slack_seconds


def judge_alert(spec: DetectionSpec, intervals: list[AlertInterval], rules: dict[str, float],
                injected_at: float, reverted_at: float | None) -> dict[str, Any]:
    """One expected alert's entry: ``{"alert", "outcome", "verdict", "why", "fires_within_seconds",
    "resolves_within_seconds", "for_seconds", "condition_after_seconds", "fired_after_seconds",
    "resolved_after_seconds"}`` (seconds; None where not measured). ``intervals`` are every
    alert's, from Prometheus; ``rules`` its alerting rules (name -> ``for:`` seconds)."""
    entry: dict[str, Any] = {"alert": spec.alert, "fires_within_seconds": spec.fires_within_seconds,
                             "resolves_within_seconds": spec.resolves_within_seconds,
                             "for_seconds": rules.get(spec.alert), "condition_after_seconds": None,
                             "fired_after_seconds": None, "resolved_after_seconds": None}
    if spec.alert not in rules:
        return _outcome(entry, "undetected", f"the platform's Prometheus has no alerting rule named {spec.alert}")
    firing = [i for i in intervals if i.alert == spec.alert and i.state == "firing"]
    if any(i.start <= injected_at and (i.end is None or i.end > injected_at) for i in firing):
        return _outcome(entry, "already firing", "it was firing when the fault took effect: it cannot tell this failure")
    after = [i for i in firing if i.start > injected_at]
    if not after:
        return _outcome(entry, "undetected", "it never fired")
    first = min(i.start for i in after)
    entry["fired_after_seconds"] = round(first - injected_at, 3)
    pending = [i.start for i in intervals if i.alert == spec.alert and i.state == "pending" and injected_at < i.start <= first]
    entry["condition_after_seconds"] = round((min(pending) if pending else first) - injected_at, 3)
    if first - injected_at > spec.fires_within_seconds:
        return _outcome(entry, "late", f"it fired {first - injected_at:.1f} s after the fault took effect, "
                                       f"later than {spec.fires_within_seconds:g} s")
    if any(i.end is None for i in after):
        return _outcome(entry, "not resolved", "it was still firing when the reading ended")
    resolved = max(i.end for i in after if i.end is not None)
    entry["resolved_after_seconds"] = round(resolved - (reverted_at if reverted_at is not None else injected_at), 3)
    if entry["resolved_after_seconds"] > spec.resolves_within_seconds:
        return _outcome(entry, "resolved late", f"it resolved {entry['resolved_after_seconds']:.1f} s after the revert, "
                                                f"later than {spec.resolves_within_seconds:g} s")
    return _outcome(entry, "detected", "")


def _outcome(entry: dict[str, Any], outcome: str, why: str) -> dict[str, Any]:
    entry.update(outcome=outcome, verdict="passed" if outcome == "detected" else "failed", why=why)
    return entry


def also_fired(expected: list[DetectionSpec], intervals: list[AlertInterval], injected_at: float,
               reverted_at: float | None) -> list[dict[str, Any]]:
    """The alerts not expected that fired after the fault took effect: ``[{"alert",
    "fired_after_seconds", "resolved_after_seconds", "labels"}]`` (the first firing of each; a
    resolution None while it still fired), in the order they fired."""
    names = {d.alert for d in expected}
    reverted = reverted_at if reverted_at is not None else injected_at
    out: dict[str, dict[str, Any]] = {}
    for i in sorted(intervals, key=lambda i: i.start):
        if i.state != "firing" or i.alert in names or i.start <= injected_at or i.alert in out:
            continue
        out[i.alert] = {"alert": i.alert, "fired_after_seconds": round(i.start - injected_at, 3),
                        "resolved_after_seconds": None if i.end is None else round(i.end - reverted, 3),
                        "labels": {k: v for k, v in i.labels.items() if k != "alertname"}}
    return list(out.values())


def already_firing(intervals: list[AlertInterval], injected_at: float) -> list[str]:
    """The names of the alerts firing when the fault took effect (the platform was not quiet)."""
    return sorted({i.alert for i in intervals if i.state == "firing" and i.start <= injected_at
                   and (i.end is None or i.end > injected_at)})


def judge_detection(expected: list[DetectionSpec], intervals: list[AlertInterval], rules: dict[str, float],
                    injected_at: float, reverted_at: float | None) -> dict[str, Any]:
    """The drill's detection: ``{"verdict": "passed" | "failed", "alerts": [judge_alert()],
    "also_fired": [...], "already_firing": [...]}``."""
    alerts = [judge_alert(spec, intervals, rules, injected_at, reverted_at) for spec in expected]
    return {"verdict": "passed" if all(a["verdict"] == "passed" for a in alerts) else "failed",
            "alerts": alerts, "also_fired": also_fired(expected, intervals, injected_at, reverted_at),
            "already_firing": already_firing(intervals, injected_at)}


# The delivery outcomes that told no one (the others: "delivered", and "unknown" when the watch was blind).
TOLD_NO_ONE = ("not delivered", "silenced", "muted", "inhibited")
POLL_MARGIN_SECONDS = 5.0  # a poll just before or after the firing could have been the one to see it


def _blind(alert: dict[str, Any], failed_at: list[float], injected_at: float, reverted_at: float | None) -> bool:
    """Whether a poll failed while ``alert`` fired (from its firing to its resolution, or on)."""
    start = injected_at + alert["fired_after_seconds"]
    resolved = alert["resolved_after_seconds"]
    end = None if resolved is None else (reverted_at if reverted_at is not None else injected_at) + resolved
    return any(start - POLL_MARGIN_SECONDS <= t and (end is None or t <= end + POLL_MARGIN_SECONDS) for t in failed_at)


def judge_delivery(detection: dict[str, Any], sightings: list[dict[str, Any]], injected_at: float,
                   reverted_at: float | None = None, failed_at: list[float] = ()) -> dict[str, Any]:
    """``detection`` (:func:`judge_detection`'s) with each alert that fired given ``delivery``:
    whether the team's Alertmanager (harness/probes/alertmanager.py, watched during the drill) held
    it active after the fault took effect: ``{"outcome": delivered | not delivered | silenced |
    muted | inhibited, "after_seconds" (from the fault, to the first poll that saw it active), "receivers",
    "why"}``. An alert not delivered fails, as does the detection: a rule that fires into a silence,
    an inhibition or nowhere tells no one. Only sightings of alerts that started after the fault
    count (``startsAt`` is when Prometheus saw it fire). One never seen while a poll failed
    (``failed_at``, epoch seconds) during its firing is ``unknown``: the watch was blind then (the
    API server it reads through was down, say), so nothing is claimed and its verdict stands."""
    for alert in detection["alerts"]:
        if alert["fired_after_seconds"] is None:
            continue
        mine = [s for s in sightings if s["alert"] == alert["alert"]
                and (s["starts_at"] is None or s["starts_at"] > injected_at - 1.0)]
        active = [s for s in mine if s["state"] == "active"]
        if active:
            first = min(active, key=lambda s: s["seen_at"])
            delivery = {"outcome": "delivered", "after_seconds": round(first["seen_at"] - injected_at, 3),
                        "receivers": first["receivers"], "why": ""}
        elif any(s["silenced_by"] for s in mine):
            delivery = {"outcome": "silenced", "after_seconds": None, "receivers": [],
                        "why": "Alertmanager held it, silenced: no one was told"}
        elif any(s.get("muted_by") for s in mine):
            delivery = {"outcome": "muted", "after_seconds": None, "receivers": [],
                        "why": "Alertmanager held it, muted by a time interval: no one was told"}
        elif any(s["inhibited_by"] for s in mine):
            delivery = {"outcome": "inhibited", "after_seconds": None, "receivers": [],
                        "why": "Alertmanager held it, inhibited by another alert: no one was told of it"}
        elif _blind(alert, failed_at, injected_at, reverted_at):
            delivery = {"outcome": "unknown", "after_seconds": None, "receivers": [],
                        "why": "Alertmanager could not be read while it fired: whether it arrived is not known"}
        else:
            delivery = {"outcome": "not delivered", "after_seconds": None, "receivers": [],
                        "why": "Alertmanager was read throughout its firing and never listed it"}
        alert["delivery"] = delivery
        if delivery["outcome"] in TOLD_NO_ONE and alert["verdict"] == "passed":
            alert.update(verdict="failed", why=delivery["why"])
    detection["verdict"] = "passed" if all(a["verdict"] == "passed" for a in detection["alerts"]) else "failed"
    return detection
