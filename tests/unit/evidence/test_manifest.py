"""Unit tests for harness.evidence.manifest: sealing a run's evidence, verifying it, and the chain of runs.

Every sealed run here is made by the real sealing function, ``harness.cli.report_and_manifest``
(what ``kdrill run`` and the pytest plugin call at the end of a run), with a signing key in a
temporary state directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.rsa import generate_private_key

from harness.cli import report_and_manifest
from harness.evidence import manifest as manifest_mod
from harness.evidence import run_files
from harness.evidence.manifest import (
    FORMAT,
    MANIFEST_NAME,
    MAX_DEPTH,
    SIGNATURE_NAME,
    SIGNING_KEY_ENV,
    AlreadySealedError,
    ChainLink,
    ManifestError,
    PublicKeyInfo,
    SigningKeyError,
    default_key_path,
    file_digest,
    load_signing_key,
    normalise_fingerprint,
    previous_run,
    seal_run,
    verify_history,
    verify_run,
)
from harness.evidence.records import RunIdError

T0 = 1_700_000_000.0
RUN_ID = "20250101T000000Z-abc123"


@pytest.fixture(autouse=True)
def key_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private state directory: the local signing key is created there, never in ~."""
    state = tmp_path / "state"
    monkeypatch.setenv("KDRILL_STATE_DIR", str(state))
    monkeypatch.delenv(SIGNING_KEY_ENV, raising=False)
    return state


def write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")


def make_run(run_dir: Path) -> Path:
    """A finished, unsealed run as the plugin leaves it: records, timeline, junit, allure, logs."""
    run_id = run_dir.name
    write(run_dir / "run.json", {"run_id": run_id, "started_at": T0, "user": "u"})
    write(
        run_dir / "control-plane-stop.json",
        {
            "run_id": run_id, "drill": "control-plane-stop", "case": None,
            "title": "Control plane stop", "claim": "Pods keep serving.", "verdict": "failed",
            "started_at": T0, "finished_at": time.time(), "duration_seconds": 30.0,
            "probes": {"http": {"samples": 3}},
            "evidence_files": {"timeline": "control-plane-stop.timeline.json"},
        },
    )
    write(
        run_dir / "control-plane-stop.timeline.json",
        {"http": [{"t": T0 + i, "ok": True, "latency_seconds": 0.01} for i in range(3)]},
    )
    write(run_dir / "junit.xml", '<?xml version="1.0"?><testsuites tests="1"/>\n')
    for i in range(5):
        write(run_dir / "allure-results" / f"{i:04d}-result.json", {"name": f"test {i}", "status": "passed"})
    write(run_dir / "allure-results" / "attachment-1.txt", "probe log\n" * 50)
    write(run_dir / "logs" / "kind" / "kdrill-worker" / "kubelet.log", "I0101 kubelet started\n" * 100)
    write(run_dir / "logs" / "manifest.json", {"not": "the run manifest"})  # nested name clash
    return run_dir


def sealed_run(run_dir: Path) -> Path:
    make_run(run_dir)
    assert report_and_manifest(run_dir) is True
    return run_dir


def manifest_of(run_dir: Path) -> dict:
    return json.loads((run_dir / MANIFEST_NAME).read_text())


def flip_one_byte(path: Path, offset: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def new_key_file(path: Path) -> tuple[Path, str]:
    """An Ed25519 PEM key at ``path``; returns (path, fingerprint)."""
    key = Ed25519PrivateKey.generate()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)
    return path, PublicKeyInfo.from_key(key).fingerprint


def local_fingerprint() -> str:
    return PublicKeyInfo.from_key(load_signing_key()).fingerprint


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    return tmp_path / "reports"


@pytest.fixture
def run_dir(reports: Path) -> Path:
    return sealed_run(reports / RUN_ID)


# --------------------------------------------------------------------------- #
# Sealing
# --------------------------------------------------------------------------- #


def test_manifest_lists_every_file_and_directory_with_digest_and_size(run_dir: Path) -> None:
    data = manifest_of(run_dir)
    assert data["format"] == FORMAT and data["algorithm"] == "sha256"
    assert data["run_id"] == RUN_ID
    assert data["sealed_at"].endswith("Z")
    files = sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file())
    files.remove(MANIFEST_NAME)
    files.remove(SIGNATURE_NAME)
    assert sorted(data["files"]) == files
    assert "report.html" in data["files"] and "logs/manifest.json" in data["files"]
    assert data["directories"] == ["allure-results", "logs", "logs/kind", "logs/kind/kdrill-worker"]
    assert data["symlinks"] == {}
    for rel, entry in data["files"].items():
        content = (run_dir / rel).read_bytes()
        assert entry == {"sha256": hashlib.sha256(content).hexdigest(), "bytes": len(content)}
    assert data["previous"] is None and data["report_error"] is None


def test_signature_is_ed25519_over_the_manifest_bytes_by_the_local_key(run_dir: Path) -> None:
    data = manifest_of(run_dir)
    signer = data["signer"]
    assert signer["algorithm"] == "ed25519"
    assert signer["fingerprint_sha256"] == local_fingerprint()
    public = serialization.load_pem_public_key(signer["public_key"].encode())
    der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert hashlib.sha256(der).hexdigest() == signer["fingerprint_sha256"]
    public.verify((run_dir / SIGNATURE_NAME).read_bytes(), (run_dir / MANIFEST_NAME).read_bytes())


def test_report_shows_the_signer_it_is_sealed_with(run_dir: Path) -> None:
    page = (run_dir / "report.html").read_text()
    assert local_fingerprint() in page
    assert "BEGIN PUBLIC KEY" in page


def test_local_key_is_created_once_with_mode_0600(reports: Path, key_env: Path) -> None:
    first = sealed_run(reports / "r1")
    path = default_key_path()
    assert path == key_env / "signing-key.pem"
    assert path.stat().st_mode & 0o777 == 0o600
    second = sealed_run(reports / "r2")
    assert manifest_of(first)["signer"] == manifest_of(second)["signer"]


def test_configured_key_signs(reports: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, fingerprint = new_key_file(tmp_path / "ci" / "key.pem")
    monkeypatch.setenv(SIGNING_KEY_ENV, str(path))
    run = sealed_run(reports / "r1")
    assert manifest_of(run)["signer"]["fingerprint_sha256"] == fingerprint
    assert not default_key_path().exists(), "a configured key must not create the local one"


def test_missing_configured_key_is_never_created_and_nothing_is_sealed(
        reports: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SIGNING_KEY_ENV, str(tmp_path / "absent.pem"))
    with pytest.raises(SigningKeyError, match="no such file"):
        load_signing_key()
    run = make_run(reports / "r1")
    with pytest.raises(SystemExit, match="cannot seal"):
        report_and_manifest(run)
    assert not (tmp_path / "absent.pem").exists()
    assert not (run / MANIFEST_NAME).exists() and not (run / SIGNATURE_NAME).exists()


def test_unusable_keys_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rsa = generate_private_key(public_exponent=65537, key_size=2048)
    write(tmp_path / "rsa.pem", rsa.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    monkeypatch.setenv(SIGNING_KEY_ENV, str(tmp_path / "rsa.pem"))
    with pytest.raises(SigningKeyError, match="Ed25519"):
        load_signing_key()
    encrypted = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"))
    write(tmp_path / "enc.pem", encrypted)
    monkeypatch.setenv(SIGNING_KEY_ENV, str(tmp_path / "enc.pem"))
    with pytest.raises(SigningKeyError, match="encrypted"):
        load_signing_key()


def test_local_key_readable_by_others_is_refused() -> None:
    load_signing_key()
    default_key_path().chmod(0o644)
    with pytest.raises(SigningKeyError, match="chmod 600"):
        load_signing_key()


def test_a_run_is_sealed_once(run_dir: Path) -> None:
    before = {n: (run_dir / n).read_bytes() for n in (MANIFEST_NAME, SIGNATURE_NAME, "report.html")}
    # kdrill run calls the sealing function again after its pytest child (the plugin) sealed.
    assert report_and_manifest(run_dir) is True
    assert {n: (run_dir / n).read_bytes() for n in before} == before
    with pytest.raises(AlreadySealedError):
        seal_run(run_dir, load_signing_key(), previous=None)


def test_a_changed_sealed_run_is_not_sealed_again(run_dir: Path) -> None:
    write(run_dir / "x.json", {"drill": "x", "verdict": "passed"})
    before = (run_dir / MANIFEST_NAME).read_bytes()
    with pytest.raises(SystemExit, match=r"(?s)no longer matches its seal.*extra: x\.json"):
        report_and_manifest(run_dir)
    assert (run_dir / MANIFEST_NAME).read_bytes() == before


def test_deleting_both_seal_files_of_a_past_run_does_not_allow_resealing(reports: Path) -> None:
    first = sealed_run(reports / "r1")
    sealed_run(reports / "r2")
    (first / MANIFEST_NAME).unlink()
    (first / SIGNATURE_NAME).unlink()
    with pytest.raises(SystemExit, match="run r2 names it as its previous run"):
        report_and_manifest(first)
    assert not (first / MANIFEST_NAME).exists()


def test_report_failure_still_seals_and_records_why(reports: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.evidence.report

    def broken(*args, **kwargs):
        raise RuntimeError("renderer exploded")

    monkeypatch.setattr(harness.evidence.report, "build_report", broken)
    run = make_run(reports / "r1")
    assert report_and_manifest(run) is False
    assert "renderer exploded" in manifest_of(run)["report_error"]
    assert verify_run(run).ok


def test_sealing_refuses_an_invalid_run_directory_name(tmp_path: Path) -> None:
    bad = tmp_path / ".hidden"
    bad.mkdir()
    with pytest.raises(SystemExit, match="invalid run id"):
        report_and_manifest(bad)
    with pytest.raises(RunIdError):
        seal_run(bad, load_signing_key(), previous=None)
    assert not (bad / MANIFEST_NAME).exists()


# --------------------------------------------------------------------------- #
# Verifying one run
# --------------------------------------------------------------------------- #


def test_untouched_sealed_run_verifies(run_dir: Path) -> None:
    result = verify_run(run_dir)
    assert result.ok, result.problems
    assert result.problems == []
    assert result.files == 16 and result.directories == 4  # with metrics.openmetrics.txt and the failure matrix (2)
    assert result.run_id == RUN_ID
    assert result.signer is not None and result.signer.fingerprint == local_fingerprint()
    assert not result.pinned and "not pinned" in result.signer_line()
    pinned = verify_run(run_dir, trusted_fingerprints=["SHA256:" + local_fingerprint().upper()])
    assert pinned.ok and pinned.pinned and "a trusted key" in pinned.signer_line()
    assert not list(run_dir.glob(".manifest.*")), "temporary file left behind"


@pytest.mark.parametrize(
    "rel",
    [
        "control-plane-stop.json",
        "control-plane-stop.timeline.json",
        "run.json",
        "report.html",
        "junit.xml",
        "allure-results/0003-result.json",
        "logs/kind/kdrill-worker/kubelet.log",
        "logs/manifest.json",
    ],
)
def test_one_changed_byte_is_named(run_dir: Path, rel: str) -> None:
    path = run_dir / rel
    flip_one_byte(path, offset=path.stat().st_size // 2)
    result = verify_run(run_dir)
    assert not result.ok
    assert result.kinds == ["changed"] and result.changed == [rel]
    assert "sha256 differs" in str(result.problems[0])


def test_edited_verdict_is_named(run_dir: Path) -> None:
    path = run_dir / "control-plane-stop.json"
    path.write_text(path.read_text().replace('"failed"', '"passed"'))
    assert verify_run(run_dir).changed == ["control-plane-stop.json"]


def test_added_file_and_directory_are_extra(run_dir: Path) -> None:
    write(run_dir / "x.json", {"drill": "x", "verdict": "passed"})
    (run_dir / "logs" / "later").mkdir()
    result = verify_run(run_dir)
    assert not result.ok
    assert result.extra == ["logs/later", "x.json"]
    assert result.kinds == ["extra", "extra"]
    assert str(result.problems[1]).startswith("extra: x.json (")


def test_an_added_file_named_to_rewrite_the_terminal_is_shown_escaped(run_dir: Path, capsys) -> None:
    from harness.cli import main

    name = "\r\x1b[1A\x1b[2Kkdrill verify: intact\nfake"
    (run_dir / name).write_text("x")
    result = verify_run(run_dir)
    assert [p.kind for p in result.problems] == ["extra"]
    shown = str(result.problems[0])
    assert all(c.isprintable() for c in shown) and "\\x1b[1A" in shown and "\\n" in shown
    assert main(["--reports", str(run_dir.parent), "verify", run_dir.name]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out and "NOT INTACT" in out


def test_deleted_file_and_directory_are_missing(run_dir: Path) -> None:
    (run_dir / "junit.xml").unlink()
    shutil.rmtree(run_dir / "logs" / "kind")
    result = verify_run(run_dir)
    assert result.missing == ["junit.xml", "logs/kind", "logs/kind/kdrill-worker",
                              "logs/kind/kdrill-worker/kubelet.log"]
    assert set(result.kinds) == {"missing"}


def test_a_run_holding_a_symbolic_link_is_not_sealed(reports: Path, tmp_path: Path) -> None:
    # A record linked to a file outside the run: the seal would cover the link, not what
    # history, compare and report read through it.
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    run = make_run(reports / "r1")
    (run / "logs" / "link").symlink_to(outside)
    with pytest.raises(SystemExit, match=r"NOT sealed: .*logs/link is a symbolic link"):
        report_and_manifest(run)
    assert not (run / MANIFEST_NAME).exists() and not (run / SIGNATURE_NAME).exists()


def test_a_symbolic_link_in_a_manifest_is_a_problem_even_when_unchanged(reports: Path, tmp_path: Path) -> None:
    # As an older kdrill sealed it, or anyone with a key: the link is listed, its target is not.
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    run = sealed_run(reports / "r1")
    manifest = manifest_of(run)
    (run / "linked.json").symlink_to(outside)
    manifest["symlinks"] = {"linked.json": str(outside)}
    for name in (MANIFEST_NAME, SIGNATURE_NAME):
        (run / name).unlink()
    raw = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("ascii")
    (run / SIGNATURE_NAME).write_bytes(load_signing_key().sign(raw))
    (run / MANIFEST_NAME).write_bytes(raw)
    result = verify_run(run)
    assert result.kinds == ["link"] and "not sealed" in str(result.problems[0])
    (run / "linked.json").unlink()
    (run / "linked.json").symlink_to("/etc/hostname")
    assert verify_run(run).kinds == ["changed"]


def nest(top: Path, depth: int) -> None:
    """``top``/d/d/... ``depth`` directories deep, made one by one (os.makedirs recurses)."""
    path = top
    for _ in range(depth):
        path.mkdir()
        path = path / "d"


def unnest(top: Path, depth: int) -> None:
    """Removes what :func:`nest` made, deepest first (shutil.rmtree recurses too)."""
    for level in range(depth, 0, -1):
        top.joinpath(*["d"] * (level - 1)).rmdir()


def test_a_directory_nested_deeper_than_the_scan_goes_is_extra_and_crashes_nothing(reports: Path) -> None:
    # 1,100 nested directories made the recursive scan raise RecursionError: verify and verify
    # --history crashed, and history wrote no index.html, for any run.
    from harness.cli import main

    runs = three_runs(reports)
    nest(runs[1] / "d", 1100)
    try:
        result = verify_run(runs[1])
        deepest = "/".join(["d"] * (MAX_DEPTH + 1))
        assert set(result.kinds) == {"extra"} and result.extra[-1] == deepest
        assert "not looked into" in str(result.problems[-1])
        assert {p.run for p in verify_history(reports).problems} == {"r2"}
        assert main(["--reports", str(reports), "history"]) == 1  # r2 not intact; the others listed
        assert (reports / "index.html").is_file()
    finally:
        unnest(runs[1] / "d", 1100)
    assert verify_run(runs[1]).ok


def test_a_run_holding_a_directory_deeper_than_the_scan_goes_is_not_sealed(reports: Path) -> None:
    run = make_run(reports / "r1")
    nest(run / "d", MAX_DEPTH + 1)
    with pytest.raises(ManifestError, match=f"{'d/' * MAX_DEPTH}d is a directory more than {MAX_DEPTH} levels down"):
        seal_run(run, load_signing_key(), previous=None)
    assert not (run / MANIFEST_NAME).exists()


def test_a_pinned_key_is_not_called_trusted_when_its_signature_is_missing_or_invalid(run_dir: Path) -> None:
    trusted = [local_fingerprint()]
    flip_one_byte(run_dir / SIGNATURE_NAME)
    line = verify_run(run_dir, trusted_fingerprints=trusted).signer_line()
    assert line.startswith("NOT signed") and "a trusted key" not in line
    (run_dir / SIGNATURE_NAME).unlink()
    line = verify_run(run_dir, trusted_fingerprints=trusted).signer_line()
    assert line.startswith("NOT signed") and "a trusted key" not in line


@pytest.mark.parametrize("name, kind", [(MANIFEST_NAME, "manifest"), (SIGNATURE_NAME, "signature")])
def test_a_seal_file_that_is_a_symbolic_link_is_a_problem(run_dir: Path, tmp_path: Path, name: str, kind: str) -> None:
    # A link to an intact copy outside the run verified: links are refused everywhere else in a run.
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.move(run_dir / name, outside / name)
    (run_dir / name).symlink_to(outside / name)
    result = verify_run(run_dir)
    assert not result.ok and result.kinds == [kind] and result.problems[0].subject == name
    assert "symbolic link" in str(result.problems[0])
    if name == MANIFEST_NAME:  # nor is it a run the next one's chain links to
        assert previous_run(run_dir.parent, "r9") is None


def test_deleted_manifest_is_named(run_dir: Path) -> None:
    (run_dir / MANIFEST_NAME).unlink()
    result = verify_run(run_dir)
    assert not result.ok
    assert result.kinds == ["not-sealed"]
    assert "manifest was deleted" in str(result.problems[0])


def test_byte_appended_to_the_manifest_breaks_the_signature(run_dir: Path) -> None:
    with (run_dir / MANIFEST_NAME).open("ab") as fh:
        fh.write(b"\n")
    result = verify_run(run_dir)
    assert result.kinds == ["signature"]
    assert "changed after sealing" in str(result.problems[0])
    with (run_dir / MANIFEST_NAME).open("ab") as fh:
        fh.write(b"x")
    assert verify_run(run_dir).kinds == ["manifest"]


def test_manifest_edited_to_match_an_edited_record_breaks_the_signature(run_dir: Path) -> None:
    record = run_dir / "control-plane-stop.json"
    record.write_text(record.read_text().replace('"failed"', '"passed"'))
    data = manifest_of(run_dir)
    sha, size = file_digest(record)
    data["files"]["control-plane-stop.json"] = {"sha256": sha, "bytes": size}
    (run_dir / MANIFEST_NAME).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    assert verify_run(run_dir).kinds == ["signature"]
    (run_dir / SIGNATURE_NAME).unlink()
    assert verify_run(run_dir).kinds == ["signature"]
    assert "missing" in str(verify_run(run_dir).problems[0])


def test_copy_resealed_with_another_key_fails_only_when_a_key_is_trusted(
        run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trusted = local_fingerprint()
    forged = tmp_path / "forged" / RUN_ID
    shutil.copytree(run_dir, forged)
    record = forged / "control-plane-stop.json"
    record.write_text(record.read_text().replace('"failed"', '"passed"'))
    (forged / MANIFEST_NAME).unlink()
    (forged / SIGNATURE_NAME).unlink()
    (forged / "report.html").unlink()
    key_path, other = new_key_file(tmp_path / "attacker.pem")
    monkeypatch.setenv(SIGNING_KEY_ENV, str(key_path))
    report_and_manifest(forged)

    unpinned = verify_run(forged)
    assert unpinned.ok and unpinned.signer.fingerprint == other and "not pinned" in unpinned.signer_line()
    pinned = verify_run(forged, trusted_fingerprints=[trusted])
    assert not pinned.ok
    assert pinned.kinds == ["untrusted-key"]
    assert other in str(pinned.problems[0]) and trusted in str(pinned.problems[0])
    assert verify_run(run_dir, trusted_fingerprints=[trusted]).ok


def test_report_of_a_run_resealed_under_its_old_page_names_the_new_key(
        run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from harness.cli import main

    for name in (MANIFEST_NAME, SIGNATURE_NAME):
        (run_dir / name).unlink()  # report.html kept: it names the key that first sealed the run
    key_path, theirs = new_key_file(tmp_path / "attacker.pem")
    monkeypatch.setenv(SIGNING_KEY_ENV, str(key_path))
    with monkeypatch.context() as m:
        m.setattr(manifest_mod, "_sealed_siblings", lambda *a: iter(()))
        seal_run(run_dir, load_signing_key(), previous=None)
    assert main(["--reports", str(run_dir.parent), "report", run_dir.name]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert f"does not name the key that signed the manifest (sha256:{theirs})" in err and "re-sealed" in err


def test_renamed_run_directory_is_a_wrong_run_id(run_dir: Path) -> None:
    renamed = run_dir.with_name("20250202T000000Z-ffffff")
    run_dir.rename(renamed)
    result = verify_run(renamed)
    assert result.kinds == ["run-id"]
    assert RUN_ID in str(result.problems[0]) and "renamed" in str(result.problems[0])


def test_unsigned_manifest_of_an_older_kdrill_does_not_verify(tmp_path: Path) -> None:
    run = make_run(tmp_path / "old")
    write(run / MANIFEST_NAME, {"run_id": "old", "algorithm": "sha256", "files": {}})
    result = verify_run(run)
    assert result.kinds == ["manifest"] and "kdrill-manifest/2" in str(result.problems[0])


def test_unsafe_paths_in_a_manifest_are_problems_not_reads(run_dir: Path) -> None:
    data = manifest_of(run_dir)
    data["files"]["../outside"] = {"sha256": "00" * 32, "bytes": 1}
    (run_dir / MANIFEST_NAME).write_text(json.dumps(data))
    result = verify_run(run_dir)
    assert "manifest" in result.kinds and "signature" in result.kinds
    assert any(p.subject == "../outside" for p in result.problems)


def test_fingerprints_are_normalised() -> None:
    hexdigest = "ab" * 32
    assert normalise_fingerprint("SHA256:" + ":".join(["AB"] * 32)) == hexdigest
    with pytest.raises(ValueError, match="not a SHA-256"):
        normalise_fingerprint("abc")


# --------------------------------------------------------------------------- #
# The chain
# --------------------------------------------------------------------------- #


def three_runs(reports: Path) -> list[Path]:
    return [sealed_run(reports / name) for name in ("r1", "r2", "r3")]


def test_each_manifest_links_the_previous_run(reports: Path) -> None:
    runs = three_runs(reports)
    assert manifest_of(runs[0])["previous"] is None
    for earlier, later in zip(runs, runs[1:]):
        assert manifest_of(later)["previous"] == {
            "run_id": earlier.name,
            "manifest_sha256": hashlib.sha256((earlier / MANIFEST_NAME).read_bytes()).hexdigest(),
        }
    assert previous_run(reports, "r4").run_id == "r3"


def test_intact_history_verifies(reports: Path) -> None:
    runs = three_runs(reports)
    history = verify_history(reports, trusted_fingerprints=[local_fingerprint()])
    assert history.ok, history.problems
    assert [r.run_dir.name for r in history.runs] == ["r1", "r2", "r3"]
    assert history.head.run_id == "r3"
    assert history.head.manifest_sha256 == hashlib.sha256((runs[2] / MANIFEST_NAME).read_bytes()).hexdigest()


def test_deleted_past_run_is_a_broken_link_naming_it(reports: Path) -> None:
    three_runs(reports)
    shutil.rmtree(reports / "r2")
    history = verify_history(reports)
    assert not history.ok
    assert [(p.kind, p.subject, p.run) for p in history.problems] == [("broken-link", "r2", "r3")]
    assert "deleted" in str(history.problems[0])


def test_replaced_past_run_is_a_broken_link_naming_it(
        reports: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = three_runs(reports)
    record = runs[1] / "control-plane-stop.json"
    record.write_text(record.read_text().replace('"failed"', '"passed"'))
    for name in (MANIFEST_NAME, SIGNATURE_NAME, "report.html"):
        (runs[1] / name).unlink()
    # Re-seal r2 by hand (report_and_manifest refuses: r3 names it) with a key of one's own.
    key_path, _ = new_key_file(tmp_path / "attacker.pem")
    monkeypatch.setenv(SIGNING_KEY_ENV, str(key_path))
    with monkeypatch.context() as m:
        m.setattr(manifest_mod, "_sealed_siblings", lambda *a: iter(()))  # skip the "sealed before" guard
        seal_run(runs[1], load_signing_key(), previous=None)
    assert verify_run(runs[1]).ok  # a valid seal on its own ...
    history = verify_history(reports)
    broken = [p for p in history.problems if p.kind == "broken-link"]
    assert [(p.subject, p.run) for p in broken] == [("r2", "r3")]  # ... but not the one r3 linked
    assert "replaced or re-sealed" in str(broken[0])


def test_a_run_sealed_elsewhere_with_another_key_and_no_link_is_a_signer_change_and_a_second_chain_start(
        reports: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    three_runs(reports)
    ours = local_fingerprint()
    # Sealed in an empty directory with another key (so it names no previous run), then moved in.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    key_path, theirs = new_key_file(tmp_path / "other.pem")
    monkeypatch.setenv(SIGNING_KEY_ENV, str(key_path))
    forged = sealed_run(elsewhere / "r9")
    assert manifest_of(forged)["previous"] is None
    forged.rename(reports / "r9")
    monkeypatch.delenv(SIGNING_KEY_ENV)

    unpinned = verify_history(reports)
    assert [(p.kind, p.run) for p in unpinned.problems] == [("chain-start", "r9"), ("signer-changed", "r9")]
    assert "r1 was sealed here before it" in str(unpinned.problems[0])
    assert ours in str(unpinned.problems[1]) and theirs in str(unpinned.problems[1])
    # Trusting both keys accepts the signer, not a run that belongs to another chain.
    pinned = verify_history(reports, trusted_fingerprints=[ours, theirs])
    assert [(p.kind, p.run) for p in pinned.problems] == [("chain-start", "r9")]


@pytest.mark.parametrize("sealed_at", [0, None, "yesterday"])
def test_a_run_whose_seal_time_is_not_one_cannot_stand_outside_the_history_checks(
        reports: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sealed_at) -> None:
    three_runs(reports)
    key_path, _ = new_key_file(tmp_path / "other.pem")
    monkeypatch.setenv(SIGNING_KEY_ENV, str(key_path))
    forged = sealed_run(tmp_path / "elsewhere" / "r9")
    manifest = manifest_of(forged)
    manifest["sealed_at"] = sealed_at  # no time: no place in the chain, once no signer check either
    raw = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("ascii")
    for name in (MANIFEST_NAME, SIGNATURE_NAME):
        (forged / name).unlink()
    (forged / SIGNATURE_NAME).write_bytes(load_signing_key().sign(raw))
    (forged / MANIFEST_NAME).write_bytes(raw)
    forged.rename(reports / "r9")
    monkeypatch.delenv(SIGNING_KEY_ENV)
    history = verify_history(reports)
    assert not history.ok
    assert [(p.kind, p.run) for p in history.problems] == [("manifest", "r9")]
    assert "sealed_at" in str(history.problems[0])


def test_latest_run_resealed_with_another_key_is_a_signer_change_unless_both_keys_are_pinned(
        reports: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = three_runs(reports)
    ours = local_fingerprint()
    record = runs[2] / "control-plane-stop.json"
    record.write_text(record.read_text().replace('"failed"', '"passed"'))
    link = manifest_of(runs[2])["previous"]
    for name in (MANIFEST_NAME, SIGNATURE_NAME, "report.html"):
        (runs[2] / name).unlink()
    # Re-sealed with a key of one's own, keeping the link to r2: every link and seal still holds.
    key_path, theirs = new_key_file(tmp_path / "attacker.pem")
    monkeypatch.setenv(SIGNING_KEY_ENV, str(key_path))
    with monkeypatch.context() as m:
        m.setattr(manifest_mod, "_sealed_siblings", lambda *a: iter(()))
        seal_run(runs[2], load_signing_key(), previous=ChainLink(link["run_id"], link["manifest_sha256"]))
    assert verify_run(runs[2]).ok

    unpinned = verify_history(reports)
    assert [(p.kind, p.subject, p.run) for p in unpinned.problems] == [("signer-changed", "r3", "r3")]
    assert ours in str(unpinned.problems[0]) and theirs in str(unpinned.problems[0])
    assert [p.kind for p in verify_history(reports, trusted_fingerprints=[ours]).problems] == ["untrusted-key"]
    assert verify_history(reports, trusted_fingerprints=[ours, theirs]).ok  # a rotation, both keys pinned


def test_unsealed_run_in_a_history_is_named(reports: Path) -> None:
    three_runs(reports)
    (reports / "r2" / MANIFEST_NAME).unlink()
    history = verify_history(reports)
    assert ("not-sealed", "r2") in [(p.kind, p.run) for p in history.problems]
    assert ("broken-link", "r2") in [(p.kind, p.subject) for p in history.problems]


def test_concurrent_runs_fork_the_chain_as_a_note(reports: Path) -> None:
    sealed_run(reports / "r1")
    key = load_signing_key()
    link = previous_run(reports, "r2")
    for name in ("r2", "r3"):
        make_run(reports / name)
        seal_run(reports / name, key, previous=link)  # both computed their link before either sealed
    history = verify_history(reports)
    assert history.ok
    assert any("all follow r1" in note for note in history.notes)


def test_digest_streams_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blob = bytes(range(256)) * 4099  # not a multiple of the chunk size
    write(tmp_path / "big.bin", blob)
    reads: list[int] = []
    real_open = Path.open

    class CountingReader:
        def __init__(self, fh):
            self.fh = fh

        def read(self, n=-1):
            assert n > 0, "must not read the whole file at once"
            reads.append(n)
            return self.fh.read(n)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    monkeypatch.setattr(run_files, "_CHUNK_BYTES", 64 * 1024)
    monkeypatch.setattr(Path, "open", lambda self, *a, **k: CountingReader(real_open(self, *a, **k)))
    assert file_digest(tmp_path / "big.bin") == (hashlib.sha256(blob).hexdigest(), len(blob))
    assert len(reads) == len(blob) // (64 * 1024) + 2  # full chunks, the tail, the empty read


def test_seal_files_are_created_exclusively(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"first")
    with pytest.raises(FileExistsError):
        run_files.create_exclusive(target, b"second", 0o644)
    assert target.read_bytes() == b"first"
    assert os.listdir(tmp_path) == ["f"]


def test_exported_node_logs_hold_no_link_so_a_failed_run_is_still_sealed(reports: Path, tmp_path: Path) -> None:
    from harness.kube.providers.kind import replace_links

    run = make_run(reports / "r1")
    node = run / "logs" / "kdrill-ha-worker"
    (node / "containers").mkdir(parents=True)
    (node / "containers" / "web.log").symlink_to("/var/log/pods/ns_web_1/web/0.log")  # the node's path
    (node / "pods").symlink_to(tmp_path)
    assert sorted(p.name for p in replace_links(run / "logs")) == ["pods", "web.log"]
    assert "/var/log/pods/ns_web_1/web/0.log" in (node / "containers" / "web.log").read_text()
    assert not [p for p in run.rglob("*") if p.is_symlink()]
    assert report_and_manifest(run) is True and verify_run(run).ok
