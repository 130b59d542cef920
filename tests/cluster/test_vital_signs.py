"""The vital signs catch what a drill does not look at: a data-only drill whose fault takes CoreDNS
away while its expectations look only at calls by ClusterIP passes, and its record, the report's
headline and the console flag the Service-by-name vital sign all the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.cluster, pytest.mark.destructive]

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_a_broken_vital_sign_is_flagged_though_no_expectation_names_it(kdrill_cluster, tmp_path):
    data = yaml.safe_load((REPO_ROOT / "scenarios" / "service-without-endpoints.yaml").read_text())
    # The fault scales kube-system/coredns to zero; nothing the scenario asserts is about names.
    data["fault"]["params"] = {"target_kind": "Deployment", "target_name": "coredns", "target_namespace": "kube-system"}
    data["fault"]["outside_drill"] = "kube-system's CoreDNS: the vital sign it breaks is what this test checks"
    data["runner"]["probes"] = [p for p in data["runner"]["probes"] if p["target"] == "clusterip"]
    # Short windows (CI time): names fail about 5 s into the hold (CoreDNS's lameduck), so a
    # 15 s hold still has most of its lookups failing.
    data["runner"]["windows"] = {"baseline_seconds": 5, "hold_seconds": 15, "after_seconds": 5}
    data["expectations"] = [
        data["expectations"][0],
        {"name": "fault_clusterip_success_ratio", "description": "Calls by ClusterIP do not need CoreDNS",
         "bound": {"op": ">=", "value": 0.99}, "unit": "ratio",
         "measure": {"kind": "success_ratio", "probe": "by-clusterip", "window": "fault"}},
    ]
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    (scenarios / "service-without-endpoints.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    reports, log = tmp_path / "reports", tmp_path / "run.log"
    env = {**os.environ, "KDRILL_STATE_DIR": str(tmp_path / "state")}
    status = subprocess.run([sys.executable, "-m", "harness.cli", "--reports", str(reports), "run",
                             "service-without-endpoints", "--scenarios-dir", str(scenarios), "--cluster-name",
                             kdrill_cluster.name, "--run-id", "vitals-flagged"], cwd=REPO_ROOT, env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT, timeout=900).returncode
    text = log.read_text(errors="replace")
    record = json.loads((reports / "vitals-flagged" / "service-without-endpoints.json").read_text())
    assert record["verdict"] == "passed", (record["errors"], text[-3000:])
    assert status == 0, text[-3000:]
    flagged = record["vital_signs"]["flagged"]
    assert "service_name" in flagged, record["vital_signs"]
    assert record["vital_signs"]["signs"]["service_name"]["fault"] < 0.99
    assert "FLAGGED vital sign service_name" in text
    report = (reports / "vitals-flagged" / "report.html").read_text()
    assert "with flagged vital signs" in report
