"""Signing through an external signer ($KDRILL_SIGNER), the head kept elsewhere ($KDRILL_HEAD_LOG,
``verify --history --head``) and the trusted keys of configuration ($KDRILL_TRUSTED_FINGERPRINTS).

The signer is a shell script holding its key in a directory only its user can read
(sealed_runs.py); as root the tests run it as uid 65534, so this process never reads the key.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sealed_runs import DRILL, RUNNER, ExternalSigner, sealed, write_run

from harness.cli import main, report_and_manifest
from harness.evidence.chain import verify_history
from harness.evidence.heads import HEAD_LOG_ENV, HeadError, read_heads
from harness.evidence.manifest import MANIFEST_NAME, SIGNATURE_NAME, SIGNING_KEY_ENV, load_signing_key
from harness.evidence.manifest_format import EXTERNAL_SIGNER, LOCAL_KEY
from harness.evidence.signers import SIGNER_ENV, SIGNER_PUBLIC_KEY_ENV, SigningKeyError, load_signer
from harness.evidence.signing_keys import TRUSTED_ENV, PublicKeyInfo, configured_trust
from harness.evidence.verification import verify_run


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    return tmp_path / "reports"


def manifest_of(run_dir: Path) -> dict:
    return json.loads((run_dir / MANIFEST_NAME).read_text())


def kdrill(reports: Path, capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    status = main(["--reports", str(reports), *args])
    out = capsys.readouterr()
    return status, " ".join((out.out + out.err).split())


# --------------------------------------------------------------------------- #
# The external signer
# --------------------------------------------------------------------------- #


def test_a_run_signed_through_the_external_signer_verifies_only_with_that_signer_s_key(
        reports: Path, external_signer: ExternalSigner, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    external_signer.enable(monkeypatch)
    run = sealed(reports / "r1")
    signer = manifest_of(run)["signer"]
    assert signer["custody"] == EXTERNAL_SIGNER and signer["fingerprint_sha256"] == external_signer.fingerprint
    result = verify_run(run, trusted_fingerprints=[external_signer.fingerprint])
    assert result.ok and result.custody == EXTERNAL_SIGNER
    assert "through an external signer: the runner did not hold the key" in result.signer_line()
    local = PublicKeyInfo.from_key(load_signing_key()).fingerprint  # the runner's own key, signing nothing here
    assert verify_run(run, trusted_fingerprints=[local]).kinds == ["untrusted-key"]
    status, said = kdrill(reports, capsys, "verify", "r1", "--public-key", str(external_signer.public_key))
    assert status == 0 and "(a trusted key); through an external signer" in said
    assert "through an external signer" in (run / "report.html").read_text()
    # A plain Ed25519 signature of the manifest's bytes: OpenSSL checks it with the signer's key.
    if shutil.which("openssl"):
        subprocess.run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", str(external_signer.public_key),
                        "-rawin", "-in", str(run / MANIFEST_NAME), "-sigfile", str(run / SIGNATURE_NAME)],
                       check=True, capture_output=True)


def test_the_signer_runs_as_another_user_whose_key_the_runner_cannot_read(
        reports: Path, external_signer: ExternalSigner, monkeypatch: pytest.MonkeyPatch) -> None:
    if not external_signer.other_user:
        pytest.skip("not root (or no setpriv): the signer cannot be started as another user here")
    external_signer.enable(monkeypatch)
    sealed(reports / "r1")
    key = external_signer.directory / "key.pem"
    assert (key.stat().st_uid, key.stat().st_mode & 0o777) == (65534, 0o600)
    assert (external_signer.directory.stat().st_mode & 0o777) == 0o700
    # The signer's log was written by the signer, as its own user.
    log = external_signer.directory / "signed-runs"
    assert log.stat().st_uid == 65534 and log.read_text() == "r1\n"
    # A runner that is not root (any other uid) cannot read the key.
    denied = subprocess.run(["setpriv", f"--reuid={RUNNER}", f"--regid={RUNNER}", "--clear-groups", "cat", str(key)],
                            capture_output=True, text=True, timeout=30)
    assert denied.returncode != 0 and "Permission denied" in denied.stderr


def test_the_signer_signs_a_run_once_so_a_run_cannot_be_sealed_again_through_it(
        reports: Path, external_signer: ExternalSigner, monkeypatch: pytest.MonkeyPatch) -> None:
    external_signer.enable(monkeypatch)
    run = sealed(reports / "r1")
    for name in (MANIFEST_NAME, SIGNATURE_NAME, "report.html"):
        (run / name).unlink()
    record = run / f"{DRILL}.json"
    record.write_text(record.read_text().replace('"kind-kdrill"', '"kind-production"'))
    with pytest.raises(SystemExit, match="refused to sign: .*run r1 was signed before; a run is sealed once"):
        report_and_manifest(run)
    assert not (run / MANIFEST_NAME).exists() and not (run / SIGNATURE_NAME).exists()


def command(script: str) -> str:
    return shlex.join([sys.executable, "-c", script])


@pytest.mark.parametrize("signer, says", [
    (command("import sys; sys.stdin.read(); print('hello')"), "expected a 64-byte Ed25519 signature"),
    (command("import sys; sys.stdin.read(); sys.stdout.buffer.write(bytes(range(192, 256)))"), "bytes that are not text"),
    (command("import sys; sys.stdin.read(); print('ab' * 64)"), "does not verify with its public key"),
    (command("import sys; sys.stdin.read(); sys.exit('no token')"), "refused to sign: .* exited 1: no token"),
    ("/nonexistent/kdrill-signer", "cannot be started"),
], ids=["garbage", "raw-bytes", "another-key", "fails", "missing"])
def test_a_signer_that_does_not_sign_with_its_key_seals_nothing(
        reports: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signer: str, says: str) -> None:
    public = tmp_path / "signer.pub.pem"
    public.write_bytes(Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    monkeypatch.setenv(SIGNER_ENV, signer)
    monkeypatch.setenv(SIGNER_PUBLIC_KEY_ENV, str(public))
    run = write_run(reports / "r1")
    with pytest.raises(SystemExit, match=f"NOT sealed: .*{says}"):
        report_and_manifest(run)
    assert not (run / MANIFEST_NAME).exists() and not (run / SIGNATURE_NAME).exists()


def test_a_signer_configured_wrong_is_refused_before_anything_runs(
        reports: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    private = tmp_path / "key.pem"
    private.write_bytes(Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    cases = [({SIGNER_ENV: ""}, "KDRILL_SIGNER: expected the signing command, got an empty value"),
             ({SIGNER_ENV: "sign"}, "KDRILL_SIGNER is set but KDRILL_SIGNER_PUBLIC_KEY is not"),
             ({SIGNER_ENV: "sign", SIGNER_PUBLIC_KEY_ENV: str(private)}, "is a private key; give its public half"),
             ({SIGNER_ENV: "sign", SIGNING_KEY_ENV: str(private)}, "both KDRILL_SIGNER and KDRILL_SIGNING_KEY"),
             ({SIGNER_ENV: "sign 'unclosed"}, "KDRILL_SIGNER: expected a command line")]
    def past_the_refusals() -> None:
        raise AssertionError("kdrill run went past its refusals to make a cluster")

    monkeypatch.setattr("harness.cli.prepare_kind", past_the_refusals)  # a guard: no cluster is ever made here
    for env, says in cases:
        with monkeypatch.context() as m:
            for name, value in env.items():
                m.setenv(name, value)
            with pytest.raises(SigningKeyError, match=says):
                load_signer()
            status, said = kdrill(reports, capsys, "run", "--run-id", "r1", "pod-delete")
            assert status == 2 and says.split(":")[0] in said
    assert not reports.exists()


def test_a_run_sealed_before_custody_was_recorded_verifies_as_a_local_key_s(reports: Path) -> None:
    run = sealed(reports / "r1")
    manifest = manifest_of(run)
    assert manifest["signer"]["custody"] == LOCAL_KEY
    for custody, kinds in ((None, []), ("a-hardware-token", ["manifest"])):
        if custody is None:
            del manifest["signer"]["custody"]  # as an older kdrill wrote it
        else:
            manifest["signer"]["custody"] = custody
        raw = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
        (run / MANIFEST_NAME).write_bytes(raw)
        (run / SIGNATURE_NAME).write_bytes(load_signing_key().sign(raw))
        result = verify_run(run)
        assert result.kinds == kinds and result.custody == LOCAL_KEY
        assert "signed by a local key: not for audit" in result.signer_line()


# --------------------------------------------------------------------------- #
# The head kept elsewhere
# --------------------------------------------------------------------------- #


def test_each_seal_appends_its_head_and_a_head_that_cannot_be_written_fails_loudly(
        reports: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "heads.jsonl"
    monkeypatch.setenv(HEAD_LOG_ENV, str(log))
    runs = [sealed(reports / name) for name in ("r1", "r2")]
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(h["run_id"], h["sealed_at"]) for h in lines] == [(r.name, manifest_of(r)["sealed_at"]) for r in runs]
    assert [h.run_id for h in read_heads(str(log))] == ["r1", "r2"]
    monkeypatch.setenv(HEAD_LOG_ENV, str(tmp_path / "no-such-dir" / "heads.jsonl"))
    with pytest.raises(SystemExit, match=r"r3 is sealed, but its head was NOT appended to .*append this line there "
                                         r'yourself: \{"manifest_sha256"'):
        sealed(reports / "r3")
    assert verify_run(reports / "r3").ok  # sealed all the same


def test_a_run_sealed_again_after_its_head_was_exported_and_another_chain_fail_against_the_heads(
        reports: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "heads.jsonl"
    monkeypatch.setenv(HEAD_LOG_ENV, str(log))
    sealed(reports / "r1")
    run = sealed(reports / "r2")
    for name in (MANIFEST_NAME, SIGNATURE_NAME, "report.html"):
        (run / name).unlink()
    report_and_manifest(run)  # sealed again, its new head appended too
    problems = verify_history(reports, heads=read_heads(str(log))).problems
    assert [(p.kind, p.subject) for p in problems] == [("head", "r2"), ("head", "r2")]
    said = " ".join(str(p) for p in problems)
    assert "replaced or re-sealed" in said and "sealed again after its head was exported" in said
    # Another reports directory, same key, same run ids: another chain.
    other = tmp_path / "other"
    monkeypatch.delenv(HEAD_LOG_ENV)
    for name in ("r1", "r2", "r3"):
        sealed(other / name)
    kinds = [(p.kind, p.subject) for p in verify_history(other, heads=read_heads(str(log))).problems]
    assert ("head", "r1") in kinds and ("head", "r2") in kinds and ("head", "r3") in kinds


@pytest.mark.parametrize("content, says", [
    ("", "expected one head a line"),
    ("not json\n", ":1: expected a JSON object with run_id and manifest_sha256"),
    ('{"run_id": "r1", "manifest_sha256": "xyz"}\n', ":1: manifest_sha256: expected 64 lowercase hex digits"),
    ('{"run_id": "../r1", "manifest_sha256": "' + "a" * 64 + '"}\n', ":1: run_id: expected a run id"),
    ('{"run_id": "r1", "run_id": "r2", "manifest_sha256": "' + "a" * 64 + '"}\n', "appears twice"),
])
def test_a_head_that_is_not_one_is_refused_with_its_file_and_line(
        reports: Path, tmp_path: Path, capsys: pytest.CaptureFixture, content: str, says: str) -> None:
    sealed(reports / "r1")
    log = tmp_path / "heads.jsonl"
    log.write_text(content)
    with pytest.raises(HeadError, match=says):
        read_heads(str(log))
    status, said = kdrill(reports, capsys, "verify", "--history", "--head", str(log))
    assert status == 2 and str(log) in said and says.lstrip(":1 ") in said
    status, said = kdrill(reports, capsys, "verify", "r1", "--head", "r1:" + "a" * 64)
    assert status == 2 and "--head is for --history" in said


# --------------------------------------------------------------------------- #
# The trusted keys of configuration
# --------------------------------------------------------------------------- #


def test_trusted_fingerprints_from_the_environment_are_checked_and_a_bad_one_refused(
        reports: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    run = sealed(reports / "r1")
    ours = manifest_of(run)["signer"]["fingerprint_sha256"]
    monkeypatch.setenv(TRUSTED_ENV, f"{'ab' * 32}, SHA256:{ours.upper()}")
    assert configured_trust() == ["ab" * 32, ours]
    assert kdrill(reports, capsys, "verify", "r1")[0] == 0
    monkeypatch.setenv(TRUSTED_ENV, "ab" * 32)
    status, said = kdrill(reports, capsys, "verify", "r1")
    assert status == 1 and "untrusted-key" in said
    assert kdrill(reports, capsys, "verify", "r1", "--fingerprint", ours)[0] == 0  # the option wins
    for value in ("", "zz"):
        monkeypatch.setenv(TRUSTED_ENV, value)
        for argv in (["verify", "r1"], ["history"], ["report", "r1"], ["compare", "r1", "r1"]):
            status, said = kdrill(reports, capsys, *argv)
            assert status == 2 and "KDRILL_TRUSTED_FINGERPRINTS" in said, argv
    assert os.environ[TRUSTED_ENV] == "zz"
