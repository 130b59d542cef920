"""The platform's vital signs, watched in every drill whatever its claim.

A drill's verdict is only as good as what it looks at: a control-plane drill that called pods by
IP reported 1.0 while every lookup by name failed. So every drill, besides its own probes, records:

- ``api_read`` and ``api_write``: a LIST and an UPDATE through the API server, from the host;
- ``service_name`` and ``service_clusterip``: HTTP from a probe pod on a worker to a small
  Service in ``kdrill-vitals``, by its (absolute) DNS name through CoreDNS, and by ClusterIP;
- ``nodes_ready``: every node's Ready condition, through the API;
- ``kube_system_restarts``: container restarts added in kube-system across the drill.

Each is summarised over the drill's windows: ``baseline`` (before the first injection),
``fault`` (inside any injection window) and ``after`` (after the last revert). A vital sign is
*degraded* when its success ratio in a window is below :data:`HEALTHY_RATIO` (for nodes: a node
seen not Ready; for restarts: any restart). A degraded vital sign is *flagged* unless the
scenario names an expectation that covers it (``vital_signs:`` in the scenario file), so a
failure nobody asserted on is in the record and the report instead of behind a green verdict.

The Service and the in-cluster probe pod are set up once per session (:meth:`VitalSigns.ensure`)
and removed at its end (:meth:`VitalSigns.delete`); the probe pod stops by itself after
``max_seconds``. The namespace is in the fault ledger (kind ``drill-namespace``) from before it is
created until it is gone, so ``kdrill recover`` removes it after a crash like a drill's own. Everything stays inside the cluster: the name asked is the cluster's own.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from harness.core.ledger import Ledger
from harness.core.timeline import Sample, Timeline, success_ratio
from harness.core.waiting import wait_until, wait_until_or_raise
from harness.faults import recorded, revert_and_verify
from harness.kube.providers import Cluster
from harness.kube.workloads import deploy_http_server, ensure_namespace
from harness.probes import Probes
from harness.probes.api import ApiReadProbe, ApiUpdateProbe
from harness.probes.incluster import InClusterProbe, service_targets
from harness.probes.nodes import NodeReadyProbe, node_transitions
from harness.probes.pods import kube_system_snapshot, restarts_between
from harness.scaffolding.drill_namespace import DrillNamespace
from harness.spec.manifests import VITALS_NAMESPACE as NAMESPACE
from harness.spec.scenario import VITAL_SIGNS  # noqa: F401 - the names this module records
from harness.spec.schema import HEALTHY_RATIO

log = logging.getLogger("kdrill.vitals")

SERVICE = "vitals"
PROBE_POD = "vitals-probe"
WINDOWS = ("baseline", "fault", "after")


def drill_windows(start: float, end: float, injections: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """window name -> [(from, to)] in epoch seconds, from the drill's injection windows
    (``injected_at``/``reverted_at``; a window never reverted runs to ``end``). With no
    injection, the whole drill is ``baseline``."""
    spans = sorted((i["injected_at"], i.get("reverted_at") or end) for i in injections if i.get("injected_at"))
    if not spans:
        return {"baseline": [(start, end)], "fault": [], "after": []}
    return {"baseline": [(start, spans[0][0])], "fault": spans, "after": [(max(s[1] for s in spans), end)]}


def ratio_in(samples: list[Sample], spans: list[tuple[float, float]]) -> float | None:
    """Success ratio over the samples that fall in any of ``spans`` (None: no sample there)."""
    chosen = [s for s in samples if any(a <= s.t <= b for a, b in spans)]
    return success_ratio(chosen)


def nodes_ready_in(samples: list[Sample], spans: list[tuple[float, float]]) -> float | None:
    """Share of answered node samples in ``spans`` where every node was Ready (None: no answer)."""
    import json

    answered = [s for s in samples if s.ok and any(a <= s.t <= b for a, b in spans)]
    if not answered:
        return None
    return sum(all(n["ready"] == "True" for n in json.loads(s.detail).values()) for s in answered) / len(answered)


def assess(summary: dict[str, dict[str, Any]], covered: dict[str, str],
           windows: dict[str, list] | None = None) -> dict[str, dict[str, Any]]:
    """Add ``degraded`` (bool), ``covered_by``, ``unmeasured`` (windows of the drill with no
    sample of this sign) and ``flagged`` with its ``reason`` to each vital sign's summary, in
    place; returns it. Flagged: degraded with no covering expectation, not measured in a window
    the drill had, or not readable (``error``): a sign nobody saw is not a healthy one."""
    windows = windows or {w: [] for w in WINDOWS}
    for name, vital in summary.items():
        if name == "kube_system_restarts":
            degraded, unmeasured = bool(vital.get("added")), []
        else:
            degraded = any(vital.get(w) is not None and vital[w] < HEALTHY_RATIO for w in WINDOWS)
            unmeasured = [w for w in WINDOWS if windows.get(w) and vital.get(w) is None]
        vital["degraded"] = degraded
        vital["covered_by"] = covered.get(name)
        vital["unmeasured"] = unmeasured
        reasons = []
        if degraded and name not in covered:
            reasons.append("degraded with no expectation about it")
        if unmeasured and name not in covered:  # e.g. read through an API the fault takes down
            reasons.append(f"not measured: {', '.join(unmeasured)}")
        if vital.get("error"):
            reasons.append(f"not readable: {vital['error']}")
        vital["flagged"] = bool(reasons)
        vital["reason"] = "; ".join(reasons)
    return summary


@dataclass
class DrillVitals:
    """The host-side vital-sign probes of one drill, and the session's in-cluster probe."""

    session: "VitalSigns"
    probes: Probes
    kube_system_before: dict[str, dict]
    started_at: float = field(default_factory=time.time)

    def await_baseline(self, samples: int = 2, timeout_seconds: float = 30.0) -> bool:
        """Wait until every host-side vital sign has ``samples`` answers, so the baseline window
        before a drill's first injection is measured however short the drill's own baseline is.
        Returns whether they did (a drill goes on either way: a sign not measured is flagged)."""
        return self.await_samples(self.started_at, samples, timeout_seconds, "vital signs sampled before the fault")

    def await_after(self, injections: list[dict], samples: int = 2, timeout_seconds: float = 30.0) -> bool:
        """The same after the last revert, so the ``after`` window is measured however soon the
        drill ends once its fault is reverted (a no-op without an injection)."""
        ends = [i.get("reverted_at") for i in injections if i.get("injected_at")]
        if not ends or None in ends:
            return True
        return self.await_samples(max(ends), samples, timeout_seconds, "vital signs sampled after the revert")

    def await_samples(self, since: float, samples: int, timeout_seconds: float, description: str) -> bool:
        """Wait until every host-side vital sign has ``samples`` answers timed at or after
        ``since`` (epoch seconds); returns whether they did within ``timeout_seconds``."""

        def enough() -> bool:
            return all(sum(1 for x in tl.samples() if x.t >= since) >= samples
                       for tl in self.probes.timelines().values())

        return wait_until(enough, timeout_seconds, interval_seconds=0.25, description=description).ok

    def finish(self, injections: list[dict], covered: dict[str, str]) -> dict[str, Any]:
        """Stop the probes and summarise every vital sign over the drill's windows (see module
        doc). Never raises: a vital sign that cannot be read says why in ``error``."""
        self.probes.stop()
        end = time.time()
        windows = drill_windows(self.started_at, end, injections)
        timelines: dict[str, Timeline] = dict(self.probes.timelines())
        summary: dict[str, dict[str, Any]] = {}
        for name in ("api_read", "api_write"):
            samples = timelines[name].samples()
            summary[name] = {w: ratio_in(samples, windows[w]) for w in WINDOWS}
        try:
            inside = self.session.in_cluster_timelines(since=self.started_at)
            timelines.update({f"vitals/{k}": v for k, v in inside.items()})
            for name, target in (("service_name", "name"), ("service_clusterip", "clusterip")):
                samples = inside[target].samples() if target in inside else []
                summary[name] = {w: ratio_in(samples, windows[w]) for w in WINDOWS}
        except Exception as exc:  # the probe pod's log is evidence, not a reason to lose the rest
            for name in ("service_name", "service_clusterip"):
                summary[name] = {w: None for w in WINDOWS} | {"error": f"{type(exc).__name__}: {exc}"[:300]}
        node_samples = timelines["nodes"].samples()
        summary["nodes_ready"] = {w: nodes_ready_in(node_samples, windows[w]) for w in WINDOWS}
        summary["nodes_ready"]["transitions"] = node_transitions(timelines["nodes"])[:50]
        try:
            added = restarts_between(self.kube_system_before, kube_system_snapshot(self.session.cluster))
            by_design = {pod for i in injections for pod in i.get("restarts_by_design", [])}
            summary["kube_system_restarts"] = {"added": {p: n for p, n in added.items() if p not in by_design},
                                               "by_design": {p: n for p, n in added.items() if p in by_design}}
        except Exception as exc:
            summary["kube_system_restarts"] = {"added": {}, "error": f"{type(exc).__name__}: {exc}"[:300]}
        assess(summary, covered, windows)
        self.timelines = timelines
        return {"windows": windows, "signs": summary,
                "flagged": sorted(n for n, v in summary.items() if v["flagged"])}


class VitalSigns:
    """Session-wide vital-sign fixtures on ``cluster``; the probe pod runs on ``node``."""

    def __init__(self, cluster: Cluster, node: str | None, interval_seconds: float = 1.0,
                 max_seconds: float = 3 * 3600, ledger: Ledger | None = None) -> None:
        self.cluster, self.node = cluster, node
        self.interval_seconds, self.max_seconds = interval_seconds, max_seconds
        self.probe: InClusterProbe | None = None
        self.ledger = ledger
        self._namespace = DrillNamespace(cluster, NAMESPACE)
        self._entry = None
        # The samples of probe pods deleted by pause_probe: their log goes with them.
        self._kept: dict[str, list] = {}

    def in_cluster_timelines(self, since: float) -> dict[str, Timeline]:
        """The in-cluster probe's timelines (target -> Timeline) from ``since`` (epoch seconds),
        with those of the probe pods a pause deleted. Raises what reading the pod's log raises."""
        current = self.probe.timelines(since=since) if self.probe is not None else {}
        out: dict[str, Timeline] = {}
        for target in sorted(set(self._kept) | set(current)):
            timeline = out[target] = Timeline(target)
            kept = [x for x in self._kept.get(target, []) if x.t >= since]
            for sample in sorted(kept + (current[target].samples() if target in current else []), key=lambda x: x.t):
                timeline.add(sample)
        return out

    def ensure(self) -> None:
        """Create the namespace, the Service with 2 HTTP pods, and the probe pod, unless they run
        already. A namespace still terminating (an earlier session's) is waited out first.
        Raises ApiException or ConditionTimeout when the cluster cannot run them."""
        if self.ledger is not None and self._entry is None:
            self._entry = recorded(self._namespace, self.ledger, drill="vital-signs")
        wait_until_or_raise(self._namespace_usable, 240, interval_seconds=1.0,
                            description=f"namespace {NAMESPACE} not terminating")
        ensure_namespace(self.cluster, NAMESPACE)
        try:
            self.cluster.apps.read_namespaced_deployment(SERVICE, NAMESPACE, _request_timeout=10)
        except ApiException as exc:
            if exc.status != 404:
                raise
            deploy_http_server(self.cluster, NAMESPACE, SERVICE, 2)
        if self.probe is not None and self._probe_running():
            return
        targets = service_targets(self.cluster, NAMESPACE, SERVICE, f"app={SERVICE}")
        self.probe = InClusterProbe(self.cluster, NAMESPACE, PROBE_POD,
                                    {"name": targets["name"], "clusterip": targets["clusterip"]},
                                    interval_seconds=self.interval_seconds, duration_seconds=self.max_seconds,
                                    max_requests=int(3 * self.max_seconds / self.interval_seconds), node=self.node)
        try:
            self.cluster.core.delete_namespaced_pod(PROBE_POD, NAMESPACE, grace_period_seconds=0, _request_timeout=10)

            wait_until(lambda: not self._probe_exists(), 60)
        except ApiException as exc:
            if exc.status != 404:
                raise
        self.probe.start()

    def pause_probe(self) -> None:
        """Delete the in-cluster probe pod until the next :meth:`ensure` (for a drill that counts
        every query CoreDNS answers, where the probe's own lookups would be counted). Raises
        ApiException."""
        kept: dict[str, list] = {}
        if self.probe is not None:
            try:
                kept = {target: timeline.samples() for target, timeline in self.probe.timelines().items()}
            except Exception as exc:  # the samples are evidence; the pause must still happen
                log.warning("could not keep the in-cluster vital-sign samples before the pause: %s", exc)
        try:
            self.cluster.core.delete_namespaced_pod(PROBE_POD, NAMESPACE, grace_period_seconds=0, _request_timeout=10)
        except ApiException as exc:
            if exc.status != 404:
                raise  # the pod, and its log, are still there: nothing kept twice
        for target, samples in kept.items():
            self._kept.setdefault(target, []).extend(samples)

        wait_until(lambda: not self._probe_exists(), 60)
        self.probe = None

    def _namespace_usable(self) -> bool:
        try:
            namespace = self.cluster.core.read_namespace(NAMESPACE, _request_timeout=5)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return namespace.metadata.deletion_timestamp is None

    def _probe_exists(self) -> bool:
        try:
            self.cluster.core.read_namespaced_pod(PROBE_POD, NAMESPACE, _request_timeout=5)
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

    def _probe_running(self) -> bool:
        try:
            pod = self.cluster.core.read_namespaced_pod(PROBE_POD, NAMESPACE, _request_timeout=5)
        except ApiException:
            return False
        return pod.status.phase == "Running"

    def watch(self) -> DrillVitals:
        """Start the host-side probes for one drill. Raises what :meth:`ensure` raises."""
        self.ensure()
        bound = 3600.0
        probes = Probes(
            ApiReadProbe("api_read", self.cluster, NAMESPACE, interval_seconds=self.interval_seconds, max_seconds=bound),
            ApiUpdateProbe("api_write", self.cluster, NAMESPACE, "vitals-write", interval_seconds=self.interval_seconds,
                           max_seconds=bound),
            NodeReadyProbe("nodes", self.cluster, interval_seconds=2.0, max_seconds=bound),
        )
        before = kube_system_snapshot(self.cluster)
        started = time.time()  # before the first sample, so the baseline window holds it
        probes.start()
        return DrillVitals(self, probes, before, started_at=started)

    def delete(self) -> None:
        """Remove the namespace (and with it the probe pod) and wait until it is gone, so a
        session that follows does not meet it terminating; its ledger entry goes only then.
        Never raises (a namespace left behind keeps its entry for ``kdrill recover``)."""
        try:
            if self._entry is not None and self.ledger is not None:
                revert_and_verify(self._namespace, self.ledger, self._entry.id)
                self._entry = None
            else:
                self._namespace.revert()
        except Exception as exc:
            log.warning("could not delete namespace %s: %s", NAMESPACE, exc)
