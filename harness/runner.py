"""The runner: a data-only scenario (one with a ``runner`` section and no drill file), run.

The path a drill takes, in named, timed phases:

1. ``setup``: a fresh namespace (in the ledger), the built-in HTTP server as Deployment and
   Service ``web`` (``workload.replicas``, default 2), and the declared probes: one in-cluster
   probe pod on the last worker calls the Service by name and/or ClusterIP; proven healthy
   (every target answered) before the fault, or the drill stops with an error.
2. ``baseline``: ``runner.windows.baseline_seconds`` of probing with nothing broken.
3. ``fault``: the scenario's fault, built by its ``for_scenario(cluster, namespace, params)``,
   injected through the ledger, held ``hold_seconds``, then reverted and verified.
4. ``after``: ``after_seconds`` of probing with the fault reverted.
5. Each expectation's ``measure`` is computed by harness/measures.py over its probe's samples in
   its window; the vital signs are watched around all of it by the plugin, as for any drill.

The windows are timed waits by design (how long the platform is watched), not synchronisation.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from harness import measures
from harness.expectations import wait_until
from harness.faults import FaultError, fault_class
from harness.probes.incluster import InClusterProbe, service_targets
from harness.workloads import deploy_http_server

APP = "web"


def hold(seconds: float) -> None:
    """Let a window run its length (the platform is watched meanwhile)."""
    threading.Event().wait(max(0.0, seconds))


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
        with drill.inject(fault):
            with drill.phase("fault"):
                hold(windows["hold_seconds"])
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
    drill.expectations.assert_all()
