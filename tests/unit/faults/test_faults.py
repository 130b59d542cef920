"""The revert guarantee of harness.faults: ledger before inject, revert in finally (errors, Ctrl-C,
SIGTERM), entry kept when the revert is not verified, and recover() after a crash.

The fault here is a stand-in that flips a flag: what is tested is the protocol around a fault,
which is pure logic; real faults are exercised on a real cluster by tests/cluster and drills/."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from harness.core.ledger import Ledger
from harness.faults import Fault, FaultNotReverted, injected, recover
from harness.kube.providers import Cluster, ClusterGone

STATE: dict[str, bool] = {}


class Flag(Fault):
    kind = "flag"

    def __init__(self, cluster, name="f", verify_ok=True, ledger=None):
        super().__init__(cluster)
        self.name, self.verify_ok, self.ledger = name, verify_ok, ledger
        self.seen_in_ledger_at_inject = None

    def target(self):
        return {"name": self.name, "verify_ok": self.verify_ok}

    def inject(self):
        if self.ledger is not None:
            self.seen_in_ledger_at_inject = [e.target["name"] for e in self.ledger.entries()]
        STATE[self.name] = True

    def revert(self):
        STATE[self.name] = False

    def verify_reverted(self):
        if not self.verify_ok or STATE.get(self.name):
            raise FaultNotReverted(self.name)

    @classmethod
    def from_target(cls, cluster, target):
        return cls(cluster, target["name"], target["verify_ok"])


@pytest.fixture
def cluster(tmp_path):
    return Cluster(name="unit", provider="kind", kubeconfig=Path(tmp_path / "kubeconfig"), context="kind-unit",
                   node_access=True)


@pytest.fixture
def ledger(tmp_path):
    return Ledger(tmp_path / "ledger")


def test_the_ledger_has_the_entry_before_inject_acts_and_not_after_a_verified_revert(cluster, ledger):
    fault = Flag(cluster, "a", ledger=ledger)
    with injected(fault, ledger):
        assert STATE["a"] is True
        assert [e.kind for e in ledger.entries()] == ["flag"]
    assert fault.seen_in_ledger_at_inject == ["a"]
    assert STATE["a"] is False and fault.revert_verified
    assert fault.injected_at <= fault.reverted_at
    assert ledger.entries() == []


def test_the_entry_says_whether_inject_returned(cluster, ledger):
    """A crash inside inject leaves an entry with no ``injected_at``; once inject returned, it is set."""
    class Broken(Flag):
        def inject(self):
            assert ledger.entries()[0].injected_at is None
            raise RuntimeError("half-way")

    with pytest.raises(RuntimeError):
        with injected(Broken(cluster, "c", ledger=ledger), ledger):
            pass
    with injected(Flag(cluster, "d"), ledger):
        (entry,) = ledger.entries()
        assert entry.injected_at is not None and entry.injected_at >= entry.recorded_at


def test_an_error_in_the_drill_still_reverts(cluster, ledger):
    with pytest.raises(RuntimeError):
        with injected(Flag(cluster, "b"), ledger):
            raise RuntimeError("expectation machinery broke")
    assert STATE["b"] is False
    assert ledger.entries() == []


def test_ctrl_c_reverts(cluster, ledger):
    with pytest.raises(KeyboardInterrupt):
        with injected(Flag(cluster, "c"), ledger):
            raise KeyboardInterrupt
    assert STATE["c"] is False and ledger.entries() == []


def test_sigterm_reverts_and_the_previous_handler_is_restored(cluster, ledger):
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        with injected(Flag(cluster, "d"), ledger):
            os.kill(os.getpid(), signal.SIGTERM)
    assert STATE["d"] is False and ledger.entries() == []
    assert signal.getsignal(signal.SIGTERM) is before


def test_an_unverified_revert_keeps_the_entry_for_kdrill_recover(cluster, ledger):
    with pytest.raises(FaultNotReverted):
        with injected(Flag(cluster, "e", verify_ok=False), ledger):
            pass
    assert [e.target["name"] for e in ledger.entries()] == ["e"]


def test_recover_reverts_what_a_crashed_process_left(cluster, ledger, monkeypatch):
    import harness.faults as faults

    monkeypatch.setattr(faults, "fault_class", lambda kind: Flag)
    # A crash after inject: the entry is on disk and the fault is in place.
    entry = ledger.record("flag", cluster=cluster.describe(), target={"name": "g", "verify_ok": True})
    STATE["g"] = True
    results = recover(ledger, lambda c: cluster)
    assert results == [{"id": entry.id, "kind": "flag", "reverted": True, "error": None}]
    assert STATE["g"] is False and ledger.entries() == []


def test_recover_keeps_entries_it_cannot_revert_and_drops_those_whose_cluster_is_gone(cluster, ledger, monkeypatch):
    import harness.faults as faults

    monkeypatch.setattr(faults, "fault_class", lambda kind: Flag)
    ledger.record("flag", cluster={"name": "gone"}, target={"name": "h", "verify_ok": True})
    ledger.record("flag", cluster={"name": "here"}, target={"name": "i", "verify_ok": False})

    def cluster_for(c):
        if c["name"] == "gone":
            raise ClusterGone("kind cluster gone no longer exists")
        return cluster

    results = {r["kind"] + str(i): r for i, r in enumerate(recover(ledger, cluster_for))}
    # newest first, as nested finally blocks would undo them
    assert [r["reverted"] for r in results.values()] == [False, True]
    assert "nothing to revert" in list(results.values())[1]["error"]
    assert [e.target["name"] for e in ledger.entries()] == ["i"]


def test_revert_times_bracket_the_revert(cluster, tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    fault = Flag(cluster, "times")
    with injected(fault, ledger):
        pass
    assert fault.injected_at <= fault.revert_started_at <= fault.reverted_at


def test_control_plane_stop_method_is_checked_and_old_entries_are_pauses():
    from harness.faults import FaultError
    from harness.faults.control_plane_stop import ControlPlaneStop

    cluster = Cluster(name="k", provider="kind", kubeconfig=Path("/nonexistent"), context=None, node_access=True,
                      nodes_by_role={"control-plane": ["cp1", "cp2"]})
    with pytest.raises(FaultError, match="method must be one of"):
        ControlPlaneStop(cluster, method="reboot")
    with pytest.raises(FaultError, match="needs hold_seconds"):
        ControlPlaneStop(cluster)  # its revert is set on the nodes before the stop: the hold must be known
    target = ControlPlaneStop(cluster, hold_seconds=60).target()
    assert target["method"] == "stop-components" and target["nodes"] == ["cp1", "cp2"]
    assert target["units"]["stop"].startswith("kdrill-cps-") and target["units"]["start"].endswith("-start")
    again = ControlPlaneStop.from_target(cluster, target)  # kdrill recover after a crash
    assert again.units == target["units"]
    old = ControlPlaneStop.from_target(cluster, {"nodes": ["cp1"]})  # written before there were methods
    assert old.method == "pause-node-containers" and old.restarts_by_design() == []
    before_timers = ControlPlaneStop.from_target(cluster, {"method": "stop-components", "nodes": ["cp1"]})
    assert before_timers.units == {}  # reverted by starting the kubelets, no timers to cancel
    assert "kube-apiserver-cp1" in ControlPlaneStop(cluster, hold_seconds=60).restarts_by_design()


class SignalledDuringRevert(Flag):
    def revert(self):
        os.kill(os.getpid(), signal.SIGTERM)  # as if CI's timeout hit mid-revert
        super().revert()


def test_a_signal_during_the_revert_waits_for_it_then_stops_the_run(cluster, tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    fault = SignalledDuringRevert(cluster, "late-signal")
    with pytest.raises(KeyboardInterrupt, match="during the revert"):
        with injected(fault, ledger):
            pass
    assert fault.revert_verified and not STATE["late-signal"] and ledger.entries() == []


def test_the_leader_is_found_from_the_lease_holder_identity():
    from harness.faults.leader_kill import node_of

    assert node_of("kdrill-ha-control-plane2_e9f3b8c4-a1e6-4686-90ad-620e4623b890") == "kdrill-ha-control-plane2"
    assert node_of(None) is None and node_of("no-uuid") is None


def test_new_faults_refuse_targets_they_cannot_act_on(tmp_path):
    from harness.faults import FaultError
    from harness.faults.leader_kill import LeaderKill
    from harness.faults.node_freeze import NodeFreeze

    cluster = Cluster(name="unit", provider="kind", kubeconfig=tmp_path / "k", context="kind-unit", node_access=True,
                      nodes_by_role={"control-plane": ["unit-control-plane"], "worker": ["unit-worker"]})
    with pytest.raises(FaultError, match="kube-controller-manager, kube-scheduler"):
        LeaderKill(cluster, "kube-apiserver")
    with pytest.raises(FaultError, match="takes a worker"):
        NodeFreeze(cluster, "unit-control-plane")
    fault = NodeFreeze(cluster, "unit-worker")
    assert NodeFreeze.from_target(cluster, fault.target()).node == "unit-worker"


def test_every_fault_module_is_registered_as_a_plug_in(tree_entry_points):
    """kdrill's own faults go through the same `kdrill.faults` entry points a plug-in uses: every
    fault module of this tree is registered in its pyproject.toml, and loads through it."""
    import importlib
    import pkgutil

    import harness.faults
    import harness.scaffolding
    from harness.faults import FaultError, fault_class, fault_kinds

    defined = {}
    modules = [f"{package.__name__}.{info.name}" for package in (harness.faults, harness.scaffolding)
               for info in pkgutil.iter_modules(package.__path__)]
    for name in modules:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Fault) and value.__module__ == module.__name__:
                defined.setdefault(value.kind, value)  # the first class of a kind is the registered one
    assert sorted(defined) == fault_kinds()
    for kind, cls in defined.items():
        assert fault_class(kind) is cls
    with pytest.raises(FaultError, match="Known: apf-flood, control-plane-stop"):
        fault_class("no-such-fault")


def test_the_installed_entry_points_are_this_trees():
    """What `pip install -e .` wrote is what pyproject.toml declares; otherwise `kdrill` itself
    (validate, run) does not know a fault added since, and says so."""
    import tomllib
    from importlib.metadata import entry_points

    pyproject = tomllib.loads((Path(__file__).resolve().parents[3] / "pyproject.toml").read_text(encoding="utf-8"))
    for group, declared in pyproject["project"]["entry-points"].items():
        if not group.startswith("kdrill."):
            continue
        installed = {ep.name: ep.value for ep in entry_points(group=group)}
        if installed != declared:
            missing = sorted(set(declared) - set(installed))
            pytest.skip(f"the installed kdrill metadata is not this tree's pyproject.toml ({group}: "
                        f"{'missing ' + ', '.join(missing) if missing else 'different entries'}); "
                        "run `pip install -e .` here (in another git worktree, the installed one is the "
                        "other checkout's)")


def test_every_measure_is_registered_as_a_plug_in():
    from harness.engine import measures

    assert measures.measure_kinds() == sorted(["success_ratio", "first_failure_seconds", "first_success_seconds", "recovery_seconds",
                                               "longest_failure_seconds", "longest_unanswered_seconds", "max_latency_seconds",
                                               "median_latency_seconds", "min_latency_seconds", "p99_latency_seconds", "max_value",
                                               "min_value", "rate_per_second", "flips"])
    with pytest.raises(KeyError, match="known: first_failure_seconds"):
        measures.measure_function("p99")


def test_the_coredns_revert_retries_a_conflict(tmp_path, monkeypatch):
    """`kdrill recover` met 409 Conflict putting CoreDNS's saved spec back while its limited rollout
    still wrote status (CI): a conflict is retried with a fresh read, not a failed revert."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from harness.faults.dns_saturation import LIMITED_ANNOTATION, DnsSaturation, _sanitize

    original = client.V1DeploymentSpec(replicas=2, selector=client.V1LabelSelector(match_labels={"k8s-app": "kube-dns"}),
                                       template=client.V1PodTemplateSpec())
    state = {"spec": client.V1DeploymentSpec(replicas=1, selector=original.selector, template=original.template),
             "annotations": {LIMITED_ANNOTATION: "1 x 30m"}, "replaces": 0}

    class Apps:
        def read_namespaced_deployment(self, *args, **kwargs):
            return client.V1Deployment(
                metadata=client.V1ObjectMeta(name="coredns", annotations=dict(state["annotations"]), generation=2),
                spec=state["spec"], status=client.V1DeploymentStatus(
                    observed_generation=2, replicas=state["spec"].replicas, updated_replicas=state["spec"].replicas,
                    ready_replicas=state["spec"].replicas, available_replicas=state["spec"].replicas))

        def replace_namespaced_deployment(self, name, namespace, body, **kwargs):
            state["replaces"] += 1
            if state["replaces"] == 1:
                raise ApiException(status=409, reason="Conflict")
            state["spec"] = client.V1DeploymentSpec(replicas=body["spec"]["replicas"], selector=original.selector,
                                                    template=original.template)
            state["annotations"] = body["metadata"].get("annotations", {})

    class Core:
        def read_namespaced_pod(self, *args, **kwargs):
            raise ApiException(status=404)

        delete_namespaced_pod = read_namespaced_pod

    cluster = Cluster(name="unit", provider="kind", kubeconfig=tmp_path / "k", context="kind-unit", node_access=True)
    monkeypatch.setattr(Cluster, "apps", property(lambda self: Apps()), raising=False)
    monkeypatch.setattr(Cluster, "core", property(lambda self: Core()), raising=False)
    fault = DnsSaturation(cluster, "ns", ["a.example.com."], original_spec=_sanitize(original))
    fault.revert()
    assert state["replaces"] == 2 and state["spec"].replicas == 2 and LIMITED_ANNOTATION not in state["annotations"]


class Blocked(Flag):
    """A revert another entry's revert unblocks: a webhook's scale-up its own fail-closed
    configuration refuses until the drill's objects (the configuration) are deleted."""

    kind = "blocked"

    def revert(self):
        if STATE.get("configuration"):
            raise RuntimeError("admission webhook denied the request: failed calling webhook")
        super().revert()


def test_recover_retries_a_revert_that_an_older_entry_unblocked(cluster, ledger, monkeypatch):
    import harness.faults as faults

    monkeypatch.setattr(faults, "fault_class", lambda kind: {"flag": Flag, "blocked": Blocked}[kind])
    ledger.record("flag", cluster=cluster.describe(), target={"name": "configuration", "verify_ok": True})
    ledger.record("blocked", cluster=cluster.describe(), target={"name": "scaled", "verify_ok": True})
    STATE.update(configuration=True, scaled=True)
    results = recover(ledger, lambda c: cluster)
    assert [(r["kind"], r["reverted"]) for r in results] == [("blocked", True), ("flag", True)]
    assert results[0]["error"].startswith("first try: RuntimeError: admission webhook denied") \
        and results[0]["error"].endswith("the retry succeeded") and results[1]["error"] is None
    assert STATE["scaled"] is False and STATE["configuration"] is False and ledger.entries() == []


def test_recover_does_not_retry_when_nothing_was_undone(cluster, ledger, monkeypatch):
    import harness.faults as faults

    monkeypatch.setattr(faults, "fault_class", lambda kind: Flag)
    ledger.record("flag", cluster=cluster.describe(), target={"name": "stuck", "verify_ok": False})
    calls = []
    monkeypatch.setattr(faults, "revert_and_verify", lambda *a: calls.append(a) or (_ for _ in ()).throw(
        FaultNotReverted("stuck")))
    [result] = recover(ledger, lambda c: cluster)
    assert not result["reverted"] and len(calls) == 1


class OddLevel(Flag):
    kind = "odd-level"
    needs_node_access = True
    node_access_level = "Exec"  # no channel gives it: skipped everywhere, kind included


def test_a_fault_needing_a_node_access_level_no_channel_gives_is_refused_when_loaded(monkeypatch):
    import importlib.metadata

    from harness.faults import FaultError, fault_class

    installed = importlib.metadata.entry_points

    def entry_points(**params):
        if params == {"group": "kdrill.faults"}:
            return [importlib.metadata.EntryPoint("odd-level", f"{__name__}:OddLevel", "kdrill.faults")]
        return installed(**params)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    with pytest.raises(FaultError, match="level 'Exec'; expected one of exec, kubelet, container"):
        fault_class("odd-level")


def test_validate_refuses_an_unknown_fault_kind_with_file_and_field_not_a_traceback(tmp_path, capsys):
    import yaml

    from harness.cli import main
    from harness.core import resources

    data = yaml.safe_load((resources.scenarios_dir() / "pod-delete.yaml").read_text())
    data["fault"]["kind"] = "no-such-fault"
    path = tmp_path / "pod-delete.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert main(["validate", str(path)]) == 2
    out = capsys.readouterr().out
    assert "refused:" in out and "'fault.kind'" in out and "no-such-fault" in out


class NodeFlag(Flag):
    kind = "node-flag"
    needs_node_access = True


class SilentCluster(Cluster):
    """A cluster whose API server never answers: every call fails to connect, as behind kind's
    load balancer when the API servers are down (TLS cut: SSLEOFError)."""

    calls = 0

    @property
    def core(self):
        import urllib3

        outer = self

        class Core:
            def get_api_resources(self, **kw):
                type(outer).calls += 1
                raise urllib3.exceptions.MaxRetryError(None, "/api/v1", "SSLEOFError: EOF")
        return Core()


def test_recover_does_not_try_what_only_the_api_can_revert_while_the_api_server_does_not_answer(
        tmp_path, ledger, monkeypatch):
    """CI 2026-12-04: a cluster half back after a Docker restart cost each drill namespace its
    240 s deletion deadline, twice. Now one bounded check per cluster, and the entries stay."""
    import harness.faults as faults

    monkeypatch.setattr(faults, "fault_class", lambda kind: {"flag": Flag, "node-flag": NodeFlag}[kind])
    monkeypatch.setattr(faults, "API_ANSWER_SECONDS", 0.1)
    silent = SilentCluster(name="half-up", provider="kind", kubeconfig=tmp_path / "k", context="kind-half-up",
                           node_access=True)
    for name in ("ns-a", "ns-b"):
        ledger.record("flag", cluster=silent.describe(), target={"name": name, "verify_ok": True})
    ledger.record("node-flag", cluster=silent.describe(), target={"name": "paused", "verify_ok": True})
    STATE.update({"ns-a": True, "ns-b": True, "paused": True})
    results = recover(ledger, lambda c: silent)
    # The node-level fault (newest) is reverted through the nodes all the same: it may be what
    # keeps the API server down.
    assert [(r["kind"], r["reverted"]) for r in results] == [("node-flag", True), ("flag", False), ("flag", False)]
    for r in results[1:]:
        assert r["error"].startswith("first try: FaultNotReverted: not tried: the API server of cluster half-up "
                                     "does not answer (no answer in ") and "s; last: MaxRetryError" in r["error"]
    assert STATE["ns-a"] and STATE["ns-b"] and not STATE["paused"]
    assert [e.target["name"] for e in ledger.entries()] == ["ns-a", "ns-b"]
    # One check for both entries in each pass (the retry pass asks again once).
    assert SilentCluster.calls <= 2 * 3


class NamespaceFlag(Flag):
    kind = "drill-namespace"
    deletions_started: list[str] = []

    def start_deletion(self):
        type(self).deletions_started.append(self.name)


class AnsweringCluster(Cluster):
    @property
    def core(self):
        class Core:
            def get_api_resources(self, **kw):
                return {}
        return Core()


def test_recover_starts_no_namespace_deletion_on_a_cluster_whose_api_server_does_not_answer(tmp_path, ledger,
                                                                                              monkeypatch):
    """Each deletion asked of a silent API server waits out the client's retries (about 20 s a
    namespace), before the check that then refuses to try it."""
    import harness.faults as faults

    monkeypatch.setattr(faults, "fault_class", lambda kind: {"drill-namespace": NamespaceFlag}[kind])
    monkeypatch.setattr(faults, "API_ANSWER_SECONDS", 0)
    monkeypatch.setattr(NamespaceFlag, "deletions_started", [])
    silent = SilentCluster(name="half-up", provider="kind", kubeconfig=tmp_path / "k", context="kind-half-up",
                           node_access=True)
    answering = AnsweringCluster(name="up", provider="kind", kubeconfig=tmp_path / "k2", context="kind-up",
                                 node_access=True)
    for name, where in (("ns-a", silent), ("ns-b", silent), ("ns-c", answering)):
        ledger.record("drill-namespace", cluster=where.describe(), target={"name": name, "verify_ok": True})
    STATE.update({"ns-a": True, "ns-b": True, "ns-c": True})
    clusters = {"half-up": silent, "up": answering}
    results = recover(ledger, lambda c: clusters[c["name"]])
    assert NamespaceFlag.deletions_started == ["ns-c"]  # the answering cluster's, started at once
    assert [(r["reverted"], "not tried" in (r["error"] or "")) for r in results] == [(True, False), (False, True),
                                                                                    (False, True)]
    assert [e.target["name"] for e in ledger.entries()] == ["ns-a", "ns-b"]


@pytest.mark.parametrize("stuck, asks", [
    ({"name": "stuck", "verify_ok": False}, 2),  # reverted on the nodes, unverified: may have changed the answer
    ({"name": "stuck"}, 1),  # an entry that never got to its revert (unreadable target) changed nothing
])
def test_recover_asks_a_silent_api_server_again_only_after_a_node_level_revert_ran(tmp_path, ledger, monkeypatch,
                                                                                   stuck, asks):
    """Each ask of a silent server costs up to a minute; a revert on the nodes that ran, even one
    whose verification failed, may be what brings the API server back."""
    import harness.faults as faults

    monkeypatch.setattr(faults, "fault_class", lambda kind: {"flag": Flag, "node-flag": NodeFlag}[kind])
    monkeypatch.setattr(faults, "API_ANSWER_SECONDS", 0)
    silent = SilentCluster(name="half-up", provider="kind", kubeconfig=tmp_path / "k", context="kind-half-up",
                           node_access=True)
    ledger.record("flag", cluster=silent.describe(), target={"name": "older", "verify_ok": True})
    ledger.record("node-flag", cluster=silent.describe(), target=stuck)
    ledger.record("flag", cluster=silent.describe(), target={"name": "newer", "verify_ok": True})
    STATE.update({"older": True, "stuck": True, "newer": True})
    before = SilentCluster.calls
    results = recover(ledger, lambda c: silent)
    assert [(r["kind"], r["reverted"]) for r in results] == [("flag", False), ("node-flag", False), ("flag", False)]
    assert SilentCluster.calls - before == asks
    assert len(ledger.entries()) == 3


def test_api_silence_is_none_as_soon_as_the_api_server_answers_with_any_status(tmp_path):
    from kubernetes.client.exceptions import ApiException

    from harness.faults import api_silence

    class Forbidding(Cluster):
        @property
        def core(self):
            class Core:
                def get_api_resources(self, **kw):
                    raise ApiException(status=403, reason="Forbidden")
            return Core()

    cluster = Forbidding(name="k", provider="existing", kubeconfig=tmp_path / "k", context="c", node_access=False)
    started = time.monotonic()
    assert api_silence(cluster, seconds=30) is None and time.monotonic() - started < 1


def test_what_a_revert_under_recover_learns_is_kept_for_the_next_recover(cluster, ledger, monkeypatch):
    # etcd-restore's revert records the outcomes it acted on, then cleans the nodes' own records
    # of them: a revert cut after that must leave them in the ledger (a safety review: under
    # recover, checkpoint() wrote nothing).
    import harness.faults as faults

    class Learns(Flag):
        def revert(self):
            self.name = "learned"
            self.checkpoint()
            raise RuntimeError("cut after acting")

    monkeypatch.setattr(faults, "fault_class", lambda kind: Learns)
    entry = ledger.record("flag", cluster=cluster.describe(), target={"name": "j", "verify_ok": True})
    [result] = recover(ledger, lambda c: cluster)
    assert not result["reverted"] and "cut after acting" in result["error"]
    assert ledger.get(entry.id).target["name"] == "learned"
