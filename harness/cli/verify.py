"""Checking sealed evidence: ``kdrill verify`` (a run's signature, run id and every file, or the
chain of runs) and ``kdrill report`` (a verified run's sealed page against its evidence)."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path

from harness.cli.output import count, print_as
from harness.cli.refusals import Refused, check_reports_hold_runs, is_run, named_run_dir, refusing
from harness.evidence.heads import HeadError, read_heads
from harness.evidence.manifest import (
    ManifestError,
    SigningKeyError,
    VerifyResult,
    escaped,
    normalise_fingerprint,
    verify_history,
    verify_run,
)
from harness.evidence.manifest_format import LOCAL_KEY
from harness.evidence.report import REPORT_NAME, ReportError, render_report
from harness.evidence.signing_keys import (
    SIGNING_KEY_ENV,
    TRUSTED_ENV,
    configured_trust,
    default_key_path,
    read_public_key,
    this_machines_key_file,
)


def cmd_report(args: argparse.Namespace) -> int:
    """Re-render a run's report, only when the run verifies, and never into the sealed run.

    report.html is sealed evidence (rendered just before sealing), so this writes no file: it
    says whether the sealed page is exactly what the evidence renders to (exit 0) or refuses
    (exit 1: the run does not verify, or is signed by another key than the trusted one; the
    page differs, e.g. another kdrill version rendered it; the run was sealed without one).
    ``--stdout`` prints the fresh rendering instead. A RUN that is not a run, or a bad trusted
    key, is refused (exit 2)."""
    with refusing():
        trusted = trusted_fingerprints(args)
        run_dir = named_run_dir(args.reports, args.run)
    result = verify_run(run_dir, trusted_fingerprints=trusted)
    if not result.ok:
        print(f"kdrill report: {run_dir} does not verify; not rendering its report:", file=sys.stderr)
        for problem in result.problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    try:
        sealed_at = datetime.fromisoformat(result.report_rendered_at or result.sealed_at or "")
    except ValueError:
        sealed_at = None  # a page with another time simply will not match the sealed one
    seal = {"public_key": result.signer.pem if result.signer else None,
            "fingerprint_sha256": result.signer.fingerprint if result.signer else None,
            "previous": result.previous.to_dict() if result.previous else None, "custody": result.custody}
    try:
        page = render_report(run_dir, seal=seal, generated_at=sealed_at)
    except ReportError as exc:  # sealed, but nothing a run leaves (no run.json, no record): not a run
        raise Refused(f"kdrill report: {exc}") from None
    if args.stdout:
        sys.stdout.write(page)
        return 0
    sealed = run_dir / REPORT_NAME
    if sealed.is_file() and sealed.read_bytes() == page.encode("utf-8"):
        print(f"{sealed}: sealed, and re-rendered from the evidence it is the same, byte for byte")
        print(result.signer_line())
        return 0
    if not sealed.is_file():
        why = f"the run was sealed without it ({result.report_error or 'no reason recorded'})"
    elif result.signer and result.signer.fingerprint not in sealed.read_text(encoding="utf-8", errors="replace"):
        # The page shows the key that sealed it: a manifest signed by another key was re-sealed.
        why = (f"its page does not name the key that signed the manifest (sha256:{result.signer.fingerprint}): "
               "the run was re-sealed with another key after the page was rendered")
    else:
        why = "a fresh rendering differs from it (rendered by another kdrill version or commit?)"
    print(f"kdrill report: {sealed} is sealed evidence and {why}; a sealed run is never written into. "
          f"`kdrill report {args.run} --stdout` prints the fresh rendering.", file=sys.stderr)
    return 1


def trusted_fingerprints(args: argparse.Namespace) -> list[str]:
    """The fingerprints of ``--fingerprint`` and ``--public-key``, else of
    ``$KDRILL_TRUSTED_FINGERPRINTS`` ([] when neither is given). Raises SystemExit naming a bad one."""
    command = f"kdrill {getattr(args, 'command', None) or 'verify'}"
    trusted = []
    for text in getattr(args, "fingerprint", []):
        try:
            trusted.append(normalise_fingerprint(text))
        except ValueError as exc:
            raise SystemExit(f"{command}: --fingerprint: {exc}") from None
    for name in getattr(args, "public_key", []):
        try:
            trusted.append(read_public_key(Path(name)).fingerprint)
        except SigningKeyError as exc:
            raise SystemExit(f"{command}: --public-key {exc}") from None
    if trusted:
        return trusted
    try:
        return configured_trust()
    except ValueError as exc:
        raise SystemExit(f"{command}: {exc}") from None


def cmd_verify(args: argparse.Namespace) -> int:
    """Verify one run (signature, signer, run id, every entry) or, with --history, every run and
    the chain (against the head kept elsewhere, with --head). Prints every problem; exit 0 only
    when intact, 1 otherwise; 2 for bad input (a RUN that is not a run, a bad --fingerprint,
    --public-key, --head or $KDRILL_TRUSTED_FINGERPRINTS, no such REPORTS_DIR)."""
    with refusing():
        trusted = trusted_fingerprints(args)
    if args.history is not None:
        return _verify_history(args, trusted)
    if args.head is not None:
        raise Refused("kdrill verify: --head is for --history: the head kept elsewhere is checked against the chain")
    if not args.run:
        raise Refused("kdrill verify: give a run id or directory, or --history [REPORTS_DIR]")
    with refusing():
        run_dir = named_run_dir(args.reports, args.run)
    result = verify_run(run_dir, trusted_fingerprints=trusted)
    if args.output:
        print_as(args.output, verification_data(result))
        return 0 if result.ok else 1
    if result.ok:
        print(f"kdrill verify {run_dir}: intact ({count(result.files, 'file')}, "
              f"{count(result.directories, 'directory', 'directories')}; run {result.run_id}, "
              f"sealed {result.sealed_at})")
    else:
        print(f"kdrill verify {run_dir}: NOT INTACT ({count(len(result.problems), 'problem')})")
        for problem in result.problems:
            print(f"  {problem}")
    if result.sealed_at is not None:
        print(result.signer_line())
        if result.custody == LOCAL_KEY and result.signer is not None and "signature" not in result.kinds:
            print(_local_key_line(result.signer.fingerprint))
        print(f"previous run: {result.previous.run_id} (manifest sha256 {result.previous.manifest_sha256})"
              if result.previous else "previous run: none (the first sealed run in its reports directory)")
    return 0 if result.ok else 1


def _local_key_line(fingerprint: str) -> str:
    """Where the local key that signed a run is, when it is this machine's, and how to pin it."""
    path = this_machines_key_file(fingerprint)
    if path is None:
        return (f"local key: not this machine's ({SIGNING_KEY_ENV} or {default_key_path()}): the run was "
                "sealed on another machine, or with a key since replaced")
    return (f"local key: {path} on this machine; to pin it where the run is checked: "
            f"`openssl pkey -in {path} -pubout > signer.pem`, then --public-key signer.pem")


def _verify_history(args: argparse.Namespace, trusted: list[str]) -> int:
    """``kdrill verify --history [REPORTS_DIR]``: every run, the chain linking them and who signed
    each; exit 0 only when intact, 1 otherwise. Raises Refused for bad input."""
    if args.output:
        raise Refused("kdrill verify: -o is for one run; --history prints its table")
    if args.run:
        raise Refused("kdrill verify: give a run or --history [REPORTS_DIR], not both")
    root = Path(args.history or args.reports)
    if is_run(root):  # "0 runs, intact" would be true of it and say nothing
        raise Refused(f"kdrill verify --history {root}: expected a reports directory (holding runs), got a run "
                      f"directory; `kdrill verify {root}` verifies that run")
    if root.is_dir() and args.head is None:  # with a head kept elsewhere, no run is a deletion it shows
        check_reports_hold_runs(root, "verify --history")
    try:
        heads = read_heads(args.head) if args.head is not None else []
        history = verify_history(root, trusted_fingerprints=trusted, heads=heads)
    except (ManifestError, HeadError) as exc:
        raise Refused(f"kdrill verify: {exc}") from None
    state = "intact" if history.ok else f"NOT INTACT ({count(len(history.problems), 'problem')})"
    print(f"kdrill verify --history {history.root}: {count(len(history.runs), 'run')}, {state}")
    for problem in history.problems:
        print(f"  {problem}")
    for note in history.notes:
        print(f"note: {escaped(note)}")
    signers: dict[str, int] = {}
    for r in history.runs:
        if r.signer is not None:
            signers[r.signer.fingerprint] = signers.get(r.signer.fingerprint, 0) + 1
    listed = ", ".join(f"sha256:{fp} ({count(n, 'run')})" for fp, n in sorted(signers.items())) or "none"
    print(f"signers: {listed}" + ("" if trusted else f"; no key was pinned (--public-key, --fingerprint, "
                                                    f"{TRUSTED_ENV})"))
    if history.head is not None:
        print(f"head: {history.head.run_id}:{history.head.manifest_sha256}")
    if history.heads_checked:
        print(f"checked against {count(history.heads_checked, 'head')} kept elsewhere (--head)")
    else:
        print("no head kept elsewhere was given (--head): deleting the latest runs, or offering another chain, "
              "would not show")
    return 0 if history.ok else 1


def verification_data(result: VerifyResult) -> dict:
    """What ``kdrill verify RUN`` prints, as data for -o: intact or not, every problem, the signer."""
    return {"run_dir": str(result.run_dir), "intact": result.ok, "run_id": result.run_id,
            "sealed_at": result.sealed_at, "files": result.files, "directories": result.directories,
            "problems": [{"kind": p.kind, "subject": p.subject, "text": str(p)} for p in result.problems],
            "signer_sha256": result.signer.fingerprint if result.signer else None, "pinned": result.pinned,
            "custody": result.custody, "signer": result.signer_line() if result.sealed_at else None,
            "previous": result.previous.to_dict() if result.previous else None,
            "manifest_sha256": result.manifest_sha256}
