"""``kdrill list --claims --run RUN``: beside each documented claim, whether a run's measurements
confirmed or contradicted it on that platform, with the values that broke it.

A case whose every expectation held **confirmed** the claim; one with an expectation that did not
hold **contradicted** it (each such expectation listed with its measured value and bound); a case
that errored, was refused or did not run measured nothing. A drill that checks a sentence of its
source exactly (``observations.source_sentence``: its text, the value measured, the verdict and
why) has that line too. What a record says is shown escaped (no terminal control sequence gets
through), and a record that is not the shape kdrill writes, or does not parse, is named as such:
never read as "not run". The run's seal is ``kdrill verify``'s to check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.evidence.reading import scan_records
from harness.evidence.verification import escaped

VERDICT_WORDS = {"passed": "confirmed", "failed": "contradicted"}


def shown(value: Any) -> str:
    """``value`` as text, escaped for the terminal (:func:`harness.evidence.verification.escaped`)."""
    return escaped(str(value))


def _expectations(record: dict[str, Any]) -> list[dict[str, Any]] | None:
    found = record.get("expectations")
    if not isinstance(found, list) or not all(isinstance(x, dict) for x in found):
        return None
    return found


def _broken(expectations: list[dict[str, Any]]) -> list[str]:
    """One line per expectation that did not hold: name, measured value, bound, verdict."""
    lines = []
    for x in expectations:
        if x.get("verdict") != "passed":
            unit = f" {shown(x['unit'])}" if x.get("unit") else ""
            lines.append(f"{shown(x.get('name'))}: measured {shown(repr(x.get('measured')))}{unit}, bound "
                         f"{shown(x.get('bound_text'))} ({shown(x.get('verdict'))})")
    return lines


def _sentence(record: dict[str, Any]) -> str | None:
    observations = record.get("observations")
    checked = observations.get("source_sentence") if isinstance(observations, dict) else None
    if not isinstance(checked, dict) or "text" not in checked:
        return None
    return shown(f"source sentence \"{checked['text']}\": {checked.get('verdict')} (measured "
                 f"{checked.get('measured_before_actual')!r}; {checked.get('why')})")


def _case_lines(record: dict[str, Any]) -> list[str]:
    """The lines of one readable record (module docstring)."""
    where = f"case {shown(record['case'])}: " if record.get("case") else ""
    expectations = _expectations(record)
    if expectations is None:
        return [f"{where}not measured: its expectations are not a list of mappings"]
    held = sum(x.get("verdict") == "passed" for x in expectations)
    verdict = record.get("verdict")
    word = VERDICT_WORDS.get(verdict, f"not measured ({shown(verdict)})") if isinstance(verdict, str) \
        else "not measured (no verdict)"
    if verdict == "passed" and held < len(expectations):
        word = "not measured (its verdict says passed, its expectations do not)"
    lines = [f"{where}{word}: {held} of {len(expectations)} expectations held"]
    lines += [f"  {line}" for line in _broken(expectations)]
    if (sentence := _sentence(record)) is not None:
        lines.append(f"  {sentence}")
    return lines


def measured_lines(run_dir: Path) -> tuple[dict[str, list[str]], list[str]]:
    """(drill name -> the lines to print under its claim, one per case record of ``run_dir``
    and one per expectation that broke the claim; the records that could not be read, each as
    ``file: why``). Raises OSError when the run cannot be listed."""
    readable, unreadable = scan_records(run_dir)
    lines: dict[str, list[str]] = {}
    for path, record in readable:
        drill = record.get("drill") if isinstance(record, dict) else None
        if not isinstance(drill, str):
            unreadable.append((path, "no drill name"))
            continue
        lines.setdefault(drill, []).extend(_case_lines(record))
    return lines, [shown(f"{path.name}: {why}") for path, why in unreadable]
