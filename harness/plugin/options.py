"""kdrill's pytest options (group "kdrill") and the session's configuration: its markers, its
settings refused before any cluster is touched, and its run id (a pytest-xdist worker's is its
controller's)."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from harness.core.workers import worker_id
from harness.evidence.records import RunIdError, new_run_id, validate_run_id
from harness.faults import raise_interrupt
from harness.kube.providers.kind import cluster_name_problem
from harness.kube.workloads import toolbox_problem
from harness.plugin.tiers import DEFAULT_TIER, TIERS
from harness.plugin.workers import XdistController
from harness.probes.alerts import source_problem


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kdrill", "kdrill failure drills")
    group.addoption("--kdrill-cluster-config", default=os.environ.get("KDRILL_CLUSTER_CONFIG", "ha"))
    group.addoption("--kdrill-cluster-name", default=os.environ.get("KDRILL_CLUSTER_NAME"))
    group.addoption("--kdrill-platform", default=os.environ.get("KDRILL_PLATFORM"),
                    help="a platform profile directory built into the kind cluster (harness/platform/profile.py)")
    group.addoption("--kdrill-keep-cluster", action="store_true",
                    default=os.environ.get("KDRILL_KEEP_CLUSTER") == "1")
    group.addoption("--kdrill-kubeconfig", default=None)
    group.addoption("--kdrill-context", action="append", default=[],
                    help="context in that kubeconfig (default: current); with -n N, one per worker")
    group.addoption("--kdrill-allow-context", action="append", default=[])
    group.addoption("--kdrill-node-agent", action="store_true", default=False,
                    help="on an existing cluster, reach the nodes through privileged agent pods")
    group.addoption("--kdrill-scenario", action="append", default=[])
    # Both directories' defaults are looked up when used (session.reports_dir, scenarios_dir), not
    # here: this hook runs in every pytest session of an environment where kdrill is installed.
    group.addoption("--kdrill-reports", default=os.environ.get("KDRILL_REPORTS"))
    group.addoption("--kdrill-run-id", default=os.environ.get("KDRILL_RUN_ID"))
    group.addoption("--kdrill-ticket", default=os.environ.get("KDRILL_TICKET"),
                    help="the change or incident ticket this run belongs to (recorded in the evidence)")
    group.addoption("--kdrill-approved-by", default=os.environ.get("KDRILL_APPROVED_BY"),
                    help="who approved breaking this cluster for the drills (recorded in the evidence)")
    group.addoption("--kdrill-scenarios-dir", default=None,
                    help="where drills find their scenario files (default: kdrill's built-in scenarios)")
    group.addoption("--kdrill-prometheus", default=os.environ.get("KDRILL_PROMETHEUS"),
                    help="read detection (each drill's alerts) from this Prometheus, read only "
                         "(default: a platform profile's own, if it names one; harness/plugin/detection.py)")
    group.addoption("--kdrill-prometheus-token-file", default=os.environ.get("KDRILL_PROMETHEUS_TOKEN_FILE"),
                    help="a file holding the bearer token for --kdrill-prometheus (or $KDRILL_PROMETHEUS_TOKEN)")
    group.addoption("--kdrill-alertmanager", default=os.environ.get("KDRILL_ALERTMANAGER"),
                    help="watch this Alertmanager during each drill with expected alerts, read only (default: a "
                         "platform profile's own, if it names one; harness/probes/alertmanager.py)")
    group.addoption("--kdrill-alertmanager-token-file", default=os.environ.get("KDRILL_ALERTMANAGER_TOKEN_FILE"),
                    help="a file holding the bearer token for --kdrill-alertmanager (or $KDRILL_ALERTMANAGER_TOKEN)")
    group.addoption("--kdrill-tier", default=os.environ.get("KDRILL_TIER", DEFAULT_TIER), choices=TIERS,
                    help="presubmit (default): the representative drill set and one SIGKILL case per fault kind "
                         "(harness/plugin/tiers.py); full: every test and every drill of the catalogue. Named "
                         "scenarios (--kdrill-scenario) run whatever the tier")


def pytest_configure(config: pytest.Config) -> None:
    # SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C: faults revert in their finally blocks,
    # fixtures clean up, and every planned drill still gets its record and the run its seal.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, raise_interrupt)
    config._kdrill_pending_namespaces = []  # drill namespaces being deleted (cluster.settle_namespaces)
    problem = toolbox_problem(os.environ.get("KDRILL_TOOLBOX_IMAGE"), os.environ.get("KDRILL_TOOLBOX_PULL_POLICY"))
    if problem:  # refused before any cluster is touched
        raise pytest.UsageError(problem)
    _add_markers(config)
    if config.getoption("--kdrill-tier") not in TIERS:  # from KDRILL_TIER, which argparse does not check
        raise pytest.UsageError(f"--kdrill-tier / KDRILL_TIER: expected one of {', '.join(TIERS)}, "
                                f"got {config.getoption('--kdrill-tier')!r}")
    name = config.getoption("--kdrill-cluster-name")
    problem = cluster_name_problem(name) if name is not None else None
    if problem:  # refused before any cluster is touched, not by kind after the images are built
        raise pytest.UsageError(f"--kdrill-cluster-name / KDRILL_CLUSTER_NAME: {problem}")
    for of in ("prometheus", "alertmanager"):
        url = config.getoption(f"--kdrill-{of}")
        if url is not None and source_problem(url):  # refused before any cluster is touched
            raise pytest.UsageError(f"--kdrill-{of} / KDRILL_{of.upper()}: expected {source_problem(url)}, "
                                    f"got {url[:200]!r}")
    if worker_id(config) is not None:  # a pytest-xdist worker: the controller's run (harness/core/workers.py)
        config._kdrill_run_id = config.workerinput["kdrill_run_id"]
        return
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistController(config), "kdrill-xdist-controller")
    given = config.getoption("--kdrill-run-id")
    # An empty id (e.g. an unset variable) is a mistake to refuse, not a request for a new one;
    # refused here, before any cluster is touched.
    try:
        config._kdrill_run_id = new_run_id() if given is None else validate_run_id(given)
    except RunIdError as exc:
        raise pytest.UsageError(f"--kdrill-run-id / KDRILL_RUN_ID: {exc}") from None


def _add_markers(config: pytest.Config) -> None:
    """The markers of kdrill's drills and tests."""
    config.addinivalue_line("markers", "scenario(name): the scenario a drill test runs")
    # The drills' markers, as pyproject.toml declares them for the checkout's own test runs: an
    # installed kdrill runs its drills with no ini file of its own.
    for line in ("cluster: needs a real kind cluster (created or reused by the kdrill plugin)",
                 "destructive: injects a fault into the cluster",
                 "node_access: needs the node containers (kind), skipped on an existing cluster"):
        config.addinivalue_line("markers", line)
    config.addinivalue_line("markers", "data_scenarios: the test runs every data-only scenario (harness/engine/runner.py)")
    config.addinivalue_line("markers", "full: runs in the full tier only (--kdrill-tier full), not in presubmit")


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, str] | None:
    """A passed case prints no progress letter in ``kdrill run``'s pytest (``-qq`` and a run id): its
    verdict is in the run's own summary, and the drill's lines are on the terminal (``-s``), so a
    lone ``.`` after them reads as noise. Failures, errors and skips keep theirs."""
    if report.when == "call" and report.passed and config.get_verbosity() < -1 \
            and config.getoption("--kdrill-run-id"):
        return "passed", "", ""
    return None
