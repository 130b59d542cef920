"""A decision due during a control-plane stop: a CronJob's run.

With a working control plane the CronJob controller (in kube-controller-manager) creates a Job at
each time its schedule names; with the control plane stopped nothing creates it, and once the
controller runs again it creates the run it missed (within ``startingDeadlineSeconds``). A CronJob
that runs every minute (``* * * * *``) is due at least once in any outage of 60 s or more, so "no
run was created during the outage" could fail: a working controller would have created one. Its
Jobs are suspended (``jobTemplate.spec.suspend: true``): the run is the Job the controller
creates, with no pod to disturb what else the drill measures on the workers.

Each Job the controller creates carries the schedule time it was made for (annotation
:data:`SCHEDULED_AT`). Once back, the controller creates the most recent run it missed, not every
one: measured here, a run due in the outage is never created when a later one also fell due
before the controller returned (stop-components: it returns about 20 s after the revert starts,
past the next minute), and is created late when none did. So the return is timed to the first run
created after it, whichever schedule time it carries, and the runs due in the outage that were
never created are counted beside it (evidence, not an expectation: it depends on when the return
falls against the schedule).

Source: Kubernetes "CronJob", https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/
(schedule syntax; "Job creation": missed schedules and startingDeadlineSeconds).
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from kubernetes import client

from harness.kube.providers import Cluster

EVERY_MINUTE = "* * * * *"
# A creationTimestamp has whole seconds, cut down: a Job stamped 12:00:07 was created between
# 12:00:07 and 12:00:08. One stamped in the outage's last second may have been made just after
# the return (frozen nodes are given back in under a second), so only runs due, and Jobs stamped,
# a full second before the outage ends are judged.
CREATION_RESOLUTION_SECONDS = 1.0
# The shortest hold with a whole minute in the part of the outage judged.
LEAST_HOLD_SECONDS = 60 + CREATION_RESOLUTION_SECONDS + 1
SCHEDULED_AT = "batch.kubernetes.io/cronjob-scheduled-timestamp"


def cronjob_problem(manifests: list[dict[str, Any]], name: str, hold_seconds: float) -> tuple[str, str] | None:
    """(expected, got) when ``name`` is not a declared CronJob of the drill's namespace that runs
    every minute with suspended Jobs and a starting deadline past the outage (``hold_seconds``),
    else None."""
    cronjob = next((m for m in manifests if m.get("kind") == "CronJob" and m["metadata"].get("name") == name
                    and m["metadata"].get("namespace") in (None, "$(namespace)")), None)
    if cronjob is None:
        declared = ", ".join(m["metadata"]["name"] for m in manifests if m.get("kind") == "CronJob")
        return "a CronJob of workload.manifests in the drill's namespace: " + (declared or "none declared"), repr(name)
    spec = cronjob.get("spec") if isinstance(cronjob.get("spec"), dict) else {}
    template = spec.get("jobTemplate") if isinstance(spec.get("jobTemplate"), dict) else {}
    suspended = (template.get("spec") or {}).get("suspend") if isinstance(template.get("spec"), dict) else None
    deadline = spec.get("startingDeadlineSeconds")
    if spec.get("schedule") != EVERY_MINUTE or suspended is not True or not isinstance(deadline, int) \
            or isinstance(deadline, bool) or deadline <= hold_seconds:
        return (f"a CronJob due in any outage, whose missed run is still made after it: schedule {EVERY_MINUTE!r}, "
                f"jobTemplate.spec.suspend true, startingDeadlineSeconds more than hold_seconds ({hold_seconds:g})",
                f"schedule {spec.get('schedule')!r}, suspend {suspended!r}, startingDeadlineSeconds {deadline!r}")
    return None


def judged(window: tuple[float, float]) -> tuple[float, float]:
    """The part of the outage ``window`` (epoch seconds) judged: all but its last second."""
    return window[0], window[1] - CREATION_RESOLUTION_SECONDS


def minutes_due(start: float, end: float) -> list[float]:
    """The whole minutes in ``[start, end)`` (epoch seconds): when an every-minute schedule is due."""
    first = math.ceil(start / 60) * 60
    return [float(t) for t in range(first, math.ceil(end), 60) if t < end]


def scheduled_jobs(cluster: Cluster, namespace: str, cronjob: str) -> list[dict[str, Any]]:
    """{"name", "scheduled", "created"} (epoch seconds; scheduled None without the annotation) of
    every Job CronJob ``cronjob`` owns, by creation. Raises kubernetes.client.ApiException."""
    jobs = client.BatchV1Api(cluster.api).list_namespaced_job(namespace, _request_timeout=10).items
    out = []
    for job in jobs:
        if not any(o.kind == "CronJob" and o.name == cronjob for o in job.metadata.owner_references or []):
            continue
        stamp = (job.metadata.annotations or {}).get(SCHEDULED_AT)
        out.append({"name": job.metadata.name, "created": job.metadata.creation_timestamp.timestamp(),
                    "scheduled": datetime.fromisoformat(stamp).timestamp() if stamp else None})
    return sorted(out, key=lambda j: j["created"])


def scheduled_run_facts(jobs: list[dict[str, Any]], window: tuple[float, float],
                        api_back_at: float | None) -> dict[str, Any]:
    """The facts of ControlPlaneStop's ``scheduled_job`` over the outage ``window`` (the stop to
    the revert's start, epoch seconds; its last CREATION_RESOLUTION_SECONDS not judged), from
    :func:`scheduled_jobs`: the runs due in it, the Jobs stamped in it (None when none was due: it
    could not have failed), and the seconds from the
    first API server seen ready (``api_back_at``) to the first run created after the window, of
    any schedule time (0 when made before the API was seen; None when none was)."""
    start, end = judged(window)
    due = minutes_due(start, end)
    created_in = [j for j in jobs if start <= j["created"] < end]
    first = next((j for j in jobs if j["created"] > window[1]), None)
    # 0 when made before the API servers were first seen ready: they are asked in turn once the
    # revert is done, and a frozen node's controller-manager can act before (measured: 9.1 s before).
    after = max(0.0, first["created"] - api_back_at) if first is not None and api_back_at is not None else None
    return {"scheduled_runs_due_during_outage": len(due),
            "scheduled_runs_created_during_outage": len(created_in) if due else None,
            "scheduled_run_created_after_return_seconds": after}


def never_created(jobs: list[dict[str, Any]], window: tuple[float, float]) -> list[float]:
    """The schedule times due in the judged part of the outage ``window`` that no Job of ``jobs``
    was made for."""
    made = {j["scheduled"] for j in jobs}
    return [t for t in minutes_due(*judged(window)) if t not in made]


def lag_with_control_plane(jobs: list[dict[str, Any]], before: float) -> list[float]:
    """Seconds from each run's schedule time to its Job's creation, for the runs due before
    ``before`` (epoch seconds: the stop): the same trigger with a working control plane."""
    return [round(j["created"] - j["scheduled"], 2) for j in jobs
            if j["scheduled"] is not None and j["scheduled"] < before]
