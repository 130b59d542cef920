"""Bad input to ``verify``, ``report``, ``history``, ``new`` and ``run`` exits 2 with one line on
stderr, before anything is written: 1 is kept for "a drill failed" and "the evidence is not
intact", so a typo is never taken for tampered evidence. And ``history`` (or the end of a run)
never writes its index into a run directory, or into the current directory for an empty
``--reports``.

No cluster: runs are written by hand and sealed by the real sealing function.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from harness.cli import main, report_and_manifest, write_history_index
from harness.evidence.manifest import SIGNING_KEY_ENV

T0 = 1_700_000_000.0


@pytest.fixture(autouse=True)
def key_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KDRILL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv(SIGNING_KEY_ENV, raising=False)
    monkeypatch.delenv("KDRILL_REPORTS", raising=False)


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    return tmp_path / "reports"


def make_sealed_run(reports: Path, run_id: str) -> Path:
    run_dir = reports / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_id, "started_at": T0, "finished_at": time.time()}))
    record = {"run_id": run_id, "drill": "dns-saturation", "verdict": "passed", "started_at": T0,
              "expectations": [{"name": "x", "verdict": "passed"}]}
    (run_dir / "dns-saturation.json").write_text(json.dumps(record, indent=2))
    report_and_manifest(run_dir)
    return run_dir


def refused(capsys: pytest.CaptureFixture, *argv: str) -> str:
    """Run kdrill; it must exit 2 with one line on stderr. Returns that line."""
    capsys.readouterr()
    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err
    return err


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


@pytest.mark.parametrize("argv, says", [
    (["verify", "nosuch"], "no run directory"),
    (["verify", "a..b"], "invalid run id"),
    (["report", "nosuch"], "no run directory"),
    (["report", "a..b"], "invalid run id"),
    (["verify", "--fingerprint", "zz", "r1"], "--fingerprint: 'zz' is not a SHA-256 key fingerprint"),
    (["verify", "--history", "--fingerprint", "zz"], "--fingerprint"),
    (["verify"], "give a run id or directory"),
    (["verify", "r1", "--history"], "not both"),
])
def test_verify_and_report_refuse_bad_input_with_2(reports: Path, capsys: pytest.CaptureFixture,
                                                   argv: list[str], says: str) -> None:
    make_sealed_run(reports, "r1")
    before = tree(reports)
    assert says in refused(capsys, "--reports", str(reports), *argv)
    assert tree(reports) == before


def test_report_refuses_a_sealed_directory_that_holds_no_run(reports: Path, capsys: pytest.CaptureFixture) -> None:
    # It verifies (sealed as it is), but holds no run.json and no record: a ReportError traceback, exit 1.
    from harness.evidence.manifest import load_signing_key, seal_run

    run = reports / "r1"
    run.mkdir(parents=True)
    (run / "notes.txt").write_text("not a run\n")
    seal_run(run, load_signing_key(), previous=None)
    for argv in (["report", "r1"], ["report", "r1", "--stdout"]):
        err = refused(capsys, "--reports", str(reports), *argv)
        assert err.startswith("kdrill report: cannot build a report:") and "has no run.json and no drill records" in err


def test_verify_refuses_a_public_key_that_is_not_one(reports: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    make_sealed_run(reports, "r1")
    not_a_key = tmp_path / "hostname"
    not_a_key.write_text("myhost\n")
    assert "--public-key" in refused(capsys, "--reports", str(reports), "verify", "--public-key", str(not_a_key), "r1")
    assert "--public-key" in refused(capsys, "--reports", str(reports), "verify", "--public-key",
                                     str(tmp_path / "absent.pem"), "r1")


def test_verify_history_refuses_a_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert "not a directory" in refused(capsys, "verify", "--history", str(tmp_path / "absent"))


def test_tampered_evidence_still_exits_1(reports: Path, capsys: pytest.CaptureFixture) -> None:
    run = make_sealed_run(reports, "r1")
    (run / "dns-saturation.json").write_text("{}")
    assert main(["--reports", str(reports), "verify", "r1"]) == 1
    assert "NOT INTACT" in capsys.readouterr().out
    assert main(["--reports", str(reports), "verify", "--history"]) == 1
    assert main(["--reports", str(reports), "report", "r1"]) == 1
    assert main(["--reports", str(reports), "history"]) == 1


def test_history_refuses_a_missing_reports_directory(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    absent = tmp_path / "absent"
    err = refused(capsys, "--reports", str(absent), "history")
    assert err == (f"kdrill history: no reports directory {absent} (no run yet, or set --reports / KDRILL_REPORTS)")
    assert not absent.exists()
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert "expected a directory, got a file" in refused(capsys, "--reports", str(a_file), "history")


def test_a_directory_holding_no_run_is_not_a_reports_directory(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # Empty, or another project's directory: not "0 runs, intact", and no index.html written into it.
    for directory in (tmp_path / "empty", tmp_path / "project"):
        (directory / "docs").mkdir(parents=True)
        assert "expected a reports directory holding runs" in refused(capsys, "--reports", str(directory), "history")
        assert "expected a reports directory holding runs" in refused(capsys, "verify", "--history", str(directory))
        assert tree(directory) == ["docs"]


@pytest.mark.parametrize("option", ["--public-key", "--head"])
def test_a_key_or_head_that_is_not_a_regular_file_is_refused_unread(reports: Path, tmp_path: Path, option: str,
                                                                    capsys: pytest.CaptureFixture) -> None:
    # /dev/zero never ends and a FIFO with no writer would block: neither is read.
    make_sealed_run(reports, "r1")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    where = ["verify", "r1"] if option == "--public-key" else ["verify", "--history"]
    for path in ("/dev/zero", str(fifo)):
        assert "not a regular file" in refused(capsys, "--reports", str(reports), *where, option, path)


def test_a_usage_error_prints_what_was_given_escaped(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["cluster", "status", "\x1b[31mnope"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "unrecognized arguments: \\x1b[31mnope" in err


def test_history_never_writes_into_a_run_directory(reports: Path, capsys: pytest.CaptureFixture) -> None:
    run = make_sealed_run(reports, "r1")
    before = tree(run)
    err = refused(capsys, "--reports", str(run), "history")
    assert "got a run directory" in err and str(run) in err
    assert tree(run) == before and not (run / "index.html").exists()
    assert main(["--reports", str(reports), "verify", "r1"]) == 0  # its seal is intact
    # An unsealed run (run.json only) is a run directory too.
    unsealed = reports / "r2"
    unsealed.mkdir()
    (unsealed / "run.json").write_text("{}")
    assert "got a run directory" in refused(capsys, "--reports", str(unsealed), "history")
    assert sorted(p.name for p in unsealed.iterdir()) == ["run.json"]
    # The reports directory itself still gets its index.
    assert main(["--reports", str(reports), "history"]) == 1  # r2 is not sealed
    assert (reports / "index.html").is_file()


def test_nothing_is_written_into_a_directory_inside_a_run(reports: Path, capsys: pytest.CaptureFixture) -> None:
    run = make_sealed_run(reports, "r1")
    results = run / "allure-results"  # real runs have one; it is sealed with the run
    results.mkdir()
    (run / "manifest.json").unlink()
    (run / "manifest.sig").unlink()
    report_and_manifest(run)
    before = tree(run)
    assert "inside the run" in refused(capsys, "--reports", str(results), "history")
    assert write_history_index(results) is None
    assert tree(run) == before and main(["--reports", str(reports), "verify", "r1"]) == 0


def test_verify_history_refuses_a_run_directory(reports: Path, capsys: pytest.CaptureFixture) -> None:
    run = make_sealed_run(reports, "r1")
    err = refused(capsys, "verify", "--history", str(run))
    assert "got a run directory" in err and f"kdrill verify {run}" in err


def test_list_refuses_a_directory_with_no_scenario(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert "got none" in refused(capsys, "list", "--scenarios-dir", str(tmp_path))


def test_the_index_is_never_written_into_a_run_directory(reports: Path) -> None:
    run = make_sealed_run(reports, "r1")
    assert write_history_index(run) is None
    assert not (run / "index.html").exists()
    assert write_history_index(reports) == reports / "index.html"


def test_run_refuses_a_reports_directory_that_is_a_run(reports: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture) -> None:
    def untouchable(*args, **kwargs):
        raise AssertionError("kdrill run went past its refusals")

    monkeypatch.setattr("harness.cli.prepare_kind", untouchable)
    monkeypatch.setattr("harness.cli.run_until_reverted", untouchable)
    run = make_sealed_run(reports, "r1")
    before = tree(run)
    assert "got a run directory" in refused(capsys, "--reports", str(run), "run", "--plan", "dns-saturation")
    assert "got a run directory" in refused(capsys, "--reports", str(run), "run", "--run-id", "inner",
                                            "dns-saturation")
    assert tree(run) == before


@pytest.mark.parametrize("argv", [["history"], ["verify", "r1"], ["verify", "--history"], ["report", "r1"],
                                  ["compare", "r1", "r1"], ["run", "--plan", "dns-saturation"]])
@pytest.mark.parametrize("how", ["option", "environment"])
def test_an_empty_reports_value_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture, argv: list[str], how: str) -> None:
    cwd = tmp_path / "cwd"
    make_sealed_run(cwd, "r1")  # a run in the current directory, which Path("") would name
    monkeypatch.chdir(cwd)
    before = tree(cwd)
    if how == "environment":
        monkeypatch.setenv("KDRILL_REPORTS", "")
        err = refused(capsys, *argv)
    else:
        err = refused(capsys, "--reports", "", *argv)
    assert "--reports / KDRILL_REPORTS: expected a reports directory, got an empty value" in err
    assert tree(cwd) == before and not (cwd / "index.html").exists()


@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_platform_value_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture, value: str) -> None:
    # It meant "no profile": `--platform "$PROFILE"` with the variable unset drilled the plain cluster.
    err = refused(capsys, "--reports", str(tmp_path / "r"), "run", "--plan", "--platform", value, "dns-saturation")
    assert "--platform: expected a profile directory (holding platform.yaml), got an empty value" in err
    assert not (tmp_path / "r").exists()


def test_an_empty_reports_value_does_not_stop_commands_that_do_not_use_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("KDRILL_REPORTS", "")
    assert main(["list"]) == 0


def test_new_refuses_bad_input_with_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "scenarios"
    assert "name 'Bad_Name': expected lowercase" in refused(capsys, "new", "Bad_Name", "--dir", str(out))
    assert not out.exists()
    assert main(["new", "ok-one", "--dir", str(out)]) == 0
    written = (out / "ok-one.yaml").read_text()
    assert "exists; choose another name" in refused(capsys, "new", "ok-one", "--dir", str(out))
    assert (out / "ok-one.yaml").read_text() == written
    (out / "dangling.yaml").symlink_to(tmp_path / "nowhere")
    assert "exists" in refused(capsys, "new", "dangling", "--dir", str(out))


def test_new_refuses_a_dir_that_is_not_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    a_file = tmp_path / "passwd"
    a_file.write_text("root:x:0:0\n")
    err = refused(capsys, "new", "x", "--dir", str(a_file))
    assert err == f"kdrill new: --dir {a_file}: expected a directory, got a file"
    err = refused(capsys, "new", "x", "--dir", str(a_file / "sub"))
    assert err == f"kdrill new: --dir {a_file / 'sub'}: expected a directory, got a file ({a_file})"
    assert a_file.read_text() == "root:x:0:0\n"
    # A directory that does not exist yet is made in an existing one, never a whole new tree.
    err = refused(capsys, "new", "x", "--dir", str(tmp_path / "a" / "b"))
    assert err == (f"kdrill new: --dir {tmp_path / 'a' / 'b'}: expected an existing directory, or a new one in an "
                   f"existing directory, got one whose parent {tmp_path / 'a'} does not exist")
    assert not (tmp_path / "a").exists()
    assert main(["new", "x", "--dir", str(tmp_path / "a")]) == 0
    assert (tmp_path / "a" / "x.yaml").is_file()


def test_a_linked_run_is_not_verified_by_id_as_if_it_were_this_directorys(reports: Path, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    elsewhere = make_sealed_run(tmp_path / "elsewhere", "r1")
    reports.mkdir(parents=True, exist_ok=True)
    (reports / "r1").symlink_to(elsewhere)
    for command in ("verify", "report"):
        assert "is a symbolic link" in refused(capsys, "--reports", str(reports), command, "r1")
    assert main(["verify", str(elsewhere)]) == 0  # where it lives, it verifies



def test_compare_refuses_a_sealed_run_whose_run_json_is_not_an_object(reports: Path, capsys: pytest.CaptureFixture):
    for run_id in ("r1", "r2"):
        run_dir = reports / run_id
        run_dir.mkdir(parents=True)
        (run_dir / "run.json").write_text("[1, 2]")  # intact as sealed, but not what a run writes
        (run_dir / "dns-saturation.json").write_text(json.dumps(
            {"run_id": run_id, "drill": "dns-saturation", "verdict": "passed", "started_at": T0, "expectations": []}))
        report_and_manifest(run_dir)
    err = refused(capsys, "--reports", str(reports), "compare", "r1", "r2")
    assert "r1/run.json: expected a JSON object, got list" in err


def test_version_and_the_global_options_after_the_subcommand(reports: Path, capsys: pytest.CaptureFixture):
    from harness import __version__

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"kdrill {__version__}"
    # --reports after the subcommand means what it means before it: here, a directory that is not there.
    before = refused(capsys, "--reports", str(reports / "none"), "history")
    after = refused(capsys, "history", "--reports", str(reports / "none"))
    assert before == after and str(reports / "none") in after


def test_an_internal_error_exits_3_with_one_line_and_the_traceback_only_with_v(monkeypatch: pytest.MonkeyPatch,
                                                                            capsys: pytest.CaptureFixture):
    """3 is neither "a drill failed" (1) nor "input refused" (2): a bug of kdrill's."""
    import harness.cli as cli

    def broken(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "cmd_doctor", broken)
    assert main(["doctor"]) == 3
    err = capsys.readouterr().err
    assert err.strip() == "kdrill: internal error: RuntimeError: a bug (-v for the traceback)"
    assert main(["doctor", "-v"]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().endswith("kdrill: internal error: RuntimeError: a bug")


@pytest.mark.parametrize("argv", [
    ["run", "--plan", "--scenarios-dir", ""], ["list", "--scenarios-dir", " "], ["new", "x", "--dir", ""],
    ["recover", "--ledger-dir", ""], ["run", "--plan", "--kubeconfig", ""],
])
def test_an_empty_path_is_refused_not_taken_for_the_current_directory(tmp_path: Path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as refused_:
        main(argv)
    assert refused_.value.code == 2
    assert "expected a path, got an empty value" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing written here


def test_an_empty_state_directory_is_refused_and_a_missing_one_is_not_read_as_an_empty_ledger(
        tmp_path: Path, monkeypatch, capsys):
    from harness.cli.doctor import check_ledger

    monkeypatch.setenv("KDRILL_STATE_DIR", "")
    assert "KDRILL_STATE_DIR: expected kdrill's state directory, got an empty value" in refused(capsys, "list")
    monkeypatch.setenv("KDRILL_STATE_DIR", str(tmp_path / "typo"))
    check = check_ledger()
    assert not check.ok and "is not a directory" in check.detail, check
    (tmp_path / "typo").mkdir()
    assert check_ledger().ok  # there, and no ledger yet: empty


@pytest.mark.parametrize("args, says", [
    (["--kubeconfig", "{tmp}/none"], "does not exist"),
    (["--kubeconfig", "{tmp}"], "cannot be read"),
    (["--kubeconfig", "{tmp}/kc", "--context", "nope"], "context 'nope' is not in"),
])
def test_plan_refuses_a_kubeconfig_or_context_the_run_could_not_reach(tmp_path: Path, capsys, args, says):
    (tmp_path / "kc").write_text("apiVersion: v1\nkind: Config\ncurrent-context: a\n"
                                 "clusters: [{name: s, cluster: {server: 'https://10.0.0.1:6443'}}]\n"
                                 "users: [{name: u, user: {}}]\ncontexts: [{name: a, context: {cluster: s, user: u}}]\n")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert says in refused(capsys, "--reports", str(tmp_path / "reports"), "run", "--plan", *args, "pod-delete")
    capsys.readouterr()
    assert main(["--reports", str(tmp_path / "reports"), "run", "--plan", "--kubeconfig", str(tmp_path / "kc"),
                 "pod-delete"]) == 0
    assert "on context a" in capsys.readouterr().out


def test_new_writes_into_a_scenarios_directory_of_its_own_by_default(tmp_path: Path, monkeypatch, capsys):
    """Not the current directory, often a repository root whose other YAML files a run would read."""
    monkeypatch.chdir(tmp_path)
    assert main(["new", "my-drill"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["scenarios"]
    assert (tmp_path / "scenarios" / "my-drill.yaml").is_file()
    assert "--scenarios-dir scenarios my-drill" in capsys.readouterr().out


def test_list_and_verify_print_json_and_yaml(reports: Path, capsys: pytest.CaptureFixture):
    import yaml

    capsys.readouterr()
    assert main(["list", "-o", "json"]) == 0
    scenarios = json.loads(capsys.readouterr().out)
    assert {"pod-delete", "control-plane-stop"} <= {s["name"] for s in scenarios}
    assert all(s["path"].endswith(".yaml") and s["claim"] and s["fault"]["kind"] for s in scenarios)
    assert main(["list", "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == scenarios

    run_dir = make_sealed_run(reports, "r1")
    assert main(["--reports", str(reports), "verify", "r1", "-o", "json"]) == 0
    intact = json.loads(capsys.readouterr().out)
    assert intact["intact"] is True and intact["run_id"] == "r1" and intact["problems"] == []
    (run_dir / "dns-saturation.json").write_text("{}")  # changed after the seal
    assert main(["--reports", str(reports), "verify", "r1", "-o", "yaml"]) == 1
    broken = yaml.safe_load(capsys.readouterr().out)
    assert broken["intact"] is False and {"kind": "changed", "subject": "dns-saturation.json"} in [
        {k: p[k] for k in ("kind", "subject")} for p in broken["problems"]]


def test_history_prints_json_and_writes_no_index(reports: Path, capsys: pytest.CaptureFixture):
    make_sealed_run(reports, "r1")
    capsys.readouterr()
    assert main(["--reports", str(reports), "history", "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["intact"] is True and [r["run_id"] for r in data["runs"]] == ["r1"]
    assert data["runs"][0]["seal"] == "intact" and sum(data["runs"][0]["verdicts"].values()) == 1
    assert not (reports / "index.html").exists()


def test_every_option_and_argument_has_help():
    import argparse

    from harness.cli import parser

    def without_help(p: argparse.ArgumentParser, prefix: str) -> list[str]:
        found = []
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found += without_help(sub, f"{prefix} {name}")
            elif not action.help:
                found.append(f"{prefix} {'/'.join(action.option_strings) or action.dest}")
        return found

    assert without_help(parser(), "kdrill") == []


def test_plan_prints_json_and_o_without_plan_is_refused(reports: Path, capsys: pytest.CaptureFixture):
    capsys.readouterr()
    assert main(["--reports", str(reports), "run", "--plan", "-o", "json", "pod-delete", "control-plane-stop"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [c["case"] for c in data["cases"]] == ["pod-delete", "control-plane-stop[components]",
                                                  "control-plane-stop[node-loss]"]
    pod_delete = data["cases"][0]
    assert pod_delete["fault"]["kind"] == "pod-delete" and pod_delete["windows_seconds"]["hold_seconds"] > 0
    assert data["touches_nothing"] is True and not reports.exists()
    assert "-o is for --plan" in refused(capsys, "--reports", str(reports), "run", "-o", "json", "pod-delete")
