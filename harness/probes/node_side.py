"""Node-side container sampler: a namespace's containers as each node's container runtime sees
them, sampled on the node itself and read back afterwards.

For windows in which kdrill cannot reach the nodes: through the node agent every command goes
through the API server and the node's kubelet, so with the control plane stopped a
:class:`harness.probes.pods.NodeContainerProbe` sees nothing. This sampler runs as a unit on the
node (:mod:`harness.components.node_units`), bounded in count and time, writes its samples to the
node's ``/run``, and :meth:`NodeContainerSampler.collect` reads them once the node answers again.
The same on every node channel, so a drill has one path.

Sample times are put on the host's clock with each node's measured clock offset
(:func:`harness.components.topology.clock_offset`, node minus host), where one is given; otherwise they are
the node's clock (on kind, this machine's). Each sample of the returned timeline
is one node's listing: ``detail`` is JSON ``{node: {container id: info}}`` as
:func:`harness.probes.pods.running_container_ids` reads it, ``labels`` ``{"node": node}``; a
listing that failed on the node is a sample with ``ok`` False.
"""

from __future__ import annotations

import json
import shlex
import time
import uuid

from harness.components import node_units
from harness.core.timeline import Sample, Timeline
from harness.kube.providers import Cluster
from harness.probes.pods import containers_of, crictl_ps_command

# A sample's script (crictl ps) takes about 0.05 s on a node here; started this long ahead.
START_LEAD_SECONDS = 1.0


class NodeContainerSampler:
    """Sample ``namespace``'s containers on ``nodes`` every ``interval_seconds`` (seconds) for
    ``duration_seconds`` (seconds), on the nodes; ``clock_offsets`` (node -> seconds, node minus
    host) puts the samples on the host's clock; ``unit`` names the node unit (default: a new
    ``kdrill-sampler-...`` name). :meth:`start` raises what
    :func:`harness.components.node_units.schedule` raises."""

    def __init__(self, name: str, cluster: Cluster, nodes: list[str], namespace: str,
                 interval_seconds: float, duration_seconds: float,
                 clock_offsets: dict[str, float] | None = None, unit: str | None = None) -> None:
        if interval_seconds <= 0 or duration_seconds <= 0:
            raise ValueError(f"interval_seconds and duration_seconds must be positive, got {interval_seconds}, "
                             f"{duration_seconds}")
        self.name, self.cluster, self.nodes, self.namespace = name, cluster, list(nodes), namespace
        self.interval_seconds = interval_seconds
        self.clock_offsets = dict(clock_offsets or {})
        self.count = max(1, int(duration_seconds / interval_seconds) + 1)
        # A name given beforehand lets a fault put the unit in its ledger entry before it is set.
        self.unit = unit or f"kdrill-sampler-{uuid.uuid4().hex[:8]}"
        self.started_at: float | None = None
        self.errors: dict[str, str] = {}

    def start(self) -> "NodeContainerSampler":
        command = " ".join(shlex.quote(part) for part in crictl_ps_command(self.namespace))
        script = node_units.sampler_script(self.unit, command, self.interval_seconds, self.count)
        # Killed by systemd if it overruns its count by half again (a slow node): bounded in time too.
        runtime = self.count * self.interval_seconds * 1.5 + 30
        for node in self.nodes:  # each node's own start: one command per node may take a second
            at = time.time() + START_LEAD_SECONDS
            node_units.schedule(self.cluster, node, self.unit, script, at, runtime)
            self.started_at = self.started_at or at
        return self

    def collect(self) -> Timeline:
        """Stop the samplers, read every node's samples and remove them from the node. A node
        that cannot be read is in :attr:`errors` (node -> why) and has no samples."""
        timeline = Timeline(self.name)
        rows: list[Sample] = []
        for node in self.nodes:
            try:
                node_units.cancel(self.cluster, node, [self.unit])
                lines = node_units.samples(self.cluster, node, self.unit)
                node_units.forget(self.cluster, node, [self.unit])
            except Exception as exc:  # the evidence says which node was not read, and why
                self.errors[node] = f"{type(exc).__name__}: {exc}"[:300]
                continue
            for line in lines:
                if not isinstance(line, dict) or not isinstance(line.get("t"), (int, float)):
                    continue  # not a line the sampler wrote
                ok = bool(line.get("ok")) and isinstance(line.get("out"), dict)
                detail = json.dumps({node: containers_of(line["out"])}) if ok else json.dumps({node: {}})
                t = float(line["t"]) - self.clock_offsets.get(node, 0.0)
                rows.append(Sample(t=t, ok=ok, latency_seconds=None, detail=detail, labels={"node": node}))
        for sample in sorted(rows, key=lambda s: s.t):
            timeline.add(sample)
        return timeline
