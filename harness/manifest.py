"""Evidence manifest: SHA-256 digests of every file a run left behind.

``write_manifest(run_dir)`` is called last, after ``report.html``; it records
each file under ``reports/<run-id>/`` with its digest and size in
``manifest.json``. ``verify_manifest(run_dir)`` (``kdrill verify <run-id>``)
re-hashes the directory and reports every file that changed, went missing or
was added since.

``manifest.json`` shape::

    {"run_id": str, "created_at": "<UTC ISO-8601>", "algorithm": "sha256",
     "files": {"relative/posix/path": {"sha256": "<hex>", "bytes": int}, ...}}
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Iterator

from harness.files import write_text_atomic

__all__ = [
    "MANIFEST_NAME",
    "ManifestError",
    "VerifyResult",
    "write_manifest",
    "verify_manifest",
    "file_digest",
]

MANIFEST_NAME = "manifest.json"
ALGORITHM = "sha256"
_CHUNK_BYTES = 1024 * 1024


class ManifestError(Exception):
    """The manifest is missing, unreadable or malformed."""


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of ``verify_manifest``; paths are relative POSIX paths, sorted.

    ``changed``: listed files whose size or SHA-256 differs; ``missing``:
    listed files that are gone; ``added``: files present but not listed;
    ``checked``: number of files the manifest lists.
    """

    run_dir: Path
    changed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    checked: int = 0

    @property
    def ok(self) -> bool:
        """True when nothing changed, went missing or was added."""
        return not (self.changed or self.missing or self.added)

    def summary(self) -> str:
        """One line per problem (``changed: path`` ...), or one OK line."""
        if self.ok:
            return f"OK: {self.checked} files in {self.run_dir} match {MANIFEST_NAME}"
        lines = [f"changed: {p}" for p in self.changed]
        lines += [f"missing: {p}" for p in self.missing]
        lines += [f"added: {p}" for p in self.added]
        return "\n".join(lines)


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


def _evidence_files(run_dir: Path) -> Iterator[str]:
    """Relative POSIX paths of every file under ``run_dir`` except the manifest.

    Symbolic links to directories are not followed; a symlinked file is
    recorded with the content it points to.
    """
    for root, dirs, files in os.walk(run_dir):
        dirs.sort()
        for name in files:
            path = Path(root, name)
            rel = path.relative_to(run_dir).as_posix()
            if rel == MANIFEST_NAME or not path.is_file():
                continue
            yield rel


def _run_id(run_dir: Path) -> str:
    try:
        meta = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return run_dir.name
    run_id = meta.get("run_id") if isinstance(meta, dict) else None
    return str(run_id) if run_id else run_dir.name


def write_manifest(run_dir: Path) -> Path:
    """Hashes every file under ``run_dir`` into ``run_dir/manifest.json``.

    Call it last, after everything else (``report.html`` included) is written.
    The file is replaced atomically. Returns the manifest's path. Raises
    ``ManifestError`` if ``run_dir`` is not a directory, ``OSError`` if a file
    cannot be read.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ManifestError(f"cannot write a manifest: {run_dir} is not a directory")
    files: dict[str, dict[str, Any]] = {}
    for rel in sorted(_evidence_files(run_dir)):
        sha, size = file_digest(run_dir / rel)
        files[rel] = {"sha256": sha, "bytes": size}
    manifest = {
        "run_id": _run_id(run_dir),
        "created_at": datetime.now(tz=timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "algorithm": ALGORITHM,
        "files": files,
    }
    return write_text_atomic(run_dir / MANIFEST_NAME, json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def _load_manifest(run_dir: Path) -> dict[str, dict[str, Any]]:
    path = run_dir / MANIFEST_NAME
    if not path.is_file():
        raise ManifestError(
            f"no {MANIFEST_NAME} in {run_dir}: this run's evidence was never sealed "
            "(the run did not finish, or the directory is not a kdrill run)"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ManifestError(f"{path} cannot be read as JSON: {exc}") from exc
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise ManifestError(f"{path} has no 'files' object; it is not a kdrill manifest")
    if manifest.get("algorithm") != ALGORITHM:
        raise ManifestError(f"{path} uses algorithm {manifest.get('algorithm')!r}; only {ALGORITHM!r} is supported")
    files = manifest["files"]
    for rel, entry in files.items():
        pure = PurePosixPath(rel)
        if pure.is_absolute() or ".." in pure.parts or not rel:
            raise ManifestError(f"{path} lists an unsafe path {rel!r}")
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
            raise ManifestError(f"{path} entry for {rel!r} has no sha256")
    return files


def verify_manifest(run_dir: Path) -> VerifyResult:
    """Re-hashes ``run_dir`` and compares it with its ``manifest.json``.

    Returns a ``VerifyResult`` (``ok`` is True when every listed file is
    present and unchanged and no file was added). Raises ``ManifestError``
    when the manifest is missing or malformed.
    """
    run_dir = Path(run_dir)
    listed = _load_manifest(run_dir)
    present = set(_evidence_files(run_dir))
    changed: list[str] = []
    missing: list[str] = []
    for rel in sorted(listed):
        entry = listed[rel]
        if rel not in present:
            missing.append(rel)
            continue
        path = run_dir / rel
        if entry.get("bytes") is not None and path.stat().st_size != entry["bytes"]:
            changed.append(rel)
            continue
        try:
            sha, _ = file_digest(path)
        except OSError:
            missing.append(rel)
            continue
        if sha != entry["sha256"].lower():
            changed.append(rel)
    added = sorted(present - set(listed))
    return VerifyResult(run_dir=run_dir, changed=changed, missing=missing, added=added, checked=len(listed))
