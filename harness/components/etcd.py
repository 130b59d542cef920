"""etcd as etcd itself reports it: members, leader, per-endpoint health and status.

``etcdctl`` runs inside a running etcd static pod container (``crictl exec`` on a control-plane
node), with the healthcheck client certificate kubeadm issues. Every call is bounded by etcdctl's
own ``--command-timeout`` and by the node exec timeout.

Source for the quorum arithmetic: etcd "FAQ: What is failure tolerance?"
(https://etcd.io/docs/v3.6/faq/#what-is-failure-tolerance): a cluster of N members needs a
majority, floor(N/2)+1, to agree on updates, and tolerates N - (floor(N/2)+1) failed members.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

from harness.core.waiting import wait_until
from harness.kube.providers import Cluster, NoNodeAccess, ProviderError

TLS = ["--cacert=/etc/kubernetes/pki/etcd/ca.crt",
       "--cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt",
       "--key=/etc/kubernetes/pki/etcd/healthcheck-client.key"]


def quorum(members: int) -> int:
    """Members needed to agree on an update: floor(N/2)+1."""
    return members // 2 + 1


def failure_tolerance(members: int) -> int:
    """Members that may fail with the cluster still writable: N - quorum(N)."""
    return members - quorum(members)


@dataclass
class EtcdMember:
    id: str
    name: str
    peer_urls: list[str]
    client_urls: list[str]
    started: bool


def etcd_container_id(cluster: Cluster, node: str) -> str:
    """The running etcd container on ``node`` (``crictl ps --name etcd``). Raises LookupError when
    none runs, ProviderError when the listing fails (asked twice when its exec closed with no status)."""
    command = ["crictl", "ps", "--name", "^etcd$", "--state", "Running", "-q"]
    result = cluster.node_exec(node, command, timeout_seconds=15, read_only=True, check=False)
    if result.returncode == -1:
        # Through the node agent the exec's stream may close with no exit status (the API server
        # it went through restarted with its etcd member); the listing changes nothing, so it is
        # asked once more, through whichever API server answers now.
        result = cluster.node_exec(node, command, timeout_seconds=15, read_only=True, check=False)
    if result.returncode != 0:
        raise ProviderError(f"on node {node}: {' '.join(command)} exited {result.returncode}: "
                            f"{(result.stderr or result.stdout or '').strip()[:500]}")
    out = result.stdout.split()
    if not out:
        raise LookupError(f"no running etcd container on {node}")
    return out[0]


def etcd_members(cluster: Cluster, via_node: str) -> list[EtcdMember]:
    result = etcdctl(cluster, via_node, ["https://127.0.0.1:2379"], "member", "list", "-w", "json")
    if result.returncode != 0:
        raise RuntimeError(f"etcdctl member list on {via_node}: {result.stderr.strip()}")
    data = json.loads(result.stdout)
    return [EtcdMember(id=format(m["ID"], "x"), name=m.get("name", ""), peer_urls=m.get("peerURLs", []),
                       client_urls=m.get("clientURLs", []), started=bool(m.get("name")))
            for m in data.get("members", [])]


@dataclass
class EndpointState:
    endpoint: str
    healthy: bool
    member_id: str | None = None
    leader_id: str | None = None
    raft_term: int | None = None
    error: str = ""


def etcdctl(cluster: Cluster, via_node: str, endpoints: list[str], *args: str, timeout_seconds: float = 20,
            read_only: bool = False):
    """Run ``etcdctl --endpoints=... ARGS`` in the etcd container on ``via_node``; ``read_only``
    when ARGS change nothing (see Cluster.node_exec)."""
    cid = etcd_container_id(cluster, via_node)
    command = ["crictl", "exec", cid, "etcdctl", f"--endpoints={','.join(endpoints)}", *TLS,
               "--command-timeout=2s", "--dial-timeout=1s", *args]
    return cluster.node_exec(via_node, command, timeout_seconds=timeout_seconds, check=False, read_only=read_only)


def endpoint_health(cluster: Cluster, via_node: str, endpoints: list[str]) -> dict[str, bool]:
    """endpoint -> healthy (a linearizable read through that member succeeded: needs quorum).
    Raises ProviderError when etcdctl's answer does not name every endpoint (the command cut
    short, or its exec: an unanswered endpoint is unknown, not unhealthy)."""
    result = etcdctl(cluster, via_node, endpoints, "endpoint", "health", "-w", "json", read_only=True)
    try:
        entries = json.loads(result.stdout or "[]")
    except json.JSONDecodeError:
        entries = []
    health = {entry["endpoint"]: bool(entry.get("health")) for entry in entries
              if isinstance(entry, dict) and entry.get("endpoint") in endpoints}
    if set(health) != set(endpoints):
        raise ProviderError(f"etcdctl endpoint health through {via_node} answered for {len(health)} of "
                            f"{len(endpoints)} endpoints (exit {result.returncode}): "
                            f"{(result.stderr or result.stdout).strip()[-300:]}")
    return health


def endpoint_status(cluster: Cluster, via_node: str, endpoints: list[str]) -> dict[str, EndpointState]:
    """endpoint -> status as that member reports it (member id, the leader it follows, raft term)."""
    result = etcdctl(cluster, via_node, endpoints, "endpoint", "status", "-w", "json", read_only=True)
    states = {e: EndpointState(endpoint=e, healthy=False, error=result.stderr.strip()[-300:]) for e in endpoints}
    try:
        entries = json.loads(result.stdout or "[]")
    except json.JSONDecodeError:
        entries = []
    for entry in entries:
        status = entry.get("Status", {})
        leader = status.get("leader") or 0
        states[entry["Endpoint"]] = EndpointState(
            endpoint=entry["Endpoint"], healthy=True,
            member_id=format(status["header"]["member_id"], "x"),
            leader_id=format(leader, "x") if leader else None, raft_term=status.get("raftTerm"))
    return states


def leader_id(cluster: Cluster, via_node: str, endpoints: list[str]) -> str | None:
    """The leader's member id as the answering members agree on it, or None without a leader."""
    leaders = {s.leader_id for s in endpoint_status(cluster, via_node, endpoints).values() if s.leader_id}
    return leaders.pop() if len(leaders) == 1 else None


_ELECTED = re.compile(r"elected leader ([0-9a-f]+) at term (\d+)")


def elections(cluster: Cluster, node: str, since: float, clock_offset_seconds: float = 0.0) -> list[dict]:
    """The leader elections the member on ``node`` logged since epoch ``since`` (seconds, this
    machine's clock), oldest first: ``{"t": epoch seconds on this machine's clock, "leader":
    member id (hex), "term": int}``, from its raft log lines ``elected leader ID at term N``
    (their ``ts``, the node's clock, less ``clock_offset_seconds``: node minus host). etcd's own
    record, so how often and through what it is read does not change it. Raises LookupError
    when no etcd container runs there, ProviderError from the node channel."""
    from datetime import datetime, timezone

    container = etcd_container_id(cluster, node)
    on_node = datetime.fromtimestamp(since + clock_offset_seconds - 1, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    out = cluster.node_exec(node, ["sh", "-c", f"crictl logs --since {on_node} {container} 2>&1"],
                            timeout_seconds=30).stdout
    found = []
    for line in out.splitlines():
        elected = _ELECTED.search(line)
        if not elected:
            continue
        try:
            stamp = json.loads(line)["ts"]
            t = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() - clock_offset_seconds
        except (ValueError, KeyError, TypeError):
            continue
        if t >= since:
            found.append({"t": t, "leader": elected.group(1), "term": int(elected.group(2))})
    return found


def running_member_node(cluster: Cluster, nodes: list[str]) -> str:
    """A control-plane node whose etcd container runs (to run etcdctl in). Raises LookupError.
    A node that cannot be reached (through the node agent, one whose kubelet is stopped) is not one."""
    for node in nodes:
        try:
            etcd_container_id(cluster, node)
            return node
        except NoNodeAccess:
            raise
        except (LookupError, ProviderError):
            continue
    raise LookupError(f"no running etcd container on any of {', '.join(nodes)}")


def leader_node(cluster: Cluster, nodes: list[str]) -> str:
    """The control-plane node, of ``nodes``, whose member etcd reports as the leader (each member's
    own ``endpoint status``). Raises LookupError when no member there leads or they disagree."""
    members: dict[str, str] = {}
    leaders = set()
    for node in nodes:
        own = endpoint_status(cluster, node, ["https://127.0.0.1:2379"]).get("https://127.0.0.1:2379")
        if own is not None and own.member_id:
            members[node] = own.member_id
            leaders.add(own.leader_id)
    found = [node for node, member in members.items() if member in leaders]
    if len(leaders) != 1 or len(found) != 1:
        raise LookupError(f"no single etcd leader among {members} (leaders reported: {sorted(map(str, leaders))})")
    return found[0]


def member_healthy(cluster: Cluster, node: str) -> bool:
    """Whether the member on ``node`` serves a quorum read (``endpoint health`` on its own endpoint)."""
    result = etcdctl(cluster, node, ["https://127.0.0.1:2379"], "endpoint", "health", "-w", "json", read_only=True)
    try:
        return any(e.get("health") for e in json.loads(result.stdout or "[]"))
    except json.JSONDecodeError:
        return False


def wait_member_healthy(cluster: Cluster, node: str, timeout_seconds: float) -> bool:
    """Whether the member on ``node`` serves a quorum read within ``timeout_seconds`` (asked every second)."""
    return wait_until(lambda: member_healthy(cluster, node), timeout_seconds, interval_seconds=1.0,
                      description=f"etcd member on {node} healthy").ok


@dataclass
class StoredKey:
    """One key as etcd holds it: the raw value bytes (as kube-apiserver wrote them) and its revisions."""

    key: str
    value: bytes
    create_revision: int
    mod_revision: int


class RevisionCompacted(RuntimeError):
    """The revision asked for was compacted away (``mvcc: required revision has been compacted``)."""


def get_key(cluster: Cluster, via_node: str, endpoint: str, key: str, revision: int | None = None,
            serializable: bool = False) -> StoredKey | None:
    """``etcdctl get KEY`` through ``endpoint`` (``-w json``: the value's raw bytes, base64 in
    transit); None when the key does not exist at that revision. ``serializable`` reads the member's
    own copy without asking the leader; ``revision`` reads the key's history. Raises
    RevisionCompacted, or RuntimeError with etcdctl's error."""
    import base64

    args = ["get", key, "-w", "json"]
    if revision is not None:
        args.append(f"--rev={revision}")
    if serializable:
        args.append("--consistency=s")
    result = etcdctl(cluster, via_node, [endpoint], *args)
    if result.returncode != 0:
        error = result.stderr.strip()
        if "compacted" in error:
            raise RevisionCompacted(f"{key} at revision {revision}: {error}")
        raise RuntimeError(f"etcdctl get {key} via {endpoint} on {via_node}: {error[-300:]}")
    kvs = json.loads(result.stdout).get("kvs") or []
    if not kvs:
        return None
    kv = kvs[0]
    return StoredKey(key=base64.b64decode(kv["key"]).decode(errors="replace"), value=base64.b64decode(kv.get("value", "")),
                     create_revision=int(kv["create_revision"]), mod_revision=int(kv["mod_revision"]))


def _own_status(cluster: Cluster, node: str) -> dict | None:
    """``etcdctl endpoint status -w json`` of the member on ``node`` (its ``Status``), or None."""
    result = etcdctl(cluster, node, ["https://127.0.0.1:2379"], "endpoint", "status", "-w", "json")
    try:
        return json.loads(result.stdout or "[]")[0]["Status"]
    except (json.JSONDecodeError, IndexError, KeyError):
        return None


def db_size(cluster: Cluster, node: str) -> dict[str, int | None]:
    """The member on ``node``'s backend database as it reports it: ``{"db_size_bytes": file size,
    "db_size_in_use_bytes": logically in use}`` (None when it does not answer)."""
    status = _own_status(cluster, node) or {}
    return {"db_size_bytes": status.get("dbSize"), "db_size_in_use_bytes": status.get("dbSizeInUse")}


def revision(cluster: Cluster, node: str) -> int:
    """The store's current revision as the member on ``node`` reports it. Raises RuntimeError."""
    status = _own_status(cluster, node)
    if status is None:
        raise RuntimeError(f"etcd member on {node} does not report its status")
    return int(status["header"]["revision"])


_TOOK = re.compile(r"took ([0-9.]+)(ms|s|µs|us)")


@dataclass
class Defragmentation:
    node: str
    wall_seconds: float  # etcdctl defrag from start to return, the exec included
    took_seconds: float | None  # as etcdctl reports it
    output: str


def defragment(cluster: Cluster, node: str, timeout_seconds: float = 120) -> Defragmentation:
    """Defragment the member on ``node`` (``etcdctl defrag`` on its own endpoint; the member serves
    nothing meanwhile). Raises RuntimeError with etcdctl's error.

    Source: etcd "Maintenance", Defragmentation (https://etcd.io/docs/v3.6/op-guide/maintenance/#defragmentation).
    """
    started = time.time()
    result = etcdctl(cluster, node, ["https://127.0.0.1:2379"], "defrag", f"--command-timeout={int(timeout_seconds)}s",
                     timeout_seconds=timeout_seconds + 30)
    wall = time.time() - started
    output = (result.stdout + result.stderr).strip()
    if result.returncode != 0:
        raise RuntimeError(f"etcdctl defrag on {node} exited {result.returncode}: {output[-300:]}")
    took = _TOOK.search(output)
    seconds = float(took.group(1)) / {"s": 1, "ms": 1e3, "us": 1e6, "µs": 1e6}[took.group(2)] if took else None
    return Defragmentation(node, wall, seconds, output)
