"""Evidence files are written whole or not at all: write a temporary file beside the target,
flush it to disk, then rename it over the target (an atomic replace on one filesystem). A file a
user names (a key, a head log) is read bounded, and only when it is a regular file."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path


def write_text_atomic(path: Path, text: str, mode: int = 0o644) -> Path:
    """Replace ``path`` with ``text`` (UTF-8) atomically; returns ``path``. Raises OSError."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def fsync_dir(directory: Path) -> None:
    """fsync ``directory`` itself; never raises (some platforms cannot open directories)."""
    # A rename is only durable once the directory entry itself is on disk.
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # platforms that cannot open directories
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_regular_file(path: str | Path, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes``. Raises OSError (its strerror
    says why) for a file that cannot be read, is not a regular file (a FIFO would block, a device
    such as /dev/zero never ends) or holds more than ``max_bytes``."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens without waiting for a writer
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise OSError(errno.EFBIG, f"larger than {max_bytes} bytes", str(path))
    return data
