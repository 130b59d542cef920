"""Expectation outcomes for one drill.

A drill measures each expectation named in its scenario; ``Expectations``
compares the measurement with the documented bound and keeps the verdict.
Anything not measured is an error, so a drill cannot pass by forgetting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

from harness.spec.scenario import Bound, ExpectationSpec

VERDICTS = ("passed", "failed", "error")


def worst_verdict(verdicts: Iterable[str]) -> str:
    """"error" beats "failed" beats "passed". An empty input is "error": nothing was checked."""
    found = set(verdicts)
    for verdict in ("error", "failed", "passed"):
        if verdict in found:
            return verdict
    return "error"


@dataclass
class Outcome:
    """The verdict on one expectation. ``measured`` is in ``unit``;
    ``became_true_at`` is epoch seconds (or None); ``verdict`` is one of VERDICTS."""

    name: str
    description: str
    bound: Bound
    unit: str
    measured: float | int | bool | None
    verdict: str
    became_true_at: float | None = None
    detail: str = ""
    phase: str | None = None
    tolerance: dict[str, float] | None = None  # the scenario's drift tolerance (harness/evidence/compare.py)

    def to_dict(self) -> dict[str, Any]:
        measured = self.measured
        if isinstance(measured, float) and not math.isfinite(measured):
            measured = str(measured)  # JSON has no NaN/Infinity; keep the fact readable
        data = {"name": self.name, "description": self.description, "bound": self.bound.to_dict(),
                "bound_text": self.bound.describe(), "unit": self.unit, "measured": measured,
                "verdict": self.verdict, "became_true_at": self.became_true_at,
                "detail": self.detail, "phase": self.phase}
        if self.tolerance is not None:
            data["tolerance"] = dict(self.tolerance)
        return data

    def line(self) -> str:
        """E.g. ``"api_recovery_seconds: measured 41.2 seconds, bound <= 30"``."""
        measured = "nothing" if self.measured is None else f"{_fmt(self.measured)} {self.unit}"
        text = f"{self.name}: measured {measured}, bound {self.bound.describe()}"
        # One line: a detail quoting an API response keeps its newlines in the record, not here.
        detail = " ".join(str(self.detail or "").split())
        return f"{text} ({self.verdict}: {detail})" if detail else f"{text} ({self.verdict})"


def _fmt(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


class ExpectationFailed(AssertionError):
    """Some expectations failed or could not be measured; ``outcomes`` lists them."""

    def __init__(self, outcomes: list[Outcome]) -> None:
        self.outcomes = outcomes
        if not outcomes:
            super().__init__("no expectations to check: a drill with nothing measured cannot pass")
            return
        lines = "\n".join(f"  {o.line()}" for o in outcomes)
        super().__init__(f"{len(outcomes)} expectation(s) not met:\n{lines}")


class Expectations:
    """Outcomes for one drill, keyed by the scenario's expectation specs.

    Raises ValueError if two specs share a name.
    """

    def __init__(self, specs: Iterable[ExpectationSpec]) -> None:
        self._specs: dict[str, ExpectationSpec] = {}
        for spec in specs:
            if spec.name in self._specs:
                raise ValueError(f"duplicate expectation name {spec.name!r}")
            self._specs[spec.name] = spec
        self._latest: dict[str, Outcome] = {}
        self.history: list[Outcome] = []  # every outcome recorded, in order, including replaced ones

    def __contains__(self, name: object) -> bool:
        """Whether an expectation called ``name`` is to be measured (e.g. only in some cases)."""
        return name in self._specs

    def _spec(self, name: str) -> ExpectationSpec:
        try:
            return self._specs[name]
        except KeyError:
            raise KeyError(f"unknown expectation {name!r} (known: {', '.join(self._specs) or 'none'})") from None

    def _record(self, spec: ExpectationSpec, measured: Any, verdict: str, detail: str,
                became_true_at: float | None) -> Outcome:
        outcome = Outcome(name=spec.name, description=spec.description, bound=spec.bound, unit=spec.unit,
                          measured=measured, verdict=verdict, became_true_at=became_true_at,
                          detail=detail, phase=spec.phase, tolerance=spec.tolerance)
        self._latest[spec.name] = outcome  # last measurement wins
        self.history.append(outcome)
        return outcome

    def measure(self, name: str, measured: Any, detail: str = "",
                became_true_at: float | None = None) -> Outcome:
        """Compare ``measured`` (in the spec's unit) with its bound and record it.

        None, or a value that is neither a number nor a bool, is recorded as
        "error" (there is no measurement to judge). Raises KeyError for an
        unknown name, listing the known ones.
        """
        spec = self._spec(name)
        if measured is None:
            return self._record(spec, None, "error", detail or "no measurement", became_true_at)
        if not isinstance(measured, (bool, int, float)):
            note = f"measured value {measured!r} is not a number or bool"
            return self._record(spec, None, "error", f"{note}; {detail}" if detail else note, became_true_at)
        verdict = "passed" if spec.bound.holds(measured) else "failed"
        return self._record(spec, measured, verdict, detail, became_true_at)

    def error(self, name: str, detail: str) -> Outcome:
        """Record that the measurement could not be made. Raises KeyError for an unknown name."""
        return self._record(self._spec(name), None, "error", detail, None)

    def specs(self) -> list[ExpectationSpec]:
        """The expectations to check, in scenario order."""
        return list(self._specs.values())

    def outcomes(self) -> list[Outcome]:
        """Latest outcome per spec, in spec order; unmeasured specs are "error" / "not measured"."""
        return [self._latest.get(name) or Outcome(
                    name=spec.name, description=spec.description, bound=spec.bound, unit=spec.unit,
                    measured=None, verdict="error", detail="not measured", phase=spec.phase,
                    tolerance=spec.tolerance)
                for name, spec in self._specs.items()]

    def verdict(self) -> str:
        """"error" if any outcome is an error, else "failed" if any failed, else "passed"."""
        return worst_verdict(o.verdict for o in self.outcomes())

    def assert_all(self) -> None:
        """Raises ExpectationFailed listing every failed or error outcome."""
        bad = [o for o in self.outcomes() if o.verdict != "passed"]
        if bad or not self._specs:
            raise ExpectationFailed(bad)
