"""``kdrill report`` and ``kdrill verify`` on sealed runs: the reproductions of issue 12.

No cluster: runs are written by hand and sealed by the real sealing function
(``harness.cli.report_and_manifest``) with a key in a temporary state directory.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.cli import main, report_and_manifest
from harness.evidence.manifest import MANIFEST_NAME, SIGNATURE_NAME, SIGNING_KEY_ENV, PublicKeyInfo, load_signing_key

T0 = 1_700_000_000.0


@pytest.fixture(autouse=True)
def key_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KDRILL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv(SIGNING_KEY_ENV, raising=False)


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    return tmp_path / "reports"


def make_sealed_run(reports: Path, run_id: str, verdict: str = "failed") -> Path:
    run_dir = reports / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_id, "started_at": T0, "finished_at": time.time()}))
    record = {"run_id": run_id, "drill": "dns-saturation", "verdict": verdict, "started_at": T0,
              "expectations": [{"name": "x", "verdict": verdict}]}
    (run_dir / "dns-saturation.json").write_text(json.dumps(record, indent=2))
    report_and_manifest(run_dir)
    return run_dir


def kdrill(reports: Path, *args: str) -> int:
    try:
        return main(["--reports", str(reports), *args])
    except SystemExit as exc:  # one-line refusals; argparse errors
        if isinstance(exc.code, str):
            print(exc.code)
            return 1
        return int(exc.code or 0)


def seal_files(run_dir: Path) -> dict[str, bytes]:
    return {n: (run_dir / n).read_bytes() for n in (MANIFEST_NAME, SIGNATURE_NAME, "report.html")}


def test_verify_intact_run_names_the_unpinned_signer(reports: Path, capsys: pytest.CaptureFixture) -> None:
    run = make_sealed_run(reports, "r1")
    assert kdrill(reports, "verify", "r1") == 0
    out = capsys.readouterr().out
    fingerprint = PublicKeyInfo.from_key(load_signing_key()).fingerprint
    assert "intact" in out and fingerprint in out and "not pinned" in out
    assert kdrill(reports, "verify", str(run), "--fingerprint", fingerprint) == 0
    assert "a trusted key" in capsys.readouterr().out


def test_verify_says_where_the_local_key_that_signed_is(reports: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    make_sealed_run(reports, "r1")
    key_file = tmp_path / "state" / "signing-key.pem"
    assert kdrill(reports, "verify", "r1") == 0
    assert f"local key: {key_file} on this machine; to pin it" in capsys.readouterr().out
    # Verified where that key is not (another machine's state directory): said, and nothing created.
    monkeypatch.setenv("KDRILL_STATE_DIR", str(tmp_path / "elsewhere"))
    assert kdrill(reports, "verify", "r1") == 0
    assert "local key: not this machine's" in capsys.readouterr().out
    assert not (tmp_path / "elsewhere").exists()


def test_forged_record_is_not_sealed_in(reports: Path, capsys: pytest.CaptureFixture) -> None:
    run = make_sealed_run(reports, "r1")
    before = seal_files(run)
    (run / "x.json").write_text(json.dumps({"verdict": "passed"}))
    assert kdrill(reports, "report", "r1") == 1
    assert "does not verify" in capsys.readouterr().err
    assert seal_files(run) == before
    assert kdrill(reports, "verify", "r1") == 1
    out = capsys.readouterr().out
    assert "NOT INTACT" in out and "extra: x.json" in out


@pytest.mark.parametrize("tamper", ["delete", "append"])
def test_edited_verdict_with_manifest_deleted_or_appended_is_refused(
        reports: Path, tamper: str, capsys: pytest.CaptureFixture) -> None:
    run = make_sealed_run(reports, "r1")
    record = run / "dns-saturation.json"
    record.write_text(record.read_text().replace('"failed"', '"passed"'))
    if tamper == "delete":
        (run / MANIFEST_NAME).unlink()
    else:
        with (run / MANIFEST_NAME).open("ab") as fh:
            fh.write(b" ")
    manifest_before = (run / MANIFEST_NAME).read_bytes() if tamper == "append" else None
    assert kdrill(reports, "report", "r1") == 1
    assert kdrill(reports, "verify", "r1") == 1
    out = capsys.readouterr().out
    if tamper == "delete":
        assert not (run / MANIFEST_NAME).exists(), "kdrill report must never seal"
        assert "not-sealed: manifest.json" in out
    else:
        assert (run / MANIFEST_NAME).read_bytes() == manifest_before
        assert "signature: manifest.sig" in out and "changed: dns-saturation.json" in out


def test_report_of_an_intact_run_writes_nothing(reports: Path, capsys: pytest.CaptureFixture) -> None:
    run = make_sealed_run(reports, "r1")
    before = seal_files(run)
    assert kdrill(reports, "report", "r1") == 0
    assert "byte for byte" in capsys.readouterr().out
    assert seal_files(run) == before
    assert kdrill(reports, "report", "r1", "--stdout") == 0
    assert capsys.readouterr().out.encode() == before["report.html"]
    assert kdrill(reports, "verify", "r1") == 0


def test_report_refuses_when_a_rendering_would_change_the_sealed_page(
        reports: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    run = make_sealed_run(reports, "r1")
    before = seal_files(run)
    monkeypatch.setattr("harness.evidence.report.__version__", "9.9.9")  # a newer kdrill renders differently
    assert kdrill(reports, "report", "r1") == 1
    assert "sealed evidence" in capsys.readouterr().err
    assert seal_files(run) == before
    assert kdrill(reports, "verify", "r1") == 0


def test_report_and_verify_refuse_what_is_not_a_run(reports: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    make_sealed_run(reports, "r1")
    anywhere = tmp_path / "any" / "dir"
    anywhere.mkdir(parents=True)
    (anywhere / "notes.txt").write_text("mine")
    # Bad input is refused with 2, never 1: 1 says the evidence is not intact.
    assert kdrill(reports, "report", str(anywhere)) == 2
    assert "not a kdrill run" in capsys.readouterr().err
    assert sorted(p.name for p in anywhere.iterdir()) == ["notes.txt"]
    for bad in ("..", "a..b", ".hidden", "a b", "x" * 101):
        assert kdrill(reports, "verify", bad) == 2
        assert "invalid run id" in capsys.readouterr().err
    assert kdrill(reports, "report", "../../x") == 2
    assert not (tmp_path / "x").exists()
    assert kdrill(reports, "verify", "absent") == 2
    assert "no run directory" in capsys.readouterr().err


def test_verify_requires_the_trusted_key(reports: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture) -> None:
    run = make_sealed_run(reports, "r1")
    trusted = tmp_path / "trusted.pem"
    trusted.write_text(PublicKeyInfo.from_key(load_signing_key()).pem)
    assert kdrill(reports, "verify", "r1", "--public-key", str(trusted)) == 0
    # Replace the run by a copy re-sealed with another key.
    forged_reports = tmp_path / "forged"
    shutil.copytree(run, forged_reports / "r1")
    for name in (MANIFEST_NAME, SIGNATURE_NAME, "report.html"):
        (forged_reports / "r1" / name).unlink()
    other = Ed25519PrivateKey.generate()
    (tmp_path / "other.pem").write_bytes(other.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    monkeypatch.setenv(SIGNING_KEY_ENV, str(tmp_path / "other.pem"))
    report_and_manifest(forged_reports / "r1")
    capsys.readouterr()
    assert kdrill(forged_reports, "verify", "r1", "--public-key", str(trusted)) == 1
    out = capsys.readouterr().out
    assert "untrusted-key" in out and PublicKeyInfo.from_key(other).fingerprint in out
    assert kdrill(forged_reports, "verify", "r1", "--public-key", str(tmp_path / "other.pem")) == 2  # bad input
    assert "is a private key" in capsys.readouterr().err


def test_verify_history_names_a_deleted_run(reports: Path, capsys: pytest.CaptureFixture) -> None:
    for name in ("r1", "r2", "r3"):
        make_sealed_run(reports, name)
    assert kdrill(reports, "verify", "--history") == 0
    out = capsys.readouterr().out
    assert "3 runs, intact" in out and "head: r3" in out
    shutil.rmtree(reports / "r2")
    assert kdrill(reports, "verify", "--history", str(reports)) == 1
    out = capsys.readouterr().out
    assert "NOT INTACT" in out
    assert "r3: broken-link: r2 (" in out and "deleted or renamed" in out


def test_verify_needs_a_run_or_history(reports: Path, capsys: pytest.CaptureFixture) -> None:
    make_sealed_run(reports, "r1")
    assert kdrill(reports, "verify") == 2
    assert "--history" in capsys.readouterr().err
    assert kdrill(reports, "verify", "r1", "--history") == 2
    assert "not both" in capsys.readouterr().err
