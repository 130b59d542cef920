"""Catalogue of the documented claims kdrill checks (``kdrill list --claims``).

Each scenario file states one claim from the platform's documentation, where
it is documented, which drill (pytest file) checks it and with which named
expectations. ``list_claims`` collects them; ``format_claims`` renders them
as plain text for a reader deciding what the drills actually prove.

Scenarios are read with ``harness.spec.scenario.load_scenarios`` (validated) when
that module imports; otherwise the YAML files are read directly with PyYAML,
using only the keys ``name, title, drill, claim, source, expectations``.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Iterable, NamedTuple

import yaml

__all__ = ["ClaimSource", "Claim", "ClaimsError", "list_claims", "format_claims"]

WIDTH = 100


class ClaimsError(ValueError):
    """A scenario file cannot be read as a claim (names the file)."""


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
    """Claims of every ``*.yaml``/``*.yml`` scenario directly in ``scenarios_dir``.

    Returns them sorted by drill name. Raises ``FileNotFoundError`` if the
    directory does not exist; ``harness.spec.scenario.ScenarioError`` for an
    invalid scenario when that module is used, else ``ClaimsError`` for a file
    that is not valid YAML or lacks a name or claim.
    """
    scenarios_dir = Path(scenarios_dir)
    if not scenarios_dir.is_dir():
        raise FileNotFoundError(f"scenario directory not found: {scenarios_dir}")
    try:
        from harness.spec.scenario import load_scenarios
    except ImportError:
        claims = [_claim_from_yaml(path) for path in _scenario_files(scenarios_dir)]
    else:
        claims = [_claim_from_scenario(s) for s in load_scenarios(scenarios_dir)]
    return sorted(claims, key=lambda c: (c.drill, str(c.scenario_path)))


def _scenario_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


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


def _claim_from_yaml(path: Path) -> Claim:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ClaimsError(f"{path}: cannot be read as YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ClaimsError(f"{path}: expected a mapping of scenario fields")
    name, claim = data.get("name"), data.get("claim")
    if not isinstance(name, str) or not name:
        raise ClaimsError(f"{path}: field 'name': expected a non-empty string")
    if not isinstance(claim, str) or not claim.strip():
        raise ClaimsError(f"{path}: field 'claim': expected a non-empty string")
    raw_sources = data.get("source") or []
    if isinstance(raw_sources, dict):
        raw_sources = [raw_sources]
    sources = tuple(
        ClaimSource(str(s.get("title") or s.get("url") or ""), str(s.get("url") or ""), s.get("section"))
        for s in raw_sources
        if isinstance(s, dict)
    )
    drill = data.get("drill")
    expectations = tuple(
        str(e["name"]) for e in data.get("expectations") or [] if isinstance(e, dict) and e.get("name")
    )
    return Claim(
        text=" ".join(claim.split()),
        sources=sources,
        drill=name,
        drill_file=str(drill) if drill else None,
        scenario_path=path,
        expectations=expectations,
        title=str(data.get("title") or ""),
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


def _format_one(claim: Claim) -> str:
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
    return "\n".join(lines)


def format_claims(claims: Iterable[Claim]) -> str:
    """Plain text for ``kdrill list --claims``: one block per claim.

    Each block: ``<drill>: <title>``, the claim wrapped at 100 columns,
    ``Source: <title> <url>`` per source and ``Checked by: <drill>
    (<drill file>), expectations: a, b, c``; blocks are separated by a blank
    line. Returns ``"No claims found."`` for an empty list.
    """
    blocks = [_format_one(c) for c in claims]
    return "\n\n".join(blocks) if blocks else "No claims found."
