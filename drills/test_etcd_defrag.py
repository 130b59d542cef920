"""Drill: defragment one etcd member while the cluster is in use (scenarios/etcd-defrag.yaml).

The drill writes a bounded fill (ConfigMaps of 900 KiB) so the member has a database worth
rebuilding, then defragments one member (a follower by default) with ``etcdctl defrag``. From the
member's own node it polls the member's local health endpoint and the kube-apiserver beside it
(which talks only to that member); from another control-plane node, another member's health;
from the host, API writes through the load balancer. The claim: the defragmented member serves
nothing while its database is rebuilt, so its co-located API server stalls with it, while the
other members, and so the cluster's quorum, carry on.

Why a Python drill: its probes run on control-plane nodes (the member's local endpoints), which
no data-only probe does yet.
"""

from __future__ import annotations

import json
import time

import pytest
from kubernetes import client

from harness.components.etcd import db_size, leader_node
from harness.core.waiting import hold
from harness.engine.measures import longest_unanswered_seconds, success_ratio
from harness.faults.etcd_defrag import EtcdDefrag
from harness.kube.workloads import FILL_OBJECT_KIB, fill_configmaps
from harness.probes import Probes
from harness.probes.api import ApiWriteProbe
from harness.probes.node_http import LOCAL_APISERVER_CLIENT, NodeHttpProbe

# Node probes ask every 50 ms: a defragmentation measured 0.36 to 1.9 s must be resolved well.
NODE_PROBE_INTERVAL_SECONDS = 0.05
# kubeadm: etcd's health and metrics on plain HTTP, on the node's loopback only.
MEMBER_HEALTH_URL = "http://127.0.0.1:2381/health"


def _target_node(cluster, control_plane: list[str], role: str) -> tuple[str, str]:
    """(node of the member with ``role``, the leader's node) as etcd's members report it. Raises
    LookupError when they do not agree on one leader."""
    leader = leader_node(cluster, control_plane)
    return (leader if role == "leader" else sorted(n for n in control_plane if n != leader)[0]), leader


@pytest.mark.cluster
@pytest.mark.destructive
@pytest.mark.node_access
@pytest.mark.scenario("etcd-defrag")
def test_etcd_defrag(drill):
    cluster, ns, p = drill.cluster, drill.namespace, drill.params
    control_plane = drill.topology.control_plane

    with drill.phase("setup"):
        drill.fresh_namespace()
        node, leader = _target_node(cluster, control_plane, p["target_role"])
        other = next(n for n in control_plane if n != node)
        started = time.time()
        objects, _ = fill_configmaps(cluster, ns, int(p["fill_megabytes"]))
        seconds = time.time() - started
        cluster.core.create_namespaced_config_map(ns, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="read-me"), data={"k": "v"}), _request_timeout=10)
        before = db_size(cluster, node)
        drill.observe("target", {"node": node, "role": p["target_role"], "leader_node": leader, "other": other})
        drill.observe("fill", {"objects": objects, "object_kib": FILL_OBJECT_KIB, "seconds": round(seconds, 2),
                               **{f"{k}_before": v for k, v in before.items()}})

    read_url = f"https://127.0.0.1:6443/api/v1/namespaces/{ns}/configmaps/read-me"
    member = NodeHttpProbe("member-health", cluster, node, MEMBER_HEALTH_URL, max_seconds=300,
                           interval_seconds=NODE_PROBE_INTERVAL_SECONDS)
    apiserver = NodeHttpProbe("colocated-apiserver-read", cluster, node, read_url, curl_args=LOCAL_APISERVER_CLIENT,
                              max_seconds=300, interval_seconds=NODE_PROBE_INTERVAL_SECONDS)
    # One new ConfigMap per request (generateName), created through that same API server.
    body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "node-w-"},
                       "data": {"k": "v"}})
    apiserver_write = NodeHttpProbe("colocated-apiserver-write", cluster, node,
                                    f"https://127.0.0.1:6443/api/v1/namespaces/{ns}/configmaps",
                                    curl_args=[*LOCAL_APISERVER_CLIENT, "-X", "POST", "-H",
                                               "Content-Type: application/json", "-d", body], ok_codes=("201",), max_seconds=300,
                                    interval_seconds=NODE_PROBE_INTERVAL_SECONDS)
    other_member = NodeHttpProbe("other-member-health", cluster, other, MEMBER_HEALTH_URL, max_seconds=300,
                                 interval_seconds=NODE_PROBE_INTERVAL_SECONDS)
    writes = ApiWriteProbe("api-write", cluster, ns, prefix="w", interval_seconds=drill.interval_seconds,
                           timeout_seconds=5.0, max_seconds=300)
    probes = Probes(member, apiserver, apiserver_write, other_member, writes)
    fault = EtcdDefrag(cluster, node)
    probes.start()
    try:
        with drill.phase("baseline"):
            hold(float(p["baseline_seconds"]))  # the baseline window's length
        with drill.inject(fault):
            pass  # inject returns when etcdctl defrag does: the window is the defragmentation
        with drill.phase("after"):
            hold(float(p["after_seconds"]))
    finally:
        timelines = probes.stop()
    drill.add_timelines(timelines)
    for probe in (member, apiserver, apiserver_write, other_member):
        if probe.error:
            drill.observe(f"probe_error_{probe.name}", probe.error)

    start, end = fault.injected_at, fault.injected_at + (fault.wall_seconds or 0.0)
    took = fault.took_seconds
    after = db_size(cluster, node)
    drill.observe("defrag", {**fault.evidence(), **{f"{k}_after": v for k, v in after.items()}})
    drill.measure("defrag_seconds", took, detail=f"etcdctl defrag on {node}: {fault.output[-120:]}")
    baseline_start = start - float(p["baseline_seconds"])
    drill.measure("member_health_baseline_ratio", success_ratio(timelines["member-health"].samples(), baseline_start, start),
                  detail=f"{MEMBER_HEALTH_URL} on {node}, every {NODE_PROBE_INTERVAL_SECONDS} s")
    for name, key in (("member-health", "member_stall_share_of_defrag"),
                      ("colocated-apiserver-read", "colocated_apiserver_stall_share_of_defrag"),
                      ("colocated-apiserver-write", "colocated_apiserver_write_stall_share_of_defrag")):
        stall = longest_unanswered_seconds(timelines[name].samples(), start, end)
        drill.observe(f"{key.replace('_share_of_defrag', '')}_seconds", stall)
        drill.measure(key, stall / took if stall is not None and took else None,
                      detail=f"longest time without an answer from {name} on {node}: "
                             f"{'-' if stall is None else f'{stall:.2f}'} s, defragmentation {took or 0:.2f} s")
    other_stall = longest_unanswered_seconds(timelines["other-member-health"].samples(), start, end)
    drill.measure("other_member_longest_unanswered_seconds", other_stall,
                  detail=f"{MEMBER_HEALTH_URL} on {other} during the defragmentation")
    write_samples = timelines["api-write"].samples()
    drill.measure("write_success_ratio_during_defrag", success_ratio(write_samples, start - 1.0, end + 1.0),
                  detail="ConfigMap creations through the load balancer from the host, from 1 s before to 1 s "
                         "after the defragmentation (5 s timeout each; one kept-alive connection, so one API "
                         "server, which may or may not be the stalled one)")
    drill.measure("write_longest_unanswered_seconds", longest_unanswered_seconds(write_samples, start, end),
                  detail="the longest time without an acknowledged write through the load balancer")
    drill.expectations.assert_all()
