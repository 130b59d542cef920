"""What a manifest records beyond its files: its format, its time of sealing, the previous run
it links to (the chain), and the error raised when a manifest cannot be written or checked.

Shared by the sealing (harness/evidence/manifest.py) and the verifying
(harness/evidence/verification.py) sides, so neither imports the other's internals.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone

FORMAT = "kdrill-manifest/2"
ALGORITHM = "sha256"
SEALED_AT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")  # what utc_now_iso writes


class ManifestError(Exception):
    """A manifest cannot be written, or a directory cannot be examined."""


def utc_now_iso(when: datetime | None = None) -> str:
    """``when`` (default now) as UTC ISO-8601 with microseconds, e.g. ``2025-01-01T12:00:00.000000Z``."""
    stamp = (when or datetime.now(tz=timezone.utc)).astimezone(timezone.utc)
    # Fixed width (microseconds always present), so sealed_at strings sort in time order.
    return stamp.isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class ChainLink:
    """A sealed run as a later manifest names it: its run id and its manifest's SHA-256 (hex)."""

    run_id: str
    manifest_sha256: str

    def to_dict(self) -> dict[str, str]:
        return {"run_id": self.run_id, "manifest_sha256": self.manifest_sha256}
