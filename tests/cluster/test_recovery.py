"""Faults always revert: after a SIGKILL mid-fault of every drill (``kdrill recover``), and when an
expectation fails. Both run the real ``kdrill`` command against a kind cluster, with a private
ledger directory, and check the cluster is healthy afterwards: the session's HA cluster, or for the
namespace-local faults a second cluster, at the same time (side_lane.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from side_lane import ON_SIDE_CLUSTER, SideLane

from harness.components.registry import LocalRegistry
from harness.core.ledger import Ledger
from harness.core.waiting import wait_until
from harness.faults import fault_class
from harness.faults.control_plane_stop import ControlPlaneStop
from harness.kube import objects as kube_objects
from harness.kube.health import wait_healthy
from harness.kube.objects import Ref
from harness.kube.providers.existing import kind_clusters
from harness.plugin.tiers import SIGKILLED, TIMES_FILE, load_times, sigkill_presubmit
from harness.spec.scenario import load_scenarios

pytestmark = [pytest.mark.cluster, pytest.mark.destructive, pytest.mark.node_access]

REPO_ROOT = Path(__file__).resolve().parents[2]


def kdrill(*args: str, env: dict, log: Path, **kwargs) -> subprocess.Popen:
    """Start the real kdrill command; its output goes to ``log`` (read it with :func:`tail`)."""
    return subprocess.Popen([sys.executable, "-m", "harness.cli", *args], cwd=REPO_ROOT, env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT, text=True, **kwargs)


def tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def scenario_copy(tmp_path: Path, name: str, edit) -> Path:
    """A scenarios directory holding a copy of ``name`` changed by ``edit(dict)``."""
    data = yaml.safe_load((REPO_ROOT / "scenarios" / f"{name}.yaml").read_text())
    edit(data)
    directory = tmp_path / "scenarios"
    directory.mkdir()
    (directory / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return directory


def run_edited(cluster, tmp_path: Path, scenario: str, edit, run_id: str, timeout_seconds: float) -> tuple[int, dict, Path]:
    """``kdrill run`` of a copy of ``scenario`` changed by ``edit(dict)``, with a private ledger;
    returns its exit code, the drill's record and the run's evidence directory."""
    env = {**os.environ, "KDRILL_STATE_DIR": str(tmp_path / "state")}
    reports = tmp_path / "reports"
    run = kdrill("--reports", str(reports), "run", scenario, "--cluster-name", cluster.name,
                 "--scenarios-dir", str(scenario_copy(tmp_path, scenario, edit)),
                 "--run-id", run_id, env=env, log=tmp_path / "run.log")
    code = run.wait(timeout=timeout_seconds)
    record = json.loads((reports / run_id / f"{scenario}.json").read_text())
    return code, record, reports / run_id


def case_id(scenario: str, case: str | None) -> str:
    return f"{scenario}-{case}" if case else scenario


@pytest.fixture
def platform_cluster_meanwhile(request, side_lane):
    """The SIGKILL tests time nothing, so the platform profile's one-node cluster, when its tests
    are to run (after this module), is created meanwhile in the background: about 2 minutes of CI.
    Started by the first of them once the side cluster is made (two creations at once on two
    cores slow the cases running beside them); by the platform tests it is up and idle."""
    if side_lane.settled.is_set() and any(item.path.name == "test_platform_cluster.py"
                                          for item in request.session.items):
        request.getfixturevalue("platform_cluster_build").start()  # never raises; the platform tests do


@pytest.fixture(scope="module")
def side_lane(request, kdrill_cluster, tmp_path_factory):
    """The cases of :data:`ON_SIDE_CLUSTER` this session runs, on a second kind cluster, in the
    background from the first SIGKILL test on (side_lane.py); the cluster is deleted when this
    module's tests are done."""
    if kdrill_cluster.provider != "kind":
        pytest.skip("needs a kind cluster: these faults act on node containers")
    chosen = {item.callspec.id for item in request.session.items
              if item.path.name == "test_recovery.py" and getattr(item, "callspec", None) is not None}
    cases = [c for c in SIGKILLED if case_id(c[0], c[1]) in chosen and c[0] in ON_SIDE_CLUSTER]
    lane = SideLane(tmp_path_factory.mktemp("side-lane"), sigkill_then_recover,
                    {case_id(c[0], c[1]): c for c in cases})
    lane.start()
    yield lane
    lane.close()


def _tiered(table: list[tuple]) -> list:
    """The SIGKILL table as pytest params: one case per fault kind in presubmit (harness/plugin/tiers.py),
    the others marked ``full``."""
    scenarios = load_scenarios(REPO_ROOT / "scenarios")
    presubmit = sigkill_presubmit(table, scenarios, load_times(REPO_ROOT / "clusters" / TIMES_FILE))
    return [pytest.param(*row, id=case_id(row[0], row[1]),
                         marks=() if (row[0], row[1]) in presubmit else (pytest.mark.full,)) for row in table]


@pytest.mark.parametrize("scenario, case, fault_kind, step", _tiered(SIGKILLED))
def test_sigkill_mid_fault_then_kdrill_recover(kdrill_cluster, platform_cluster_meanwhile, side_lane, tmp_path,
                                               scenario, case, fault_kind, step):
    """SIGKILL of ``kdrill run`` (the whole process group, no cleanup) once the drill's fault is
    injected (its ledger entry says inject returned); ``kdrill recover`` must revert the fault and
    remove everything the drill made (namespaces with their NodePorts, the vital-signs namespace,
    the registry container), so the next drill, the next test here, runs on a healthy cluster.
    The namespace-local cases ran on the side cluster: here their outcome is reported."""
    if kdrill_cluster.provider != "kind":
        pytest.skip("needs a kind cluster: these faults act on node containers")
    if scenario in ON_SIDE_CLUSTER:
        side_lane.result(case_id(scenario, case))  # raises what the case raised there
    else:
        sigkill_then_recover(kdrill_cluster, tmp_path, scenario, case, fault_kind, step)


def sigkill_then_recover(cluster, tmp_path: Path, scenario: str, case: str | None, fault_kind: str,
                         step: str | None) -> None:
    """One SIGKILL case on ``cluster`` (see the test); raises AssertionError with what was wrong."""
    env = {**os.environ, "KDRILL_STATE_DIR": str(tmp_path / "state")}
    ledger = Ledger(tmp_path / "state" / "ledger")

    def in_force() -> bool:
        if step == "first-member-edited":
            return any(e.kind == fault_kind and _quota_in_manifest(cluster, e.target["nodes"][0],
                                                                  e.target["quota_bytes"])
                       for e in ledger.entries())
        return any(e.kind == fault_kind and e.injected_at is not None
                   and (step is None or e.target.get("step") == step) for e in ledger.entries())

    log = tmp_path / "run.log"
    extra = ["--", "-k", case] if case else []
    run = kdrill("--reports", str(tmp_path / "reports"), "run", scenario, "--cluster-name", cluster.name,
                 *extra, env=env, log=log, start_new_session=True)
    try:
        reached = wait_until(lambda: in_force() or run.poll() is not None, 600, interval_seconds=0.5)
        assert reached.ok and in_force(), \
            f"the drill never injected {fault_kind} {step or ''} (last error {reached.last_error}):\n{tail(log)}"
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=30)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    left = ledger.entries()
    kinds = {e.kind for e in left}
    # The crash left the fault, and what the drill made, in the ledger.
    assert fault_kind in kinds and "drill-namespace" in kinds, kinds
    namespaces = sorted(e.target["namespace"] for e in left if e.kind == "drill-namespace")
    assert "kdrill-vitals" in namespaces, namespaces

    try:
        recover = kdrill("recover", env=env, log=tmp_path / "recover.log")
        assert recover.wait(timeout=600) == 0, tail(tmp_path / "recover.log")
        assert ledger.entries() == [], tail(tmp_path / "recover.log")
        # Independently of recover's own verification: each fault and each made thing is gone.
        removed = {e.target["container"] for e in left if e.kind == "drill-registry"}
        for entry in left:
            if entry.kind == "registry-outage" and entry.target["container"] in removed:
                continue  # restored, then removed with the registry (the drill-registry entry checks that)
            fault_class(entry.kind).from_target(cluster, entry.target).verify_reverted()
    finally:
        # Whatever the assertions said, the next tests get a cluster as it was: a second
        # `kdrill recover` for what the first left (the failure is reported all the same), and a
        # running control plane.
        if ledger.entries():
            kdrill("recover", env=env, log=tmp_path / "recover-again.log").wait(timeout=600)
        if scenario == "control-plane-stop":
            ControlPlaneStop(cluster, method="stop-components", units={}).revert()  # kubelets started
    healthy = wait_healthy(cluster, 300)
    assert healthy.ok, healthy.last_error
    present = {n.metadata.name for n in cluster.core.list_namespace(_request_timeout=10).items}
    assert not present & set(namespaces), sorted(present & set(namespaces))
    registries = sorted(e.target["container"] for e in left if e.kind == "drill-registry")
    if scenario.startswith("registry") or scenario == "serial-image-pull":
        assert registries, "the drill's registry was not in the ledger"
    assert [c for c in registries if LocalRegistry(c).state() is not None] == [], "a registry container is still there"
    declared = [Ref.from_dict(r) for e in left if e.kind == "drill-objects" for r in e.target["created"]]
    if scenario == "apiservice-unavailable":
        assert any(r.kind == "APIService" for r in declared), [str(r) for r in declared]
    if scenario in ("webhook-on-pod-delete", "webhook-outage"):
        assert any(r.kind == "ValidatingWebhookConfiguration" for r in declared), [str(r) for r in declared]
    assert [str(r) for r in declared if kube_objects.read(cluster, r) is not None] == []
    made = {e.target["name"] for e in left if e.kind == "drill-cluster"}
    assert not made & set(kind_clusters()), f"still there: {sorted(made & set(kind_clusters()))}"


def _quota_in_manifest(cluster, node: str, quota_bytes: int) -> bool:
    """Whether ``node``'s etcd static pod manifest carries the fault's small quota."""
    from harness.faults.etcd_space_quota import MANIFEST

    return cluster.node_exec(node, ["grep", "-q", "--", f"--quota-backend-bytes={quota_bytes}", MANIFEST],
                             check=False).returncode == 0


def test_failed_expectation_still_reverts_the_fault(kdrill_cluster, tmp_path):
    """A drill with one bound a healthy cluster cannot meet (service-blackhole, its windows at their 5 s
    minimum): the drill fails, the Service's selector is restored and verified, the ledger is
    empty, and the evidence says which expectation failed. (The etcd drill did this in 158 s of
    CI; nothing here depends on the fault's kind: every fault reverts in the same ``finally``.)"""
    def impossible(data):
        data["runner"]["windows"].update(baseline_seconds=5, hold_seconds=10, after_seconds=5)
        for expectation in data["expectations"]:
            if expectation["name"] == "baseline_clusterip_success_ratio":
                # Every baseline ClusterIP call succeeds on a healthy cluster (a bound beyond 0..1
                # would be refused before the run).
                expectation["bound"] = {"op": "<=", "value": 0.0}

    code, record, run_dir = run_edited(kdrill_cluster, tmp_path, "service-blackhole", impossible, "forced-failure", 600)
    assert code == 1, tail(tmp_path / "run.log")
    assert record["verdict"] == "failed", (record["errors"], tail(tmp_path / "run.log"))
    failed = [e["name"] for e in record["expectations"] if e["verdict"] != "passed"]
    assert failed == ["baseline_clusterip_success_ratio"], failed
    assert record["observations"]["injections"] and \
        all(i["revert_verified"] for i in record["observations"]["injections"])
    # Where CI tools look: the JUnit test case carries the measured values and bounds, the run an
    # OpenMetrics file, the Allure results their environment and categories.
    import xml.etree.ElementTree as ET

    properties = {p.get("name"): p.get("value")
                  for p in ET.parse(run_dir / "junit.xml").iter("property")}
    assert properties["baseline_clusterip_success_ratio.bound"] == "<= 0.0", properties
    assert properties["baseline_clusterip_success_ratio.verdict"] == "failed"
    assert float(properties["first_failure_seconds.measured"]) >= 0
    assert properties["kdrill.verdict"] == "failed"
    metrics = (run_dir / "metrics.openmetrics.txt").read_text()
    assert 'kdrill_expectation_passed{case="",drill="service-blackhole",expectation="baseline_clusterip_success_ratio"' in metrics
    allure = run_dir / "allure-results"
    assert "kubernetes.version=" in (allure / "environment.properties").read_text()
    assert (allure / "categories.json").is_file()
    assert Ledger(tmp_path / "state" / "ledger").entries() == []
    healthy = wait_healthy(kdrill_cluster, 240)
    assert healthy.ok, healthy.last_error


GUARD_HOLD_SECONDS = 120
GUARD_MAX_FAILING_SECONDS = 3


def test_the_abort_guard_reverts_the_fault_once_its_probe_fails_for_too_long(kdrill_cluster, tmp_path):
    """A data-only scenario whose guard probe (runner.abort) fails for longer than it allows has
    its fault reverted at once, well before the hold ends; the abort is recorded, verdict error."""
    def guarded(data):
        # Scaling the workload to zero makes every call by ClusterIP fail within seconds
        # (service-without-endpoints measures it): the guard must trip long before the hold ends.
        data["runner"]["windows"].update(baseline_seconds=5, hold_seconds=GUARD_HOLD_SECONDS, after_seconds=5)
        data["runner"]["abort"] = {"probe": "by-clusterip", "max_failing_seconds": GUARD_MAX_FAILING_SECONDS}

    code, record, _ = run_edited(kdrill_cluster, tmp_path, "service-without-endpoints", guarded, "guarded", 600)
    assert code == 1, tail(tmp_path / "run.log")
    assert record["verdict"] == "error", (record["verdict"], record["errors"])
    assert any("aborted" in e and "by-clusterip" in e for e in record["errors"]), record["errors"]
    abort = record["observations"]["abort"]
    [window] = record["observations"]["injections"]
    assert window["revert_verified"]
    assert abort["failing_seconds"] >= GUARD_MAX_FAILING_SECONDS
    # Reverted at once: the failure run began after the injection, and the revert started within
    # the guard's allowance plus a few of its one-second checks; nowhere near the hold's end.
    assert window["injected_at"] <= abort["failing_since"] <= abort["tripped_at"] <= window["revert_started_at"]
    held = window["revert_started_at"] - window["injected_at"]
    assert held < GUARD_HOLD_SECONDS / 4, held
    assert window["revert_started_at"] - abort["failing_since"] < GUARD_MAX_FAILING_SECONDS + 5, abort
    # The expectations were still measured: the evidence is there for what did happen.
    assert any(e["name"] == "fault_clusterip_success_ratio" and e["measured"] is not None
               for e in record["expectations"]), record["expectations"]
    assert Ledger(tmp_path / "state" / "ledger").entries() == []
    healthy = wait_healthy(kdrill_cluster, 240)
    assert healthy.ok, healthy.last_error
