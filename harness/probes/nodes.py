"""Node readiness through the API: each sample lists every node's Ready condition and its
``unreachable``/``not-ready`` taints, so a drill can show when the node lifecycle controller
marked a node NotReady or Unknown, tainted it, and when it was Ready again.

Source: Kubernetes "Nodes" (node status, heartbeats and leases;
https://kubernetes.io/docs/concepts/architecture/nodes/) and "Taints and Tolerations"
(taint-based evictions; https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/).
"""

from __future__ import annotations

import json
import logging
import time

from kubernetes import client

from harness.core.timeline import Sample, Timeline
from harness.kube.providers import Cluster
from harness.probes import Probe

log = logging.getLogger("kdrill.probes")

NODE_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")


MESSAGE_CHARS = 200  # a NotReady message is kept to this many characters


def node_states(nodes: list) -> dict[str, dict]:
    """node name -> {"ready": "True"|"False"|"Unknown"|None, "reason": str|None, "taints":
    [key:effect, ...]} for V1Node objects, plus "message" (cut to MESSAGE_CHARS) when Ready is not
    True. Only the node lifecycle taints are kept. The reason says who set the condition: the
    kubelet (``KubeletReady``, ``KubeletNotReady``) or the node lifecycle controller
    (``NodeStatusUnknown``, when the kubelet stopped posting status)."""
    states = {}
    for node in nodes:
        ready = next((c for c in node.status.conditions or [] if c.type == "Ready"), None)
        taints = sorted(f"{t.key}:{t.effect}" for t in node.spec.taints or [] if t.key in NODE_TAINTS)
        state = {"ready": ready.status if ready else None, "reason": ready.reason if ready else None, "taints": taints}
        if ready is not None and ready.status != "True":
            state["message"] = (ready.message or "")[:MESSAGE_CHARS]
        states[node.metadata.name] = state
    return states


class NodeReadyProbe(Probe):
    """LIST nodes; ``detail`` is JSON of :func:`node_states`. A sample is ok when the API
    answered (whatever the nodes' state)."""

    def __init__(self, name: str, cluster: Cluster, timeout_seconds: float = 2.0, **kwargs) -> None:
        super().__init__(name, **kwargs)
        self.core = client.CoreV1Api(cluster.new_api())
        self.timeout_seconds = timeout_seconds

    def sample(self) -> Sample:
        started = time.time()
        nodes = self.core.list_node(_request_timeout=self.timeout_seconds).items
        return Sample(t=started, ok=True, latency_seconds=time.time() - started,
                      detail=json.dumps(node_states(nodes)))


def node_transitions(timeline: Timeline, start: float | None = None) -> list[dict]:
    """Every change of a node's Ready condition (status, reason) or lifecycle taints seen from
    ``start`` (epoch seconds) on: [{"t", "node", "ready", "reason", "taints"} (+ "message", as first
    seen in that state)], the first answered sample counting as a change from nothing."""
    last: dict[str, tuple] = {}
    changes = []
    for sample in timeline.samples(start=start):
        if not sample.ok:
            continue
        for node, state in json.loads(sample.detail).items():
            # The message is not compared: the kubelet's can change at every status update (a
            # PLEG message counts the seconds since it was last active); the first one is kept.
            key = (state.get("ready"), state.get("reason"), state.get("taints"))
            if last.get(node) != key:
                changes.append({"t": sample.t, "node": node, **state})
                last[node] = key
    return changes


def nodes_not_ready_seconds(transitions: list[dict], start: float, end: float) -> dict[str, float]:
    """node -> seconds it was not Ready within [start, end] (epoch seconds), from
    :func:`node_transitions` (a node still not Ready at ``end`` counts up to ``end``); only nodes
    that were not Ready at some point are listed."""
    state: dict[str, tuple[str | None, float]] = {}
    total: dict[str, float] = {}
    for change in sorted(transitions, key=lambda c: c["t"]):
        node, t = change["node"], change["t"]
        previous = state.get(node)
        if previous and previous[0] != "True":
            total[node] = total.get(node, 0.0) + max(0.0, min(t, end) - max(previous[1], start))
        state[node] = (change["ready"], t)
    for node, (ready, since) in state.items():
        if ready != "True" and since < end:
            total[node] = total.get(node, 0.0) + max(0.0, end - max(since, start))
    return {node: seconds for node, seconds in total.items() if seconds > 0}


class NodeLeaseProbe(Probe):
    """Each sample lists the node Leases in ``kube-node-lease`` (the kubelets' heartbeats) and
    records, per node, the age of its last renewal in seconds (sample time minus ``renewTime``,
    the kubelet's clock: the run's clock offsets say how far that is from the host's). A kubelet
    renews every 10 s by default (a quarter of its 40 s lease duration)."""

    def __init__(self, name: str, cluster: Cluster, timeout_seconds: float = 2.0, **kwargs) -> None:
        super().__init__(name, **kwargs)
        self.coordination = client.CoordinationV1Api(cluster.new_api())
        self.timeout_seconds = timeout_seconds

    def sample(self) -> Sample:
        started = time.time()
        leases = self.coordination.list_namespaced_lease("kube-node-lease", _request_timeout=self.timeout_seconds).items
        ages = {lease.metadata.name: round(started - lease.spec.renew_time.timestamp(), 3)
                for lease in leases if lease.spec and lease.spec.renew_time}
        return Sample(t=started, ok=True, latency_seconds=time.time() - started, detail=json.dumps(ages, sort_keys=True))


def oldest_lease_age_seconds(timeline: Timeline, start: float, end: float) -> float | None:
    """The largest renewal age any node's Lease showed in a sample inside [start, end] (None: no
    sample answered there)."""
    ages = [age for s in timeline.samples() if s.ok and start <= s.t <= end for age in json.loads(s.detail).values()]
    return max(ages) if ages else None


READY_STATUSES = ("False", "Unknown")


def nodes_counted(states: dict[str, dict], counted: tuple[str, ...]) -> list[str]:
    """The nodes of :func:`node_states` whose Ready status is one of ``counted``, sorted (a node
    with no Ready condition is not counted: nothing says it is not Ready)."""
    return sorted(node for node, state in states.items() if state.get("ready") in counted)


class NodeReady:
    """Probe kind ``node-ready``: LIST nodes every interval. A sample is ok when the API answered
    and no node's Ready condition has a status in ``counted`` (default both ``False``, the
    kubelet's own report, and ``Unknown``, the node lifecycle controller's mark when no heartbeat
    came within its grace period); ``labels["value"]`` is how many nodes do (for ``max_value``),
    ``detail`` every node's state (:func:`node_states`). A read that fails records nothing: an API
    that does not answer says nothing of the nodes (the api-read probe and the vital signs say
    when it did not), so ``longest_failure_seconds`` is the longest run of reads that saw a node
    not Ready."""

    kind = "node-ready"
    in_probe_pod = False
    required = ()
    fields = {"counted": {"type": "array", "minItems": 1, "uniqueItems": True,
                          "items": {"enum": list(READY_STATUSES)},
                          "x-expected": "a list of Ready statuses that count as not Ready: False, Unknown"}}
    # Its samples carry a value: max_value and min_value read them.
    records_values = True

    @classmethod
    def for_scenario(cls, spec: dict, context) -> "NodeNotReadyProbe":
        return NodeNotReadyProbe(spec["name"], context.cluster, tuple(spec.get("counted") or READY_STATUSES),
                                 interval_seconds=1.0, max_seconds=context.max_seconds)


class NodeNotReadyProbe(NodeReadyProbe):
    """:class:`NodeReadyProbe` whose sample fails while a node's Ready status is in ``counted``,
    and counts those nodes (``labels["value"]``, ``labels["nodes"]``)."""

    def __init__(self, name: str, cluster: Cluster, counted: tuple[str, ...], **kwargs) -> None:
        super().__init__(name, cluster, **kwargs)
        self.counted = counted

    def sample(self) -> Sample | None:
        try:
            sample = super().sample()
        except Exception as exc:
            log.debug("probe %s: nodes not read: %s", self.name, exc)
            return None
        down = nodes_counted(json.loads(sample.detail), self.counted)
        return Sample(t=sample.t, ok=not down, latency_seconds=sample.latency_seconds, detail=sample.detail,
                      labels={"value": len(down), "nodes": ",".join(down)})
