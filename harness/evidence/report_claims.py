"""The report's Claims section (harness/templates/report.html.j2): one row per drill record, its
documented claim and sources beside whether this run confirmed or contradicted it on this platform
(:func:`harness.evidence.claim_outcome.outcome`), with the measured values that broke it. Plain
values for the template, which escapes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.evidence.claim_outcome import outcome
from harness.evidence.report_drill import claim_sources
from harness.evidence.report_format import as_text, capped_rows, cell_text, record_anchor

OUTCOME_CLASSES = {"confirmed": "ok-text", "contradicted": "fail-text"}


def claims_view(records: list[tuple[Path, dict[str, Any]]]) -> list[dict[str, Any]]:
    """``{"anchor", "drill", "case", "claim", "sources", "word", "cls", "tally", "broken", "sentence"}``
    per record: the claim cut to a table cell, its sources as the drill section shows them, the
    outcome word and its CSS class, and one line per expectation that did not hold."""
    rows = []
    for path, record in records:
        found = outcome(record)
        sentence = found["sentence"]
        rows.append({
            "anchor": record_anchor(path),
            "drill": as_text(record.get("drill")),
            "case": None if record.get("case") in (None, "") else as_text(record.get("case")),
            "claim": cell_text(record.get("claim") or "no claim recorded"),
            "sources": claim_sources(record.get("source")),
            "word": found["word"],
            "cls": OUTCOME_CLASSES.get(found["word"], "muted"),
            "tally": f"{found['held']} of {found['total']} held" if found["total"] else "",
            "broken": [cell_text(f"{x['name']}: measured {x['measured']!r}{' ' + str(x['unit']) if x['unit'] else ''}, "
                                 f"bound {x['bound']}") for x in found["broken"]],
            "sentence": cell_text(f"source sentence \"{sentence['text']}\": {sentence.get('verdict')}")
            if sentence is not None else None,
        })
    return capped_rows(rows, "claims")
