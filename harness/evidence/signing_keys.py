"""The Ed25519 keys runs are sealed with: the local signing key (a file the runner reads, named by
``$KDRILL_SIGNING_KEY`` or created on first use), a public key with its fingerprint, and the keys
an auditor trusts (``$KDRILL_TRUSTED_FINGERPRINTS``). harness/evidence/signers.py signs with
the local key or through an external signer that keeps its key from the runner.

A key fingerprint is the SHA-256 (hex) of the public key's DER SubjectPublicKeyInfo
(``openssl pkey -pubin -in signer.pem -outform DER | sha256sum``).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from harness.core.files import read_regular_file
from harness.core.ledger import state_dir
from harness.evidence.manifest_format import ManifestError
from harness.evidence.run_files import create_exclusive

SIGNING_KEY_ENV = "KDRILL_SIGNING_KEY"
#: Fingerprints every command that shows a seal requires when no --fingerprint/--public-key is given.
TRUSTED_ENV = "KDRILL_TRUSTED_FINGERPRINTS"
KEY_FILE_NAME = "signing-key.pem"
PUBLIC_KEY_MAX_BYTES = 64 * 1024  # a PEM public key is a few hundred bytes
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class SigningKeyError(ManifestError):
    """The signing key cannot be found, created, read or used."""


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


def configured_trust() -> list[str]:
    """The fingerprints in ``$KDRILL_TRUSTED_FINGERPRINTS`` (separated by commas or blanks), each
    as 64 lowercase hex; [] when it is unset. Raises ValueError naming the variable and the bad
    value (an empty one included: it would silently trust every key)."""
    text = os.environ.get(TRUSTED_ENV)
    if text is None:
        return []
    values = text.replace(",", " ").split()
    if not values:
        raise ValueError(f"{TRUSTED_ENV}: expected SHA-256 key fingerprints, got an empty value")
    try:
        return [normalise_fingerprint(v) for v in values]
    except ValueError as exc:
        raise ValueError(f"{TRUSTED_ENV}: {exc}") from None


def read_public_key(path: Path) -> PublicKeyInfo:
    """The PEM public key in ``path``. Raises SigningKeyError naming the file when it cannot be
    read, holds a private key (its public half is what is meant) or is not an Ed25519 public key."""
    try:
        data = read_regular_file(path, PUBLIC_KEY_MAX_BYTES)
    except OSError as exc:
        raise SigningKeyError(f"{path}: {exc.strerror or exc}") from None
    if b"PRIVATE KEY" in data:
        raise SigningKeyError(f"{path} is a private key; give its public half (`openssl pkey -in {path} -pubout`)")
    try:
        return PublicKeyInfo.from_pem(data)
    except ManifestError as exc:
        raise SigningKeyError(f"{path}: {exc}") from None


def default_key_path() -> Path:
    """``$KDRILL_STATE_DIR/signing-key.pem``, else ``~/.local/state/kdrill/signing-key.pem``."""
    return state_dir() / KEY_FILE_NAME


def this_machines_key_file(fingerprint: str) -> Path | None:
    """The key file on this machine whose public key has ``fingerprint`` (64 hex): the one
    ``$KDRILL_SIGNING_KEY`` names, else the local key :func:`default_key_path`; None when neither
    is it, or neither can be read. Creates nothing."""
    configured = os.environ.get(SIGNING_KEY_ENV)
    for path in ([Path(configured).expanduser()] if configured else []) + [default_key_path()]:
        try:
            if path.is_file() and PublicKeyInfo.from_key(_read_private_key(path)).fingerprint == fingerprint:
                return path
        except SigningKeyError:
            continue
    return None


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
    """The unencrypted Ed25519 PEM key in ``path``. Raises SigningKeyError naming the file."""
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
    """A new Ed25519 key in ``path`` (mode 0600, its directory 0700) unless one appeared there
    meanwhile. Raises SigningKeyError when it cannot be written."""
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        create_exclusive(path, pem, mode=0o600)
    except FileExistsError:
        pass  # another run created it meanwhile: use that one, so both runs sign with one key
    except OSError as exc:
        raise SigningKeyError(f"cannot create signing key {path}: {exc.strerror or exc}") from None

