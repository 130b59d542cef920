from __future__ import annotations

import json
import time

import pytest

from harness.core.waiting import ConditionTimeout, WaitResult, wait_until, wait_until_or_raise
from harness.engine.expectations import ExpectationFailed, Expectations, Outcome, worst_verdict
from harness.spec.scenario import Bound, ExpectationSpec

SPECS = [
    ExpectationSpec("success_ratio", "probes succeed", Bound(">=", 0.99), "ratio", phase="down"),
    ExpectationSpec("recovery_seconds", "API answers again", Bound("<=", 30), "seconds"),
    ExpectationSpec("restarted", "no restarts", Bound("==", False), "bool"),
]


def measured_all(ratio=1.0, recovery=12.5, restarted=False) -> Expectations:
    exp = Expectations(SPECS)
    exp.measure("success_ratio", ratio)
    exp.measure("recovery_seconds", recovery, became_true_at=1000.0)
    exp.measure("restarted", restarted)
    return exp


def test_all_within_bounds_passes():
    exp = measured_all()
    assert [o.verdict for o in exp.outcomes()] == ["passed"] * 3
    assert exp.verdict() == "passed"
    exp.assert_all()


def test_outcome_carries_spec_fields_and_serialises():
    exp = Expectations(SPECS)
    outcome = exp.measure("success_ratio", 0.95, detail="3 of 60 failed")
    assert isinstance(outcome, Outcome)
    assert outcome.verdict == "failed" and outcome.phase == "down" and outcome.unit == "ratio"
    d = json.loads(json.dumps(outcome.to_dict()))
    assert d == {"name": "success_ratio", "description": "probes succeed", "bound": {"op": ">=", "value": 0.99},
                 "bound_text": ">= 0.99", "unit": "ratio", "measured": 0.95, "verdict": "failed",
                 "became_true_at": None, "detail": "3 of 60 failed", "phase": "down"}


def test_nan_measurement_fails_and_stays_json_safe():
    outcome = Expectations(SPECS).measure("recovery_seconds", float("nan"))
    assert outcome.verdict == "failed"
    assert json.dumps(outcome.to_dict(), allow_nan=False)


def test_failed_beats_passed():
    exp = measured_all(recovery=41.0)
    assert exp.verdict() == "failed"


def test_error_beats_failed():
    exp = measured_all(recovery=41.0)
    exp.error("success_ratio", "probe pod never started")
    assert exp.verdict() == "error"
    assert exp.outcomes()[0].detail == "probe pod never started"


def test_never_measured_is_an_error_not_a_pass():
    exp = Expectations(SPECS)
    exp.measure("success_ratio", 1.0)
    exp.measure("restarted", False)
    outcomes = exp.outcomes()
    assert [o.name for o in outcomes] == [s.name for s in SPECS]  # spec order
    assert (outcomes[1].verdict, outcomes[1].detail, outcomes[1].measured) == ("error", "not measured", None)
    assert exp.verdict() == "error"
    with pytest.raises(ExpectationFailed, match="recovery_seconds"):
        exp.assert_all()


def test_none_or_non_number_measurement_is_an_error():
    exp = Expectations(SPECS)
    assert exp.measure("success_ratio", None).verdict == "error"
    outcome = exp.measure("recovery_seconds", "fast")
    assert outcome.verdict == "error" and "'fast'" in outcome.detail


def test_bool_bound_needs_a_bool():
    exp = Expectations(SPECS)
    assert exp.measure("restarted", 0).verdict == "failed"
    assert exp.measure("restarted", True).verdict == "failed"
    assert exp.measure("restarted", False).verdict == "passed"


def test_last_measurement_wins_but_history_keeps_all():
    exp = Expectations(SPECS)
    exp.measure("recovery_seconds", 45.0)
    exp.measure("recovery_seconds", 10.0)
    assert exp.outcomes()[1].measured == 10.0 and exp.outcomes()[1].verdict == "passed"
    assert [(o.measured, o.verdict) for o in exp.history] == [(45.0, "failed"), (10.0, "passed")]


def test_unknown_name_lists_known():
    exp = Expectations(SPECS)
    for call in (lambda: exp.measure("nope", 1), lambda: exp.error("nope", "x")):
        with pytest.raises(KeyError) as info:
            call()
        assert "nope" in str(info.value) and "recovery_seconds" in str(info.value)


def test_duplicate_spec_names_rejected():
    with pytest.raises(ValueError, match="success_ratio"):
        Expectations([SPECS[0], SPECS[0]])


def test_assert_all_lists_every_bad_outcome():
    exp = measured_all(ratio=0.9, recovery=41.2)
    exp.error("restarted", "could not list pods")
    with pytest.raises(ExpectationFailed) as info:
        exp.assert_all()
    assert isinstance(info.value, AssertionError)
    message = str(info.value)
    assert "success_ratio: measured 0.9 ratio, bound >= 0.99" in message
    assert "recovery_seconds: measured 41.2 seconds, bound <= 30" in message
    assert "restarted: measured nothing, bound == false (error: could not list pods)" in message
    assert [o.name for o in info.value.outcomes] == ["success_ratio", "recovery_seconds", "restarted"]


def test_no_specs_cannot_pass():
    exp = Expectations([])
    assert exp.verdict() == "error"
    with pytest.raises(ExpectationFailed, match="no expectations"):
        exp.assert_all()


def test_worst_verdict():
    assert worst_verdict(["passed", "failed", "passed"]) == "failed"
    assert worst_verdict(["failed", "error"]) == "error"
    assert worst_verdict(["passed"]) == "passed"
    assert worst_verdict([]) == "error"


# --- wait_until -----------------------------------------------------------------

class Countdown:
    """A condition that becomes true on the n-th call, optionally raising before."""

    def __init__(self, n: int, raise_before: bool = False) -> None:
        self.n = n
        self.calls = 0
        self.raise_before = raise_before

    def __call__(self):
        self.calls += 1
        if self.calls >= self.n:
            return {"ready": self.calls}
        if self.raise_before:
            raise ConnectionError(f"refused #{self.calls}")
        return None


def test_wait_until_immediate_success():
    before = time.time()
    result = wait_until(lambda: "yes", timeout_seconds=0.2, interval_seconds=0.01)
    assert isinstance(result, WaitResult)
    assert result.ok and result.value == "yes" and result.attempts == 1 and result.last_error is None
    assert before <= result.started_at <= result.became_true_at <= time.time()
    assert 0 <= result.elapsed_seconds < 0.2


def test_wait_until_succeeds_after_n_calls():
    cond = Countdown(3)
    result = wait_until(cond, timeout_seconds=1.0, interval_seconds=0.01)
    assert result.ok and result.value == {"ready": 3}
    assert result.attempts == 3 == cond.calls
    assert result.elapsed_seconds >= 0.02  # two waits of 0.01 s


def test_wait_until_timeout_returns_not_ok():
    cond = Countdown(10**6)
    start = time.monotonic()
    result = wait_until(cond, timeout_seconds=0.2, interval_seconds=0.05, description="never")
    took = time.monotonic() - start
    assert not result.ok and result.became_true_at is None and result.elapsed_seconds is None
    assert result.value is None and result.last_error is None
    assert result.attempts == cond.calls and 3 <= result.attempts <= 7
    assert 0.2 <= took < 0.4  # stops at the deadline, not an interval past it


def test_wait_until_exceptions_count_as_not_yet():
    cond = Countdown(4, raise_before=True)
    result = wait_until(cond, timeout_seconds=1.0, interval_seconds=0.01)
    assert result.ok and result.attempts == 4
    assert result.last_error == "ConnectionError: refused #3"  # kept even after success


def test_wait_until_timeout_keeps_last_error():
    cond = Countdown(10**6, raise_before=True)
    result = wait_until(cond, timeout_seconds=0.1, interval_seconds=0.02)
    assert not result.ok
    assert result.last_error == f"ConnectionError: refused #{cond.calls}"


def test_wait_until_falsy_values_are_not_yet():
    values = iter([0, "", [], {"done": True}])
    result = wait_until(lambda: next(values), timeout_seconds=1.0, interval_seconds=0.01)
    assert result.ok and result.value == {"done": True} and result.attempts == 4


def test_wait_until_with_zero_timeout_still_tries_once():
    cond = Countdown(2)
    result = wait_until(cond, timeout_seconds=0, interval_seconds=0.5)
    assert not result.ok and cond.calls == 1


def test_wait_until_or_raise():
    assert wait_until_or_raise(Countdown(2), timeout_seconds=1.0, interval_seconds=0.01).ok
    with pytest.raises(ConditionTimeout) as info:
        wait_until_or_raise(Countdown(10**6, raise_before=True), timeout_seconds=0.05,
                            interval_seconds=0.01, description="pods ready")
    err = info.value
    assert isinstance(err, TimeoutError)
    assert err.description == "pods ready" and err.timeout_seconds == 0.05
    assert err.last_error.startswith("ConnectionError: refused")
    assert "pods ready did not hold within 0.05 seconds" in str(err) and err.result.attempts >= 2


def test_a_wait_log_keeps_how_each_wait_ended_and_its_last_error():
    from harness.core.waiting import WaitLog, log_waits

    log = WaitLog(limit=3)
    log_waits(log)
    try:
        def refuse():
            raise ConnectionRefusedError("connection refused")

        wait_until(refuse, 0.05, interval_seconds=0.01, description="API answers")
        wait_until(lambda: True, 1, description="clean")
        wait_until_or_raise(lambda: True, 1, description="clean too")
        wait_until(lambda: True, 1, description="clean three")  # over the limit: a clean one goes
    finally:
        log_waits(None)
    wait_until(lambda: True, 1, description="after the log stopped")
    entries = log.to_list()
    assert [e["what"] for e in entries] == ["API answers", "clean too", "clean three"]
    assert log.dropped == 1
    failed = entries[0]
    assert failed["ok"] is False and failed["errors"] >= 1
    assert failed["last_error"] == "ConnectionRefusedError: connection refused"
    # where: the test that waited, not the harness's own wrapper
    module, function, line = entries[1]["where"].split(":")
    assert module.endswith("test_expectations") and line.isdigit()
    assert function == "test_a_wait_log_keeps_how_each_wait_ended_and_its_last_error"


def test_the_progress_line_is_one_line_and_the_record_keeps_the_detail_whole():
    exp = Expectations(SPECS)
    detail = 'HTTP 500: {"message":"etcdserver: mvcc: database space exceeded","code":500}\n'
    outcome = exp.measure("restarted", False, detail=detail)
    assert outcome.line() == ('restarted: measured false bool, bound == false (passed: HTTP 500: '
                              '{"message":"etcdserver: mvcc: database space exceeded","code":500})')
    assert outcome.to_dict()["detail"] == detail
