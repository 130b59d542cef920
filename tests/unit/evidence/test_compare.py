"""``kdrill compare``, ``kdrill history`` and the index: runs are written by hand and sealed by
the real sealing function, as ``kdrill run`` seals them (no cluster)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.cli import main, report_and_manifest
from harness.evidence.compare import CompareError, compare_expectation, compare_runs
from harness.evidence.history import list_runs
from harness.evidence.manifest import MANIFEST_NAME, SIGNATURE_NAME, SIGNING_KEY_ENV

T0 = 1_700_000_000.0
BASE, RUN, FORGED = "20250101T000000Z-aaaaaa", "20250102T000000Z-bbbbbb", "20250103T000000Z-cccccc"


@pytest.fixture(autouse=True)
def key_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KDRILL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv(SIGNING_KEY_ENV, raising=False)


def expectation(name, measured, op, value, unit, verdict="passed", **extra):
    return {"name": name, "measured": measured, "bound": {"op": op, "value": value}, "bound_text": f"{op} {value}",
            "unit": unit, "verdict": verdict, **extra}


def sealed_run(reports: Path, run_id: str, api_recovery: float = 3.0, ratio: float = 1.0,
               kubernetes_version: str = "v1.35.4", started: float = T0, drill: str = "control-plane-stop") -> Path:
    run_dir = reports / run_id
    run_dir.mkdir(parents=True)
    cluster = {"provider": "kind", "kubernetes_version": kubernetes_version,
               "nodes": [{"name": "cp", "roles": ["control-plane"]}, {"name": "w", "roles": []}]}
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_id, "started_at": started, "finished_at": time.time(),
                                                  "kdrill_version": "0.1.0", "planned": ["control-plane-stop"]}))
    record = {"run_id": run_id, "drill": drill, "case": None, "verdict": "passed",
              "started_at": started, "cluster": cluster, "errors": [],
              "expectations": [expectation("api_recovery_seconds", api_recovery, "<=", 90, "seconds"),
                               expectation("workload_http_success_ratio", ratio, ">=", 0.9, "ratio"),
                               expectation("pods_rescheduled", 0, "==", 0, "count")]}
    (run_dir / "control-plane-stop.json").write_text(json.dumps(record, indent=2))
    report_and_manifest(run_dir)
    return run_dir


def kdrill(reports: Path, *args: str) -> int:
    """The exit status the kdrill process would have (a SystemExit with a message is 1)."""
    try:
        return main(["--reports", str(reports), *args])
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code)
            return 1
        return int(exc.code or 0)


def test_two_runs_show_every_expectation_side_by_side(tmp_path: Path, capsys) -> None:
    reports = tmp_path / "reports"
    sealed_run(reports, BASE, api_recovery=3.0)
    sealed_run(reports, RUN, api_recovery=3.4, started=T0 + 100)
    assert kdrill(reports, "compare", BASE, RUN) == 0
    out = capsys.readouterr().out
    assert "3 expectations, 0 regression(s)" in out
    for name in ("api_recovery_seconds", "workload_http_success_ratio", "pods_rescheduled"):
        assert f"control-plane-stop.{name}" in out
    assert "+0.4 (+13%)" in out


def test_a_resealed_copy_with_one_timing_doubled_is_a_regression(tmp_path: Path, capsys, monkeypatch) -> None:
    """The issue's check: a copy of a run, one timing doubled, re-sealed with a test key."""
    reports = tmp_path / "reports"
    base = sealed_run(reports, BASE, api_recovery=20.0)
    forged = reports / FORGED
    shutil.copytree(base, forged)
    for name in (MANIFEST_NAME, SIGNATURE_NAME, "report.html"):
        (forged / name).unlink()
    for name in ("run.json", "control-plane-stop.json"):
        path = forged / name
        path.write_text(path.read_text().replace(BASE, FORGED).replace('"measured": 20.0', '"measured": 40.0'))
    key = tmp_path / "test-key.pem"
    key.write_bytes(Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    key.chmod(0o600)
    monkeypatch.setenv(SIGNING_KEY_ENV, str(key))
    report_and_manifest(forged)
    monkeypatch.delenv(SIGNING_KEY_ENV)
    # Unpinned, the copy's other signer is refused, not noted.
    assert kdrill(reports, "compare", BASE, FORGED) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "signed by different keys" in err and "none pinned" in err
    # With both keys trusted, the doubled timing is the regression it is.
    keys = [arg for run in (base, forged) for arg in ("--fingerprint", json.loads(
        (run / MANIFEST_NAME).read_text())["signer"]["fingerprint_sha256"])]
    assert kdrill(reports, "compare", BASE, FORGED, *keys) == 1
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "api_recovery_seconds" in line)
    assert line.startswith("REGRESSION") and "+20 (+100%)" in line
    assert "1 regression(s)" in out
    assert kdrill(reports, "compare", BASE, BASE) == 0
    assert "signed by different keys" not in capsys.readouterr().out


def test_a_run_that_does_not_verify_is_not_compared(tmp_path: Path, capsys) -> None:
    reports = tmp_path / "reports"
    sealed_run(reports, BASE)
    run = sealed_run(reports, RUN, started=T0 + 100)
    record = run / "control-plane-stop.json"
    record.write_text(record.read_text().replace('"measured": 3.0', '"measured": 2.0'))
    assert kdrill(reports, "compare", BASE, RUN) == 2
    assert "does not verify" in capsys.readouterr().err
    assert kdrill(reports, "compare", BASE, "nope") == 2  # not a run: cannot compare, not a regression


def test_runs_with_no_drill_case_in_common_are_not_compared(tmp_path: Path, capsys) -> None:
    reports = tmp_path / "reports"
    sealed_run(reports, BASE)
    sealed_run(reports, RUN, started=T0 + 100, drill="pod-delete")
    assert kdrill(reports, "compare", BASE, RUN) == 2  # not "0 regressions": nothing was compared
    assert "no drill case in common" in capsys.readouterr().err


def test_other_platforms_are_compared_only_when_asked(tmp_path: Path, capsys) -> None:
    reports = tmp_path / "reports"
    sealed_run(reports, BASE)
    sealed_run(reports, RUN, kubernetes_version="v1.36.0", started=T0 + 100)
    assert kdrill(reports, "compare", BASE, RUN) == 2
    assert "kubernetes_version: 'v1.35.4' vs 'v1.36.0'" in capsys.readouterr().err
    assert kdrill(reports, "compare", BASE, RUN, "--any-platform") == 0
    assert "compared across a difference the user accepted" in capsys.readouterr().out


@pytest.mark.parametrize("base, run, regression", [
    (expectation("t", 10.0, "<=", 90, "seconds"), expectation("t", 15.9, "<=", 90, "seconds"), True),   # +59 %
    (expectation("t", 10.0, "<=", 90, "seconds"), expectation("t", 14.9, "<=", 90, "seconds"), False),  # +49 %
    (expectation("t", 10.0, "<=", 90, "seconds"), expectation("t", 2.0, "<=", 90, "seconds"), False),   # better
    (expectation("t", 0.5, "<=", 90, "seconds"), expectation("t", 1.4, "<=", 90, "seconds"), False),    # < 1 s
    (expectation("r", 1.0, ">=", 0.9, "ratio"), expectation("r", 0.97, ">=", 0.9, "ratio"), True),      # 3 in 100
    (expectation("r", 1.0, ">=", 0.9, "ratio"), expectation("r", 0.99, ">=", 0.9, "ratio"), False),
    (expectation("c", 0, "==", 0, "count"), expectation("c", 1, "==", 0, "count", verdict="failed"), True),
    (expectation("t", 10.0, "<=", 90, "seconds", tolerance={"relative": 0.1}),
     expectation("t", 11.5, "<=", 90, "seconds", tolerance={"relative": 0.1}), True),                  # own tolerance
    (expectation("t", 10.0, "<=", 90, "seconds"), expectation("t", None, "<=", 90, "seconds", verdict="error"), True),
    (expectation("b", True, "==", True, "bool"), expectation("b", True, "==", True, "bool"), False),
])
def test_regression_rules(base, run, regression) -> None:
    row = compare_expectation("d", None, base, run)
    assert row.regression is regression, row.why


def test_an_expectation_missing_from_a_drill_that_ran_is_a_regression() -> None:
    row = compare_expectation("d", None, expectation("t", 1.0, "<=", 9, "seconds"), None)
    assert row.regression and "not measured" in row.why


def test_compare_runs_refuses_what_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(CompareError, match="not a run directory"):
        compare_runs(tmp_path / "nope", tmp_path / "nope2")


def test_history_lists_runs_with_seal_and_the_index_draws_trends(tmp_path: Path, capsys) -> None:
    reports = tmp_path / "reports"
    sealed_run(reports, BASE, api_recovery=3.0)
    run = sealed_run(reports, RUN, api_recovery=6.0, started=T0 + 100)
    assert kdrill(reports, "history") == 0
    (run / "control-plane-stop.json").write_text((run / "control-plane-stop.json").read_text() + " ")
    runs = list_runs(reports)
    assert [(r.run_id, r.seal) for r in runs] == [(BASE, "intact"), (RUN, "not intact")]
    assert kdrill(reports, "history") == 1  # listed, and the exit says a run is not intact
    out = capsys.readouterr().out
    assert BASE in out and "not intact" in out
    page = (reports / "index.html").read_text()
    assert 'data-seal="not intact"' in page
    # trends take intact runs only: one point for api_recovery_seconds (3.0), none from the edited run
    trend = page.split('data-expectation="control-plane-stop.api_recovery_seconds"')[1].split("</div>")[0]
    assert trend.count("<circle") == 1 and "3 seconds" in trend
    assert "<script" not in page and "http://" not in page and "https://" not in page


def test_the_sealed_run_carries_its_measurements_as_openmetrics(tmp_path: Path) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    from harness.evidence.manifest import verify_run
    from harness.evidence.openmetrics import METRICS_NAME

    run = sealed_run(tmp_path / "reports", BASE, api_recovery=3.5)
    text = (run / METRICS_NAME).read_text()
    assert text.endswith("# EOF\n")
    samples = {(s.name, s.labels.get("expectation")): s for f in text_string_to_metric_families(text)
               for s in f.samples}
    measured = samples[("kdrill_expectation_measured", "api_recovery_seconds")]
    assert measured.value == 3.5 and measured.labels == {"drill": "control-plane-stop", "case": "",
                                                         "expectation": "api_recovery_seconds", "unit": "seconds"}
    assert float(measured.timestamp) == T0  # the record's start (it has no finish time)
    assert samples[("kdrill_expectation_bound", "api_recovery_seconds")].labels["op"] == "<="
    assert samples[("kdrill_drill_passed", None)].value == 1.0
    assert samples[("kdrill_run_info", None)].labels == {"run_id": BASE}
    assert METRICS_NAME in json.loads((run / MANIFEST_NAME).read_text())["files"] and verify_run(run).ok


def forge(reports: Path, base: Path, run_id: str, edit, monkeypatch, tmp_path: Path, other_key: bool = False) -> Path:
    """A copy of ``base`` as ``run_id``, its record edited by ``edit(dict)``, re-sealed with the
    local key (as anyone who runs drills can), or with a key of its own."""
    forged = reports / run_id
    shutil.copytree(base, forged)
    for name in (MANIFEST_NAME, SIGNATURE_NAME, "report.html", "metrics.openmetrics.txt"):
        (forged / name).unlink()
    (forged / "run.json").write_text((forged / "run.json").read_text().replace(base.name, run_id))
    record = json.loads((forged / "control-plane-stop.json").read_text())
    record["run_id"] = run_id
    edit(record)
    (forged / "control-plane-stop.json").write_text(json.dumps(record))
    if not other_key:
        report_and_manifest(forged)
        return forged
    key = tmp_path / f"key-{run_id}.pem"
    key.write_bytes(Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    key.chmod(0o600)
    monkeypatch.setenv(SIGNING_KEY_ENV, str(key))
    report_and_manifest(forged)
    monkeypatch.delenv(SIGNING_KEY_ENV)
    return forged


def recovery(record: dict) -> dict:
    return next(x for x in record["expectations"] if x["name"] == "api_recovery_seconds")


@pytest.mark.parametrize("edit, why", [
    (lambda r: recovery(r).update(measured=float("nan")), "verdict passed -> failed"),
    (lambda r: recovery(r).update(measured="99"), "verdict passed -> failed"),
    (lambda r: recovery(r).update(measured=40.0, bound={"op": "<=", "value": 1e9}), "+20 seconds, beyond"),
    (lambda r: recovery(r).update(measured=40.0, tolerance={"relative": 100}), "+20 seconds, beyond"),
    (lambda r: r.update(verdict="error", errors=["RuntimeError: x"]), "drill case passed -> error"),
], ids=["nan", "string", "loosened-bound", "loosened-tolerance", "passed-to-error"])
def test_a_forged_run_cannot_hide_a_regression(tmp_path: Path, monkeypatch, capsys, edit, why) -> None:
    """Each forged copy is re-sealed with the local key, so it verifies."""
    reports = tmp_path / "reports"
    base = sealed_run(reports, BASE, api_recovery=20.0)
    forge(reports, base, FORGED, edit, monkeypatch, tmp_path)
    assert kdrill(reports, "compare", BASE, FORGED) == 1
    out = capsys.readouterr().out
    assert any(line.startswith("REGRESSION") and why in line for line in out.splitlines()), out


def test_an_empty_case_is_no_case(tmp_path: Path, monkeypatch, capsys) -> None:
    reports = tmp_path / "reports"
    base = sealed_run(reports, BASE)
    forge(reports, base, FORGED, lambda r: r.update(case=""), monkeypatch, tmp_path)
    assert kdrill(reports, "compare", BASE, FORGED) == 0
    assert "new in the run" not in capsys.readouterr().out


def test_duplicate_records_or_expectations_cannot_be_compared(tmp_path: Path, monkeypatch, capsys) -> None:
    reports = tmp_path / "reports"
    base = sealed_run(reports, BASE)
    forge(reports, base, FORGED, lambda r: r["expectations"].append(dict(recovery(r))), monkeypatch, tmp_path)
    assert kdrill(reports, "compare", BASE, FORGED) == 2
    assert "lists an expectation twice" in capsys.readouterr().err


def test_a_trusted_key_is_required_when_given(tmp_path: Path, monkeypatch, capsys) -> None:
    from harness.evidence.manifest import verify_run

    reports = tmp_path / "reports"
    base = sealed_run(reports, BASE)
    forge(reports, base, FORGED, lambda r: None, monkeypatch, tmp_path, other_key=True)
    ours = verify_run(base).signer.fingerprint
    assert kdrill(reports, "compare", BASE, FORGED) == 2  # unpinned, two keys: refused, not noted
    assert "signed by different keys" in capsys.readouterr().err
    assert kdrill(reports, "compare", BASE, FORGED, "--fingerprint", ours) == 2
    assert "untrusted" in capsys.readouterr().err.lower()


def test_a_record_saying_passed_against_its_bound_is_not_passed_in_the_metrics_or_the_summary(tmp_path: Path) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    from harness.cli import summary
    from harness.evidence.openmetrics import METRICS_NAME

    # Every verdict in the record says passed; api_recovery_seconds measured 200 against <= 90.
    run = sealed_run(tmp_path / "reports", BASE, api_recovery=200.0)
    samples = {(s.name, s.labels.get("expectation")): s.value
               for f in text_string_to_metric_families((run / METRICS_NAME).read_text()) for s in f.samples}
    assert samples[("kdrill_expectation_passed", "api_recovery_seconds")] == 0.0
    assert samples[("kdrill_expectation_passed", "pods_rescheduled")] == 1.0
    assert samples[("kdrill_drill_passed", None)] == 0.0
    [line] = [x for x in summary(run).splitlines() if "control-plane-stop" in x]
    assert line.startswith("error") and "api_recovery_seconds=200.0" in line


def test_history_and_plan_read_no_linked_run_or_record_and_a_fifo_blocks_nothing(tmp_path: Path) -> None:
    import os
    import threading

    from harness.cli.plan import past_durations
    from harness.evidence.reading import scan_records

    reports = tmp_path / "reports"
    base = sealed_run(reports, BASE)
    elsewhere = sealed_run(tmp_path / "elsewhere", RUN, started=T0 + 100)
    (reports / RUN).symlink_to(elsewhere)  # a sealed run from outside, linked in
    assert [r.run_id for r in list_runs(reports)] == [BASE]
    linked = tmp_path / "outside.json"
    linked.write_text((base / "control-plane-stop.json").read_text())
    (base / "linked.json").symlink_to(linked)
    os.mkfifo(base / "zz.json")
    done: list = []
    reader = threading.Thread(target=lambda: done.append((scan_records(base), list_runs(reports),
                                                          past_durations(reports))), daemon=True)
    reader.start()
    reader.join(timeout=20)
    assert done, "reading the run blocked on its FIFO"
    (records, unreadable), runs, _ = done[0]
    assert [p.name for p, _ in records] == ["control-plane-stop.json"]
    assert sorted(p.name for p, _ in unreadable) == ["linked.json", "zz.json"]
    assert all("not a regular file" in why for _, why in unreadable)
    assert [(r.run_id, r.seal) for r in runs] == [(BASE, "not intact")]
