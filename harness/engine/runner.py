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
   success, when it says so: :func:`harness.engine.judging.narrow`), or is a fact the fault measured itself
   (``measure: {fact}``, :meth:`harness.faults.Fault.facts`, read at the end of ``after``, before
   the declared objects go, and kept with what the fault saw in ``observations.fault_facts``), or
   a success ratio judged against such a fact (``predicted_by``); the vital signs are watched
   around all of it by the plugin, as for any drill.
   The Events of the Pods the probes watched are recorded as they were at the end
   (``observations.pod_events``).

The windows are timed waits by design (how long the platform is watched), not synchronisation.

:func:`run` composes the phases (:func:`plan_run`, :func:`set_up`, :func:`hold_baseline`,
:func:`hold_fault`, :func:`hold_after`, :func:`read_facts`, :func:`record`, :func:`clean_up`,
:func:`judge`, :func:`verdict`); each calls the cluster, the plug-ins and the clock through a
:class:`Collaborators`, real by default, so a test hands a phase stand-ins.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.components.webhook import generate_webhook_tls
from harness.core.timeline import Timeline
from harness.core.waiting import hold, wait_until
from harness.engine.actions import Actions
from harness.engine.judging import Findings, measure_expectation
from harness.engine.workload import (
    declared_manifests,
    manifest_only_values,
    object_ref,
    serve_web,
    set_up_registries,
    until_serving,
)
from harness.faults import FaultError, data_usable, fault_class, injected
from harness.kube import objects as kube_objects
from harness.kube.objects import Ref, known_kinds
from harness.kube.workloads import deploy_http_server
from harness.probes import ProbeContext, probe_types
from harness.probes.incluster import (
    LATE_SLACK_SECONDS,
    InClusterProbe,
    lookups,
    merge_pod_timelines,
    probe_pod_urls,
    service_targets,
)
from harness.probes.pods import pod_events
from harness.scaffolding.drill_objects import DrillObjects
from harness.spec.manifests import APP, PROBE_POD
from harness.spec.scenario import PROBE_STEADY_SECONDS, ScenarioError

log = logging.getLogger("kdrill.runner")


# How often the abort guard reads its probe's log during the hold (one API read each time).
GUARD_CHECK_SECONDS = 1.0


class DrillAborted(RuntimeError):
    """The abort guard stopped the fault early: its steady-state probe failed for too long."""


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
                 quiet_allowance_seconds: float = 5.0, check_seconds: float = GUARD_CHECK_SECONDS) -> dict | None:
    """Hold the fault ``seconds``; with ``guard`` ({probe, max_failing_seconds}), stop early once
    the guard probe (``samples_since(t0)``: its samples since the hold began) has been failing
    for longer than ``max_failing_seconds``. Failing is any of: its calls fail without a break
    (``reason`` "failing"); it logs no answer for longer than that plus
    ``quiet_allowance_seconds`` (a call hung, e.g. on a lookup: "no answer"); its log cannot be
    read for longer than that ("unreadable": a guard that cannot see stops the fault rather than
    hold it blind), read every ``check_seconds``. Returns the abort (probe, reason, when the
    failure began, how long it lasted, when the guard tripped; epoch seconds and seconds) or None
    when the hold ran its length."""
    started = now()
    deadline = started + seconds
    unreadable_since = None
    while (left := deadline - now()) > 0:
        hold(min(check_seconds, left) if guard else left)
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


def record_pod_events(drill, refs: list[Ref], read_events=pod_events) -> None:
    """The Events of every Pod a probe watched (its ``object``), before the objects go
    (``observations.pod_events``: pod -> events, :func:`harness.probes.pods.pod_events`; a kubelet
    Pulled event says how long its pull request waited). Facts, not measures: a read that fails
    is recorded as its error, not raised."""
    events: dict[str, Any] = {}
    for ref in sorted({r for r in refs if r.kind == "Pod"}, key=str):
        try:
            events[ref.name] = read_events(drill.cluster, ref.namespace, ref.name)
        except Exception as exc:  # the evidence says what could not be read
            events[ref.name] = f"not read: {type(exc).__name__}: {exc}"[:300]
    if events:
        drill.observe("pod_events", events)



@dataclass(frozen=True)
class Collaborators:
    """What the runner's phases call on the cluster, on the fault's plug-ins and on the clock; the
    defaults are the real ones. A test hands a phase stand-ins here instead of patching this module."""
    deploy_http_server: Callable[..., Any] = deploy_http_server  # (cluster, namespace, app, replicas, node_port=)
    service_targets: Callable[..., dict[str, str]] = service_targets  # (cluster, namespace, service, selector)
    probe_pod: Callable[..., Any] = InClusterProbe  # (cluster, namespace, name, urls, **timing) -> InClusterProbe
    probe_types: Callable[[], dict[str, Any]] = probe_types  # probe kind -> its plug-in class
    fault_class: Callable[[str], Any] = fault_class  # fault kind -> its plug-in class
    set_up_registries: Callable[..., dict[str, str]] = set_up_registries  # (drill, stack) -> image -> reference
    injected: Callable[..., Any] = injected  # (fault, ledger, drill=) -> context manager
    drill_objects: Callable[..., Any] = DrillObjects  # (cluster, manifests, until_serving=) -> DrillObjects
    actions: Callable[..., Actions] = Actions  # (drill, specs, window) -> Actions
    hold: Callable[[float], None] = hold  # (seconds)
    guarded_hold: Callable[..., dict | None] = guarded_hold  # see guarded_hold
    wait_until: Callable[..., Any] = wait_until  # see harness.core.waiting.wait_until
    pod_events: Callable[..., Any] = pod_events  # (cluster, namespace, pod) -> its events
    clock: Callable[[], float] = time.time  # epoch seconds


PRODUCTION = Collaborators()


@dataclass(frozen=True)
class Plan:
    """What the runner reads from the scenario before it makes anything."""
    spec: dict  # the scenario's runner section
    windows: dict[str, float]  # baseline_seconds, hold_seconds, after_seconds -> seconds
    fault_type: Any  # the fault's plug-in class (it has for_scenario)
    replicas: int  # of the built-in HTTP server
    wanted: dict[str, str]  # probe pod probe -> its target (name, clusterip or a Service)
    dns_views: list[str]  # the incluster-dns probes, read as lookups
    kinds: dict = field(default_factory=dict)  # the runner's and the scenario's own custom kinds, by name


@dataclass
class Made:
    """What the drill has made so far, each removed or stopped by :func:`record` and
    :func:`clean_up` (a field still empty when the setup stopped before it)."""
    stack: ExitStack  # the declared objects and registries, reverted newest first when it closes
    actions: dict[str, Actions]  # window ("fault", "after") -> its actions
    probe: Any = None  # the started probe pod (InClusterProbe)
    object_probes: list = field(default_factory=list)  # the started probes this process runs
    objects: DrillObjects | None = None  # the declared objects


def plan_run(drill, use: Collaborators) -> Plan:
    """Read ``drill.scenario``'s runner section. Raises FaultError for a fault a data-only scenario
    cannot build, ScenarioError for a ``$(worker_<n>)`` the cluster does not have."""
    scenario = drill.scenario
    spec = scenario.runner
    windows = {k: float(v) for k, v in spec["windows"].items()}
    fault_type = use.fault_class(scenario.fault_kind)
    if not data_usable(fault_type):
        raise FaultError(f"fault {scenario.fault_kind} cannot be built from a data-only scenario "
                         "(it has no for_scenario); it needs a drill file")
    replicas = int(drill.workload.get("replicas", 2))
    workers = len(drill.topology.workers)
    beyond = sorted(p for p in kube_objects.placeholders(drill.workload.get("manifests") or [])
                    if kube_objects.WORKER_PLACEHOLDER.fullmatch(p) and int(p.split("_")[1]) > workers)
    if beyond:
        raise ScenarioError(scenario.path, "workload.manifests", f"workers this cluster has ({workers}: "
                            + (f"$(worker_1) to $(worker_{workers})" if workers else "none") + ")",
                            ", ".join(f"$({p})" for p in beyond))
    # The incluster-http and incluster-dns probes are targets of the runner's own probe pod (a
    # lookup is a call by name whose samples are read for the lookup: incluster.lookups).
    wanted = {p["name"]: p.get("target", "name") for p in spec["probes"] if use.probe_types()[p["kind"]].in_probe_pod}
    dns_views = [p["name"] for p in spec["probes"] if p["kind"] == "incluster-dns"]
    return Plan(spec, windows, fault_type, replicas, wanted, dns_views,
                known_kinds(drill.workload.get("manifests") or []))


def set_up(drill, plan: Plan, made: Made, use: Collaborators) -> None:
    """The ``setup`` phase: a fresh namespace, the HTTP server, the registries and declared
    objects (on ``made.stack``), the probes started and proven steady. Raises AssertionError when
    the probes are not steady within PROBE_STEADY_SECONDS."""
    with drill.phase("setup"):
        drill.fresh_namespace()
        serve_web(drill, plan.replicas, deploy=use.deploy_http_server)
        # Before the objects (whose pods pull from them), removed after them.
        images = use.set_up_registries(drill, made.stack) if drill.workload.get("registries") else {}
        if drill.workload.get("manifests"):
            made.objects = create_objects(drill, images, made.stack, use)
        urls = start_probes(drill, plan, made, use)
        until_steady(drill, made.probe, urls, use)


def create_objects(drill, images: dict[str, str], stack: ExitStack, use: Collaborators):
    """The declared objects (``workload.manifests``), created through the ledger and entered on
    ``stack`` (``images``: image name -> reference, for ``$(image_<image>)``). Returns them."""
    cluster, ns = drill.cluster, drill.namespace
    # In the ledger before the first is created; deleted newest first when the stack closes.
    serving: dict[str, float] = {}
    # A throw-away CA and serving certificate per drill: in the manifests only (the
    # ledger and the evidence hold the objects' names, never a Secret's data).
    tls = generate_webhook_tls(drill.workload["tls"]["service"], ns) if drill.workload.get("tls") else None
    extra = manifest_only_values(drill.topology.workers, images)
    objects = use.drill_objects(cluster, declared_manifests(drill.workload["manifests"], ns, tls, extra),
                                until_serving=lambda ref: serving.update({str(ref): until_serving(cluster, ref)}))
    drill.observe("objects", {"created": [str(Ref.of(m, objects.kinds)) for m in objects.manifests],
                              "serving_seconds": serving})
    stack.enter_context(use.injected(objects, drill.ledger, drill=drill.name))
    return objects


def start_probes(drill, plan: Plan, made: Made, use: Collaborators) -> dict[str, str]:
    """Start the probe pod (``made.probe``) on the last worker and every other probe in this
    process (``made.object_probes``). Returns the probe pod's targets: probe name -> URL."""
    cluster, ns = drill.cluster, drill.namespace
    targets = use.service_targets(cluster, ns, APP, f"app={APP}")
    total = sum(plan.windows.values()) + 300  # the probe pod stops by itself after this
    urls = probe_pod_urls(plan.wanted, targets, ns)
    made.probe = use.probe_pod(cluster, ns, PROBE_POD, urls, interval_seconds=drill.interval_seconds,
                               duration_seconds=total, node=(drill.topology.workers or [None])[-1]).start()
    # Every other kind is a plug-in that runs in this process (harness/probes/__init__.py).
    context = ProbeContext(cluster, ns, drill.interval_seconds, total, lambda spec: object_ref(spec, ns, plan.kinds))
    kinds = use.probe_types()
    for p in plan.spec["probes"]:
        if not kinds[p["kind"]].in_probe_pod:
            made.object_probes.append(kinds[p["kind"]].for_scenario(p, context).start())
    return urls


def until_steady(drill, probe, urls: dict[str, str], use: Collaborators) -> None:
    """Wait until every target's last STEADY_CALLS calls succeeded, before anything is broken.
    Once is not enough: a CoreDNS replica that has not yet learnt the drill's new Service answers
    NXDOMAIN to some lookups for a while after the first good one. Records how long it took
    (``observations.steady_state_seconds``). Raises AssertionError after PROBE_STEADY_SECONDS."""
    healthy = use.wait_until(lambda: steady(probe.results(), urls), PROBE_STEADY_SECONDS,
                             interval_seconds=1.0, description="every probe target steady")
    drill.observe("steady_state_seconds", round(healthy.elapsed_seconds, 2) if healthy.ok else None)
    assert healthy.ok, (f"the probes were not all steady ({STEADY_CALLS} good calls in a row to each target) "
                        f"within {PROBE_STEADY_SECONDS} s, before the fault: {healthy.last_error}")


def hold_baseline(drill, plan: Plan, use: Collaborators) -> float:
    """The ``baseline`` phase: nothing broken. Returns when it began (epoch seconds)."""
    with drill.phase("baseline", plan.windows["baseline_seconds"]):
        started = use.clock()
        use.hold(plan.windows["baseline_seconds"])
    return started


def hold_fault(drill, plan: Plan, made: Made, use: Collaborators):
    """The ``fault`` phase: the fault built, recorded and injected (``drill.inject``, which
    reverts it on every way out), its actions run, held (guarded by ``runner.abort``), reverted.
    Returns ``(fault, abort)``: the abort from :func:`guarded_hold`, or None."""
    fault = plan.fault_type.for_scenario(drill.cluster, drill.namespace, drill.params)
    guard, probe = plan.spec.get("abort"), made.probe

    def guard_samples(since: float):
        return merge_pod_timelines(probe.timelines(since=since), plan.wanted).get(guard["probe"],
                                                                                 Timeline(guard["probe"])).samples()

    with drill.inject(fault):
        with drill.phase("fault", plan.windows["hold_seconds"]):
            made.actions["fault"].start(fault.injected_at, made.objects)
            try:
                aborted = use.guarded_hold(plan.windows["hold_seconds"], guard, guard_samples,
                                           quiet_allowance_seconds=probe.timeout_seconds + 1.0)
            finally:
                made.actions["fault"].finish()
        if aborted:
            # In the record before the revert, which may fail its verification and raise.
            drill.observe("abort", aborted)
            drill.say(f"ABORT: probe {aborted['probe']} {aborted['reason']} for {aborted['failing_seconds']} s "
                      f"(allowed {aborted['max_failing_seconds']} s): reverting now")
    if aborted:
        aborted["revert_started_at"] = fault.revert_started_at
    return fault, aborted


def hold_after(drill, plan: Plan, made: Made, fault, use: Collaborators) -> float:
    """The ``after`` phase: the fault reverted, its actions run. Returns when it ended (epoch seconds)."""
    with drill.phase("after", plan.windows["after_seconds"]):
        made.actions["after"].start(fault.reverted_at or use.clock(), made.objects)
        try:
            use.hold(plan.windows["after_seconds"])
        finally:
            made.actions["after"].finish()
    return use.clock()


def read_facts(drill, fault) -> tuple[dict[str, Any], str | None]:
    """The fault's facts, read before the declared objects go (a fact may compare them with what
    was there before), kept in ``observations.fault_facts``. Returns ``(facts, why not read)``."""
    facts, facts_error, seen = {}, None, {}
    try:
        facts = fault.facts()
        seen = fault.facts_evidence()
    except Exception as exc:  # each expectation on a fact is then an error, saying why
        facts_error = f"{type(exc).__name__}: {exc}"[:300]
    if facts or facts_error or seen:
        drill.observe("fault_facts", {"values": facts, **({"error": facts_error} if facts_error else {}),
                                      **({"seen": seen} if seen else {})})
    return facts, facts_error


def record(drill, plan: Plan, made: Made, use: Collaborators) -> dict[str, Timeline]:
    """Stop the probes and keep what they and the actions saw, with the watched Pods' Events.
    Returns the timelines: probe name -> Timeline. Raises what reading the probe pod's log raises."""
    # The probes this process runs stop first: they stop even if the probe pod's log cannot be read below.
    timelines = {p.name: p.stop() for p in made.object_probes}
    probe = made.probe
    if probe is not None and probe.started:
        timelines = {**merge_pod_timelines(probe.timelines(), plan.wanted), **timelines}
        budget = probe.timeout_seconds + LATE_SLACK_SECONDS  # as for a late call (incluster.py)
        timelines.update({name: lookups(timelines[name], name, budget)
                          for name in plan.dns_views if name in timelines})
    drill.add_timelines(timelines)
    done = made.actions["fault"].results + made.actions["after"].results
    if done:
        drill.observe("actions", done)
    record_pod_events(drill, [object_ref(p["object"], drill.namespace, plan.kinds) for p in plan.spec["probes"]
                              if p.get("object")], use.pod_events)
    return timelines


def clean_up(made: Made) -> None:
    """Delete the probe pod, then revert what ``made.stack`` holds (the declared objects before the
    namespace, an APIService first; then the registries)."""
    try:
        if made.probe is not None:
            made.probe.delete()
    finally:
        made.stack.close()


def judge(drill, fault, bounds: dict[str, tuple[float, float]], timelines: dict[str, Timeline],
          ran: dict[str, list[dict]], facts: dict[str, Any], facts_error: str | None) -> None:
    """Record the windows (``bounds``: window -> (start, stop), epoch seconds), the fault's marks
    and every expectation's measure (:func:`harness.engine.judging.measure_expectation`)."""
    drill.observe("runner_windows", {k: {"from": a, "to": b} for k, (a, b) in bounds.items()})
    marks = fault.marks()
    if marks:
        drill.observe("fault_marks", marks)
    found = Findings(fault, bounds, timelines, ran, marks, facts, facts_error)
    for expectation in drill.expectations.specs():
        measure_expectation(drill, expectation, found)


def verdict(drill, ran: dict[str, list[dict]], aborted: dict | None) -> None:
    """Raise RuntimeError when an action did not run as declared, DrillAborted when the guard
    stopped the fault, and ExpectationFailed when an expectation does not hold."""
    failed_actions = [a for a in ran["fault"] + ran["after"] if not a["ok"]]
    if failed_actions:
        raise RuntimeError("action(s) did not run as declared, so the measures above do not show what the "
                           "scenario claims: " + "; ".join(f"{a['name']}: {a['detail']}" for a in failed_actions))
    if aborted:
        raise DrillAborted(f"aborted after {aborted['held_seconds']} s of the {aborted['hold_seconds_planned']} s "
                           f"hold: probe {aborted['probe']} ({aborted['reason']}) for {aborted['failing_seconds']} s "
                           f"(runner.abort allows {aborted['max_failing_seconds']} s); the fault was reverted then")
    drill.expectations.assert_all()


def run(drill, use: Collaborators = PRODUCTION) -> None:
    """Run ``drill.scenario`` (data-only) through ``drill``, its phases calling ``use``. Raises what
    the drill's steps raise (after reverting), and ExpectationFailed when an expectation does not hold."""
    plan = plan_run(drill, use)
    made = Made(ExitStack(), {w: use.actions(drill, plan.spec.get("actions") or [], w) for w in ("fault", "after")})
    try:
        set_up(drill, plan, made, use)
        baseline_start = hold_baseline(drill, plan, use)
        fault, aborted = hold_fault(drill, plan, made, use)
        end = hold_after(drill, plan, made, fault, use)
        facts, facts_error = read_facts(drill, fault)
    finally:
        # Whatever the evidence-keeping raises, the probe pod, the declared objects and the
        # registries still go (an APIService left behind blocks every namespace's deletion).
        try:
            timelines = record(drill, plan, made, use)
        finally:
            clean_up(made)
    ran = {w: made.actions[w].results for w in ("fault", "after")}
    bounds = {"baseline": (baseline_start, fault.injected_at), "fault": (fault.injected_at, fault.revert_started_at),
              "after": (fault.reverted_at, end)}
    judge(drill, fault, bounds, timelines, ran, facts, facts_error)
    verdict(drill, ran, aborted)
