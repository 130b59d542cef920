"""The ``command`` probe on a real cluster: in a pod through the API server's exec, and on a node
through the cluster's node channel; a sample succeeds on exit 0 (and the expected output) and
fails, with the exit code, otherwise."""

from __future__ import annotations

import pytest

from harness.probes.command import CommandProbe

pytestmark = [pytest.mark.cluster]


def kube_proxy_pod(cluster) -> str:
    pods = cluster.core.list_namespaced_pod("kube-system", label_selector="k8s-app=kube-proxy",
                                            _request_timeout=10).items
    return next(p.metadata.name for p in pods if p.status.phase == "Running")


def test_a_command_in_a_pod_passes_on_exit_0_and_fails_on_its_exit_code_or_missing_output(kdrill_cluster):
    pod = kube_proxy_pod(kdrill_cluster)
    where = {"pod": pod, "namespace": "kube-system"}
    ok = CommandProbe("version", kdrill_cluster, ["kube-proxy", "--version"], where,
                      stdout_contains="v1.35").sample()
    assert ok.ok and ok.labels["exit"] == "0" and "v1.35" in ok.detail, ok
    lacking = CommandProbe("version", kdrill_cluster, ["kube-proxy", "--version"], where,
                           stdout_contains="no such text").sample()
    assert not lacking.ok and "output lacks" in lacking.detail
    failing = CommandProbe("false", kdrill_cluster, ["kube-proxy", "--no-such-flag"], where).sample()
    assert not failing.ok and failing.labels["exit"] not in ("0", "error", "timeout"), failing
    missing = CommandProbe("gone", kdrill_cluster, ["true"], {"pod": "no-such-pod", "namespace": "kube-system"}).sample()
    assert not missing.ok and missing.labels["exit"] == "error"


@pytest.mark.node_access
def test_a_command_on_a_node_by_role_runs_on_that_node_and_times_out_as_a_failed_sample(kdrill_cluster):
    probe = CommandProbe("crictl", kdrill_cluster, ["crictl", "ps", "--name", "^etcd$", "-q"],
                         {"node_role": "control-plane"})
    sample = probe.sample()
    assert sample.ok and sample.labels["node"] == sorted(kdrill_cluster.nodes_by_role["control-plane"])[0]
    assert sample.detail.startswith("exit 0: ") and len(sample.detail) > len("exit 0: ")  # etcd's container ID
    slow = CommandProbe("slow", kdrill_cluster, ["sleep", "5"], {"node_role": "worker"}, timeout_seconds=1).sample()
    assert not slow.ok and slow.labels["exit"] == "timeout" and slow.latency_seconds < 4
