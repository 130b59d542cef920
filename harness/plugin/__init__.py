"""kdrill's pytest plugin: the cluster, the run's evidence directory and the ``drill`` fixture.

Options (``pytest --help``, group "kdrill"):
  --kdrill-cluster-config NAME   kind config clusters/NAME.yaml (default: ha)
  --kdrill-cluster-name NAME     kind cluster name (default: the config's name); reused if it exists
  --kdrill-keep-cluster          keep a cluster this session created (default: delete it at the end)
  --kdrill-kubeconfig PATH       use an existing cluster instead of kind (no node access)
  --kdrill-context NAME          context in that kubeconfig (default: current); with -n N, one per
                                 worker (repeatable)
  --kdrill-node-agent            on that cluster, reach the nodes through privileged agent pods
                                 (harness/kube/providers/node_agent.py); needs --kdrill-allow-context
  --kdrill-allow-context NAME    let destructive drills run on this non-kind context (repeatable)
  --kdrill-scenario NAME         run only the drills of these scenarios (repeatable)
  --kdrill-reports DIR           evidence root (default: $KDRILL_REPORTS, else reports/ as
                                 harness.core.resources.default_reports_dir says); the run writes DIR/<run-id>/
  --kdrill-run-id ID             run id (default: a new one)
  --kdrill-scenarios-dir DIR     where drills find their scenario files (default: the built-in
                                 scenarios, harness.core.resources.scenarios_dir())
  --kdrill-tier TIER             presubmit (default, $KDRILL_TIER): the representative drill set
                                 and the tests not marked ``full``; full: everything (harness/plugin/tiers.py)

A drill test is marked ``@pytest.mark.scenario("<name>")`` and takes the ``drill`` fixture; one
test case runs per entry in the scenario's ``cases`` (or one when it has none).

With pytest-xdist (``-n N``) each worker drives a cluster of its own and the run is still one run
with one seal: :mod:`harness.core.workers` says how the clusters are kept apart and the evidence merged.
"""

from __future__ import annotations

import contextlib
import logging
import json
import os
import time
from pathlib import Path

import pytest

from harness.core import resources
from harness.plugin.drill import Drill
from harness.scaffolding.drill_namespace import DELETE_DEADLINE_SECONDS
from harness.evidence.records import EvidenceWriter, new_run_id, record_stem, run_metadata
from harness.core.ledger import Ledger
from harness.kube.providers import ProviderError
from harness.kube.providers.existing import consented_cluster
from harness.spec.scenario import ScenarioError, find_scenario, load_scenarios
from harness.plugin.tiers import DEFAULT_TIER, TIERS, TIMES_FILE, load_times, presubmit_cases
from harness.components.topology import discover
from harness.core.workers import worker_id

log = logging.getLogger("kdrill.plugin")


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
    # Both directories' defaults are looked up when used (_reports_dir, _scenarios_dir), not here:
    # this hook runs in every pytest session of an environment where kdrill is installed.
    group.addoption("--kdrill-reports", default=os.environ.get("KDRILL_REPORTS"))
    group.addoption("--kdrill-run-id", default=os.environ.get("KDRILL_RUN_ID"))
    group.addoption("--kdrill-ticket", default=os.environ.get("KDRILL_TICKET"),
                    help="the change or incident ticket this run belongs to (recorded in the evidence)")
    group.addoption("--kdrill-approved-by", default=os.environ.get("KDRILL_APPROVED_BY"),
                    help="who approved breaking this cluster for the drills (recorded in the evidence)")
    group.addoption("--kdrill-scenarios-dir", default=None,
                    help="where drills find their scenario files (default: kdrill's built-in scenarios)")
    group.addoption("--kdrill-tier", default=os.environ.get("KDRILL_TIER", DEFAULT_TIER), choices=TIERS,
                    help="presubmit (default): the representative drill set and one SIGKILL case per fault kind "
                         "(harness/plugin/tiers.py); full: every test and every drill of the catalogue. Named "
                         "scenarios (--kdrill-scenario) run whatever the tier")


def _reports_dir(config: pytest.Config) -> Path:
    """--kdrill-reports, else resources.default_reports_dir()."""
    given = config.getoption("--kdrill-reports")
    return Path(given) if given else resources.default_reports_dir()


def _scenarios_dir(config: pytest.Config) -> Path:
    """--kdrill-scenarios-dir, else the built-in scenarios."""
    given = config.getoption("--kdrill-scenarios-dir")
    return Path(given) if given else resources.scenarios_dir()


def pytest_configure(config: pytest.Config) -> None:
    # SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C: faults revert in their finally blocks,
    # fixtures clean up, and every planned drill still gets its record and the run its seal.
    import signal
    import threading

    from harness.faults import raise_interrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, raise_interrupt)
    config._kdrill_pending_namespaces = []  # drill namespaces being deleted (_settle_namespaces)
    from harness.kube.workloads import toolbox_problem

    problem = toolbox_problem(os.environ.get("KDRILL_TOOLBOX_IMAGE"), os.environ.get("KDRILL_TOOLBOX_PULL_POLICY"))
    if problem:  # refused before any cluster is touched
        raise pytest.UsageError(problem)
    config.addinivalue_line("markers", "scenario(name): the scenario a drill test runs")
    # The drills' markers, as pyproject.toml declares them for the checkout's own test runs: an
    # installed kdrill runs its drills with no ini file of its own.
    for line in ("cluster: needs a real kind cluster (created or reused by the kdrill plugin)",
                 "destructive: injects a fault into the cluster",
                 "node_access: needs the node containers (kind), skipped on an existing cluster"):
        config.addinivalue_line("markers", line)
    config.addinivalue_line("markers", "data_scenarios: the test runs every data-only scenario (harness/engine/runner.py)")
    config.addinivalue_line("markers", "full: runs in the full tier only (--kdrill-tier full), not in presubmit")
    if config.getoption("--kdrill-tier") not in TIERS:  # from KDRILL_TIER, which argparse does not check
        raise pytest.UsageError(f"--kdrill-tier / KDRILL_TIER: expected one of {', '.join(TIERS)}, "
                                f"got {config.getoption('--kdrill-tier')!r}")
    from harness.evidence.records import RunIdError, validate_run_id
    from harness.kube.providers.kind import cluster_name_problem

    name = config.getoption("--kdrill-cluster-name")
    problem = cluster_name_problem(name) if name is not None else None
    if problem:  # refused before any cluster is touched, not by kind after the images are built
        raise pytest.UsageError(f"--kdrill-cluster-name / KDRILL_CLUSTER_NAME: {problem}")
    from harness.core.workers import worker_id

    if worker_id(config) is not None:  # a pytest-xdist worker: the controller's run (harness/core/workers.py)
        config._kdrill_run_id = config.workerinput["kdrill_run_id"]
        return
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistController(config), "kdrill-xdist-controller")
    given = config.getoption("--kdrill-run-id")
    # An empty id (e.g. an unset variable) is a mistake to refuse, not a request for a new one;
    # refused here, before any cluster is touched.
    try:
        config._kdrill_run_id = new_run_id() if given is None else validate_run_id(given)
    except RunIdError as exc:
        raise pytest.UsageError(f"--kdrill-run-id / KDRILL_RUN_ID: {exc}") from None


def _scenario_of(item_or_func) -> str | None:
    marker = item_or_func.get_closest_marker("scenario") if hasattr(item_or_func, "get_closest_marker") else None
    return marker.args[0] if marker else None


def _scenario(config: pytest.Config, name: str):
    """The scenario ``name`` as it was when this session first read it: files edited while a run
    goes on do not change its drills midway. Raises ScenarioError."""
    cache = config.__dict__.setdefault("_kdrill_scenarios", {})
    if name not in cache:
        cache[name] = find_scenario(name, _scenarios_dir(config))
    return cache[name]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "drill" not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("data_scenarios") is not None:
        _generate_data_scenarios(metafunc)
        return
    marker = metafunc.definition.get_closest_marker("scenario")
    if marker is None:
        raise pytest.UsageError(f"{metafunc.definition.nodeid} uses the drill fixture without @pytest.mark.scenario")
    from harness.faults import FaultError, check_params
    from harness.spec.scenario import ScenarioError

    name = marker.args[0]
    wanted = set(metafunc.config.getoption("--kdrill-scenario"))
    if wanted and name not in wanted:
        # Not asked for (it will be deselected): its scenario need not be in the directory,
        # e.g. a copy of one scenario with other bounds in a directory of its own.
        metafunc.parametrize("drill_case", [None], ids=["not-selected"], scope="function")
        return
    try:
        scenario = _scenario(metafunc.config, name)
        check_params(scenario)  # before any cluster is made or touched
    except (ScenarioError, FaultError) as exc:
        raise pytest.UsageError(f"kdrill: {exc}") from None
    cases = [c.name for c in scenario.cases] or [None]
    metafunc.parametrize("drill_case", cases, ids=[c or "default" for c in cases], scope="function")


def _generate_data_scenarios(metafunc: pytest.Metafunc) -> None:
    """One test case per case of every data-only scenario (harness/engine/runner.py) in the scenarios
    directory, each marked with its scenario like a drill file's test."""
    from harness.faults import FaultError, check_params
    from harness.spec.scenario import ScenarioError, load_scenarios

    wanted = set(metafunc.config.getoption("--kdrill-scenario"))
    params = []
    try:
        for scenario in load_scenarios(_scenarios_dir(metafunc.config)):
            if scenario.runner is None or (wanted and scenario.name not in wanted):
                continue
            check_params(scenario)
            metafunc.config.__dict__.setdefault("_kdrill_scenarios", {})[scenario.name] = scenario
            params += [pytest.param(case, marks=pytest.mark.scenario(scenario.name),
                                    id=scenario.name + (f"-{case}" if case else ""))
                       for case in [c.name for c in scenario.cases] or [None]]
    except (ScenarioError, FaultError, FileNotFoundError) as exc:
        raise pytest.UsageError(f"kdrill: {exc}") from None
    metafunc.parametrize("drill_case", params or [pytest.param(None, marks=pytest.mark.skip(
        reason="no data-only scenario in the scenarios directory"), id="none")], scope="function")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = set(config.getoption("--kdrill-scenario"))
    keep, drop = [], []
    for item in items:
        name = _scenario_of(item)
        if wanted:
            (keep if name in wanted else drop).append(item)
        else:
            # A scenario that runs only when named (on_request) is not one of "every drill".
            (drop if name and _on_request(config, name) else keep).append(item)
    tiered = _tier_deselects(config, keep) if not wanted else []
    if tiered:
        leave = set(tiered)
        keep[:] = [item for item in keep if item not in leave]
        drop += tiered
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"kdrill: presubmit tier: {len(tiered)} test(s) of the full tier deselected "
                                "(--kdrill-tier full runs them; harness/plugin/tiers.py)")
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    # The tests that need no cluster run first (stable order otherwise): a kind cluster this
    # session creates is made meanwhile (_create_cluster_early).
    items.sort(key=lambda item: "kdrill_cluster" in getattr(item, "fixturenames", ()))


def _tier_deselects(config: pytest.Config, items: list[pytest.Item]) -> list[pytest.Item]:
    """The items the presubmit tier leaves to the full tier: kdrill's own tests marked ``full``
    and the built-in catalogue's cases outside the representative set. Empty when the tier is
    full, or when tests were picked by hand (a file or node id on the command line, -k, -m)."""
    if config.getoption("--kdrill-tier") != "presubmit":
        return []
    picked = any(str(a).endswith(".py") or "::" in str(a) for a in config.args)
    if picked or config.getoption("keyword") or config.getoption("markexpr"):
        return []
    ours = [item for item in items if _in_kdrill(item)]
    out = [item for item in ours if item.get_closest_marker("full") is not None]
    if any(_scenario_of(item) for item in ours):
        presubmit = _presubmit_cases(config)
        if presubmit is not None:
            out += [item for item in ours if item not in out and _scenario_of(item)
                    and (_scenario_of(item), item.callspec.params.get("drill_case")) not in presubmit]
    return out


def _in_kdrill(item: pytest.Item) -> bool:
    """Whether the item is one of kdrill's own tests or built-in drills (not a team's)."""
    roots = [resources.data_root()] + ([resources.checkout()] if resources.checkout() else [])
    return any(Path(item.path).resolve().is_relative_to(root.resolve()) for root in roots)


def _presubmit_cases(config: pytest.Config) -> set[tuple[str, str | None]] | None:
    """The representative drill set of the built-in catalogue (harness/plugin/tiers.py), or None when
    the drills read another scenarios directory (a team's: the tier does not choose among them)."""
    if _scenarios_dir(config).resolve() != resources.scenarios_dir().resolve():
        return None
    try:
        times = load_times(resources.clusters_dir() / TIMES_FILE)
        return set(presubmit_cases(load_scenarios(resources.scenarios_dir()), times))
    except (ScenarioError, ValueError) as exc:
        raise pytest.UsageError(f"kdrill: the presubmit tier cannot be chosen: {exc}") from None


def _on_request(config: pytest.Config, name: str) -> bool:
    try:
        return bool(_scenario(config, name).on_request)
    except Exception:  # an unreadable scenario is refused where its cases are made
        return False


def pytest_collection_finish(session: pytest.Session) -> None:
    session.config._kdrill_session = session
    # Every drill case still selected (after -k, -m and --kdrill-scenario) gets a record at the
    # end, whether it ran or not.
    session.config._kdrill_planned = [(item, _scenario_of(item), item.callspec.params.get("drill_case"))
                                      for item in session.items if _scenario_of(item) and hasattr(item, "callspec")]
    # The names go into run.json, so the report can tell a drill that left no record at all.
    session.config._kdrill_planned_names = [record_stem(name, case) for _, name, case in session.config._kdrill_planned]
    _create_cluster_early(session)


def _create_cluster_early(session: pytest.Session) -> None:
    """When this session will create its kind cluster and has tests that need none, start the
    creation now, in a child process (``config._kdrill_early_cluster``, KindProvider's
    BackgroundCreation): those tests run meanwhile (about 2.5 minutes of a CI run, measured). Only
    the plain case (no existing cluster, no platform profile, images built, Docker up, the cluster
    absent); otherwise, and on any doubt, kdrill_cluster creates it in line and says why it
    cannot."""
    config = session.config
    opt = config.getoption
    if (config.option.collectonly or getattr(config.option, "showfixtures", False)
            or getattr(config.option, "show_fixtures_per_test", False)
            or opt("--kdrill-kubeconfig") or opt("--kdrill-context") or opt("--kdrill-platform")):
        return
    if session.testsfailed and not config.option.continue_on_collection_errors:
        return  # collection errors: pytest will run nothing
    needing = sum("kdrill_cluster" in getattr(item, "fixturenames", ()) for item in session.items)
    if needing == 0 or needing == len(session.items):
        return
    from harness.cli.doctor import docker_problem
    from harness.kube.images import Build
    from harness.core.session_lock import SessionLock

    try:
        if docker_problem() or Build().missing():
            return
        provider = _kind_provider(config)
        if provider.exists():
            return
        lock = SessionLock(provider.name).acquire()
    except Exception as exc:  # ProviderError, ClusterBusy: kdrill_cluster meets it again and reports it
        log.info("kind cluster not created early: %s", exc)
        return
    try:
        creation = provider.create_in_background()
    except Exception as exc:  # no child started: kdrill_cluster creates it in line
        lock.release()
        log.info("kind cluster not created early: %s", exc)
        return
    config._kdrill_early_cluster = (provider, lock, creation)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"kdrill: creating kind cluster {provider.name} in the background (log: "
                            f"{creation.log_path}) while the {len(session.items) - needing} test(s) that "
                            "need no cluster run")


def _record_not_run(config: pytest.Config, writer: EvidenceWriter, scenario_name: str, case: str | None,
                    verdict: str, reason: str) -> None:
    """A record for a planned drill case that did not run to its end: ``verdict`` is "skipped",
    "refused", "error" or "not-run", ``reason`` says why (the record's ``errors``)."""
    from harness.evidence.records import DrillRecord

    try:
        scenario = _scenario(config, scenario_name)
        record = DrillRecord.for_scenario(writer.run_dir.name, scenario, case)
    except Exception as exc:  # the record is written even when the scenario cannot be read
        record = DrillRecord(run_id=writer.run_dir.name, drill=scenario_name, case=case, started_at=time.time())
        reason = f"{reason}\nscenario not readable: {exc}"
    record.verdict = verdict
    # The head says what happened, the tail of a traceback where: keep both.
    record.errors.append(reason if len(reason) <= 2000 else f"{reason[:300]} [...] {reason[-1600:]}")
    record.finish()
    writer.write_record(record)


@pytest.fixture(scope="session")
def kdrill_run(request: pytest.FixtureRequest):
    """The run's id, evidence directory and writer; run.json is written at start and end."""
    from harness.evidence.records import RunIdError

    run_id = request.config._kdrill_run_id
    worker = worker_id(request.config)
    try:
        # A new run's directory, never an earlier run's (kdrill run made it empty for us); a
        # pytest-xdist worker writes into the one its controller made (harness/core/workers.py).
        writer = (EvidenceWriter(Path(request.config.workerinput["kdrill_run_dir"])) if worker
                  else EvidenceWriter.for_new_run(_reports_dir(request.config), run_id))
    except RunIdError as exc:
        _end_session(request.config, f"kdrill: {exc}")
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


@pytest.fixture(scope="session")
def kdrill_cluster(request: pytest.FixtureRequest):
    """The cluster for this session: an existing one from a kubeconfig, or a kind cluster that is
    reused when it exists and otherwise created (and deleted at the end unless kept)."""
    opt = request.config.getoption
    problem = _worker_problem(request.config)
    if problem:
        request.config._kdrill_refused = problem
        _end_session(request.config, f"kdrill: refused: {problem}", returncode=pytest.ExitCode.USAGE_ERROR)
    if opt("--kdrill-kubeconfig") or opt("--kdrill-context"):
        try:
            # Consent is checked before any request reaches the cluster, and bound to the cluster,
            # not to its name (harness.kube.providers.existing).
            cluster = consented_cluster(opt("--kdrill-kubeconfig"), _context(request.config),
                                        opt("--kdrill-allow-context"))
            if opt("--kdrill-node-agent") and (cluster.context or "") not in opt("--kdrill-allow-context"):
                # Privileged pods on every node are consent of their own, whatever the cluster is.
                raise ProviderError(f"the node agent runs privileged pods on the nodes of {cluster.context!r}; "
                                    f"consent with --kdrill-allow-context {cluster.context}")
        except ProviderError as exc:
            request.config._kdrill_refused = str(exc)
            _end_session(request.config, f"kdrill: refused: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
        from harness.core.session_lock import LEASE_NAME, LEASE_NAMESPACE, ClusterBusy, ContextLease

        # One session at a time on the cluster, whichever machine it runs from: before the node
        # agent or anything else is made on it, released after all of it is gone.
        # An API that does not answer (ProviderError) fails each drill's setup, as it would anyway.
        try:
            lease = ContextLease(cluster).acquire()
        except ClusterBusy as exc:
            request.config._kdrill_refused = str(exc)
            _end_session(request.config, f"kdrill: refused: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
        request.addfinalizer(lease.release)
        # In run.json: the session held the cluster alone, or says when it found it did not.
        meta = getattr(request.config, "_kdrill_meta", None)
        if meta is not None:
            meta["session_lease"] = {"lease": f"{LEASE_NAMESPACE}/{LEASE_NAME}", "holder": lease.identity,
                                     "inherited": lease.inherited, "lost": None}
        if not opt("--kdrill-node-agent"):
            yield cluster
            _settle_namespaces(request.config, DELETE_DEADLINE_SECONDS)
            _say_lease_lost(request.config, lease)
            return
        from harness.faults import injected
        from harness.scaffolding.node_agent import NodeAgentPods
        from harness.core.ledger import Ledger
        from harness.kube.providers.node_agent import NodeAgent, nodes_by_role
        from harness.kube.workloads import TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY

        cluster.node_access = True
        cluster.node_agent = NodeAgent(cluster, TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY)
        # The agents' namespace is in the ledger while it exists: removed at the end, on Ctrl-C,
        # and by `kdrill recover` after a crash.
        agents = contextlib.ExitStack()
        try:
            cluster.nodes_by_role = nodes_by_role(cluster)
            agents.enter_context(injected(NodeAgentPods(cluster), Ledger(), drill="node agent"))
        except Exception as exc:  # one line for the session, not the same error for every test
            request.config._kdrill_refused = f"node agent on {cluster.name}: {type(exc).__name__}: {exc}"[:500]
            _end_session(request.config, f"kdrill: refused: {request.config._kdrill_refused}",
                         returncode=pytest.ExitCode.USAGE_ERROR)
        with agents:
            yield cluster
            _settle_namespaces(request.config, DELETE_DEADLINE_SECONDS)
        _say_lease_lost(request.config, lease)
        return
    from harness.cli.doctor import docker_problem
    from harness.kube.images import BuildError, ensure_built

    early = getattr(request.config, "_kdrill_early_cluster", None)
    if early is not None:  # started in the background at the end of collection
        provider, lock, creation = early
        request.config._kdrill_early_cluster = None  # this fixture owns it now, and deletes it
        request.addfinalizer(lock.release)
        seconds = creation.result()
        creation.close()
        log.info("created kind cluster %s in %.0f s (in the background)", provider.name, seconds)
        request.config._kdrill_cluster_create_seconds = round(seconds, 1)
        yield from _use_kind_cluster(request, provider, created=True)
        return
    # A bad profile is refused before Docker is asked or images are built (minutes, cold).
    profile = None
    if opt("--kdrill-platform"):
        from harness.platform.profile import ProfileError, check_cluster_name, load

        try:
            profile = load(opt("--kdrill-platform"))
            if not opt("--kdrill-cluster-name"):
                check_cluster_name(profile, opt("--kdrill-cluster-config"))
        except ProfileError as exc:
            _end_session(request.config, f"kdrill: platform profile: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
    # Docker down or a failed image build ends the session with one line: as a fixture error
    # it would repeat for every test that needs the cluster.
    problem = docker_problem()
    if problem:
        _end_session(request.config, problem)
    capture = request.config.pluginmanager.getplugin("capturemanager")
    reporter = request.config.pluginmanager.getplugin("terminalreporter")

    def say(line: str) -> None:
        # A cold build takes minutes: its progress must show even while pytest captures output.
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            if reporter:
                reporter.write_line(line)
            else:
                print(line, flush=True)

    try:
        ensure_built(progress=say)
    except BuildError as exc:
        _end_session(request.config, f"kdrill: {exc}")
    try:
        provider = _kind_provider(request.config, profile)
    except ProviderError as exc:
        pytest.fail(str(exc), pytrace=False)
    from harness.core.session_lock import ClusterBusy, SessionLock

    try:
        lock = SessionLock(provider.name).acquire()
    except ClusterBusy as exc:
        _end_session(request.config, f"kdrill: {exc}")
    request.addfinalizer(lock.release)
    created = False
    if not provider.exists():
        seconds = provider.create()
        created = True
        log.info("created kind cluster %s in %.0f s", provider.name, seconds)
        request.config._kdrill_cluster_create_seconds = round(seconds, 1)
    if not created:  # a kept cluster made before the guard existed gets it too (idempotent)
        provider.guard_service_subnet()
        problem = provider.platform_problem()
        if problem:
            _end_session(request.config, f"kdrill: {problem}", returncode=pytest.ExitCode.USAGE_ERROR)
    yield from _use_kind_cluster(request, provider, created)


def _say_lease_lost(config: pytest.Config, lease) -> None:
    """A session that found its Lease held by another while it ran says so at its end: two
    sessions overlapped on the cluster, and their evidence may show each other's faults."""
    meta = getattr(config, "_kdrill_meta", None)
    if meta is not None and "session_lease" in meta:
        meta["session_lease"]["lost"] = lease.lost
    if lease.lost:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"kdrill: WARNING: this session lost its Lease while it ran: {lease.lost}", red=True)


def _end_session(config: pytest.Config, message: str, returncode: int | None = None) -> None:
    """``pytest.exit(message)``; in a pytest-xdist worker, a failure of the session fixture
    instead: xdist takes a worker's exit for a crash (an INTERNALERROR), while a failed session
    fixture fails the case with the message, the worker's end records it, and ``shouldstop``
    ends the whole run (the worker would otherwise fail every other worker's waiting cases)."""
    if worker_id(config) is not None:
        session = getattr(config, "_kdrill_session", None)
        if session is not None:
            session.shouldstop = message
        pytest.fail(message, pytrace=False)
    pytest.exit(message, returncode=returncode)


def _worker_problem(config: pytest.Config) -> str | None:
    """In a pytest-xdist worker, why it may not drill a cluster: it replaces a crashed worker
    (its cluster would be a new one, the crashed one's left behind), or ``--dist each`` would run
    every case on every cluster into the same records. None elsewhere."""
    worker = worker_id(config)
    if worker is None:
        return None
    from harness.core.workers import WorkerError, worker_index

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


def _context(config: pytest.Config) -> str | None:
    """The kubeconfig context this session drills: the one ``--kdrill-context`` (None: the
    kubeconfig's current one), or in a pytest-xdist worker, that worker's of those given
    (harness.core.workers.worker_context). Raises ProviderError when that cannot be told."""
    from harness.core.workers import WorkerError, worker_context

    contexts = config.getoption("--kdrill-context") or []
    worker = worker_id(config)
    if worker is not None:
        if not contexts:
            raise ProviderError("with pytest-xdist each worker drills a cluster of its own: give --kdrill-context "
                                "once per worker")
        try:
            return worker_context(contexts, worker)
        except WorkerError as exc:
            raise ProviderError(str(exc)) from None
    if len(contexts) > 1:
        raise ProviderError(f"--kdrill-context is given {len(contexts)} times: one cluster per session, or one per "
                            f"worker with pytest-xdist (-n {len(contexts)})")
    return contexts[0] if contexts else None


def _kind_provider(config: pytest.Config, profile=None):
    """The KindProvider this session drives: ``--kdrill-cluster-config`` and ``--kdrill-cluster-name``
    (default: the config's name), or in pytest-xdist worker gwN, cluster ``<that name>-gwN`` with
    its host ports moved (harness.core.workers). Raises ProviderError."""
    from harness.kube.providers.kind import KindProvider, cluster_name_problem
    from harness.core.workers import WorkerError, cluster_name, host_port_offset

    opt = config.getoption
    provider = KindProvider(opt("--kdrill-cluster-config"), name=opt("--kdrill-cluster-name"), platform=profile)
    worker = worker_id(config)
    if worker is None:
        return provider
    try:
        name, offset = cluster_name(provider.name, worker), host_port_offset(worker)
    except WorkerError as exc:
        raise ProviderError(str(exc)) from None
    problem = cluster_name_problem(name)
    if problem:
        raise ProviderError(f"worker {worker}'s cluster name: {problem}")
    return KindProvider(opt("--kdrill-cluster-config"), name=name, platform=profile, host_port_offset=offset)


def _use_kind_cluster(request: pytest.FixtureRequest, provider, created: bool):
    """kdrill_cluster's body for a kind cluster that exists: yield its Cluster; at the end, settle
    the drill namespaces, export the logs when a test failed, and delete the cluster if this
    session created it (unless kept)."""
    opt = request.config.getoption
    cluster = provider.cluster()
    cluster.kind_provider = provider
    yield cluster
    # Every drill namespace whose deletion the drills started is gone before the session ends.
    _settle_namespaces(request.config, DELETE_DEADLINE_SECONDS)
    if request.session.testsfailed:
        logs = _reports_dir(request.config) / request.config._kdrill_run_id / "logs"
        # Each worker's cluster has its own (kind writes the same top-level files for every cluster).
        provider.export_logs(logs / provider.name if worker_id(request.config) else logs)
    if created and not opt("--kdrill-keep-cluster"):
        provider.delete()


@pytest.fixture(scope="session")
def kdrill_topology(kdrill_cluster):
    return discover(kdrill_cluster)


@pytest.fixture(scope="session")
def kdrill_identity(kdrill_cluster, kdrill_topology, kdrill_run):
    """The cluster's identity and clock offsets (harness.components.topology.cluster_identity), read once and
    kept in run.json (written again at the end of the run)."""
    from harness.components.topology import cluster_identity

    identity = cluster_identity(kdrill_cluster, kdrill_topology)
    kdrill_run["meta"]["cluster"] = identity
    # Which platform profile built this cluster (harness/platform/profile.py), so a run says what
    # it drilled and kdrill compare keeps platforms apart; read from the cluster, not from the
    # option, so a run through a kubeconfig on such a cluster says it too.
    from harness.platform.profile import recorded

    try:
        record = recorded(kdrill_cluster)
        kdrill_run["meta"]["platform"] = record or {"hash": None, "note": "no platform profile recorded on this "
                                                    "cluster"}
        # The record is the cluster's word. With --kdrill-platform the directory was read too and
        # hashed the same (kdrill_cluster refuses a cluster whose record differs): say which.
        profile = getattr(getattr(kdrill_cluster, "kind_provider", None), "platform", None)
        if profile is not None and record and record.get("hash") == profile.hash:
            kdrill_run["meta"]["platform_checked_against"] = str(profile.root)
    except Exception as exc:  # evidence, not a reason to stop
        kdrill_run["meta"]["platform"] = {"hash": None, "note": f"not read: {type(exc).__name__}"}
    # The image sources the platform's workloads use, and the nodes where an outage of each would
    # show (harness/components/image_sources.py): what a registry outage would hit, read at the start.
    from harness.components.image_sources import discover as image_sources

    try:
        kdrill_run["meta"]["image_sources"] = {"read_at": time.time(), "sources": image_sources(kdrill_cluster)}
    except Exception as exc:  # evidence, not a reason to stop
        kdrill_run["meta"]["image_sources"] = {"note": f"not read: {type(exc).__name__}: {exc}"[:300]}
    return identity


def _run_progress(config: pytest.Config):
    """The session's :class:`harness.core.progress.RunProgress`, made by its first drill: the planned
    drills, with the durations ``kdrill run --plan`` would expect."""
    progress = getattr(config, "_kdrill_progress", None)
    if progress is None:
        from harness.cli.plan import expected_seconds, past_durations
        from harness.core.progress import RunProgress

        try:
            durations = past_durations(_reports_dir(config))
        except Exception as exc:  # an estimate, not a reason to stop a drill
            log.warning("no past durations for the progress lines: %s", exc)
            durations = {}
        planned, expected = [], {}
        for _, name, case in getattr(config, "_kdrill_planned", []):
            label = name + (f"[{case}]" if case else "")
            planned.append(label)
            try:
                guess = expected_seconds(_scenario(config, name), case, durations)
            except Exception:  # an unreadable scenario is refused where its drill runs
                guess = None
            if guess is not None:
                expected[label] = guess[0]
        progress = config._kdrill_progress = RunProgress(planned, expected)
    return progress


@pytest.fixture(scope="session")
def kdrill_vitals(kdrill_cluster, kdrill_topology):
    """The session's vital-sign fixtures (harness/engine/vitals.py), set up by the first drill."""
    from harness.engine.vitals import VitalSigns

    vitals = VitalSigns(kdrill_cluster, (kdrill_topology.workers or [None])[-1], ledger=Ledger())
    yield vitals
    vitals.delete()


@pytest.fixture
def drill(request: pytest.FixtureRequest, drill_case, kdrill_run, kdrill_cluster, kdrill_topology, kdrill_identity,
          kdrill_vitals):
    """A :class:`harness.plugin.drill.Drill` for the test's scenario and case; its evidence is written
    after the test body whatever happened (and a record says why when it does not run)."""
    scenario = _scenario(request.config, _scenario_of(request.node))
    label = scenario.name + (f"[{drill_case}]" if drill_case else "")  # as --plan and the progress lines name it
    missing = scenario.node_access_missing(kdrill_cluster, drill_case) if scenario.needs_node_access else []
    if missing:
        # Which capability is missing, in the drill's own terms (Scenario.node_access_levels).
        from harness.kube.providers import NODE_CHANNEL_SAYS

        reason = (f"{scenario.name} needs node access that {kdrill_cluster.name} (an existing cluster reached "
                  f"through a kubeconfig; node access: {NODE_CHANNEL_SAYS[kdrill_cluster.node_channel]}) does not "
                  f"give: it {'; it '.join(missing)}")
        _record_not_run(request.config, kdrill_run["writer"], scenario.name, drill_case, "skipped", reason)
        _run_progress(request.config).dropped(label)
        pytest.skip(reason)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")

    def progress(line: str) -> None:
        if reporter is not None:
            reporter.write_line(line)

    _settle_namespaces(request.config, 0)
    run_progress = _run_progress(request.config)
    progress(f"kdrill: {run_progress.started(label)}")
    d = Drill(scenario, drill_case, kdrill_cluster, kdrill_topology, Ledger(), kdrill_run["writer"],
              kdrill_run["run_id"], progress=progress)
    _label_for_allure(scenario, drill_case)
    d.record.cluster.update({k: kdrill_identity[k] for k in ("server", "kube_system_uid", "clock_offsets",
                                                               "node_channel") if k in kdrill_identity})
    from harness.kube.workloads import TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY

    d.observe("toolbox", {"image": TOOLBOX_IMAGE, "pull_policy": TOOLBOX_PULL_POLICY})
    # The platform's vital signs, whatever the drill's own claim looks at.
    try:
        vitals = d.vitals = kdrill_vitals.watch()
    except Exception as exc:  # recorded: a cluster that cannot run them is itself a finding
        vitals = None
        d.record.vital_signs = {"error": f"vital signs not watched: {type(exc).__name__}: {exc}"[:500]}
    yield d
    call = getattr(request.node, "_kdrill_call_report", None)
    error = getattr(request.node, "_kdrill_call_excinfo", None)
    if call is not None and call.failed and error is None:
        error = RuntimeError(call.longreprtext[-2000:])
    if vitals is not None:
        injections = d.record.observations.get("injections", [])
        if error is None:  # a failed drill ends at once; its unmeasured window is flagged, not waited for
            vitals.await_after(injections)
        covered = {sign: next(name for name in names if name in d.expectations)
                   for sign, names in scenario.vital_signs.items() if any(name in d.expectations for name in names)}
        d.record.vital_signs = vitals.finish(injections, covered)
        d.add_timelines(vitals.timelines)
        for sign in d.record.vital_signs["flagged"]:
            vital = d.record.vital_signs["signs"][sign]
            d.say(f"FLAGGED vital sign {sign}: {vital['reason']}: "
                  f"{ {k: v for k, v in vital.items() if k in ('baseline', 'fault', 'after', 'added')} }")
    d.finish(error)
    # JUnit XML: each expectation's measured value and bound as properties of the test case
    # (pytest writes the teardown report's user_properties).
    for x in d.record.expectations:
        request.node.user_properties += [(f"{x['name']}.measured", x["measured"]),
                                         (f"{x['name']}.bound", x["bound_text"]),
                                         (f"{x['name']}.unit", x["unit"]), (f"{x['name']}.verdict", x["verdict"])]
    request.node.user_properties += [("kdrill.verdict", d.record.verdict), ("kdrill.drill", label),
                                     ("kdrill.duration_seconds", d.record.duration_seconds)]
    progress(f"kdrill: {run_progress.ended(label, d.record.verdict, d.record.duration_seconds or 0.0)}")
    # Whatever the drill left in its namespace goes, so the next drill starts clean. Its Services
    # (fixed NodePorts) go now; the namespace finalises while the next drill sets up (about 6 to
    # 12 s each here), and its ledger entry leaves only once it is gone (see _settle_namespaces).
    try:
        d.start_namespace_removal(request.config._kdrill_pending_namespaces)
    except Exception as exc:  # cleanup must not mask the drill's own outcome
        log.warning("could not delete namespace %s: %s", d.namespace, exc)


def _settle_namespaces(config: pytest.Config, wait_seconds: float) -> None:
    """Drop the ledger entries of the drill namespaces whose deletion finished, waiting up to
    ``wait_seconds`` for the others; those still there keep their entries (``kdrill recover``)
    and are named on the terminal."""
    from harness.scaffolding.drill_namespace import settle

    pending = getattr(config, "_kdrill_pending_namespaces", [])
    if not pending:
        return
    left = settle(pending, Ledger(), wait_seconds)
    config._kdrill_pending_namespaces = left
    if left and wait_seconds > 0:
        line = (f"kdrill: drill namespace(s) {', '.join(p.namespace.namespace for p in left)} still there "
                f"{wait_seconds:.0f} s after their deletion; `kdrill recover` deletes them")
        log.warning(line)
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(line)


def _label_for_allure(scenario, case: str | None) -> None:
    """Title, severity, the fault as a tag, and a link to each source document."""
    import allure

    allure.dynamic.title(scenario.title + (f" [{case}]" if case else ""))
    allure.dynamic.severity(allure.severity_level(scenario.severity))
    allure.dynamic.tag(scenario.fault_kind)
    allure.dynamic.label("scenario", scenario.name)
    for source in scenario.sources:
        allure.dynamic.link(source.url, name=source.title + (f": {source.section}" if source.section else ""))


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
        _finish_worker(session, exitstatus)
        return
    if getattr(config, "_kdrill_controller_run_dir", None) is not None:
        _finish_controller(session, exitstatus)
        return
    planned = getattr(config, "_kdrill_planned", [])
    run_dir = getattr(config, "_kdrill_run_dir", None)
    if not planned and run_dir is None:
        return
    if run_dir is None:  # nothing started (e.g. the cluster could not be made): the run still has its records
        from harness.evidence.records import RunIdError

        try:
            writer = EvidenceWriter.for_new_run(_reports_dir(config), config._kdrill_run_id)
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
    _record_missing(config, writer, planned, exitstatus)
    _finish_allure_results(config, run_dir)
    from harness.cli import report_and_manifest

    report_and_manifest(run_dir)


def _record_missing(config: pytest.Config, writer: EvidenceWriter, planned, exitstatus: int) -> None:
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
            _record_not_run(config, writer, scenario_name, case, "refused", f"refused: {refused}")
        elif setup_error:
            last = next((line for line in reversed(setup_error.splitlines()) if line.strip()), "")
            _record_not_run(config, writer, scenario_name, case, "error", f"setup failed: {last}\n{setup_error}")
        else:
            _record_not_run(config, writer, scenario_name, case, "not-run",
                            f"not run: the session ended first (pytest exit status {int(exitstatus)})")


class _XdistController:
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
            _await_workers(session.config, exc)
            raise

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        config = node.config
        if getattr(config, "_kdrill_controller_run_dir", None) is None:
            from harness.evidence.records import RunIdError

            try:  # made before any worker starts, so that each only writes into it
                writer = EvidenceWriter.for_new_run(_reports_dir(config), config._kdrill_run_id)
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


def _worker_pids() -> list[int]:
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


def _await_workers(config: pytest.Config, interrupt: BaseException) -> None:
    """After the controller's Ctrl-C or SIGTERM: xdist would tear the workers down at once, and
    execnet ends a worker still running 15 s later with ``os._exit``, in the middle of a revert.
    So: pass a SIGTERM on to the workers (Ctrl-C reached them itself, through the terminal's
    process group), then go on handling their events until every one has ended its session, its
    faults reverted and its records written. Another Ctrl-C meanwhile only says so."""
    import signal

    dsession = config.pluginmanager.getplugin("dsession")
    if dsession is None:
        return
    if str(interrupt) == f"signal {int(signal.SIGTERM)}":  # harness.faults.raise_interrupt's
        for pid in _worker_pids():
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


def _finish_worker(session: pytest.Session, exitstatus: int) -> None:
    """A pytest-xdist worker's end: an "error" record for each case whose setup failed here, then
    hand back to the controller the cases planned, those run here, and this worker's cluster as
    it read it (xdist's ``workeroutput``; plain JSON values)."""
    config = session.config
    planned = getattr(config, "_kdrill_planned", [])
    ran = [(item, name, case) for item, name, case in planned if getattr(item, "_kdrill_ran", False)]
    run_dir = getattr(config, "_kdrill_run_dir", None)
    if run_dir is not None:
        writer = EvidenceWriter(run_dir)
        _record_missing(config, writer, ran, exitstatus)  # each of these started here
    meta = dict(getattr(config, "_kdrill_meta", None) or {})
    if getattr(config, "_kdrill_cluster_create_seconds", None) is not None:
        meta["cluster_create_seconds"] = config._kdrill_cluster_create_seconds
    handed = {"planned": [[name, case] for _, name, case in planned],
              "ran": [record_stem(name, case) for _, name, case in ran],
              "refused": getattr(config, "_kdrill_refused", None), "meta": meta}
    config.workeroutput["kdrill"] = json.loads(json.dumps(handed, default=str))


def _finish_controller(session: pytest.Session, exitstatus: int) -> None:
    """The pytest-xdist controller's end, once every worker is down: run.json with each worker's
    cluster (harness.core.workers.merge_worker_outputs), a record for each planned case that left
    none, the report and the seal. A run that planned no drill (only tests that need no cluster
    ran) leaves no run directory."""
    from harness.core.workers import merge_worker_outputs

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
            _record_not_run(config, writer, name, case, "not-run",
                            f"not run: no worker ran it (pytest exit status {int(exitstatus)})"
                            + (f"; {refusals}" if refusals else ""))
    _finish_allure_results(config, run_dir)
    from harness.cli import report_and_manifest

    report_and_manifest(run_dir)


def pytest_unconfigure(config: pytest.Config) -> None:
    # After the evidence is written and sealed (pytest_sessionfinish), whatever happens here.
    _drop_unused_early_cluster(config)


def _drop_unused_early_cluster(config: pytest.Config) -> None:
    """A cluster created early that no test took (the session was interrupted or stopped early, or
    every test that needed it was skipped): stop its creation if still running, delete what kind
    made unless kept, release the lock. Never raises: a failure is logged with what to do."""
    early = getattr(config, "_kdrill_early_cluster", None)
    if early is None:
        return
    provider, lock, creation = early
    config._kdrill_early_cluster = None
    try:
        creation.stop()
        if not config.getoption("--kdrill-keep-cluster") and provider.exists():
            provider.delete()
        creation.close()
    except Exception as exc:
        log.warning("kind cluster %s, created early and not used, not deleted: %s; `kdrill cluster delete "
                    "--name %s` deletes it", provider.name, exc, provider.name)
    finally:
        lock.release()


def _finish_allure_results(config: pytest.Config, run_dir: Path) -> None:
    """Environment, categories and history beside allure-pytest's results (harness/evidence/allure_results.py),
    when the run writes them (``--alluredir``); sealed with the run. Never raises."""
    alluredir = getattr(config.option, "allure_report_dir", None)
    if not alluredir:
        return
    from harness.evidence import allure_results
    from harness.evidence.manifest import previous_run, verify_run

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
