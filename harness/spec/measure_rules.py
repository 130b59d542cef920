"""The rules for what a data-only scenario's runner measures for each expectation
(``expectations[].measure``): a fact its fault measures, or a measure kind over a probe it
declares, in a window, narrowed by the fault's marks or the runner's actions."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.spec.model import ScenarioError
from harness.spec.plugins import (
    LATENCY_MEASURES,
    VALUE_MEASURES,
    data_usable,
    measure_kinds,
    probe_types,
    registered_fault,
)

# The unit each of kdrill's own measures gives (a plug-in's is the scenario's to say).
MEASURE_UNITS = {"success_ratio": "ratio", "first_failure_seconds": "seconds", "first_success_seconds": "seconds",
                 "recovery_seconds": "seconds",
                 "longest_failure_seconds": "seconds", "longest_unanswered_seconds": "seconds",
                 "max_latency_seconds": "seconds", "median_latency_seconds": "seconds", "p99_latency_seconds": "seconds",
                 "min_latency_seconds": "seconds", "flips": "count"}
# The measures that mean the same over a pod-ips probe's calls to every pod, interleaved in one
# timeline, as over one target's: a share of calls, the first failed call, a latency.
POD_IPS_MEASURES = ("success_ratio", "first_failure_seconds", "max_latency_seconds", "median_latency_seconds",
                    "p99_latency_seconds",
                    "min_latency_seconds")
WINDOW_SECONDS = {"baseline": "baseline_seconds", "fault": "hold_seconds", "after": "after_seconds"}


def expectation_lists(data: dict) -> list[tuple[str, list[dict]]]:
    """(field, expectations) of a scenario file's own expectations and of each case's."""
    lists = [("expectations", data["expectations"])]
    lists += [(f"cases[{c}].expectations", case.get("expectations") or [])
              for c, case in enumerate(data.get("cases", []))]
    return lists


def pod_ips_probes(data: dict) -> list[str]:
    """The names of the runner's incluster-http probes of target pod-ips."""
    return [p["name"] for p in data["runner"]["probes"] if p["kind"] == "incluster-http" and p.get("target") == "pod-ips"]


@dataclass(frozen=True)
class _Measuring:
    """What an expectation's measure is checked against: the fault's facts ({name: (unit, ...)})
    and marks (None for a fault kind refused by its own check), the installed measure kinds and
    the runner's probes, windows and actions."""

    path: Path
    fault_kind: str
    fault_known: bool
    facts: dict
    marks: list[str]
    kinds: list[str]
    probes: list[str]
    pod_ips: list[str]
    runner: dict


def check_measures(path: Path, data: dict) -> None:
    """Each expectation of a data-only scenario (``data`` with a runner section) says what the
    runner measures for it. Raises ScenarioError for the first problem, expectation by expectation."""
    kinds = measure_kinds()
    try:
        fault_type = registered_fault(data["fault"]["kind"])
    except Exception:  # an unknown kind is refused by its own check, with its own message
        fault_type = None
    if fault_type is not None and not data_usable(fault_type):
        fault_type = None  # ...and so is one the runner cannot build, before its facts or marks
    measuring = _Measuring(path, data["fault"]["kind"], fault_type is not None,
                           getattr(fault_type, "facts_offered", {}), sorted(getattr(fault_type, "marks_offered", {})),
                           kinds, [p["name"] for p in data["runner"]["probes"]], pod_ips_probes(data), data["runner"])
    for where, items in expectation_lists(data):
        for i, item in enumerate(items):
            _check_measure(measuring, f"{where}[{i}]", item)


def _check_measure(m: _Measuring, field: str, item: dict) -> None:
    """One expectation's measure, at ``field`` (``expectations[i]``)."""
    if "measure" not in item:
        raise ScenarioError(m.path, f"{field}.measure", "what the runner measures: {kind, probe, window}, "
                            "or {fact}", "nothing")
    measure = item["measure"]
    if not m.fault_known and ({"fact", "from_mark", "until_mark"} & set(measure)):
        return  # the unknown fault kind is refused by its own check, with the nearest known kind
    if "fact" in measure:
        _check_fact(m, field, item)
        return
    missing = [k for k in ("kind", "probe", "window") if k not in measure]
    if missing:
        raise ScenarioError(m.path, f"{field}.measure.{missing[0]}", "what the runner measures: {kind, "
                            "probe, window}, or {fact}", "nothing")
    _check_prediction(m, field, item)
    _check_marks(m, field, measure)
    _check_measure_kind(m, field, item)
    _check_measure_probe(m, field, measure)
    _check_measure_narrowing(m.path, f"{field}.measure", measure, m.runner["windows"])
    _check_measure_actions(m, field, measure)


def _check_fact(m: _Measuring, field: str, item: dict) -> None:
    """``{fact}`` alone, naming a fact the fault measures, in that fact's unit."""
    extra = sorted(set(item["measure"]) - {"fact"})
    if extra:
        raise ScenarioError(m.path, f"{field}.measure", "{fact} alone: the fault measured it, over "
                            "no probe or window", ", ".join(extra))
    if item["measure"]["fact"] not in m.facts:
        raise ScenarioError(m.path, f"{field}.measure.fact", f"a fact fault {m.fault_kind} "
                            f"measures: {', '.join(sorted(m.facts)) or 'none'}", repr(item["measure"]["fact"]))
    unit = m.facts[item["measure"]["fact"]][0]
    if item["unit"] != unit:
        raise ScenarioError(m.path, f"{field}.unit", f"{unit!r}, the unit of fact {item['measure']['fact']}",
                            repr(item["unit"]))


def _check_prediction(m: _Measuring, field: str, item: dict) -> None:
    """``predicted_by`` names a ratio fact of the fault, on a success_ratio judged true or false."""
    if "predicted_by" not in item["measure"]:
        return
    predicted = item["measure"]["predicted_by"]
    if predicted not in m.facts or m.facts[predicted][0] != "ratio":
        raise ScenarioError(m.path, f"{field}.measure.predicted_by", "a ratio fact fault "
                            f"{m.fault_kind} measures: " + (", ".join(sorted(
                                f for f, (u, _) in m.facts.items() if u == "ratio")) or "none"), repr(predicted))
    if item["measure"]["kind"] != "success_ratio" or item["unit"] != "bool":
        raise ScenarioError(m.path, f"{field}", "measure kind success_ratio and unit bool with "
                            "predicted_by (the ratio is judged against the prediction: true or false)",
                            f"kind {item['measure']['kind']!r}, unit {item['unit']!r}")


def _check_marks(m: _Measuring, field: str, measure: dict) -> None:
    """``from_mark``/``until_mark`` name marks the fault offers, in the fault window."""
    for key in ("from_mark", "until_mark"):
        if key in measure and measure[key] not in m.marks:
            raise ScenarioError(m.path, f"{field}.measure.{key}", f"a mark fault {m.fault_kind} "
                                f"offers: {', '.join(m.marks) or 'none'}", repr(measure[key]))
        # A fault marks times while it is in force (harness/faults: Fault.marks).
        if key in measure and measure["window"] != "fault":
            raise ScenarioError(m.path, f"{field}.measure.window", f"fault, the window {key} "
                                f"{measure[key]} lies in", repr(measure["window"]))


def _check_measure_kind(m: _Measuring, field: str, item: dict) -> None:
    """An installed measure kind; one of kdrill's own in its own unit (but with ``predicted_by``)."""
    if item["measure"]["kind"] not in m.kinds:
        raise ScenarioError(m.path, f"{field}.measure.kind", f"an installed measure: {', '.join(m.kinds)}",
                            repr(item["measure"]["kind"]))
    unit = MEASURE_UNITS.get(item["measure"]["kind"])
    if unit is not None and item["unit"] != unit and "predicted_by" not in item["measure"]:
        raise ScenarioError(m.path, f"{field}.unit", f"{unit!r}, the unit of {item['measure']['kind']}",
                            repr(item["unit"]))


def _check_measure_probe(m: _Measuring, field: str, measure: dict) -> None:
    """A probe of the runner, whose samples mean what the measure kind reads."""
    if measure["probe"] not in m.probes:
        raise ScenarioError(m.path, f"{field}.measure.probe", f"one of runner.probes: {', '.join(m.probes)}",
                            repr(measure["probe"]))
    if measure["probe"] in m.pod_ips and measure["kind"] not in POD_IPS_MEASURES:
        raise ScenarioError(m.path, f"{field}.measure.kind", "a measure that holds over the calls to every "
                            f"pod together ({', '.join(POD_IPS_MEASURES)}): a pod-ips probe interleaves them, "
                            "so a run of failures or a recovery would be one pod's hidden by another's answers",
                            f"{measure['kind']!r} on {measure['probe']!r}, a pod-ips probe")
    probe_kind = next((p.get("kind") for p in m.runner["probes"] if p.get("name") == measure["probe"]), None)
    valued = [k for k, c in probe_types().items() if getattr(c, "records_values", False)]
    if measure["kind"] in VALUE_MEASURES and probe_kind is not None and probe_kind not in valued:
        raise ScenarioError(m.path, f"{field}.measure.probe", f"a probe that records values: "
                            f"{', '.join(valued)} ({measure['kind']} reads them)",
                            f"{measure['probe']!r}, a {probe_kind} probe")


def _check_measure_narrowing(path: Path, field: str, measure: dict, windows: dict) -> None:
    """``within_seconds`` only where a slow success counted as failed means something (not on a
    latency or value measure, whose value would silently leave the slow samples out), and
    ``settle_seconds`` shorter than the window it starts in. Raises ScenarioError."""
    if "within_seconds" in measure and measure["kind"] in (*LATENCY_MEASURES, *VALUE_MEASURES):
        raise ScenarioError(path, f"{field}.within_seconds", f"no within_seconds on {measure['kind']}: it makes "
                            "slow successes failures, which a latency or value measure then leaves out",
                            repr(measure["within_seconds"]))
    seconds = windows.get(WINDOW_SECONDS.get(measure["window"], ""))
    if "settle_seconds" in measure and isinstance(seconds, (int, float)) and measure["settle_seconds"] >= seconds:
        raise ScenarioError(path, f"{field}.settle_seconds", f"fewer seconds than the {measure['window']} window's "
                            f"{seconds} (runner.windows.{WINDOW_SECONDS[measure['window']]}): something left to "
                            "measure", repr(measure["settle_seconds"]))


def _check_measure_actions(m: _Measuring, field: str, measure: dict) -> None:
    """``from_action``/``until_action`` name actions of the measure's window, in their order."""
    window = measure["window"]
    in_window = {a["name"]: a for a in m.runner.get("actions") or [] if a["window"] == window}
    for key in ("from_action", "until_action"):
        if key in measure and measure[key] not in in_window:
            raise ScenarioError(m.path, f"{field}.measure.{key}", f"an action of the {window} window: "
                                + (", ".join(in_window) or "none"), repr(measure[key]))
    if "from_action" in measure and "until_action" in measure and \
            in_window[measure["from_action"]]["after_seconds"] >= in_window[measure["until_action"]]["after_seconds"]:
        raise ScenarioError(m.path, f"{field}.measure.until_action", "an action later than from_action "
                            f"({measure['from_action']})", repr(measure["until_action"]))
