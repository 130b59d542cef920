"""Fault ``etcd-restore``: every etcd member lost, then the cluster restored from a snapshot.

The loss (:meth:`EtcdRestore.inject`): on every control-plane node the kubelet is stopped and the
control-plane static pods killed (``crictl stop --timeout 0``), then the member's data
(``/var/lib/etcd/member``) is moved aside to :data:`LOST` (kept, not deleted: until a restore
has succeeded it is the way back).

The restore (:meth:`EtcdRestore.restore`), as documented for kubeadm clusters: with every API
server stopped, each member's data directory is rebuilt from the same snapshot with ``etcdutl
snapshot restore`` (its own ``--name`` and peer URL, the whole ``--initial-cluster``, a new
``--initial-cluster-token``; ``--bump-revision`` with ``--mark-compacted`` so that no watcher
resumes from a revision the restored store reuses), then the kubelets are started and run etcd,
the API servers, controller-manager and scheduler again on the restored data.

The revert: after a restore, the moved-aside data is deleted; before one (a drill that failed,
or ``kdrill recover`` after a crash), the original data is moved back on every node, so the
cluster comes back as it was before the loss. Either way the kubelets are started, and the
verification waits until every member serves a quorum read and the API answers.

Sources: "Operating etcd clusters for Kubernetes", Restoring an etcd cluster
(https://kubernetes.io/docs/tasks/administer-cluster/configure-upgrade-etcd/#restoring-an-etcd-cluster);
etcd "Disaster recovery", Restoring a cluster (https://etcd.io/docs/v3.6/op-guide/recovery/).
"""

from __future__ import annotations

import re
import shlex
import time
from typing import Any

from harness.components import static_pods
from harness.faults import Fault, FaultError, FaultNotReverted
from harness.params import Param
from harness.providers import Cluster

DATA = "/var/lib/etcd"  # kubeadm's etcd data directory (hostPath of the etcd static pod)
LOST = "/var/lib/etcd-kdrill-lost"  # the member's data, moved aside by the loss
RESTORING = "/var/lib/etcd-kdrill-restore"  # etcdutl's output, moved into DATA when complete
SNAPSHOT_ON_NODE = "/var/lib/kdrill-etcd-snapshot.db"
ETCDUTL_ON_NODE = "/usr/local/bin/kdrill-etcdutl"
# etcdutl --bump-revision: far above any revision the lost cluster reached in a drill.
BUMP_REVISION = 1_000_000_000
# A deadline for the verification, not a measurement: every member serving a quorum read and the
# API answering after the kubelets start on a loaded 2-core machine.
HEALTHY_DEADLINE_SECONDS = 300


def manifest_flag(manifest: str, flag: str) -> str:
    """The value of ``--flag=value`` in a static pod manifest's command. Raises LookupError."""
    found = re.search(rf"^\s*- --{re.escape(flag)}=(\S+)\s*$", manifest, re.MULTILINE)
    if not found:
        raise LookupError(f"--{flag} not in the etcd static pod manifest")
    return found.group(1)


def restore_command(snapshot: str, name: str, peer_url: str, initial_cluster: str, token: str) -> str:
    """The shell command restoring one member's data from ``snapshot`` into DATA/member."""
    restore = [ETCDUTL_ON_NODE, "snapshot", "restore", snapshot, "--name", name,
               "--initial-cluster", initial_cluster, "--initial-cluster-token", token,
               "--initial-advertise-peer-urls", peer_url, "--data-dir", RESTORING,
               "--bump-revision", str(BUMP_REVISION), "--mark-compacted"]
    return (f"rm -rf {RESTORING} && {' '.join(shlex.quote(a) for a in restore)} >/dev/null && "
            f"rm -rf {DATA}/member && mv {RESTORING}/member {DATA}/member && rm -rf {RESTORING}")


class EtcdRestore(Fault):
    """Lose the etcd data of every member on ``nodes`` (all control-plane nodes), and restore it."""

    kind = "etcd-restore"
    needs_node_access = True
    node_access_level = "kubelet"
    node_capability = ("stops every control-plane node's kubelet and static pods, moves etcd's data aside and restores "
                       "a snapshot on each node")
    params = {
        "markers": Param("integer", "ConfigMaps written before the snapshot, and as many after it", minimum=1,
                         maximum=200),
        "lost_hold_seconds": Param("seconds", "how long the cluster stays without etcd before the restore starts",
                                   minimum=0, maximum=300),
        "baseline_seconds": Param("seconds", "probes before the snapshot", minimum=1, maximum=120),
        "after_seconds": Param("seconds", "probes after the revert", minimum=1, maximum=300),
    }

    def __init__(self, cluster: Cluster, nodes: list[str], token: str, step: str = "none") -> None:
        super().__init__(cluster)
        self.nodes, self.token, self.step = list(nodes), token, step
        self.timings: dict[str, float] = {}

    def target(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "step": self.step, "token": self.token, "lost": LOST}

    def evidence(self) -> dict[str, Any]:
        return {"step": self.step, "timings_seconds": {k: round(v, 3) for k, v in self.timings.items()}}

    def restarts_by_design(self) -> list[str]:
        return [f"{c}-{n}" for n in self.nodes for c in static_pods.CONTROL_PLANE_COMPONENTS]

    def inject(self) -> None:
        # Recorded first: from here on, recover looks for data moved aside on every node.
        self.step = "lost"
        self.checkpoint()
        for node in self.nodes:  # nothing of the control plane runs anywhere before any data moves
            static_pods.stop_kubelet_and_kill(self.cluster, node, static_pods.CONTROL_PLANE_COMPONENTS)
        for node in self.nodes:
            self.cluster.node_exec(node, ["sh", "-c", f"rm -rf {LOST} && mkdir -p {LOST} && mv {DATA}/member {LOST}/member"])

    def restore(self, snapshot: str, etcdutl: str) -> None:
        """Restore every member from the snapshot file ``snapshot`` (on this machine) with the
        ``etcdutl`` binary (on this machine), then start the kubelets. Raises ProviderError."""
        started = time.time()
        self.step = "restoring"
        self.checkpoint()
        members = {}
        for node in self.nodes:
            self.cluster.copy_to_node(node, snapshot, SNAPSHOT_ON_NODE)
            self.cluster.copy_to_node(node, etcdutl, ETCDUTL_ON_NODE)
            manifest = self.cluster.node_exec(node, ["cat", "/etc/kubernetes/manifests/etcd.yaml"]).stdout
            members[node] = (manifest_flag(manifest, "name"), manifest_flag(manifest, "initial-advertise-peer-urls"))
        self.timings["copy"] = time.time() - started
        initial_cluster = ",".join(f"{name}={peer}" for name, peer in members.values())
        for node, (name, peer) in members.items():
            self.cluster.node_exec(node, ["sh", "-c", restore_command(SNAPSHOT_ON_NODE, name, peer, initial_cluster,
                                                                      self.token)], timeout_seconds=300)
        self.timings["etcdutl"] = time.time() - started - self.timings["copy"]
        self.step = "restored"
        self.checkpoint()
        for node in self.nodes:
            static_pods.start_kubelet(self.cluster, node)
        self.timings["kubelets_started"] = time.time() - started

    def revert(self) -> None:
        errors = []
        restored = self.step == "restored"
        for node in self.nodes:  # every node gets its revert, whatever happened on the others
            keep_or_return = (f"rm -rf {LOST}" if restored else
                              f"rm -rf {RESTORING}; if [ -d {LOST}/member ]; then rm -rf {DATA}/member && "
                              f"mv {LOST}/member {DATA}/member; fi; rm -rf {LOST}")
            try:
                self.cluster.node_exec(node, ["sh", "-c", f"{keep_or_return}; rm -f {SNAPSHOT_ON_NODE} {ETCDUTL_ON_NODE}"])
                static_pods.restart_kubelet(self.cluster, node)
            except Exception as exc:
                errors.append(f"{node}: {exc}")
        if errors:
            raise FaultError("; ".join(errors))

    def verify_reverted(self) -> None:
        from harness.components.etcd import member_healthy
        from harness.expectations import wait_until

        started = time.time()
        problems = []
        for node in self.nodes:
            leftover = self.cluster.node_exec(node, ["sh", "-c", f"ls -d {LOST} {RESTORING} {SNAPSHOT_ON_NODE} "
                                                                 f"{ETCDUTL_ON_NODE} 2>/dev/null"], check=False).stdout.split()
            if leftover:
                problems.append(f"{node}: left behind {', '.join(leftover)}")
            if not static_pods.kubelet_active(self.cluster, node):
                problems.append(f"{node}: the kubelet is not active")
                continue
            left = max(1.0, started + HEALTHY_DEADLINE_SECONDS - time.time())
            if not wait_until(lambda n=node: member_healthy(self.cluster, n), left, interval_seconds=1.0).ok:
                problems.append(f"{node}: the etcd member does not serve a quorum read")
        left = max(1.0, started + HEALTHY_DEADLINE_SECONDS - time.time())
        if not wait_until(lambda: self.cluster.core.list_namespace(_request_timeout=5), left, interval_seconds=1.0).ok:
            problems.append("the API does not answer")
        if problems:
            raise FaultNotReverted("; ".join(problems))

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "EtcdRestore":
        return cls(cluster, target["nodes"], target["token"], target.get("step", "none"))
