"""Topology discovery: control-plane nodes, workers, etcd members and component versions.

Nodes and versions come from the API. etcd members come from etcd itself (``etcdctl`` run in the
etcd static pod's container through the node's runtime), which needs node access; on an
existing cluster they are left empty with the reason.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from kubernetes import client

from harness.providers import Cluster

CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"

ETCDCTL = ["etcdctl", "--endpoints=https://127.0.0.1:2379",
           "--cacert=/etc/kubernetes/pki/etcd/ca.crt",
           "--cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt",
           "--key=/etc/kubernetes/pki/etcd/healthcheck-client.key",
           "--command-timeout=3s", "--dial-timeout=2s"]


@dataclass
class EtcdMember:
    id: str
    name: str
    peer_urls: list[str]
    client_urls: list[str]
    started: bool


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


def etcd_container_id(cluster: Cluster, node: str) -> str:
    """The running etcd container on ``node`` (``crictl ps --name etcd``). Raises LookupError."""
    out = cluster.node_exec(node, ["crictl", "ps", "--name", "^etcd$", "--state", "Running", "-q"],
                            timeout_seconds=15).stdout.split()
    if not out:
        raise LookupError(f"no running etcd container on {node}")
    return out[0]


def etcdctl(cluster: Cluster, node: str, *args: str, timeout_seconds: float = 15):
    """Run ``etcdctl ARGS`` against the etcd member on ``node``; returns CompletedProcess."""
    cid = etcd_container_id(cluster, node)
    return cluster.node_exec(node, ["crictl", "exec", cid, *ETCDCTL, *args], timeout_seconds=timeout_seconds,
                             check=False)


def etcd_members(cluster: Cluster, via_node: str) -> list[EtcdMember]:
    result = etcdctl(cluster, via_node, "member", "list", "-w", "json")
    if result.returncode != 0:
        raise RuntimeError(f"etcdctl member list on {via_node}: {result.stderr.strip()}")
    data = json.loads(result.stdout)
    return [EtcdMember(id=format(m["ID"], "x"), name=m.get("name", ""), peer_urls=m.get("peerURLs", []),
                       client_urls=m.get("clientURLs", []), started=bool(m.get("name")))
            for m in data.get("members", [])]


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
