"""Drill: one etcd member's disk turns slow, a follower's and then the leader's
(scenarios/etcd-slow-disk.yaml).

The member's container is held to a few write requests per second on its disk
(:mod:`harness.faults.etcd_slow_disk`), so each write-ahead-log append waits on a slow
``fdatasync``. On every control-plane node two loops run on the node itself: writes (a new
ConfigMap each) through the kube-apiserver beside the member, which talks only to that member, and
reads of the member's own metrics (leadership, leader changes seen, heartbeats sent late, WAL fsync
time). The claims: with a slow follower the leader and the other follower still make a quorum, so
writes through the other API servers keep their latency and the leader stays; with a slow leader
writes slow down everywhere until its heartbeats come later than the election timeout and another
member takes over, after which the others' writes are as fast as before.

Why a Python drill: two faults in turn, on members chosen by their role at that moment, and probes
on every control-plane node, which no data-only probe does.
"""

from __future__ import annotations

import json
import statistics

import pytest

from harness.components.etcd import leader_node
from harness.core.waiting import hold
from harness.engine.measures import longest_unanswered_seconds
from harness.faults.etcd_slow_disk import EtcdSlowDisk
from harness.probes import Probes
from harness.probes.node_http import LOCAL_APISERVER_CLIENT, NodeHttpProbe, NodeMetricsProbe
from harness.probes.pods import kube_system_snapshot, restarts_between, restarts_outside_control_plane

# kubeadm: etcd's metrics on plain HTTP, on the node's loopback only.
METRICS_URL = "http://127.0.0.1:2381/metrics"
IS_LEADER, CHANGES = "etcd_server_is_leader", "etcd_server_leader_changes_seen_total"
LATE_HEARTBEATS = "etcd_server_heartbeat_send_failures_total"
FSYNC_SUM, FSYNC_COUNT = "etcd_disk_wal_fsync_duration_seconds_sum", "etcd_disk_wal_fsync_duration_seconds_count"
METRICS = [IS_LEADER, CHANGES, LATE_HEARTBEATS, FSYNC_SUM, FSYNC_COUNT]
WRITE_INTERVAL_SECONDS, METRICS_INTERVAL_SECONDS = 0.25, 0.5
# After the election, the others' writes are judged from this long after it (the API servers'
# connections to the new leader settle).
AFTER_ELECTION_SECONDS = 2.0
# A median needs this many writes, this share of them acknowledged; a probe's reads cover a window
# when its last one is at most this long before the window's end.
MIN_WRITES, ACKNOWLEDGED_SHARE, COVER_SLACK_SECONDS = 5, 0.8, 1.5
# A counter's growth may run this long past its window: the first metrics read after it can wait on
# one slow read (every 0.5 s; the slowest seen took 3.7 s, on a slowed member).
OVERSHOOT_SECONDS = 5.0


def _probes(cluster, ns: str, nodes: list[str], seconds: float) -> tuple[dict, dict]:
    """(node -> write loop through its own API server, node -> its member's metrics loop)."""
    body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "w-"}, "data": {"k": "v"}})
    url = f"https://127.0.0.1:6443/api/v1/namespaces/{ns}/configmaps"
    writes = {n: NodeHttpProbe(f"writes-via-{n}", cluster, n, url, ok_codes=("201",), max_seconds=seconds,
                               curl_args=[*LOCAL_APISERVER_CLIENT, "-X", "POST", "-H", "Content-Type: application/json",
                                          "-d", body], interval_seconds=WRITE_INTERVAL_SECONDS)
              for n in nodes}
    metrics = {n: NodeMetricsProbe(f"etcd-metrics-{n}", cluster, n, METRICS_URL, METRICS, max_seconds=seconds,
                                   interval_seconds=METRICS_INTERVAL_SECONDS) for n in nodes}
    return writes, metrics


def _median_latency(probes: list[NodeHttpProbe], start: float, end: float) -> float | None:
    """Median latency (seconds) of the writes started in [start, end) through ``probes``; None
    unless at least MIN_WRITES were sent and ACKNOWLEDGED_SHARE of them acknowledged (a median of
    the few that got through would hide the rest)."""
    sent = [s for p in probes for s in p.timeline.samples() if start <= s.t < end and s.latency_seconds is not None]
    acknowledged = [s.latency_seconds for s in sent if s.ok]
    if len(sent) < MIN_WRITES or len(acknowledged) < ACKNOWLEDGED_SHARE * len(sent):
        return None
    return statistics.median(acknowledged)


def _ratio(value: float | None, base: float | None) -> float | None:
    return value / base if value is not None and base else None


def _counter(probe: NodeMetricsProbe, metric: str, start: float, end: float) -> list[float] | None:
    """A counter's reads bracketing [start, end): its last read answered by ``start`` (or its first,
    when the probe began inside the window), every read sent after it before ``end``, and the first
    read sent at or after ``end``. A read's value is the member's state at some moment while it ran,
    so only these bracket the window: their growth covers it and at most OVERSHOOT_SECONDS after it.
    None when no read brackets the end that closely, or the counter went down (a restarted member)."""
    reads = probe.reads(metric)
    before = [r for r in reads if r[1] <= start] or [r for r in reads if r[0] < end][:1]
    after = next((r for r in reads if r[0] >= end), None)
    if not before or after is None or after[0] > end + OVERSHOOT_SECONDS:
        return None
    span = [before[-1]] + [r for r in reads if before[-1][0] < r[0] < end] + [after]
    if any(b[2] < a[2] for a, b in zip(span, span[1:])):
        return None
    return [value for _, _, value in span]


def _delta(probe: NodeMetricsProbe, metric: str, start: float, end: float) -> float | None:
    """How much a counter grew over [start, end) (:func:`_counter`), or None."""
    span = _counter(probe, metric, start, end)
    return span[-1] - span[0] if span else None


def _longest_unanswered(probes: list[NodeHttpProbe], start: float, end: float) -> float | None:
    """The longest time in [start, end) without a write acknowledged through any of ``probes``;
    None when their writes stopped before the window's end (a loop that ended says nothing)."""
    samples = [s for p in probes for s in p.timeline.samples()]
    if not samples or max(s.t + (s.latency_seconds or 0.0) for s in samples) < end - COVER_SLACK_SECONDS:
        return None
    return longest_unanswered_seconds(samples, start, end)


def _worked(probes: list[NodeHttpProbe], base: tuple[float, float]) -> bool:
    """Whether writes through ``probes`` were acknowledged in the baseline (so a stall later is the fault's)."""
    return _median_latency(probes, *base) is not None


def _fsync_mean(probe: NodeMetricsProbe, start: float, end: float) -> float | None:
    """Mean WAL fdatasync time (seconds) of the member in [start, end), from etcd's own histogram."""
    total, count = _delta(probe, FSYNC_SUM, start, end), _delta(probe, FSYNC_COUNT, start, end)
    return total / count if total is not None and count else None


def _first_other_leader(metrics: dict, slow: str, start: float, end: float) -> float | None:
    """When another member first became leader in [start, end) (its read went from 0 to 1; epoch
    seconds), provided ``slow`` led at ``start`` (its last read before it was 1); else None."""
    led = [v for t, v in metrics[slow].values(IS_LEADER) if t < start]
    if not led or led[-1] != 1:
        return None
    became = []
    for node, probe in metrics.items():
        reads = probe.values(IS_LEADER) if node != slow else []
        became += [b[0] for a, b in zip(reads, reads[1:]) if start <= b[0] < end and a[1] == 0 and b[1] == 1]
    return min(became) if became else None


def _most_changes(metrics: dict, start: float, end: float) -> float | None:
    """The most leader changes any member saw in [start, end) (etcd counts a leader it lost and
    found again as a change too); None unless every member's reads cover the window."""
    seen = [_delta(p, CHANGES, start, end) for p in metrics.values()]
    return max(seen) if seen and None not in seen else None


def _slow_member(drill, node: str, role: str) -> tuple[float, float]:
    """Slow ``node``'s member for the scenario's window, then settle; its window (epoch seconds)."""
    p = drill.params
    fault = EtcdSlowDisk(drill.cluster, node, int(p["write_iops"]))
    with drill.inject(fault):
        with drill.phase(f"slow-{role}", seconds=float(p["slow_seconds"])):
            hold(float(p["slow_seconds"]))  # the window's length, set by the scenario
    window = (fault.injected_at, fault.revert_started_at or fault.reverted_at)
    with drill.phase(f"after-slow-{role}", seconds=float(p["settle_seconds"])):
        hold(float(p["settle_seconds"]))
    return window


@pytest.mark.cluster
@pytest.mark.destructive
@pytest.mark.node_access
@pytest.mark.scenario("etcd-slow-disk")
def test_etcd_slow_disk(drill):
    cluster, p = drill.cluster, drill.params
    control_plane = sorted(drill.topology.control_plane)
    with drill.phase("setup"):
        assert len(control_plane) >= 3, (f"etcd-slow-disk needs 3 or more control-plane nodes, so that a quorum "
                                         f"stands without the slowed member; {cluster.name} has {control_plane}")
        ns = drill.fresh_namespace()
        leader = leader_node(cluster, control_plane)
        follower = next(n for n in control_plane if n != leader)
        kube_system_before = kube_system_snapshot(cluster)
    seconds = float(p["baseline_seconds"]) + 2 * (float(p["slow_seconds"]) + float(p["settle_seconds"])) + 120
    writes, metrics = _probes(cluster, ns, control_plane, seconds)
    probes = Probes(*writes.values(), *metrics.values())
    probes.start()
    try:
        with drill.phase("baseline", seconds=float(p["baseline_seconds"])) as baseline:
            hold(float(p["baseline_seconds"]))  # the baseline window's length
        slow_follower = _slow_member(drill, follower, "follower")
        leader_now = leader_node(cluster, control_plane)  # as it is now, whatever the first window did
        slow_leader = _slow_member(drill, leader_now, "leader")
    finally:
        drill.add_timelines(probes.stop())
    for probe in (*writes.values(), *metrics.values()):
        if probe.error:
            drill.observe(f"probe_error_{probe.name}", probe.error)
    drill.observe("members", {"leader_at_start": leader, "slow_follower": follower, "slow_leader": leader_now})
    _judge_follower(drill, writes, metrics, follower, (baseline["started_at"], slow_follower[0]), slow_follower)
    _judge_leader(drill, writes, metrics, leader_now, (baseline["started_at"], slow_follower[0]), slow_leader)
    _judge_restarts(drill, kube_system_before)
    drill.expectations.assert_all()


def _judge_restarts(drill, before: dict) -> None:
    """Restarts in kube-system across the drill, and why each control-plane component restarted
    (the last lines its previous container logged)."""
    added = restarts_between(before, kube_system_snapshot(drill.cluster))
    others = restarts_outside_control_plane(added, before)
    why = {}
    for pod in (p for p in added if p not in others):
        try:
            log = drill.cluster.core.read_namespaced_pod_log(pod, "kube-system", previous=True, tail_lines=3,
                                                             _request_timeout=10)
        except Exception as exc:  # noqa: BLE001 - recorded: the restart is counted either way
            log = f"previous log not read: {exc}"[:200]
        why[pod] = [line[-200:] for line in log.splitlines()]
    drill.observe("control_plane_restarts", {"added": {p: n for p, n in added.items() if p not in others},
                                             "last_logged": why})
    drill.measure("kube_system_restarts_outside_control_plane", sum(others.values()),
                  detail=f"outside the control-plane components: {others or 'none'}")


def _judge_follower(drill, writes: dict, metrics: dict, slow: str, base: tuple, window: tuple) -> None:
    others = [w for n, w in writes.items() if n != slow]
    start, end = window
    drill.measure("slow_follower_wal_fsync_mean_seconds", _fsync_mean(metrics[slow], start, end),
                  detail=f"{slow}'s member, etcd_disk_wal_fsync_duration_seconds sum/count over the window; "
                         f"before it: {_fsync_mean(metrics[slow], *base)}")
    settled = end + float(drill.params["settle_seconds"])
    drill.measure("slow_follower_leader_changes_seen", _most_changes(metrics, start, settled),
                  detail="the most leader changes any member counted (etcd_server_leader_changes_seen_total), "
                         "from the slowing to the end of the settle after it")
    base_others, base_own = _median_latency(others, *base), _median_latency([writes[slow]], *base)
    drill.measure("slow_follower_others_write_median_factor", _ratio(_median_latency(others, start, end), base_others),
                  detail=f"median write latency through the other two API servers, against the baseline's "
                         f"{base_others} s")
    drill.measure("slow_follower_others_longest_unanswered_seconds", _longest_unanswered(others, start, end),
                  detail=f"the longest time without a write acknowledged through either other API server "
                         f"(baseline: {_longest_unanswered(others, *base)} s)")
    own = [s for s in writes[slow].timeline.samples() if start <= s.t < end]
    own_stall = _longest_unanswered([writes[slow]], start, end) if _worked([writes[slow]], base) else None
    drill.measure("slow_follower_own_longest_unanswered_seconds", own_stall,
                  detail=f"the longest time without a write acknowledged through {slow}'s own API server "
                         f"(baseline: {_longest_unanswered([writes[slow]], *base)} s); {len(own)} sent, "
                         f"{sum(s.ok for s in own)} acknowledged, median acknowledged latency "
                         f"{_median_latency([writes[slow]], start, end)} s against the baseline's {base_own} s; "
                         f"failed: {sorted({s.detail for s in own if not s.ok}) or 'none'} (curl gives up after 5 s)")


def _judge_leader(drill, writes: dict, metrics: dict, slow: str, base: tuple, window: tuple) -> None:
    others = [w for n, w in writes.items() if n != slow]
    start, end = window
    drill.measure("slow_leader_wal_fsync_mean_seconds", _fsync_mean(metrics[slow], start, end),
                  detail=f"{slow}'s member, over the window")
    elected = _first_other_leader(metrics, slow, start, end)
    drill.measure("slow_leader_replaced_seconds", elected - start if elected else None,
                  detail="from the slowing to the first read of another member's etcd_server_is_leader = 1 "
                         f"(read every {METRICS_INTERVAL_SECONDS} s)", became_true_at=elected)
    drill.observe("slow_leader_late_heartbeats", _delta(metrics[slow], LATE_HEARTBEATS, start, end))
    drill.measure("slow_leader_leader_changes_seen", _most_changes(metrics, start, end),
                  detail="the most leader changes any member counted over the window")
    stall = _longest_unanswered(others, start, end) if _worked(others, base) else None
    drill.measure("slow_leader_others_longest_unanswered_seconds", stall,
                  detail=f"the longest time without a write acknowledged through either other API server "
                         f"(baseline: {_longest_unanswered(others, *base)} s; curl gives up after 5 s)")
    base_others = _median_latency(others, *base)
    after = _median_latency(others, elected + AFTER_ELECTION_SECONDS, end) if elected else None
    drill.measure("slow_leader_others_write_median_factor_after_election", _ratio(after, base_others),
                  detail=f"median write latency through the other API servers from {AFTER_ELECTION_SECONDS} s "
                         f"after the election to the end of the window ({after} s), against the baseline's "
                         f"{base_others} s")
