"""``kdrill list --claims --run RUN``: beside each claim, whether that run confirmed or
contradicted it, with the measured values that broke it (harness/cli/claims_measured.py)."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.cli.claims_measured import measured_lines

RUN = "20261206T120000Z-abc123"


def expectation(name, measured, bound, verdict, unit="seconds"):
    return {"name": name, "measured": measured, "bound_text": bound, "unit": unit, "verdict": verdict}


def write_run(reports, records: dict[str, dict]):
    run_dir = reports / RUN
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"run_id": RUN}))
    for stem, record in records.items():
        (run_dir / f"{stem}.json").write_text(json.dumps({"run_id": RUN, "started_at": 1.0, **record}))
    return run_dir


@pytest.fixture
def run_dir(tmp_path):
    return write_run(tmp_path / "reports", {
        "pod-delete": {"drill": "pod-delete", "case": None, "verdict": "passed",
                       "expectations": [expectation("recovery_seconds", 8.1, "<= 30", "passed")]},
        "dns-ndots": {"drill": "dns-ndots", "case": None, "verdict": "failed",
                      "expectations": [expectation("ndots1_queries_per_lookup", 2, "== 1", "failed", "queries"),
                                       expectation("names_outside_cluster_zones", 0, "== 0", "passed", "names")],
                      "observations": {"source_sentence": {"text": "4 queries before the actual one",
                                                           "measured_before_actual": 3, "verdict": "contradicted",
                                                           "why": "3 search domains"}}},
        "api-overload--stock": {"drill": "api-overload", "case": "stock", "verdict": "error", "expectations": []},
    })


def test_each_case_is_confirmed_contradicted_or_not_measured_with_what_broke_it(run_dir):
    lines, unread = measured_lines(run_dir)
    assert unread == []
    assert lines["pod-delete"] == ["confirmed: 1 of 1 expectations held"]
    assert lines["dns-ndots"][0] == "contradicted: 1 of 2 expectations held"
    assert "ndots1_queries_per_lookup: measured 2 queries, bound == 1 (failed)" in lines["dns-ndots"][1]
    assert 'source sentence "4 queries before the actual one": contradicted (measured 3; 3 search domains)' \
        in lines["dns-ndots"][2]
    assert lines["api-overload"] == ["case stock: not measured (error): 0 of 0 expectations held"]


def test_list_claims_prints_them_beside_the_claims_and_not_run_for_the_others(run_dir, capsys):
    assert main(["--reports", str(run_dir.parent), "list", "--claims", "--run", RUN]) == 0
    out = capsys.readouterr().out
    block = out.split("\n\n")
    ndots = next(b for b in block if b.startswith("dns-ndots:"))
    assert f"Measured in run {RUN}:\n    contradicted: 1 of 2 expectations held" in ndots
    etcd = next(b for b in block if b.startswith("etcd-defrag:"))
    assert etcd.endswith(f"Measured in run {RUN}: not run there")


def test_run_without_claims_is_refused_and_a_missing_run_too(tmp_path, capsys):
    assert main(["list", "--run", RUN]) == 2
    assert "--run goes with --claims" in capsys.readouterr().err
    assert main(["--reports", str(tmp_path), "list", "--claims", "--run", RUN]) == 2
    assert "no run directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as empty:
        main(["list", "--claims", "--run", ""])
    assert empty.value.code == 2


def test_what_a_record_says_reaches_the_terminal_escaped(tmp_path):
    run_dir = write_run(tmp_path / "reports", {"pod-delete": {
        "drill": "pod-delete", "case": "x\x1b]0;title\x07", "verdict": "failed\x1b[2J",
        "expectations": [expectation("n\x1b[31m", 1, "<= 0\n", "failed")]}})
    lines, _ = measured_lines(run_dir)
    text = "\n".join(lines["pod-delete"])
    assert "\x1b" not in text and "\x07" not in text and "\\x1b[2J" in text


@pytest.mark.parametrize("record, says", [
    ({"drill": "pod-delete", "verdict": "passed", "expectations": 5}, "not a list of mappings"),
    ({"drill": "pod-delete", "verdict": "passed", "expectations": [expectation("a", 1, "<= 0", "failed")]},
     "its verdict says passed, its expectations do not"),
    ({"drill": "pod-delete", "verdict": ["passed"], "expectations": []}, "not measured (no verdict)"),
    ({"drill": "pod-delete", "verdict": "passed", "expectations": [], "observations": [1]}, "confirmed: 0 of 0"),
])
def test_a_record_not_of_kdrills_shape_is_said_so_never_confirmed(tmp_path, record, says):
    lines, _ = measured_lines(write_run(tmp_path / "reports", {"pod-delete": record}))
    assert says in lines["pod-delete"][0]


def test_a_record_that_does_not_parse_is_named_not_shown_as_not_run(tmp_path, capsys):
    run_dir = write_run(tmp_path / "reports", {})
    (run_dir / "pod-delete.json").write_bytes(b"\xff{not json")
    (run_dir / "etcd-defrag.json").write_text(json.dumps({"drill": ["etcd-defrag"], "verdict": "passed"}))
    assert main(["--reports", str(run_dir.parent), "list", "--claims", "--run", RUN]) == 0
    err = capsys.readouterr().err
    assert "record not read: pod-delete.json" in err and "record not read: etcd-defrag.json: no drill name" in err
