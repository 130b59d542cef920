"""The on-disk fault ledger: what was broken, where, and how to undo it.

Every fault is recorded BEFORE it acts and removed only after its revert has
been verified, so ``kdrill recover`` can still revert after a crash or
``kill -9``. One JSON file per entry, ``<id>.json``, each written atomically
(temp file in the same directory, fsync, rename, fsync of the directory) so a
crash leaves either the old or the new file, never half of one.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.core.files import fsync_dir, write_text_atomic

_KIND = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


def state_dir() -> Path:
    """kdrill's state directory: ``$KDRILL_STATE_DIR`` if set, else ``~/.local/state/kdrill``
    (the ledger, the signing key, drill clusters' keys)."""
    state = os.environ.get("KDRILL_STATE_DIR")
    return Path(state) if state else Path.home() / ".local" / "state" / "kdrill"


def default_ledger_dir() -> Path:
    """``<state dir>/ledger`` (:func:`state_dir`)."""
    return state_dir() / "ledger"


def write_json_atomic(path: Path, data: Any, mode: int = 0o644) -> Path:
    """Write ``data`` as pretty JSON (sorted keys) to ``path`` atomically.

    Creates the parent directory. Raises TypeError/ValueError if ``data`` is
    not JSON-serialisable (before anything is written), OSError on I/O errors.
    """
    text = json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text, mode)
    fsync_dir(path.parent)
    return path




@dataclass
class LedgerEntry:
    """One recorded fault.

    ``cluster``: e.g. ``{"provider": "kind", "name": "kdrill-ha", "kubeconfig": ..., "context": ...}``.
    ``target``: everything needed to revert. ``recorded_at``/``updated_at``/``injected_at``:
    epoch seconds; ``injected_at`` is set once the fault's inject returned (None: recorded, and
    perhaps partly injected, when the process stopped). ``path``/``corrupt``/``error`` describe the file and are not
    stored in it; a corrupt entry has ``corrupt=True``, ``error`` set, and
    whatever fields could not be read left empty.
    """

    id: str
    kind: str
    cluster: dict[str, Any]
    target: dict[str, Any]
    drill: str | None
    recorded_at: float
    pid: int | None
    host: str | None
    updated_at: float | None = None
    injected_at: float | None = None
    path: Path | None = field(default=None, compare=False)
    corrupt: bool = False
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The stored fields; corrupt entries also carry ``corrupt``, ``path`` and ``error``."""
        data = {"id": self.id, "kind": self.kind, "cluster": self.cluster, "target": self.target,
                "drill": self.drill, "recorded_at": self.recorded_at, "pid": self.pid,
                "host": self.host, "updated_at": self.updated_at, "injected_at": self.injected_at}
        if self.corrupt:
            data.update(corrupt=True, path=str(self.path) if self.path else None, error=self.error)
        return data

    @classmethod
    def from_dict(cls, data: Any, path: Path | None = None) -> LedgerEntry:
        """Raises ValueError if required fields are missing or of the wrong type."""
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        checks = {"id": str, "kind": str, "cluster": dict, "target": dict, "recorded_at": (int, float)}
        for key, kind in checks.items():
            if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
                raise ValueError(f"field {key!r} missing or of the wrong type: {data.get(key)!r}")
        return cls(id=data["id"], kind=data["kind"], cluster=data["cluster"], target=data["target"],
                   drill=data.get("drill"), recorded_at=float(data["recorded_at"]), pid=data.get("pid"),
                   host=data.get("host"), updated_at=data.get("updated_at"),
                   injected_at=data.get("injected_at"), path=path)


class Ledger:
    """The ledger directory (default: ``default_ledger_dir()``), created on first write."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_ledger_dir()

    def record(self, kind: str, cluster: dict[str, Any], target: dict[str, Any],
               drill: str | None = None) -> LedgerEntry:
        """Durably record a fault about to be injected; call before acting.

        Raises ValueError for a kind unusable in a file name, TypeError if
        ``cluster``/``target`` are not JSON-serialisable, OSError on I/O errors.
        """
        if not _KIND.match(kind):
            raise ValueError(f"ledger kind must match {_KIND.pattern}, got {kind!r}")
        now = time.time()
        stamp = datetime.fromtimestamp(now, timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        entry = LedgerEntry(id=f"{stamp}-{kind}-{secrets.token_hex(4)}", kind=kind, cluster=dict(cluster),
                            target=dict(target), drill=drill, recorded_at=now, pid=os.getpid(),
                            host=socket.gethostname())
        self._write(entry)
        return entry

    def get(self, entry_id: str) -> LedgerEntry:
        """Raises KeyError if there is no such entry, ValueError if its file is corrupt."""
        path = self._path(entry_id)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise KeyError(f"no ledger entry {entry_id!r} in {self.directory}") from None
        try:
            return LedgerEntry.from_dict(json.loads(text), path=path)
        except ValueError as exc:  # JSONDecodeError is a ValueError
            raise ValueError(f"corrupt ledger entry {path}: {exc}") from None

    def update(self, entry_id: str, **target_updates: Any) -> LedgerEntry:
        """Merge ``target_updates`` into the entry's target (e.g. the original
        spec captured during injection) and rewrite it atomically.

        Raises KeyError for a missing entry, ValueError for a corrupt one.
        """
        entry = self.get(entry_id)
        entry.target.update(target_updates)
        entry.updated_at = time.time()
        self._write(entry)
        return entry

    def mark_injected(self, entry_id: str, at: float | None = None) -> LedgerEntry:
        """Note that the fault's inject returned (``injected_at``, epoch seconds; default now).
        Raises KeyError for a missing entry, ValueError for a corrupt one."""
        entry = self.get(entry_id)
        entry.injected_at = time.time() if at is None else at
        self._write(entry)
        return entry

    def remove(self, entry_id: str) -> None:
        """Delete the entry (after a verified revert). A missing entry is fine."""
        self._path(entry_id).unlink(missing_ok=True)
        if self.directory.is_dir():
            fsync_dir(self.directory)

    def entries(self) -> list[LedgerEntry]:
        """All entries, oldest first. Unreadable files come back as entries with
        ``corrupt=True`` (timestamped by file mtime), never dropped."""
        if not self.directory.is_dir():
            return []
        found = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                found.append(LedgerEntry.from_dict(json.loads(path.read_text(encoding="utf-8")), path=path))
            except (OSError, ValueError, UnicodeDecodeError) as exc:
                found.append(_corrupt_entry(path, exc))
        return sorted(found, key=lambda e: (e.recorded_at, e.id))

    def _path(self, entry_id: str) -> Path:
        # Ids become file names: refuse anything that could escape the directory.
        if not entry_id or entry_id.startswith(".") or any(c in entry_id for c in "/\\\0"):
            raise ValueError(f"invalid ledger entry id {entry_id!r}")
        return self.directory / f"{entry_id}.json"

    def _write(self, entry: LedgerEntry) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        # 0600: entries name kubeconfig paths and node details.
        write_json_atomic(self._path(entry.id), entry.to_dict(), mode=0o600)
        entry.path = self._path(entry.id)


def _corrupt_entry(path: Path, exc: Exception) -> LedgerEntry:
    try:
        mtime = path.stat().st_mtime
    except OSError:
        mtime = 0.0
    return LedgerEntry(id=path.stem, kind="", cluster={}, target={}, drill=None, recorded_at=mtime,
                       pid=None, host=None, path=path, corrupt=True, error=f"{type(exc).__name__}: {exc}")


def owner_alive(entry: LedgerEntry) -> bool:
    """Whether the process that recorded ``entry`` still runs on this machine (then it reverts the
    entry itself, and recover leaves it alone)."""
    pid = getattr(entry, "pid", None)
    if not pid or getattr(entry, "host", None) != socket.gethostname() or pid == os.getpid():
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # A killed process nobody has reaped yet is a zombie: it reverts nothing.
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")
