"""The failure matrix of a run: one row per failure drilled, the seeds' columns, from what each
record measured: **impact** (the expectations and vital signs: which paths failed, how much, for
how long), **detection** (which alert after how many seconds, or undetected: the record's
``detection``, harness/plugin/detection.py), **mitigation** (the way out the drill exercised: the
fault's revert, verified or not, with its time) and **recovery** (seconds from the revert until
the expected alerts resolved, when detection was read). ``kdrill matrix RUN`` prints it, the
report shows it first, and the run's ``failure_matrix.csv`` and ``failure_matrix.json`` carry it,
sealed with the run.

Every cell says what the record holds and no more: a drill without a detection reading says
"not checked", never "detected".
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Mapping

from harness.core.files import write_text_atomic
from harness.evidence.layout import MATRIX_CSV_NAME, MATRIX_JSON_NAME
from harness.evidence.reading import checked_verdict, detection_problems, expectation_problem, load_run, real_number

COLUMNS = ("drill", "case", "verdict", "impact", "detection", "detection_verdict", "mitigation", "recovery_seconds")


def _number(value: Any) -> float | None:
    return real_number(value)


def objects(value: Any) -> list[dict[str, Any]]:
    """The objects of a list read from a record (anything else: none)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def impact(record: Mapping[str, Any]) -> str:
    """The expectations that did not hold (name=measured) and the flagged vital signs, or what held."""
    expectations = [x for x in record.get("expectations") or [] if isinstance(x, dict)]
    broken = [f"{x.get('name')}={x.get('measured')}" for x in expectations if expectation_problem(x) is not None]
    vitals = record.get("vital_signs") if isinstance(record.get("vital_signs"), dict) else {}
    flagged = [str(s) for s in vitals.get("flagged") or []]
    parts = [f"{len(expectations) - len(broken)}/{len(expectations)} expectations held"]
    parts += [f"not held: {', '.join(broken)}"] if broken else []
    parts += [f"flagged vital signs: {', '.join(flagged)}"] if flagged else []
    return "; ".join(parts)


def detection(record: Mapping[str, Any]) -> tuple[str, str]:
    """(what the platform's monitoring noticed, in words; its verdict: detected, undetected,
    none expected (Prometheus was read; the scenario expects no alert: what fired is listed),
    not checked (no Prometheus read) or error). A record whose detection does not hold up (harness.evidence.reading's
    detection_problems) is an error, whatever it states."""
    d = record.get("detection") if isinstance(record.get("detection"), dict) else {}
    verdict = d.get("verdict")
    problems = detection_problems(record)
    if problems and verdict in ("passed", "not checked", "none expected", None):
        return ("; ".join(problems)[:300], "error")
    if not d or verdict in ("not checked", None):
        return (str(d.get("why") or "no detection expected or read")[:300], "not checked")
    if verdict == "error":
        return (str(d.get("why"))[:300], "error")
    words = []
    for a in objects(d.get("alerts")):
        fired = _number(a.get("fired_after_seconds"))
        words.append(f"{str(a.get('alert'))[:60]}: {str(a.get('outcome'))[:40]}"
                     + (f" after {fired:.0f} s" if fired is not None else "") + delivery_words(a.get("delivery")))
    also = [str(a.get("alert"))[:60] for a in objects(d.get("also_fired"))]
    if also:
        words.append(f"also fired: {', '.join(also)}")
    if verdict == "none expected":
        return ("; ".join(words) or "nothing fired", "none expected")
    return ("; ".join(words), "detected" if verdict == "passed" else "undetected")


def delivery_words(delivery: Any) -> str:
    """How an alert stood in the team's Alertmanager, in words ("" when it was not watched)."""
    if not isinstance(delivery, dict):
        return ""
    after = _number(delivery.get("after_seconds"))
    if delivery.get("outcome") == "delivered" and after is not None:
        receivers = [str(r)[:40] for r in delivery.get("receivers") or [] if isinstance(r, str)][:5]
        return f", in Alertmanager after {after:.0f} s (to {', '.join(receivers) or 'no receiver'})"
    outcome = str(delivery.get("outcome"))[:40]
    return f", {outcome} {'to' if outcome in ('not delivered', 'unknown') else 'in'} Alertmanager"


def mitigation(record: Mapping[str, Any]) -> str:
    """The way out the drill exercised: its fault's revert, verified or not, and when."""
    fault = record.get("fault") if isinstance(record.get("fault"), dict) else {}
    injected, reverted = _number(fault.get("injected_at")), _number(fault.get("reverted_at"))
    if injected is None:
        return "fault never injected"
    # A method is named first in its text ("scale-subresource: the backend is scaled ..."): the name alone.
    method = str(fault.get("method") or "").split(":")[0].strip()[:60]
    what = f"{fault.get('kind')}" + (f" ({method})" if method else "")
    if reverted is None:
        return f"{what}: not reverted"
    verified = "verified" if fault.get("revert_verified") else "NOT verified"
    return f"{what} reverted {reverted - injected:.0f} s after injection, {verified}"


def recovery_seconds(record: Mapping[str, Any]) -> float | None:
    """Seconds from the revert until the last expected alert resolved, when detection was read."""
    d = record.get("detection") if isinstance(record.get("detection"), dict) else {}
    times = [_number(a.get("resolved_after_seconds")) for a in objects(d.get("alerts"))]
    times = [t for t in times if t is not None]
    return round(max(times), 1) if times else None


def matrix_rows(records: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per record (COLUMNS), the verdict as the record's own content supports it."""
    rows = []
    for record in records:
        words, verdict = detection(record)
        case = record.get("case")
        rows.append({"drill": str(record.get("drill"))[:100], "case": None if case is None else str(case)[:100],
                     "verdict": checked_verdict(record)[0], "impact": impact(record), "detection": words,
                     "detection_verdict": verdict, "mitigation": mitigation(record),
                     "recovery_seconds": recovery_seconds(record)})
    return rows


def _cell(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text: one starting with =, +, -, @ or a control character
    would be read as a formula, so it gets a leading apostrophe (numbers stay numbers)."""
    if value is None:
        return ""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def as_csv(rows: list[dict[str, Any]]) -> str:
    """The rows as CSV with a header line (COLUMNS); an empty value for None."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(COLUMNS), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(row[k]) for k in COLUMNS})
    return out.getvalue()


def as_json(rows: list[dict[str, Any]]) -> str:
    return json.dumps({"columns": list(COLUMNS), "rows": rows}, indent=2) + "\n"


def run_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The matrix of the run in ``run_dir`` (its records as :func:`load_run` reads them)."""
    return matrix_rows([record for _, record in load_run(Path(run_dir)).records])


def write(run_dir: Path) -> list[Path]:
    """Write ``failure_matrix.csv`` and ``failure_matrix.json`` into the run (before its seal)."""
    rows = run_rows(run_dir)
    return [write_text_atomic(Path(run_dir) / MATRIX_CSV_NAME, as_csv(rows)),
            write_text_atomic(Path(run_dir) / MATRIX_JSON_NAME, as_json(rows))]
