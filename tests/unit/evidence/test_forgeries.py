"""The sixteen forgeries of issue 42 that `kdrill verify` did not detect, each detected or refused.

Every genuine run here is written as the plugin writes it and sealed by the real sealing function
through an external signer (sealed_runs.py: a shell script holding its key where this process
does not read it; uid 65534's when the tests run as root). The auditor trusts that signer's key.
The forger holds what a runner holds: the local key, the reports directory, kdrill itself.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from sealed_runs import DRILL, ExternalSigner, sealed, write_run

from harness.cli import main, report_and_manifest
from harness.evidence.chain import verify_history
from harness.evidence.compare import CompareError, compare_runs
from harness.evidence.heads import HEAD_LOG_ENV, read_heads
from harness.evidence.history import list_runs, write_index
from harness.evidence.manifest import MANIFEST_NAME, SIGNATURE_NAME, load_signing_key, seal_run
from harness.evidence.reading import load_run
from harness.evidence.report import render_report
from harness.evidence.signers import SIGNER_ENV, SIGNER_PUBLIC_KEY_ENV, local_signer
from harness.evidence.signing_keys import TRUSTED_ENV, PublicKeyInfo
from harness.evidence.verification import verify_run

DOCS = Path(__file__).resolve().parents[3] / "docs" / "evidence.md"
NOT_FOR_AUDIT = "signed by a local key: not for audit"
FAILING = "replacements_ready_seconds_after_eviction"  # what the audited run r2 failed


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    return tmp_path / "reports"


@pytest.fixture
def head_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The head log the team keeps outside the reports directory ($KDRILL_HEAD_LOG)."""
    path = tmp_path / "kept-elsewhere" / "heads.jsonl"
    path.parent.mkdir()
    monkeypatch.setenv(HEAD_LOG_ENV, str(path))
    return path


@pytest.fixture
def audited(reports: Path, external_signer: ExternalSigner, head_log: Path,
            monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Two runs sealed through the external signer, their heads exported to the head log."""
    external_signer.enable(monkeypatch)
    return [sealed(reports / "r1"), sealed(reports / "r2", failing=FAILING)]


def as_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a forger on the runner has: no external signer (it cannot read its key), the local key."""
    monkeypatch.delenv(SIGNER_ENV)
    monkeypatch.delenv(SIGNER_PUBLIC_KEY_ENV)
    monkeypatch.delenv(HEAD_LOG_ENV)


def unseal(run_dir: Path) -> None:
    """What a forger deletes before sealing again: the seal and the views rendered into it."""
    for name in (MANIFEST_NAME, SIGNATURE_NAME, "report.html", "metrics.openmetrics.txt"):
        (run_dir / name).unlink(missing_ok=True)


def edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=2))


def expectation(record: dict, name: str) -> dict:
    return next(x for x in record["expectations"] if x["name"] == name)


def kdrill(reports: Path, capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str]:
    """kdrill's exit status and everything it printed."""
    capsys.readouterr()
    status = main(["--reports", str(reports), *args])
    out = capsys.readouterr()
    return status, " ".join((out.out + out.err).split())


# --------------------------------------------------------------------------- #
# 1-4: a record or run.json edited, and sealed again with the local key
# --------------------------------------------------------------------------- #

EDITS = {
    "verdict": (f"{DRILL}.json", lambda r: (expectation(r, FAILING).update(measured=45.0, verdict="passed"),
                                            r.update(verdict="passed"))),
    "eviction-time": (f"{DRILL}.json", lambda r: expectation(r, "eviction_seconds_after_taint").update(measured=12.0)),
    "cluster-name": (f"{DRILL}.json", lambda r: r["cluster"].update(name="kind-production")),
    "ticket": ("run.json", lambda m: m.update(ticket="CHG-999")),
}


@pytest.mark.parametrize("what", list(EDITS))
def test_an_edit_sealed_again_with_the_local_key_is_refused(
        audited: list[Path], reports: Path, external_signer: ExternalSigner, head_log: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, what: str) -> None:
    """Forgeries 1-4: edit, delete the seal, call kdrill's own sealing, with the runner's key."""
    run = audited[1]
    name, edit = EDITS[what]
    before = hashlib.sha256((run / name).read_bytes()).hexdigest()
    as_runner(monkeypatch)
    unseal(run)
    edit_json(run / name, edit)
    assert hashlib.sha256((run / name).read_bytes()).hexdigest() != before
    report_and_manifest(run)

    forged = verify_run(run)  # a valid seal of some key, as before ...
    assert forged.ok and NOT_FOR_AUDIT in forged.signer_line()
    pinned = verify_run(run, trusted_fingerprints=[external_signer.fingerprint])  # ... but not the audit key
    assert pinned.kinds == ["untrusted-key"] and NOT_FOR_AUDIT in pinned.signer_line()
    status, said = kdrill(reports, capsys, "verify", "r2", "--fingerprint", external_signer.fingerprint)
    assert status == 1 and "untrusted-key" in said and NOT_FOR_AUDIT in said
    # Unpinned, the chain names the change of signer, and the head kept elsewhere the new manifest.
    history = verify_history(reports, heads=read_heads(str(head_log)))
    assert ("signer-changed", "r2") in [(p.kind, p.run) for p in history.problems]
    assert any(p.kind == "head" and p.subject == "r2" and "replaced or re-sealed" in str(p) for p in history.problems)


# --------------------------------------------------------------------------- #
# 5: an old run replayed under a new run id
# --------------------------------------------------------------------------- #


def test_an_old_run_replayed_under_a_new_run_id_is_refused(
        tmp_path: Path, reports: Path, external_signer: ExternalSigner, monkeypatch: pytest.MonkeyPatch) -> None:
    """Forgery 5: an earlier run's evidence copied under a new run id and sealed as new."""
    old = write_run(tmp_path / "last-month" / "r0", finished_at=time.time() - 30 * 86400)
    for signer in ("local key", "external signer"):
        replay = reports / ("r5" if signer == "local key" else "r6")
        shutil.copytree(old, replay)
        for name in ("run.json", f"{DRILL}.json"):
            edit_json(replay / name, lambda d: d.update(run_id=replay.name))
        if signer == "external signer":
            external_signer.enable(monkeypatch)
        report_and_manifest(replay)
        result = verify_run(replay, trusted_fingerprints=[external_signer.fingerprint])
        # The seal is the replay's own, a month after the run it shows ended: said whoever signed.
        assert "seal-time" in result.kinds, signer
        assert any("s after the run's end" in str(p) for p in result.problems)
        assert ("untrusted-key" in result.kinds) is (signer == "local key")


# --------------------------------------------------------------------------- #
# 6: sealed again later, at a time of the forger's choosing
# --------------------------------------------------------------------------- #


def test_a_seal_made_after_the_run_ended_says_so_and_its_time_is_the_seal_s_own(
        reports: Path, external_signer: ExternalSigner, monkeypatch: pytest.MonkeyPatch) -> None:
    """Forgery 6: sealed again minutes after the run's end (the only tell the issue found), or
    with a sealed_at chosen by the caller."""
    run = write_run(reports / "r1", finished_at=time.time() - 600)
    external_signer.enable(monkeypatch)
    report_and_manifest(run)
    result = verify_run(run, trusted_fingerprints=[external_signer.fingerprint])
    assert result.kinds == ["seal-time"]
    assert re.search(r"is (59\d|60\d) s after the run's end .* sealed again later", str(result.problems[0]))
    # The time is read by the seal itself: no caller can give one.
    later = write_run(reports / "r2")
    with pytest.raises(TypeError, match="sealed_at"):
        seal_run(later, load_signing_key(), previous=None, sealed_at=None)


# --------------------------------------------------------------------------- #
# 7: the newest run deleted; 8: a foreign same-key run dropped in
# --------------------------------------------------------------------------- #


def test_a_deleted_newest_run_fails_against_the_head_kept_elsewhere(
        audited: list[Path], reports: Path, head_log: Path, capsys: pytest.CaptureFixture) -> None:
    """Forgery 7: the latest run deleted; every link that is left holds."""
    heads = [json.loads(line) for line in head_log.read_text().splitlines()]
    assert [h["run_id"] for h in heads] == ["r1", "r2"]
    assert heads[1]["manifest_sha256"] == hashlib.sha256((audited[1] / MANIFEST_NAME).read_bytes()).hexdigest()
    shutil.rmtree(audited[1])
    status, said = kdrill(reports, capsys, "verify", "--history")
    assert status == 0 and "no head kept elsewhere was given" in said  # why the head is kept elsewhere
    status, said = kdrill(reports, capsys, "verify", "--history", "--head", str(head_log))
    assert status == 1 and "head: r2" in said and "not a sealed run here: deleted" in said
    status, said = kdrill(reports, capsys, "verify", "--history", "--head", f"r2:{heads[1]['manifest_sha256']}")
    assert status == 1 and "head: r2" in said


def test_a_foreign_run_sealed_with_the_same_key_is_an_error(
        tmp_path: Path, reports: Path, capsys: pytest.CaptureFixture) -> None:
    """Forgery 8: a run sealed in another reports directory with the same key, dropped in."""
    sealed(reports / "r1")
    foreign = sealed(tmp_path / "other-reports" / "r9", ticket="CHG-OTHER")
    shutil.move(str(foreign), str(reports / "r9"))
    assert verify_run(reports / "r9").ok  # its own seal holds
    status, said = kdrill(reports, capsys, "verify", "--history")
    assert status == 1 and "r9: chain-start: r9 (names no previous run, though r1 was sealed here before it" in said


# --------------------------------------------------------------------------- #
# 9-12: a seal shown without the trusted key
# --------------------------------------------------------------------------- #


@pytest.fixture
def resealed(audited: list[Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    """r2 edited to pass and sealed again (its page re-rendered) with the runner's local key."""
    run = audited[1]
    as_runner(monkeypatch)
    unseal(run)
    edit_json(run / f"{DRILL}.json", lambda r: r.update(title="edited"))
    report_and_manifest(run)
    return run


def test_history_refuses_a_run_signed_by_another_key_than_the_trusted_one(
        resealed: Path, reports: Path, external_signer: ExternalSigner, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    """Forgery 9: `kdrill history` showed a re-sealed run "intact" and could not be told the key."""
    status, said = kdrill(reports, capsys, "history", "--fingerprint", external_signer.fingerprint)
    assert status == 1 and "not intact" in said and "NOT a trusted key" in said and "untrusted-key" in said
    monkeypatch.setenv(TRUSTED_ENV, external_signer.fingerprint)  # the same, configured
    status, said = kdrill(reports, capsys, "history")
    assert status == 1 and "NOT a trusted key" in said
    assert [r.seal for r in list_runs(reports, [external_signer.fingerprint])] == ["intact", "not intact"]


def test_report_refuses_a_run_signed_by_another_key_than_the_trusted_one(
        resealed: Path, reports: Path, external_signer: ExternalSigner, capsys: pytest.CaptureFixture) -> None:
    """Forgery 10: `kdrill report` re-rendered a re-sealed run and called its page the evidence's."""
    status, said = kdrill(reports, capsys, "report", "r2")
    assert status == 0 and NOT_FOR_AUDIT in said  # unpinned: its page matches, and it says who held the key
    status, said = kdrill(reports, capsys, "report", "r2", "--fingerprint", external_signer.fingerprint)
    assert status == 1 and "does not verify" in said and "untrusted-key" in said


def test_compare_refuses_a_run_signed_by_another_key(
        resealed: Path, audited: list[Path], reports: Path, external_signer: ExternalSigner,
        capsys: pytest.CaptureFixture) -> None:
    """Forgery 11: `kdrill compare` exited 0 with a note when the two runs had different signers."""
    status, said = kdrill(reports, capsys, "compare", "r1", "r2")
    assert status == 2 and "signed by different keys" in said and "none pinned" in said
    status, said = kdrill(reports, capsys, "compare", "r1", "r2", "--fingerprint", external_signer.fingerprint)
    assert status == 2 and "untrusted-key" in said
    with pytest.raises(CompareError, match="signed by different keys"):
        compare_runs(audited[0], resealed)


def test_the_index_shows_a_run_signed_by_another_key_as_not_intact(
        resealed: Path, reports: Path, external_signer: ExternalSigner, monkeypatch: pytest.MonkeyPatch) -> None:
    """Forgery 12: reports/index.html showed each run's own seal, whoever signed it."""
    from harness.cli import write_history_index

    rows = {run: row for run, row in re.findall(r'<tr data-run="([^"]+)" data-seal="[^"]+">(.*?)</tr>',
                                                write_index(reports, None, [external_signer.fingerprint]).read_text(),
                                                re.S)}
    assert 'class="not-intact"' in rows["r2"] and "NOT a trusted key" in rows["r2"]
    assert 'class="intact"' in rows["r1"] and "a trusted key" in rows["r1"]
    monkeypatch.setenv(TRUSTED_ENV, external_signer.fingerprint)  # what `kdrill run` writes the index with
    page = write_history_index(reports).read_text()
    assert 'data-run="r2" data-seal="not intact"' in page and "chain NOT INTACT" in page


# --------------------------------------------------------------------------- #
# 13-14: the manual check, without kdrill
# --------------------------------------------------------------------------- #


def manual_check() -> str:
    """The manual check docs/evidence.md gives the auditor (its bash block after the marker)."""
    text = DOCS.read_text(encoding="utf-8")
    return text.split("<!-- manual-check -->", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]


def run_manual_check(run_dir: Path, key: Path) -> subprocess.CompletedProcess:
    for tool in ("bash", "openssl", "jq", "sha256sum", "find", "diff"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed: the documented manual check uses it")
    return subprocess.run(["bash", "-c", manual_check()], env={"PATH": "/usr/bin:/bin", "RUN": str(run_dir),
                                                                   "KEY": str(key)},
                          capture_output=True, text=True, timeout=60)


def test_the_manual_check_checks_every_file(audited: list[Path], external_signer: ExternalSigner) -> None:
    """Forgery 13: the README's openssl line checked the signature and none of the files."""
    run = audited[1]
    assert run_manual_check(run, external_signer.public_key).returncode == 0
    record = run / f"{DRILL}.json"
    record.write_text(record.read_text().replace('"verdict": "failed"', '"verdict": "passed"', 1))
    done = run_manual_check(run, external_signer.public_key)
    assert done.returncode != 0 and f"{DRILL}.json: FAILED" in done.stdout + done.stderr
    record.unlink()
    (run / "added.json").write_text("{}")
    assert run_manual_check(run, external_signer.public_key).returncode != 0


def test_the_manual_check_takes_the_key_from_outside_the_evidence(
        resealed: Path, external_signer: ExternalSigner) -> None:
    """Forgery 14: the manual check trusted the key in manifest.json, and "its fingerprint is in
    every report" invited pinning the one a forged page prints."""
    page = (resealed / "report.html").read_text()
    forger = PublicKeyInfo.from_key(load_signing_key()).fingerprint
    assert forger in page and f"--fingerprint {forger}" not in page  # the page shows its key, never offers it
    done = run_manual_check(resealed, external_signer.public_key)
    assert done.returncode != 0 and "Signature Verification Failure" in done.stdout + done.stderr
    assert "outside the evidence" in manual_check()


# --------------------------------------------------------------------------- #
# 15: duplicate JSON keys; 16: a loosened bound
# --------------------------------------------------------------------------- #


def test_a_key_named_twice_is_refused_wherever_evidence_is_read(
        reports: Path, capsys: pytest.CaptureFixture) -> None:
    """Forgery 15: a record saying "verdict": "failed" and then "passed" read as passed."""
    run = write_run(reports / "r1")
    record = run / f"{DRILL}.json"
    text = record.read_text()
    record.write_text(text.replace('"verdict": "passed",\n  "started_at"',
                                   '"verdict": "failed",\n  "verdict": "passed",\n  "started_at"', 1))
    assert text != record.read_text()
    report_and_manifest(run)
    assert verify_run(run).ok  # sealed as it was written ...
    page = render_report(run)  # ... and read, it is not a record
    assert "(1 unreadable)" in page and "all 1 passed" not in page
    assert "refused: the key &#39;verdict&#39; appears twice in one object" in page
    status, said = kdrill(reports, capsys, "history")
    assert "1 error" in said
    other = sealed(reports / "r2")
    with pytest.raises(CompareError, match="unreadable records"):
        compare_runs(run, other)
    # run.json and the manifest too.
    meta = run / "run.json"
    meta.write_text(meta.read_text().replace('"ticket": "CHG-1"', '"ticket": "CHG-1", "ticket": "CHG-2"', 1))
    assert load_run(run).problems == ["run.json could not be read (the key 'ticket' appears twice in one object "
                                      "(readers disagree on which value counts; kdrill never writes that)); run "
                                      "metadata not shown"]
    manifest = (other / MANIFEST_NAME).read_text().replace('"format":', '"run_id": "r9",\n  "format":', 1)
    for name in (MANIFEST_NAME, SIGNATURE_NAME):
        (other / name).unlink()
    (other / SIGNATURE_NAME).write_bytes(load_signing_key().sign(manifest.encode()))  # a valid signature of it
    (other / MANIFEST_NAME).write_text(manifest)
    result = verify_run(other)
    assert result.kinds == ["manifest"] and "the key 'run_id' appears twice" in str(result.problems[0])


def test_a_bound_loosened_in_the_record_and_its_scenario_copy_is_shown_in_the_report(
        reports: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Forgery 16: a bound loosened in both places the record holds read green everywhere."""
    run = write_run(reports / "r1")
    name = "eviction_seconds_after_taint"

    def loosen(record: dict) -> None:
        expectation(record, name).update(measured=200.0, bound={"op": "<=", "value": 600}, bound_text="<= 600")
        next(e for e in record["scenario"]["expectations"] if e["name"] == name)["bound"]["value"] = 600

    edit_json(run / f"{DRILL}.json", loosen)
    report_and_manifest(run)
    assert verify_run(run).ok
    page = " ".join((run / "report.html").read_text().split())
    assert "all 1 passed" in page  # by the record's own bounds ...
    assert "1 with bounds unlike their reference scenario" in page  # ... and said where the verdicts are
    assert (f"{name}: bound &lt;= 600 here, &lt;= 60 in scenarios/{DRILL}.yaml shipped with kdrill"
            in page) and "measured 200.0 does NOT satisfy it" in page


def test_a_bound_is_checked_against_the_scenario_at_the_run_s_commit(
        tmp_path: Path, reports: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Forgery 16, run from a checkout whose scenario was loosened too: the recorded commit's wins."""
    from harness.core import resources

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    checkout = tmp_path / "checkout"
    (checkout / "scenarios").mkdir(parents=True)
    shipped = (resources.scenarios_dir() / f"{DRILL}.yaml").read_text()
    (checkout / "scenarios" / f"{DRILL}.yaml").write_text(shipped)
    git = ["git", "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "scenarios"]):
        subprocess.run(git + args, check=True, capture_output=True)
    commit = subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    loosened = shipped.replace('{op: "<=", value: 60}', '{op: "<=", value: 600}')
    assert loosened != shipped
    (checkout / "scenarios" / f"{DRILL}.yaml").write_text(loosened)  # the working tree, not the commit
    monkeypatch.setattr(resources, "checkout", lambda: checkout)
    monkeypatch.setattr(resources, "scenarios_dir", lambda: checkout / "scenarios")
    run = write_run(reports / "r1", git_commit=commit)
    edit_json(run / f"{DRILL}.json", lambda r: expectation(r, "eviction_seconds_after_taint").update(
        bound={"op": "<=", "value": 600}, bound_text="<= 600"))
    page = " ".join(render_report(run).split())
    assert f"bound &lt;= 600 here, &lt;= 60 in scenarios/{DRILL}.yaml at the run&#39;s commit {commit[:12]}" in page


# --------------------------------------------------------------------------- #
# What an auditor holds, checked together
# --------------------------------------------------------------------------- #


def test_an_untouched_audited_history_verifies_with_the_signer_s_key_and_the_head_log(
        audited: list[Path], reports: Path, external_signer: ExternalSigner, head_log: Path,
        capsys: pytest.CaptureFixture) -> None:
    status, said = kdrill(reports, capsys, "verify", "--history", "--head", str(head_log),
                          "--public-key", str(external_signer.public_key))
    assert status == 0 and "2 runs, intact" in said and "checked against 2 heads kept elsewhere" in said
    assert local_signer(load_signing_key()).public.fingerprint not in said  # the local key signed nothing here
