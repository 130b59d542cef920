"""Pod and container snapshots: which pods run where, and their containers' IDs and restarts.

:class:`PodSnapshotProbe` asks the API server (fails while the control plane is down);
:class:`NodeContainerProbe` asks each node's container runtime directly (``crictl`` in the kind
node container), so container restarts and replacements are seen even with no control plane.
"""

from __future__ import annotations

import json
import re
import time

from harness.core.timeline import Sample
from harness.kube.providers import Cluster
from harness.probes import Probe


def pod_snapshot(cluster: Cluster, namespace: str, selector: str, timeout_seconds: float = 5.0) -> dict[str, dict]:
    """uid -> {"name", "node", "phase", "restarts", "container_ids", "owner"} for matching pods."""
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=selector, _request_timeout=timeout_seconds)
    snapshot = {}
    for pod in pods.items:
        statuses = pod.status.container_statuses or []
        owner = (pod.metadata.owner_references or [None])[0]
        snapshot[pod.metadata.uid] = {
            "name": pod.metadata.name,
            "node": pod.spec.node_name,
            "phase": pod.status.phase,
            "restarts": sum(s.restart_count for s in statuses),
            "container_ids": sorted(s.container_id or "" for s in statuses),
            "owner": f"{owner.kind}/{owner.name}" if owner else None,
        }
    return snapshot


def node_containers(cluster: Cluster, node: str, namespace: str) -> dict[str, dict]:
    """container id -> {"pod", "pod_uid", "name", "state", "attempt"} from the node's runtime."""
    out = cluster.node_exec(node, crictl_ps_command(namespace), timeout_seconds=10).stdout
    return containers_of(json.loads(out))


def crictl_ps_command(namespace: str) -> list[str]:
    """The node command listing ``namespace``'s containers, every state, as JSON."""
    return ["crictl", "ps", "-a", "-o", "json", "--label", f"io.kubernetes.pod.namespace={namespace}"]


def containers_of(listing: dict) -> dict[str, dict]:
    """container id -> {"pod", "pod_uid", "name", "state", "attempt"} from ``crictl ps -o json``'s
    document."""
    containers = {}
    for c in listing.get("containers", []):
        labels = c.get("labels", {})
        containers[c["id"]] = {"pod": labels.get("io.kubernetes.pod.name"),
                               "pod_uid": labels.get("io.kubernetes.pod.uid"),
                               "name": c.get("metadata", {}).get("name"), "state": c.get("state"),
                               "attempt": c.get("metadata", {}).get("attempt", 0)}
    return containers


class PodSnapshotProbe(Probe):
    """Snapshot matching pods through the API; ``detail`` holds the snapshot as JSON."""

    def __init__(self, name: str, cluster: Cluster, namespace: str, selector: str, **kwargs) -> None:
        super().__init__(name, **kwargs)
        self.cluster, self.namespace, self.selector = cluster, namespace, selector

    def sample(self) -> Sample:
        started = time.time()
        snapshot = pod_snapshot(self.cluster, self.namespace, self.selector, timeout_seconds=2.0)
        return Sample(t=started, ok=True, latency_seconds=time.time() - started, detail=json.dumps(snapshot))


class NodeContainerProbe(Probe):
    """Snapshot the running containers of ``namespace`` on ``nodes`` through their runtime.

    ``detail`` is JSON: node -> {container id -> info}. A sample is ok when every node answered.
    """

    def __init__(self, name: str, cluster: Cluster, nodes: list[str], namespace: str, **kwargs) -> None:
        super().__init__(name, **kwargs)
        self.cluster, self.nodes, self.namespace = cluster, nodes, namespace

    def sample(self) -> Sample:
        started = time.time()
        seen = {node: node_containers(self.cluster, node, self.namespace) for node in self.nodes}
        return Sample(t=started, ok=True, latency_seconds=time.time() - started, detail=json.dumps(seen))


def running_container_ids(sample: Sample) -> set[str]:
    """IDs of running containers in one NodeContainerProbe sample."""
    seen = json.loads(sample.detail)
    return {cid for containers in seen.values() for cid, info in containers.items()
            if info["state"] == "CONTAINER_RUNNING"}


def kube_system_snapshot(cluster: Cluster, timeout_seconds: float = 10.0) -> dict[str, dict]:
    """pod name -> {"node", "app", "restarts", "ready"} for every kube-system pod: where CoreDNS and
    the other add-ons run, and the restart counts a drill compares before and after."""
    pods = cluster.core.list_namespaced_pod("kube-system", _request_timeout=timeout_seconds).items
    snapshot = {}
    for pod in pods:
        labels = pod.metadata.labels or {}
        snapshot[pod.metadata.name] = {
            "node": pod.spec.node_name,
            "app": labels.get("k8s-app") or labels.get("component") or labels.get("app"),
            "restarts": sum(s.restart_count for s in pod.status.container_statuses or []),
            "ready": any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []),
        }
    return snapshot


def restarts_between(before: dict[str, dict], after: dict[str, dict]) -> dict[str, int]:
    """pod name -> restarts added between two :func:`kube_system_snapshot` results (pods that
    are new in ``after`` count all their restarts); only pods with a change are listed."""
    added = {}
    for name, pod in after.items():
        delta = pod["restarts"] - before.get(name, {}).get("restarts", 0)
        if delta:
            added[name] = delta
    return added


# kubeadm's control-plane static pods, by the ``component`` label kube_system_snapshot reads.
CONTROL_PLANE_APPS = ("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler")


def restarts_outside_control_plane(added: dict[str, int], before: dict[str, dict]) -> dict[str, int]:
    """The part of :func:`restarts_between` that is not a control-plane component: the add-ons
    (CoreDNS, kube-proxy, the pod network) that a control-plane fault must leave running.
    kube-controller-manager and kube-scheduler exit when they cannot renew their leader lease,
    so their restarts are a control-plane fault's own consequence."""
    return {pod: n for pod, n in added.items() if before.get(pod, {}).get("app") not in CONTROL_PLANE_APPS}


def pod_events(cluster: Cluster, namespace: str, pod: str, timeout_seconds: float = 10.0) -> list[dict]:
    """The pod's Events, oldest first: {"reason", "count", "first", "last" (epoch seconds),
    "message" (at most 300 characters)}; a kubelet ``Pulled`` event also gets ``pull``
    (:func:`pulled_seconds`). Raises kubernetes.client.ApiException."""
    events = cluster.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}",
                                                _request_timeout=timeout_seconds).items
    out = []
    for e in events:
        first = e.first_timestamp or e.event_time
        last = e.last_timestamp or first
        event = {"reason": e.reason, "count": e.count or 1, "first": first.timestamp() if first else None,
                 "last": last.timestamp() if last else None, "message": (e.message or "")[:300]}
        if e.reason == "Pulled" and (pull := pulled_seconds(e.message or "")) is not None:
            event["pull"] = pull
        out.append(event)
    return sorted(out, key=lambda e: e["first"] or 0)


# The kubelet's Pulled event: 'Successfully pulled image "X" in 52ms (47.6s including waiting).
# Image size: N bytes.' The first duration is the runtime's pull; the second adds the time the
# request waited for the kubelet's image puller (with serialized pulls, behind the pull before it).
_PULLED = re.compile(r"Successfully pulled image .* in (\S+) \((\S+) including waiting\)")
_GO_DURATION_PART = re.compile(r"([0-9.]+)(h|ms|us|µs|ns|m|s)")
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def go_duration_seconds(text: str) -> float | None:
    """A Go ``time.Duration`` string (``1m2.5s``, ``52ms``, ``0s``) in seconds, or None when
    ``text`` is not one."""
    parts = _GO_DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    try:
        return sum(float(n) * _GO_UNITS[u] for n, u in parts)
    except ValueError:
        return None


def pulled_seconds(message: str) -> dict | None:
    """From a kubelet ``Pulled`` event's message: {"pull_seconds": the runtime's pull,
    "including_waiting_seconds": from the pull's request to its end, "waiting_seconds": the
    difference (the time the request queued)}; None for another message (e.g. "already present")."""
    match = _PULLED.search(message)
    if not match:
        return None
    pull, total = go_duration_seconds(match.group(1)), go_duration_seconds(match.group(2))
    if pull is None or total is None:
        return None
    return {"pull_seconds": round(pull, 3), "including_waiting_seconds": round(total, 3),
            "waiting_seconds": round(max(0.0, total - pull), 3)}
