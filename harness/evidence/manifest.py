"""Sealed evidence: a signed manifest of everything a run left behind, and a chain of runs.

A run is sealed once, at its end: ``harness.evidence.sealing.report_and_manifest`` (what ``kdrill
run`` and the pytest plugin call when a run finishes) renders ``report.html`` and then calls
:func:`seal_run`, which writes two files into ``reports/<run-id>/`` and never replaces them:

``manifest.json``
    every file (SHA-256 and size in bytes), directory and symbolic link under the run
    directory except these two files; the run id; when it was sealed; the previous sealed run
    in the same reports directory (the chain); the signer's public key and its fingerprint.
``manifest.sig``
    the Ed25519 signature (64 raw bytes) of manifest.json's exact bytes.

The signature covers the file's bytes, not a re-serialised form, so nothing has to be
canonicalised: what is on disk is what was signed, and anyone can check it without kdrill, with
the signer's public key taken from outside the evidence (docs/evidence.md, "Auditing a run",
checks every file too)::

    openssl pkeyutl -verify -pubin -inkey trusted-signer.pem -rawin -in manifest.json -sigfile manifest.sig

A key fingerprint is the SHA-256 (hex) of the public key's DER SubjectPublicKeyInfo
(``openssl pkey -pubin -in signer.pem -outform DER | sha256sum``). The key in the manifest only
says who signed; :func:`verify_run` trusts a signer only when its fingerprint is pinned.

This module seals; the keys are in harness/evidence/signing_keys.py, verifying is in
harness/evidence/verification.py, and the names of both are importable here too.

``manifest.json`` shape::

    {"format": "kdrill-manifest/2", "run_id": str, "sealed_at": "<UTC ISO-8601, µs>Z",
     "algorithm": "sha256",
     "files": {"posix/path": {"sha256": "<hex>", "bytes": int}, ...},
     "directories": ["posix/path", ...],
     "symlinks": {"posix/path": "<link target>", ...},
     "previous": {"run_id": str, "manifest_sha256": "<hex>"} | null,
     "signer": {"algorithm": "ed25519", "public_key": "<PEM>", "fingerprint_sha256": "<hex>",
                "custody": "local-key" | "external-signer"},
     "report_error": str | null, "report_rendered_at": "<UTC ISO-8601, µs>Z" | null}

``sealed_at`` is the time :func:`seal_run` itself reads just before signing (no caller sets it);
``report_rendered_at`` the time ``report.html`` shows, a moment earlier.

The signer (harness/evidence/signers.py) is the external signing command ``$KDRILL_SIGNER``
(custody ``external-signer``: the runner never holds the key), else a key file the runner reads
(custody ``local-key``, not for audit): the PEM file named by ``$KDRILL_SIGNING_KEY`` (never
created), else ``$KDRILL_STATE_DIR/signing-key.pem`` or ``~/.local/state/kdrill/signing-key.pem``,
created with mode 0600 on first use (:func:`load_signing_key`).
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.evidence.chain import HistoryResult, verify_history
from harness.evidence.layout import MANIFEST_NAME, SEAL_FILES, SIGNATURE_NAME, is_run_id, validate_run_id
from harness.evidence.manifest_format import ALGORITHM, FORMAT, SEALED_AT, ChainLink, ManifestError, utc_now_iso
from harness.evidence.run_files import MAX_DEPTH, create_exclusive, file_digest, read_no_link, scan_entries
from harness.evidence.signers import Signer, load_signer, local_signer
from harness.evidence.signing_keys import (
    KEY_FILE_NAME,
    SIGNING_KEY_ENV,
    PublicKeyInfo,
    SigningKeyError,
    default_key_path,
    load_signing_key,
    normalise_fingerprint,
)
from harness.evidence.strict_json import loads as strict_loads
from harness.evidence.verification import Problem, VerifyResult, escaped, verify_run

__all__ = [
    "MANIFEST_NAME",
    "SIGNATURE_NAME",
    "FORMAT",
    "SIGNING_KEY_ENV",
    "ManifestError",
    "SigningKeyError",
    "AlreadySealedError",
    "PublicKeyInfo",
    "ChainLink",
    "Problem",
    "VerifyResult",
    "HistoryResult",
    "default_key_path",
    "load_signing_key",
    "load_signer",
    "Signer",
    "normalise_fingerprint",
    "previous_run",
    "is_sealed",
    "seal_run",
    "verify_run",
    "verify_history",
    "file_digest",
    "escaped",
    "MAX_DEPTH",
    "SEALED_AT",
    "ALGORITHM",
    "KEY_FILE_NAME",
]


class AlreadySealedError(ManifestError):
    """The run already has a manifest or signature; a run is sealed once."""


# --------------------------------------------------------------------------- #
# The chain
# --------------------------------------------------------------------------- #


def _read_sealed(path: Path) -> tuple[bytes, dict[str, Any]] | None:
    """(bytes, parsed object) of a format-2 manifest, or None when it is absent or unusable (a
    symbolic link included: the chain names a run's own manifest, not one it points at)."""
    try:
        raw = read_no_link(path)
        data = strict_loads(raw)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("sealed_at"), str):
        return None
    return raw, data


def _sealed_siblings(reports_root: Path, run_id: str) -> Iterable[tuple[str, bytes, dict[str, Any]]]:
    """(run id, manifest bytes, manifest) of every other sealed run directory in ``reports_root``."""
    try:
        children = sorted(Path(reports_root).iterdir())
    except OSError:
        return
    for child in children:
        if child.name == run_id or not is_run_id(child.name) or child.is_symlink() or not child.is_dir():
            continue
        sealed = _read_sealed(child / MANIFEST_NAME)
        if sealed is not None:
            yield child.name, sealed[0], sealed[1]


def previous_run(reports_root: Path, run_id: str) -> ChainLink | None:
    """The most recently sealed run in ``reports_root`` other than ``run_id``, or None.

    "Most recent" is the latest ``sealed_at`` (ties broken by run id). Directories that are
    symbolic links, whose names are not run ids, or whose manifest is absent, unreadable or of
    another format are not candidates (``kdrill verify --history`` reports those).
    """
    best: tuple[tuple[str, str], ChainLink] | None = None
    for name, raw, data in _sealed_siblings(reports_root, run_id):
        order = (data["sealed_at"], name)
        if best is None or order > best[0]:
            best = (order, ChainLink(name, hashlib.sha256(raw).hexdigest()))
    return best[1] if best else None


# --------------------------------------------------------------------------- #
# Sealing
# --------------------------------------------------------------------------- #


def is_sealed(run_dir: Path) -> bool:
    """Whether sealing has begun in ``run_dir`` (its manifest or its signature exists)."""
    return any((Path(run_dir) / name).exists() or (Path(run_dir) / name).is_symlink() for name in SEAL_FILES)


def seal_run(run_dir: Path, signer: Signer | Ed25519PrivateKey, *, previous: ChainLink | None,
             report_error: str | None = None, report_rendered_at: datetime | None = None) -> Path:
    """Seals ``run_dir``: writes ``manifest.json`` and ``manifest.sig`` (see the module doc).

    Call it once, last, when nothing else will be written into the run (``report.html``
    included). ``signer`` signs (a bare private key is the local key); ``previous`` is the chain
    link to record, normally ``previous_run(run_dir.parent, run_dir.name)``; ``report_error``
    records why ``report.html`` could not be rendered, if it could not, and
    ``report_rendered_at`` the time the page shows. ``sealed_at`` is now, read here. Neither
    file is ever replaced: the signature is created first and the manifest last, each
    exclusively. Returns the manifest's path.

    Raises RunIdError if the directory's name is not a valid run id, AlreadySealedError if the
    run has a manifest or signature already or a later run in the same reports directory names
    it as its previous run (it was sealed once: deleting its seal files does not make it new
    again), ManifestError if ``run_dir`` is not a directory or
    holds something that is neither a file nor a directory (a symbolic link included: its
    target's content would not be sealed) or a directory it cannot list (more than
    :data:`MAX_DEPTH` levels down, or unreadable), SigningKeyError when the signer fails, OSError
    if an entry cannot be read.
    """
    run_dir = Path(run_dir)
    run_id = validate_run_id(run_dir.name)
    if not run_dir.is_dir():
        raise ManifestError(f"cannot seal {run_dir}: not a directory")
    if is_sealed(run_dir):
        raise AlreadySealedError(f"{run_dir} is already sealed; a run is sealed once, at its end")
    for name, _, data in _sealed_siblings(run_dir.parent, run_id):
        previous_entry = data.get("previous")
        if isinstance(previous_entry, dict) and previous_entry.get("run_id") == run_id:
            raise AlreadySealedError(f"{run_dir} was sealed before: run {name} names it as its previous run; "
                                     "a run is sealed once")
    if isinstance(signer, Ed25519PrivateKey):
        signer = local_signer(signer)
    files, directories = _entries_to_seal(run_dir)
    manifest = {
        "format": FORMAT,
        "run_id": run_id,
        "sealed_at": utc_now_iso(),  # the seal's own time: what verify checks against the run's end
        "algorithm": ALGORITHM,
        "files": files,
        "directories": directories,
        "symlinks": {},  # a run holding a link is refused (_entries_to_seal): kdrill seals no links
        "previous": previous.to_dict() if previous else None,
        "signer": {"algorithm": "ed25519", "public_key": signer.public.pem,
                   "fingerprint_sha256": signer.public.fingerprint, "custody": signer.custody},
        "report_error": report_error,
        "report_rendered_at": utc_now_iso(report_rendered_at) if report_rendered_at else None,
    }
    raw = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("ascii")
    signature = signer.sign(raw, run_id)
    path = run_dir / MANIFEST_NAME
    try:
        # The signature first: the manifest appearing is what makes the run sealed.
        create_exclusive(run_dir / SIGNATURE_NAME, signature, mode=0o644)
        create_exclusive(path, raw, mode=0o644)
    except FileExistsError:
        raise AlreadySealedError(f"{run_dir} was sealed by someone else meanwhile") from None
    return path


def _entries_to_seal(run_dir: Path) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The manifest's ``files`` ({posix path: {"sha256": hex, "bytes": int}}) and ``directories``
    of ``run_dir``. Raises ManifestError for an entry that cannot be sealed (see :func:`seal_run`),
    OSError when a file cannot be read."""
    files: dict[str, dict[str, Any]] = {}
    directories: list[str] = []
    present, unlisted = scan_entries(run_dir)
    for rel, kind in present.items():
        if rel in unlisted:
            raise ManifestError(f"cannot seal {run_dir}: {rel} is a directory {unlisted[rel]}")
        if kind == "file":
            sha, size = file_digest(run_dir / rel)
            files[rel] = {"sha256": sha, "bytes": size}
        elif kind == "directory":
            directories.append(rel)
        elif kind == "symlink":
            # What a link points at is outside the seal: a reader following it reads whatever is
            # there now. kdrill writes none, so one in a run is a mistake or a forgery.
            raise ManifestError(f"cannot seal {run_dir}: {rel} is a symbolic link (to {os.readlink(run_dir / rel)!r}); "
                                "what it points at could not be sealed")
        else:
            raise ManifestError(f"cannot seal {run_dir}: {rel} is neither a file, a directory nor a symbolic link")
    return files, directories

