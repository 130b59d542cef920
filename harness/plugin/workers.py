"""pytest-xdist (``-n N``, harness/core/workers.py): the controller hands each worker the run's id and
directory and keeps what each hands back; each worker drills a cluster of its own; the run is still
one run, merged and sealed by the controller at its end."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest

from harness.core import resources
from harness.core.workers import WorkerError, merge_worker_outputs, worker_id, worker_index
from harness.evidence.records import EvidenceWriter, RunIdError, record_stem, run_metadata
from harness.evidence.sealing import report_and_manifest
from harness.plugin.records import finish_allure_results, record_missing, record_not_run
from harness.plugin.session import reports_dir


class XdistController:
    """The kdrill side of a pytest-xdist controller (harness/core/workers.py): hands each worker the
    run's id and directory, keeps what each hands back at its end, and on Ctrl-C or SIGTERM waits
    for the workers to revert their faults before xdist tears them down."""

    def __init__(self, config: pytest.Config) -> None:
        self.config, self.drills_done = config, 0

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session):
        try:
            return (yield)
        except KeyboardInterrupt as exc:
            await_workers(session.config, exc)
            raise

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        config = node.config
        if getattr(config, "_kdrill_controller_run_dir", None) is None:
            try:  # made before any worker starts, so that each only writes into it
                writer = EvidenceWriter.for_new_run(reports_dir(config), config._kdrill_run_id)
            except (RunIdError, OSError) as exc:
                raise pytest.UsageError(f"kdrill: {exc}") from None
            meta = run_metadata(resources.checkout(), config._kdrill_run_id)
            meta["ticket"] = config.getoption("--kdrill-ticket")
            meta["approved_by"] = config.getoption("--kdrill-approved-by")
            config._kdrill_controller_meta = meta
            config._kdrill_controller_run_dir = writer.run_dir
            config._kdrill_worker_outputs = {}
        node.workerinput["kdrill_run_id"] = config._kdrill_run_id
        node.workerinput["kdrill_run_dir"] = str(config._kdrill_controller_run_dir)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A line when a worker's drill ends (xdist does not show the workers' own lines)."""
        properties = dict(report.user_properties or [])
        if (report.when != "teardown" or "kdrill.verdict" not in properties
                or self.config.pluginmanager.getplugin("dsession") is None):  # no workers: the drill said it
            return
        self.drills_done += 1
        worker = getattr(getattr(report, "node", None), "gateway", None)
        seconds = properties.get("kdrill.duration_seconds")
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"kdrill: [{getattr(worker, 'id', '?')}] {properties.get('kdrill.drill', report.nodeid)} "
                                f"{properties['kdrill.verdict']}"
                                + (f" in {float(seconds):.0f} s" if isinstance(seconds, (int, float)) else "")
                                + f" ({self.drills_done} drill(s) done)")

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        output = getattr(node, "workeroutput", None)
        outputs = node.config.__dict__.setdefault("_kdrill_worker_outputs", {})
        outputs[node.gateway.id] = (output or {}).get("kdrill") if isinstance(output, dict) else None


def worker_pids() -> list[int]:
    """This process's children: the pytest-xdist workers (local popen gateways). Linux /proc."""
    me, pids = os.getpid(), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[1]) == me:
            pids.append(int(stat.parent.name))
    return pids


def await_workers(config: pytest.Config, interrupt: BaseException) -> None:
    """After the controller's Ctrl-C or SIGTERM: xdist would tear the workers down at once, and
    execnet ends a worker still running 15 s later with ``os._exit``, in the middle of a revert.
    So: pass a SIGTERM on to the workers (Ctrl-C reached them itself, through the terminal's
    process group), then go on handling their events until every one has ended its session, its
    faults reverted and its records written. Another Ctrl-C meanwhile only says so."""
    dsession = config.pluginmanager.getplugin("dsession")
    if dsession is None:
        return
    if str(interrupt) == f"signal {int(signal.SIGTERM)}":  # harness.faults.raise_interrupt's
        for pid in worker_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("kdrill: interrupted; waiting for every worker to revert its fault and write its records")
    dsession.triggershutdown()  # no new case to any worker; each ends after the one it runs
    while not dsession.session_finished and dsession._active_nodes:
        try:
            dsession.loop_once()
        except KeyboardInterrupt:
            if reporter is not None:
                reporter.write_line("kdrill: still waiting for the workers to revert their faults")
        except RuntimeError:  # xdist: no active worker left
            break


def worker_problem(config: pytest.Config) -> str | None:
    """In a pytest-xdist worker, why it may not drill a cluster: it replaces a crashed worker
    (its cluster would be a new one, the crashed one's left behind), or ``--dist each`` would run
    every case on every cluster into the same records. None elsewhere."""
    worker = worker_id(config)
    if worker is None:
        return None
    try:
        index = worker_index(worker)
    except WorkerError as exc:
        return str(exc)
    count = config.workerinput.get("workercount")
    if isinstance(count, int) and index >= count:
        return (f"worker {worker} replaces a crashed worker; kdrill does not give it a new cluster (the crashed "
                "worker's is left as it was: `kdrill recover`, then `kdrill cluster delete --name ...`)")
    if config.getoption("dist", "no") == "each":
        return "--dist each would run every case on every cluster into the same records; use --dist worksteal or load"
    return None


def finish_worker(session: pytest.Session, exitstatus: int) -> None:
    """A pytest-xdist worker's end: an "error" record for each case whose setup failed here, then
    hand back to the controller the cases planned, those run here, and this worker's cluster as
    it read it (xdist's ``workeroutput``; plain JSON values)."""
    config = session.config
    planned = getattr(config, "_kdrill_planned", [])
    ran = [(item, name, case) for item, name, case in planned if getattr(item, "_kdrill_ran", False)]
    run_dir = getattr(config, "_kdrill_run_dir", None)
    if run_dir is not None:
        writer = EvidenceWriter(run_dir)
        record_missing(config, writer, ran, exitstatus)  # each of these started here
    meta = dict(getattr(config, "_kdrill_meta", None) or {})
    if getattr(config, "_kdrill_cluster_create_seconds", None) is not None:
        meta["cluster_create_seconds"] = config._kdrill_cluster_create_seconds
    handed = {"planned": [[name, case] for _, name, case in planned],
              "ran": [record_stem(name, case) for _, name, case in ran],
              "refused": getattr(config, "_kdrill_refused", None), "meta": meta}
    config.workeroutput["kdrill"] = json.loads(json.dumps(handed, default=str))


def finish_controller(session: pytest.Session, exitstatus: int) -> None:
    """The pytest-xdist controller's end, once every worker is down: run.json with each worker's
    cluster (harness.core.workers.merge_worker_outputs), a record for each planned case that left
    none, the report and the seal. A run that planned no drill (only tests that need no cluster
    ran) leaves no run directory."""
    config = session.config
    run_dir = config._kdrill_controller_run_dir
    outputs = getattr(config, "_kdrill_worker_outputs", {})
    planned_cases = []
    for out in outputs.values():
        for name, case in (out or {}).get("planned") or []:
            if [name, case] not in planned_cases:
                planned_cases.append([name, case])
    if not planned_cases and not any(run_dir.iterdir()):
        run_dir.rmdir()
        return
    merged = merge_worker_outputs({w: {**o, "planned": [record_stem(n, c) for n, c in o.get("planned") or []]}
                                   if isinstance(o, dict) else None for w, o in outputs.items()})
    meta = config._kdrill_controller_meta
    meta.update(planned=[record_stem(n, c) for n, c in planned_cases], workers=merged["workers"],
                platform=merged["platform"], finished_at=time.time())
    end = run_metadata(resources.checkout(), config._kdrill_run_id)
    meta["git_at_end"] = {"commit": end["git_commit"], "dirty": end["git_dirty"]}
    writer = EvidenceWriter(run_dir)
    writer.write_run_metadata(meta)
    # A case no worker left a record for did not run: say which workers refused, and why.
    refusals = "; ".join(f"{w} refused: {o['refused']}" for w, o in sorted(outputs.items())
                         if isinstance(o, dict) and o.get("refused"))
    for name, case in planned_cases:
        if not (run_dir / f"{record_stem(name, case)}.json").exists():
            record_not_run(config, writer, name, case, "not-run",
                           f"not run: no worker ran it (pytest exit status {int(exitstatus)})"
                           + (f"; {refusals}" if refusals else ""))
    finish_allure_results(config, run_dir)
    report_and_manifest(run_dir)
