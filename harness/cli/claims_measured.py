"""``kdrill list --claims --run RUN``: beside each documented claim, whether a run's measurements
confirmed or contradicted it on that platform, with the values that broke it.

A case whose every expectation held **confirmed** the claim; one with an expectation that did not
hold **contradicted** it (each such expectation listed with its measured value and bound); a case
that errored, was refused or did not run measured nothing. A drill that checks a sentence of its
source exactly (``observations.source_sentence``: its text, the value measured, the verdict and
why) has that line too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.evidence.reading import load_drill_records

VERDICT_WORDS = {"passed": "confirmed", "failed": "contradicted"}


def _broken(record: dict[str, Any]) -> list[str]:
    """One line per expectation of ``record`` that did not hold: name, measured value, bound."""
    lines = []
    for x in record.get("expectations") or []:
        if isinstance(x, dict) and x.get("verdict") not in ("passed", None):
            unit = f" {x['unit']}" if x.get("unit") else ""
            lines.append(f"{x.get('name')}: measured {x.get('measured')!r}{unit}, bound {x.get('bound_text')} "
                         f"({x.get('verdict')})")
    return lines


def _sentence(record: dict[str, Any]) -> str | None:
    checked = (record.get("observations") or {}).get("source_sentence")
    if not isinstance(checked, dict) or "text" not in checked:
        return None
    return (f"source sentence \"{checked['text']}\": {checked.get('verdict')} (measured "
            f"{checked.get('measured_before_actual')!r}; {checked.get('why')})")


def measured_lines(run_dir: Path) -> dict[str, list[str]]:
    """drill name -> the lines to print under its claim, one per case record of ``run_dir`` and
    one per expectation that broke the claim. Raises OSError when the run cannot be read."""
    lines: dict[str, list[str]] = {}
    for _, record in load_drill_records(run_dir):
        drill, case = record.get("drill"), record.get("case")
        if not isinstance(drill, str):
            continue
        held = [x for x in record.get("expectations") or [] if isinstance(x, dict) and x.get("verdict") == "passed"]
        word = VERDICT_WORDS.get(record.get("verdict"), f"not measured ({record.get('verdict')})")
        where = f"case {case}: " if case else ""
        out = lines.setdefault(drill, [])
        out.append(f"{where}{word}: {len(held)} of {len(record.get('expectations') or [])} expectations held")
        out.extend(f"  {line}" for line in _broken(record))
        if (sentence := _sentence(record)) is not None:
            out.append(f"  {sentence}")
    return lines
