"""Whether one drill record confirmed or contradicted its claim: the reading that ``kdrill list
--claims --run RUN`` prints and the report's Claims section shows.

A case whose every expectation held **confirmed** the claim; one with an expectation that did not
hold **contradicted** it (each such expectation given with its measured value and bound); a case
that errored, was refused or did not run measured nothing. A drill that checks a sentence of its
source exactly (``observations.source_sentence``) has that sentence's own verdict beside it. A
record that is not the shape kdrill writes is "not measured", never read as confirmed.
"""

from __future__ import annotations

from typing import Any

VERDICT_WORDS = {"passed": "confirmed", "failed": "contradicted"}


def _expectations(record: dict[str, Any]) -> list[dict[str, Any]] | None:
    found = record.get("expectations")
    if not isinstance(found, list) or not all(isinstance(x, dict) for x in found):
        return None
    return found


def outcome(record: dict[str, Any]) -> dict[str, Any]:
    """``{"word", "held", "total", "broken", "sentence"}`` for a drill ``record`` (as read: any
    value may be of any type). ``word``: confirmed, contradicted, or ``not measured (...)``;
    ``broken``: ``{"name", "measured", "unit", "bound", "verdict"}`` per expectation that did not
    hold; ``sentence``: the record's ``observations.source_sentence`` mapping, or None."""
    expectations = _expectations(record)
    observations = record.get("observations")
    sentence = observations.get("source_sentence") if isinstance(observations, dict) else None
    sentence = sentence if isinstance(sentence, dict) and "text" in sentence else None
    if expectations is None:
        return {"word": "not measured: its expectations are not a list of mappings", "held": 0, "total": 0,
                "broken": [], "sentence": sentence}
    held = sum(x.get("verdict") == "passed" for x in expectations)
    verdict = record.get("verdict")
    word = VERDICT_WORDS.get(verdict, f"not measured ({verdict})") if isinstance(verdict, str) \
        else "not measured (no verdict)"
    if verdict == "passed" and held < len(expectations):
        word = "not measured (its verdict says passed, its expectations do not)"
    broken = [{"name": x.get("name"), "measured": x.get("measured"), "unit": x.get("unit"),
               "bound": x.get("bound_text"), "verdict": x.get("verdict")}
              for x in expectations if x.get("verdict") != "passed"]
    return {"word": word, "held": held, "total": len(expectations), "broken": broken, "sentence": sentence}
