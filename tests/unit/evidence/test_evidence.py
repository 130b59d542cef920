from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import harness
from harness.core.timeline import Sample, Timeline, summarize
from harness.engine.expectations import Expectations
from harness.evidence.records import (
    DrillRecord,
    EvidenceWriter,
    RunExistsError,
    RunIdError,
    SealedRunError,
    create_run_dir,
    new_run_id,
    run_metadata,
    validate_run_id,
)
from harness.spec.scenario import load_scenario

EXAMPLE = Path(__file__).parents[1] / "data" / "example-drill.yaml"

RECORD_KEYS = {
    "run_id", "drill", "case", "title", "claim", "verdict", "started_at", "finished_at", "duration_seconds",
    "cluster", "fault", "phases", "expectations", "probes", "observations", "source", "scenario", "errors",
    "evidence_files", "kdrill_version", "vital_signs", "replaced_measurements", "waits", "waits_dropped", "detection",
}


def test_new_run_id_format_and_uniqueness():
    ids = {new_run_id() for _ in range(20)}
    assert len(ids) == 20
    assert all(re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{6}", i) for i in ids)


def test_record_for_scenario_prefills_from_the_scenario():
    scenario = load_scenario(EXAMPLE)
    record = DrillRecord.for_scenario("run-1", scenario, case="refused", started_at=10.0)
    assert (record.drill, record.case, record.title) == ("example-drill", "refused", scenario.title)
    assert record.claim == scenario.claim and record.started_at == 10.0
    assert record.fault["params"] == {"hold_seconds": 60, "mode": "refused"}
    assert record.fault["kind"] == "control-plane-stop" and record.fault["revert_verified"] is False
    assert record.source[1] == {"title": "Kubelet", "url": scenario.sources[1].url, "section": "Synopsis"}
    assert record.scenario["name"] == "example-drill"
    assert record.verdict == "error"  # nothing proven yet
    with pytest.raises(KeyError):
        DrillRecord.for_scenario("run-1", scenario, case="no-such-case")


def test_apply_expectations_and_errors_set_the_verdict():
    scenario = load_scenario(EXAMPLE)
    record = DrillRecord.for_scenario("r", scenario)
    exp = Expectations(scenario.expectations)
    exp.measure("workload_http_success_ratio", 1.0)
    exp.measure("api_recovery_seconds", 4.2)
    exp.measure("pods_restarted", False)
    record.apply_expectations(exp)
    assert record.verdict == "passed"
    assert [o["verdict"] for o in record.expectations] == ["passed"] * 3
    record.errors.append("revert could not be verified")
    record.apply_expectations(exp)
    assert record.verdict == "error"


def test_finish_sets_duration():
    record = DrillRecord(run_id="r", drill="d", started_at=100.0)
    record.finish(finished_at=112.5)
    assert (record.finished_at, record.duration_seconds) == (112.5, 12.5)


def test_stem_rejects_unsafe_names():
    assert DrillRecord(run_id="r", drill="d").stem == "d"
    assert DrillRecord(run_id="r", drill="d", case="c").stem == "d--c"
    with pytest.raises(ValueError):
        _ = DrillRecord(run_id="r", drill="../d").stem


def test_write_record_file_name_keys_and_format(tmp_path):
    scenario = load_scenario(EXAMPLE)
    record = DrillRecord.for_scenario("run-1", scenario, case="paused", started_at=1.0)
    record.cluster = {"name": "kdrill-ha", "provider": "kind", "kubernetes_version": "v1.31.0",
                      "context": "kind-kdrill-ha",
                      "nodes": [{"name": "cp1", "roles": ["control-plane"], "kubelet_version": "v1.31.0"}]}
    record.add_phase("control-plane-down", 2.0, 5.0)
    record.observations["reads_served"] = ("pods", Path("/x"))  # tuples and paths must not break writing
    record.probes["http"] = summarize("http", [Sample(t=1.0, ok=True)])
    record.finish(9.0)
    run_dir = tmp_path / "reports" / "run-1"
    path = EvidenceWriter(run_dir).write_record(record)
    assert path == run_dir / "example-drill--paused.json"
    text = path.read_text()
    data = json.loads(text)
    assert set(data) == RECORD_KEYS
    assert list(data) == sorted(data)  # sorted keys
    assert text.startswith("{\n  ")  # pretty
    assert data["phases"] == [{"name": "control-plane-down", "started_at": 2.0, "ended_at": 5.0}]
    assert data["observations"]["reads_served"] == ["pods", "/x"]
    assert data["duration_seconds"] == 8.0 and data["kdrill_version"] == harness.__version__
    assert data["cluster"]["nodes"][0]["roles"] == ["control-plane"]
    assert data["probes"]["http"]["success_ratio"] == 1.0


def test_write_record_without_case(tmp_path):
    path = EvidenceWriter(tmp_path / "r").write_record(DrillRecord(run_id="r", drill="dns-outage"))
    assert path.name == "dns-outage.json"


@pytest.mark.parametrize("run_id", ["20250101T120000Z-a1b2c3", "run-1", "a.b_c-1", "R", "x" * 100])
def test_valid_run_ids(run_id):
    assert validate_run_id(run_id) == run_id
    assert validate_run_id(new_run_id())


@pytest.mark.parametrize("run_id", ["../../x", "..", ".", "a/b", "a\\b", "/abs", "", ".hidden", "-x", "_x",
                                    "a..b", "a b", "x" * 101, "run\n", "é", None, 7])
def test_invalid_run_ids_are_refused_in_one_line(run_id):
    with pytest.raises(RunIdError, match="invalid run id") as exc:
        validate_run_id(run_id)
    assert "\n" not in str(exc.value)


def test_create_run_dir_refuses_to_reuse_a_run_id(tmp_path):
    reports = tmp_path / "reports"
    run_dir = create_run_dir(reports, "r1")
    assert run_dir == reports / "r1" and run_dir.is_dir()
    assert create_run_dir(reports, "r1") == run_dir  # still empty: kdrill run made it for its pytest child
    (run_dir / "allure-results").mkdir()  # pytest's Allure plugin makes it before the run starts
    assert create_run_dir(reports, "r1") == run_dir
    (run_dir / "allure-results" / "x-result.json").write_text("{}")
    with pytest.raises(RunExistsError):
        create_run_dir(reports, "r1")
    (run_dir / "allure-results" / "x-result.json").unlink()
    (run_dir / "run.json").write_text("{}")
    with pytest.raises(RunExistsError, match="r1 already exists"):
        create_run_dir(reports, "r1")
    assert (run_dir / "run.json").read_text() == "{}"
    with pytest.raises(RunIdError):
        create_run_dir(reports, "../../escape")
    assert not (tmp_path / "escape").exists() and not (tmp_path.parent / "escape").exists()
    assert EvidenceWriter.for_new_run(reports, "r2").run_dir == reports / "r2"


def test_writer_refuses_invalid_runs_foreign_records_and_sealed_runs(tmp_path):
    with pytest.raises(RunIdError):
        EvidenceWriter(tmp_path / ".hidden")
    writer = EvidenceWriter(tmp_path / "r1")
    with pytest.raises(RunIdError, match="does not belong"):
        writer.write_record(DrillRecord(run_id="r2", drill="d"))
    with pytest.raises(RunIdError, match="does not belong"):
        writer.write_run_metadata({"run_id": "r2"})
    writer.write_record(DrillRecord(run_id="r1", drill="d"))
    (tmp_path / "r1" / "manifest.json").write_text("{}")
    with pytest.raises(SealedRunError, match="sealed"):
        writer.write_record(DrillRecord(run_id="r1", drill="d"))
    with pytest.raises(SealedRunError):
        writer.write_timelines("d", {})
    with pytest.raises(RunIdError):
        run_metadata(tmp_path, run_id="../x")


def test_write_timelines(tmp_path):
    tl = Timeline("http")
    tl.add(Sample(t=2.0, ok=False, detail="refused"))
    tl.add(Sample(t=1.0, ok=True, latency_seconds=0.01, labels={"target": "pod-a"}))
    path = EvidenceWriter(tmp_path).write_timelines("d--c", {"http": tl, "dns": [Sample(t=3.0, ok=True)]})
    assert path == tmp_path / "d--c.timeline.json"
    data = json.loads(path.read_text())
    assert set(data) == {"http", "dns"}
    assert [s["t"] for s in data["http"]] == [1.0, 2.0]
    assert data["http"][0] == {"t": 1.0, "ok": True, "latency_seconds": 0.01, "detail": "",
                               "labels": {"target": "pod-a"}}
    assert [Sample.from_dict(s) for s in data["dns"]] == [Sample(t=3.0, ok=True)]


def test_write_run_metadata(tmp_path):
    meta = run_metadata(tmp_path, run_id="run-9")
    path = EvidenceWriter(tmp_path / "run-9").write_run_metadata(meta)
    assert path == tmp_path / "run-9" / "run.json"
    assert json.loads(path.read_text())["run_id"] == "run-9"


def test_run_metadata_outside_git(tmp_path):
    meta = run_metadata(tmp_path)
    assert set(meta) == {"run_id", "started_at", "user", "host", "git_commit", "git_dirty", "kdrill_version",
                         "python", "dependencies", "clock", "command"}
    assert meta["git_commit"] is None and meta["git_dirty"] is None
    # the exact versions of what kdrill ran with, e.g. the YAML and Kubernetes clients
    assert meta["dependencies"]["PyYAML"] == __import__("yaml").__version__
    assert meta["dependencies"]["kubernetes"] == __import__("kubernetes").__version__
    assert meta["python"] == ".".join(map(str, sys.version_info[:3]))
    assert meta["kdrill_version"] == harness.__version__
    assert meta["command"]  # sys.argv is never empty under pytest


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_run_metadata_in_git_repo(tmp_path):
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), "-c", "user.email=t@example.com", "-c", "user.name=t",
                               *args], check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "f.txt").write_text("x")
    git("add", "f.txt")
    git("commit", "-q", "-m", "init")
    meta = run_metadata(tmp_path)
    assert meta["git_commit"] == git("rev-parse", "HEAD") and len(meta["git_commit"]) == 40
    assert meta["git_dirty"] is False
    (tmp_path / "f.txt").write_text("changed")
    assert run_metadata(tmp_path)["git_dirty"] is True


def test_a_replaced_measurement_leaves_its_trace():
    scenario = load_scenario(EXAMPLE)
    record = DrillRecord.for_scenario("r", scenario)
    exp = Expectations(scenario.expectations)
    exp.measure("api_recovery_seconds", 400.0, detail="first try")
    exp.measure("api_recovery_seconds", 4.2, detail="measured again")
    record.apply_expectations(exp)
    latest = next(o for o in record.expectations if o["name"] == "api_recovery_seconds")
    assert latest["measured"] == 4.2
    assert [(o["measured"], o["verdict"], o["detail"]) for o in record.replaced_measurements] == [
        (400.0, "failed", "first try")]
