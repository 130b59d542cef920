"""Reading a run's evidence: its drill records (scanned, loaded, each verdict checked against the
record's own content), its ``run.json`` and each record's probe timeline.

Everything that reads records goes through here: the report (harness/evidence/report.py),
``kdrill compare`` (compare.py), ``kdrill history`` (history.py) and the OpenMetrics export
(openmetrics.py). Nothing here renders. The layout read is the one harness/evidence/records.py
writes: ``run.json``, one ``<stem>.json`` per drill case and its ``<stem>.timeline.json``. Times
are epoch seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from harness.evidence.layout import MANIFEST_NAME, MATRIX_JSON_NAME
from harness.evidence.strict_json import DuplicateKeyError, load_path
from harness.spec.scenario import Bound

_NOT_RECORDS = frozenset({"run.json", MANIFEST_NAME, MATRIX_JSON_NAME})


class ReportError(Exception):
    """The report cannot be built from the given directory: it is none, or holds no evidence."""


@dataclass
class RunEvidence:
    """A run's evidence as :func:`load_run` read it: ``meta`` is run.json (empty when absent or
    unreadable), ``records`` the readable drill records as ``(path, record)`` in run order,
    ``problems`` what went wrong reading run.json, ``unreadable`` every record slot that holds no
    readable record as ``(path, reason)``."""

    run_dir: Path
    meta: dict[str, Any]
    records: list[tuple[Path, dict[str, Any]]]
    problems: list[str] = field(default_factory=list)
    unreadable: list[tuple[Path, str]] = field(default_factory=list)


def read_json(path: Path) -> Any:
    """``path`` parsed as JSON (UTF-8), an object naming a key twice refused. Raises OSError,
    DuplicateKeyError, ValueError (not JSON), RecursionError."""
    return load_path(path)


def as_float(value: Any) -> float | None:
    """``value`` as a finite float when it is a JSON number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:  # a JSON integer past float's range: a forged or broken number
        return None
    return value if math.isfinite(value) else None


def scan_records(run_dir: Path) -> tuple[list[tuple[Path, dict[str, Any]]], list[tuple[Path, str]]]:
    """Every drill record slot in ``run_dir`` (top level only): ``(records, unreadable)``.

    Every top-level ``*.json`` but ``run.json``, ``manifest.json``, ``failure_matrix.json`` and
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
            data = read_json(path)
        except OSError as exc:
            unreadable.append((path, f"cannot be read: {exc.strerror or exc}"))
            continue
        except DuplicateKeyError as exc:
            unreadable.append((path, f"is refused: {exc}"))
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
        started = as_float(item[1].get("started_at"))
        return (started if started is not None else math.inf, item[0].name)

    return sorted(records, key=order), unreadable


def load_drill_records(run_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The readable drill records of :func:`scan_records`, in run order.

    Callers that show or count a run's verdicts must use ``scan_records``:
    this leaves out the records that do not parse.
    """
    return scan_records(run_dir)[0]


# What a record's ``verdict`` may be (harness/plugin writes the last three for drills that did not run).
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


def finite_number(value: Any, limit: float = math.inf) -> float | None:
    """``value`` as a float when it is a number (not a bool), finite and below ``limit`` in size."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) and abs(number) < limit else None


def real_number(value: Any) -> float | None:
    """A record's seconds: :func:`finite_number` below 10**12 (booleans, text, NaN, 10**400 are not)."""
    return finite_number(value, 1e12)


def expected_detection(record: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The alerts the record's own scenario expects in its case: alert name -> its entry
    (``fires_within_seconds``, ``resolves_within_seconds``); malformed entries left out."""
    scenario = record.get("scenario") if isinstance(record.get("scenario"), dict) else {}
    specs = scenario.get("detection") if isinstance(scenario.get("detection"), list) else []
    out = {}
    for spec in specs:
        if not isinstance(spec, dict) or not isinstance(spec.get("alert"), str):
            continue
        cases = spec.get("cases")
        if cases is None or (isinstance(cases, list) and record.get("case") in cases):
            out[spec["alert"]] = spec
    return out


def _alert_problem(alert: Any, wanted: Mapping[str, Any] | None) -> str | None:
    """Why one detected alert's entry does not hold: its outcome, its times against its bounds,
    its bounds against its scenario's (``wanted``; None: not expected there)."""
    if not isinstance(alert, dict) or not isinstance(alert.get("alert"), str):
        return "a detection entry is not an alert"
    name = alert["alert"][:60]
    if wanted is None:
        return f"detection of {name} is not one its scenario expects"
    delivery = alert.get("delivery")
    if "delivery" in alert and (not isinstance(delivery, dict) or delivery.get("outcome") not in ("delivered", "unknown")):
        outcome = delivery.get("outcome") if isinstance(delivery, dict) else delivery
        return f"detection of {name}: {str(outcome)[:40]} to Alertmanager"
    if alert.get("verdict") != "passed" or alert.get("outcome") != "detected":
        return f"detection of {name} is {str(alert.get('outcome'))[:40]}"
    fired, resolved = real_number(alert.get("fired_after_seconds")), real_number(alert.get("resolved_after_seconds"))
    bounds = [real_number(alert.get(k)) for k in ("fires_within_seconds", "resolves_within_seconds")]
    if bounds != [real_number(wanted.get(k)) for k in ("fires_within_seconds", "resolves_within_seconds")] or None in bounds:
        return f"detection of {name} states bounds its scenario does not"
    if fired is None or resolved is None or not 0 < fired <= bounds[0] or resolved > bounds[1]:
        return f"detection of {name}: its times do not satisfy its bounds"
    return None


def detection_problems(record: Mapping[str, Any]) -> list[str]:
    """Why a record's ``detection`` (harness/plugin/detection.py) does not support "passed". kdrill
    writes one for every drill that injected its fault and expects an alert: "not checked" (no
    Prometheus; then no alert is judged), "none expected" (only when the scenario expects none),
    or "passed" with each expected alert detected within the scenario's own bounds. Empty when it
    holds, or the scenario expects no alert and the record has no detection."""
    wanted = expected_detection(record)
    detection = record.get("detection")
    if "detection" not in record or detection in (None, {}):
        return [f"its scenario expects detection of {', '.join(sorted(wanted))[:120]} and it records none"] if wanted else []
    if not isinstance(detection, dict):
        return ["its detection is not an object"]
    verdict = detection.get("verdict")
    if verdict == "not checked":
        return ["its detection was not checked, yet lists alerts"] if detection.get("alerts") else []
    if verdict == "none expected":
        return ["its detection says none expected, but its scenario expects some"] if wanted else []
    if verdict != "passed":
        return [f"its detection is {str(verdict)[:40]}"]
    alerts = detection.get("alerts")
    if not isinstance(alerts, list):
        return ["its detection's alerts are not a list"]
    problems = [p for a in alerts for p in [_alert_problem(a, wanted.get(a.get("alert")) if isinstance(a, dict)
                                                           and isinstance(a.get("alert"), str) else None)] if p]
    named = [a.get("alert") for a in alerts if isinstance(a, dict) and isinstance(a.get("alert"), str)]
    problems += [f"detection of {n[:60]} its scenario expects is missing" for n in sorted(wanted) if n not in named]
    source = detection.get("source")
    if isinstance(source, dict) and source.get("alertmanager"):  # then every alert that fired says where it went
        problems += [f"detection of {str(a.get('alert'))[:60]} says nothing of its delivery, though Alertmanager "
                     "was watched" for a in alerts if isinstance(a, dict) and "delivery" not in a]
    problems += ["an alert is listed twice in its detection"] if len(named) != len(set(named)) else []
    already = detection.get("already_firing")
    if isinstance(already, list) and any(n in already for n in named):
        problems.append("an expected alert is also listed in its detection as already firing")
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
    problems += detection_problems(record)
    if record.get("errors"):
        problems.append("it records errors")
    if problems:
        return "error", "the record says passed, but " + "; ".join(problems)
    return "passed", None


def load_run(run_dir: Path) -> RunEvidence:
    """The evidence of the run in ``run_dir``, each record's verdict replaced by the one its own
    content supports (:func:`checked_verdict`; the stated one kept as ``stated_verdict`` and the
    reason put first in ``errors``).

    Raises ReportError when ``run_dir`` is not a directory or holds neither run.json nor any
    record slot.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ReportError(f"cannot build a report: {run_dir} is not a directory")
    problems: list[str] = []
    meta: dict[str, Any] = {}
    run_json = run_dir / "run.json"
    has_run_json = run_json.is_file()
    if has_run_json:
        try:
            loaded = read_json(run_json)
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
    return RunEvidence(run_dir=run_dir, meta=meta, records=records, problems=problems, unreadable=unreadable)


def load_timeline(
    run_dir: Path, record_path: Path, record: Mapping[str, Any]
) -> tuple[dict[str, list[dict[str, Any]]] | None, str, str | None]:
    """A record's probe timeline ({probe: [sample dicts]}, the file ``evidence_files["timeline"]``
    names inside ``run_dir``, else ``<stem>.timeline.json``): (timeline or None, file name,
    problem message or None)."""
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
        data = read_json(path)
    except (OSError, ValueError) as exc:
        return None, name, f"timeline file {name} could not be read: {exc}"
    if not isinstance(data, dict):
        return None, name, f"timeline file {name} is not a JSON object of probe samples"
    timeline = {str(k): [s for s in v if isinstance(s, dict)] for k, v in data.items() if isinstance(v, list)}
    return timeline, name, None


def injection_windows(fault: Mapping[str, Any], injections: Any) -> list[dict[str, Any]]:
    """Every injection window: ``observations.injections`` when recorded, else the one window of
    ``fault`` (older records, or a drill that failed before ``inject`` recorded its window)."""
    windows = [i for i in injections if isinstance(i, dict)] if isinstance(injections, list) else []
    if windows:
        return windows
    if fault.get("injected_at") is not None or fault.get("reverted_at") is not None:
        return [{k: fault.get(k) for k in ("kind", "where", "injected_at", "reverted_at", "revert_verified")}]
    return []


def first_injection(record: Mapping[str, Any]) -> float | None:
    """Epoch seconds of the drill's first injection, or None when it injected nothing."""
    fault = record.get("fault") if isinstance(record.get("fault"), dict) else {}
    observations = record.get("observations") if isinstance(record.get("observations"), dict) else {}
    times = [as_float(w.get("injected_at")) for w in injection_windows(fault, observations.get("injections"))]
    found = [t for t in times if t is not None]
    return min(found) if found else None
