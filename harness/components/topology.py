"""Topology discovery: control-plane nodes, workers, etcd members and component versions.

Nodes and versions come from the API. etcd members come from etcd itself (``etcdctl`` run in the
etcd static pod's container through the node's runtime), which needs node access; on an
existing cluster they are left empty with the reason.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from kubernetes import client

from harness.components.etcd import EtcdMember, etcd_members
from harness.kube.providers import Cluster

CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"


@dataclass
class Topology:
    kubernetes_version: str
    control_plane: list[str]
    workers: list[str]
    kubelet_versions: dict[str, str]
    etcd_members: list[EtcdMember] = field(default_factory=list)
    etcd_note: str = ""

    def nodes(self) -> list[dict]:
        return [{"name": n, "roles": ["control-plane"] if n in self.control_plane else ["worker"],
                 "kubelet_version": self.kubelet_versions.get(n, "")}
                for n in self.control_plane + self.workers]

    def to_dict(self) -> dict:
        return asdict(self)


def discover(cluster: Cluster) -> Topology:
    nodes = cluster.core.list_node(_request_timeout=10).items
    control_plane = sorted(n.metadata.name for n in nodes if CONTROL_PLANE_LABEL in (n.metadata.labels or {}))
    workers = sorted(n.metadata.name for n in nodes if CONTROL_PLANE_LABEL not in (n.metadata.labels or {}))
    kubelets = {n.metadata.name: n.status.node_info.kubelet_version for n in nodes}
    version = client.VersionApi(cluster.api).get_code(_request_timeout=10).git_version
    topology = Topology(kubernetes_version=version, control_plane=control_plane, workers=workers,
                        kubelet_versions=kubelets)
    if cluster.node_access and control_plane:
        try:
            topology.etcd_members = etcd_members(cluster, control_plane[0])
        except Exception as exc:  # reported, not fatal: not every drill needs etcd
            topology.etcd_note = f"etcd members not read: {exc}"
    else:
        topology.etcd_note = "etcd members need node access (not available on an existing cluster)"
    return topology


CLOCK_SAMPLES = 3


def clock_offset(cluster: Cluster, node: str) -> dict:
    """``node``'s clock minus the host's, in seconds, from the quickest of :data:`CLOCK_SAMPLES`
    reads (half its round trip is the uncertainty): the first command on a node may also start
    its node agent pod, which says nothing about the clock. Raises what node_exec raises."""
    best = None
    for _ in range(CLOCK_SAMPLES):
        before = time.time()
        out = cluster.node_exec(node, ["date", "+%s.%N"], timeout_seconds=10).stdout.strip()
        after = time.time()
        sample = {"offset_seconds": round(float(out) - (before + after) / 2, 4),
                  "uncertainty_seconds": round((after - before) / 2, 4)}
        if best is None or sample["uncertainty_seconds"] < best["uncertainty_seconds"]:
            best = sample
    return best


def least_offset_seconds(offset: dict) -> float:
    """The clock offset (seconds, node minus host) nearest zero that a :func:`clock_offset` read
    proves: the node read its clock somewhere inside the round trip, so the offset is only known
    to ``offset_seconds`` plus or minus ``uncertainty_seconds``. 0 when that span holds 0 (on kind
    it always does: nodes share this machine's clock, and a docker exec runs its command late in
    the round trip, which reads as 0.1 to 0.2 s ahead). Raises KeyError/TypeError on a dict that
    is not such a read."""
    value, uncertainty = float(offset["offset_seconds"]), abs(float(offset["uncertainty_seconds"]))
    if abs(value) <= uncertainty:
        return 0.0
    return value - uncertainty if value > 0 else value + uncertainty


def clock_corrections(clock_offsets: dict | None, nodes: list[str]) -> dict[str, float]:
    """Seconds to subtract from each of ``nodes``' own clock to put its times on the host's:
    :func:`least_offset_seconds` of its read in ``clock_offsets`` (as :func:`cluster_identity`
    records them), 0 for a node whose clock was not read (no entry, or an ``error``)."""
    corrections = {}
    for node in nodes:
        read = (clock_offsets or {}).get(node)
        ok = isinstance(read, dict) and all(isinstance(read.get(k), (int, float)) and not isinstance(read.get(k), bool)
                                            for k in ("offset_seconds", "uncertainty_seconds"))
        corrections[node] = least_offset_seconds(read) if ok else 0.0
    return corrections


def cluster_identity(cluster: Cluster, topology: Topology) -> dict:
    """Which cluster this is, beyond its (free-text) name: the kube-system namespace's UID (unique
    per cluster), the API server URL, the nodes with their kubelet versions, and, with node access,
    each node's clock offset from the host in seconds (node minus host, with half the round trip as
    its uncertainty), so every time in the evidence can be placed. Never raises: what cannot be
    read says why."""
    identity: dict = {"name": cluster.name, "provider": cluster.provider, "context": cluster.context,
                      "server": cluster.api.configuration.host, "kubernetes_version": topology.kubernetes_version,
                      "nodes": topology.nodes()}
    try:
        identity["kube_system_uid"] = cluster.core.read_namespace("kube-system", _request_timeout=10).metadata.uid
    except Exception as exc:  # evidence, not a reason to stop
        identity["kube_system_uid"] = f"not read: {type(exc).__name__}"
    offsets: dict = {}
    if cluster.node_access:
        identity["node_channel"] = cluster.node_channel
        for node in topology.control_plane + topology.workers:
            try:
                offsets[node] = clock_offset(cluster, node)
            except Exception as exc:
                offsets[node] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    else:
        offsets = {"note": "no node access: node clocks not compared"}
    identity["clock_offsets"] = offsets
    return identity
