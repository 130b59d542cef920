"""Sealed evidence: a signed manifest of everything a run left behind, and a chain of runs.

A run is sealed once, at its end: ``harness.cli.report_and_manifest`` (what ``kdrill run`` and
the pytest plugin call when a run finishes) renders ``report.html`` and then calls
:func:`seal_run`, which writes two files into ``reports/<run-id>/`` and never replaces them:

``manifest.json``
    every file (SHA-256 and size in bytes), directory and symbolic link under the run
    directory except these two files; the run id; when it was sealed; the previous sealed run
    in the same reports directory (the chain); the signer's public key and its fingerprint.
``manifest.sig``
    the Ed25519 signature (64 raw bytes) of manifest.json's exact bytes.

The signature covers the file's bytes, not a re-serialised form, so nothing has to be
canonicalised: what is on disk is what was signed, and anyone can check it without kdrill::

    jq -r .signer.public_key manifest.json > signer.pem
    openssl pkeyutl -verify -pubin -inkey signer.pem -rawin -in manifest.json -sigfile manifest.sig

A key fingerprint is the SHA-256 (hex) of the public key's DER SubjectPublicKeyInfo
(``openssl pkey -pubin -in signer.pem -outform DER | sha256sum``). The key in the manifest only
says who signed; :func:`verify_run` trusts a signer only when its fingerprint is pinned.

``manifest.json`` shape::

    {"format": "kdrill-manifest/2", "run_id": str, "sealed_at": "<UTC ISO-8601, µs>Z",
     "algorithm": "sha256",
     "files": {"posix/path": {"sha256": "<hex>", "bytes": int}, ...},
     "directories": ["posix/path", ...],
     "symlinks": {"posix/path": "<link target>", ...},
     "previous": {"run_id": str, "manifest_sha256": "<hex>"} | null,
     "signer": {"algorithm": "ed25519", "public_key": "<PEM>", "fingerprint_sha256": "<hex>"},
     "report_error": str | null}

The signing key is the PEM file named by ``$KDRILL_SIGNING_KEY`` (never created), else the local
key ``$KDRILL_STATE_DIR/signing-key.pem`` or ``~/.local/state/kdrill/signing-key.pem``, created
with mode 0600 on first use (:func:`load_signing_key`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Iterable

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from harness.evidence.records import RunIdError, validate_run_id
from harness.core.files import fsync_dir

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
    "normalise_fingerprint",
    "previous_run",
    "is_sealed",
    "seal_run",
    "verify_run",
    "verify_history",
    "file_digest",
]

MANIFEST_NAME = "manifest.json"
SIGNATURE_NAME = "manifest.sig"
FORMAT = "kdrill-manifest/2"
ALGORITHM = "sha256"
SIGNING_KEY_ENV = "KDRILL_SIGNING_KEY"
KEY_FILE_NAME = "signing-key.pem"
#: The seal's own files, at the top of the run directory: not listed in the manifest.
_SEAL_FILES = frozenset({MANIFEST_NAME, SIGNATURE_NAME})
_CHUNK_BYTES = 1024 * 1024
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class ManifestError(Exception):
    """A manifest cannot be written, or a directory cannot be examined."""


class SigningKeyError(ManifestError):
    """The signing key cannot be found, created, read or used."""


class AlreadySealedError(ManifestError):
    """The run already has a manifest or signature; a run is sealed once."""


# --------------------------------------------------------------------------- #
# Keys
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class PublicKeyInfo:
    """An Ed25519 public key as PEM (SubjectPublicKeyInfo) and its fingerprint (64 hex)."""

    pem: str
    fingerprint: str

    @classmethod
    def from_key(cls, key: Ed25519PublicKey | Ed25519PrivateKey) -> PublicKeyInfo:
        public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
        pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        return cls(pem=pem.decode("ascii"), fingerprint=hashlib.sha256(der).hexdigest())

    @classmethod
    def from_pem(cls, pem: str | bytes) -> PublicKeyInfo:
        """Parses a PEM public key. Raises ManifestError unless it is an Ed25519 public key."""
        data = pem.encode("ascii", "replace") if isinstance(pem, str) else pem
        try:
            key = serialization.load_pem_public_key(data)
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise ManifestError(f"not a PEM public key ({exc})") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ManifestError(f"a {type(key).__name__}, not an Ed25519 public key")
        return cls.from_key(key)

    def key(self) -> Ed25519PublicKey:
        """The key itself. Raises ManifestError if ``pem`` is not an Ed25519 public key."""
        key = serialization.load_pem_public_key(self.pem.encode("ascii"))
        if not isinstance(key, Ed25519PublicKey):
            raise ManifestError(f"a {type(key).__name__}, not an Ed25519 public key")
        return key


def normalise_fingerprint(text: str) -> str:
    """``text`` as 64 lowercase hex digits; accepts a ``sha256:``/``SHA256:`` prefix and colons.

    Raises ValueError naming the input when it is not a SHA-256 fingerprint.
    """
    value = text.strip().lower().removeprefix("sha256:").replace(":", "")
    if not _HEX64.match(value):
        raise ValueError(f"{text!r} is not a SHA-256 key fingerprint (64 hex digits)")
    return value


def default_key_path() -> Path:
    """``$KDRILL_STATE_DIR/signing-key.pem``, else ``~/.local/state/kdrill/signing-key.pem``."""
    from harness.core.ledger import state_dir

    return state_dir() / KEY_FILE_NAME


def load_signing_key() -> Ed25519PrivateKey:
    """The private key runs are sealed with.

    ``$KDRILL_SIGNING_KEY`` names a PEM file (PKCS#8, unencrypted Ed25519, e.g. from
    ``openssl genpkey -algorithm ed25519``); it is never created, so a CI job whose secret is
    missing fails instead of signing with a throw-away key. Otherwise the local key
    :func:`default_key_path` is used, created (mode 0600, directory 0700) on first use.

    Raises SigningKeyError naming the file: missing configured key, unreadable or encrypted or
    non-Ed25519 key, or a local key readable by group or others.
    """
    configured = os.environ.get(SIGNING_KEY_ENV)
    if configured:
        path = Path(configured).expanduser()
        if not path.is_file():
            raise SigningKeyError(
                f"{SIGNING_KEY_ENV}={configured}: no such file (a configured key is never created; "
                f"unset {SIGNING_KEY_ENV} to use the local key {default_key_path()})")
        return _read_private_key(path)
    path = default_key_path()
    if not path.exists():
        _create_private_key(path)
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        # Like ssh: a private key others can read signs nothing anybody should trust.
        raise SigningKeyError(f"signing key {path} has mode {mode:o}; run `chmod 600 {path}`")
    return _read_private_key(path)


def _read_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SigningKeyError(f"cannot read signing key {path}: {exc.strerror or exc}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise SigningKeyError(f"signing key {path} is encrypted; kdrill needs an unencrypted PKCS#8 "
                              "Ed25519 key (protect it with mode 0600)") from None
    except (ValueError, UnsupportedAlgorithm):
        raise SigningKeyError(f"signing key {path} is not a PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(f"signing key {path} is a {type(key).__name__}; kdrill signs with Ed25519 "
                              "(`openssl genpkey -algorithm ed25519 -out key.pem`)")
    return key


def _create_private_key(path: Path) -> None:
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _link_new(path, pem, mode=0o600)
    except FileExistsError:
        pass  # another run created it meanwhile: use that one, so both runs sign with one key
    except OSError as exc:
        raise SigningKeyError(f"cannot create signing key {path}: {exc.strerror or exc}") from None


def _link_new(path: Path, data: bytes, mode: int) -> None:
    """Creates ``path`` holding ``data`` whole or not at all, and never replaces an existing file.

    The data goes to a temporary file beside ``path`` first (fsynced), which is then hard-linked
    to ``path``: link(2) fails with EEXIST instead of replacing, unlike rename(2). Raises
    FileExistsError when ``path`` exists, OSError otherwise.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.link(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    fsync_dir(path.parent)


# --------------------------------------------------------------------------- #
# Hashing and scanning
# --------------------------------------------------------------------------- #


def file_digest(path: Path) -> tuple[str, int]:
    """SHA-256 hex digest and size in bytes of ``path``, read in 1 MiB chunks.

    Raises ``OSError`` if the file cannot be read.
    """
    digest = hashlib.sha256()
    size = 0
    with Path(path).open("rb") as fh:
        while chunk := fh.read(_CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


#: How deep a run's entries may be. kdrill writes a few levels (logs/kind/<node>/<file>); a deeper
#: directory is not looked into: listing it could exceed PATH_MAX, and a run holding one is
#: refused by seal_run and not intact for verify_run.
MAX_DEPTH = 32


def _scan(run_dir: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Every entry under ``run_dir`` but the top-level seal files: ({posix path: kind}, {posix
    path: why a directory's entries are not listed}).

    Kinds: ``file``, ``directory``, ``symlink`` (never followed, so a link cannot pull content
    from outside the run into the seal) and ``other`` (FIFOs, sockets, devices). A directory more
    than :data:`MAX_DEPTH` levels down, or one that cannot be listed, is in both: its entries are
    not. Iterative, depth first in name order: a deep tree must not exhaust Python's recursion.
    Raises OSError when ``run_dir`` itself cannot be listed.
    """
    found: dict[str, str] = {}
    unlisted: dict[str, str] = {}

    def listing(prefix: str) -> list[os.DirEntry]:
        with os.scandir(run_dir / prefix if prefix else run_dir) as it:
            return sorted(it, key=lambda e: e.name)

    pending = [("", iter(listing("")))]  # (prefix, entries left) of each directory being listed, innermost last
    while pending:
        prefix, entries = pending[-1]
        entry = next(entries, None)
        if entry is None:
            pending.pop()
            continue
        if not prefix and entry.name in _SEAL_FILES:
            continue
        rel = prefix + entry.name
        if entry.is_symlink():
            found[rel] = "symlink"
        elif entry.is_dir(follow_symlinks=False):
            if rel.count("/") + 1 > MAX_DEPTH:
                found[rel], unlisted[rel] = "directory", f"more than {MAX_DEPTH} levels down, not looked into"
                continue
            try:
                children = listing(rel)
            except OSError as exc:
                found[rel], unlisted[rel] = "directory", f"cannot be listed: {exc.strerror or exc}"
                continue
            found[rel] = "directory"
            pending.append((rel + "/", iter(children)))
        elif entry.is_file(follow_symlinks=False):
            found[rel] = "file"
        else:
            found[rel] = "other"
    return found, unlisted


SEALED_AT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")  # what _utc_now_iso writes


def _utc_now_iso(when: datetime | None = None) -> str:
    stamp = (when or datetime.now(tz=timezone.utc)).astimezone(timezone.utc)
    # Fixed width (microseconds always present), so sealed_at strings sort in time order.
    return stamp.isoformat(timespec="microseconds").replace("+00:00", "Z")


# --------------------------------------------------------------------------- #
# The chain
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class ChainLink:
    """A sealed run as a later manifest names it: its run id and its manifest's SHA-256 (hex)."""

    run_id: str
    manifest_sha256: str

    def to_dict(self) -> dict[str, str]:
        return {"run_id": self.run_id, "manifest_sha256": self.manifest_sha256}


def _read_no_link(path: Path) -> bytes:
    """``path``'s bytes; OSError (ELOOP) when it is a symbolic link, even one made after a check.
    Never blocks on a FIFO put in its place (it reads as empty)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as stream:
        return stream.read()


def _link_target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError as exc:
        return f"<unreadable: {exc.strerror or exc}>"


def _read_sealed(path: Path) -> tuple[bytes, dict[str, Any]] | None:
    """(bytes, parsed object) of a format-2 manifest, or None when it is absent or unusable (a
    symbolic link included: the chain names a run's own manifest, not one it points at)."""
    try:
        raw = _read_no_link(path)
        data = json.loads(raw)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("sealed_at"), str):
        return None
    return raw, data


def _is_run_id(name: str) -> bool:
    try:
        validate_run_id(name)
    except RunIdError:
        return False
    return True


def _sealed_siblings(reports_root: Path, run_id: str) -> Iterable[tuple[str, bytes, dict[str, Any]]]:
    """(run id, manifest bytes, manifest) of every other sealed run directory in ``reports_root``."""
    try:
        children = sorted(Path(reports_root).iterdir())
    except OSError:
        return
    for child in children:
        if child.name == run_id or not _is_run_id(child.name) or child.is_symlink() or not child.is_dir():
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
    return any((Path(run_dir) / name).exists() or (Path(run_dir) / name).is_symlink() for name in _SEAL_FILES)


def seal_run(run_dir: Path, key: Ed25519PrivateKey, *, previous: ChainLink | None,
             sealed_at: datetime | None = None, report_error: str | None = None) -> Path:
    """Seals ``run_dir``: writes ``manifest.json`` and ``manifest.sig`` (see the module doc).

    Call it once, last, when nothing else will be written into the run (``report.html``
    included). ``previous`` is the chain link to record, normally
    ``previous_run(run_dir.parent, run_dir.name)``; ``sealed_at`` defaults to now (UTC);
    ``report_error`` records why ``report.html`` could not be rendered, if it could not.
    Neither file is ever replaced: the signature is created first and the manifest last, each
    exclusively. Returns the manifest's path.

    Raises RunIdError if the directory's name is not a valid run id, AlreadySealedError if the
    run has a manifest or signature already or a later run in the same reports directory names
    it as its previous run (it was sealed once: deleting its seal files does not make it new
    again), ManifestError if ``run_dir`` is not a directory or
    holds something that is neither a file nor a directory (a symbolic link included: its
    target's content would not be sealed) or a directory it cannot list (more than
    :data:`MAX_DEPTH` levels down, or unreadable), OSError if an entry cannot be read.
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
    files: dict[str, dict[str, Any]] = {}
    directories: list[str] = []
    symlinks: dict[str, str] = {}
    present, unlisted = _scan(run_dir)
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
    signer = PublicKeyInfo.from_key(key)
    manifest = {
        "format": FORMAT,
        "run_id": run_id,
        "sealed_at": _utc_now_iso(sealed_at),
        "algorithm": ALGORITHM,
        "files": files,
        "directories": directories,
        "symlinks": symlinks,
        "previous": previous.to_dict() if previous else None,
        "signer": {"algorithm": "ed25519", "public_key": signer.pem, "fingerprint_sha256": signer.fingerprint},
        "report_error": report_error,
    }
    raw = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("ascii")
    path = run_dir / MANIFEST_NAME
    try:
        # The signature first: the manifest appearing is what makes the run sealed.
        _link_new(run_dir / SIGNATURE_NAME, key.sign(raw), mode=0o644)
        _link_new(path, raw, mode=0o644)
    except FileExistsError:
        raise AlreadySealedError(f"{run_dir} was sealed by someone else meanwhile") from None
    return path


# --------------------------------------------------------------------------- #
# Verifying one run
# --------------------------------------------------------------------------- #


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
    path = run_dir / MANIFEST_NAME
    if path.is_symlink():
        # Its bytes would be read from outside the run: a copy of another run's seal verifies.
        problem = Problem("manifest", MANIFEST_NAME, f"a symbolic link to {_link_target(path)!r}: kdrill writes the "
                          "seal as files in the run, and no link in a run is followed")
        return VerifyResult(run_dir, [problem], pinned=bool(trusted))
    if not path.is_file():
        detail = ("missing: the run was never sealed (still running, or it crashed), "
                  "or its manifest was deleted")
        return VerifyResult(run_dir, [Problem("not-sealed", MANIFEST_NAME, detail)], pinned=bool(trusted))
    try:
        raw = _read_no_link(path)
    except OSError as exc:
        problem = Problem("unreadable", MANIFEST_NAME, f"cannot be read: {exc.strerror or exc}")
        return VerifyResult(run_dir, [problem], pinned=bool(trusted))
    digest = hashlib.sha256(raw).hexdigest()
    try:
        manifest = json.loads(raw)
    except ValueError as exc:
        problem = Problem("manifest", MANIFEST_NAME, f"does not parse as JSON ({exc}): changed after sealing")
        return VerifyResult(run_dir, [problem], pinned=bool(trusted), manifest_sha256=digest)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        problem = Problem("manifest", MANIFEST_NAME, f"format {found!r} is not {FORMAT!r}: not a signed kdrill "
                          "manifest (an older, unsigned one cannot be verified)")
        return VerifyResult(run_dir, [problem], pinned=bool(trusted), manifest_sha256=digest)

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
        problems.append(Problem("signature", SIGNATURE_NAME, f"a symbolic link to {_link_target(sig_path)!r}: "
                                "kdrill writes the seal as files in the run, and no link in a run is followed"))
    elif not sig_path.is_file():
        problems.append(Problem("signature", SIGNATURE_NAME, "missing: the manifest is unsigned"))
    elif signer is not None:
        try:
            signer.key().verify(_read_no_link(sig_path), raw)
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
    present, unlisted = _scan(run_dir)
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
    results: list[VerifyResult] = []
    notes: list[str] = []
    for child in sorted(root.iterdir()):
        if not child.is_dir():
            continue
        if child.is_symlink() or not _is_run_id(child.name):
            notes.append(f"skipped {child.name}: {'a symbolic link' if child.is_symlink() else 'not a run id'}")
            continue
        results.append(verify_run(child, trusted_fingerprints=trusted))
    results.sort(key=lambda r: (r.sealed_at is None, r.sealed_at or "", r.run_dir.name))

    problems = [Problem(p.kind, p.subject, p.detail, run=r.run_dir.name) for r in results for p in r.problems]
    by_name = {r.run_dir.name: r for r in results}
    followers: dict[str, list[str]] = {}
    starts: list[str] = []
    for r in results:
        if r.sealed_at is None or r.manifest_sha256 is None:
            continue  # not a readable seal: already a problem of its own
        name = r.run_dir.name
        if r.previous is None:
            starts.append(name)
            continue
        prev = r.previous
        if not _is_run_id(prev.run_id):
            problems.append(Problem("manifest", MANIFEST_NAME, f"names an invalid previous run id {prev.run_id!r}",
                                    run=name))
            continue
        followers.setdefault(prev.run_id, []).append(name)
        target = by_name.get(prev.run_id)
        named = f"named by {name} as its previous run with manifest sha256 {prev.manifest_sha256}"
        if target is None:
            why = "missing: deleted or renamed" if not (root / prev.run_id).exists() else "no longer a run directory"
            problems.append(Problem("broken-link", prev.run_id, f"{named}; it is {why}", run=name))
        elif target.manifest_sha256 is None:
            problems.append(Problem("broken-link", prev.run_id, f"{named}; its manifest is gone", run=name))
        elif target.manifest_sha256 != prev.manifest_sha256:
            problems.append(Problem("broken-link", prev.run_id, f"{named}; its manifest now has sha256 "
                                    f"{target.manifest_sha256}: replaced or re-sealed", run=name))
        elif not trusted and r.signer and target.signer and r.signer.fingerprint != target.signer.fingerprint:
            # Unpinned, each run's signature proves only that *some* key sealed it: a run re-sealed
            # by another key keeps its link intact. Pinning every key (a rotation) accepts this.
            problems.append(Problem("signer-changed", name, f"signed by sha256:{r.signer.fingerprint}, its previous "
                                    f"run {prev.run_id} by sha256:{target.signer.fingerprint}: a run re-sealed with "
                                    "another key looks like this; pin both keys (--fingerprint) to accept a key "
                                    "rotation", run=name))
    if not trusted:
        # Unpinned, each signature proves only that *some* key sealed the run: a run sealed
        # elsewhere with another key and dropped in here names no previous run, so no link
        # catches it. Every run here is expected to be signed by the key of the oldest.
        flagged = {p.run for p in problems if p.kind == "signer-changed"}
        signed = [r for r in results if r.sealed_at is not None and r.signer is not None]
        first = signed[0] if signed else None
        for r in signed[1:]:
            if r.signer.fingerprint != first.signer.fingerprint and r.run_dir.name not in flagged:
                problems.append(Problem(
                    "signer-changed", r.run_dir.name,
                    f"signed by sha256:{r.signer.fingerprint}, the oldest run here ({first.run_dir.name}) by "
                    f"sha256:{first.signer.fingerprint}: a run sealed with another key looks like this; pin "
                    "every key (--fingerprint) to accept a key rotation", run=r.run_dir.name))
    for prev, names in sorted(followers.items()):
        if len(names) > 1:
            notes.append(f"runs {', '.join(names)} all follow {prev} (sealed concurrently?)")
    if len(starts) > 1:
        notes.append(f"{len(starts)} runs start a chain ({', '.join(starts)}): each was sealed when no other "
                     "sealed run was in this directory, or the evidence was gathered from several places")
    sealed = [r for r in results if r.sealed_at is not None and r.manifest_sha256 is not None]
    head = ChainLink(sealed[-1].run_dir.name, sealed[-1].manifest_sha256) if sealed else None
    return HistoryResult(root=root, runs=results, problems=problems, notes=notes, head=head)
