"""Judging a data-only drill: each expectation's ``measure`` computed over its probe's samples in
its window (narrowed when it says so: :func:`narrow`), or read from a fact the fault measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.core.timeline import Timeline
from harness.engine import measures


@dataclass(frozen=True)
class Findings:
    """What a drill found, for its expectations' measures."""
    fault: Any  # the fault that ran: its kind and the facts it offers
    bounds: dict[str, tuple[float, float]]  # window -> (start, stop), epoch seconds
    timelines: dict[str, Timeline]  # probe name -> its timeline
    ran: dict[str, list[dict]]  # window -> what its actions did (Actions.results)
    marks: dict[str, float | None]  # the fault's marks: name -> epoch seconds
    facts: dict[str, Any]  # the fault's facts: name -> value
    facts_error: str | None  # why the facts could not be read, or None


def narrow(how: dict, start: float, stop: float, ran: list[dict],
           marks: dict[str, float | None] | None = None) -> tuple[float, float, str]:
    """``(start, stop)`` of a measure's window (epoch seconds) narrowed by its ``from_action`` and
    ``until_action`` to when those actions ran (``ran``: the window's action results), by its
    ``from_mark`` and ``until_mark`` to the fault's marks (``marks``: name -> epoch seconds), and
    then started ``settle_seconds`` later; and a phrase saying so. Raises ValueError when a named
    action did not run, or failed, when a named mark is not known or lies outside the window, and
    when the narrowed window ends before it starts."""
    results = {r["name"]: r for r in ran}
    said, bounds = [], (start, stop)
    for key, word in (("from_mark", "from"), ("until_mark", "until")):
        if key not in how:
            continue
        at = (marks or {}).get(how[key])
        if at is None:
            raise ValueError(f"the fault did not mark {how[key]}, so its {how['window']} window has no {word} point")
        if not bounds[0] <= at <= bounds[1]:
            raise ValueError(f"the fault's mark {how[key]} is outside the {how['window']} window "
                             f"({at - bounds[0]:+.1f} s from its start, which is {bounds[1] - bounds[0]:.1f} s long)")
        start, stop = (at, stop) if key == "from_mark" else (start, at)
        said.append(f"{word} mark {how[key]}")
    for key, word in (("from_action", "from"), ("until_action", "until")):
        if key not in how:
            continue
        result = results.get(how[key]) or {}
        if result.get("at") is None or not result.get("ok"):
            raise ValueError(f"action {how[key]} did not run as declared ({result.get('detail', 'not run')}), so "
                             f"its {how['window']} window has no {word} point")
        at = min(max(result["at"], bounds[0]), bounds[1])  # inside the window it narrows
        if key == "from_action":
            start = at
        else:
            stop = at
        said.append(f"{word} action {how[key]}")
    if start > stop:
        raise ValueError(f"its {how['window']} window narrowed {' '.join(said)} ends {start - stop:.1f} s before it "
                         "starts")
    if how.get("settle_seconds"):
        start = min(start + float(how["settle_seconds"]), stop)
        said.append(f"after {float(how['settle_seconds']):g} s to settle")
    return start, stop, (", " + " ".join(said)) if said else ""


def measure_expectation(drill, expectation, found: Findings) -> None:
    """Record ``expectation``'s measure through ``drill.measure``, or, when it cannot be measured
    (no fact, no samples, a window that cannot be narrowed, no first success), an error through
    ``drill.expectations.error`` saying why."""
    how: dict[str, Any] = expectation.measure or {}
    if "fact" in how:
        value = found.facts.get(how["fact"])
        if value is None:
            drill.expectations.error(expectation.name, f"the fault did not measure {how['fact']}"
                                     + (f" ({found.facts_error})" if found.facts_error else ""))
        else:
            drill.measure(expectation.name, value, detail=f"fact {how['fact']} of fault {found.fault.kind}: "
                          + found.fault.facts_offered.get(how["fact"], ("", ""))[1])
        return
    timeline = found.timelines.get(how.get("probe"))
    if timeline is None:
        drill.expectations.error(expectation.name, f"probe {how.get('probe')} logged nothing")
        return
    start, stop = found.bounds[how["window"]]
    narrowed = ""
    try:
        start, stop, narrowed = narrow(how, start, stop, found.ran.get(how["window"], []), found.marks)
    except ValueError as exc:
        drill.expectations.error(expectation.name, str(exc))
        return
    samples = timeline.samples()
    if "within_seconds" in how:
        samples = measures.within(samples, float(how["within_seconds"]))
        narrowed += f", a success slower than {float(how['within_seconds']):g} s counted failed"
    if how.get("from_first_success"):
        reached = measures.first_success_at(samples, start, stop)
        if reached is None:
            drill.expectations.error(expectation.name, f"probe {how['probe']} never succeeded in its "
                                     f"{how['window']} window{narrowed}: no first success to start from")
            return
        start, narrowed = reached, narrowed + ", from its first success"
    value = measures.measure(how["kind"], samples, start, stop)
    if "predicted_by" in how:
        share = found.facts.get(how["predicted_by"])
        narrowed += (f", {value if value is None else round(value, 3)} judged against fact {how['predicted_by']} "
                     f"{share if share is None else round(share, 3)} (the share taken away: none, calls work; "
                     "all, they fail; some, some do)")
        value = measures.as_predicted(value, share)
    drill.measure(expectation.name, value,
                  detail=f"{how['kind']} of probe {how['probe']} over the {how['window']} window{narrowed} "
                         f"({stop - start:.1f} s, {len(measures.in_window(samples, start, stop))} samples)")
