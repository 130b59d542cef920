"""The run's evidence directory (the ``kdrill_run`` fixture), what each case's reports leave on its
item, and the records of planned cases that did not run to their end."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from harness.core import resources
from harness.core.workers import worker_id
from harness.evidence import allure_results
from harness.evidence.manifest import previous_run, verify_run
from harness.evidence.records import DrillRecord, EvidenceWriter, RunIdError, record_stem, run_metadata
from harness.plugin.session import end_session, reports_dir, session_scenario

log = logging.getLogger("kdrill.plugin")


@pytest.fixture(scope="session")
def kdrill_run(request: pytest.FixtureRequest):
    """The run's id, evidence directory and writer; run.json is written at start and end."""
    run_id = request.config._kdrill_run_id
    worker = worker_id(request.config)
    try:
        # A new run's directory, never an earlier run's (kdrill run made it empty for us); a
        # pytest-xdist worker writes into the one its controller made (harness/core/workers.py).
        writer = (EvidenceWriter(Path(request.config.workerinput["kdrill_run_dir"])) if worker
                  else EvidenceWriter.for_new_run(reports_dir(request.config), run_id))
    except RunIdError as exc:
        end_session(request.config, f"kdrill: {exc}")
    run_dir = writer.run_dir
    meta = run_metadata(resources.checkout(), run_id)
    meta["planned"] = getattr(request.config, "_kdrill_planned_names", [])
    meta["ticket"] = request.config.getoption("--kdrill-ticket")
    meta["approved_by"] = request.config.getoption("--kdrill-approved-by")
    request.config._kdrill_run_dir = run_dir
    request.config._kdrill_meta = meta
    if worker:  # the controller writes run.json, with what each worker hands back at its end
        yield {"run_id": run_id, "run_dir": run_dir, "writer": writer, "meta": meta}
        meta["finished_at"] = time.time()
        return
    writer.write_run_metadata(meta)
    yield {"run_id": run_id, "run_dir": run_dir, "writer": writer, "meta": meta}
    meta["finished_at"] = time.time()
    # Scenarios are read once, but drills' code is not: say if the tree changed during the run.
    end = run_metadata(resources.checkout(), run_id)
    meta["git_at_end"] = {"commit": end["git_commit"], "dirty": end["git_dirty"]}
    writer.write_run_metadata(meta)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.when == "setup":
        item._kdrill_ran = True  # in this process (a pytest-xdist worker runs only its share)
    if report.when == "setup" and report.failed:
        item._kdrill_setup_error = report.longreprtext
    if report.when == "call":
        item._kdrill_call_report = report
        if call.excinfo is not None:
            item._kdrill_call_excinfo = call.excinfo.value
    return report


def record_not_run(config: pytest.Config, writer: EvidenceWriter, scenario_name: str, case: str | None,
                   verdict: str, reason: str) -> None:
    """A record for a planned drill case that did not run to its end: ``verdict`` is "skipped",
    "refused", "error" or "not-run", ``reason`` says why (the record's ``errors``)."""
    try:
        scenario = session_scenario(config, scenario_name)
        record = DrillRecord.for_scenario(writer.run_dir.name, scenario, case)
    except Exception as exc:  # the record is written even when the scenario cannot be read
        record = DrillRecord(run_id=writer.run_dir.name, drill=scenario_name, case=case, started_at=time.time())
        reason = f"{reason}\nscenario not readable: {exc}"
    record.verdict = verdict
    # The head says what happened, the tail of a traceback where: keep both.
    record.errors.append(reason if len(reason) <= 2000 else f"{reason[:300]} [...] {reason[-1600:]}")
    record.finish()
    writer.write_record(record)


def record_missing(config: pytest.Config, writer: EvidenceWriter, planned, exitstatus: int) -> None:
    """A record for every planned (item or None, scenario, case) that left none: "refused",
    "error" (its setup failed) or "not-run"."""
    run_dir = writer.run_dir
    for item, scenario_name, case in planned:
        stem = record_stem(scenario_name, case)
        if (run_dir / f"{stem}.json").exists():
            continue
        setup_error = getattr(item, "_kdrill_setup_error", None)
        refused = getattr(config, "_kdrill_refused", None)
        if refused:
            record_not_run(config, writer, scenario_name, case, "refused", f"refused: {refused}")
        elif setup_error:
            last = next((line for line in reversed(setup_error.splitlines()) if line.strip()), "")
            record_not_run(config, writer, scenario_name, case, "error", f"setup failed: {last}\n{setup_error}")
        else:
            record_not_run(config, writer, scenario_name, case, "not-run",
                           f"not run: the session ended first (pytest exit status {int(exitstatus)})")


def finish_allure_results(config: pytest.Config, run_dir: Path) -> None:
    """Environment, categories and history beside allure-pytest's results (harness/evidence/allure_results.py),
    when the run writes them (``--alluredir``); sealed with the run. Never raises."""
    alluredir = getattr(config.option, "allure_report_dir", None)
    if not alluredir:
        return
    try:
        meta = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
        previous = previous_run(run_dir.parent, run_dir.name)
        previous_dir = run_dir.parent / previous.run_id if previous else None
        if previous_dir is not None and not verify_run(previous_dir).ok:
            log.warning("Allure history not carried from %s: it does not verify", previous_dir.name)
            previous_dir = None
        allure_results.finish(Path(alluredir), meta if isinstance(meta, dict) else {}, previous_dir)
    except Exception as exc:  # a view for Allure; the records are the evidence
        log.warning("Allure environment/categories/history not written: %s", exc)
