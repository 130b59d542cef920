"""``kdrill list --claims --run RUN``: beside each documented claim, whether a run's measurements
confirmed or contradicted it on that platform, with the values that broke it.

How a record is read (confirmed, contradicted, not measured) is
:mod:`harness.evidence.claim_outcome`'s, shared with the report's Claims section. What a record
says is shown escaped (no terminal control sequence gets through), and a record that is not the
shape kdrill writes, or does not parse, is named as such: never read as "not run". The run's seal
is ``kdrill verify``'s to check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.evidence.claim_outcome import outcome
from harness.evidence.reading import scan_records
from harness.evidence.verification import escaped


def shown(value: Any) -> str:
    """``value`` as text, escaped for the terminal (:func:`harness.evidence.verification.escaped`)."""
    return escaped(str(value))


def _case_lines(record: dict[str, Any]) -> list[str]:
    """The lines of one readable record (module docstring; the reading is
    :func:`harness.evidence.claim_outcome.outcome`'s)."""
    where = f"case {shown(record['case'])}: " if record.get("case") else ""
    found = outcome(record)
    if found["word"].startswith("not measured:"):
        return [f"{where}{found['word']}"]
    lines = [f"{where}{shown(found['word'])}: {found['held']} of {found['total']} expectations held"]
    for x in found["broken"]:
        unit = f" {shown(x['unit'])}" if x["unit"] else ""
        lines.append(f"  {shown(x['name'])}: measured {shown(repr(x['measured']))}{unit}, bound "
                     f"{shown(x['bound'])} ({shown(x['verdict'])})")
    if (checked := found["sentence"]) is not None:
        lines.append("  " + shown(f"source sentence \"{checked['text']}\": {checked.get('verdict')} (measured "
                                  f"{checked.get('measured_before_actual')!r}; {checked.get('why')})"))
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
