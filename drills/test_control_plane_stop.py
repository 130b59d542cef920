"""Drill: stop the control plane and measure static stability (scenarios/control-plane-stop.yaml).

Two cases: ``components`` stops kube-apiserver, etcd, kube-controller-manager and kube-scheduler
while every node and its other pods keep running; ``node-loss`` freezes the control-plane node
containers whole, with whatever add-ons run there (CoreDNS on kind's HA cluster).

What makes "nothing is replaced" falsifiable: a Job pod (restartPolicy Never) is killed in the
baseline, and the drill measures that a working control plane replaces it; the same kill during
the outage must leave it unreplaced until the control plane returns. Workloads are called from
inside the cluster by Service name, by ClusterIP and by pod IP, and from the host through a
NodePort, through the outage and the recovery window after it.

Python rather than data: the Job-replacement control experiment and the CoreDNS-placement
prediction are computed from the live cluster.
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from datetime import datetime

import pytest
from kubernetes import client

from harness.components.dns import lookups_as_predicted, lookups_predicted
from harness.expectations import wait_until
from harness.faults import injected
from harness.faults.control_plane_stop import ControlPlaneStop
from harness.faults.node_units import NodeUnits
from harness.probes import Probes, host_pressure
from harness.probes.api import ApiReadProbe
from harness.probes.endpoints import EndpointReadyProbe
from harness.probes.http import HttpProbe
from harness.probes.incluster import InClusterProbe, service_targets
from harness.probes.nodes import NodeReadyProbe, node_transitions, nodes_not_ready_seconds
from harness.components import node_units, static_pods
from harness.probes.node_side import NodeContainerSampler
from harness.probes.pods import (kube_system_snapshot, node_containers, pod_snapshot, restarts_between,
                                 restarts_outside_control_plane, running_container_ids)
from harness.topology import clock_corrections
from harness.timeline import failure_reasons, first_time, last_time, longest_gap_seconds, success_ratio
from harness.workloads import (TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY, delete_namespace, deploy_http_server, http_server_deployment,
                               wait_deployment_available)

APP = "web"
# Killed during the outage: its own Deployment outside the Service, so the kubelet's restart is
# measured without taking a serving backend away (with no control plane no endpoint is removed).
RESTART = "restart-me"
# A Job pod (restartPolicy Never): killed, it is Failed, and only the Job controller replaces it.
JOB = "replace-me"
BOTH = f"app in ({APP},{RESTART})"
# Steady state for lookups by name: this many good ones in a row, within this deadline (a
# deadline, not a measurement: names were steady 4.7 to 10.7 s after the probe started here).
NAME_STEADY_SAMPLES = 10
NAME_STEADY_DEADLINE_SECONDS = 120
# kube-controller-manager's --node-monitor-grace-period, the v1.35 default (kubeadm sets none):
# a node not heard from for longer is marked Ready=Unknown and its pods not Ready.
NODE_MONITOR_GRACE_PERIOD_SECONDS = 50.0
# The in-window container kills fire this long after the stop: after the API is seen down (1.1 to
# 3.9 s after the stop here); the hold must be longer.
KILL_INTO_WINDOW_SECONDS = 10.0


def _names_steady(incluster: InClusterProbe) -> bool:
    """Whether the in-cluster probe's last NAME_STEADY_SAMPLES calls by name all succeeded."""
    timeline = incluster.timelines().get("name")
    samples = timeline.samples() if timeline else []
    return len(samples) >= NAME_STEADY_SAMPLES and all(s.ok for s in samples[-NAME_STEADY_SAMPLES:])


def job_manifest(name: str) -> client.V1Job:
    container = client.V1Container(name="http", image=TOOLBOX_IMAGE, image_pull_policy=TOOLBOX_PULL_POLICY,
                                   command=["kdrill-http"])
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(backoff_limit=6, template=client.V1PodTemplateSpec(
            metadata=client.V1ObjectMeta(labels={"app": name}),
            spec=client.V1PodSpec(restart_policy="Never", containers=[container], termination_grace_period_seconds=1))))


def job_pods(cluster, ns) -> dict[str, dict]:
    """uid -> {"name", "phase", "node", "created"} of the Job's pods (created: epoch seconds)."""
    pods = cluster.core.list_namespaced_pod(ns, label_selector=f"app={JOB}", _request_timeout=5).items
    return {p.metadata.uid: {"name": p.metadata.name, "phase": p.status.phase, "node": p.spec.node_name,
                             "created": p.metadata.creation_timestamp.timestamp()} for p in pods}


def running_job_pod(cluster, ns, exclude: set[str]) -> tuple[str, dict] | None:
    for uid, pod in job_pods(cluster, ns).items():
        if uid not in exclude and pod["phase"] == "Running":
            return uid, pod
    return None


def running_container(cluster, node, ns, pod_uid) -> str:
    """The id of pod ``pod_uid``'s running container on ``node``, as the node's runtime lists it."""
    return next(cid for cid, c in node_containers(cluster, node, ns).items()
                if c["state"] == "CONTAINER_RUNNING" and c["pod_uid"] == pod_uid)


def kill_pod_container(cluster, node, ns, pod_uid) -> str:
    """Kill (crictl stop --timeout 0) the running container of pod ``pod_uid`` on ``node``; its id."""
    container = running_container(cluster, node, ns, pod_uid)
    # With crictl's 30 s runtime deadline (static_pods.CRICTL_KILL), not its 2 s default: the stop
    # failed with DeadlineExceeded through the node agent (2026-12-04).
    cluster.node_exec(node, [*static_pods.CRICTL_KILL.split(), container], timeout_seconds=60)
    return container


def replicasets(cluster, namespace):
    return sorted(rs.metadata.uid for rs in cluster.apps.list_namespaced_replica_set(namespace).items)


@pytest.mark.cluster
@pytest.mark.destructive
@pytest.mark.node_access
@pytest.mark.scenario("control-plane-stop")
def test_control_plane_stop(drill):
    cluster, ns, p = drill.cluster, drill.namespace, drill.params
    hold, recovery = float(p["hold_seconds"]), float(p["recovery_seconds"])
    method = p["method"]
    replicas = int(drill.workload.get("replicas", 4))
    node_port = int(drill.workload.get("node_port", 30080))
    workers, control_plane = drill.topology.workers, drill.topology.control_plane
    assert workers, "the drill needs worker nodes: the control-plane nodes are what stops"
    # The workers record on their own clocks (the kills, the sampler, the in-cluster probe pod);
    # the run's offset reads put them on the host's, by the least offset a read proves.
    offsets = clock_corrections(drill.record.cluster.get("clock_offsets"), workers)
    drill.observe("worker_clock_corrections_seconds", offsets)
    assert hold >= KILL_INTO_WINDOW_SECONDS + 20, (f"hold_seconds {hold:.0f} leaves under 20 s of the window after "
                                                   f"the container kills, {KILL_INTO_WINDOW_SECONDS:.0f} s into it")
    stopped_nodes = control_plane if method == "pause-node-containers" else []

    with drill.phase("setup"):
        drill.fresh_namespace()
        deploy_http_server(cluster, ns, APP, replicas, node_port=node_port)
        cluster.apps.create_namespaced_deployment(ns, http_server_deployment(RESTART, 1), _request_timeout=10)
        client.BatchV1Api(cluster.api).create_namespaced_job(ns, job_manifest(JOB), _request_timeout=10)
        wait_deployment_available(cluster, ns, RESTART, 1, 120)
        first_job = wait_until(lambda: running_job_pod(cluster, ns, set()), 120)
        assert first_job.ok, f"the Job's pod does not run: {job_pods(cluster, ns)}"
        restart_pod, restart_info = next(iter(pod_snapshot(cluster, ns, f"app={RESTART}").items()))
        before = pod_snapshot(cluster, ns, BOTH)
        assert all(pod["node"] in workers for pod in before.values()), f"workload pods must run on workers: {before}"
        kube_system_before = kube_system_snapshot(cluster)
        dns_nodes = sorted(pod["node"] for pod in kube_system_before.values() if pod["app"] == "kube-dns")
        prediction = lookups_predicted(dns_nodes, stopped_nodes) if stopped_nodes else "work"
        drill.observe("addon_placement", {name: pod["node"] for name, pod in kube_system_before.items()
                                          if pod["node"] not in control_plane or pod["app"] not in
                                          ("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler")})
        drill.observe("coredns_nodes", dns_nodes)
        drill.observe("names_prediction", {"stopped_nodes": stopped_nodes, "coredns_nodes": dns_nodes,
                                           "predicted": prediction})
        drill.say(f"method {method}; CoreDNS on {', '.join(dns_nodes)}: lookups by name predicted to {prediction}")
        targets = service_targets(cluster, ns, APP, f"app={APP}")
        rs_before = replicasets(cluster, ns)
        # The in-cluster probe calls from a worker, bounded to the drill's length.
        incluster = InClusterProbe(cluster, ns, "incluster-probe", targets, interval_seconds=drill.interval_seconds,
                                   duration_seconds=hold + recovery + 300, node=workers[-1],
                                   clock_offset_seconds=offsets[workers[-1]]).start()
        incluster_started = time.time()

    bound = hold + recovery + 600
    probes = Probes(
        HttpProbe("host-http", f"http://127.0.0.1:{cluster.host_port(node_port)}/", interval_seconds=drill.interval_seconds,
                  max_seconds=bound),
        ApiReadProbe("api-read", cluster, ns, interval_seconds=drill.interval_seconds, max_seconds=bound),
        NodeReadyProbe("nodes", cluster, interval_seconds=1.0, max_seconds=bound),
        EndpointReadyProbe("web-endpoints", cluster, ns, APP, interval_seconds=drill.interval_seconds,
                           max_seconds=bound),
    )
    killed_job_pods: set[str] = set()
    try:
        with probes:
            with drill.phase("baseline"):
                steady = wait_until(lambda: sum(s.ok for s in probes["host-http"].timeline.samples()) >= 6
                                    and sum(s.ok for s in probes["api-read"].timeline.samples()) >= 6, 60)
                assert steady.ok, "no steady state before the fault: the workload or the API does not answer"
                # Steady state for names too: the probe pod resolves the drill's new Service through
                # every CoreDNS replica (kube-proxy picks one per lookup: a replica that has not
                # learnt the Service survives 10 good lookups in a row 1 time in 1024). A CI run
                # once had half the lookups fail through the whole window with no replica frozen.
                names = wait_until(lambda: _names_steady(incluster), NAME_STEADY_DEADLINE_SECONDS,
                                   interval_seconds=2.0)
                drill.observe("service_name_steady_after_seconds",
                              names.became_true_at - incluster_started if names.ok else None)
                if not names.ok:
                    name_samples = incluster.timelines().get("name")
                    reasons = failure_reasons(name_samples.samples()) if name_samples else []
                    raise AssertionError(f"no steady state before the fault: lookups by name of the drill's new Service "
                                         f"still fail {NAME_STEADY_DEADLINE_SECONDS} s after the probe started "
                                         f"(CoreDNS on {', '.join(dns_nodes)}): {reasons}")
                # The control experiment: with a working control plane, a killed Job pod is replaced.
                uid, pod = first_job.value
                killed_at = time.time()
                kill_pod_container(cluster, pod["node"], ns, uid)
                killed_job_pods.add(uid)
                replaced = wait_until(lambda: running_job_pod(cluster, ns, killed_job_pods), 120)
                drill.measure("baseline_job_pod_replaced_seconds",
                              replaced.became_true_at - killed_at if replaced.ok else None,
                              detail=f"Job pod {pod['name']} killed on {pod['node']}; the Job controller's "
                                     "replacement Running (control experiment: the control plane works)",
                              became_true_at=replaced.became_true_at)
                assert replaced.ok, "the Job pod was not replaced with a working control plane: nothing to compare"
                job_uid, job_pod = replaced.value

            fault = ControlPlaneStop(cluster, method=method, hold_seconds=hold)
            # What the drill does on the workers in the window is set on the workers before the
            # stop (through the node agent nothing reaches a node while the control plane is down):
            # two container kills, and the workers' containers sampled by their own runtime.
            victim_node = restart_info["node"]
            victim = running_container(cluster, victim_node, ns, restart_pod)
            job_container = running_container(cluster, job_pod["node"], ns, job_uid)
            if drill.vitals is not None:
                drill.vitals.await_baseline()  # before the stop's time is fixed: it may take a while
            # The stop's time first, leaving room for the kills' and the sampler's commands.
            stop_at = fault.plan_stop(extra_commands=2 + len(workers))
            kill_at = stop_at + KILL_INTO_WINDOW_SECONDS
            kills = {victim: (victim_node, f"kdrill-kill-{victim[:12]}"),
                     job_container: (job_pod["node"], f"kdrill-kill-{job_container[:12]}")}
            sampler = NodeContainerSampler("worker-containers", cluster, workers, ns, interval_seconds=1.0,
                                           duration_seconds=stop_at - time.time() + hold + 30, clock_offsets=offsets)
            # In the ledger before they are set: a drill that dies leaves none of them to fire on a
            # cluster nobody watches (kdrill recover stops them); they go when this block ends.
            units: dict[str, list[str]] = {}
            for node, unit in kills.values():
                units.setdefault(node, []).append(unit)
            for node in workers:
                units.setdefault(node, []).append(sampler.unit)
            with injected(NodeUnits(cluster, units), drill.ledger, drill=drill.name):
                for container, (node, unit) in kills.items():
                    node_units.schedule(cluster, node, unit,
                                        f"{static_pods.CRICTL_KILL} {shlex.quote(container)} >/dev/null", kill_at, 60)
                sampler.start()
                killed_job_pods.add(job_uid)
                with drill.inject(fault):
                    with drill.phase("control-plane-stopped"):
                        down = wait_until(lambda: not _api_ok_now(cluster), 30)
                        drill.observe("api_unreachable_after_seconds",
                                      down.became_true_at - fault.injected_at if down.ok else None)
                        drill.say(f"container {victim[:13]} on {victim_node} and Job pod {job_pod['name']} on "
                                  f"{job_pod['node']} are killed by their nodes {kill_at - fault.injected_at:.1f} s "
                                  "into the window: a working control plane would replace the Job pod within it")
                        # Hold the fault for its window: the drill's duration, not a synchronisation.
                        threading.Event().wait(max(0.0, fault.injected_at + hold - time.time()))
                # The outage ends when the revert starts (the first node is back before the last).
                reverted_at = fault.revert_started_at

                with drill.phase("recovery"):
                    # From the API probe that ran through the revert (the revert itself waits for
                    # every node's /readyz, which must not be counted twice).
                    api = probes["api-read"].timeline
                    back = wait_until(lambda: [s for s in api.samples(start=reverted_at) if s.ok], 180)
                    back_at = back.value[0].t if back.ok else None
                    drill.measure("api_recovery_seconds", back_at - reverted_at if back_at else None,
                                  detail="first successful API read after the revert", became_true_at=back_at)
                    job_back = wait_until(lambda: running_job_pod(cluster, ns, killed_job_pods), 180)
                    drill.measure("job_pod_replaced_after_return_seconds",
                                  job_back.became_true_at - back_at if job_back.ok and back_at else None,
                                  detail="from the API answering again to the Job's replacement pod Running",
                                  became_true_at=job_back.became_true_at)
                    # The recovery window: the probes keep running; what breaks in it is measured.
                    threading.Event().wait(max(0.0, reverted_at + recovery - time.time()))
                    wait_deployment_available(cluster, ns, APP, replicas, 180)
                # What the nodes recorded, read before their units and records go with the entry.
                worker_containers = sampler.collect()
                drill.add_timelines({"worker-containers": worker_containers})
                if sampler.errors:
                    drill.observe("worker_containers_not_read", sampler.errors)
                killed_at = {c: node_units.started_at(cluster, node, unit, offsets[node])
                             for c, (node, unit) in kills.items()}
    finally:
        probes.stop()
        drill.add_timelines(probes.timelines())

    window, after = (fault.injected_at, reverted_at), (reverted_at, reverted_at + recovery)
    incluster_timelines = incluster.timelines(prefix="incluster/")
    incluster.delete()
    drill.add_timelines(incluster_timelines)

    # When each node ran its kill (its own record), and whether that fell in the window.
    in_window = {c: t is not None and window[0] < t < window[1] for c, t in killed_at.items()}
    drill.observe("worker_kills", {c[:13]: {"node": kills[c][0], "into_window_seconds":
                                            round(t - window[0], 2) if t is not None else None, "in_window": in_window[c]}
                                   for c, t in killed_at.items()})
    victim_killed = killed_at[victim]
    restarted_at = next((x.t for x in worker_containers.samples(start=victim_killed)
                         if x.ok and x.labels.get("node") == victim_node and _replaced(x, restart_pod, victim)),
                        None) if victim_killed is not None else None
    drill.measure("killed_container_restart_seconds",
                  restarted_at - victim_killed if restarted_at is not None and in_window[victim] else None,
                  detail=f"container {victim[:13]} of pod {restart_pod} on {victim_node}, killed by its node "
                         + (f"{victim_killed - window[0]:.1f} s into the window" if victim_killed is not None
                            else "(no record of the kill)")
                         + ("" if in_window[victim] else ", not in the window: nothing measured")
                         + "; its replacement as the node's runtime listed it, sampled on the node every 1 s",
                  became_true_at=restarted_at)

    def timeline_of(name: str):
        return probes.timelines().get(name) or incluster_timelines[name]

    def ratio(name: str, span) -> float | None:
        return success_ratio(timeline_of(name).samples(), *span)

    pod_targets = [name for name in incluster_timelines if name.startswith("incluster/pod-")]

    def lowest_pod_ratio(span) -> float | None:
        ratios = [ratio(name, span) for name in pod_targets]
        return None if not ratios or None in ratios else min(ratios)

    drill.measure("api_success_ratio_while_stopped", success_ratio(probes["api-read"].timeline.samples(),
                                                                   window[0] + 5, window[1]),
                  detail="from 5 s after the stop (requests in flight may still complete) to the revert")
    drill.measure("workload_http_success_ratio", ratio("host-http", window),
                  detail=f"host -> 127.0.0.1:{cluster.host_port(node_port)} (NodePort {node_port} on a worker)")
    drill.measure("service_clusterip_success_ratio", ratio("incluster/clusterip", window),
                  detail=f"probe pod on {workers[-1]} -> {targets['clusterip']}")
    drill.measure("pod_ip_http_success_ratio", lowest_pod_ratio(window),
                  detail=f"lowest over {len(pod_targets)} pods behind the Service, from {workers[-1]}")
    name_ratio = ratio("incluster/name", window)
    drill.observe("service_name_success_ratio_while_stopped", name_ratio)
    # What a ratio alone does not say: whether names already failed before the stop (a CoreDNS
    # replica that stopped serving earlier), why they failed, and when in the window.
    name_samples = timeline_of("incluster/name").samples()
    failed_at = [t for t in (first_time(name_samples, lambda s: not s.ok, *window),
                             last_time(name_samples, lambda s: not s.ok, *window)) if t is not None]
    name_failures = {
        "baseline_ratio": ratio("incluster/name", (fault.injected_at - 60, fault.injected_at)),
        "reasons": failure_reasons(name_samples, *window),
        "failing_from_to_seconds": [round(t - fault.injected_at, 1) for t in failed_at],
    }
    drill.observe("service_name_failures_while_stopped", name_failures)
    name_detail = (f"lookups by name succeeded {name_ratio} (in the minute before the stop "
                   f"{name_failures['baseline_ratio']}); predicted to {prediction}")
    if name_failures["reasons"]:
        name_detail += (f"; failures from {name_failures['failing_from_to_seconds']} s after the stop: "
                        + "; ".join(f"{n}x {why}" for why, n in name_failures["reasons"]))
    if "service_name_success_ratio" in drill.expectations:
        drill.measure("service_name_success_ratio", name_ratio, detail=f"probe pod -> {targets['name']}; "
                      f"CoreDNS on {', '.join(dns_nodes)}, all of them running; {name_detail}")
    else:
        drill.measure("service_name_outcome_as_placement_predicts", lookups_as_predicted(prediction, name_ratio),
                      detail=f"{name_detail}; CoreDNS on {', '.join(dns_nodes)}, frozen: "
                             f"{', '.join(n for n in dns_nodes if n in stopped_nodes) or 'none'}")

    # The recovery window: what broke after the control plane returned, and why.
    service_paths = (("host-http", "workload_http"), ("incluster/clusterip", "service_clusterip"),
                     ("incluster/name", "service_name"))
    def failures_said(names) -> str:
        # When and why calls failed after the return, and how starved this machine's CPUs were
        # then (the nodes are containers on it: a restarting control plane competes with the pods).
        failed = sorted((s.t, s.detail) for n in names for s in timeline_of(n).samples(*after) if not s.ok)
        if not failed:
            return ""
        stalls = [drill.host_pressure and host_pressure.at(drill.host_pressure.timeline, t) for t, _ in failed]
        stalls = [x for x in stalls if x is not None]
        reasons = failure_reasons([s for n in names for s in timeline_of(n).samples(*after)])
        return (f"; {len(failed)} failed from {failed[0][0] - reverted_at:.1f} to {failed[-1][0] - reverted_at:.1f} s "
                f"after the revert: " + "; ".join(f"{k}x {why}" for why, k in reasons[:3])
                + (f"; host CPU stalled {min(stalls):.0%} to {max(stalls):.0%} of those seconds" if stalls else ""))

    for probe_name, key in service_paths:
        if f"recovery_{key}_success_ratio" in drill.expectations:
            drill.measure(f"recovery_{key}_success_ratio", ratio(probe_name, after),
                          detail=f"the {recovery:.0f} s after the revert{failures_said([probe_name])}")
    drill.measure("recovery_pod_ip_http_success_ratio", lowest_pod_ratio(after),
                  detail=f"lowest over {len(pod_targets)} pods, the {recovery:.0f} s after the revert"
                         f"{failures_said(pod_targets)}")
    transitions = node_transitions(probes["nodes"].timeline, start=fault.injected_at - 5)
    after_return = [c for c in transitions if c["t"] >= reverted_at and c["ready"] != "True"]
    marked = sorted({c["node"] for c in after_return})
    drill.observe("nodes_marked_not_ready_after_return", marked)
    down = nodes_not_ready_seconds(transitions, reverted_at, reverted_at + recovery)
    if "no_node_marked_not_ready" in drill.expectations:
        # Ready=Unknown is the node lifecycle controller's mark (no heartbeat within its grace
        # period); Ready=False is the kubelet's own report. stop-components stops and restarts the
        # control-plane nodes' kubelets: one of them reporting NotReady for a moment right after
        # the return is that restart, not the controller (measured once in 17 runs: 1.9 s, on
        # kdrill-ha-control-plane2, CI of 2026-12-03). It is recorded, and it still counts if it
        # lasts longer than the grace period the controller would give.
        restarted = set(control_plane) if method == "stop-components" else set()
        own = {n: round(down.get(n, 0.0), 2) for n in marked if n in restarted
               and all(c["ready"] == "False" for c in after_return if c["node"] == n)
               and down.get(n, 0.0) <= NODE_MONITOR_GRACE_PERIOD_SECONDS}
        counted = [n for n in marked if n not in own]
        drill.observe("not_ready_by_own_restarted_kubelet_seconds", own)
        drill.measure("no_node_marked_not_ready", counted == [] if transitions else None,
                      detail=f"marked NotReady/Unknown after the return: {', '.join(counted) or 'none'} "
                             "(a restarted kube-controller-manager gives every node a fresh node-monitor-grace-period)"
                             + ("; not counted, NotReady by its own restarted kubelet (Ready=False, not Unknown): "
                                + ", ".join(f"{n} {s:.1f} s" for n, s in own.items()) if own else ""))
    if "recovery_nodes_not_ready_longest_seconds" in drill.expectations:
        drill.measure("recovery_nodes_not_ready_longest_seconds", max(down.values(), default=0.0),
                      detail=f"marked NotReady/Unknown after the return: {', '.join(marked) or 'none'}; a frozen "
                             f"kube-controller-manager resumes with heartbeat times older than its "
                             f"node-monitor-grace-period ({NODE_MONITOR_GRACE_PERIOD_SECONDS:.0f} s; held {hold:.0f} s) "
                             "and marks each node it has not heard from again by its next check; per node: "
                             + ", ".join(f"{n} {s:.1f} s" for n, s in down.items()))
    if "recovery_service_longest_gap_seconds" in drill.expectations:
        gaps = {key: longest_gap_seconds(timeline_of(name).samples(), *after) for name, key in service_paths}
        drill.measure("recovery_service_longest_gap_seconds", max(gaps.values()),
                      detail="longest time without a successful call after the return: "
                             + ", ".join(f"{k} {v:.1f} s" for k, v in gaps.items()))
    drill.observe("recovery_failures", {
        name: [{"after_revert_seconds": round(s.t - reverted_at, 2), "detail": s.detail[:160]}
               for s in timeline.samples(*after) if not s.ok][:20]
        for name, timeline in {**probes.timelines(), **incluster_timelines}.items()
        if name not in ("api-read", "worker-containers", "nodes", "web-endpoints")})
    drill.observe("node_transitions", [{**c, "after_revert_seconds": round(c["t"] - reverted_at, 2)}
                                       for c in transitions])
    endpoint_counts = [int(s.labels["ready"]) for s in probes["web-endpoints"].timeline.samples(*after) if s.ok]
    drill.observe("recovery_ready_endpoints", {"min": min(endpoint_counts, default=None), "expected": replicas})

    # Containers running on the workers just before the stop that were gone at any sample in the window.
    changed, unsampled = set(), []
    for node in workers:
        listed = [x for x in worker_containers.samples() if x.ok and x.labels.get("node") == node]
        before_stop = [x for x in listed if x.t < window[0]]
        if not before_stop or not [x for x in listed if window[0] <= x.t <= window[1]]:
            unsampled.append(node)
            continue
        running_before = running_container_ids(before_stop[-1])
        for x in listed:
            if window[0] <= x.t <= window[1]:
                changed |= running_before - running_container_ids(x)
    changed -= {victim, job_container}
    drill.measure("worker_container_changes", None if unsampled else len(changed),
                  detail=json.dumps(sorted(c[:13] for c in changed))
                  + (f"; not sampled before and in the window on {', '.join(unsampled)}" if unsampled else ""))

    created_in_window = [pod.metadata.name for pod in cluster.core.list_namespaced_pod(ns, _request_timeout=10).items
                         if window[0] <= pod.metadata.creation_timestamp.timestamp() <= window[1]]
    job_killed = killed_at[job_container]
    drill.measure("pods_created_during_outage", len(created_in_window) if in_window[job_container] else None,
                  detail=f"{', '.join(created_in_window) or 'none'}; a Job pod was killed by its node "
                         + (f"{window[1] - job_killed:.0f} s before the revert" if job_killed is not None
                            else "(no record of the kill)")
                         + ("" if in_window[job_container] else ", not in the window: nothing measured"))
    after_pods = pod_snapshot(cluster, ns, BOTH)
    moved = [uid for uid, pod in before.items() if uid not in after_pods or after_pods[uid]["node"] != pod["node"]]
    moved += [uid for uid in after_pods if uid not in before]
    drill.observe("pods_before", before)
    drill.observe("pods_after", after_pods)
    drill.measure("pods_rescheduled_or_replaced", len(moved), detail="Deployment pods, before and after the outage")
    drill.measure("new_replicasets", len(set(replicasets(cluster, ns)) - set(rs_before)))
    drill.observe("job_pods", {uid: {**pod, "created": datetime.fromtimestamp(pod["created"]).isoformat()}
                               for uid, pod in job_pods(cluster, ns).items()})
    added = restarts_between(kube_system_before, kube_system_snapshot(cluster))
    drill.observe("kube_system_restarts_added", added)
    # The four components stop (or lose their leader lease when frozen, and exit): their restarts
    # are the fault. Anything else in kube-system restarting is not.
    others = restarts_outside_control_plane(added, kube_system_before)
    drill.measure("kube_system_restarts_outside_control_plane", sum(others.values()),
                  detail=f"outside the control-plane components: {others or 'none'}; theirs: "
                         f"{ {p: n for p, n in added.items() if p not in others} or 'none'}")

    delete_namespace(cluster, ns)
    drill.expectations.assert_all()


def _api_ok_now(cluster) -> bool:
    """One API request, no retries: does the API server answer right now?"""
    try:
        return _no_retry_core(cluster).list_namespace(limit=1, _request_timeout=2) is not None
    except Exception:
        return False


_cores: dict = {}


def _no_retry_core(cluster):
    if cluster.name not in _cores:
        _cores[cluster.name] = client.CoreV1Api(cluster.new_api())
    return _cores[cluster.name]


def _replaced(sample, pod_uid: str, old_id: str) -> bool:
    """Whether a node-side sample lists a running container of pod ``pod_uid`` other than ``old_id``."""
    return any(c["pod_uid"] == pod_uid and cid != old_id and c["state"] == "CONTAINER_RUNNING"
               for containers in json.loads(sample.detail).values() for cid, c in containers.items())
