"""Drill namespaces are deleted without waiting for their finalisation (the next drill sets up
meanwhile), their Services first (fixed NodePorts), and leave the ledger only once gone; recover
starts the deletion of a crashed drill's namespaces together. The API is a fake that keeps the
objects in dicts: what is tested is the order and the bookkeeping, which are pure logic."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from kubernetes.client.exceptions import ApiException

import harness.faults as faults
from harness.core.ledger import Ledger
from harness.kube.providers import Cluster
from harness.scaffolding.drill_namespace import DrillNamespace, PendingDeletion, settle


class FakeCore:
    """Namespaces (name -> uid) and Services (namespace -> names); every call logged in order."""

    def __init__(self):
        self.namespaces: dict[str, str] = {}
        self.terminating: set[str] = set()
        self.services: dict[str, list[str]] = {}
        self.calls: list[tuple[str, str]] = []

    def _ns(self, name):
        if name not in self.namespaces:
            raise ApiException(status=404)
        return self.namespaces[name]

    def read_namespace(self, name, **_):
        return SimpleNamespace(metadata=SimpleNamespace(uid=self._ns(name)))

    def list_namespaced_service(self, ns, **_):
        return SimpleNamespace(items=[SimpleNamespace(metadata=SimpleNamespace(name=n))
                                      for n in self.services.get(ns, [])])

    def delete_namespaced_service(self, name, ns, **_):
        self.calls.append(("delete-service", f"{ns}/{name}"))
        self.services[ns].remove(name)

    def delete_namespace(self, name, **_):
        self._ns(name)
        self.calls.append(("delete-namespace", name))
        self.terminating.add(name)

    def finalise(self, name):
        """What the namespace controller does, later."""
        self.namespaces.pop(name, None)
        self.terminating.discard(name)


@pytest.fixture
def core():
    return FakeCore()


class FakeCluster(Cluster):
    fake: FakeCore | None = None

    @property
    def core(self):  # the fake stands in for the API client
        return self.fake


@pytest.fixture
def cluster(tmp_path, core):
    c = FakeCluster(name="unit", provider="kind", kubeconfig=Path(tmp_path / "kubeconfig"), context="kind-unit",
                    node_access=True)
    c.fake = core
    return c


def pending_for(cluster, ledger, name):
    entry = ledger.record("drill-namespace", cluster=cluster.describe(), target={"namespace": name})
    deletion = PendingDeletion(DrillNamespace(cluster, name), entry.id, 0.0)
    deletion.start()
    return deletion


def test_services_go_before_the_namespace_and_nothing_waits(cluster, core, tmp_path):
    core.namespaces["kdrill-a"] = "uid-a"
    core.services["kdrill-a"] = ["web", "other"]
    p = pending_for(cluster, Ledger(tmp_path / "ledger"), "kdrill-a")
    assert p.uid == "uid-a"
    assert core.calls == [("delete-service", "kdrill-a/web"), ("delete-service", "kdrill-a/other"),
                          ("delete-namespace", "kdrill-a")]
    assert "kdrill-a" in core.namespaces  # still finalising: start_deletion returned anyway


def test_a_namespace_already_gone_has_no_uid_and_counts_as_gone(cluster, core):
    ns = DrillNamespace(cluster, "kdrill-none")
    assert ns.start_deletion() is None
    assert ns.gone(None)


def test_the_entry_leaves_the_ledger_only_once_the_namespace_is_gone(cluster, core, tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    core.namespaces["kdrill-a"] = "uid-a"
    p = pending_for(cluster, ledger, "kdrill-a")
    assert settle([p], ledger) == [p]
    assert [e.target["namespace"] for e in ledger.entries()] == ["kdrill-a"]
    core.finalise("kdrill-a")
    assert settle([p], ledger) == []
    assert ledger.entries() == []


def test_a_namespace_made_again_under_the_same_name_does_not_hold_the_old_entry(cluster, core, tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    core.namespaces["kdrill-a"] = "uid-old"
    p = pending_for(cluster, ledger, "kdrill-a")
    core.finalise("kdrill-a")
    core.namespaces["kdrill-a"] = "uid-new"  # the next run of the same drill made it afresh
    assert settle([p], ledger) == []


def test_an_api_error_counts_as_still_there(cluster, core, tmp_path, monkeypatch):
    ledger = Ledger(tmp_path / "ledger")
    core.namespaces["kdrill-a"] = "uid-a"
    p = pending_for(cluster, ledger, "kdrill-a")

    def down(*a, **k):
        raise ApiException(status=503)

    monkeypatch.setattr(core, "read_namespace", down)
    assert settle([p], ledger) == [p]
    assert len(ledger.entries()) == 1


def test_recover_starts_every_namespace_deletion_before_waiting_for_the_first(cluster, core, tmp_path, monkeypatch):
    ledger = Ledger(tmp_path / "ledger")
    for name in ("kdrill-vitals", "kdrill-drill"):
        core.namespaces[name] = f"uid-{name}"
        ledger.record("drill-namespace", cluster=cluster.describe(), target={"namespace": name})
    waited: list[tuple[str, set]] = []

    def revert(self):  # the blocking revert: what had been asked for when it starts waiting
        waited.append((self.namespace, set(core.terminating)))
        core.finalise(self.namespace)

    monkeypatch.setattr(DrillNamespace, "revert", revert)
    monkeypatch.setattr(faults, "owner_alive", lambda entry: False)
    results = faults.recover(ledger, lambda c: cluster)
    assert [r["reverted"] for r in results] == [True, True]
    assert waited[0] == ("kdrill-drill", {"kdrill-vitals", "kdrill-drill"})
    assert ledger.entries() == []


def test_a_deletion_the_api_refused_stays_pending_and_is_asked_again(cluster, core, tmp_path, monkeypatch):
    ledger = Ledger(tmp_path / "ledger")
    core.namespaces["kdrill-a"] = "uid-a"
    real = core.delete_namespace

    def refused(*a, **k):
        raise ApiException(status=503)

    monkeypatch.setattr(core, "delete_namespace", refused)
    p = pending_for(cluster, ledger, "kdrill-a")
    assert not p.started and "503" in p.error
    assert settle([p], ledger) == [p]  # still refused: kept, entry kept
    monkeypatch.setattr(core, "delete_namespace", real)
    assert settle([p], ledger) == [p] and p.started  # asked again, now finalising
    assert ("delete-namespace", "kdrill-a") in core.calls
    core.finalise("kdrill-a")
    assert settle([p], ledger) == [] and ledger.entries() == []


def test_the_drill_hands_over_every_namespace_even_when_one_deletion_is_refused(cluster, core, tmp_path, monkeypatch):
    from harness.plugin.drill import Drill

    ledger = Ledger(tmp_path / "ledger")
    drill = Drill.__new__(Drill)
    drill._namespaces, drill.say = [], lambda message: None
    for name in ("kdrill-old", "kdrill-new"):
        core.namespaces[name] = f"uid-{name}"
        entry = ledger.record("drill-namespace", cluster=cluster.describe(), target={"namespace": name})
        drill._namespaces.append((DrillNamespace(cluster, name), entry))
    real = core.delete_namespace

    def refuse_old(name, **k):
        if name == "kdrill-old":
            raise ApiException(status=503)
        return real(name, **k)

    monkeypatch.setattr(core, "delete_namespace", refuse_old)
    pending: list = []
    drill.start_namespace_removal(pending, retry_seconds=0)
    assert [(p.namespace.namespace, p.started) for p in pending] == [("kdrill-new", True), ("kdrill-old", False)]
    assert drill._namespaces == []


def test_recover_never_starts_deleting_a_namespace_older_than_a_fault_not_yet_reverted(cluster, core, tmp_path,
                                                                                      monkeypatch):
    from stand_ins import Nothing

    ledger = Ledger(tmp_path / "ledger")
    core.namespaces["kdrill-older"] = "uid-older"
    core.namespaces["kdrill-newer"] = "uid-newer"
    ledger.record("drill-namespace", cluster=cluster.describe(), target={"namespace": "kdrill-older"})
    ledger.record("in-namespace", cluster=cluster.describe(), target={})
    ledger.record("drill-namespace", cluster=cluster.describe(), target={"namespace": "kdrill-newer"})
    seen_at_fault_revert: list[set] = []

    class InNamespace(Nothing):
        kind = "in-namespace"

        def revert(self):
            seen_at_fault_revert.append(set(core.terminating))

    def revert(self):
        core.finalise(self.namespace)

    monkeypatch.setattr(DrillNamespace, "revert", revert)
    monkeypatch.setattr(faults, "owner_alive", lambda entry: False)
    monkeypatch.setattr(faults, "fault_class",
                        lambda kind: InNamespace if kind == "in-namespace" else DrillNamespace)
    results = faults.recover(ledger, lambda c: cluster)
    assert all(r["reverted"] for r in results), results
    # newest first: the newer namespace went, then the fault, and only then the older namespace
    assert seen_at_fault_revert == [set()]
