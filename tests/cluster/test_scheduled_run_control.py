"""The control run of control-plane-stop's "nothing is created while the control plane is down"
(scenarios/control-plane-stop.yaml, harness/faults/scheduled_runs.py): the drill's own CronJob,
on the real cluster with the control plane up, over a window as long as the drill's outage. A
working CronJob controller creates the run that falls due in it, so the drill's expectation
``scheduled_runs_created_during_outage`` (``== 0``), judged on the facts of this window, fails:
the expectation can fail, and only a stopped control plane makes it hold."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.core.ledger import Ledger
from harness.core.waiting import wait_until_or_raise
from harness.engine.workload import declared_manifests
from harness.faults import injected
from harness.faults.scheduled_runs import judged, minutes_due, scheduled_jobs, scheduled_run_facts
from harness.kube import objects as kube_objects
from harness.scaffolding.drill_namespace import DrillNamespace
from harness.spec.scenario import find_scenario

pytestmark = [pytest.mark.cluster]

NAMESPACE = "kdrill-scheduled-control"
# Beyond the window: the controller checks its schedules every 10 s at most, and creates a run
# within about a second of its time here (the drill's evidence: scheduled_runs.lag_with_control_plane).
CREATED_AFTER_DUE_SECONDS = 15


def test_a_run_falls_due_and_is_created_with_the_control_plane_up(kdrill_cluster, tmp_path: Path):
    scenario = find_scenario("control-plane-stop")
    name = scenario.params_for("components")["scheduled_job"]
    hold = float(scenario.params_for("components")["hold_seconds"])
    cronjob = declared_manifests([m for m in scenario.workload["manifests"]
                                  if m["kind"] == "CronJob" and m["metadata"]["name"] == name], NAMESPACE)[0]
    expectation = next(e for e in scenario.expectations if e.name == "scheduled_runs_created_during_outage")
    with injected(DrillNamespace(kdrill_cluster, NAMESPACE), Ledger(tmp_path / "ledger")):
        kube_objects.create(kdrill_cluster, cronjob)
        window = (time.time(), time.time() + hold)  # as long as the drill's outage, from now
        due = minutes_due(*judged(window))
        assert due, f"an every-minute schedule is due in any {hold:g} s window"
        wait_until_or_raise(lambda: any(job["scheduled"] in due for job in scheduled_jobs(kdrill_cluster, NAMESPACE, name)),
                            due[0] + CREATED_AFTER_DUE_SECONDS - time.time(), 1.0,
                            f"the run due at {time.strftime('%H:%M:%S', time.localtime(due[0]))} created")
        facts = scheduled_run_facts(scheduled_jobs(kdrill_cluster, NAMESPACE, name), window, api_back_at=None)
    created = facts["scheduled_runs_created_during_outage"]
    assert facts["scheduled_runs_due_during_outage"] == len(due) and created >= 1, facts
    assert not expectation.bound.holds(created), (
        f"with the control plane up, {created} run(s) created in the window: the drill's bound "
        f"{expectation.bound.describe()} must not hold")
