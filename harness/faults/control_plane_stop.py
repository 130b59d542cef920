"""Fault ``control-plane-stop``: stop the control plane of a kind cluster.

Two methods, two different failures:

``stop-components`` (the control plane stops, its machines do not): on every control-plane node the
kubelet is stopped and the kube-apiserver, etcd, kube-controller-manager and kube-scheduler
containers are killed through the container runtime (see :mod:`harness.components.static_pods` for
why the kubelet has to stand aside). Everything else on those nodes keeps running: CoreDNS,
kube-proxy, the pod network. This is what a managed platform's control-plane outage looks like from
the workers. The revert starts the kubelets, which restart the exited static-pod containers.

Both the stop and the revert of ``stop-components`` are held on the nodes, as timers set before
anything stops (:mod:`harness.components.node_units`): the stop fires on every node at one moment,
the kubelet start ``hold_seconds`` later, whatever becomes of kdrill. Through the node agent this
is the only way: its commands go through the API server and the node's kubelet, the very things
stopped, so nothing could be sent to the nodes in the window. An earlier revert (Ctrl-C, a failed
drill) cancels the timers and starts the kubelets at once where the nodes can be reached (always
through docker exec); through the node agent it waits for the timers. Either way the verification
waits for every node's API server, and the evidence keeps when each timer fired.

``pause-node-containers`` (control-plane *node* loss): ``docker pause`` freezes every process
on each control-plane node container at once (cgroup freezer), including CoreDNS and any other
pod placed there; ``docker unpause`` undoes it exactly. Workers and kind's API load balancer
keep running.

With ``control_job`` (a data-only scenario's), the fault also does the workers' side of the outage
(:mod:`harness.faults.outage_work`): with the control plane working, a Job pod is killed and
its replacement timed (the control experiment); then, before the stop's time is fixed, kills of
chosen pods' containers and a sampler of the workers' containers are put in the fault's ledger
entry (``work_units``) and set on the workers, against that time. The revert reads and removes
them; :meth:`ControlPlaneStop.facts` says what they saw.

Behaviour it exercises (Kubernetes documentation, "Kubernetes Components" and "Nodes"): the
kubelet keeps the pods it was given running, and restarts their containers, with no control
plane; the control plane is what reschedules, scales and replaces.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
import uuid
from typing import Any

from harness.components import node_units, static_pods
from harness.components.topology import clock_offset, least_offset_seconds
from harness.core import proc
from harness.core.waiting import hold_until
from harness.faults import Fault, FaultError, FaultNotReverted
from harness.faults.outage_work import JOB_FIRST_BACKOFF_SECONDS, OutageWork
from harness.faults.scheduled_runs import LEAST_HOLD_SECONDS, cronjob_problem
from harness.kube.providers import Cluster
from harness.kube.providers.kind import pause_container
from harness.spec.params import Param

METHODS = ("stop-components", "pause-node-containers")

# A deadline for the revert's verification, not an expectation (the scenario bounds the API's
# recovery): well above any restore measured on this 2-core machine (3 to 15 s).
RESTORE_DEADLINE_SECONDS = 300

JOURNAL_PATTERN = "mirror pod|[Mm]irror|kube-apiserver|etcd"

# How far ahead the stop is set so that every node's timers are set before the first fires
# (plan_stop): this, plus per command three times the slowest node's measured one (about 0.05 s
# through docker exec, 0.3 s through the node agent here, up to 1 s under load), at least the minimum.
SCHEDULE_LEAD_SECONDS = 2.0
SECONDS_PER_COMMAND_MIN = 0.5
# How far into the window the workers' kills fire by default: after the API is seen down (1.1 to
# 3.9 s after the stop here).
DEFAULT_KILL_AFTER_SECONDS = 10.0
# Each timer's script ends within this (systemd kills it after): a kubelet stops or starts in seconds.
UNIT_RUNTIME_MAX_SECONDS = 120

log = logging.getLogger(__name__)


def _docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        return proc.run(["docker", *args], timeout_seconds=60, check=check)
    except proc.CommandFailed as exc:
        raise FaultError(str(exc)) from None


def container_state(name: str) -> tuple[bool, bool]:
    """(running, paused) of a container. Raises FaultError when it does not exist."""
    out = _docker("inspect", "--format", "{{.State.Running}} {{.State.Paused}}", name).stdout.split()
    return out[0] == "true", out[1] == "true"


class ControlPlaneStop(Fault):
    """Stop the control plane on ``nodes`` (default: every control-plane node) by ``method``, one of
    :data:`METHODS`, for ``hold_seconds`` (needed by ``stop-components``, whose revert is set on the
    nodes before the stop). Raises FaultError for an unknown method, no nodes, or no hold."""

    kind = "control-plane-stop"
    needs_node_access = True
    node_access_level = "exec"  # stop-components; pause-node-containers needs "container" (node_access_level_for)
    node_capability = ("stops the kubelet and kills the control-plane static pods' containers on every control-plane "
                       "node, with their revert held on the nodes as timers, or freezes those node containers "
                       "(docker pause)")
    params = {
        "method": Param("choice", "how the control plane stops", choices=METHODS),
        "hold_seconds": Param("seconds", "how long it stays stopped (runner.windows.hold_seconds)", minimum=10,
                              maximum=600),
        "control_job": Param("name", "a declared Job (restartPolicy Never) whose pod is killed before the stop, to "
                             "time its replacement with a working control plane, and again in the window",
                             required=False),
        "kill_selector": Param("selector", "pods of the drill's namespace whose running container their own node "
                               "kills in the window (needs control_job)", required=False),
        "kill_after_seconds": Param("seconds", "how far into the window the kills fire (after the API is seen down: "
                                    "1.1 to 3.9 s after the stop here)", minimum=1, maximum=300, required=False),
        "scheduled_job": Param("name", "a declared CronJob that runs every minute with suspended Jobs: a run is due "
                               "in the outage, and its creation after the return is timed (needs control_job)",
                               required=False),
    }
    # With control_job: what the workers' side of the outage measured (harness.faults.outage_work).
    facts_offered = {
        "baseline_job_pod_replaced_seconds": ("seconds", "before the stop, from killing the Job's pod to its "
                                              "replacement Running (the control experiment)"),
        "killed_container_restart_seconds": ("seconds", "the longest, over the kill_selector pods killed in the "
                                             "window, from the kill (the node's record) to a new running container "
                                             "of that pod in the node's own listing (sampled every 1 s)"),
        "worker_container_changes": ("count", "containers of the namespace running on a worker just before the stop "
                                     "and not running at some sample in the window, besides those killed on purpose"),
        "pods_created_during_outage": ("count", "pods of the namespace created between the stop and the revert, "
                                       "though the Job's pod was killed in it (None if that kill missed the window)"),
        "job_pod_replaced_after_return_seconds": ("seconds", "from the first API server seen ready again to the "
                                                  "Job's replacement pod running (its container's start, whole "
                                                  "seconds; 0 when it ran before the API servers were first asked, "
                                                  "once the revert was done)"),
        "pods_rescheduled_or_replaced": ("count", "pods of the namespace's ReplicaSets gone, moved or new between "
                                         "just before the stop and the end of the drill"),
        "new_replicasets": ("count", "ReplicaSets of the namespace new between just before the stop and the end"),
        "scheduled_runs_due_during_outage": ("count", "with scheduled_job: the runs its every-minute schedule makes "
                                             "due between the stop and the revert"),
        "scheduled_runs_created_during_outage": ("count", "with scheduled_job: its Jobs created between the stop and "
                                                 "the revert (None when none was due)"),
        "scheduled_run_created_after_return_seconds": ("seconds", "with scheduled_job: from the first API server "
                                                       "seen ready again to the first run created after the outage, "
                                                       "of any schedule time (the controller makes the most recent one "
                                                       "it missed; whole seconds; 0 when made before the API was "
                                                       "seen; None when none was)"),
        "kube_system_restarts_outside_control_plane": ("count", "restarts of kube-system pods other than the four "
                                                       "control-plane components, just before the stop to the end"),
        "coredns_replicas_on_stopped_nodes": ("ratio", "the share of the CoreDNS replicas (just before the stop) "
                                              "on the nodes that stop whole (pause-node-containers; none otherwise)"),
    }

    def __init__(self, cluster: Cluster, nodes: list[str] | None = None, method: str = "stop-components",
                 hold_seconds: float | None = None, units: dict[str, Any] | None = None,
                 work: OutageWork | None = None, work_units: dict[str, list[str]] | None = None) -> None:
        super().__init__(cluster)
        self.work = work
        # node -> the workers' kill and sampler units (in the ledger: kdrill recover removes them).
        self.work_units: dict[str, list[str]] = dict(work_units or {})
        self.api_ready_at: dict[str, float] = {}
        self._facts: dict[str, Any] | None = None
        if method not in METHODS:
            raise FaultError(f"control-plane-stop method must be one of {', '.join(METHODS)}, got {method!r}")
        if method == "stop-components" and hold_seconds is None and units is None:
            raise FaultError("control-plane-stop stop-components needs hold_seconds: its revert is set on the nodes "
                             "before anything stops")
        self.method = method
        self.hold_seconds = hold_seconds
        self.pause_attempts: dict[str, int] = {}  # node -> docker pause attempts (harness.kube.providers.kind.pause_container)
        self.nodes = list(nodes or cluster.nodes_by_role.get("control-plane", []))
        if not self.nodes:
            raise FaultError(f"cluster {cluster.name} has no control-plane nodes")
        # The timers held on the nodes: their names, and when they are due (epoch seconds).
        self.units: dict[str, Any] = dict(units or {})
        if method == "stop-components" and units is None:
            token = uuid.uuid4().hex[:8]
            self.units = {"stop": f"kdrill-cps-{token}-stop", "start": f"kdrill-cps-{token}-start",
                          "stop_at": None, "start_at": None}
        self.planned_stop_at: float | None = None  # plan_stop: when inject stops the control plane
        self.kubelet_started_at: dict[str, float] = {}
        self.timers_fired: dict[str, dict[str, float | None]] = {}
        self.restore_seconds: dict[str, float | None] = {}
        self.restore_journal: dict[str, list[str]] = {}

    @classmethod
    def node_access_level_for(cls, params: dict[str, Any]) -> str:
        return "container" if params.get("method") == "pause-node-containers" else "exec"

    @classmethod
    def for_scenario(cls, cluster: Cluster, namespace: str, params: dict[str, Any]) -> "ControlPlaneStop":
        """The fault of a data-only scenario: with ``control_job``, the workers' side of the outage
        too (:class:`harness.faults.outage_work.OutageWork`)."""
        work = None
        if params.get("control_job"):
            workers = list(cluster.nodes_by_role.get("worker", []))
            if not workers:
                raise FaultError("control-plane-stop with control_job needs worker nodes: the control-plane nodes "
                                 "are what stops")
            work = OutageWork(cluster, namespace, workers, params.get("kill_selector"), params["control_job"],
                              float(params.get("kill_after_seconds", DEFAULT_KILL_AFTER_SECONDS)),
                              scheduled_job=params.get("scheduled_job"))
        return cls(cluster, method=params["method"], hold_seconds=float(params["hold_seconds"]), work=work)

    @classmethod
    def window_problem(cls, params: dict[str, Any], windows: dict[str, float]) -> str | None:
        """The nodes hold the stop's revert at ``hold_seconds``, so the runner's hold is the same;
        the kills fire inside it with time left for a working Job controller to replace the Job's
        pod killed there (its second failure: a back-off of 2 x JOB_FIRST_BACKOFF_SECONDS), twice
        over, or "nothing was replaced" could not fail."""
        if float(params["hold_seconds"]) != windows["hold_seconds"]:
            return f"{float(params['hold_seconds']):g}, the hold_seconds param (the nodes revert on their own then)"
        if params.get("scheduled_job") and windows["hold_seconds"] < LEAST_HOLD_SECONDS:
            return (f"at least {LEAST_HOLD_SECONDS:g} s with scheduled_job: a whole minute in the outage, a second "
                    "before its end (creation times have whole seconds)")
        least = float(params.get("kill_after_seconds", DEFAULT_KILL_AFTER_SECONDS)) + 4 * JOB_FIRST_BACKOFF_SECONDS
        if params.get("control_job") and windows["hold_seconds"] < least:
            return (f"at least {least:g} s: kill_after_seconds + {4 * JOB_FIRST_BACKOFF_SECONDS:g} s, twice the Job "
                    "controller's back-off after a second failure, so a working one would replace the pod killed "
                    "in the window")
        return None

    @classmethod
    def params_problem(cls, params: dict[str, Any], manifests: list[dict[str, Any]]) -> tuple[str, str, str] | None:
        """kill_selector and kill_after_seconds only with control_job, which names a declared Job
        whose pod a kill makes Failed and only its controller replaces: restartPolicy Never, one
        pod at a time (parallelism 1), one container."""
        if not params.get("control_job"):
            for param in ("kill_selector", "kill_after_seconds", "scheduled_job"):
                if param in params:
                    return param, "no kill_selector, kill_after_seconds or scheduled_job without control_job (the " \
                                  "workers' side of the outage is set with the control experiment)", repr(params[param])
            return None
        if params.get("scheduled_job"):
            problem = cronjob_problem(manifests, params["scheduled_job"], float(params["hold_seconds"]))
            if problem is not None:
                return ("scheduled_job", *problem)
        name = params["control_job"]
        job = next((m for m in manifests if m.get("kind") == "Job" and m["metadata"].get("name") == name
                    and m["metadata"].get("namespace") in (None, "$(namespace)")), None)
        if job is None:
            return "control_job", "a Job of workload.manifests in the drill's namespace: " + (", ".join(
                m["metadata"]["name"] for m in manifests if m.get("kind") == "Job") or "none declared"), repr(name)
        spec = job.get("spec") if isinstance(job.get("spec"), dict) else {}
        pod = (spec.get("template") or {}).get("spec") if isinstance(spec.get("template"), dict) else {}
        pod = pod if isinstance(pod, dict) else {}
        got = (f"restartPolicy {pod.get('restartPolicy')!r}, parallelism {spec.get('parallelism', 1)!r}, "
               f"{len(pod.get('containers') or [])} container(s)")
        if pod.get("restartPolicy") != "Never" or spec.get("parallelism", 1) != 1 or len(pod.get("containers") or []) != 1:
            return "control_job", ("a Job whose killed pod only its controller replaces, one at a time: restartPolicy "
                                   "Never, parallelism 1, one container"), got
        return None

    @classmethod
    def facts_available(cls, params: dict[str, Any]) -> set[str]:
        """The workers' side measures them, and runs only with control_job; the scheduled runs' only
        with scheduled_job."""
        if not params.get("control_job"):
            return set()
        return {f for f in cls.facts_offered if params.get("scheduled_job") or not f.startswith("scheduled_run")}

    @classmethod
    def acts_on(cls, params: dict[str, Any]) -> list[tuple[str, str, str, str | None]]:
        objects = [("control_job", "Job", params["control_job"], None)] if params.get("control_job") else []
        if params.get("scheduled_job"):
            objects.append(("scheduled_job", "CronJob", params["scheduled_job"], None))
        return objects

    @classmethod
    def selects_pods(cls, params: dict[str, Any]) -> list[tuple[str, str, str | None]]:
        return [("kill_selector", params["kill_selector"], None)] if params.get("kill_selector") else []

    def target(self) -> dict[str, Any]:
        work_units = self.work.units if self.work is not None else self.work_units
        return {"method": self.method, "nodes": self.nodes, **({"units": self.units} if self.units else {}),
                **({"work_units": work_units} if work_units else {})}

    def facts(self) -> dict[str, Any]:
        if self.work is None or self.injected_at is None or self.revert_started_at is None:
            return {}
        if self._facts is None:  # read once: they compare with the cluster as it is now
            stopped = self.nodes if self.method == "pause-node-containers" else []
            self._facts = self.work.facts((self.injected_at, self.revert_started_at),
                                          min(self.api_ready_at.values(), default=None), stopped)
        return self._facts

    def facts_evidence(self) -> dict[str, Any]:
        return dict(self.work.evidence) if self.work is not None else {}

    def restarts_by_design(self) -> list[str]:
        if self.method != "stop-components":
            return []
        return [f"{component}-{node}" for node in self.nodes for component in static_pods.CONTROL_PLANE_COMPONENTS]

    def evidence(self) -> dict[str, Any]:
        evidence: dict[str, Any] = {"restore_seconds": self.restore_seconds}
        if self.method == "pause-node-containers" and self.planned_stop_at is not None:
            # A pause has no timer to refuse a planned time it missed: how late it came is kept.
            evidence["planned_stop_at"] = self.planned_stop_at
            evidence["paused_late_seconds"] = (round(self.injected_at - self.planned_stop_at, 3)
                                               if self.injected_at is not None else None)
        if self.pause_attempts:
            evidence["pause_attempts"] = dict(self.pause_attempts)
        if self.method == "stop-components":
            evidence["restore_journal"] = self.restore_journal
            evidence["side_effect"] = "the control-plane nodes' kubelets are stopped for the window"
            evidence["node_timers"] = {
                "stop_due_at": self.units.get("stop_at"), "start_due_at": self.units.get("start_at"),
                "fired_late_seconds": self.timers_fired,
                "kubelet_started_by_kdrill_at": self.kubelet_started_at,
                "clock_offsets_seconds": self.units.get("clock_offsets"),
                "note": "stop and kubelet start held on each node as systemd timers; late: the node's record "
                        "of when the timer ran, less the node's clock offset (node minus host, the least "
                        "that a read when the stop was planned proves; none: not corrected), minus when it "
                        "was due (this machine's clock)"}
        return evidence

    def inject(self) -> None:
        if self.work is not None:
            self._prepare_work()
        if self.method == "pause-node-containers":
            self.cluster.require_node_access("docker pause of the control-plane nodes", "container")
            # A planned stop is kept by this method too: a drill sets its own node timers
            # (kills, samplers) against that time, and samples the nodes before it.
            if self.planned_stop_at is not None:
                hold_until(self.planned_stop_at)
            self.injected_at = time.time()

            for node in self.nodes:
                try:
                    self.pause_attempts[node] = pause_container(node)
                except proc.CommandFailed as exc:
                    raise FaultError(str(exc)) from None
            return
        if self.units.get("stop_at") is None:
            self.plan_stop()
        commands = 2 * len(self.nodes)
        if time.time() + commands * SECONDS_PER_COMMAND_MIN > self.units["stop_at"]:
            raise FaultError(f"control-plane-stop planned for {self.units['stop_at']:.1f} cannot be set on "
                             f"{len(self.nodes)} nodes in the {self.units['stop_at'] - time.time():.1f} s left: "
                             + ("no stop set (the workers' kills and sampler are, and the revert removes them)"
                                if self.work is not None else "nothing set"))
        self.checkpoint()  # the ledger knows when the nodes revert on their own
        runtime = UNIT_RUNTIME_MAX_SECONDS
        # Every node's revert first: no node ever has a stop without its start.
        for node in self.nodes:
            node_units.schedule(self.cluster, node, self.units["start"], "systemctl start kubelet",
                                self.units["start_at"], runtime)
        stop = static_pods.stop_kubelet_and_kill_script(static_pods.CONTROL_PLANE_COMPONENTS)
        set_on: list[str] = []
        try:
            for node in self.nodes:
                node_units.schedule(self.cluster, node, self.units["stop"], stop, self.units["stop_at"], runtime)
                set_on.append(node)
        except Exception:
            # A partial stop is not the fault asked for: the stops already set are taken back
            # while the nodes can still be reached (the revert then finds nothing stopped).
            for node in set_on:
                try:
                    node_units.cancel(self.cluster, node, [self.units["stop"]])
                except Exception as exc:
                    log.warning("control-plane-stop: stop timer on %s not cancelled: %s", node, exc)
            raise
        # The fault starts when the timers fire: the window is measured from there.
        hold_until(self.units["stop_at"])
        self.injected_at = self.units["stop_at"]

    def _prepare_work(self) -> None:
        """The workers' side, with the control plane working: the control experiment, then the
        kills and the sampler in the ledger (checkpoint) before they are set, then the stop's time
        fixed after their commands, and they are set against it."""

        offsets = {}
        for node in self.work.workers:
            try:
                offsets[node] = least_offset_seconds(clock_offset(self.cluster, node))
            except ValueError as exc:
                log.warning("control-plane-stop: clock of %s not read (%s): its records uncorrected", node, exc)
        try:
            self.work.prepare(offsets)
        except (RuntimeError, StopIteration) as exc:
            raise FaultError(f"control-plane-stop: the workers' side could not be prepared: {exc}") from None
        self.checkpoint()
        self.plan_stop(extra_commands=self.work.commands())
        self.work.schedule(self.planned_stop_at, float(self.hold_seconds))

    def plan_stop(self, extra_commands: int = 0) -> float:
        """Fix when the control plane stops (epoch seconds, returned; :meth:`inject` waits for it,
        whichever the method) and, for ``stop-components``, when its kubelets start again
        (``hold_seconds`` later), before anything is set: far enough ahead for the fault's
        two commands per node, and ``extra_commands`` more that the drill sends to the nodes
        first (its own timers). One command is timed on every node (through the node agent it
        also starts the node's agent pod, seconds the first time) and each command is given
        three times the slowest. For ``stop-components`` each node's clock offset is measured
        too (:func:`harness.components.topology.clock_offset`): the nodes record when their timers ran on
        their own clocks. Raises what the node channel raises."""

        slowest = 0.0
        for node in self.nodes:
            began = time.time()
            self.cluster.node_exec(node, ["true"], timeout_seconds=120)
            slowest = max(slowest, time.time() - began)
        if self.method == "stop-components":
            # The nodes record when their timers ran on their own clocks: these put the records on
            # the host's clock (kept in the ledger entry for kdrill recover's check).
            # Corrected only by what a read proves (least_offset_seconds): 0 on kind. A clock that
            # cannot be read (not a number) is left uncorrected, and the evidence says so.
            self.units["clock_offsets"] = {}
            for node in self.nodes:
                try:
                    self.units["clock_offsets"][node] = least_offset_seconds(clock_offset(self.cluster, node))
                except ValueError as exc:
                    log.warning("control-plane-stop: clock of %s not read (%s): its timers' records uncorrected",
                                node, exc)
        per_command = max(SECONDS_PER_COMMAND_MIN, 3 * slowest)
        self.planned_stop_at = time.time() + SCHEDULE_LEAD_SECONDS + (2 * len(self.nodes) + extra_commands) * per_command
        if self.method == "stop-components":
            self.units["stop_at"] = self.planned_stop_at
            self.units["start_at"] = self.planned_stop_at + float(self.hold_seconds)
        return self.planned_stop_at

    def _start_now(self, node: str) -> None:
        """Start the node's kubelet and cancel its timers (idempotent), in one command: the stop
        timer first, so it cannot fire after; the start timer only once the kubelet has started,
        so a command cut short (the stop firing as it runs cuts the agent's exec) never leaves a
        node stopped with no start to come. Raises what the node channel raises when the node
        cannot be reached."""
        if self.units:
            node_units.start_then_cancel(self.cluster, node, [self.units["stop"]], "systemctl start kubelet",
                                         [self.units["start"]])
        else:
            static_pods.start_kubelet(self.cluster, node)
        self.kubelet_started_at.setdefault(node, time.time())

    def revert(self) -> None:
        errors, unreachable = [], []
        for node in self.nodes:  # every node gets its revert, whatever happened on the others
            try:
                if self.method == "pause-node-containers" or not self.units:
                    running, paused = container_state(node)
                    if paused:
                        _docker("unpause", node)
                    elif not running:
                        _docker("start", node)
                    # Idempotent, and right for both methods: a node that was paused has its kubelet.
                    static_pods.start_kubelet(self.cluster, node)
                else:
                    self._start_now(node)
            except Exception as exc:
                unreachable.append((node, exc))
        if unreachable and self.units:
            # Through the node agent a stopped control plane cannot be reached: each node's own timer
            # starts its kubelet at start_at; then the node answers again and is checked here.
            due = self.units.get("start_at") or time.time()
            log.info("control-plane-stop: %s not reachable now; their kubelets start on their own at %s",
                     ", ".join(n for n, _ in unreachable), time.strftime("%H:%M:%S", time.localtime(due)))
            for node, _ in unreachable:
                last = node_units.once_reachable(lambda n=node: self._start_now(n), due, RESTORE_DEADLINE_SECONDS)
                if last is not None:
                    errors.append(f"{node}: not reachable {RESTORE_DEADLINE_SECONDS} s after its kubelet was due "
                                  f"to start: {last}")
        else:
            errors += [f"{node}: {exc}" for node, exc in unreachable]
        # The workers' kills and sampler: stopped on every node that answers, what they saw read
        # (the drill's evidence), then removed.
        if self.work is not None:
            errors += self.work.collect()
        else:
            errors += node_units.remove_units(self.cluster, self.work_units)
        if errors:
            raise FaultError("; ".join(errors))

    def verify_reverted(self) -> None:
        since: dict[str, float] = {}
        problems = []
        for node in self.nodes:
            since[node] = self.reverted_at or time.time()
            if self.method == "pause-node-containers" or not self.units:
                running, paused = container_state(node)
                if not running or paused:
                    problems.append(f"node container {node}: running={running} paused={paused}")
                    del since[node]
                continue
            # The kubelet started at the earlier of its timer and kdrill's own start.
            offset = (self.units.get("clock_offsets") or {}).get(node, 0.0)
            fired = {key: node_units.started_at(self.cluster, node, self.units[key], offset) for key in ("stop", "start")}
            self.timers_fired[node] = {key: (round(t - self.units[f"{key}_at"], 3) if t else None)
                                       for key, t in fired.items()}
            # None of them in a later process's check (kdrill recover's, with the records read and gone).
            since[node] = min([t for t in (fired["start"], self.kubelet_started_at.get(node), self.reverted_at) if t]
                              or [time.time()])
            left_over = [u for u in node_units.pending(self.cluster, node) if u in (self.units["stop"], self.units["start"])]
            if left_over:
                problems.append(f"{node}: timers still set: {', '.join(left_over)}")
            node_units.forget(self.cluster, node, [self.units["stop"], self.units["start"]])
        # Each node's own API server must be ready again, not merely started: every node asked in
        # turn, so the first one ready is seen when it is (the Job controller's leader may be there).
        check = ["sh", "-c", "curl -sk --max-time 2 https://127.0.0.1:6443/readyz"]
        deadline = min(since.values(), default=time.time()) + RESTORE_DEADLINE_SECONDS
        waiting = list(since)
        while waiting and time.time() < deadline:
            for node in list(waiting):
                try:
                    ready = self.cluster.node_exec(node, check, check=False).stdout.strip() == "ok"
                except Exception as exc:  # not reachable yet (through the node agent: its API server)
                    log.debug("control-plane-stop: %s not ready yet: %s", node, exc)
                    ready = False
                if ready:
                    self.api_ready_at[node] = time.time()
                    self.restore_seconds[node] = self.api_ready_at[node] - since[node]
                    waiting.remove(node)
            if waiting:
                threading.Event().wait(1.0)  # pacing between rounds of checks, not synchronisation
        for node in since:
            if self.method == "stop-components" and self.units and node not in waiting:
                # journalctl --since reads the node's clock.
                on_node = since[node] - 1 + (self.units.get("clock_offsets") or {}).get(node, 0.0)
                self.restore_journal[node] = static_pods.kubelet_journal(self.cluster, node, on_node, JOURNAL_PATTERN)
            if node in waiting:
                self.restore_seconds[node] = None
                problems.append(f"{node}: kube-apiserver /readyz not ok {RESTORE_DEADLINE_SECONDS} s after the revert")
        work_units = self.work.units if self.work is not None else self.work_units
        for node, names in work_units.items():
            left_over = [u for u in node_units.pending(self.cluster, node) if u in names]
            if left_over:
                problems.append(f"{node}: kills or sampler still set: {', '.join(left_over)}")
        if problems:
            raise FaultNotReverted("; ".join(problems))

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "ControlPlaneStop":
        # Entries written before there were two methods are pause-node-containers; before the
        # timers, stop-components entries have no units (reverted by starting the kubelets).
        method = target.get("method", "pause-node-containers")
        return cls(cluster, nodes=target["nodes"], method=method, units=target.get("units") or {},
                   work_units=target.get("work_units"))
