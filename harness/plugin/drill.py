"""One drill run: the scenario, the cluster, the fault, the probes, the expectations, and the
evidence they leave, written even when the drill fails.

A drill test receives a :class:`Drill` from the ``drill`` fixture and reads like the scenario:

    with drill.phase("baseline"): ...
    with drill.inject(SomeFault(drill.cluster, **drill.params)):
        with drill.phase("fault"): ...
    drill.measure("api_recovery_seconds", seconds, became_true_at=t)
    drill.expectations.assert_all()
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import allure
import pytest

from harness.components.topology import Topology
from harness.core.ledger import Ledger
from harness.core.timeline import Timeline, summarize
from harness.core.waiting import WaitLog, log_waits
from harness.engine.expectations import ExpectationFailed, Expectations
from harness.evidence.records import DrillRecord, EvidenceWriter
from harness.faults import Fault, injected, recorded
from harness.kube.providers import NODE_CHANNEL_SAYS, Cluster
from harness.probes import host_pressure
from harness.probes.host_pressure import HostCpuPressure
from harness.scaffolding.drill_namespace import DrillNamespace, PendingDeletion
from harness.spec.scenario import Scenario, drill_namespace

log = logging.getLogger("kdrill.drill")


class Drill:
    """State of one drill case. ``params`` are the scenario's fault params merged with the case's."""

    def __init__(self, scenario: Scenario, case: str | None, cluster: Cluster, topology: Topology,
                 ledger: Ledger, writer: EvidenceWriter, run_id: str,
                 progress: Callable[[str], None] = lambda line: None) -> None:
        self.scenario, self.case, self.cluster, self.topology = scenario, case, cluster, topology
        self.ledger, self.writer, self.progress = ledger, writer, progress
        self.params: dict[str, Any] = scenario.params_for(case)
        self.workload: dict[str, Any] = dict(scenario.workload or {})
        self.expectations = Expectations(scenario.expectations_for(case))
        self.record = DrillRecord.for_scenario(run_id, scenario, case)
        self.record.cluster = {"name": cluster.name, "provider": cluster.provider, "context": cluster.context,
                               "kubernetes_version": topology.kubernetes_version, "nodes": topology.nodes()}
        self.timelines: dict[str, Timeline] = {}
        self.vitals = None  # harness.engine.vitals.DrillVitals, set by the plugin
        self.interval_seconds = scenario.probe_interval_seconds
        self.namespace = drill_namespace(scenario.name, case)
        self._namespaces: list[tuple[Any, Any]] = []  # (DrillNamespace, ledger entry)
        # Every wait from here to finish() is in the record, with the last error it met.
        self.waits = WaitLog()
        log_waits(self.waits)
        # The machine under the cluster: a timing missed while it was saturated says so.
        self.host_pressure = HostCpuPressure().start() if HostCpuPressure.available() else None

    @property
    def name(self) -> str:
        return self.scenario.name + (f"[{self.case}]" if self.case else "")

    def say(self, message: str) -> None:
        """A progress line for the person watching (and the log)."""
        line = f"[{self.name}] {message}"
        log.info(line)
        self.progress(line)

    @contextmanager
    def phase(self, name: str, seconds: float | None = None) -> Iterator[dict]:
        """Record a named phase with its start and end (epoch seconds), as an Allure step too.
        ``seconds``: a window's length, said with the time it ends."""
        entry = {"name": name, "started_at": time.time(), "ended_at": None}
        self.record.phases.append(entry)
        self.say(f"phase {name}" + (f": {seconds:.0f} s, until "
                                    f"{time.strftime('%H:%M:%S', time.localtime(entry['started_at'] + seconds))}"
                                    if seconds is not None else ""))
        with allure.step(f"phase: {name}"):
            try:
                yield entry
            finally:
                entry["ended_at"] = time.time()

    @contextmanager
    def inject(self, fault: Fault) -> Iterator[Fault]:
        """Inject ``fault`` through the ledger (see :func:`harness.faults.injected`), and record
        what, where and when in the evidence, including the revert. A fault that needs more node
        access than the cluster gives (a case's own fault among them) skips the drill, with the
        reason, before anything is touched."""
        if fault.needs_node_access and not self.cluster.node_access_gives(fault.node_access_needed()):

            pytest.skip(f"fault {fault.kind} needs node access that {self.cluster.name} (node access: "
                        f"{NODE_CHANNEL_SAYS[self.cluster.node_channel]}) does not give: it {fault.node_capability} "
                        f"(needs node access: {fault.node_access_needed()})")
        self.record.fault.update({"kind": fault.kind, "where": fault.where()})
        if self.vitals is not None and not self.record.observations.get("injections"):
            self.vitals.await_baseline()  # the platform's vital signs have a baseline too
        self.say(f"injecting {fault.kind} on {fault.where()}")
        try:
            with allure.step(f"fault: {fault.kind} on {fault.where()}"):
                with injected(fault, self.ledger, drill=self.name) as active:
                    self.record.fault["injected_at"] = active.injected_at
                    yield active
                    if self.vitals is not None:
                        # A fault window shorter than the vital signs' interval (a planted Secret
                        # lives about 2 s) would leave them unmeasured there: one sample each first.
                        self.vitals.await_samples(active.injected_at, 1, 10.0, "vital signs sampled during the fault")
                    self.say(f"reverting {fault.kind}")
        finally:
            self.record.fault.update({"injected_at": fault.injected_at, "reverted_at": fault.reverted_at,
                                      "revert_verified": fault.revert_verified, "where": fault.where()})
            # A drill may inject more than once (e.g. one member, then two): keep every window.
            self.record.observations.setdefault("injections", []).append(
                {"kind": fault.kind, "method": getattr(fault, "method", None), "where": fault.where(),
                 "injected_at": fault.injected_at, "revert_started_at": fault.revert_started_at,
                 "reverted_at": fault.reverted_at,
                 "revert_verified": fault.revert_verified, "restarts_by_design": fault.restarts_by_design(),
                 **fault.evidence()})
            self.say(f"{fault.kind} reverted (verified: {fault.revert_verified})")

    def fresh_namespace(self, labels: dict[str, str] | None = None, name: str | None = None) -> str:
        """Delete what an interrupted earlier run left in namespace ``name`` (default: the
        drill's own), then create it, recorded in the ledger first (kind ``drill-namespace``) so
        ``kdrill recover`` removes it after a crash; :meth:`start_namespace_removal` deletes every
        namespace made here (their entries leave once they are gone). Returns the name."""

        namespace = DrillNamespace(self.cluster, name or self.namespace, labels)
        entry = recorded(namespace, self.ledger, drill=self.name)
        self._namespaces.append((namespace, entry))
        namespace.inject()
        return namespace.namespace

    def start_namespace_removal(self, pending: list, retry_seconds: float = 60.0) -> None:
        """Start deleting the namespaces made by :meth:`fresh_namespace`, newest first, without
        waiting for their finalisation: their Services (and with them the fixed NodePorts) go at
        once, the rest goes while the next drill sets up. Each is appended to ``pending`` (a
        :class:`harness.scaffolding.drill_namespace.PendingDeletion`) before it is asked for, its
        ledger entry staying until :func:`harness.scaffolding.drill_namespace.settle` sees it gone; a
        deletion the API refused for ``retry_seconds`` (seconds) stays there, to be asked again."""

        while self._namespaces:
            namespace, entry = self._namespaces.pop()
            deletion = PendingDeletion(namespace, entry.id, time.time())
            pending.append(deletion)
            if not deletion.start(retry_seconds):
                self.say(f"could not ask for the deletion of namespace {namespace.namespace} "
                         f"({deletion.error}); asked again before the next drill")

    @contextmanager
    def quiet_vitals(self, why: str) -> Iterator[None]:
        """Stop the in-cluster vital-sign probe for the block (its lookups reach CoreDNS): for a
        measurement that counts every query CoreDNS answers. The pause and ``why`` are recorded
        (``observations.vital_signs_paused``); the probe starts again after the block."""
        started = time.time()
        session = getattr(self.vitals, "session", None)
        if session is not None:
            session.pause_probe()
        try:
            yield
        finally:
            if session is not None:
                session.ensure()
            self.record.observations.setdefault("vital_signs_paused", []).append(
                {"from": started, "to": time.time(), "why": why})

    def add_timelines(self, timelines: dict[str, Timeline]) -> None:
        self.timelines.update(timelines)

    def measure(self, name: str, measured: Any, detail: str = "", became_true_at: float | None = None):
        outcome = self.expectations.measure(name, measured, detail=detail, became_true_at=became_true_at)
        self.say(f"{'ok  ' if outcome.verdict == 'passed' else 'FAIL'} {outcome.line()}")
        return outcome

    def observe(self, key: str, value: Any) -> None:
        """A fact reported in the evidence without asserting it."""
        self.record.observations[key] = value

    def finish(self, error: BaseException | None = None) -> Path:
        """Summarise probes, set the verdict, write the JSON record and timelines, attach them to
        Allure. Called by the fixture after the test body, whatever happened."""
        # pytest.skip in a drill: nothing there to drill (e.g. no webhook installed), said why.
        skipped = error is not None and isinstance(error, pytest.skip.Exception)
        if skipped:
            self.record.errors.append(f"skipped: {error}")
        elif error is not None and not isinstance(error, ExpectationFailed):
            self.record.errors.append(f"{type(error).__name__}: {error}")
        log_waits(None)
        if self.host_pressure is not None:
            self.add_timelines({self.host_pressure.name: self.host_pressure.stop()})
            self.observe("host_cpu_pressure", {
                "what": "fraction of the time runnable work on this machine waited for a CPU (/proc/pressure/cpu)",
                "by_phase": host_pressure.by_phase(self.host_pressure.timeline, self.record.phases)})
        self.record.waits = self.waits.to_list()
        self.record.waits_dropped = self.waits.dropped
        self.record.probes = {name: summarize(name, tl.samples()) for name, tl in self.timelines.items()}
        self.record.apply_expectations(self.expectations)
        if skipped:
            self.record.verdict = "skipped"
        self.record.finish()
        timeline_path = self.writer.write_timelines(self.record.stem, self.timelines)
        self.record.evidence_files["timeline"] = timeline_path.name
        path = self.writer.write_record(self.record)
        allure.attach.file(str(path), name=f"{self.record.stem}.json", attachment_type=allure.attachment_type.JSON)
        allure.attach(json.dumps([o.to_dict() for o in self.expectations.outcomes()], indent=2),
                      name="expectations", attachment_type=allure.attachment_type.JSON)
        self.say(f"verdict {self.record.verdict}; evidence {path}")
        return path
