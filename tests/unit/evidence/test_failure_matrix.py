"""The failure matrix (harness/evidence/failure_matrix.py) and each drill's detection panel in the
report, from records with and without a detection reading; `kdrill matrix RUN`."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from test_report import T0, make_run, record, write_json

from harness import cli
from harness.evidence import failure_matrix
from harness.evidence.report import build_report

DETECTED = {"verdict": "passed", "source": {"prometheus": "http://127.0.0.1:30090", "named_by": "--prometheus"},
            "alerts": [{"alert": "EtcdMemberDown", "outcome": "detected", "verdict": "passed", "why": "",
                        "fired_after_seconds": 17.0, "fires_within_seconds": 60, "condition_after_seconds": 6.0,
                        "for_seconds": 10.0, "resolved_after_seconds": 23.5, "resolves_within_seconds": 120}],
            "also_fired": [{"alert": "EtcdNoLeader", "fired_after_seconds": 31.0, "resolved_after_seconds": 4.0,
                            "labels": {"node": "cp-2"}}], "already_firing": ["Watchdog"],
            "notifications": {"sent": 4.0, "errors": 0.0, "dropped": None}}
UNDETECTED = {"verdict": "failed", "source": DETECTED["source"],
              "alerts": [{"alert": "CoreDNSAbsent", "outcome": "undetected", "verdict": "failed",
                          "why": "the platform's Prometheus has no alerting rule named CoreDNSAbsent",
                          "fired_after_seconds": None, "fires_within_seconds": 60, "condition_after_seconds": None,
                          "for_seconds": None, "resolved_after_seconds": None, "resolves_within_seconds": 120}],
              "also_fired": [], "already_firing": []}


def _run(tmp_path: Path) -> Path:
    run_dir = make_run(tmp_path / "run-1")
    for name, detection in (("control-plane-stop--paused", DETECTED), ("dns-outage", UNDETECTED)):
        path = run_dir / f"{name}.json"
        data = json.loads(path.read_text())
        data["detection"] = detection
        data["scenario"]["detection"] = [{"alert": a["alert"], "fires_within_seconds": a["fires_within_seconds"],
                                          "resolves_within_seconds": a["resolves_within_seconds"]}
                                         for a in detection["alerts"]]
        write_json(path, data)
    return run_dir


def test_each_row_says_impact_detection_mitigation_and_recovery(tmp_path):
    rows = failure_matrix.run_rows(_run(tmp_path))
    first, second = rows
    assert first["detection_verdict"] == "detected"
    assert first["detection"] == "EtcdMemberDown: detected after 17 s; also fired: EtcdNoLeader"
    assert first["recovery_seconds"] == 23.5 and "expectations held" in first["impact"]
    assert second["detection_verdict"] == "undetected" and second["recovery_seconds"] is None
    assert second["detection"] == "CoreDNSAbsent: undetected"


def test_a_record_without_detection_is_not_checked_never_detected():
    row = failure_matrix.matrix_rows([record("pod-delete", None, "passed", T0)])[0]
    assert row["detection_verdict"] == "not checked" and row["recovery_seconds"] is None
    forged = record("pod-delete", None, "passed", T0, detection={"verdict": "passed", "alerts": "yes"})
    row = failure_matrix.matrix_rows([forged])[0]
    assert row["verdict"] == "error" and row["detection_verdict"] == "error"


def test_a_csv_cell_a_spreadsheet_would_run_is_kept_as_text():
    rows = [{**{k: None for k in failure_matrix.COLUMNS}, "drill": "=HYPERLINK(1)", "case": "+cmd", "impact": "@SUM",
             "detection": "-1", "recovery_seconds": 12.5}]
    line = failure_matrix.as_csv(rows).splitlines()[1]
    assert line.startswith("'=HYPERLINK(1),'+cmd,,'@SUM,'-1,") and line.endswith(",12.5")


def test_the_matrix_is_written_as_csv_and_json_and_the_report_shows_it_first(tmp_path):
    run_dir = _run(tmp_path)
    csv_path, json_path = failure_matrix.write(run_dir)
    rows = list(csv.DictReader(io.StringIO(csv_path.read_text())))
    assert [r["detection_verdict"] for r in rows] == ["detected", "undetected"]
    assert json.loads(json_path.read_text())["columns"] == list(failure_matrix.COLUMNS)
    page = build_report(run_dir).read_text()
    assert page.index("<h2>Failure matrix</h2>") < page.index("<h2>Run</h2>")
    assert '<span class="fail-text">undetected</span>' in page
    assert "Would the team notice? (detection)" in page and "<code>EtcdNoLeader</code> after 31.0 s" in page
    assert "no alerting rule named CoreDNSAbsent" in page
    assert "from the fault on: 4 sent, 0 errors, — dropped." in page


def test_kdrill_matrix_prints_the_rows_and_csv(tmp_path, capsys):
    run_dir = _run(tmp_path)
    # A manifest that does not seal the run: printed, said NOT INTACT, exit 1.
    assert cli.main(["matrix", str(run_dir)]) == 1
    assert "sealed, NOT INTACT" in capsys.readouterr().out
    (run_dir / "manifest.json").unlink()
    assert cli.main(["matrix", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "detection:  UNDETECTED: CoreDNSAbsent: undetected" in out and "not sealed" in out
    assert cli.main(["matrix", str(run_dir), "-o", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == ",".join(failure_matrix.COLUMNS)
    assert cli.main(["matrix", str(tmp_path / "nothing-here")]) == 2


def test_kdrill_matrix_names_a_record_it_cannot_read_and_escapes_its_csv(tmp_path, capsys):
    run_dir = _run(tmp_path)
    (run_dir / "manifest.json").unlink()
    data = json.loads((run_dir / "dns-outage.json").read_text())
    data["drill"] = "dns-outage\x1b]0;pwn\x07"
    write_json(run_dir / "dns-outage.json", data)
    assert cli.main(["matrix", str(run_dir), "-o", "csv"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "dns-outage\\x1b]0;pwn\\x07," in out
    # A record slot that holds no record: named on stderr, and the exit says the matrix is short.
    (run_dir / "dns-outage.json").write_text("[1]")
    assert cli.main(["matrix", str(run_dir)]) == 1
    captured = capsys.readouterr()
    assert "dns-outage.json: record not read" in captured.err and "dns-outage" not in captured.out


def test_a_drill_expecting_no_alert_says_so_with_what_fired():
    read = {"verdict": "none expected", "source": DETECTED["source"], "expected": [], "alerts": [],
            "also_fired": [{"alert": "CoreDNSSlow", "fired_after_seconds": 52.0, "resolved_after_seconds": None,
                            "labels": {}}], "already_firing": []}
    row = failure_matrix.matrix_rows([record("dns-ndots", None, "passed", T0, detection=read)])[0]
    assert (row["detection_verdict"], row["detection"]) == ("none expected", "also fired: CoreDNSSlow")
    quiet = {**read, "also_fired": []}
    row = failure_matrix.matrix_rows([record("dns-ndots", None, "passed", T0, detection=quiet)])[0]
    assert (row["detection_verdict"], row["detection"]) == ("none expected", "nothing fired")
