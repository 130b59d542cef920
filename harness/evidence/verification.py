"""Verifying sealed evidence: one run against its signed manifest (:func:`verify_run`), and every
run of a reports directory with the chain that links them (:func:`verify_history`).

The manifest's format is described in harness/evidence/manifest.py, which seals runs; the key in
a manifest only says who signed, so a signer is trusted only when its fingerprint is pinned.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Iterable

from cryptography.exceptions import InvalidSignature

from harness.evidence.layout import MANIFEST_NAME, SIGNATURE_NAME, is_run_id
from harness.evidence.manifest_format import FORMAT, SEALED_AT, ChainLink, ManifestError
from harness.evidence.run_files import file_digest, link_target, read_no_link, scan_entries
from harness.evidence.signing_keys import PublicKeyInfo, normalise_fingerprint


@dataclass(frozen=True)
class Problem:
    """One reason evidence is not intact.

    ``kind``: ``not-sealed``, ``manifest`` (unreadable or malformed), ``signature``,
    ``untrusted-key``, ``run-id``, ``changed``, ``missing``, ``extra``, ``unreadable``, ``link`` (a
    sealed symbolic link, whose target is not sealed), or, for
    a history, ``broken-link`` and ``signer-changed``. ``subject``: the path in the run (POSIX, relative), or the run
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
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


@dataclass(frozen=True)
class VerifyResult:
    """What :func:`verify_run` found. ``ok`` only when ``problems`` is empty.

    ``signer`` is the key the manifest names (None when unreadable); ``pinned`` whether a
    trusted key was required; ``files``/``directories`` how many entries the manifest lists;
    ``manifest_sha256`` the hex digest of manifest.json's bytes (what the next run links to).
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
        if self.pinned:
            trusted = "a trusted key" if "untrusted-key" not in self.kinds else "NOT a trusted key"
            return f"signed by Ed25519 key sha256:{self.signer.fingerprint} ({trusted})"
        return (f"signed by Ed25519 key sha256:{self.signer.fingerprint}; this key was not pinned, so the "
                "signature only shows the manifest is unchanged since that key signed it (require your key "
                "with --public-key PEM or --fingerprint HEX)")


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
    """Checks a sealed run: its signature, its signer, its run id and every entry.

    ``trusted_fingerprints`` are key fingerprints (see :func:`normalise_fingerprint`); when
    any are given the manifest must be signed by one of them, otherwise the signer is reported
    but not judged. Every problem is listed (see :class:`Problem`): a missing manifest; an
    unreadable or malformed manifest; a missing or invalid signature; an untrusted key; a
    manifest naming another run id than the directory's name; and per entry, ``changed``
    (content, size, kind or link target differs), ``missing``, ``extra`` (present, not listed)
    and ``unreadable``.

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
    sealed_at = manifest.get("sealed_at")
    if not (isinstance(sealed_at, str) and SEALED_AT.fullmatch(sealed_at)):
        # The chain is ordered by it: a run without one would stand outside every check of the history.
        problems.append(Problem("manifest", MANIFEST_NAME, f"sealed_at {str(sealed_at)[:40]!r} is not a UTC time "
                                "as kdrill writes it (YYYY-MM-DDTHH:MM:SS.ffffffZ)"))
        sealed_at = None
    previous = manifest.get("previous")
    if previous is not None and not (isinstance(previous, dict) and isinstance(previous.get("run_id"), str)
                                     and isinstance(previous.get("manifest_sha256"), str)):
        problems.append(Problem("manifest", MANIFEST_NAME, "previous is neither null nor {run_id, manifest_sha256}"))
        previous = None
    link = (ChainLink(str(previous.get("run_id")), str(previous.get("manifest_sha256")))
            if isinstance(previous, dict) else None)
    report_error = manifest.get("report_error")
    return VerifyResult(
        run_dir=run_dir, problems=problems, run_id=run_id if isinstance(run_id, str) else None, signer=signer,
        pinned=bool(trusted), files=len(files), directories=len(directories),
        sealed_at=sealed_at,
        previous=link, manifest_sha256=digest,
        report_error=report_error if isinstance(report_error, str) else None,
    )


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
        manifest = json.loads(raw)
    except ValueError as exc:
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


# --------------------------------------------------------------------------- #
# Verifying a history
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class HistoryResult:
    """What :func:`verify_history` found in a reports directory.

    ``runs``: one VerifyResult per run directory, oldest seal first (unsealed ones last);
    ``problems``: every run's problems (``run`` set) and every broken link; ``notes``: facts
    that are not problems (forks from concurrent runs, several chain starts, skipped
    directories); ``head``: the most recently sealed run, the link a later run would name.
    """

    root: Path
    runs: list[VerifyResult]
    problems: list[Problem]
    notes: list[str]
    head: ChainLink | None

    @property
    def ok(self) -> bool:
        return not self.problems



def verify_history(reports_root: Path, *, trusted_fingerprints: Iterable[str] = ()) -> HistoryResult:
    """Verifies every run under ``reports_root`` and the chain that links them.

    Each run directory is checked with :func:`verify_run` (an unsealed one is a ``not-sealed``
    problem). Each sealed run's ``previous`` link must name a run that is still there with a
    manifest whose SHA-256 is the recorded one: otherwise a ``broken-link`` problem names the
    deleted, renamed or replaced run. With no trusted fingerprint given, a sealed run signed by
    another key than its previous run is a ``signer-changed`` problem (with them given, every
    signer must be one of them instead). A deleted latest run breaks no link; compare ``head``
    with a copy kept elsewhere to detect that.

    Raises ManifestError when ``reports_root`` is not a directory, ValueError for a malformed
    trusted fingerprint.
    """
    root = Path(reports_root)
    if not root.is_dir():
        raise ManifestError(f"{root} is not a directory")
    trusted = [normalise_fingerprint(f) for f in trusted_fingerprints]
    results, notes = _verify_runs(root, trusted)
    problems = [Problem(p.kind, p.subject, p.detail, run=r.run_dir.name) for r in results for p in r.problems]
    link_problems, link_notes = _chain_links(root, results, pinned=bool(trusted))
    problems += link_problems
    if not trusted:
        problems += _signers_unlike_the_oldest(results, {p.run for p in problems if p.kind == "signer-changed"})
    notes += link_notes
    sealed = [r for r in results if r.sealed_at is not None and r.manifest_sha256 is not None]
    head = ChainLink(sealed[-1].run_dir.name, sealed[-1].manifest_sha256) if sealed else None
    return HistoryResult(root=root, runs=results, problems=problems, notes=notes, head=head)


def _verify_runs(root: Path, trusted: list[str]) -> tuple[list[VerifyResult], list[str]]:
    """:func:`verify_run` of each run directory in ``root``, oldest seal first (unsealed last), and
    a note for each directory skipped (a symbolic link, or not named by a run id)."""
    results: list[VerifyResult] = []
    notes: list[str] = []
    for child in sorted(root.iterdir()):
        if not child.is_dir():
            continue
        if child.is_symlink() or not is_run_id(child.name):
            notes.append(f"skipped {child.name}: {'a symbolic link' if child.is_symlink() else 'not a run id'}")
            continue
        results.append(verify_run(child, trusted_fingerprints=trusted))
    results.sort(key=lambda r: (r.sealed_at is None, r.sealed_at or "", r.run_dir.name))
    return results, notes


def _chain_links(root: Path, results: list[VerifyResult], pinned: bool) -> tuple[list[Problem], list[str]]:
    """The problems of each sealed run's link to its previous run, and notes on forks (runs that
    follow one run) and on several runs starting a chain."""
    by_name = {r.run_dir.name: r for r in results}
    problems: list[Problem] = []
    followers: dict[str, list[str]] = {}
    starts: list[str] = []
    for r in results:
        if r.sealed_at is None or r.manifest_sha256 is None:
            continue  # not a readable seal: already a problem of its own
        name = r.run_dir.name
        if r.previous is None:
            starts.append(name)
            continue
        if not is_run_id(r.previous.run_id):
            problems.append(Problem("manifest", MANIFEST_NAME,
                                    f"names an invalid previous run id {r.previous.run_id!r}", run=name))
            continue
        followers.setdefault(r.previous.run_id, []).append(name)
        problem = _link_problem(root, r, by_name.get(r.previous.run_id), pinned)
        if problem is not None:
            problems.append(problem)
    notes = [f"runs {', '.join(names)} all follow {prev} (sealed concurrently?)"
             for prev, names in sorted(followers.items()) if len(names) > 1]
    if len(starts) > 1:
        notes.append(f"{len(starts)} runs start a chain ({', '.join(starts)}): each was sealed when no other "
                     "sealed run was in this directory, or the evidence was gathered from several places")
    return problems, notes


def _link_problem(root: Path, r: VerifyResult, target: VerifyResult | None, pinned: bool) -> Problem | None:
    """Why the run ``r``'s link to its previous run ``target`` (None: not a run here) does not hold,
    or None when it holds."""
    name, prev = r.run_dir.name, r.previous
    named = f"named by {name} as its previous run with manifest sha256 {prev.manifest_sha256}"
    if target is None:
        why = "missing: deleted or renamed" if not (root / prev.run_id).exists() else "no longer a run directory"
        return Problem("broken-link", prev.run_id, f"{named}; it is {why}", run=name)
    if target.manifest_sha256 is None:
        return Problem("broken-link", prev.run_id, f"{named}; its manifest is gone", run=name)
    if target.manifest_sha256 != prev.manifest_sha256:
        return Problem("broken-link", prev.run_id, f"{named}; its manifest now has sha256 "
                       f"{target.manifest_sha256}: replaced or re-sealed", run=name)
    if not pinned and r.signer and target.signer and r.signer.fingerprint != target.signer.fingerprint:
        # Unpinned, each run's signature proves only that *some* key sealed it: a run re-sealed
        # by another key keeps its link intact. Pinning every key (a rotation) accepts this.
        return Problem("signer-changed", name, f"signed by sha256:{r.signer.fingerprint}, its previous "
                       f"run {prev.run_id} by sha256:{target.signer.fingerprint}: a run re-sealed with "
                       "another key looks like this; pin both keys (--fingerprint) to accept a key "
                       "rotation", run=name)
    return None


def _signers_unlike_the_oldest(results: list[VerifyResult], flagged: set[str | None]) -> list[Problem]:
    """A ``signer-changed`` problem for each sealed run (not in ``flagged`` already) signed by
    another key than the oldest sealed run here."""
    # Unpinned, each signature proves only that *some* key sealed the run: a run sealed
    # elsewhere with another key and dropped in here names no previous run, so no link
    # catches it. Every run here is expected to be signed by the key of the oldest.
    signed = [r for r in results if r.sealed_at is not None and r.signer is not None]
    first = signed[0] if signed else None
    return [Problem("signer-changed", r.run_dir.name,
                    f"signed by sha256:{r.signer.fingerprint}, the oldest run here ({first.run_dir.name}) by "
                    f"sha256:{first.signer.fingerprint}: a run sealed with another key looks like this; pin "
                    "every key (--fingerprint) to accept a key rotation", run=r.run_dir.name)
            for r in signed[1:]
            if r.signer.fingerprint != first.signer.fingerprint and r.run_dir.name not in flagged]
