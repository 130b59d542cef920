"""etcd quorum probe: asks etcd itself, about once a second, how many members serve a quorum
read and who the leader is, so quorum loss and recovery are timed from etcd's own answers
while a fault is injected and reverted (a revert's own verification wait does not hide it)."""

from __future__ import annotations

import time

from harness.components import etcd
from harness.core.timeline import Sample
from harness.kube.providers import Cluster
from harness.probes import Probe


class EtcdQuorumProbe(Probe):
    """A sample is ok when at least ``quorum(N)`` of the N ``endpoints`` are healthy and a leader
    is agreed on; ``labels``: ``healthy`` (count) and ``leader`` (member id or "")."""

    def __init__(self, name: str, cluster: Cluster, control_plane: list[str], endpoints: list[str],
                 **kwargs) -> None:
        kwargs.setdefault("interval_seconds", 1.0)
        super().__init__(name, **kwargs)
        self.cluster, self.control_plane, self.endpoints = cluster, control_plane, endpoints

    def sample(self) -> Sample:
        started = time.time()
        via = etcd.running_member_node(self.cluster, self.control_plane)
        healthy = sum(etcd.endpoint_health(self.cluster, via, self.endpoints).values())
        leader = etcd.leader_id(self.cluster, via, self.endpoints) if healthy else None
        ok = healthy >= etcd.quorum(len(self.endpoints)) and leader is not None
        return Sample(t=started, ok=ok, latency_seconds=time.time() - started,
                      detail=f"{healthy}/{len(self.endpoints)} healthy, leader {leader or 'none'}",
                      labels={"healthy": str(healthy), "leader": leader or ""})
