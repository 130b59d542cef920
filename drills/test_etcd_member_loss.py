"""Drill: lose etcd members one at a time, then quorum, then restore (scenarios/etcd-member-loss.yaml).

Every prediction comes from the member count N: quorum q = floor(N/2)+1, tolerance t = N - q.
Phase 1 stops one member (a follower, then the leader) when t >= 1: predicted writable.
Phase 2 stops t+1 members: predicted not writable. Phase 3 restores them.

Why a Python drill: how many members it stops, and which (a follower, then the leader), follow
from the member count and the leader found at run time, and every write acknowledged during the
drill is read back afterwards to count any lost; a data-only scenario names its targets up front.
"""

from __future__ import annotations

import collections
import time

import pytest
from kubernetes.client.exceptions import ApiException

from harness.components import etcd
from harness.components.etcd import etcd_members
from harness.components.topology import clock_offset, least_offset_seconds
from harness.core.timeline import latency_percentile, success_ratio
from harness.core.waiting import hold_until, wait_until
from harness.engine.workload import serve_web
from harness.faults.etcd_member import EtcdMember
from harness.kube.health import wait_healthy
from harness.kube.workloads import delete_namespace
from harness.probes import Probes
from harness.probes.api import ApiReadProbe, ApiWriteProbe
from harness.probes.etcd import EtcdQuorumProbe
from harness.probes.http import host_http
from harness.probes.incluster import InClusterProbe, service_targets
from harness.probes.pods import kube_system_snapshot, pod_snapshot, restarts_between, restarts_outside_control_plane
from harness.spec.manifests import APP


@pytest.mark.cluster
@pytest.mark.destructive
@pytest.mark.node_access
@pytest.mark.scenario("etcd-member-loss")
def test_etcd_member_loss(drill):
    cluster, ns, p = drill.cluster, drill.namespace, drill.params
    settle = float(p["settle_seconds"])
    for hold in ("one_down_hold_seconds", "quorum_lost_hold_seconds"):
        assert float(p[hold]) > settle, f"{hold} must exceed settle_seconds ({settle}): nothing would be measured"
    control_plane = drill.topology.control_plane

    with drill.phase("setup"):
        drill.fresh_namespace()
        node_port = serve_web(drill, from_host=True)
        members = etcd_members(cluster, control_plane[0])
        node_of = {m.id: m.name for m in members}
        endpoint_of = {m.name: m.client_urls[0] for m in members}
        endpoints = sorted(endpoint_of.values())
        n = len(members)
        q, tolerance = etcd.quorum(n), etcd.failure_tolerance(n)
        leader_before = etcd.leader_id(cluster, control_plane[0], endpoints)
        drill.observe("members_before", [vars(m) for m in members])
        drill.observe("leader_before", node_of.get(leader_before))
        drill.observe("prediction", {"members": n, "quorum": q, "failure_tolerance": tolerance,
                                     "one_down": "writable" if tolerance >= 1 else "not writable",
                                     f"{tolerance + 1}_down": "not writable"})
        drill.say(f"{n} etcd members: quorum {q}, tolerates {tolerance} failed member(s)")
        assert tolerance >= 1, f"{n} member(s) tolerate no failure: this drill needs an HA control plane"
        pods_before = pod_snapshot(cluster, ns, f"app={APP}")
        kube_system_before = kube_system_snapshot(cluster)
        # Callers inside the cluster, by Service name, ClusterIP and pod IP, from a worker.
        incluster = InClusterProbe(cluster, ns, "incluster-probe", service_targets(cluster, ns, APP, f"app={APP}"),
                                   interval_seconds=drill.interval_seconds, duration_seconds=900,
                                   node=(drill.topology.workers or [None])[-1]).start()

    writes = ApiWriteProbe("api-write", cluster, ns, prefix="ledger", interval_seconds=drill.interval_seconds,
                           max_seconds=900)
    probes = Probes(
        writes,
        ApiReadProbe("api-read-consistent", cluster, ns, interval_seconds=drill.interval_seconds, max_seconds=900),
        ApiReadProbe("api-read-watch-cache", cluster, ns, resource_version="0",
                     interval_seconds=drill.interval_seconds, max_seconds=900),
        host_http(drill.cluster, node_port, drill.interval_seconds, max_seconds=900),
        EtcdQuorumProbe("etcd-quorum", cluster, control_plane, endpoints, max_seconds=900),
    )

    def survivor(stopped: list[str]) -> str:
        return next(node for node in control_plane if node not in stopped)

    def healthy_count(via: str | None = None) -> int:
        """Healthy endpoints, asked through ``via`` or any node whose etcd runs."""
        via = via or etcd.running_member_node(cluster, control_plane)
        return sum(etcd.endpoint_health(cluster, via, endpoints).values())

    def read_health(via: str, reads: list[dict], since: float) -> int:
        """:func:`healthy_count` through ``via``, each answer (per endpoint, or the error) and when
        (seconds after epoch ``since``) appended to ``reads``. Raises what healthy_count raises."""
        asked = time.time()
        try:
            health = etcd.endpoint_health(cluster, via, endpoints)
        except Exception as exc:
            reads.append({"t": round(asked - since, 2), "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            raise
        reads.append({"t": round(asked - since, 2), "took": round(time.time() - asked, 2),
                      "healthy": {node_name(e): ok for e, ok in health.items()}})
        return sum(health.values())

    def node_name(endpoint: str) -> str:
        return next((node for node, e in endpoint_of.items() if e == endpoint), endpoint)

    def current_leader() -> str | None:
        """The leader's member id, asked until a node answers (through the node agent a command
        can meet, for a few seconds, the API server beside a member just stopped or restarted)."""
        asked = wait_until(lambda: etcd.leader_id(cluster, etcd.running_member_node(cluster, control_plane),
                                                  endpoints), 30)
        return asked.value if asked.ok else None

    restores: list[tuple[str, EtcdMember]] = []
    try:
        with probes:
            with drill.phase("baseline"):
                steady = wait_until(lambda: sum(s.ok for s in writes.timeline.samples()) >= 6, 60)
                assert steady.ok, "API writes do not succeed before the fault"

            # Phase 1: one member down, once a follower and once the leader.
            for role in ("follower", "leader"):
                leader = current_leader()
                assert leader, "no etcd leader before the one-member phase"
                target = node_of[leader] if role == "leader" else next(
                    name for mid, name in node_of.items() if mid != leader)
                fault = EtcdMember(cluster, [target], hold_seconds=float(p["one_down_hold_seconds"]))
                with drill.inject(fault):
                    with drill.phase(f"one-member-down-{role}"):
                        via = survivor([target])
                        if role == "leader":
                            # Ask only the surviving members: a dead endpoint would cost a dial timeout per poll.
                            alive = [e for node, e in endpoint_of.items() if node != target]
                            def new_leader() -> str | None:
                                found = etcd.leader_id(cluster, via, alive)
                                return found if found and found != leader else None

                            # Seen here by polling (through the node agent each poll is a pod exec
                            # through an API server, slowed by the one beside the stopped member);
                            # measured below from etcd's own log.
                            elected = wait_until(new_leader, 30, interval_seconds=0.25)
                            drill.observe("leader_seen_by_polling_seconds",
                                          elected.became_true_at - fault.injected_at if elected.ok else None)
                        reads: list[dict] = []  # each read's answer, for the record: a failed prediction says why
                        health = wait_until(lambda: read_health(via, reads, fault.injected_at) == n - 1, 30)
                        drill.observe(f"one_down_{role}_healthy_members", n - 1 if health.ok else f"not {n - 1} within 30 s")
                        drill.observe(f"one_down_{role}_health_reads", reads[-20:])
                        if role == "follower":
                            drill.measure("one_down_health_as_predicted", health.ok,
                                          detail=f"{n - 1} of {n} endpoints healthy with {target} stopped (predicted {n - 1})",
                                          became_true_at=health.became_true_at)
                        # Hold the fault for its window: the drill's duration, not a synchronisation.
                        hold_until(fault.injected_at + float(p["one_down_hold_seconds"]))
                restores.append((role, fault))
                not_made = fault.window_not_made()
                assert not not_made, f"no fault window: {not_made}"
                if role == "leader":
                    # etcd's own record: the first election of another leader a survivor logged
                    # after the stop (the node's record of the stop through the node agent).
                    stopped_at = fault.window_started_at
                    try:
                        # The survivor's log is on its own clock.
                        offset = least_offset_seconds(clock_offset(cluster, via))
                        logged = [e for e in etcd.elections(cluster, via, stopped_at, offset) if e["leader"] != leader]
                    except Exception as exc:  # noqa: BLE001 - unmeasured, and says why
                        logged, why = [], f"{via}'s etcd log not read: {exc}"
                    else:
                        why = f"no election of another leader in {via}'s etcd log since the stop"
                    first = logged[0] if logged else None
                    drill.measure("leader_election_seconds", first["t"] - stopped_at if first else None,
                                  detail=(f"old leader {node_of[leader]} killed; {node_of.get(first['leader'])} "
                                          f"elected at term {first['term']} (raft log of {via}: 'elected leader')"
                                          if first else why),
                                  became_true_at=first["t"] if first else None)
                # The revert's verification waited for the member itself; this is the whole cluster's view.
                rejoined = wait_until(lambda: healthy_count() == n, 60)
                drill.observe(f"one_down_{role}_rejoined_seconds",
                              rejoined.became_true_at - fault.restarted_at if rejoined.ok else None)
                samples = writes.timeline.samples()
                drill.measure(f"{role}_down_write_success_ratio",
                              success_ratio(samples, fault.window_started_at + settle, fault.restarted_at),
                              detail=f"{target} stopped; window from {settle:.0f} s after the stop to the restart")
                drill.observe(f"one_down_{role}_failures_while_settling",
                              sum(not s.ok for s in samples
                                  if fault.window_started_at <= s.t < fault.window_started_at + settle))

            # Phase 2: tolerance + 1 members down: no quorum.
            leader = current_leader()
            stopped = sorted(node_of.values(), key=lambda name: name != node_of.get(leader))[: tolerance + 1]
            fault = EtcdMember(cluster, stopped, hold_seconds=float(p["quorum_lost_hold_seconds"]))
            with drill.inject(fault):
                with drill.phase("quorum-lost"):
                    if cluster.node_channel == "agent":
                        # Its exec needs an API server, and they serve nothing without quorum.
                        drill.observe("quorum_lost_healthy_members", "not asked: the node agent's exec needs the API")
                    else:
                        via = survivor(stopped)
                        lost = wait_until(lambda: healthy_count(via) == 0, 30)
                        drill.observe("quorum_lost_healthy_members", 0 if lost.ok else "some member still healthy")
                    hold_until(fault.injected_at + float(p["quorum_lost_hold_seconds"]))
            restores.append(("quorum-lost", fault))
            not_made = fault.window_not_made()
            assert not not_made, f"no quorum-lost window: {not_made}"
            # Measured from the kubelets' start: through the node agent the revert ends only once
            # the nodes answer again, which needs quorum.
            restarted_at = fault.restarted_at
            window = (fault.window_started_at + settle, restarted_at)

            with drill.phase("restore"):
                # From the probes that ran through the revert: the revert's own verification
                # (every restarted member healthy) must not be counted as etcd's recovery time.
                quorum_probe = probes["etcd-quorum"].timeline
                regained = wait_until(lambda: [s for s in quorum_probe.samples(start=restarted_at) if s.ok], 120)
                regained_at = regained.value[0].t if regained.ok else None
                drill.measure("quorum_regained_seconds", regained_at - restarted_at if regained_at else None,
                              detail="first etcd-quorum sample after the kubelets' start with a majority healthy and "
                                     "a leader" + ("; asked through the node agent, which needs the API too"
                                                   if cluster.node_channel == "agent" else ""),
                              became_true_at=regained_at)
                resumed = wait_until(lambda: [s for s in writes.timeline.samples(start=restarted_at) if s.ok], 180)
                first_ok = resumed.value[0].t if resumed.ok else None
                drill.measure("writes_resumed_seconds", first_ok - restarted_at if first_ok else None,
                              became_true_at=first_ok)
    finally:
        probes.stop()
        drill.add_timelines(probes.timelines())

    # Every restore: how long each member took, from the kubelet's start to a quorum read through
    # that member, and the kubelet's own log of it (in observations.injections).
    per_restore = {f"{role}:{node}": seconds for role, f in restores for node, seconds in f.restore_seconds.items()}
    drill.observe("member_restore_seconds", per_restore)
    measured_restores = list(per_restore.values())
    drill.measure("member_restore_seconds",
                  max(measured_restores) if measured_restores and None not in measured_restores else None,
                  detail="slowest of " + ", ".join(f"{k} {v:.1f} s" if v is not None else f"{k} not restored"
                                                   for k, v in per_restore.items())
                         + "; kubelet started again, then the member serves a quorum read"
                         + ("; asked by pod exec through the API servers (the one beside the member restarting "
                            "with it): the node agent's delays are in it" if cluster.node_channel == "agent" else ""))

    samples = {name: tl.samples(*window) for name, tl in probes.timelines().items()}
    drill.measure("quorum_lost_write_success_ratio", success_ratio(samples["api-write"]),
                  detail=f"{', '.join(stopped)} stopped; window from {settle:.0f} s after the stop to the restart")
    failed = [s for s in samples["api-write"] if not s.ok]
    drill.observe("quorum_lost_write_errors", dict(collections.Counter(s.labels.get("error", "?") for s in failed)))
    drill.observe("quorum_lost_write_error_latency_seconds",
                  {"p50": latency_percentile(failed, 50, ok_only=False), "max": max((s.latency_seconds or 0 for s in failed), default=None)})
    # Reported, not asserted: which reads the API server still served without quorum.
    drill.observe("quorum_lost_reads_served", {
        "consistent_list_success_ratio": success_ratio(samples["api-read-consistent"]),
        "watch_cache_list_success_ratio": success_ratio(samples["api-read-watch-cache"]),
    })
    drill.measure("quorum_lost_workload_http_success_ratio", success_ratio(samples["host-http"]))
    incluster_timelines = incluster.timelines(prefix="incluster/")
    incluster.delete()
    drill.add_timelines(incluster_timelines)
    inside = {name: success_ratio(tl.samples(*window)) for name, tl in incluster_timelines.items()}
    drill.observe("quorum_lost_incluster_success_ratios", inside)
    pod_ratios = [r for name, r in inside.items() if name.startswith("incluster/pod-")]
    drill.measure("quorum_lost_service_name_success_ratio", inside.get("incluster/name"),
                  detail="probe pod -> the Service by name (CoreDNS answers from its cache without the API)")
    drill.measure("quorum_lost_service_clusterip_success_ratio", inside.get("incluster/clusterip"))
    drill.measure("quorum_lost_pod_ip_http_success_ratio",
                  min(pod_ratios) if pod_ratios and None not in pod_ratios else None,
                  detail=f"lowest over {len(pod_ratios)} pods")

    healthy = wait_healthy(cluster, 240)
    drill.observe("cluster_healthy_after_seconds", healthy.became_true_at - restarted_at if healthy.ok else None)
    pods_after = pod_snapshot(cluster, ns, f"app={APP}")
    moved = [uid for uid, pod in pods_before.items() if uid not in pods_after or pods_after[uid]["node"] != pod["node"]]
    moved += [uid for uid in pods_after if uid not in pods_before]
    drill.measure("quorum_lost_pods_rescheduled", len(moved), detail=f"before {len(pods_before)}, after {len(pods_after)} pods")

    acknowledged = writes.acknowledged()
    lost = []
    for name, resource_version in acknowledged.items():
        try:
            cm = cluster.core.read_namespaced_config_map(name, ns, _request_timeout=10)
            if cm.metadata.resource_version != resource_version:
                lost.append(f"{name}: resourceVersion {cm.metadata.resource_version} != {resource_version}")
        except ApiException as exc:
            lost.append(f"{name}: HTTP {exc.status}")
    drill.measure("acknowledged_writes_lost", len(lost),
                  detail=f"{len(acknowledged)} acknowledged writes read back" + (f"; lost: {lost[:5]}" if lost else ""))
    added = restarts_between(kube_system_before, kube_system_snapshot(cluster))
    others = restarts_outside_control_plane(added, kube_system_before)
    drill.observe("kube_system_restarts_added", added)
    drill.measure("kube_system_restarts_outside_control_plane", sum(others.values()),
                  detail=f"outside the control-plane components: {others or 'none'}; theirs (the stopped members, "
                         "the kube-apiservers restarted with them, and controller-manager/scheduler instances that "
                         f"could not renew their leader lease without quorum): { {p: n for p, n in added.items() if p not in others} or 'none'}")
    members_after = etcd_members(cluster, control_plane[0])
    drill.observe("members_after", [vars(m) for m in members_after])
    drill.observe("leader_after", node_of.get(current_leader()))

    delete_namespace(cluster, ns)
    drill.expectations.assert_all()
