"""Drill: a flood of LIST requests from one ServiceAccount (scenarios/api-overload.yaml).

API Priority and Fairness classifies every request by FlowSchema into a priority level with its
own share of each API server's concurrency, and queues or rejects (HTTP 429) what exceeds it.
A ServiceAccount's flood lands in ``workload-low`` with the stock configuration; kubelets' lease
renewals (``system-nodes`` -> ``system-node-high``) and system:masters (``exempt``) are in other
levels, so they keep being served while the flood is queued or rejected. The drill floods from a
pod (bounded in requests and seconds), and measures what the flood got (codes, latencies, the
priority level the API server named in its response headers), the kubelets' lease renewals, node
readiness and an exempt client's reads from the host.

Why a Python drill: the flood's own account (its codes and APF headers, printed by the pod) is
read from the pod's log, which no data-only probe does yet.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from harness.core.waiting import hold, wait_until
from harness.engine.measures import success_ratio
from harness.engine.vitals import nodes_ready_in
from harness.faults.apf_flood import NAME, POD, ApfFlood
from harness.probes import Probes
from harness.probes.api import ApiReadProbe
from harness.probes.nodes import NodeLeaseProbe, NodeReadyProbe, oldest_lease_age_seconds

# A deadline, not a measurement: the flood pod scheduled, started (image already on the node)
# and finished its bounded flood.
POD_START_ALLOWANCE_SECONDS = 90


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@pytest.mark.cluster
@pytest.mark.destructive
@pytest.mark.scenario("api-overload")
def test_api_overload(drill):
    cluster, ns, p = drill.cluster, drill.namespace, drill.params
    flowcontrol = client.FlowcontrolApiserverV1Api(cluster.api)

    with drill.phase("setup"):
        drill.fresh_namespace()
        for i in range(int(p["configmaps"])):  # what each LIST returns: bounded by the parameter's maximum
            cluster.core.create_namespaced_config_map(ns, client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=f"listed-{i:04d}"), data={"pad": "x" * 1024}), _request_timeout=10)

    reads = ApiReadProbe("system-read", cluster, ns, interval_seconds=drill.interval_seconds, max_seconds=600)
    nodes = NodeReadyProbe("nodes", cluster, interval_seconds=1.0, max_seconds=600)
    leases = NodeLeaseProbe("node-leases", cluster, interval_seconds=1.0, max_seconds=600)
    probes = Probes(reads, nodes, leases)
    fault = ApfFlood(cluster, ns, confine=p["confine"], workers=p["workers"], flood_seconds=p["flood_seconds"],
                     flood_max_requests=p["flood_max_requests"])
    result = None
    probes.start()
    try:
        with drill.phase("baseline"):
            hold(float(p["baseline_seconds"]))  # the baseline window's length
        with drill.inject(fault):
            with drill.phase("flood"):
                def finished():
                    phase = cluster.core.read_namespaced_pod(POD, ns, _request_timeout=5).status.phase
                    return phase if phase in ("Succeeded", "Failed") else None

                ended = wait_until(finished, float(p["flood_seconds"]) + POD_START_ALLOWANCE_SECONDS,
                                   interval_seconds=1.0, description="flood pod finished")
                drill.observe("flood_pod_phase", ended.value if ended.ok else "not finished")
                result = fault.result()
                # The priority levels and flow schemas by UID, as the response headers name them.
                levels = {pl.metadata.uid: pl.metadata.name for pl in
                          flowcontrol.list_priority_level_configuration(_request_timeout=10).items}
                schemas = {fs.metadata.uid: fs.metadata.name for fs in
                           flowcontrol.list_flow_schema(_request_timeout=10).items}
        with drill.phase("after"):
            hold(float(p["after_seconds"]))
    finally:
        timelines = probes.stop()
    drill.add_timelines(timelines)

    if result is None:  # every expectation stays unmeasured: an error, never a pass
        for spec in drill.expectations.specs():
            drill.expectations.error(spec.name, "the flood pod printed no account of its requests")
        drill.expectations.assert_all()

    start, end = result["started_at"], result["ended_at"]
    codes = result["codes"]
    total = sum(codes.values())
    by_level = {levels.get(uid, uid or "no header"): n for uid, n in result["priority_level_uids"].items()}
    by_schema = {schemas.get(uid, uid or "no header"): n for uid, n in result["flow_schema_uids"].items()}
    latencies = result["latencies_seconds"]
    drill.observe("flood", {"requests": total, "codes": codes, "priority_levels": by_level, "flow_schemas": by_schema,
                            "seconds": round(end - start, 2), "latency_p50_seconds": _percentile(latencies, 0.5),
                            "latency_p99_seconds": _percentile(latencies, 0.99), "max_latency_seconds": max(latencies, default=None)})
    drill.measure("flood_requests", total, detail=f"{total} LISTs in {end - start:.1f} s from {p['workers']} loops: {codes}")
    level = NAME if p["confine"] else "workload-low"
    drill.measure("flood_classified_into_expected_level", by_level.get(level, 0) == total and total > 0,
                  detail=f"priority levels named by the responses: {by_level}; flow schemas: {by_schema}")
    rejected = codes.get("429", 0)
    drill.observe("flood_rejected_share", rejected / total if total else None)
    if "flood_rejected_429" in drill.expectations:
        drill.measure("flood_rejected_429", rejected, detail=f"{rejected} of {total} answered 429 Too Many Requests")
    drill.measure("system_read_success_ratio_during_flood", success_ratio(timelines["system-read"].samples(), start, end),
                  detail="consistent LISTs from the host as the kind admin (system:masters: the exempt level)")
    oldest = oldest_lease_age_seconds(timelines["node-leases"], start, end + 10.0)
    drill.measure("oldest_node_lease_age_seconds", oldest,
                  detail="the oldest renewal any node's Lease showed during the flood and 10 s after (kubelets renew "
                         "every 10 s; a node is marked NotReady 50 s after its last)")
    drill.measure("nodes_ready_during_flood", nodes_ready_in(timelines["nodes"].samples(), [(start, end + 10.0)]),
                  detail="share of node samples with every node Ready, during the flood and 10 s after")
    drill.observe("flood_window", {"started_at": start, "ended_at": end, "pod_started_after_injection_seconds":
                                   round(start - fault.injected_at, 2)})
    drill.expectations.assert_all()
