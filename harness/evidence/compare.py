"""Compare the measurements of two sealed runs: CI regression of platform behaviour.

A bound says what the documents allow; a baseline says what this platform did last time. An API
recovery that went from 3 s to 60 s under a 90 s bound is still green, and only a comparison
shows it. Each expectation measured in both runs is put side by side, with the change, and is a
*regression* when

- its verdict was "passed" in the baseline and is not in the run, or
- it moved in the worse direction (the direction its bound forbids: up for ``<=``/``<``, down for
  ``>=``/``>``, any change for ``==``) by more than its tolerance: the scenario's per-expectation
  ``tolerance: {relative, absolute}`` or :data:`DEFAULT_TOLERANCES` for its unit; the allowed
  drift is the larger of ``relative * |baseline|`` and ``absolute``, or
- the drill ran in both and the expectation has no measurement in the run.

Both runs must verify (harness/evidence/verification.py) before anything is read. Runs from different
platforms (provider, Kubernetes version, node roles, platform profile) or kdrill versions are
compared only when asked (``allow_mismatch``), and the result says they differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from harness.evidence.reading import checked_verdict, expectation_problem, finite_number, read_json, scan_records
from harness.evidence.verification import escaped, verify_run
from harness.spec.scenario import Bound

# unit -> the drift tolerated by default; a unit not listed gets "other".
DEFAULT_TOLERANCES: dict[str, dict[str, float]] = {
    # Timings on a shared 2-core machine spread by about 2x between runs (see the scenarios'
    # measured ranges); a regression is a drift beyond that noise.
    "seconds": {"relative": 0.5, "absolute": 1.0},
    # A success ratio of 0.99 that becomes 0.97 is two lost requests in a hundred.
    "ratio": {"relative": 0.0, "absolute": 0.02},
    "other": {"relative": 0.5, "absolute": 0.0},
}


class CompareError(Exception):
    """A run cannot be compared (not a run, does not verify, other platform without consent)."""


@dataclass(frozen=True)
class Row:
    """One expectation in both runs. ``change`` = run - baseline in ``unit`` (None unless both
    are numbers); ``relative_change`` = change / |baseline| (None when the baseline is 0)."""

    drill: str
    case: str | None
    name: str
    unit: str
    bound: str
    base: Any
    run: Any
    base_verdict: str | None
    run_verdict: str | None
    change: float | None
    relative_change: float | None
    allowed: float | None
    regression: bool
    why: str

    @property
    def key(self) -> str:
        return f"{self.drill}{'[' + self.case + ']' if self.case else ''}.{self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "drill": self.drill, "case": self.case, "name": self.name, "unit": self.unit,
                "bound": self.bound, "base": self.base, "run": self.run, "base_verdict": self.base_verdict,
                "run_verdict": self.run_verdict, "change": self.change, "relative_change": self.relative_change,
                "allowed": self.allowed, "regression": self.regression, "why": self.why}


@dataclass
class Comparison:
    base: str
    run: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.regression]

    def to_dict(self) -> dict[str, Any]:
        return {"base": self.base, "run": self.run, "regressions": len(self.regressions),
                "rows": [r.to_dict() for r in self.rows], "notes": self.notes}


def tolerance_for(expectation: dict[str, Any]) -> dict[str, float]:
    """The expectation's own ``tolerance`` over its unit's default (a value that is not a finite
    number of 0 or more, as a scenario would have refused, counts as absent)."""
    unit = str(expectation.get("unit") or "")
    default = DEFAULT_TOLERANCES.get(unit, DEFAULT_TOLERANCES["other"])
    own = expectation.get("tolerance") if isinstance(expectation.get("tolerance"), dict) else {}
    out = {}
    for key in ("relative", "absolute"):
        value = _number(own.get(key))
        out[key] = value if value is not None and 0 <= value <= (100 if key == "relative" else 1e12) else default[key]
    return out


_number = finite_number


def _worse_sign(op: str | None) -> int:
    """+1: a larger value is worse; -1: a smaller one; 0: any change (``==``)."""
    return {"<=": 1, "<": 1, ">=": -1, ">": -1}.get(op or "", 0)


def _checked(x: dict[str, Any] | None) -> str | None:
    """The verdict an expectation entry supports: its own only when its bound holds for it."""
    if x is None:
        return None
    return "passed" if expectation_problem(x) is None else ("failed" if x.get("verdict") == "passed"
                                                            else str(x.get("verdict")))


def compare_expectation(drill: str, case: str | None, base: dict[str, Any] | None,
                        run: dict[str, Any] | None) -> Row:
    """One row; ``base``/``run`` are record expectation entries (None: absent in that run). The
    baseline's bound and tolerance judge the run (a run cannot loosen its own); verdicts are the
    ones the entries' values and bounds support."""
    spec = base or run or {}
    bound = spec.get("bound") if isinstance(spec.get("bound"), dict) else {}
    try:
        bound_text = Bound(bound.get("op"), bound.get("value")).describe()
    except (ValueError, TypeError):
        bound_text = f"{bound.get('op', '')} {bound.get('value', '')}".strip()
    name, unit = str(spec.get("name")), str(spec.get("unit") or "")
    b = base.get("measured") if base else None
    r = run.get("measured") if run else None
    bv = _checked(base)
    rv = _checked({**run, "bound": bound, "bound_text": None} if run and base else run)
    nb, nr = _number(b), _number(r)
    change = round(nr - nb, 6) if nb is not None and nr is not None else None
    relative = round(change / abs(nb), 6) if change is not None and nb else None
    tolerance = tolerance_for(spec)
    allowed = max(tolerance["relative"] * abs(nb), tolerance["absolute"]) if nb is not None else None

    def row(regression: bool, why: str) -> Row:
        return Row(drill, case, name, unit, bound_text, b, r, bv, rv, change, relative,
                   round(allowed, 6) if allowed is not None else None, regression, why)

    if base is None:
        return row(False, "new: not in the baseline")
    if run is None:
        return row(True, "not measured in the run (the drill ran)")
    if bv == "passed" and rv != "passed":
        return row(True, f"verdict {bv} -> {rv}")
    if r is None or (_number(r) is None and not isinstance(r, bool)):
        return row(b is not None, f"no measurement in the run ({str(r)[:40]})" if r is not None
                   else "no measurement in the run")
    if change is None:
        # booleans, flags: any change of value is the change
        if b != r:
            return row(rv != "passed", f"{b!r} -> {r!r}")
        return row(False, "unchanged")
    sign = _worse_sign(bound.get("op"))
    worse = abs(change) if sign == 0 else change * sign
    if worse > allowed:
        return row(True, f"{'+' if change > 0 else ''}{_fmt(change)} {unit}, beyond the tolerated "
                         f"{_fmt(allowed)} {unit} in the worse direction")
    return row(False, "within tolerance" if change else "unchanged")


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _load(run_dir: Path, trusted_fingerprints: Iterable[str] = ()
          ) -> tuple[dict[str, Any], dict[tuple[str, str | None], dict[str, Any]], str | None]:
    """(run.json, {(drill, case): record}, the signer's SHA-256 fingerprint) of a run that
    verifies. Raises CompareError."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CompareError(f"{run_dir} is not a run directory")
    result = verify_run(run_dir, trusted_fingerprints=list(trusted_fingerprints))
    if not result.ok:
        raise CompareError(f"{run_dir} does not verify, so its figures prove nothing: "
                           + "; ".join(str(p) for p in result.problems[:5]))
    try:
        meta = read_json(run_dir / "run.json")
    except (OSError, ValueError) as exc:
        raise CompareError(f"{run_dir}/run.json cannot be read: {exc}") from None
    if not isinstance(meta, dict):
        raise CompareError(f"{run_dir}/run.json: expected a JSON object, got {type(meta).__name__}")
    records, unreadable = scan_records(run_dir)
    if unreadable:
        raise CompareError(f"{run_dir} has unreadable records: {', '.join(p.name for p, _ in unreadable)}")
    by_case: dict[tuple[str, str | None], dict[str, Any]] = {}
    for path, record in records:
        verdict, _why = checked_verdict(record)
        case = record.get("case") or None
        key = (str(record.get("drill")), case if isinstance(case, str) else None if case is None else str(case))
        if key in by_case:
            raise CompareError(f"{run_dir} has two records of {key[0]}{'[' + key[1] + ']' if key[1] else ''} "
                               f"({path.name}): a run has one per drill case")
        names = [str(x.get("name")) for x in record.get("expectations") or [] if isinstance(x, dict)]
        if len(names) != len(set(names)):
            raise CompareError(f"{run_dir}/{path.name} lists an expectation twice")
        by_case[key] = {**record, "verdict": verdict}
    return meta, by_case, result.signer.fingerprint if result.signer else None


def platform_of(meta: dict[str, Any], records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """What must match for two runs to be compared: kdrill version, provider, Kubernetes version,
    node roles, and the platform profile's hash when the run has one."""
    cluster = meta.get("cluster") if isinstance(meta.get("cluster"), dict) else {}
    first = next(iter(records), {})
    rc = first.get("cluster") if isinstance(first.get("cluster"), dict) else {}
    nodes = cluster.get("nodes") or rc.get("nodes") or []
    roles = sorted("+".join(n.get("roles") or []) or "worker" for n in nodes if isinstance(n, dict))
    platform = meta.get("platform") if isinstance(meta.get("platform"), dict) else {}
    return {"kdrill_version": meta.get("kdrill_version"), "provider": cluster.get("provider") or rc.get("provider"),
            "kubernetes_version": cluster.get("kubernetes_version") or rc.get("kubernetes_version"),
            "node_roles": roles, "platform": platform.get("hash")}


def compare_runs(base_dir: Path, run_dir: Path, *, allow_mismatch: bool = False,
                 trusted_fingerprints: Iterable[str] = ()) -> Comparison:
    """Every expectation of every drill case in either run. Raises CompareError when a run does
    not verify (by a trusted key, when fingerprints are given), no fingerprint is given and the
    two are signed by different keys, the two differ in platform or kdrill version and
    ``allow_mismatch`` is False, or they have no drill case in common."""
    trusted = list(trusted_fingerprints)
    base_meta, base, base_signer = _load(base_dir, trusted)
    run_meta, run, run_signer = _load(run_dir, trusted)
    comparison = Comparison(base=Path(base_dir).name, run=Path(run_dir).name)
    if base_signer != run_signer and not trusted:
        # Each seal holds, but unpinned it proves only that some key sealed each run: a copy
        # re-sealed with another key looks like this, so it is refused, not noted.
        # Short fingerprints: the one line stays whole (printable cuts at 200); verify prints them whole.
        raise CompareError(f"signed by different keys (sha256:{str(base_signer)[:16]}…, sha256:{str(run_signer)[:16]}…), "
                           "none pinned: a copy re-sealed with another key looks like this; pin yours (--fingerprint)")
    if not trusted:
        comparison.notes.append(f"both runs signed by sha256:{str(base_signer)[:16]}..., a key that was not pinned "
                                "(--fingerprint): the seals show the runs unchanged since it signed, not who signed")
    pb, pr = platform_of(base_meta, base.values()), platform_of(run_meta, run.values())
    differ = {k: (pb[k], pr[k]) for k in pb if pb[k] != pr[k]}
    if differ:
        text = "; ".join(f"{k}: {a!r} vs {b!r}" for k, (a, b) in differ.items())
        if not allow_mismatch:
            raise CompareError(f"the runs differ in {text}; compare them anyway with --any-platform")
        comparison.notes.append(f"compared across a difference the user accepted: {text}")
    if not set(base) & set(run):
        # Nothing side by side: "0 regressions" would claim a comparison that never happened.
        raise CompareError(f"the runs have no drill case in common (baseline: {len(base)}, run: {len(run)}): "
                           "nothing to compare")
    if Path(base_dir).resolve() == Path(run_dir).resolve():
        comparison.notes.append("the baseline and the run are the same run")
    for key in sorted(set(base) | set(run), key=lambda k: (k[0], k[1] or "")):
        drill, case = key
        if key not in run:
            comparison.notes.append(f"{drill}{'[' + case + ']' if case else ''}: in the baseline only (not run)")
            continue
        if key not in base:
            comparison.notes.append(f"{drill}{'[' + case + ']' if case else ''}: new in the run")
        base_x = {x.get("name"): x for x in (base.get(key, {}).get("expectations") or []) if isinstance(x, dict)}
        run_x = {x.get("name"): x for x in (run[key].get("expectations") or []) if isinstance(x, dict)}
        if key in base and base[key].get("verdict") == "passed" and run[key].get("verdict") != "passed":
            # The drill case as a whole: an error or a skip is a change even if no value moved.
            comparison.rows.append(Row(drill, case, "(drill verdict)", "", "", "passed", run[key].get("verdict"),
                                       "passed", run[key].get("verdict"), None, None, None, True,
                                       f"drill case passed -> {run[key].get('verdict')}"))
        for name in list(base_x) + [n for n in run_x if n not in base_x]:
            if key not in base:
                comparison.rows.append(compare_expectation(drill, case, None, run_x[name]))
            else:
                comparison.rows.append(compare_expectation(drill, case, base_x.get(name), run_x.get(name)))
    return comparison


def format_table(comparison: Comparison) -> str:
    """A plain-text table, one line per expectation, regressions marked."""
    header = ("", "expectation", "unit", "bound", "baseline", "run", "change", "why")
    lines = [header]
    for r in comparison.rows:
        change = "—" if r.change is None else (f"{'+' if r.change > 0 else ''}{_fmt(r.change)}"
                                               + (f" ({r.relative_change:+.0%})" if r.relative_change is not None else ""))
        lines.append(("REGRESSION" if r.regression else "", r.key, r.unit, r.bound, _cell(r.base), _cell(r.run),
                      change, r.why))
    lines = [tuple(printable(c) for c in line) for line in lines]
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header) - 1)]
    out = ["  ".join(str(c).ljust(w) for c, w in zip(line[:-1], widths)) + "  " + str(line[-1]) for line in lines]
    return "\n".join(out)


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return _fmt(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def printable(value: Any) -> str:
    """Text from a record, safe on a terminal: control characters shown escaped, at most 200 characters."""
    return escaped(str(value))[:200]


_printable = printable  # the name harness/cli/history.py imports
