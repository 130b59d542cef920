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

#: Who held the signing key, as the manifest's ``signer.custody`` says: a key file the runner
#: read (the local key, or ``$KDRILL_SIGNING_KEY``), or an external signer (``$KDRILL_SIGNER``).
#: A manifest without it was sealed by a kdrill that had only the local key.
LOCAL_KEY = "local-key"
EXTERNAL_SIGNER = "external-signer"
CUSTODIES = (LOCAL_KEY, EXTERNAL_SIGNER)
#: What the evidence says of a run sealed with a key the runner held.
NOT_FOR_AUDIT = "signed by a local key: not for audit"

#: How long after the run's end (its latest ``finished_at``) a seal may come, in seconds: the
#: report and the OpenMetrics file are rendered in between. A later seal was made again afterwards.
SEAL_DELAY_LIMIT_SECONDS = 300.0
#: How much earlier than the run's end a seal may be dated (one host clock, read by several processes).
SEAL_CLOCK_SLACK_SECONDS = 5.0


class ManifestError(Exception):
    """A manifest cannot be written, or a directory cannot be examined."""


def utc_now_iso(when: datetime | None = None) -> str:
    """``when`` (default now) as UTC ISO-8601 with microseconds, e.g. ``2025-01-01T12:00:00.000000Z``."""
    stamp = (when or datetime.now(tz=timezone.utc)).astimezone(timezone.utc)
    # Fixed width (microseconds always present), so sealed_at strings sort in time order.
    return stamp.isoformat(timespec="microseconds").replace("+00:00", "Z")


def iso_epoch(text: str) -> float:
    """Epoch seconds of a time as :func:`utc_now_iso` writes it. Raises ValueError for any other text."""
    if not SEALED_AT.fullmatch(text):
        raise ValueError(f"{text[:40]!r} is not a UTC time as kdrill writes it (YYYY-MM-DDTHH:MM:SS.ffffffZ)")
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()


@dataclass(frozen=True)
class ChainLink:
    """A sealed run as a later manifest names it: its run id and its manifest's SHA-256 (hex)."""

    run_id: str
    manifest_sha256: str

    def to_dict(self) -> dict[str, str]:
        return {"run_id": self.run_id, "manifest_sha256": self.manifest_sha256}
