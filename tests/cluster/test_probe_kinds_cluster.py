"""Probe kinds whose only catalogue drills are long (``api-write``: webhook-on-pod-delete;
``metric``: apiservice-unavailable; ``events`` and ``image-pulls``: the registry drills), built
from a scenario's spec through their entry points and sampled on the real cluster: each shows a
success and a failure as the cluster reports them, and the measures the presubmit tier credits
to this file (``max_value``, ``first_failure_seconds``) are computed over those real samples.
The drills run in the full tier (harness/plugin/tiers.py, ``EXERCISED_BY_CLUSTER_TESTS``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kubernetes import client

from harness.components.registry import REGISTRY_PORT, container_name, image_tag, registry_host
from harness.core.ledger import Ledger
from harness.core.waiting import wait_until_or_raise
from harness.engine.measures import measure
from harness.faults import injected
from harness.kube.images import Build
from harness.kube.objects import Ref
from harness.probes import ProbeContext, probe_types
from harness.probes.pods import pod_events
from harness.scaffolding.drill_namespace import DrillNamespace
from harness.scaffolding.drill_registry import DrillRegistry

pytestmark = [pytest.mark.cluster]

NAMESPACE = "kdrill-probe-kinds"
# How long a pod's image pull from the registry beside the nodes may take to be reported
# (seconds): a pause-sized image pulls in under 2 s here; the rest is the kubelet's event.
PULL_REPORTED_SECONDS = 60


def context(cluster, namespace: str = NAMESPACE) -> ProbeContext:
    return ProbeContext(cluster=cluster, namespace=namespace, interval_seconds=0.2, max_seconds=60,
                        ref=lambda spec: Ref(spec["kind"], spec["name"], spec.get("namespace", namespace)))


def build(spec: dict, cluster, namespace: str = NAMESPACE):
    return probe_types()[spec["kind"]].for_scenario(spec, context(cluster, namespace))


def sampled(probe, count: int):
    """Start ``probe``, wait until it has ``count`` samples, stop it: its samples."""
    probe.start()
    try:
        wait_until_or_raise(lambda: len(probe.timeline.samples()) >= count, 30, 0.2,
                            f"{probe.name}: {count} samples")
    finally:
        probe.stop()
    return probe.timeline.samples()


@pytest.fixture
def drill_namespace(kdrill_cluster, tmp_path: Path):
    ledger = Ledger(tmp_path / "ledger")
    with injected(DrillNamespace(kdrill_cluster, NAMESPACE), ledger):
        yield ledger
    assert ledger.entries() == []


def test_api_write_updates_its_configmap_and_fails_where_the_api_server_refuses(kdrill_cluster, drill_namespace):
    written = sampled(build({"name": "w", "kind": "api-write"}, kdrill_cluster), 3)
    assert all(s.ok for s in written), written
    stored = kdrill_cluster.core.read_namespaced_config_map("kdrill-write-w", NAMESPACE, _request_timeout=10)
    assert int(stored.data["sequence"]) >= 3  # each sample an UPDATE of the one object
    refused = sampled(build({"name": "w", "kind": "api-write"}, kdrill_cluster, "kdrill-no-such-namespace"), 2)
    assert not any(s.ok for s in refused) and refused[0].labels["error"], refused
    both = sorted(written + refused, key=lambda s: s.t)
    start = written[0].t
    assert measure("first_failure_seconds", both, start, both[-1].t + 1) == pytest.approx(refused[0].t - start)


def test_a_metric_read_from_the_api_servers_holds_or_breaks_its_bound_and_max_value_is_the_largest_read(
        kdrill_cluster):
    holds = sampled(build({"name": "up", "kind": "metric", "metric": "process_start_time_seconds",
                           "ok_when": {"op": ">", "value": 0}, "interval_seconds": 0.5}, kdrill_cluster), 3)
    values = [float(s.labels["value"]) for s in holds]
    assert all(s.ok for s in holds) and all(0 < v < time.time() for v in values), holds
    assert measure("max_value", holds, holds[0].t, holds[-1].t + 1) == max(values)
    broken = sampled(build({"name": "down", "kind": "metric", "metric": "process_start_time_seconds",
                            "ok_when": {"op": "<", "value": 0}, "interval_seconds": 0.5}, kdrill_cluster), 2)
    assert not any(s.ok for s in broken) and all("value" in s.labels for s in broken), broken
    absent = sampled(build({"name": "none", "kind": "metric", "metric": "process_start_time_seconds",
                            "labels": {"kdrill": "no-such-series"}, "ok_when": {"op": ">", "value": 0},
                            "interval_seconds": 0.5}, kdrill_cluster), 1)
    assert absent[0].labels["error"] == "no series" and measure("max_value", absent, absent[0].t, time.time()) is None


def pod(name: str, image: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image=image, image_pull_policy="Always")],
                              termination_grace_period_seconds=0))


@pytest.mark.node_access
def test_image_pulls_and_events_read_the_kubelets_own_account_of_a_pull_and_of_a_failed_one(
        kdrill_cluster, drill_namespace):
    nodes = kdrill_cluster.nodes_by_role.get("control-plane", []) + kdrill_cluster.nodes_by_role.get("worker", [])
    host = registry_host("probes")
    with injected(DrillRegistry(kdrill_cluster, container_name(kdrill_cluster.name, "probes"), nodes, host),
                  drill_namespace) as registry:
        tag = image_tag(str(int(time.time())))
        registry.registry.push_unique_image("kdrill-drill/pulls", tag, marker=f"probe-kinds/{tag}",
                                            base=Build().tags["pause"])
        kdrill_cluster.core.create_namespaced_pod(NAMESPACE, pod("pulls", f"{host}/kdrill-drill/pulls:{tag}"))
        kdrill_cluster.core.create_namespaced_pod(NAMESPACE, pod("absent", f"{host}/kdrill-drill/absent:{tag}"))
        pulls = build({"name": "pulls", "kind": "image-pulls", "object": {"kind": "Pod", "name": "pulls"}},
                      kdrill_cluster)
        wait_until_or_raise(lambda: any(s.ok for s in pulls.samples(pod_events_of(kdrill_cluster, "pulls"))),
                            PULL_REPORTED_SECONDS, 1, "the kubelet's Pulled event")
        pulled = pulls.stop().samples()
        assert len(pulled) == 1 and pulled[0].ok and pulled[0].latency_seconds >= 0, pulled
        assert f"{host}/kdrill-drill/pulls:{tag}" in pulled[0].detail
        failing = build({"name": "absent", "kind": "image-pulls", "object": {"kind": "Pod", "name": "absent"}},
                        kdrill_cluster)
        wait_until_or_raise(lambda: failing.samples(pod_events_of(kdrill_cluster, "absent")),
                            PULL_REPORTED_SECONDS, 1, "the kubelet's Failed event")
        assert all(not s.ok and "Failed to pull image" in s.detail for s in failing.stop().samples())
        pulling = build({"name": "asked", "kind": "events", "object": {"kind": "Pod", "name": "absent"},
                         "reason": "Pulling"}, kdrill_cluster).stop().samples()
        assert pulling and all(s.ok and f":{REGISTRY_PORT}/kdrill-drill/absent" in s.detail for s in pulling)
        assert pulling[0].t <= failing.timeline.samples()[0].t + 1  # asked before it failed (whole seconds)
        # Gone before the registry's revert removes what the nodes pulled (an image in use stays).
        kdrill_cluster.core.delete_collection_namespaced_pod(NAMESPACE, grace_period_seconds=0)
        wait_until_or_raise(lambda: not kdrill_cluster.core.list_namespaced_pod(NAMESPACE, _request_timeout=10).items,
                            60, 1, "the test's pods deleted")


def pod_events_of(cluster, name: str) -> list[dict]:
    return pod_events(cluster, NAMESPACE, name)
