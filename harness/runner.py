"""The runner: a data-only scenario (one with a ``runner`` section and no drill file), run.

The path a drill takes, in named, timed phases:

1. ``setup``: a fresh namespace (in the ledger), the built-in HTTP server as Deployment and
   Service ``web`` (``workload.replicas``, default 2), and the declared probes: one in-cluster
   probe pod on the last worker calls the Service by name and/or ClusterIP; proven healthy
   (every target answered) before the fault, or the drill stops with an error.
2. ``baseline``: ``runner.windows.baseline_seconds`` of probing with nothing broken.
3. ``fault``: the scenario's fault, built by its ``for_scenario(cluster, namespace, params)``,
   injected through the ledger, held ``hold_seconds``, then reverted and verified.
   With ``runner.abort`` (a probe and ``max_failing_seconds``), the hold is guarded: once that
   probe has failed without a break for longer than allowed, the fault is reverted at once and
   the abort recorded (``observations.abort``); the drill's expectations are still measured and
   its verdict is error.
4. ``after``: ``after_seconds`` of probing with the fault reverted.
5. Each expectation's ``measure`` is computed by harness/measures.py over its probe's samples in
   its window; the vital signs are watched around all of it by the plugin, as for any drill.

The windows are timed waits by design (how long the platform is watched), not synchronisation.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from harness import measures
from harness.expectations import wait_until
from harness.faults import FaultError, fault_class
from harness.probes.incluster import InClusterProbe, service_targets
from harness.timeline import Timeline
from harness.workloads import deploy_http_server

APP = "web"
log = logging.getLogger("kdrill.runner")


# How often the abort guard reads its probe's log during the hold (one API read each time).
GUARD_CHECK_SECONDS = 1.0


class DrillAborted(RuntimeError):
    """The abort guard stopped the fault early: its steady-state probe failed for too long."""


def hold(seconds: float) -> None:
    """Let a window run its length (the platform is watched meanwhile)."""
    threading.Event().wait(max(0.0, seconds))


def failing_since(samples, since: float) -> float | None:
    """When the probe's current run of failures began (epoch seconds): the first failed sample
    after its last success at or after ``since``; None while it is not failing (its latest sample
    succeeded, or it has no sample since ``since``)."""
    run_start = None
    for sample in sorted((s for s in samples if s.t >= since), key=lambda s: s.t):
        if sample.ok:
            run_start = None
        elif run_start is None:
            run_start = sample.t
    return run_start


def guarded_hold(seconds: float, guard: dict | None, samples_since, now=time.time,
                 quiet_allowance_seconds: float = 5.0) -> dict | None:
    """Hold the fault ``seconds``; with ``guard`` ({probe, max_failing_seconds}), stop early once
    the guard probe (``samples_since(t0)``: its samples since the hold began) has been failing
    for longer than ``max_failing_seconds``. Failing is any of: its calls fail without a break
    (``reason`` "failing"); it logs no answer for longer than that plus
    ``quiet_allowance_seconds`` (a call hung, e.g. on a lookup: "no answer"); its log cannot be
    read for longer than that ("unreadable": a guard that cannot see stops the fault rather than
    hold it blind). Returns the abort (probe, reason, when the failure began, how long it
    lasted, when the guard tripped; epoch seconds and seconds) or None when the hold ran its
    length."""
    started = now()
    deadline = started + seconds
    unreadable_since = None
    while (left := deadline - now()) > 0:
        threading.Event().wait(min(GUARD_CHECK_SECONDS, left) if guard else left)
        if not guard:
            continue
        limit = guard["max_failing_seconds"]
        try:
            samples = [x for x in samples_since(started) if x.t >= started]
        except Exception as exc:
            log.warning("abort guard could not read probe %s: %s", guard["probe"], exc)
            unreadable_since = unreadable_since or now()
            began, reason = unreadable_since, f"unreadable: {type(exc).__name__}: {exc}"[:300]
        else:
            unreadable_since = None
            began, reason = failing_since(samples, started), "failing"
            if began is None:
                last = max((x.t for x in samples), default=started)
                if now() - last > limit + quiet_allowance_seconds:
                    began, reason = last + quiet_allowance_seconds, "no answer"
        if began is not None and now() - began > limit:
            tripped = now()
            return {"probe": guard["probe"], "reason": reason, "max_failing_seconds": limit,
                    "failing_since": began, "failing_seconds": round(tripped - began, 2), "tripped_at": tripped,
                    "held_seconds": round(tripped - started, 2), "hold_seconds_planned": seconds}
    return None


def run(drill) -> None:
    """Run ``drill.scenario`` (data-only) through ``drill``. Raises what the drill's steps raise
    (after reverting), and ExpectationFailed when an expectation does not hold."""
    scenario, cluster, ns = drill.scenario, drill.cluster, drill.namespace
    spec = scenario.runner
    windows = {k: float(v) for k, v in spec["windows"].items()}
    fault_type = fault_class(scenario.fault_kind)
    if not hasattr(fault_type, "for_scenario"):
        raise FaultError(f"fault {scenario.fault_kind} cannot be built from a data-only scenario "
                         "(it has no for_scenario); it needs a drill file")
    replicas = int(drill.workload.get("replicas", 2))
    wanted = {p["name"]: p["target"] for p in spec["probes"]}
    probe = None
    try:
        with drill.phase("setup"):
            drill.fresh_namespace()
            deploy_http_server(cluster, ns, APP, replicas)
            targets = service_targets(cluster, ns, APP, f"app={APP}")
            total = sum(windows.values()) + 300  # the probe pod stops by itself after this
            probe = InClusterProbe(cluster, ns, "runner-probe", {name: targets[t] for name, t in wanted.items()},
                                   interval_seconds=drill.interval_seconds, duration_seconds=total,
                                   node=(drill.topology.workers or [None])[-1]).start()
            # Steady state: every target has answered before anything is broken.
            healthy = wait_until(lambda: set(wanted) <= {r["target"] for r in probe.results() if r.get("ok")}, 60,
                                 interval_seconds=1.0, description="every probe target answered")
            assert healthy.ok, f"the probes never all succeeded before the fault: {healthy.last_error}"
        with drill.phase("baseline"):
            baseline_start = time.time()
            hold(windows["baseline_seconds"])
        fault = fault_type.for_scenario(cluster, ns, drill.params)
        guard = spec.get("abort")

        def guard_samples(since: float):
            return probe.timelines(since=since).get(guard["probe"], Timeline(guard["probe"])).samples()

        with drill.inject(fault):
            with drill.phase("fault"):
                aborted = guarded_hold(windows["hold_seconds"], guard, guard_samples,
                                       quiet_allowance_seconds=probe.timeout_seconds + 1.0)
            if aborted:
                # In the record before the revert, which may fail its verification and raise.
                drill.observe("abort", aborted)
                drill.say(f"ABORT: probe {aborted['probe']} {aborted['reason']} for {aborted['failing_seconds']} s "
                          f"(allowed {aborted['max_failing_seconds']} s): reverting now")
        if aborted:
            aborted["revert_started_at"] = fault.revert_started_at
        with drill.phase("after"):
            hold(windows["after_seconds"])
        end = time.time()
    finally:
        timelines = probe.timelines() if probe is not None and probe.started else {}
        drill.add_timelines(timelines)
        if probe is not None:
            probe.delete()
    bounds = {"baseline": (baseline_start, fault.injected_at),
              "fault": (fault.injected_at, fault.revert_started_at),
              "after": (fault.reverted_at, end)}
    drill.observe("runner_windows", {k: {"from": a, "to": b} for k, (a, b) in bounds.items()})
    for expectation in drill.expectations.specs():
        how: dict[str, Any] = expectation.measure or {}
        timeline = timelines.get(how.get("probe"))
        if timeline is None:
            drill.expectations.error(expectation.name, f"probe {how.get('probe')} logged nothing")
            continue
        start, stop = bounds[how["window"]]
        value = measures.measure(how["kind"], timeline.samples(), start, stop)
        drill.measure(expectation.name, value,
                      detail=f"{how['kind']} of probe {how['probe']} over the {how['window']} window "
                             f"({stop - start:.1f} s, {len(measures.in_window(timeline.samples(), start, stop))} samples)")
    if aborted:
        raise DrillAborted(f"aborted after {aborted['held_seconds']} s of the {aborted['hold_seconds_planned']} s hold: "
                           f"probe {aborted['probe']} ({aborted['reason']}) for {aborted['failing_seconds']} s "
                           f"(runner.abort allows {aborted['max_failing_seconds']} s); the fault was reverted then")
    drill.expectations.assert_all()
