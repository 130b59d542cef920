"""Verifying sealed evidence: one run against its signed manifest (:func:`verify_run`). Every run
of a reports directory with the chain that links them is harness/evidence/chain.py.

The manifest's format is described in harness/evidence/manifest.py, which seals runs; the key in
a manifest only says who signed, so a signer is trusted only when its fingerprint is pinned.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Iterable

from cryptography.exceptions import InvalidSignature

from harness.core.text import escaped as terminal_escaped
from harness.evidence.layout import MANIFEST_NAME, SIGNATURE_NAME
from harness.evidence.manifest_format import (
    CUSTODIES,
    EXTERNAL_SIGNER,
    FORMAT,
    LOCAL_KEY,
    NOT_FOR_AUDIT,
    SEAL_CLOCK_SLACK_SECONDS,
    SEAL_DELAY_LIMIT_SECONDS,
    SEALED_AT,
    ChainLink,
    ManifestError,
    iso_epoch,
    utc_now_iso,
)
from harness.evidence.run_files import file_digest, link_target, read_no_link, scan_entries
from harness.evidence.signing_keys import PublicKeyInfo, normalise_fingerprint
from harness.evidence.strict_json import DuplicateKeyError
from harness.evidence.strict_json import loads as strict_loads


@dataclass(frozen=True)
class Problem:
    """One reason evidence is not intact.

    ``kind``: ``not-sealed``, ``manifest`` (unreadable or malformed), ``signature``,
    ``untrusted-key``, ``run-id``, ``seal-time`` (sealed too long after the run's end, or before
    it), ``changed``, ``missing``, ``extra``, ``unreadable``, ``link`` (a sealed symbolic link,
    whose target is not sealed), or, for a history (harness/evidence/chain.py), ``broken-link``,
    ``signer-changed``, ``chain-start`` (a second run naming no previous one: sealed elsewhere) and
    ``head`` (the chain does not hold the head kept outside the reports directory). ``subject``: the path in the run (POSIX, relative), or the run
    id. ``run``: the run the problem belongs to, when verifying a history.
    """

    kind: str
    subject: str
    detail: str
    run: str | None = None

    def __str__(self) -> str:
        where = f"{self.run}: " if self.run else ""
        return escaped(f"{where}{self.kind}: {self.subject} ({self.detail})")


def escaped(text: str) -> str:
    """``text`` with control characters written as escapes: a file name added to a run (a newline,
    an ANSI sequence) must not rewrite the verdict a terminal shows."""
    return terminal_escaped(text)


@dataclass(frozen=True)
class VerifyResult:
    """What :func:`verify_run` found. ``ok`` only when ``problems`` is empty.

    ``signer`` is the key the manifest names (None when unreadable) and ``custody`` who held it
    (``local-key`` for a manifest that does not say); ``pinned`` whether a trusted key was
    required; ``files``/``directories`` how many entries the manifest lists; ``manifest_sha256``
    the hex digest of manifest.json's bytes (what the next run links to); ``run_ended_at`` the
    run's end (epoch seconds: the latest ``finished_at`` of run.json and the records; None when
    none is recorded) its ``sealed_at`` was checked against; ``report_rendered_at`` the time
    report.html shows.
    """

    run_dir: Path
    problems: list[Problem] = field(default_factory=list)
    run_id: str | None = None
    signer: PublicKeyInfo | None = None
    pinned: bool = False
    files: int = 0
    directories: int = 0
    sealed_at: str | None = None
    previous: ChainLink | None = None
    manifest_sha256: str | None = None
    report_error: str | None = None
    custody: str = LOCAL_KEY
    run_ended_at: float | None = None
    report_rendered_at: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def _subjects(self, kind: str) -> list[str]:
        return [p.subject for p in self.problems if p.kind == kind]

    @property
    def changed(self) -> list[str]:
        return self._subjects("changed")

    @property
    def missing(self) -> list[str]:
        return self._subjects("missing")

    @property
    def extra(self) -> list[str]:
        return self._subjects("extra")

    @property
    def kinds(self) -> list[str]:
        return [p.kind for p in self.problems]

    def signer_line(self) -> str:
        """Which key signed the manifest, and whether that key was required (pinned)."""
        if self.signer is None:
            return "signer: unknown (the manifest names no usable public key)"
        if "signature" in self.kinds or "not-sealed" in self.kinds:
            # The manifest names a key, but no valid signature by it: nobody is shown to have signed.
            return f"NOT signed: the manifest names Ed25519 key sha256:{self.signer.fingerprint}, but its signature is missing or invalid"
        held = (NOT_FOR_AUDIT if self.custody == LOCAL_KEY
                else "through an external signer: the runner did not hold the key")
        if self.pinned:
            trusted = "a trusted key" if "untrusted-key" not in self.kinds else "NOT a trusted key"
            return f"signed by Ed25519 key sha256:{self.signer.fingerprint} ({trusted}); {held}"
        return (f"signed by Ed25519 key sha256:{self.signer.fingerprint}; {held}; this key was not pinned, so "
                "the signature only shows the manifest is unchanged since that key signed it (require the "
                "key you were given outside the evidence with --public-key PEM or --fingerprint HEX)")


def _listings(files: Any, directories: Any, symlinks: Any) -> tuple[
        dict[str, dict[str, Any]], list[str], dict[str, str], list[Problem]]:
    """The manifest's listings with malformed or unsafe entries split off as problems."""
    problems: list[Problem] = []

    def safe(rel: Any) -> bool:
        if not isinstance(rel, str) or not rel:
            return False
        pure = PurePosixPath(rel)
        return not pure.is_absolute() and ".." not in pure.parts and "\\" not in rel and pure.as_posix() == rel

    good_files: dict[str, dict[str, Any]] = {}
    for rel, entry in (files.items() if isinstance(files, dict) else []):
        if not safe(rel):
            problems.append(Problem("manifest", str(rel), "unsafe path in the manifest; not checked"))
        elif not (isinstance(entry, dict) and isinstance(entry.get("sha256"), str)
                  and isinstance(entry.get("bytes"), int)):
            problems.append(Problem("manifest", rel, "entry has no sha256 and bytes; not checked"))
        else:
            good_files[rel] = entry
    good_dirs = [d for d in (directories if isinstance(directories, list) else []) if safe(d)]
    problems += [Problem("manifest", str(d), "unsafe directory path in the manifest")
                 for d in (directories if isinstance(directories, list) else []) if not safe(d)]
    good_links = {k: v for k, v in (symlinks.items() if isinstance(symlinks, dict) else [])
                  if safe(k) and isinstance(v, str)}
    if not isinstance(files, dict) or not isinstance(directories, list) or not isinstance(symlinks, dict):
        problems.append(Problem("manifest", MANIFEST_NAME, "files, directories or symlinks is malformed"))
    return good_files, good_dirs, good_links, problems



def verify_run(run_dir: Path, *, trusted_fingerprints: Iterable[str] = ()) -> VerifyResult:
    """Checks a sealed run: its signature, its signer, its run id, its time and every entry.

    ``trusted_fingerprints`` are key fingerprints (see :func:`normalise_fingerprint`); when
    any are given the manifest must be signed by one of them, otherwise the signer is reported
    but not judged. Every problem is listed (see :class:`Problem`): a missing manifest; an
    unreadable or malformed manifest (one naming a key twice included); a missing or invalid
    signature; an untrusted key; a manifest naming another run id than the directory's name; a
    ``sealed_at`` more than :data:`SEAL_DELAY_LIMIT_SECONDS` after the run's end or before it;
    and per entry, ``changed`` (content, size, kind or link target differs), ``missing``,
    ``extra`` (present, not listed) and ``unreadable``.

    Raises ManifestError only when ``run_dir`` is not a directory, OSError when it cannot be
    listed, ValueError for a malformed trusted fingerprint.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ManifestError(f"{run_dir} is not a directory")
    trusted = {normalise_fingerprint(f) for f in trusted_fingerprints}
    read = _read_manifest(run_dir, pinned=bool(trusted))
    if isinstance(read, VerifyResult):
        return read
    raw, digest, manifest = read
    problems: list[Problem] = []
    signer = _check_signature(run_dir, raw, manifest, trusted, problems)
    run_id = manifest.get("run_id")
    if run_id != run_dir.name:
        problems.append(Problem("run-id", run_dir.name, f"the manifest names run {run_id!r}: the directory was "
                                "renamed, or the evidence belongs to another run"))
    files, directories, symlinks, listing_problems = _listings(
        manifest.get("files"), manifest.get("directories"), manifest.get("symlinks"))
    problems += listing_problems
    problems += _compare_entries(run_dir, files, directories, symlinks)
    sealed_at, rendered_at, ended = _times(run_dir, manifest, files, problems)
    link = _previous(manifest, problems)
    report_error = manifest.get("report_error")
    signer_entry = manifest.get("signer") if isinstance(manifest.get("signer"), dict) else {}
    return VerifyResult(
        run_dir=run_dir, problems=problems, run_id=run_id if isinstance(run_id, str) else None, signer=signer,
        pinned=bool(trusted), files=len(files), directories=len(directories),
        sealed_at=sealed_at,
        previous=link, manifest_sha256=digest,
        report_error=report_error if isinstance(report_error, str) else None,
        custody=EXTERNAL_SIGNER if signer_entry.get("custody") == EXTERNAL_SIGNER else LOCAL_KEY,
        run_ended_at=ended, report_rendered_at=rendered_at,
    )


def _previous(manifest: dict[str, Any], problems: list[Problem]) -> ChainLink | None:
    """The manifest's link to the previous run; a malformed one is a problem (and None)."""
    previous = manifest.get("previous")
    if previous is None:
        return None
    if not (isinstance(previous, dict) and isinstance(previous.get("run_id"), str)
            and isinstance(previous.get("manifest_sha256"), str)):
        problems.append(Problem("manifest", MANIFEST_NAME, "previous is neither null nor {run_id, manifest_sha256}"))
        return None
    return ChainLink(previous["run_id"], previous["manifest_sha256"])


def _times(run_dir: Path, manifest: dict[str, Any], files: dict[str, Any],
           problems: list[Problem]) -> tuple[str | None, str | None, float | None]:
    """(sealed_at, report_rendered_at, the run's end in epoch seconds) of a manifest, appending a
    ``manifest`` problem for a time that is not one and a ``seal-time`` problem for a seal
    dated before the run's end or more than SEAL_DELAY_LIMIT_SECONDS after it."""
    sealed_at = manifest.get("sealed_at")
    if not (isinstance(sealed_at, str) and SEALED_AT.fullmatch(sealed_at)):
        # The chain is ordered by it: a run without one would stand outside every check of the history.
        problems.append(Problem("manifest", MANIFEST_NAME, f"sealed_at {str(sealed_at)[:40]!r} is not a UTC time "
                                "as kdrill writes it (YYYY-MM-DDTHH:MM:SS.ffffffZ)"))
        return None, None, None
    sealed = iso_epoch(sealed_at)
    rendered = manifest.get("report_rendered_at")
    if rendered is not None and not (isinstance(rendered, str) and SEALED_AT.fullmatch(rendered)
                                     and iso_epoch(rendered) <= sealed):
        problems.append(Problem("manifest", MANIFEST_NAME, f"report_rendered_at {str(rendered)[:40]!r} is not a "
                                f"UTC time as kdrill writes it, at or before sealed_at {sealed_at}"))
        rendered = None
    ended = run_end(run_dir, files)
    if ended is not None and sealed < ended - SEAL_CLOCK_SLACK_SECONDS:
        problems.append(Problem("seal-time", MANIFEST_NAME, f"sealed_at {sealed_at} is {ended - sealed:.0f} s before "
                                f"the run's end ({utc_now_iso_epoch(ended)}, its latest finished_at): the seal "
                                "does not cover the run as it ended"))
    elif ended is not None and sealed > ended + SEAL_DELAY_LIMIT_SECONDS:
        problems.append(Problem("seal-time", MANIFEST_NAME, f"sealed_at {sealed_at} is {sealed - ended:.0f} s after "
                                f"the run's end ({utc_now_iso_epoch(ended)}, its latest finished_at); kdrill seals "
                                f"a run within {SEAL_DELAY_LIMIT_SECONDS:.0f} s of its end: sealed again later"))
    return sealed_at, rendered, ended


def utc_now_iso_epoch(epoch: float) -> str:
    """Epoch seconds as kdrill writes times (UTC ISO-8601, µs)."""
    return utc_now_iso(datetime.fromtimestamp(epoch, tz=timezone.utc))


def run_end(run_dir: Path, files: dict[str, Any]) -> float | None:
    """The latest ``finished_at`` (epoch seconds) of run.json and the drill records among the
    sealed ``files`` (top-level ``*.json``, timelines aside), or None when none records one.
    A file that cannot be read as a JSON object counts for nothing here (verify names it)."""
    ends: list[float] = []
    for rel in files:
        if "/" in rel or not rel.endswith(".json") or rel.endswith(".timeline.json"):
            continue
        try:
            data = strict_loads(read_no_link(run_dir / rel))
        except (OSError, ValueError, RecursionError):
            continue
        value = data.get("finished_at") if isinstance(data, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            ends.append(float(value))
    return max(ends) if ends else None


def _read_manifest(run_dir: Path, pinned: bool) -> tuple[bytes, str, dict[str, Any]] | VerifyResult:
    """(bytes, SHA-256 hex of them, parsed object) of the run's format-2 manifest, or the result of
    a run whose manifest is missing, a symbolic link, unreadable, not JSON or of another format."""
    path = run_dir / MANIFEST_NAME
    if path.is_symlink():
        # Its bytes would be read from outside the run: a copy of another run's seal verifies.
        problem = Problem("manifest", MANIFEST_NAME, f"a symbolic link to {link_target(path)!r}: kdrill writes the "
                          "seal as files in the run, and no link in a run is followed")
        return VerifyResult(run_dir, [problem], pinned=pinned)
    if not path.is_file():
        detail = ("missing: the run was never sealed (still running, or it crashed), "
                  "or its manifest was deleted")
        return VerifyResult(run_dir, [Problem("not-sealed", MANIFEST_NAME, detail)], pinned=pinned)
    try:
        raw = read_no_link(path)
    except OSError as exc:
        problem = Problem("unreadable", MANIFEST_NAME, f"cannot be read: {exc.strerror or exc}")
        return VerifyResult(run_dir, [problem], pinned=pinned)
    digest = hashlib.sha256(raw).hexdigest()
    try:
        manifest = strict_loads(raw)
    except DuplicateKeyError as exc:
        problem = Problem("manifest", MANIFEST_NAME, f"is refused: {exc}")
        return VerifyResult(run_dir, [problem], pinned=pinned, manifest_sha256=digest)
    except (ValueError, RecursionError) as exc:
        problem = Problem("manifest", MANIFEST_NAME, f"does not parse as JSON ({exc}): changed after sealing")
        return VerifyResult(run_dir, [problem], pinned=pinned, manifest_sha256=digest)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        problem = Problem("manifest", MANIFEST_NAME, f"format {found!r} is not {FORMAT!r}: not a signed kdrill "
                          "manifest (an older, unsigned one cannot be verified)")
        return VerifyResult(run_dir, [problem], pinned=pinned, manifest_sha256=digest)
    return raw, digest, manifest


def _check_signature(run_dir: Path, raw: bytes, manifest: dict[str, Any], trusted: set[str],
                     problems: list[Problem]) -> PublicKeyInfo | None:
    """Appends signature and trust problems; returns the signer the manifest names, if usable."""
    signer_entry = manifest.get("signer")
    signer: PublicKeyInfo | None = None
    if isinstance(signer_entry, dict) and isinstance(signer_entry.get("public_key"), str):
        try:
            signer = PublicKeyInfo.from_pem(signer_entry["public_key"])
        except ManifestError as exc:
            problems.append(Problem("signature", MANIFEST_NAME, f"the signer's public key is unusable: {exc}"))
    else:
        problems.append(Problem("signature", MANIFEST_NAME, "the manifest names no signer public key"))
    if signer is not None and signer_entry.get("fingerprint_sha256") != signer.fingerprint:
        problems.append(Problem("manifest", MANIFEST_NAME, "the recorded fingerprint is not the public key's"))
    custody = signer_entry.get("custody", LOCAL_KEY) if isinstance(signer_entry, dict) else LOCAL_KEY
    if custody not in CUSTODIES:
        problems.append(Problem("manifest", MANIFEST_NAME, f"signer.custody {str(custody)[:40]!r} is none of "
                                f"{', '.join(CUSTODIES)}"))
    sig_path = run_dir / SIGNATURE_NAME
    if sig_path.is_symlink():
        problems.append(Problem("signature", SIGNATURE_NAME, f"a symbolic link to {link_target(sig_path)!r}: "
                                "kdrill writes the seal as files in the run, and no link in a run is followed"))
    elif not sig_path.is_file():
        problems.append(Problem("signature", SIGNATURE_NAME, "missing: the manifest is unsigned"))
    elif signer is not None:
        try:
            signer.key().verify(read_no_link(sig_path), raw)
        except InvalidSignature:
            problems.append(Problem("signature", SIGNATURE_NAME, "does not verify manifest.json with the key it "
                                    "names: the manifest was changed after sealing"))
        except OSError as exc:
            problems.append(Problem("signature", SIGNATURE_NAME, f"cannot be read: {exc.strerror or exc}"))
    if trusted and (signer is None or signer.fingerprint not in trusted):
        named = f"sha256:{signer.fingerprint}" if signer else "no usable key"
        problems.append(Problem("untrusted-key", named, "signed by a key that is not the trusted one "
                                f"(trusted: {', '.join('sha256:' + t for t in sorted(trusted))}): "
                                "re-sealed or replaced"))
    return signer


def _compare_entries(run_dir: Path, files: dict[str, dict[str, Any]], directories: list[str],
                     symlinks: dict[str, str]) -> list[Problem]:
    """Every difference between the manifest's listings and what is in ``run_dir`` now: entries
    changed, missing, added, unreadable, and every sealed symbolic link."""
    present, unlisted = scan_entries(run_dir)
    problems: list[Problem] = []
    listed: dict[str, str] = {**{d: "directory" for d in directories}, **{s: "symlink" for s in symlinks},
                              **{f: "file" for f in files}}
    for rel in sorted(listed):
        want = listed[rel]
        have = present.get(rel)
        if any(rel.startswith(d + "/") for d in unlisted):
            continue  # in a directory not looked into: said of that directory
        if rel in unlisted and want == "directory":
            problems.append(Problem("unreadable", rel, f"a sealed directory {unlisted[rel]}: what it holds is "
                                    "not checked"))
        elif have is None:
            problems.append(Problem("missing", rel, f"a sealed {want} is gone"))
        elif have != want:
            problems.append(Problem("changed", rel, f"was a {want}, is now a {have}"))
        elif want == "symlink":
            target = os.readlink(run_dir / rel)
            if target != symlinks[rel]:
                problems.append(Problem("changed", rel, f"link target {symlinks[rel]!r} is now {target!r}"))
            else:  # sealed by an older kdrill, or by hand: the seal covers the link, not its content
                problems.append(Problem("link", rel, f"a symbolic link to {target!r}: what it points at is not "
                                        "sealed and may change; kdrill seals no links"))
        elif want == "file":
            entry = files[rel]
            try:
                sha, size = file_digest(run_dir / rel)
            except OSError as exc:
                problems.append(Problem("unreadable", rel, f"cannot be read: {exc.strerror or exc}"))
                continue
            if size != entry["bytes"]:
                problems.append(Problem("changed", rel, f"{entry['bytes']} bytes sealed, {size} now"))
            elif sha != entry["sha256"].lower():
                problems.append(Problem("changed", rel, "sha256 differs from the sealed one"))
    for rel in sorted(set(present) - set(listed)):
        added = f"a {present[rel]} that is not in the manifest: added after sealing"
        problems.append(Problem("extra", rel, f"{added}; {unlisted[rel]}" if rel in unlisted else added))
    return problems
