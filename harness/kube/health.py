"""Cluster health checks that drills wait on after a revert, so the next drill starts from a
healthy cluster: every node Ready, every kube-system pod Running and Ready."""

from __future__ import annotations

from harness.core.waiting import WaitResult, wait_until
from harness.kube.providers import Cluster


def unhealthy(cluster: Cluster) -> list[str]:
    """What is not healthy right now (empty when healthy). Raises on API errors."""
    problems = []
    for node in cluster.core.list_node(_request_timeout=5).items:
        if not any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or []):
            problems.append(f"node {node.metadata.name} not Ready")
    for pod in cluster.core.list_namespaced_pod("kube-system", _request_timeout=5).items:
        ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        if pod.status.phase != "Running" or not ready:
            problems.append(f"pod kube-system/{pod.metadata.name} {pod.status.phase} ready={ready}")
    return problems


def wait_healthy(cluster: Cluster, timeout_seconds: float = 180) -> WaitResult:
    """Wait until :func:`unhealthy` is empty; returns the WaitResult (``ok`` False on timeout)."""
    return wait_until(lambda: unhealthy(cluster) == [], timeout_seconds, interval_seconds=1.0,
                      description="every node Ready and every kube-system pod Running and Ready")


def api_accepts_write(cluster: Cluster, namespace: str, keep: bool = True) -> float:
    """Create one ConfigMap (``kdrill-write-check-*``) in ``namespace``; returns when the API
    acknowledged it (epoch seconds), deleting it afterwards unless ``keep``. Raises what the API
    raises: a condition for :func:`harness.core.waiting.wait_until`."""
    import time

    from kubernetes import client

    created = cluster.core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(generate_name="kdrill-write-check-")), _request_timeout=5)
    acknowledged = time.time()
    if not keep:
        cluster.core.delete_namespaced_config_map(created.metadata.name, namespace, _request_timeout=5)
    return acknowledged
