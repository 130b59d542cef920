"""The CronJob run due during a control-plane stop (harness/faults/scheduled_runs.py): which runs
an every-minute schedule makes due in the outage, which were created there, and how long after
the return the missed one was created."""

from __future__ import annotations

import pytest

from harness.faults.scheduled_runs import lag_with_control_plane, minutes_due, never_created, scheduled_run_facts

T = 1_800_000_000.0  # a whole minute (epoch seconds)


@pytest.mark.parametrize("start, end, due", [
    (T - 0.5, T + 59.5, [T]),
    (T, T + 60, [T]),  # [start, end): the next minute is the window's end, not in it
    (T + 0.1, T + 60.1, [T + 60]),
    (T + 1, T + 59, []),  # under a minute: maybe none (window_problem refuses such a hold)
    (T - 61, T + 61, [T - 60, T, T + 60]),
])
def test_the_minutes_an_every_minute_schedule_makes_due(start, end, due):
    assert minutes_due(start, end) == due


def job(scheduled, created):
    return {"name": f"due-{int(scheduled)}", "scheduled": scheduled, "created": created}


def test_the_run_due_in_the_outage_created_after_the_return_is_timed_from_the_api_seen_back():
    window, api_back = (T - 20, T + 40), T + 55
    jobs = [job(T - 60, T - 59), job(T, T + 61)]  # before the stop on time; the missed one late
    facts = scheduled_run_facts(jobs, window, api_back)
    assert facts == {"scheduled_runs_due_during_outage": 1, "scheduled_runs_created_during_outage": 0,
                     "scheduled_run_created_after_return_seconds": pytest.approx(6.0)}
    assert lag_with_control_plane(jobs, window[0]) == [1.0]


def test_a_run_created_in_the_outage_is_counted_the_claim_broken():
    """A working controller creates the run on time: what a stop that did not stop it looks like."""
    facts = scheduled_run_facts([job(T, T + 1)], (T - 20, T + 40), T + 55)
    assert facts["scheduled_runs_created_during_outage"] == 1
    assert facts["scheduled_run_created_after_return_seconds"] is None  # nothing was left to make after it


def test_with_nothing_due_the_count_could_not_fail_and_is_none():
    facts = scheduled_run_facts([], (T + 1, T + 59), T + 70)
    assert facts == {"scheduled_runs_due_during_outage": 0, "scheduled_runs_created_during_outage": None,
                     "scheduled_run_created_after_return_seconds": None}


def test_no_run_created_after_the_return_has_no_time():
    facts = scheduled_run_facts([job(T - 60, T - 59)], (T - 20, T + 40), T + 55)
    assert facts["scheduled_runs_due_during_outage"] == 1
    assert facts["scheduled_run_created_after_return_seconds"] is None


def test_the_return_is_timed_to_the_first_run_after_it_though_the_run_due_in_the_outage_was_skipped():
    """As measured with stop-components: the controller, back after the next minute, made only
    the most recent run it missed; the one due in the outage was never made."""
    window, api_back = (T - 7, T + 53), T + 75
    jobs = [job(T + 60, T + 88)]
    assert scheduled_run_facts(jobs, window, api_back)["scheduled_run_created_after_return_seconds"] == \
        pytest.approx(13.0)
    assert never_created(jobs, window) == [T]
    assert never_created([job(T, T + 56)], window) == []


def test_a_job_stamped_in_the_outages_last_second_is_not_judged_it_may_be_the_return():
    """As measured with frozen nodes: the run due in the outage was made 0.3 s after the revert
    started, stamped with the second before it."""
    window = (T - 53.4, T + 6.7)
    facts = scheduled_run_facts([job(T, T + 6)], window, T + 7)
    assert facts["scheduled_runs_due_during_outage"] == 1
    assert facts["scheduled_runs_created_during_outage"] == 0


def test_a_run_made_before_the_api_was_seen_back_is_0_seconds_after_it():
    facts = scheduled_run_facts([job(T, T + 8)], (T - 53.4, T + 6.7), T + 17.1)
    assert facts["scheduled_run_created_after_return_seconds"] == 0.0
