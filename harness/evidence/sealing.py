"""Sealing a finished run: its report and OpenMetrics file rendered, then a signed manifest of
everything in it (harness.evidence.manifest), then its head exported to ``$KDRILL_HEAD_LOG``
(harness/evidence/heads.py). ``kdrill run`` and the pytest plugin both seal here."""

from __future__ import annotations

import hashlib
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

from harness.evidence import failure_matrix, manifest, openmetrics, report
from harness.evidence.heads import HEAD_LOG_ENV, append_head, head_line
from harness.evidence.manifest import ManifestError, is_sealed, previous_run, seal_run, verify_run
from harness.evidence.records import RunIdError, validate_run_id
from harness.evidence.strict_json import loads as strict_loads


def report_and_manifest(run_dir: Path) -> bool:
    """Seal a finished run: render report.html, then sign a manifest of everything in the run.

    The sealing point: ``kdrill run`` and the pytest plugin call this when a run ends. The report
    is rendered first, showing the seal it is about to get, so the manifest covers it; if it
    cannot be rendered the run is sealed all the same, with the error in the manifest. The
    manifest links the most recently sealed run in the same reports directory
    (harness.evidence.manifest). A run is sealed once: when it already is (inside ``kdrill run`` the
    plugin seals it first), the seal is verified and nothing is written, so an edit made since
    is never laundered into a new seal. Returns whether report.html exists.

    Raises SystemExit with one line (and the problems) when the directory's name is not a valid
    run id, the sealed run no longer verifies, the signer cannot be loaded, sealing fails, or
    the head cannot be appended to ``$KDRILL_HEAD_LOG``."""
    run_dir = Path(run_dir)
    try:
        validate_run_id(run_dir.name)
    except RunIdError as exc:
        raise SystemExit(f"kdrill: not sealing {run_dir}: {exc}") from None
    if is_sealed(run_dir):
        result = verify_run(run_dir)
        if not result.ok:
            raise SystemExit(f"kdrill: {run_dir} was sealed and no longer matches its seal; it is not sealed "
                             "again:\n" + "\n".join(f"  {p}" for p in result.problems))
        return (run_dir / report.REPORT_NAME).is_file()
    try:
        signer = manifest.load_signer()
    except ManifestError as exc:
        raise SystemExit(f"kdrill: cannot seal {run_dir}: {exc}") from None
    previous = previous_run(run_dir.parent, run_dir.name)
    now = datetime.now(tz=timezone.utc)  # the page's time, kept in the manifest: re-rendering reproduces it
    seal = {"public_key": signer.public.pem, "fingerprint_sha256": signer.public.fingerprint,
            "previous": previous.to_dict() if previous else None, "custody": signer.custody}
    error = _render_views(run_dir, seal, now)
    try:
        path = seal_run(run_dir, signer, previous=previous, report_error=error, report_rendered_at=now)
    except (ManifestError, OSError) as exc:
        raise SystemExit(f"kdrill: {run_dir} was NOT sealed: {exc}") from None
    export_head(run_dir.name, path.read_bytes())
    return error is None


def export_head(run_id: str, manifest_bytes: bytes) -> None:
    """Appends the run's head to ``$KDRILL_HEAD_LOG`` when it is set (not empty). Raises
    SystemExit naming the file when it cannot be written: the run is sealed, but a head that
    should be kept elsewhere and is not would leave its deletion unseen."""
    target = os.environ.get(HEAD_LOG_ENV)
    if not target:
        return
    data = strict_loads(manifest_bytes)
    signer = data.get("signer") or {}
    line = head_line(run_id, hashlib.sha256(manifest_bytes).hexdigest(), str(data.get("sealed_at")),
                     str(signer.get("fingerprint_sha256")))
    try:
        append_head(Path(target), line)
    except OSError as exc:
        raise SystemExit(f"kdrill: {run_id} is sealed, but its head was NOT appended to {HEAD_LOG_ENV}={target}: "
                         f"{exc.strerror or exc}; append this line there yourself: {line.strip()}") from None


def _render_views(run_dir: Path, seal: dict, now: datetime) -> str | None:
    """The OpenMetrics file and report.html, written into the run before it is sealed; returns
    why the report could not be rendered ("Type: message"), or None. Never raises: the run is
    sealed whether or not its views render (each failure is said on stderr)."""
    try:
        # The measurements for Prometheus/Grafana, sealed with the records they come from.
        openmetrics.write(run_dir)
    except Exception as exc:  # noqa: BLE001 - a view of the records; the records are the evidence
        print(f"kdrill: {run_dir.name}: OpenMetrics file not written: {type(exc).__name__}: {exc}", file=sys.stderr)
    try:
        # Failure, impact, detection, mitigation and recovery of each drill, as CSV and JSON.
        failure_matrix.write(run_dir)
    except Exception as exc:  # noqa: BLE001 - a view of the records, as the OpenMetrics file
        print(f"kdrill: {run_dir.name}: failure matrix not written: {type(exc).__name__}: {exc}", file=sys.stderr)
    try:
        report.build_report(run_dir, seal=seal, generated_at=now)
    except Exception as exc:  # noqa: BLE001 - the evidence is sealed whether or not its page renders
        error = f"{type(exc).__name__}: {exc}"
        print(f"kdrill: report not written: {error}", file=sys.stderr)
        return error
    return None
