"""Each record's bounds against a scenario kept outside the record.

A record carries its expectations' bounds and a copy of its scenario, and its verdict is judged by
them: a bound loosened in both (by hand, then sealed again; or in a scenario copy run with
``--scenarios-dir``) reads green. So the report compares each record's bounds with a reference
the record does not hold: ``scenarios/<drill>.yaml`` at the run's recorded git commit, read with
``git show`` from the checkout kdrill runs from; when that commit or file is not there (an
installed kdrill, a commit this checkout lacks), the scenario shipped with this kdrill. Every
difference is shown, with the reference named; the verdict is not changed (a team's copy with
other bounds is legitimate, and now visible).
"""

from __future__ import annotations

import functools
import subprocess
from dataclasses import dataclass, field
from typing import Any, Mapping

import yaml

from harness import __version__
from harness.core import proc, resources
from harness.spec.scenario import Bound
from harness.spec.yaml_reading import UniqueKeyLoader

_GIT_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class BoundCheck:
    """A record's bounds against its reference: ``reference`` names it (a file at a commit, or
    shipped with this kdrill; None when there is none), ``differences`` says each difference in
    one line (empty: the same)."""

    reference: str | None
    differences: list[str] = field(default_factory=list)


@functools.lru_cache(maxsize=256)
def _git_file(checkout: str, commit: str, rel: str) -> str | None:
    """``rel`` at ``commit`` in the checkout, or None when git, the commit or the file is not there."""
    if not commit or not all(c in "0123456789abcdef" for c in commit.lower()):
        return None  # a commit named by the evidence goes to git only as a hex object name
    try:
        done = proc.run(["git", "-C", checkout, "show", f"{commit}:{rel}"], timeout_seconds=_GIT_TIMEOUT_SECONDS,
                        check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _reference_text(drill: str, commit: Any) -> tuple[str, str] | None:
    """(what the reference is, its YAML text) for scenario ``drill``, or None when neither the
    recorded commit nor this kdrill has a scenario file of that name."""
    rel = f"scenarios/{drill}.yaml"
    checkout = resources.checkout()
    if checkout is not None and isinstance(commit, str):
        text = _git_file(str(checkout), commit, rel)
        if text is not None:
            return f"{rel} at the run's commit {commit[:12]}", text
    shipped = resources.scenarios_dir() / f"{drill}.yaml"
    try:
        return f"{rel} shipped with kdrill {__version__}", shipped.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _reference_bounds(text: str, case: Any) -> dict[str, Any] | None:
    """{expectation name: bound} of a scenario's text for ``case`` (its own expectations and the
    case's), or None when the text is not a scenario's YAML."""
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader that refuses duplicate keys
    except yaml.YAMLError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("expectations"), list):
        return None
    specs = list(data["expectations"])
    for c in data.get("cases") or []:
        if isinstance(c, dict) and c.get("name") == case:
            specs += c.get("expectations") or []
    return {str(e.get("name")): e.get("bound") for e in specs if isinstance(e, dict)}


def _same_bound(a: Any, b: Any) -> bool:
    """Whether two bounds ({"op", "value"}) say the same: 60 and 60.0 do, true and 1 do not."""
    if not (isinstance(a, Mapping) and isinstance(b, Mapping)) or a.get("op") != b.get("op"):
        return False
    x, y = a.get("value"), b.get("value")
    if isinstance(x, bool) or isinstance(y, bool):
        return type(x) is type(y) and x == y
    return x == y


def _text(bound: Any) -> str:
    """A bound as a scenario writes it (``<= 60``), or what it is."""
    if isinstance(bound, Mapping):
        value = bound.get("value")
        return f"{bound.get('op')} {str(value).lower() if isinstance(value, bool) else value}"
    return str(bound)[:60]


def check_bounds(record: Mapping[str, Any], git_commit: Any) -> BoundCheck:
    """``record``'s expectations (name, bound) against its reference (see the module doc): each
    reference expectation the record lacks, each bound that differs, each expectation the
    reference does not have. A record with no expectations (it did not run) is not compared.
    Never raises."""
    drill = record.get("drill")
    expectations = record.get("expectations")
    if not isinstance(drill, str) or not isinstance(expectations, list) or not expectations:
        return BoundCheck(None)
    found = _reference_text(drill, git_commit)
    if found is None:
        return BoundCheck(None, [f"no scenario {drill!r} at the run's commit or in kdrill {__version__}: its bounds "
                                 "are compared with nothing but the record's own copy"])
    reference, text = found
    wanted = _reference_bounds(text, record.get("case"))
    if wanted is None:
        return BoundCheck(reference, [f"{reference} is not a scenario's YAML: bounds not compared"])
    got = {str(x.get("name")): x for x in expectations if isinstance(x, dict)}
    differences = [f"{name}: in {reference} ({_text(bound)}), not in this record"
                   for name, bound in wanted.items() if name not in got]
    for name, x in got.items():
        if name not in wanted:
            differences.append(f"{name}: bound {_text(x.get('bound'))} here, and no such expectation in {reference}")
        elif not _same_bound(x.get("bound"), wanted[name]):
            differences.append(f"{name}: bound {_text(x.get('bound'))} here, {_text(wanted[name])} in {reference}"
                               + _under_reference(x.get("measured"), wanted[name]))
    return BoundCheck(reference, differences)


def _under_reference(measured: Any, bound: Any) -> str:
    """What the measured value does under the reference's bound, as a clause ("" when unknown)."""
    if not isinstance(bound, Mapping) or measured is None:
        return ""
    try:
        holds = Bound(bound.get("op"), bound.get("value")).holds(measured)
    except (ValueError, TypeError):
        return ""
    return f"; measured {str(measured)[:40]} {'satisfies' if holds else 'does NOT satisfy'} it"
