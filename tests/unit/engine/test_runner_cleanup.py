"""The runner's own cleanup: whatever keeping the evidence raises at the end of a drill (here,
handing over the timelines), the probe pod is deleted and everything entered on the runner's
stack (declared objects, registries) is reverted: a declared APIService left behind blocks every
namespace's deletion. Everything the runner calls on the cluster is a stand-in, handed to it as
its collaborators; the fault, the windows and the cleanup order are the runner's own."""

from __future__ import annotations

import contextlib
import threading

import pytest
from scenario_copies import load_edited

from harness.core.timeline import Sample, Timeline
from harness.engine import runner


class FakeProbe:
    """The runner's in-cluster probe pod: every target answers at once."""
    timeout_seconds = 1.0

    def __init__(self, cluster, namespace, name, targets, **kwargs) -> None:
        self.targets, self.started, self.deleted = targets, False, False
        FakeProbe.last = self

    def start(self):
        self.started = True
        return self

    def results(self):
        return [{"target": t, "ok": True} for t in self.targets] * runner.STEADY_CALLS

    def timelines(self, since=None):
        timelines = {}
        for t in self.targets:
            timelines[t] = Timeline(t)
            timelines[t].add(Sample(t=0.0, ok=True))
        return timelines

    def delete(self):
        self.deleted = True


class FakeObjectProbe:
    stopped: list = []

    def __init__(self, name, *args, **kwargs) -> None:
        self.name = name

    @classmethod
    def for_scenario(cls, spec, context):
        return cls(spec["name"])

    def start(self):
        return self

    def stop(self):
        FakeObjectProbe.stopped.append(self.name)
        return Timeline(self.name)


class FakeFault:
    injected_at = revert_started_at = reverted_at = None

    @classmethod
    def for_scenario(cls, cluster, namespace, params):
        return cls()

    def facts(self):
        return {}

    def facts_evidence(self):
        return {}


class FakeDrill:
    def __init__(self, scenario) -> None:
        self.scenario, self.name, self.namespace = scenario, scenario.name, "kdrill-x"
        self.cluster, self.ledger, self.params = object(), object(), {}
        self.workload, self.interval_seconds = scenario.workload, 0.5
        self.topology = type("Topology", (), {"workers": ["w1", "w2"]})()
        self.said, self.observed = [], {}

    @contextlib.contextmanager
    def phase(self, name, seconds=None):
        yield

    def fresh_namespace(self):
        pass

    @contextlib.contextmanager
    def inject(self, fault):
        fault.injected_at = fault.revert_started_at = fault.reverted_at = 1.0
        yield fault

    def observe(self, key, value):
        self.observed[key] = value

    def say(self, text):
        self.said.append(text)

    def add_timelines(self, timelines):
        raise RuntimeError("the evidence directory is gone")


class ActionsWithoutTimers(runner.Actions):
    def start(self, window_started_at, objects):
        return self


@pytest.fixture
def stubbed(monkeypatch):
    """(entered, exited, use): what was entered on and reverted from the runner's stack, in order,
    and the stand-ins the runner's phases call."""
    entered, exited = [], []

    @contextlib.contextmanager
    def fake_injected(fault, ledger, drill=None):
        entered.append(type(fault).__name__)
        try:
            yield fault
        finally:
            exited.append(type(fault).__name__)

    def fake_registries(drill, stack):
        stack.enter_context(fake_injected(type("DrillRegistry", (), {})(), None))
        return {"stuck": "r/stuck:t", "app": "r/app:t"}

    kinds = {kind: type(kind, (FakeObjectProbe,), {"in_probe_pod": kind == "incluster-http"})
             for kind in ("incluster-http", "object-state", "image-pulls", "metric")}
    use = runner.Collaborators(
        deploy_http_server=lambda *a, **k: None,
        service_targets=lambda *a, **k: {"name": "http://web", "clusterip": "http://10.96.0.1"},
        probe_pod=FakeProbe, probe_types=lambda: kinds, fault_class=lambda kind: FakeFault,
        set_up_registries=fake_registries, injected=fake_injected,
        drill_objects=lambda cluster, manifests, until_serving: type("DrillObjects", (), {"manifests": manifests, "kinds": {}})(),
        actions=ActionsWithoutTimers, hold=lambda seconds: None, guarded_hold=lambda *a, **k: None,
        pod_events=lambda *a, **k: [])
    monkeypatch.setattr(threading, "Timer", None)  # no action may start a real timer here
    return entered, exited, use


def test_an_error_keeping_the_evidence_still_removes_the_probe_pod_objects_and_registries(stubbed, tmp_path):
    entered, exited, use = stubbed
    scenario = load_edited(tmp_path, "serial-image-pull", lambda d: None)
    with pytest.raises(RuntimeError, match="evidence directory is gone") as info:
        runner.run(FakeDrill(scenario), use)
    assert info.value.__context__ is None, info.value.__context__  # the drill itself ran to its end
    assert FakeProbe.last.deleted
    assert entered == ["DrillRegistry", "DrillObjects"]
    assert exited == ["DrillObjects", "DrillRegistry"]  # newest first: the objects before their registries


def test_a_worker_the_cluster_does_not_have_stops_the_drill_before_anything_is_made(stubbed, tmp_path):
    entered, _, use = stubbed
    scenario = load_edited(tmp_path, "serial-image-pull", lambda d: d["workload"]["manifests"][3]["spec"]["template"]
                           ["spec"].update(nodeSelector={"kubernetes.io/hostname": "$(worker_3)"}))
    drill = FakeDrill(scenario)
    drill.fresh_namespace = lambda: pytest.fail("a namespace was made")
    with pytest.raises(runner.ScenarioError) as info:
        runner.run(drill, use)
    assert info.value.field == "workload.manifests" and info.value.got == "$(worker_3)"
    assert "workers this cluster has (2" in info.value.expected
    assert entered == []


def test_an_unreadable_probe_pod_log_still_stops_this_process_probes_and_cleans_up(stubbed, tmp_path, monkeypatch):
    entered, exited, use = stubbed

    def unreadable(self, since=None):
        raise ConnectionError("the API did not answer")

    monkeypatch.setattr(FakeProbe, "timelines", unreadable)
    monkeypatch.setattr(FakeDrill, "add_timelines", lambda self, timelines: None)
    FakeObjectProbe.stopped = []
    scenario = load_edited(tmp_path, "serial-image-pull", lambda d: None)
    with pytest.raises(ConnectionError):
        runner.run(FakeDrill(scenario), use)
    assert sorted(FakeObjectProbe.stopped) == ["control-pulls", "control-ready", "queued-pulls", "queued-ready",
                                               "stuck-ready"]
    assert FakeProbe.last.deleted and exited == ["DrillObjects", "DrillRegistry"]


def test_the_faults_facts_are_read_before_the_declared_objects_go(stubbed, tmp_path, monkeypatch):
    """A fact may compare the declared objects with what was there before the fault
    (control-plane-stop's pods and ReplicaSets): it is read while they still exist, and a fact
    that cannot be read is kept with why."""
    entered, exited, use = stubbed
    read_when: list = []

    def facts(self):
        read_when.append(list(exited))
        raise ConnectionError("the API did not answer")

    monkeypatch.setattr(FakeFault, "facts", facts)
    scenario = load_edited(tmp_path, "serial-image-pull", lambda d: None)
    drill = FakeDrill(scenario)
    with pytest.raises(RuntimeError, match="evidence directory is gone"):
        runner.run(drill, use)
    assert read_when == [[]]  # nothing removed yet
    assert drill.observed["fault_facts"] == {"values": {}, "error": "ConnectionError: the API did not answer"}
