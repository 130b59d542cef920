"""Expectation outcomes for one drill, and deadline-bound waiting.

A drill measures each expectation named in its scenario; ``Expectations``
compares the measurement with the documented bound and keeps the verdict.
Anything not measured is an error, so a drill cannot pass by forgetting.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from tenacity import Retrying

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
        return f"{text} ({self.verdict}: {self.detail})" if self.detail else f"{text} ({self.verdict})"


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


@dataclass
class WaitResult:
    """How a wait ended. ``started_at``/``became_true_at`` are epoch seconds;
    ``elapsed_seconds`` is from start until the condition held (None if it never did).
    ``value`` is the truthy value, or the last value returned on timeout."""

    ok: bool
    value: Any
    started_at: float
    became_true_at: float | None
    elapsed_seconds: float | None
    attempts: int
    last_error: str | None = None
    description: str = ""


class ConditionTimeout(TimeoutError):
    """A condition did not hold within its deadline."""

    def __init__(self, description: str, timeout_seconds: float, last_error: str | None = None,
                 result: WaitResult | None = None) -> None:
        self.description = description
        self.timeout_seconds = timeout_seconds
        self.last_error = last_error
        self.result = result
        text = f"{description or 'condition'} did not hold within {timeout_seconds} seconds"
        super().__init__(f"{text} (last error: {last_error})" if last_error else text)


@dataclass
class _Attempt:
    ok: bool
    value: Any = None
    at: float | None = None
    at_monotonic: float | None = None


class WaitLog:
    """Every :func:`wait_until` that ended while this log was active (:func:`log_waits`), for the
    drill's record: a wait that never held, and the last error its condition raised, would
    otherwise be lost in "not yet". Entries: {"what", "where", "ok", "timeout_seconds",
    "elapsed_seconds", "attempts", "errors", "last_error", "started_at"} (seconds; ``where`` is
    the caller as ``module:function:line``). At most ``limit`` are kept; ``dropped`` counts the
    rest (clean successes are dropped before anything that failed or saw an error)."""

    def __init__(self, limit: int = 300) -> None:
        self.limit, self.entries, self.dropped = limit, [], 0
        self._lock = threading.Lock()

    def add(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.entries.append(entry)
            if len(self.entries) > self.limit:
                clean = next((i for i, e in enumerate(self.entries) if e["ok"] and not e["errors"]), 0)
                del self.entries[clean]
                self.dropped += 1

    def to_list(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.entries)


_wait_log: WaitLog | None = None


def log_waits(log: WaitLog | None) -> None:
    """Record every following wait in ``log`` (None: stop recording). One drill at a time."""
    global _wait_log
    _wait_log = log


def _caller(depth: int) -> str:
    frame = sys._getframe(depth)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{frame.f_globals.get('__name__', '?')}:{frame.f_code.co_name}:{frame.f_lineno}"


def wait_until(condition: Callable[[], Any], timeout_seconds: float, interval_seconds: float = 0.5,
               description: str = "") -> WaitResult:
    """Call ``condition`` every ``interval_seconds`` until it returns a truthy
    value or ``timeout_seconds`` have passed. The first call is immediate and
    one last call is made at the deadline. Exceptions from the condition count
    as "not yet"; the last one is reported in ``last_error``. Never raises on
    timeout: returns ``ok=False``. While a :class:`WaitLog` is active, how the wait ended
    (with its last error) is added to it.
    """
    started_at = time.time()
    start = time.monotonic()
    deadline = start + timeout_seconds
    errors: list[str] = []
    attempts = 0

    def attempt() -> _Attempt:
        nonlocal attempts
        attempts += 1
        try:
            value = condition()
        except Exception as exc:  # noqa: BLE001 - any failure means "not yet"
            errors.append(f"{type(exc).__name__}: {exc}")
            return _Attempt(ok=False)
        if value:
            return _Attempt(ok=True, value=value, at=time.time(), at_monotonic=time.monotonic())
        return _Attempt(ok=False, value=value)

    retrying = Retrying(
        retry=lambda state: not state.outcome.result().ok,
        stop=lambda state: time.monotonic() >= deadline,
        # Never sleep past the deadline, so the last attempt lands on it.
        wait=lambda state: max(0.0, min(interval_seconds, deadline - time.monotonic())),
        retry_error_callback=lambda state: state.outcome.result(),
        reraise=True,
    )
    result: _Attempt = retrying(attempt)
    log = _wait_log
    if log is not None:
        log.add({"what": description, "where": _caller(2), "ok": result.ok, "timeout_seconds": timeout_seconds,
                 "elapsed_seconds": round(((result.at_monotonic if result.at_monotonic is not None
                                            else time.monotonic()) - start), 3),
                 "attempts": attempts, "errors": len(errors), "last_error": (errors[-1][:500] if errors else None),
                 "started_at": started_at})
    return WaitResult(
        ok=result.ok, value=result.value, started_at=started_at, became_true_at=result.at,
        elapsed_seconds=(result.at_monotonic - start) if result.at_monotonic is not None else None,
        attempts=attempts, last_error=errors[-1] if errors else None, description=description)


def wait_until_or_raise(condition: Callable[[], Any], timeout_seconds: float, interval_seconds: float = 0.5,
                        description: str = "") -> WaitResult:
    """Like ``wait_until`` but raises ConditionTimeout(description, timeout_seconds, last_error)
    when the condition never holds."""
    result = wait_until(condition, timeout_seconds, interval_seconds, description)
    if not result.ok:
        raise ConditionTimeout(description, timeout_seconds, result.last_error, result)
    return result
