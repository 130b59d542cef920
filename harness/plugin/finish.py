"""The session's end: every planned drill case that left no record gets one that says why, then
the run's report and seal (a pytest-xdist controller's and worker's ends are in
harness/plugin/workers.py); and a cluster created early that no test took is deleted."""

from __future__ import annotations

import logging
import time

import pytest

from harness.core import resources
from harness.core.workers import worker_id
from harness.evidence.records import EvidenceWriter, RunIdError, run_metadata
from harness.evidence.sealing import report_and_manifest
from harness.plugin.early_cluster import drop_unused_early_cluster
from harness.plugin.records import finish_allure_results, record_missing
from harness.plugin.session import reports_dir
from harness.plugin.workers import finish_controller, finish_worker

log = logging.getLogger("kdrill.plugin")


# trylast: after pytest's own session teardown (run by its runner plugin's sessionfinish), so an
# interrupted drill's fixture has written its record before the run is sealed.
@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Drills were planned: give every planned case that left no record one that says why
    ("error" when its setup failed, "not-run" when the session ended first), then write the HTML
    report and seal the run (pytest's JUnit XML is on disk by then)."""
    config = session.config
    if config.option.collectonly:  # a listing, not a run: nothing was planned to run, no evidence
        return
    if worker_id(config) is not None:
        finish_worker(session, exitstatus)
        return
    if getattr(config, "_kdrill_controller_run_dir", None) is not None:
        finish_controller(session, exitstatus)
        return
    planned = getattr(config, "_kdrill_planned", [])
    run_dir = getattr(config, "_kdrill_run_dir", None)
    if not planned and run_dir is None:
        return
    if run_dir is None:  # nothing started (e.g. the cluster could not be made): the run still has its records
        try:
            writer = EvidenceWriter.for_new_run(reports_dir(config), config._kdrill_run_id)
        except RunIdError as exc:
            log.warning("no evidence written: %s", exc)
            return
        meta = run_metadata(resources.checkout(), config._kdrill_run_id)
        meta["planned"] = getattr(config, "_kdrill_planned_names", [])
        meta["finished_at"] = time.time()
        writer.write_run_metadata(meta)
        run_dir = writer.run_dir
    else:
        writer = EvidenceWriter(run_dir)
    record_missing(config, writer, planned, exitstatus)
    finish_allure_results(config, run_dir)
    report_and_manifest(run_dir)


def pytest_unconfigure(config: pytest.Config) -> None:
    # After the evidence is written and sealed (pytest_sessionfinish), whatever happens here.
    drop_unused_early_cluster(config)
