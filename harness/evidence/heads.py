"""The head of the chain of runs, kept outside the reports directory.

Each sealed run links the one sealed before it, so deleting an earlier run breaks a link; deleting
the *latest* runs breaks none, and a whole directory sealed again with the same key is a chain of
its own. What tells them apart is the head (run id, manifest SHA-256) written down somewhere the
runner cannot rewrite. After each seal kdrill appends it to ``$KDRILL_HEAD_LOG`` (a file the team
keeps elsewhere: append-only, ``chattr +a``, or on a share the runner may only append to), one
JSON object a line::

    {"run_id": str, "manifest_sha256": "<hex>", "sealed_at": "<UTC ISO-8601, µs>Z",
     "signer_sha256": "<hex>"}

``kdrill verify --history --head HEAD`` checks a reports directory against such a file, or against
one head written ``RUN_ID:MANIFEST_SHA256`` (what ``kdrill verify --history`` prints).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from harness.core.files import read_regular_file
from harness.evidence.layout import is_run_id
from harness.evidence.strict_json import loads as strict_loads

HEAD_LOG_ENV = "KDRILL_HEAD_LOG"
HEAD_LOG_MAX_BYTES = 64 * 1024 * 1024  # a line of about 150 bytes a run: hundreds of thousands of runs
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_LITERAL = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]{0,99}):([0-9a-f]{64})$")


class HeadError(ValueError):
    """A head cannot be read: the message names the file and line, what was expected and what was there."""


@dataclass(frozen=True)
class Head:
    """One head kept elsewhere: a run id, its manifest's SHA-256 (hex), and where it was read
    (``FILE:LINE`` or ``--head``)."""

    run_id: str
    manifest_sha256: str
    where: str


def head_line(run_id: str, manifest_sha256: str, sealed_at: str, signer_sha256: str) -> str:
    """The head log's line for a sealed run (JSON, newline-terminated)."""
    return json.dumps({"run_id": run_id, "manifest_sha256": manifest_sha256, "sealed_at": sealed_at,
                       "signer_sha256": signer_sha256}, sort_keys=True) + "\n"


def append_head(path: Path, line: str) -> None:
    """Appends ``line`` to ``path`` (created with mode 0644 if absent), never truncating it, and
    syncs it to disk. Raises OSError when it cannot be written (an append-only file accepts this)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def read_heads(value: str) -> list[Head]:
    """The heads ``value`` names: one written ``RUN_ID:MANIFEST_SHA256``, else every line of the
    head log file ``value``, oldest first. Raises HeadError naming the file, the line, what was
    expected and what was there (a file that cannot be read, holds no head, or a line that is
    not a head object)."""
    literal = _LITERAL.fullmatch(value.strip())
    if literal:
        return [Head(literal.group(1), literal.group(2), "--head")]
    path = Path(value)
    try:
        text = read_regular_file(path, HEAD_LOG_MAX_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise HeadError(f"--head {value}: expected RUN_ID:MANIFEST_SHA256 or a head log file, got a file that cannot "
                        f"be read ({why})") from None
    heads = [_head(path, number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not heads:
        raise HeadError(f"{path}: expected one head a line ({HEAD_LOG_ENV}'s format), got no head")
    return heads


def _head(path: Path, number: int, line: str) -> Head:
    """The head on line ``number`` of ``path``. Raises HeadError naming them."""
    where = f"{path}:{number}"
    try:
        data = strict_loads(line)
    except (ValueError, RecursionError) as exc:
        raise HeadError(f"{where}: expected a JSON object with run_id and manifest_sha256, got {line[:80]!r} "
                        f"({exc})") from None
    run_id = data.get("run_id") if isinstance(data, dict) else None
    digest = data.get("manifest_sha256") if isinstance(data, dict) else None
    if not (isinstance(run_id, str) and is_run_id(run_id)):
        raise HeadError(f"{where}: run_id: expected a run id, got {str(run_id)[:80]!r}")
    if not (isinstance(digest, str) and _HEX64.fullmatch(digest)):
        raise HeadError(f"{where}: manifest_sha256: expected 64 lowercase hex digits, got {str(digest)[:80]!r}")
    return Head(run_id, digest, where)
