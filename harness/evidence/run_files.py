"""A run directory's entries as the seal sees them: listed without following links, hashed in
chunks, read without following links, and created whole without ever replacing a file.

Paths in a listing are POSIX paths relative to the run directory; sizes are bytes.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from harness.core.files import fsync_dir
from harness.evidence.layout import SEAL_FILES

_CHUNK_BYTES = 1024 * 1024


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


def scan_entries(run_dir: Path) -> tuple[dict[str, str], dict[str, str]]:
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
        if not prefix and entry.name in SEAL_FILES:
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




def read_no_link(path: Path) -> bytes:
    """``path``'s bytes; OSError (ELOOP) when it is a symbolic link, even one made after a check.
    Never blocks on a FIFO put in its place (it reads as empty)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as stream:
        return stream.read()


def link_target(path: Path) -> str:
    """Where the symbolic link ``path`` points, or why that cannot be read (never raises)."""
    try:
        return os.readlink(path)
    except OSError as exc:
        return f"<unreadable: {exc.strerror or exc}>"


def create_exclusive(path: Path, data: bytes, mode: int) -> None:
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

