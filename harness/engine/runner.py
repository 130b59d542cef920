"""The runner: a data-only scenario (one with a ``runner`` section and no drill file), run.

The path a drill takes, in named, timed phases:

1. ``setup``: a fresh namespace (in the ledger), the built-in HTTP server as Deployment and
   Service ``web`` (``workload.replicas``, default 2), the scenario's own registries
   (``workload.registries``: a registry container each beside a kind cluster, the nodes'
   containerd told where it is, images pushed; through the ledger, kind ``drill-registry``;
   a manifest names an image ``$(image_<image>)`` and a worker ``$(worker_<n>)``), its own objects
   (``workload.manifests``: created in order through the ledger, kind ``drill-objects``, and
   waited on until they serve: a webhook configuration until the API server reaches its
   webhook), and the declared probes: one in-cluster probe pod on the last worker calls the
   Service by name and/or ClusterIP (or a declared Service by name), proven steady (ten good calls
   in a row to every target, :func:`steady`) before the fault, or the drill stops with an error; the other kinds run in
   this process (harness/probes/: ``object-state``, ``admission``, ``api-read``, ``api-write``,
   ``metric``, and ``image-pulls`` and ``events``, which read a Pod's Events at the end).
2. ``baseline``: ``runner.windows.baseline_seconds`` of probing with nothing broken.
3. ``fault``: the scenario's fault, built by its ``for_scenario(cluster, namespace, params)``,
   injected through the ledger, held ``hold_seconds``, then reverted and verified.
   With ``runner.abort`` (a probe and ``max_failing_seconds``), the hold is guarded: once that
   probe has failed without a break for longer than allowed, the fault is reverted at once and
   the abort recorded (``observations.abort``); the drill's expectations are still measured and
   its verdict is error.
   ``runner.actions`` of the ``fault`` window (a deletion of a declared object, a scale of a
   declared Deployment or StatefulSet, an eviction or a container kill of a declared Pod or of
   a declared StatefulSet's pod, only while it is the drill's, and only that very object) run at
   their time from the injection,
   in timer threads; what each did is recorded (``observations.actions``), and one that could
   not run makes the drill an error.
4. ``after``: ``after_seconds`` of probing with the fault reverted (and its actions). The
   declared objects are deleted, newest first, before the namespace.
5. Each expectation's ``measure`` is computed by harness/engine/measures.py over its probe's samples in
   its window (narrowed to an action's time, to a time the fault marks, or to the probe's first
   success, when it says so: :func:`narrow`), or is a fact the fault measured itself
   (``measure: {fact}``, :meth:`harness.faults.Fault.facts`, read at the end of ``after``, before
   the declared objects go, and kept with what the fault saw in ``observations.fault_facts``), or
   a success ratio judged against such a fact (``predicted_by``); the vital signs are watched
   around all of it by the plugin, as for any drill.
   The Events of the Pods the probes watched are recorded as they were at the end
   (``observations.pod_events``).

The windows are timed waits by design (how long the platform is watched), not synchronisation.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import ExitStack
from typing import Any

from harness.components.webhook import generate_webhook_tls
from harness.core.timeline import Timeline
from harness.core.waiting import wait_until
from harness.engine import measures
from harness.engine.actions import REQUEST_JOIN_SECONDS, Actions  # noqa: F401
from harness.engine.workload import (OBJECTS_READY_DEADLINE_SECONDS, REPOSITORY, declared_manifests,  # noqa: F401
                                     manifest_only_values, object_ref, placeholder_values, serving_problem,
                                     set_up_registries, until_serving)
from harness.faults import FaultError, data_usable, fault_class, injected
from harness.kube import objects as kube_objects
from harness.kube.objects import Ref
from harness.kube.workloads import deploy_http_server
from harness.probes import ProbeContext, probe_types
from harness.probes.incluster import (LATE_SLACK_SECONDS, InClusterProbe, lookups, merge_pod_timelines, probe_pod_urls,
                                      service_targets)
from harness.probes.pods import pod_events
from harness.scaffolding.drill_objects import DrillObjects
from harness.spec.manifests import APP, OWN_OBJECTS, PROBE_POD  # noqa: F401
from harness.spec.scenario import PROBE_STEADY_SECONDS, ScenarioError

log = logging.getLogger("kdrill.runner")


# How often the abort guard reads its probe's log during the hold (one API read each time).
GUARD_CHECK_SECONDS = 1.0


class DrillAborted(RuntimeError):
    """The abort guard stopped the fault early: its steady-state probe failed for too long."""


def hold(seconds: float) -> None:
    """Let a window run its length (the platform is watched meanwhile)."""
    threading.Event().wait(max(0.0, seconds))


# Steady state before the fault: this many good calls in a row to each of the probe pod's targets.
STEADY_CALLS = 10


def steady(results: list[dict], targets) -> bool:
    """Whether each of ``targets`` has at least STEADY_CALLS results and its last STEADY_CALLS
    succeeded (``results``: the probe pod's, oldest first, each {"target", "ok", ...})."""
    by_target: dict[str, list[bool]] = {}
    for result in results:
        by_target.setdefault(result.get("target"), []).append(bool(result.get("ok")))
    return all(len(by_target.get(t, [])) >= STEADY_CALLS and all(by_target[t][-STEADY_CALLS:]) for t in targets)


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


def record_pod_events(drill, refs: list[Ref]) -> None:
    """The Events of every Pod a probe watched (its ``object``), before the objects go
    (``observations.pod_events``: pod -> events, :func:`harness.probes.pods.pod_events`; a kubelet
    Pulled event says how long its pull request waited). Facts, not measures: a read that fails
    is recorded as its error, not raised."""
    events: dict[str, Any] = {}
    for ref in sorted({r for r in refs if r.kind == "Pod"}, key=str):
        try:
            events[ref.name] = pod_events(drill.cluster, ref.namespace, ref.name)
        except Exception as exc:  # the evidence says what could not be read
            events[ref.name] = f"not read: {type(exc).__name__}: {exc}"[:300]
    if events:
        drill.observe("pod_events", events)



def narrow(how: dict, start: float, stop: float, ran: list[dict],
           marks: dict[str, float | None] | None = None) -> tuple[float, float, str]:
    """``(start, stop)`` of a measure's window (epoch seconds) narrowed by its ``from_action`` and
    ``until_action`` to when those actions ran (``ran``: the window's action results), by its
    ``from_mark`` and ``until_mark`` to the fault's marks (``marks``: name -> epoch seconds), and
    then started ``settle_seconds`` later; and a phrase saying so. Raises ValueError when a named
    action did not run, or failed, when a named mark is not known or lies outside the window, and
    when the narrowed window ends before it starts."""
    results = {r["name"]: r for r in ran}
    said, bounds = [], (start, stop)
    for key, word in (("from_mark", "from"), ("until_mark", "until")):
        if key not in how:
            continue
        at = (marks or {}).get(how[key])
        if at is None:
            raise ValueError(f"the fault did not mark {how[key]}, so its {how['window']} window has no {word} point")
        if not bounds[0] <= at <= bounds[1]:
            raise ValueError(f"the fault's mark {how[key]} is outside the {how['window']} window "
                             f"({at - bounds[0]:+.1f} s from its start, which is {bounds[1] - bounds[0]:.1f} s long)")
        start, stop = (at, stop) if key == "from_mark" else (start, at)
        said.append(f"{word} mark {how[key]}")
    for key, word in (("from_action", "from"), ("until_action", "until")):
        if key not in how:
            continue
        result = results.get(how[key]) or {}
        if result.get("at") is None or not result.get("ok"):
            raise ValueError(f"action {how[key]} did not run as declared ({result.get('detail', 'not run')}), so "
                             f"its {how['window']} window has no {word} point")
        at = min(max(result["at"], bounds[0]), bounds[1])  # inside the window it narrows
        if key == "from_action":
            start = at
        else:
            stop = at
        said.append(f"{word} action {how[key]}")
    if start > stop:
        raise ValueError(f"its {how['window']} window narrowed {' '.join(said)} ends {start - stop:.1f} s before it "
                         "starts")
    if how.get("settle_seconds"):
        start = min(start + float(how["settle_seconds"]), stop)
        said.append(f"after {float(how['settle_seconds']):g} s to settle")
    return start, stop, (", " + " ".join(said)) if said else ""


def run(drill) -> None:
    """Run ``drill.scenario`` (data-only) through ``drill``. Raises what the drill's steps raise
    (after reverting), and ExpectationFailed when an expectation does not hold."""
    scenario, cluster, ns = drill.scenario, drill.cluster, drill.namespace
    spec = scenario.runner
    windows = {k: float(v) for k, v in spec["windows"].items()}
    fault_type = fault_class(scenario.fault_kind)
    if not data_usable(fault_type):
        raise FaultError(f"fault {scenario.fault_kind} cannot be built from a data-only scenario "
                         "(it has no for_scenario); it needs a drill file")
    replicas = int(drill.workload.get("replicas", 2))
    # Before anything is made: a $(worker_<n>) this cluster does not have.
    workers = len(drill.topology.workers)
    beyond = sorted(p for p in kube_objects.placeholders(drill.workload.get("manifests") or [])
                    if kube_objects.WORKER_PLACEHOLDER.fullmatch(p) and int(p.split("_")[1]) > workers)
    if beyond:
        raise ScenarioError(scenario.path, "workload.manifests", f"workers this cluster has ({workers}: "
                            + (f"$(worker_1) to $(worker_{workers})" if workers else "none") + ")",
                            ", ".join(f"$({p})" for p in beyond))
    # The incluster-http and incluster-dns probes are targets of the runner's own probe pod (a
    # lookup is a call by name whose samples are read for the lookup: incluster.lookups).
    wanted = {p["name"]: p.get("target", "name") for p in spec["probes"] if probe_types()[p["kind"]].in_probe_pod}
    dns_views = [p["name"] for p in spec["probes"] if p["kind"] == "incluster-dns"]
    probe, object_probes, objects = None, [], None
    actions = {w: Actions(drill, spec.get("actions") or [], w) for w in ("fault", "after")}
    stack = ExitStack()
    try:
        with drill.phase("setup"):
            drill.fresh_namespace()
            deploy_http_server(cluster, ns, APP, replicas, node_port=drill.workload.get("node_port"))
            # Before the objects (whose pods pull from them), removed after them.
            images = set_up_registries(drill, stack) if drill.workload.get("registries") else {}
            if drill.workload.get("manifests"):
                # In the ledger before the first is created; deleted newest first when the stack closes.
                serving: dict[str, float] = {}
                # A throw-away CA and serving certificate per drill: in the manifests only (the
                # ledger and the evidence hold the objects' names, never a Secret's data).
                tls = generate_webhook_tls(drill.workload["tls"]["service"], ns) if drill.workload.get("tls") else None
                extra = manifest_only_values(drill.topology.workers, images)
                objects = DrillObjects(cluster, declared_manifests(drill.workload["manifests"], ns, tls, extra),
                                       until_serving=lambda ref: serving.update({str(ref): until_serving(cluster, ref)}))
                drill.observe("objects", {"created": [str(Ref.of(m)) for m in objects.manifests],
                                          "serving_seconds": serving})
                stack.enter_context(injected(objects, drill.ledger, drill=drill.name))
            targets = service_targets(cluster, ns, APP, f"app={APP}")
            total = sum(windows.values()) + 300  # the probe pod stops by itself after this
            urls = probe_pod_urls(wanted, targets, ns)
            probe = InClusterProbe(cluster, ns, PROBE_POD, urls,
                                   interval_seconds=drill.interval_seconds, duration_seconds=total,
                                   node=(drill.topology.workers or [None])[-1]).start()
            # Every other kind is a plug-in that runs in this process (harness/probes/__init__.py).
            context = ProbeContext(cluster, ns, drill.interval_seconds, total, lambda spec: object_ref(spec, ns))
            kinds = probe_types()
            object_probes = []
            for p in spec["probes"]:
                if not kinds[p["kind"]].in_probe_pod:
                    object_probes.append(kinds[p["kind"]].for_scenario(p, context).start())
            # Steady state: every target's last STEADY_CALLS calls succeeded before anything is
            # broken. Once is not enough: a CoreDNS replica that has not yet learnt the drill's new
            # Service answers NXDOMAIN to the calls kube-proxy sends it (a quarter of the lookups
            # failed for 21 s after the first good one, right after control-plane-stop's
            # components case, 2026-12-05).
            healthy = wait_until(lambda: steady(probe.results(), urls), PROBE_STEADY_SECONDS,
                                 interval_seconds=1.0, description="every probe target steady")
            drill.observe("steady_state_seconds", round(healthy.elapsed_seconds, 2) if healthy.ok else None)
            assert healthy.ok, (f"the probes were not all steady ({STEADY_CALLS} good calls in a row to each target) "
                                f"within {PROBE_STEADY_SECONDS} s, before the fault: {healthy.last_error}")
        with drill.phase("baseline", windows["baseline_seconds"]):
            baseline_start = time.time()
            hold(windows["baseline_seconds"])
        fault = fault_type.for_scenario(cluster, ns, drill.params)
        guard = spec.get("abort")

        def guard_samples(since: float):
            return merge_pod_timelines(probe.timelines(since=since), wanted).get(guard["probe"],
                                                                                Timeline(guard["probe"])).samples()

        with drill.inject(fault):
            with drill.phase("fault", windows["hold_seconds"]):
                actions["fault"].start(fault.injected_at, objects)
                try:
                    aborted = guarded_hold(windows["hold_seconds"], guard, guard_samples,
                                           quiet_allowance_seconds=probe.timeout_seconds + 1.0)
                finally:
                    actions["fault"].finish()
            if aborted:
                # In the record before the revert, which may fail its verification and raise.
                drill.observe("abort", aborted)
                drill.say(f"ABORT: probe {aborted['probe']} {aborted['reason']} for {aborted['failing_seconds']} s "
                          f"(allowed {aborted['max_failing_seconds']} s): reverting now")
        if aborted:
            aborted["revert_started_at"] = fault.revert_started_at
        with drill.phase("after", windows["after_seconds"]):
            actions["after"].start(fault.reverted_at or time.time(), objects)
            try:
                hold(windows["after_seconds"])
            finally:
                actions["after"].finish()
        end = time.time()
        # Before the declared objects go: a fact may compare them with what was there before.
        facts, facts_error, seen = {}, None, {}
        try:
            facts = fault.facts()
            seen = fault.facts_evidence()
        except Exception as exc:  # each expectation on a fact is then an error, saying why
            facts_error = f"{type(exc).__name__}: {exc}"[:300]
        if facts or facts_error or seen:
            drill.observe("fault_facts", {"values": facts, **({"error": facts_error} if facts_error else {}),
                                          **({"seen": seen} if seen else {})})
    finally:
        # Whatever the evidence-keeping below raises, the probe pod, the declared objects and the
        # registries still go (an APIService left behind blocks every namespace's deletion).
        try:
            # The probes this process runs stop first: they stop even if the probe pod's log
            # cannot be read below.
            timelines = {p.name: p.stop() for p in object_probes}
            if probe is not None and probe.started:
                timelines = {**merge_pod_timelines(probe.timelines(), wanted), **timelines}
                budget = probe.timeout_seconds + LATE_SLACK_SECONDS  # as for a late call (incluster.py)
                timelines.update({name: lookups(timelines[name], name, budget) for name in dns_views if name in timelines})
            drill.add_timelines(timelines)
            done = actions["fault"].results + actions["after"].results
            if done:
                drill.observe("actions", done)
            record_pod_events(drill, [object_ref(p["object"], ns) for p in spec["probes"] if p.get("object")])
        finally:
            try:
                if probe is not None:
                    probe.delete()
            finally:
                stack.close()  # the declared objects go before the namespace (an APIService first)
    bounds = {"baseline": (baseline_start, fault.injected_at),
              "fault": (fault.injected_at, fault.revert_started_at),
              "after": (fault.reverted_at, end)}
    drill.observe("runner_windows", {k: {"from": a, "to": b} for k, (a, b) in bounds.items()})
    marks = fault.marks()
    if marks:
        drill.observe("fault_marks", marks)
    for expectation in drill.expectations.specs():
        how: dict[str, Any] = expectation.measure or {}
        if "fact" in how:
            value = facts.get(how["fact"])
            if value is None:
                drill.expectations.error(expectation.name, f"the fault did not measure {how['fact']}"
                                         + (f" ({facts_error})" if facts_error else ""))
            else:
                drill.measure(expectation.name, value, detail=f"fact {how['fact']} of fault {fault.kind}: "
                              + fault.facts_offered.get(how["fact"], ("", ""))[1])
            continue
        timeline = timelines.get(how.get("probe"))
        if timeline is None:
            drill.expectations.error(expectation.name, f"probe {how.get('probe')} logged nothing")
            continue
        start, stop = bounds[how["window"]]
        narrowed = ""
        try:
            start, stop, narrowed = narrow(how, start, stop, actions[how["window"]].results if how["window"]
                                           in actions else [], marks)
        except ValueError as exc:
            drill.expectations.error(expectation.name, str(exc))
            continue
        samples = timeline.samples()
        if "within_seconds" in how:
            samples = measures.within(samples, float(how["within_seconds"]))
            narrowed += f", a success slower than {float(how['within_seconds']):g} s counted failed"
        if how.get("from_first_success"):
            reached = measures.first_success_at(samples, start, stop)
            if reached is None:
                drill.expectations.error(expectation.name, f"probe {how['probe']} never succeeded in its "
                                         f"{how['window']} window{narrowed}: no first success to start from")
                continue
            start, narrowed = reached, narrowed + ", from its first success"
        value = measures.measure(how["kind"], samples, start, stop)
        if "predicted_by" in how:
            share = facts.get(how["predicted_by"])
            narrowed += (f", {value if value is None else round(value, 3)} judged against fact {how['predicted_by']} "
                         f"{share if share is None else round(share, 3)} (the share taken away: none, calls work; "
                         "all, they fail; some, some do)")
            value = measures.as_predicted(value, share)
        drill.measure(expectation.name, value,
                      detail=f"{how['kind']} of probe {how['probe']} over the {how['window']} window{narrowed} "
                             f"({stop - start:.1f} s, {len(measures.in_window(samples, start, stop))} samples)")
    failed_actions = [a for a in actions["fault"].results + actions["after"].results if not a["ok"]]
    if failed_actions:
        raise RuntimeError("action(s) did not run as declared, so the measures above do not show what the "
                           "scenario claims: " + "; ".join(f"{a['name']}: {a['detail']}" for a in failed_actions))
    if aborted:
        raise DrillAborted(f"aborted after {aborted['held_seconds']} s of the {aborted['hold_seconds_planned']} s hold: "
                           f"probe {aborted['probe']} ({aborted['reason']}) for {aborted['failing_seconds']} s "
                           f"(runner.abort allows {aborted['max_failing_seconds']} s); the fault was reverted then")
    drill.expectations.assert_all()
