"""The session's cluster (the ``kdrill_cluster`` fixture): an existing one reached through a
kubeconfig, held by the session's Lease and, with --kdrill-node-agent, reached on its nodes through
agent pods; or a kind cluster, reused when it exists, else created (in the background when
collection started it early) and deleted at the end unless kept."""

from __future__ import annotations

import contextlib
import logging

import pytest

import harness.cli.doctor as doctor
from harness.core.ledger import Ledger
from harness.core.workers import WorkerError, cluster_name, host_port_offset, worker_context, worker_id
from harness.faults import injected
from harness.kube import images
from harness.kube.images import BuildError
from harness.kube.providers import Cluster, ProviderError
from harness.kube.providers.existing import consented_cluster
from harness.kube.providers.kind import KindProvider, cluster_name_problem
from harness.kube.providers.node_agent import NodeAgent, nodes_by_role
from harness.kube.session_lock import LEASE_NAME, LEASE_NAMESPACE, ClusterBusy, ContextLease, SessionLock
from harness.kube.workloads import TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY
from harness.platform.profile import PlatformProfile, ProfileError, check_cluster_name, load
from harness.plugin.session import end_session, reports_dir
from harness.plugin.workers import worker_problem
from harness.scaffolding.drill_namespace import DELETE_DEADLINE_SECONDS, settle
from harness.scaffolding.node_agent import NodeAgentPods

log = logging.getLogger("kdrill.plugin")


@pytest.fixture(scope="session")
def kdrill_cluster(request: pytest.FixtureRequest):
    """The cluster for this session: an existing one from a kubeconfig, or a kind cluster that is
    reused when it exists and otherwise created (and deleted at the end unless kept)."""
    opt = request.config.getoption
    problem = worker_problem(request.config)
    if problem:
        request.config._kdrill_refused = problem
        end_session(request.config, f"kdrill: refused: {problem}", returncode=pytest.ExitCode.USAGE_ERROR)
    if opt("--kdrill-kubeconfig") or opt("--kdrill-context"):
        yield from _existing_cluster(request)
        return
    early = getattr(request.config, "_kdrill_early_cluster", None)
    if early is not None:  # started in the background at the end of collection
        provider, lock, creation = early
        request.config._kdrill_early_cluster = None  # this fixture owns it now, and deletes it
        request.addfinalizer(lock.release)
        seconds = creation.result()
        creation.close()
        log.info("created kind cluster %s in %.0f s (in the background)", provider.name, seconds)
        request.config._kdrill_cluster_create_seconds = round(seconds, 1)
        _say_cluster(request.config, provider.name, seconds)
        yield from _use_kind_cluster(request, provider, created=True)
        return
    yield from _kind_cluster(request)


def _existing_cluster(request: pytest.FixtureRequest):
    """kdrill_cluster's body for an existing cluster: consented to, held by the session's Lease
    for the whole session and, with --kdrill-node-agent, reached on its nodes through agent pods
    (removed at the end). Ends the session when it is refused."""
    cluster = _consented_cluster(request)
    lease = _hold_lease(request, cluster)
    agents = _node_agents(request, cluster) if request.config.getoption("--kdrill-node-agent") \
        else contextlib.nullcontext()
    with agents:
        yield cluster
        settle_namespaces(request.config, DELETE_DEADLINE_SECONDS)
    say_lease_lost(request.config, lease)


def _consented_cluster(request: pytest.FixtureRequest) -> Cluster:
    """The existing cluster drilled, once consent is checked: before any request reaches it, and
    bound to the cluster, not to its name (harness.kube.providers.existing). Ends the session
    when consent is missing."""
    opt = request.config.getoption
    try:
        cluster = consented_cluster(opt("--kdrill-kubeconfig"), context(request.config), opt("--kdrill-allow-context"))
        if opt("--kdrill-node-agent") and (cluster.context or "") not in opt("--kdrill-allow-context"):
            # Privileged pods on every node are consent of their own, whatever the cluster is.
            raise ProviderError(f"the node agent runs privileged pods on the nodes of {cluster.context!r}; "
                                f"consent with --kdrill-allow-context {cluster.context}")
    except ProviderError as exc:
        request.config._kdrill_refused = str(exc)
        end_session(request.config, f"kdrill: refused: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
    return cluster


def _hold_lease(request: pytest.FixtureRequest, cluster: Cluster) -> ContextLease:
    """The session's Lease on ``cluster``, released at the session's end; its holder in run.json.
    Ends the session when another session holds the cluster."""
    # One session at a time on the cluster, whichever machine it runs from: before the node
    # agent or anything else is made on it, released after all of it is gone.
    # An API that does not answer (ProviderError) fails each drill's setup, as it would anyway.
    try:
        lease = ContextLease(cluster).acquire()
    except ClusterBusy as exc:
        request.config._kdrill_refused = str(exc)
        end_session(request.config, f"kdrill: refused: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
    request.addfinalizer(lease.release)
    # In run.json: the session held the cluster alone, or says when it found it did not.
    meta = getattr(request.config, "_kdrill_meta", None)
    if meta is not None:
        meta["session_lease"] = {"lease": f"{LEASE_NAMESPACE}/{LEASE_NAME}", "holder": lease.identity,
                                 "inherited": lease.inherited, "lost": None}
    return lease


def _node_agents(request: pytest.FixtureRequest, cluster: Cluster) -> contextlib.ExitStack:
    """The node agents made on ``cluster``, as a context that removes them on exit; ``cluster``
    then reaches its nodes through them. Ends the session when they cannot be made."""
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
        end_session(request.config, f"kdrill: refused: {request.config._kdrill_refused}",
                    returncode=pytest.ExitCode.USAGE_ERROR)
    return agents


def _kind_cluster(request: pytest.FixtureRequest):
    """kdrill_cluster's body for a kind cluster made in line: the platform profile checked, Docker
    asked, the images built, the session lock taken, the cluster created unless it exists."""
    profile = _platform_profile(request.config)
    # Docker down or a failed image build ends the session with one line: as a fixture error
    # it would repeat for every test that needs the cluster.
    problem = doctor.docker_problem()
    if problem:
        end_session(request.config, problem)
    try:
        images.ensure_built(progress=_progress_line(request.config))
    except BuildError as exc:
        end_session(request.config, f"kdrill: {exc}")
    try:
        provider = kind_provider(request.config, profile)
    except ProviderError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        lock = SessionLock(provider.name).acquire()
    except ClusterBusy as exc:
        end_session(request.config, f"kdrill: {exc}")
    request.addfinalizer(lock.release)
    created = False
    if not provider.exists():
        seconds = provider.create()
        created = True
        log.info("created kind cluster %s in %.0f s", provider.name, seconds)
        request.config._kdrill_cluster_create_seconds = round(seconds, 1)
    _say_cluster(request.config, provider.name, seconds if created else None)
    if not created:  # a kept cluster made before the guard existed gets it too (idempotent)
        provider.guard_service_subnet()
        problem = provider.platform_problem()
        if problem:
            end_session(request.config, f"kdrill: {problem}", returncode=pytest.ExitCode.USAGE_ERROR)
    yield from _use_kind_cluster(request, provider, created)


def _platform_profile(config: pytest.Config) -> PlatformProfile | None:
    """--kdrill-platform's profile, checked (None without one): a bad profile is refused before
    Docker is asked or images are built (minutes, cold). Ends the session for a bad one."""
    opt = config.getoption
    if not opt("--kdrill-platform"):
        return None
    try:
        profile = load(opt("--kdrill-platform"))
        if not opt("--kdrill-cluster-name"):
            check_cluster_name(profile, opt("--kdrill-cluster-config"))
    except ProfileError as exc:
        end_session(config, f"kdrill: platform profile: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
    return profile


def _say_cluster(config: pytest.Config, name: str, created_seconds: float | None) -> None:
    """One line on the terminal: whether this session made the kind cluster ``name`` (in
    ``created_seconds``) or found it, and whether it is deleted at the end."""
    if created_seconds is None:
        line = f"kdrill: kind cluster {name} exists: drilled as it is, and kept at the end"
    elif config.getoption("--kdrill-keep-cluster"):
        line = f"kdrill: created kind cluster {name} in {created_seconds:.0f} s; kept at the end (--keep-cluster)"
    else:
        line = (f"kdrill: created kind cluster {name} in {created_seconds:.0f} s; deleted at the end "
                "(kdrill run --keep-cluster keeps it)")
    _progress_line(config)(line)


def _progress_line(config: pytest.Config):
    """A function that writes one line on the terminal even while pytest captures output: a cold
    image build takes minutes, and its progress must show."""
    capture = config.pluginmanager.getplugin("capturemanager")
    reporter = config.pluginmanager.getplugin("terminalreporter")

    def say(line: str) -> None:
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            if reporter:
                reporter.write_line(line)
            else:
                print(line, flush=True)

    return say


def say_lease_lost(config: pytest.Config, lease: ContextLease) -> None:
    """A session that found its Lease held by another while it ran says so at its end: two
    sessions overlapped on the cluster, and their evidence may show each other's faults."""
    meta = getattr(config, "_kdrill_meta", None)
    if meta is not None and "session_lease" in meta:
        meta["session_lease"]["lost"] = lease.lost
    if lease.lost:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"kdrill: WARNING: this session lost its Lease while it ran: {lease.lost}", red=True)


def context(config: pytest.Config) -> str | None:
    """The kubeconfig context this session drills: the one ``--kdrill-context`` (None: the
    kubeconfig's current one), or in a pytest-xdist worker, that worker's of those given
    (harness.core.workers.worker_context). Raises ProviderError when that cannot be told."""
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


def kind_provider(config: pytest.Config, profile: PlatformProfile | None = None) -> KindProvider:
    """The KindProvider this session drives: ``--kdrill-cluster-config`` and ``--kdrill-cluster-name``
    (default: the config's name), or in pytest-xdist worker gwN, cluster ``<that name>-gwN`` with
    its host ports moved (harness.core.workers). Raises ProviderError."""
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


def _use_kind_cluster(request: pytest.FixtureRequest, provider: KindProvider, created: bool):
    """kdrill_cluster's body for a kind cluster that exists: yield its Cluster; at the end, settle
    the drill namespaces, export the logs when a test failed, and delete the cluster if this
    session created it (unless kept)."""
    opt = request.config.getoption
    cluster = provider.cluster()
    cluster.kind_provider = provider
    yield cluster
    # Every drill namespace whose deletion the drills started is gone before the session ends.
    settle_namespaces(request.config, DELETE_DEADLINE_SECONDS)
    if request.session.testsfailed:
        logs = reports_dir(request.config) / request.config._kdrill_run_id / "logs"
        # Each worker's cluster has its own (kind writes the same top-level files for every cluster).
        provider.export_logs(logs / provider.name if worker_id(request.config) else logs)
    if created and not opt("--kdrill-keep-cluster"):
        provider.delete()
        _progress_line(request.config)(f"kdrill: deleted kind cluster {provider.name}, which this run created")


def settle_namespaces(config: pytest.Config, wait_seconds: float) -> None:
    """Drop the ledger entries of the drill namespaces whose deletion finished, waiting up to
    ``wait_seconds`` for the others; those still there keep their entries (``kdrill recover``)
    and are named on the terminal."""
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
