"""Deadline-bound waiting: call a condition until it holds or its deadline passes, never a bare
sleep; every wait that ends while a :class:`WaitLog` is active is kept for the drill's record."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from tenacity import Retrying


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


def hold(seconds: float) -> None:
    """Keep a measurement window open for ``seconds`` (none when 0 or less): the window's length
    is what a scenario sets, so this is no wait for a state (that is :func:`wait_until`)."""
    threading.Event().wait(max(0.0, seconds))


def hold_until(epoch_seconds: float) -> None:
    """Keep a measurement window open until ``epoch_seconds`` (``time.time()``), not at all once
    it has passed."""
    hold(epoch_seconds - time.time())
