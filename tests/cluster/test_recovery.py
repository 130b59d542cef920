"""Faults always revert: after a SIGKILL mid-fault (``kdrill recover``), and when an expectation
fails. Both run the real ``kdrill`` command against the session's kind cluster, with a private
ledger directory, and check the cluster is healthy afterwards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.expectations import wait_until
from harness import static_pods
from harness.faults.control_plane_stop import ControlPlaneStop
from harness.health import wait_healthy
from harness.ledger import Ledger
from harness.workloads import delete_namespace

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


def test_sigkill_mid_fault_then_kdrill_recover(kdrill_cluster, tmp_path):
    """SIGKILL of kdrill while the control plane is stopped (kubelets stopped, static-pod
    containers killed); ``kdrill recover`` must bring every component back."""
    if kdrill_cluster.provider != "kind":
        pytest.skip("needs a kind cluster: the fault stops kubelets inside node containers")
    env = {**os.environ, "KDRILL_STATE_DIR": str(tmp_path / "state")}
    ledger = Ledger(tmp_path / "state" / "ledger")
    control_plane = kdrill_cluster.nodes_by_role["control-plane"]

    def stopped() -> list[str]:
        return [n for n in control_plane
                if not static_pods.kubelet_active(kdrill_cluster, n)
                and not static_pods.running(kdrill_cluster, n, "kube-apiserver")]

    log = tmp_path / "run.log"
    run = kdrill("--reports", str(tmp_path / "reports"), "run", "control-plane-stop",
                 "--cluster-name", kdrill_cluster.name, "--", "-k", "components",
                 env=env, log=log, start_new_session=True)
    try:
        reached = wait_until(lambda: ledger.entries() and len(stopped()) == len(control_plane), 300)
        assert reached.ok, f"the drill never reached its fault:\n{tail(log)}"
        os.killpg(run.pid, signal.SIGKILL)  # the whole kdrill/pytest process group, no cleanup
        run.wait(timeout=30)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    # The crash left the fault in place, and the ledger says so.
    assert stopped(), "nothing was left stopped: the kill came too late"
    # The fault, and the drill's namespace (holding NodePort 30080) it was made in.
    assert sorted(e.kind for e in ledger.entries()) == ["control-plane-stop", "drill-namespace"]

    try:
        recover = kdrill("recover", env=env, log=tmp_path / "recover.log")
        assert recover.wait(timeout=400) == 0, tail(tmp_path / "recover.log")
        assert ledger.entries() == []
        assert stopped() == []
    finally:
        # Whatever the assertions said, the next tests get a running control plane.
        ControlPlaneStop(kdrill_cluster, method="stop-components").revert()
    healthy = wait_healthy(kdrill_cluster, 300)
    assert healthy.ok, healthy.last_error
    # recover removed the killed drill's namespace too: the next drill can have its NodePort.
    namespaces = [n.metadata.name for n in kdrill_cluster.core.list_namespace(_request_timeout=10).items]
    try:
        assert "kdrill-control-plane-stop-components" not in namespaces
    finally:
        delete_namespace(kdrill_cluster, "kdrill-control-plane-stop-components", wait_seconds=180)


def test_failed_expectation_still_reverts_the_fault(kdrill_cluster, tmp_path):
    """The etcd drill with one bound no cluster can meet: the drill fails, the members come back."""
    if kdrill_cluster.provider != "kind":
        pytest.skip("needs a kind cluster: the fault acts on static pods")

    def impossible(data):
        # Shorter holds than the scenario's, still past the settle window the ratios start after.
        data["fault"]["params"].update({"one_down_hold_seconds": 15, "quorum_lost_hold_seconds": 15})
        for expectation in data["expectations"]:
            if expectation["name"] == "follower_down_write_success_ratio":
                expectation["bound"] = {"op": ">=", "value": 1.01}

    env = {**os.environ, "KDRILL_STATE_DIR": str(tmp_path / "state")}
    reports = tmp_path / "reports"
    run = kdrill("--reports", str(reports), "run", "etcd-member-loss", "--cluster-name", kdrill_cluster.name,
                 "--scenarios-dir", str(scenario_copy(tmp_path, "etcd-member-loss", impossible)),
                 "--run-id", "forced-failure", env=env, log=tmp_path / "run.log")
    assert run.wait(timeout=900) == 1, tail(tmp_path / "run.log")
    record = json.loads((reports / "forced-failure" / "etcd-member-loss.json").read_text())
    assert record["verdict"] == "failed", (record["errors"], tail(tmp_path / "run.log"))
    failed = [e["name"] for e in record["expectations"] if e["verdict"] != "passed"]
    assert failed == ["follower_down_write_success_ratio"], failed
    assert all(i["revert_verified"] for i in record["observations"]["injections"])
    assert Ledger(tmp_path / "state" / "ledger").entries() == []
    healthy = wait_healthy(kdrill_cluster, 240)
    assert healthy.ok, healthy.last_error
