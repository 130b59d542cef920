"""Catalogue of the documented claims kdrill checks (``kdrill list --claims``).

Each scenario file states one claim from the platform's documentation, where
it is documented, which drill (pytest file) checks it and with which named
expectations. ``list_claims`` collects them; ``format_claims`` renders them
as plain text for a reader deciding what the drills actually prove.

Scenarios are read with ``harness.spec.scenario.load_scenarios`` (validated), as
``kdrill run`` reads them. What a run measured is given by the caller
(``harness/cli/claims_measured.py``): this layer reads no evidence.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Iterable, NamedTuple

from harness.spec.scenario import load_scenarios

__all__ = ["ClaimSource", "Claim", "list_claims", "format_claims"]

WIDTH = 100


class ClaimSource(NamedTuple):
    """Where a claim is documented."""

    title: str
    url: str
    section: str | None = None


class Claim(NamedTuple):
    """One documented claim and what checks it.

    ``drill`` is the drill's name (the scenario name, as in drill records);
    ``drill_file`` the pytest file relative to the repo root, or None when the
    scenario names none; ``expectations`` the expectation names, in order.
    """

    text: str
    sources: tuple[ClaimSource, ...]
    drill: str
    drill_file: str | None
    scenario_path: Path
    expectations: tuple[str, ...]
    title: str = ""


def list_claims(scenarios_dir: Path) -> list[Claim]:
    """Claims of every scenario directly in ``scenarios_dir``, read as ``kdrill run`` reads them
    (:func:`harness.spec.scenario.load_scenarios`), sorted by drill name. Raises
    ``FileNotFoundError`` if the directory does not exist, ``ScenarioError`` for an invalid
    scenario."""
    scenarios_dir = Path(scenarios_dir)
    if not scenarios_dir.is_dir():
        raise FileNotFoundError(f"scenario directory not found: {scenarios_dir}")
    claims = [_claim_from_scenario(s) for s in load_scenarios(scenarios_dir)]
    return sorted(claims, key=lambda c: (c.drill, str(c.scenario_path)))


def _claim_from_scenario(scenario: Any) -> Claim:
    return Claim(
        text=" ".join(str(scenario.claim).split()),
        sources=tuple(ClaimSource(s.title, s.url, s.section) for s in scenario.sources),
        drill=scenario.name,
        drill_file=scenario.drill or None,
        scenario_path=Path(scenario.path),
        expectations=tuple(e.name for e in scenario.expectations)
        + tuple(f"{e.name} ({case.name})" for case in scenario.cases for e in case.expectations),
        title=scenario.title,
    )


def _wrap(text: str, indent: str = "", subsequent: str | None = None) -> str:
    return textwrap.fill(
        text,
        width=WIDTH,
        initial_indent=indent,
        subsequent_indent=indent if subsequent is None else subsequent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def _format_one(claim: Claim, measured: dict[str, list[str]] | None = None, run: str = "") -> str:
    lines = [f"{claim.drill}: {claim.title}" if claim.title else claim.drill]
    lines.append(_wrap(claim.text, "  "))
    for src in claim.sources or (ClaimSource("(no source recorded)", ""),):
        text = f"Source: {src.title}"
        if src.url:
            text += f" <{src.url}>"
        if src.section:
            text += f", section {src.section!r}"
        lines.append(_wrap(text, "  ", "    "))
    checked = f"Checked by: {claim.drill} ({claim.drill_file or 'no drill file named'})"
    checked += ", expectations: " + (", ".join(claim.expectations) or "none")
    lines.append(_wrap(checked, "  ", "    "))
    if measured is not None:
        found = measured.get(claim.drill)
        lines.append(f"  Measured in run {run}:" + ("" if found else " not run there"))
        lines.extend(_wrap(line, "    " + " " * (len(line) - len(line.lstrip())), "      ") for line in found or [])
    return "\n".join(lines)


def format_claims(claims: Iterable[Claim], measured: dict[str, list[str]] | None = None, run: str = "") -> str:
    """Plain text for ``kdrill list --claims``: one block per claim.

    Each block: ``<drill>: <title>``, the claim wrapped at 100 columns,
    ``Source: <title> <url>`` per source and ``Checked by: <drill>
    (<drill file>), expectations: a, b, c``, and with ``measured`` (drill name
    -> lines, from run ``run``) ``Measured in run RUN:`` and its lines; blocks
    are separated by a blank line. Returns ``"No claims found."`` for an empty list.
    """
    blocks = [_format_one(c, measured, run) for c in claims]
    return "\n\n".join(blocks) if blocks else "No claims found."
