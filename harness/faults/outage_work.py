"""What a control-plane stop does on the workers, set there before the API goes down.

With the control plane stopped, nothing reaches a node through the node agent: its exec goes
through the API server and the node's kubelet. So the work the drill needs in the window is set
on the workers first, as timers and samplers (:mod:`harness.components.node_units`):

- **kills**: the running container of each chosen pod is killed by its own node, ``kill_after_seconds``
  into the window (``crictl stop --timeout 0``), so the kubelet's restart is measured with no
  control plane;
- **a sampler** lists the namespace's containers on every worker each second, so a container
  that changes in the window is seen although the API cannot say it.

Before the stop, a **control experiment** makes "nothing was replaced" falsifiable: a Job pod
(restartPolicy Never: once killed it is Failed, and only the Job controller replaces it) is killed
with the control plane working, and its replacement is timed. The replacement is the Job pod
killed again in the window: a working control plane would replace it there too.

The facts it measures (:meth:`OutageWork.facts`) compare what it saw before the stop with what
is there at the end of the drill: which pods run where, the ReplicaSets, kube-system's restarts.

Sources: Kubernetes "Kubernetes Components" (the kubelet keeps its pods running), "Pod Lifecycle"
(container restart policy), "Jobs" (pod backoff failure policy: the Job controller replaces a
failed pod).
"""

from __future__ import annotations

import json
import math
import shlex
import time
import uuid
from typing import Any

from harness.components import node_units, static_pods
from harness.components.node_units import remove_units
from harness.core.timeline import Sample, Timeline
from harness.core.waiting import wait_until
from harness.faults.scheduled_runs import (
    judged,
    lag_with_control_plane,
    minutes_due,
    never_created,
    scheduled_jobs,
    scheduled_run_facts,
)
from harness.kube.providers import Cluster
from harness.probes.node_side import NodeContainerSampler
from harness.probes.pods import (
    kube_system_snapshot,
    node_containers,
    restarts_between,
    restarts_outside_control_plane,
    running_container_ids,
)

# A deadline for the Job controller's replacement, not a measurement (10.5 to 12.2 s measured
# with a working control plane).
JOB_REPLACED_DEADLINE_SECONDS = 120
# The Job controller's back-off after a pod's first failure; it doubles with each failure
# (Kubernetes "Jobs", pod backoff failure policy: 10 s, 20 s, 40 s ...).
JOB_FIRST_BACKOFF_SECONDS = 10.0
SAMPLER_INTERVAL_SECONDS = 1.0
# The sampler's own bound runs this long past the hold (the revert stops it before): it never
# stops by itself while the window lasts, and never runs unbounded.
SAMPLER_AFTER_HOLD_SECONDS = 30.0
# Each kill's script ends within this (systemd kills it after).
KILL_RUNTIME_MAX_SECONDS = 60


def job_pods(cluster: Cluster, namespace: str, job: str) -> dict[str, dict]:
    """uid -> {"name", "phase", "node", "created"} of Job ``job``'s pods (created: epoch seconds)."""
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=f"job-name={job}", _request_timeout=5).items
    return {p.metadata.uid: {"name": p.metadata.name, "phase": p.status.phase, "node": p.spec.node_name,
                             "created": p.metadata.creation_timestamp.timestamp(),
                             "started": _started_at(p)} for p in pods}


def _started_at(pod) -> float | None:
    """When the pod's first container last started running (epoch seconds, whole seconds), or None."""
    for status in pod.status.container_statuses or []:
        if status.state and status.state.running and status.state.running.started_at:
            return status.state.running.started_at.timestamp()
    return None


def running_job_pod(cluster: Cluster, namespace: str, job: str, exclude: set[str]) -> tuple[str, dict] | None:
    """(uid, pod) of a Running pod of ``job`` not in ``exclude``, or None."""
    for uid, pod in job_pods(cluster, namespace, job).items():
        if uid not in exclude and pod["phase"] == "Running":
            return uid, pod
    return None


def running_container(cluster: Cluster, node: str, namespace: str, pod_uid: str) -> tuple[str, str]:
    """(id, container name) of pod ``pod_uid``'s running container on ``node``, as the node's
    runtime lists it. Raises StopIteration when it has none."""
    return next((cid, c["name"]) for cid, c in node_containers(cluster, node, namespace).items()
                if c["state"] == "CONTAINER_RUNNING" and c["pod_uid"] == pod_uid)


def replica_set_uids(cluster: Cluster, namespace: str) -> list[str]:
    return sorted(rs.metadata.uid for rs in cluster.apps.list_namespaced_replica_set(namespace, _request_timeout=10).items)


def replica_set_pods(cluster: Cluster, namespace: str) -> dict[str, str]:
    """uid -> node of every pod a ReplicaSet owns in ``namespace`` (the Deployments' pods)."""
    pods = cluster.core.list_namespaced_pod(namespace, _request_timeout=10).items
    return {p.metadata.uid: p.spec.node_name for p in pods
            if any(o.kind == "ReplicaSet" for o in p.metadata.owner_references or [])}


def replaced_by(sample: Sample, pod_uid: str, name: str, old_id: str) -> bool:
    """Whether a node-side sample lists a running container ``name`` of pod ``pod_uid`` other than
    ``old_id`` (the same container restarted, not a sibling of it)."""
    return any(c["pod_uid"] == pod_uid and c["name"] == name and cid != old_id and c["state"] == "CONTAINER_RUNNING"
               for containers in json.loads(sample.detail).values() for cid, c in containers.items())


def replaced_after_return(pod: dict[str, Any], api_back_at: float | None, returned_at: float) -> float | None:
    """Seconds from the first API server seen ready (``api_back_at``) to the Job's replacement
    ``pod`` ({"created", "started"}: epoch seconds, started in whole seconds) running, for a pod
    made once the control plane was given back (``returned_at``, the revert's start), else None
    (one made earlier is not the return's replacement: pods_created_during_outage counts it).
    0 when it ran before the API was seen: the API servers are first asked once the revert is
    done, and frozen nodes given back one by one (6.7 s for three, measured) let the Job
    controller on the first one replace it before that."""
    if pod.get("started") is None or api_back_at is None or pod["created"] < returned_at:
        return None
    return max(0.0, pod["started"] - api_back_at)


def containers_changed(timeline: Timeline, nodes: list[str], start: float, end: float) -> tuple[set[str], list[str]]:
    """(ids of containers running on a node at its last sample before ``start`` that were not
    running at some sample of that node in [start, end], the nodes with no sample before or none
    inside the window)."""
    changed, unsampled = set(), []
    for node in nodes:
        listed = [x for x in timeline.samples() if x.ok and x.labels.get("node") == node]
        before = [x for x in listed if x.t < start]
        inside = [x for x in listed if start <= x.t <= end]
        if not before or not inside:
            unsampled.append(node)
            continue
        running_before = running_container_ids(before[-1])
        for x in inside:
            changed |= running_before - running_container_ids(x)
    return changed, unsampled


class OutageWork:
    """The workers' side of a control-plane stop in ``namespace``: ``kill_selector``'s pods and
    Job ``control_job``'s pod killed ``kill_after_seconds`` into the window, every worker's
    containers sampled. Use: :meth:`prepare` (control experiment and snapshots, with a working
    control plane), :attr:`units` into the ledger, :meth:`schedule` (once the stop's time is fixed),
    then :meth:`collect` once the nodes answer again, and :meth:`facts`. Raises RuntimeError from
    :meth:`prepare` when the control experiment fails (nothing to compare with)."""

    def __init__(self, cluster: Cluster, namespace: str, workers: list[str], kill_selector: str | None,
                 control_job: str, kill_after_seconds: float, token: str | None = None,
                 scheduled_job: str | None = None) -> None:
        self.cluster, self.namespace, self.workers = cluster, namespace, list(workers)
        self.scheduled_job = scheduled_job  # a CronJob due in the outage (harness.faults.scheduled_runs)
        self.kill_selector, self.control_job = kill_selector, control_job
        self.kill_after_seconds = float(kill_after_seconds)
        self.token = token or uuid.uuid4().hex[:8]
        self.units: dict[str, list[str]] = {}  # node -> unit names, once prepare chose them
        self.kills: dict[str, dict[str, Any]] = {}  # container id -> {node, unit, pod_uid, pod, killed_at}
        self.evidence: dict[str, Any] = {}
        self.sampler: NodeContainerSampler | None = None
        self.sampler_unit = f"kdrill-cps-{self.token}-sampler"
        self.clock_offsets: dict[str, float] = {}
        self.containers = Timeline("worker-containers")
        self._pods_before: dict[str, str] = {}
        self._replica_sets_before: list[str] = []
        self._kube_system_before: dict[str, dict] = {}
        self._job_killed: set[str] = set()
        self._job_in_window: str | None = None
        self.baseline_job_replaced_seconds: float | None = None  # prepare: the control experiment

    def prepare(self, clock_offsets: dict[str, float]) -> None:
        """With a working control plane: the control experiment (one Job pod killed and replaced),
        the snapshots the facts compare with, and the containers to kill in the window."""
        cluster, ns = self.cluster, self.namespace
        first = wait_until(lambda: running_job_pod(cluster, ns, self.control_job, set()), JOB_REPLACED_DEADLINE_SECONDS)
        if not first.ok:
            raise RuntimeError(f"Job {self.control_job}'s pod does not run: {job_pods(cluster, ns, self.control_job)}")
        uid, pod = first.value
        killed_at = time.time()
        self._kill_now(pod["node"], uid)
        self._job_killed.add(uid)
        replaced = wait_until(lambda: running_job_pod(cluster, ns, self.control_job, self._job_killed),
                              JOB_REPLACED_DEADLINE_SECONDS)
        self.evidence["control_experiment"] = {
            "killed": pod["name"], "node": pod["node"],
            "replaced_after_seconds": round(replaced.became_true_at - killed_at, 2) if replaced.ok else None}
        if not replaced.ok:
            raise RuntimeError(f"the Job controller did not replace pod {pod['name']} of Job {self.control_job} within "
                               f"{JOB_REPLACED_DEADLINE_SECONDS} s with the control plane working: nothing to compare")
        self.baseline_job_replaced_seconds = replaced.became_true_at - killed_at
        job_uid, job_pod = replaced.value
        self._job_killed.add(job_uid)
        self._job_in_window = job_uid
        victims = [(job_uid, job_pod["node"], job_pod["name"])]
        if self.kill_selector:
            for p in cluster.core.list_namespaced_pod(ns, label_selector=self.kill_selector, _request_timeout=10).items:
                if p.status.phase == "Running":
                    victims.append((p.metadata.uid, p.spec.node_name, p.metadata.name))
        for i, (pod_uid, node, name) in enumerate(victims):
            if node not in self.workers:
                raise RuntimeError(f"pod {name} runs on {node}, not a worker: the control-plane nodes are what stops")
            container, container_name = running_container(cluster, node, ns, pod_uid)
            unit = f"kdrill-cps-{self.token}-kill{i}"
            self.kills[container] = {"node": node, "unit": unit, "pod_uid": pod_uid, "pod": name,
                                     "container": container_name, "killed_at": None}
            self.units.setdefault(node, []).append(unit)
        self.clock_offsets = dict(clock_offsets)
        for node in self.workers:
            self.units.setdefault(node, []).append(self.sampler_unit)
        self._pods_before = replica_set_pods(cluster, ns)
        self._replica_sets_before = replica_set_uids(cluster, ns)
        self._kube_system_before = kube_system_snapshot(cluster)

    def _kill_now(self, node: str, pod_uid: str) -> None:
        """Kill pod ``pod_uid``'s running container on ``node`` now (the control experiment)."""
        container, _ = running_container(self.cluster, node, self.namespace, pod_uid)
        # With crictl's 30 s runtime deadline (static_pods.CRICTL_KILL), not its 2 s default, which
        # a stop through the node agent can exceed (DeadlineExceeded).
        self.cluster.node_exec(node, [*static_pods.CRICTL_KILL.split(), container], timeout_seconds=60)

    def commands(self) -> int:
        """How many node commands :meth:`schedule` sends (the stop is planned after them)."""
        return len(self.kills) + len(self.workers)

    def schedule(self, stop_at: float, hold_seconds: float) -> None:
        """Set the kills (``kill_after_seconds`` after ``stop_at``, epoch seconds) and start the
        sampler, to run until ``hold_seconds`` plus SAMPLER_AFTER_HOLD_SECONDS past the stop."""
        kill_at = stop_at + self.kill_after_seconds
        for container, kill in self.kills.items():
            node_units.schedule(self.cluster, kill["node"], kill["unit"],
                                f"{static_pods.CRICTL_KILL} {shlex.quote(container)} >/dev/null", kill_at,
                                KILL_RUNTIME_MAX_SECONDS)
        self.sampler = NodeContainerSampler(
            "worker-containers", self.cluster, self.workers, self.namespace, interval_seconds=SAMPLER_INTERVAL_SECONDS,
            duration_seconds=stop_at - time.time() + hold_seconds + SAMPLER_AFTER_HOLD_SECONDS,
            clock_offsets=self.clock_offsets, unit=self.sampler_unit).start()

    def collect(self) -> list[str]:
        """Stop every unit first (each node on its own: a kill never fires after the revert where
        the node answers), then read the sampler's samples and when each kill ran (the node's own
        record), then remove the units and their records. Returns what failed, per node; what
        could not be read is in the evidence, and its facts are None."""
        errors = []
        for node, names in self.units.items():
            try:
                node_units.cancel(self.cluster, node, names)
            except Exception as exc:
                errors.append(f"{node}: kills or sampler not stopped: {type(exc).__name__}: {exc}"[:300])
        if self.sampler is not None and self.sampler.started_at is not None:
            self.containers = self.sampler.collect()
            if self.sampler.errors:
                self.evidence["worker_containers_not_read"] = self.sampler.errors
        for container, kill in self.kills.items():
            try:
                kill["killed_at"] = node_units.started_at(self.cluster, kill["node"], kill["unit"],
                                                          self.clock_offsets.get(kill["node"], 0.0))
            except Exception as exc:  # no record, no kill time: its facts are None
                self.evidence.setdefault("kill_records_not_read", {})[container[:13]] = \
                    f"{type(exc).__name__}: {exc}"[:300]
        return errors + remove_units(self.cluster, self.units)

    def facts(self, window: tuple[float, float], api_back_at: float | None, stopped_nodes: list[str]) -> dict[str, Any]:
        """The facts (see ControlPlaneStop.facts_offered) over the outage ``window`` (epoch seconds:
        the stop to the revert's start), read now; ``api_back_at``: when the first API server was
        ready again (epoch seconds). A fact that cannot be measured is None, with why in
        :attr:`evidence`."""
        cluster, ns = self.cluster, self.namespace
        in_window = {c: k["killed_at"] is not None and window[0] < k["killed_at"] < window[1]
                     for c, k in self.kills.items()}
        self.evidence["kills"] = {c[:13]: {"pod": k["pod"], "node": k["node"], "in_window": in_window[c],
                                           "into_window_seconds": round(k["killed_at"] - window[0], 2)
                                           if k["killed_at"] is not None else None} for c, k in self.kills.items()}
        restarts = {}
        for container, kill in self.kills.items():
            if kill["pod_uid"] == self._job_in_window:
                continue
            if not in_window[container]:
                restarts[kill["pod"]] = None  # a kill that missed the window measures nothing
                continue
            back = next((x.t for x in self.containers.samples(start=kill["killed_at"])
                         if x.ok and x.labels.get("node") == kill["node"]
                         and replaced_by(x, kill["pod_uid"], kill["container"], container)), None)
            restarts[kill["pod"]] = back - kill["killed_at"] if back is not None else None
        self.evidence["killed_container_restart_seconds"] = restarts
        changed, unsampled = containers_changed(self.containers, self.workers, *window)
        changed -= set(self.kills)
        self.evidence["worker_container_changes"] = {"changed": sorted(c[:13] for c in changed),
                                                     "not_sampled_on": unsampled}
        job_container = next((c for c, k in self.kills.items() if k["pod_uid"] == self._job_in_window), None)
        job_killed_in_window = job_container is not None and in_window[job_container]
        # The Job pod killed in the window is its second failure: a working controller would
        # replace it after twice the back-off the control experiment waited, so the window must
        # leave at least that after the kill, or "none created" could not have failed.
        needed = 2 * (self.baseline_job_replaced_seconds or math.inf)
        left = window[1] - self.kills[job_container]["killed_at"] if job_killed_in_window else None
        self.evidence["job_kill_left_in_window_seconds"] = {"left": left, "needed": needed}
        falsifiable = job_killed_in_window and left >= needed
        pods = cluster.core.list_namespaced_pod(ns, _request_timeout=10).items
        created = [p.metadata.name for p in pods if window[0] <= p.metadata.creation_timestamp.timestamp() <= window[1]]
        self.evidence["pods_created_during_outage"] = created
        # The replacement of the Job pod killed in the window, waited for when the drill's windows
        # ended before it came (a short after window): a deadline, not a measurement.
        replacement = None
        if job_killed_in_window:
            waited = wait_until(lambda: running_job_pod(cluster, ns, self.control_job, self._job_killed),
                                JOB_REPLACED_DEADLINE_SECONDS)
            self.evidence["job_replacement_waited_seconds"] = round(waited.elapsed_seconds, 2) if waited.ok else None
            replacement = waited.value if waited.ok else None
        replaced_after = None
        if replacement is not None:
            replaced_after = replaced_after_return(replacement[1], api_back_at, window[1])
            if replacement[1]["started"] is not None and api_back_at is not None:
                self.evidence["job_replacement_started_after_api_seen_seconds"] = \
                    round(replacement[1]["started"] - api_back_at, 2)
        self.evidence["job_pods"] = job_pods(cluster, ns, self.control_job)
        pods_after = replica_set_pods(cluster, ns)
        moved = [u for u, node in self._pods_before.items() if pods_after.get(u) != node]
        moved += [u for u in pods_after if u not in self._pods_before]
        self.evidence["deployment_pods"] = {"before": self._pods_before, "after": pods_after}
        kube_system_after = kube_system_snapshot(cluster)
        added = restarts_between(self._kube_system_before, kube_system_after)
        others = restarts_outside_control_plane(added, self._kube_system_before)
        self.evidence["kube_system_restarts_added"] = added
        dns_nodes = sorted(p["node"] for p in self._kube_system_before.values() if p["app"] == "kube-dns")
        self.evidence["coredns_nodes"] = dns_nodes
        return {
            **self._scheduled_run_facts(window, api_back_at),
            "baseline_job_pod_replaced_seconds": self.baseline_job_replaced_seconds,
            "killed_container_restart_seconds": (max(restarts.values()) if restarts and None not in restarts.values()
                                                 else None),
            "worker_container_changes": None if unsampled else len(changed),
            "pods_created_during_outage": len(created) if falsifiable else None,
            "job_pod_replaced_after_return_seconds": replaced_after,
            "pods_rescheduled_or_replaced": len(moved),
            "new_replicasets": len(set(replica_set_uids(cluster, ns)) - set(self._replica_sets_before)),
            "kube_system_restarts_outside_control_plane": sum(others.values()),
            "coredns_replicas_on_stopped_nodes": (sum(n in stopped_nodes for n in dns_nodes) / len(dns_nodes)
                                                  if dns_nodes else None),
        }

    def _scheduled_run_facts(self, window: tuple[float, float], api_back_at: float | None) -> dict[str, Any]:
        """The scheduled-run facts (harness.faults.scheduled_runs) when the drill names a CronJob."""
        if not self.scheduled_job:
            return {}
        jobs = scheduled_jobs(self.cluster, self.namespace, self.scheduled_job)
        self.evidence["scheduled_runs"] = {
            "cronjob": self.scheduled_job, "due_during_outage": minutes_due(*judged(window)), "jobs": jobs,
            "due_during_outage_never_created": never_created(jobs, window),
            "lag_with_control_plane_seconds": lag_with_control_plane(jobs, window[0])}
        return scheduled_run_facts(jobs, window, api_back_at)
