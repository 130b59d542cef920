"""Who signs a run's manifest: the local key (a file the runner reads) or an external signer.

A key the runner can read signs whatever the runner asks, whenever it asks: anyone who runs
drills can edit a record, delete the seal and seal it again. So a run meant for an audit is
signed through ``$KDRILL_SIGNER``, a command that holds its private key where the runner cannot
read it (another user through ``sudo -u``/``setpriv``, an agent, a token, a cloud KMS behind a
small script) and ``$KDRILL_SIGNER_PUBLIC_KEY``, the PEM file of that key's public half.

The signing command (split like a shell would, run without one; no secret belongs on it):

* stdin: the manifest's exact bytes (ASCII JSON, at most a few MB). Ed25519 signs the message
  itself, not a digest of it, so the signature stays checkable with ``openssl pkeyutl -verify
  -rawin -in manifest.json``, and the signer sees what it vouches for (run id, ``sealed_at``);
* environment: ``KDRILL_RUN_ID`` and ``KDRILL_MANIFEST_SHA256`` (hex), for the signer's own log;
* stdout: the 64-byte Ed25519 signature as base64 or hex text (``openssl pkeyutl -sign -rawin
  ... | base64 -w0``); exit 0. Anything else fails the sealing, and so does a signature that
  does not verify with ``$KDRILL_SIGNER_PUBLIC_KEY``.

The manifest records which of the two signed (``signer.custody``: ``local-key`` or
``external-signer``); the evidence of a local key says "signed by a local key: not for audit".
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.core import proc
from harness.evidence.manifest_format import EXTERNAL_SIGNER, LOCAL_KEY
from harness.evidence.signing_keys import (
    SIGNING_KEY_ENV,
    PublicKeyInfo,
    SigningKeyError,
    default_key_path,
    load_signing_key,
    read_public_key,
)

SIGNER_ENV = "KDRILL_SIGNER"
SIGNER_PUBLIC_KEY_ENV = "KDRILL_SIGNER_PUBLIC_KEY"
SIGNER_TIMEOUT_SECONDS = 60.0  # a token may ask for a touch; a signer that never answers must not hang the run
_SIGNATURE_BYTES = 64


@dataclass(frozen=True)
class Signer:
    """Signs manifests: ``public`` is its key, ``custody`` one of manifest_format.CUSTODIES,
    ``describe`` says which signer it is (a path or a command, never a secret)."""

    public: PublicKeyInfo
    custody: str
    describe: str
    _sign: Callable[[bytes, str], bytes] = field(repr=False)

    def sign(self, message: bytes, run_id: str) -> bytes:
        """The 64-byte Ed25519 signature of ``message`` (the manifest of run ``run_id``), checked
        against :attr:`public` before it is returned. Raises SigningKeyError naming the signer."""
        signature = self._sign(message, run_id)
        try:
            self.public.key().verify(signature, message)
        except InvalidSignature:
            raise SigningKeyError(f"{self.describe} returned a signature that does not verify with its public key "
                                  f"sha256:{self.public.fingerprint}: another key signed, or the output is not "
                                  "a signature; nothing was sealed") from None
        return signature


def local_signer(key: Ed25519PrivateKey, where: str = "a key given in-process") -> Signer:
    """A signer of ``key``, a private key this process holds (custody ``local-key``)."""
    return Signer(PublicKeyInfo.from_key(key), LOCAL_KEY, f"the local key ({where})",
                  lambda message, run_id: key.sign(message))


def load_signer() -> Signer:
    """The signer runs are sealed with: the external signer when ``$KDRILL_SIGNER`` is set, else
    the local key (harness/evidence/signing_keys.py load_signing_key).

    Raises SigningKeyError naming the variable or file: ``$KDRILL_SIGNER`` set but empty or not
    a command line, set together with ``$KDRILL_SIGNING_KEY``, or without a usable
    ``$KDRILL_SIGNER_PUBLIC_KEY``; and whatever load_signing_key raises.
    """
    command = os.environ.get(SIGNER_ENV)
    if command is None:
        configured = os.environ.get(SIGNING_KEY_ENV)
        return local_signer(load_signing_key(), configured or str(default_key_path()))
    if os.environ.get(SIGNING_KEY_ENV):
        raise SigningKeyError(f"both {SIGNER_ENV} and {SIGNING_KEY_ENV} are set: expected one signer; unset "
                              f"{SIGNING_KEY_ENV} (a key file the runner reads is for local runs only)")
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise SigningKeyError(f"{SIGNER_ENV}: expected a command line, got {command[:200]!r} ({exc})") from None
    if not argv:
        raise SigningKeyError(f"{SIGNER_ENV}: expected the signing command, got an empty value (a missing CI "
                              f"secret?); unset it to sign with the local key, not for audit")
    return external_signer(argv, os.environ.get(SIGNER_PUBLIC_KEY_ENV))


def external_signer(argv: list[str], public_key_path: str | None) -> Signer:
    """A signer that runs ``argv`` (see the module doc) and whose public key is the PEM file
    ``public_key_path``. Raises SigningKeyError when that file is not given or not an Ed25519
    public key."""
    if not public_key_path:
        raise SigningKeyError(f"{SIGNER_ENV} is set but {SIGNER_PUBLIC_KEY_ENV} is not: expected the PEM file of "
                              "the signer's public key (it goes into the manifest before the manifest is signed)")
    try:
        public = read_public_key(Path(public_key_path))
    except SigningKeyError as exc:
        raise SigningKeyError(f"{SIGNER_PUBLIC_KEY_ENV}: {exc}") from None
    describe = f"the external signer `{shlex.join(argv)[:200]}`"
    return Signer(public, EXTERNAL_SIGNER, describe, lambda message, run_id: _run_signer(argv, describe, message, run_id))


def _run_signer(argv: list[str], describe: str, message: bytes, run_id: str) -> bytes:
    """The signature ``argv`` prints for ``message``. Raises SigningKeyError naming the signer."""
    env = {"KDRILL_RUN_ID": run_id, "KDRILL_MANIFEST_SHA256": hashlib.sha256(message).hexdigest()}
    try:
        done = proc.run(argv, timeout_seconds=SIGNER_TIMEOUT_SECONDS, input=message.decode("ascii"), extra_env=env)
    except proc.CommandFailed as exc:
        raise SigningKeyError(f"{describe} refused to sign: {exc}") from None
    except subprocess.TimeoutExpired:
        raise SigningKeyError(f"{describe} did not answer within {SIGNER_TIMEOUT_SECONDS:.0f} s") from None
    except OSError as exc:
        raise SigningKeyError(f"{describe} cannot be started: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise SigningKeyError(f"{describe} printed bytes that are not text: expected the 64-byte Ed25519 "
                              "signature as base64 or hex (`... | base64 -w0`)") from None
    return parse_signature(done.stdout, describe)


def parse_signature(text: str, describe: str) -> bytes:
    """The 64 bytes of a signature printed as hex or base64 (blanks ignored). Raises
    SigningKeyError naming the signer and what it printed."""
    compact = "".join(text.split())
    try:
        raw = bytes.fromhex(compact) if len(compact) == 2 * _SIGNATURE_BYTES else base64.b64decode(compact, validate=True)
    except (ValueError, binascii.Error):
        raw = b""
    if len(raw) != _SIGNATURE_BYTES:
        raise SigningKeyError(f"{describe} printed {compact[:40]!r} ({len(compact)} characters): expected a 64-byte "
                              "Ed25519 signature as base64 or hex")
    return raw
