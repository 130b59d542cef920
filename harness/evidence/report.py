"""Self-contained HTML audit report for one kdrill run.

``build_report(run_dir)`` reads the evidence a run left in ``reports/<run-id>/``
(``run.json``, one JSON record per drill case and each record's
``<stem>.timeline.json``) and writes ``<run_dir>/report.html``: one file with
inline CSS and inline SVG charts, no scripts and no external resources, so it
opens offline and can be archived with the evidence.

The report is rendered at the end of a run, before the run is sealed, so the
manifest covers it; the seal it will get (signer key, previous run) is passed
in and shown. Rendering is a pure function of the evidence, the seal and
``generated_at``, so a sealed report can be re-rendered byte for byte
(``kdrill report``). A top-level ``*.json`` that should be a drill record but
does not parse as one is never left out: it is listed as an unreadable record
with verdict "error" and counted in the headline.

All times in the evidence are epoch seconds; the report shows absolute times as
UTC ISO-8601 and chart/expectation times as seconds relative to the drill's
``started_at``.

The page's HTML is in Jinja2 templates, harness/templates/report.html.j2 and the
``report_*.html.j2`` it imports (``report.css.j2`` is its stylesheet), rendered
with autoescape on. The evidence is read and checked by harness/evidence/reading.py;
what each section shows is computed as plain values by report_run.py (the run),
report_drill.py and report_tables.py (each drill), report_vitals.py (its vital
signs) and report_format.py (how values are written), and the templates escape
every value taken from the evidence. The one piece of markup built outside the
templates is each probe's chart, inline SVG drawn by report_chart.py's
:func:`timeline_svg` from numbers and text it escapes itself (markupsafe), handed
to the templates as ``Markup``. This module renders the page.

Each drill's bounds are checked against a scenario the record does not hold
(harness/evidence/reference_bounds.py: the one at the run's git commit, else the one shipped with
this kdrill); a difference is shown on the drill and counted in the headline.

Besides its verdict, each drill shows its vital signs (``record["vital_signs"]``,
harness/engine/vitals.py) in a "What else broke" panel: a sign that degraded with no
expectation about it is FLAGGED there, at the top of the drill's section, in the
verdicts summary and in the page's headline, so a passed verdict cannot hide it.
Every injection window of ``record["observations"]["injections"]`` is a row of
the drill's injections-and-reverts table.
"""

from __future__ import annotations

import functools
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from harness import __version__
from harness.core.files import write_text_atomic
from harness.evidence.reading import (
    ReportError,
    RunEvidence,
    checked_verdict,
    expectation_problem,
    load_drill_records,
    load_run,
    scan_records,
)
from harness.evidence.report_chart import MAX_MARKS, timeline_svg
from harness.evidence.report_claims import claims_view
from harness.evidence.report_detection import matrix_view
from harness.evidence.report_drill import drill_view, unreadable_view
from harness.evidence.report_format import TABLE_MAX_ROWS, utc_text, verdict_class
from harness.evidence.report_run import cluster_view, run_id_of, run_view, seal_view, summary_view

__all__ = [
    "REPORT_NAME",
    "MAX_MARKS",
    "TABLE_MAX_ROWS",
    "ReportError",
    "build_report",
    "render_report",
    "load_drill_records",
    "scan_records",
    "checked_verdict",
    "expectation_problem",
    "timeline_svg",
]

REPORT_NAME = "report.html"

# The loaded run and its Run section under the names tests/unit/platform/test_platform_profile.py imports from here.
_Run = RunEvidence
_run_view = run_view


@functools.lru_cache(maxsize=1)
def _environment() -> Environment:
    """The templates of harness/templates/report*.j2, autoescaped (every ``*.j2`` and ``*.html``)."""
    env = Environment(loader=PackageLoader("harness", "templates"), autoescape=select_autoescape(["html", "j2"]),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["verdict_class"] = verdict_class
    return env


def render_report(run_dir: Path, *, seal: Mapping[str, Any] | None = None,
                  generated_at: datetime | None = None) -> str:
    """The HTML page for the run in ``run_dir`` (a ``reports/<run-id>/`` directory), as text.

    ``seal`` describes the seal the run gets right after rendering:
    ``{"public_key": PEM str, "fingerprint_sha256": hex str, "previous": {"run_id": str,
    "manifest_sha256": hex str} | None}`` (None: rendered outside a sealed run).
    ``generated_at`` (default now, UTC) is the time shown; with the same evidence, seal,
    time and kdrill version the page is the same bytes. Raises ``ReportError`` if ``run_dir``
    is not a directory or holds neither ``run.json`` nor any drill record slot.
    """
    run_dir = Path(run_dir)
    run = load_run(run_dir)
    records = run.records
    when = generated_at or datetime.now(tz=timezone.utc)
    drills = [drill_view(run_dir, path, record, git_commit=run.meta.get("git_commit")) for path, record in records]
    view = run_view(run)
    modified = sum(1 for d in drills if d["bounds"]["differences"])
    if modified:
        # A bound unlike the scenario's outside the record is said where the verdicts are.
        view["headline"].append({"cls": "badge-flagged headline-bounds",
                                 "text": f"{modified} with bounds unlike their reference scenario"})
    return _environment().get_template("report.html.j2").render(
        kdrill_version=__version__,
        run_id=run_id_of(run),
        run=view,
        seal=seal_view(seal),
        cluster=cluster_view(records),
        summary=summary_view(records, run.unreadable),
        claims=claims_view(records),
        matrix=matrix_view(records),
        drills=drills,
        unreadable=[unreadable_view(path, reason) for path, reason in run.unreadable],
        generated_at=utc_text(when.timestamp()),
    )


def build_report(run_dir: Path, *, seal: Mapping[str, Any] | None = None,
                 generated_at: datetime | None = None) -> Path:
    """Writes :func:`render_report`'s page to ``<run_dir>/report.html``; returns its path.

    The file is written atomically (temporary file then rename) and is fully
    self-contained. Raises ``ReportError`` as ``render_report`` does, OSError
    when the file cannot be written.
    """
    page = render_report(run_dir, seal=seal, generated_at=generated_at)
    return write_text_atomic(Path(run_dir) / REPORT_NAME, page)
