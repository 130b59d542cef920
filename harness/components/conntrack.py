"""A node's connections through a Service's ClusterIP, from its connection tracking, and how to
cut them.

kube-proxy steers a *new* connection to a ClusterIP to one of the Service's endpoints (DNAT);
the connection then lives in the node's connection tracking table, and stays with that pod when
the endpoint is removed: "Virtual IPs and Service Proxies"
(https://kubernetes.io/docs/reference/networking/virtual-ips/) describes the NAT, and
kube-proxy's stale-entry cleanup (k8s.io/kubernetes/pkg/proxy/conntrack) deletes UDP entries
only. So a client that keeps its connections open, such as
kube-apiserver calling an admission webhook with keep-alive, goes on reaching the backend's pods
after the Service stops selecting them (measured: a Gatekeeper webhook kept answering every
call with its Service's EndpointSlices empty).

Each function runs on a node through the cluster's node channel (``conntrack`` and ``ss`` from
the node's own tools). :func:`flows_through` reads the node's connection tracking table, which also
holds pods' connections through the ClusterIP; :func:`host_sockets` and :func:`cut` see only the
host network namespace (hostNetwork processes such as kube-apiserver), so a caller cuts only the
flows found in both.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.kube.providers import Cluster

NODE_COMMAND_SECONDS = 15


@dataclass(frozen=True)
class Flow:
    """One established TCP connection to ``cluster_ip:port``: the client's address and port, and
    ``backend``, the pod IP kube-proxy sent it to (the reply's source)."""

    client: str
    client_port: int
    backend: str


def _ss_address(ip: str) -> str:
    return f"[{ip}]" if ":" in ip else ip  # ss reads an IPv6 address only in brackets


def flows_through(cluster: Cluster, node: str, cluster_ip: str, port: int) -> list[Flow]:
    """The ESTABLISHED TCP connections tracked on ``node`` whose destination was
    ``cluster_ip:port``, from every network namespace on the node (pods' too). Raises
    NoNodeAccess, ProviderError when conntrack fails (Cluster.node_exec), or ValueError for a
    line it printed that has no original and reply tuple (a format this parser does not know:
    never taken as "no connection")."""
    out = cluster.node_exec(node, ["conntrack", "-L", "-p", "tcp", "--orig-dst", cluster_ip,
                                   "--orig-port-dst", str(port), "--state", "ESTABLISHED"],
                            timeout_seconds=NODE_COMMAND_SECONDS).stdout
    flows = []
    for line in out.splitlines():
        if not line.strip():
            continue
        # The original tuple's src/dst/sport/dport come first, the reply's after; other fields
        # (zone=, packets=, bytes=, mark=) may sit anywhere between.
        fields: dict[str, list[str]] = {}
        for token in line.split():
            key, eq, value = token.partition("=")
            if eq:
                fields.setdefault(key, []).append(value)
        src, dst, sport, dport = (fields.get(k, []) for k in ("src", "dst", "sport", "dport"))
        if len(src) < 2 or not dst or not sport or not dport or not sport[0].isdigit() or not dport[0].isdigit():
            raise ValueError(f"conntrack on {node} printed a line without an original and a reply tuple: {line!r}")
        if dst[0] == cluster_ip and int(dport[0]) == port:
            flows.append(Flow(client=src[0], client_port=int(sport[0]), backend=src[1]))
    return flows


def host_sockets(cluster: Cluster, node: str, cluster_ip: str, port: int) -> set[tuple[str, int]]:
    """(local address, local port) of the TCP sockets in ``node``'s host network namespace
    connected to ``cluster_ip:port`` (``ss``): kube-apiserver's, not the node's pods'. Raises
    NoNodeAccess or ProviderError (Cluster.node_exec)."""
    out = cluster.node_exec(node, ["ss", "-tnH", "dst", _ss_address(cluster_ip), "dport", "=", f":{port}"],
                            timeout_seconds=NODE_COMMAND_SECONDS).stdout
    sockets = set()
    for line in out.splitlines():
        columns = line.split()
        if len(columns) >= 5:  # state, receive queue, send queue, local, peer
            address, _, local_port = columns[3].rpartition(":")
            if local_port.isdigit():
                sockets.add((address.strip("[]"), int(local_port)))
    return sockets


def cut(cluster: Cluster, node: str, cluster_ip: str, port: int, sockets: list[tuple[str, int]]) -> int:
    """Destroy ``node``'s own sockets to ``cluster_ip:port`` from exactly ``sockets`` (local address
    and port; ``ss -K``, the kernel's SOCK_DESTROY): the process holding one sees its connection
    aborted at once, as when the pod at the other end is gone, and connects again through
    kube-proxy's current rules. Returns how many sockets were destroyed. Raises NoNodeAccess or
    ProviderError (Cluster.node_exec)."""
    if not sockets:
        return 0
    terms: list[str] = []
    for address, local_port in sorted(set(sockets)):
        terms += (["or"] if terms else []) + ["src", f"{_ss_address(address)}:{local_port}"]
    out = cluster.node_exec(node, ["ss", "-K", "-tnH", "dst", _ss_address(cluster_ip), "dport", "=", f":{port}",
                                   "(", *terms, ")"], timeout_seconds=NODE_COMMAND_SECONDS).stdout
    return sum(1 for line in out.splitlines() if line.strip())
