"""Faults: the small interface every injected failure implements, and the guarantee around it.

A fault is *recorded before it acts*: :func:`injected` writes the fault's target to the on-disk
ledger, then injects, and reverts in ``finally`` (after an expectation fails, on an error, on
Ctrl-C and on SIGTERM), verifies the revert, and only then removes the ledger entry. After a
crash or ``kill -9`` the entry is still there, and ``kdrill recover`` (:func:`recover`) reverts it.

One module per fault: ``harness/faults/<kind with - as _>.py`` defines one :class:`Fault`
subclass whose ``kind`` is the scenario's ``fault.kind``, registered under the ``kdrill.faults``
entry points (pyproject.toml), where another package can register faults of its own.
"""

from __future__ import annotations

import abc
import json
import logging
import signal
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, ClassVar, Iterator

from harness.core.entry_points import installed
from harness.core.ledger import Ledger, owner_alive
from harness.faults.targets import check_targets
from harness.kube.providers import Cluster, ClusterGone
from harness.spec.params import Param
from harness.spec.params import check as check_param_values
from harness.spec.plugins import (  # noqa: F401
    FAULT_ENTRY_POINTS,
    NODE_ACCESS_LEVELS,
    PluginError,
    data_usable,
    fault_kinds,
    registered_fault,
)
from harness.spec.scenario import ScenarioError

log = logging.getLogger("kdrill.faults")


class FaultError(RuntimeError):
    """A fault could not be injected or reverted."""


class FaultNotReverted(FaultError):
    """After revert, the cluster is still not as it was; the ledger entry is kept."""


class Fault(abc.ABC):
    """A reversible failure of one kind, acting on one cluster.

    Subclasses set ``kind`` and ``needs_node_access``, and implement :meth:`target`,
    :meth:`inject`, :meth:`revert` (idempotent: safe after a partial or no injection) and
    :meth:`verify_reverted`. :meth:`from_target` rebuilds the fault from a ledger entry, so a
    later process can revert it.
    """

    kind: ClassVar[str]
    needs_node_access: ClassVar[bool] = False
    # With needs_node_access: what the fault does on the nodes, as a phrase after "it" (the reason
    # a cluster without node access skips the drill).
    node_capability: ClassVar[str] = ""
    # With needs_node_access: the level it needs (harness.kube.providers.NODE_ACCESS_LEVELS): "exec"
    # through any channel, "kubelet" when it stops what the node agent's exec goes through (and
    # has no revert held on the node, harness.components.node_units),
    # "container" when it needs this machine's Docker engine. Unsaid, the strongest.
    node_access_level: ClassVar[str] = "container"
    # Without needs_node_access: what the fault does on the nodes too when the cluster gives node
    # access ("exec"), as a phrase after "it" (shown by `kdrill run --plan`; without it, it is not done).
    node_access_optional: ClassVar[str] = ""
    # The scenario parameters (``fault.params``, cases' ``params``) this fault and its drill take.
    params: ClassVar[dict[str, Param]] = {}
    # Named times the fault offers a data-only scenario's measures (``from_mark``, ``until_mark``),
    # name -> what it marks: e.g. when a load it started really began, inside its window.
    marks_offered: ClassVar[dict[str, str]] = {}
    # Named values the fault itself measured, which an expectation may bound (``measure: {fact}``),
    # name -> (its unit, what it is): e.g. how many queries went upstream while it acted.
    facts_offered: ClassVar[dict[str, tuple[str, str]]] = {}

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.injected_at: float | None = None
        self.revert_started_at: float | None = None  # the fault window ends here
        self.reverted_at: float | None = None  # revert done (not yet verified)
        self.revert_verified = False
        self._checkpoint: Callable[[], None] = lambda: None

    @abc.abstractmethod
    def target(self) -> dict[str, Any]:
        """What the fault acts on and how to undo it, as JSON-serialisable data."""

    @abc.abstractmethod
    def inject(self) -> None:
        """Make the failure. Call :meth:`checkpoint` after capturing any original state."""

    @abc.abstractmethod
    def revert(self) -> None:
        """Undo the failure; a no-op for whatever was not injected."""

    @abc.abstractmethod
    def verify_reverted(self) -> None:
        """Raise FaultNotReverted unless the target is back as it was."""

    @classmethod
    @abc.abstractmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "Fault":
        """Rebuild the fault from :meth:`target` data (as written to the ledger)."""

    @classmethod
    def node_access_level_for(cls, params: dict[str, Any]) -> str:
        """The node access level the fault needs with ``params`` (a scenario's, or :meth:`target`
        data); one of NODE_ACCESS_LEVELS. Default :attr:`node_access_level`, whatever the params."""
        return cls.node_access_level

    def node_access_needed(self) -> str:
        """The node access level this fault, as configured, needs (:meth:`node_access_level_for`)."""
        return type(self).node_access_level_for(self.target())

    def checkpoint(self) -> None:
        """Write the current :meth:`target` to the ledger (e.g. after saving an original spec)."""
        self._checkpoint()

    def restarts_by_design(self) -> list[str]:
        """kube-system pods whose containers this fault restarts on purpose (they are not counted
        as unexpected kube-system restarts among the vital signs)."""
        return []

    def evidence(self) -> dict[str, Any]:
        """What the fault itself measured or saw (e.g. per-node restore times), for the record."""
        return {}

    def marks(self) -> dict[str, float | None]:
        """The times of :attr:`marks_offered` (epoch seconds), inside the fault window (injection
        to revert start), None for one that did not happen or is not known (a measure narrowed to
        it is then an error, never a pass)."""
        return {}

    def facts(self) -> dict[str, Any]:
        """The values of :attr:`facts_offered`, None for one not measured (its expectation is then
        an error)."""
        return {}

    def facts_evidence(self) -> dict[str, Any]:
        """What the fault saw in measuring its :meth:`facts` (for the record), read after them."""
        return {}

    def where(self) -> list[Any]:
        """The targets, for the evidence record."""
        target = self.target()
        return target.get("nodes") or target.get("where") or [target]

    @classmethod
    def window_problem(cls, params: dict[str, Any], windows: dict[str, float]) -> str | None:
        """Why a data-only scenario's ``windows`` (runner.windows, seconds) cannot hold what this
        fault does with ``params``, as what hold_seconds should be, or None. Default: None."""
        return None

    @classmethod
    def acts_on(cls, params: dict[str, Any]) -> list[tuple[str, str, str, str | None]]:
        """The objects a data-only scenario's ``params`` (a case's merged over the fault's,
        already checked against :attr:`params`) make this fault act on, as (the parameter that
        names it, kind, name, namespace: None for the drill's own), for :func:`harness.faults.targets.check_targets`.
        Default: none named, none checked."""
        return []

    @classmethod
    def params_problem(cls, params: dict[str, Any], manifests: list[dict[str, Any]]) -> tuple[str, str, str] | None:
        """What a scenario's ``params`` (a case's merged over the fault's) need of each other and of
        the declared ``manifests`` (as written) that :attr:`params` cannot say, as (the parameter,
        what is expected, what was got), or None. Default: None."""
        return None

    @classmethod
    def facts_available(cls, params: dict[str, Any]) -> set[str]:
        """The facts of :attr:`facts_offered` the fault measures with ``params``. Default: all."""
        return set(cls.facts_offered)

    @classmethod
    def selects_pods(cls, params: dict[str, Any]) -> list[tuple[str, str, str | None]]:
        """The pods ``params`` make this fault act on by their labels, as (the parameter, its label
        selector, namespace: None for the drill's own), for :func:`harness.faults.targets.check_targets`. Default: none."""
        return []


ENTRY_POINTS = FAULT_ENTRY_POINTS


def fault_class(kind: str) -> type[Fault]:
    """The Fault subclass registered for ``kind`` in the ``kdrill.faults`` entry points. Raises
    FaultError naming the known kinds, or what is wrong with the one registered."""
    try:
        value = registered_fault(kind)
    except PluginError as exc:
        raise FaultError(str(exc)) from exc.__cause__
    if not issubclass(value, Fault):
        found = next(ep for ep in installed(group=ENTRY_POINTS) if ep.name == kind)
        raise FaultError(f"{found.value}, registered as fault kind {kind!r}, is not a Fault with that kind")
    return value


def check_params(scenario) -> None:
    """Check a scenario's fault params (and its cases') against its fault's declared ``params``.
    Raises ScenarioError naming the file and field (FaultError for an unknown fault kind)."""
    fault_type = fault_class(scenario.fault_kind)
    check_param_values(scenario, fault_type.params)
    check_targets(scenario, fault_type)
    check_windows(scenario, fault_type)
    check_params_together(scenario, fault_type)


def check_params_together(scenario, fault_type: type[Fault]) -> None:
    """A scenario's params, in each case, as :meth:`Fault.params_problem` wants them, and (a
    data-only scenario's) every fact an expectation of that case reads (``measure.fact``,
    ``measure.predicted_by``) one the fault measures with them (:meth:`Fault.facts_available`).
    Raises ScenarioError."""
    manifests = scenario.workload.get("manifests") or []
    for index, case in enumerate(scenario.cases or [None]):
        params = scenario.params_for(case.name if case else None)
        problem = fault_type.params_problem(params, manifests)
        if problem is not None:
            param, expected, got = problem
            where = f"cases[{index}].params.{param}" if case is not None and param in case.params \
                else f"fault.params.{param}"
            raise ScenarioError(scenario.path, where, expected, got)
        if scenario.runner is None:
            continue
        available = fault_type.facts_available(params)
        for expectation in scenario.expectations_for(case.name if case else None):
            for key in ("fact", "predicted_by"):
                fact = (expectation.measure or {}).get(key)
                if fact is not None and fact not in available:
                    raise ScenarioError(scenario.path, f"expectation {expectation.name}: measure.{key}",
                                        f"a fact fault {fault_type.kind} measures with "
                                        + (f"case {case.name}'s params" if case else "its params") + ": "
                                        + (", ".join(sorted(available)) or "none with these params"), repr(fact))


def check_windows(scenario, fault_type: type[Fault]) -> None:
    """A data-only scenario's runner windows fit what its fault does with each case's params
    (:meth:`Fault.window_problem`). Raises ScenarioError at ``runner.windows.hold_seconds``."""
    if scenario.runner is None:
        return
    windows = {k: float(v) for k, v in scenario.runner["windows"].items()}
    for case in scenario.cases or [None]:
        problem = fault_type.window_problem(scenario.params_for(case.name if case else None), windows)
        if problem is not None:
            raise ScenarioError(scenario.path, "runner.windows.hold_seconds", problem,
                                f"{windows['hold_seconds']:g}" + (f" (case {case.name})" if case else ""))


def raise_interrupt(signum, frame) -> None:
    """A signal handler that raises KeyboardInterrupt, so SIGTERM unwinds like Ctrl-C."""
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt like Ctrl-C, so ``finally`` blocks revert on both."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _revert_not_interruptible() -> Iterator[None]:
    """A second Ctrl-C during a revert would leave the cluster broken: note it and carry on."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    held: list[int] = []

    def hold(signum, frame):
        held.append(signum)
        log.warning("revert in progress; it finishes first (the fault stays in the ledger until then)")

    prev_int = signal.signal(signal.SIGINT, hold)
    prev_term = signal.signal(signal.SIGTERM, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, prev_int)
        signal.signal(signal.SIGTERM, prev_term)
    if held:  # the interrupt was only postponed: the run stops now that the fault is reverted
        raise KeyboardInterrupt(f"signal {held[0]} during the revert")


def revert_and_verify(fault: Fault, ledger: Ledger, entry_id: str) -> None:
    """Revert, verify, and drop the ledger entry only when verified. Raises FaultNotReverted."""
    with _revert_not_interruptible():
        fault.revert_started_at = time.time()
        fault.revert()
        fault.reverted_at = time.time()
        fault.verify_reverted()
        fault.revert_verified = True
        ledger.remove(entry_id)
        log.info("%s reverted and verified", fault.kind)


def recorded(fault: Fault, ledger: Ledger, drill: str | None = None):
    """Write ``fault``'s ledger entry (its kind, cluster and target) before it acts: the one way
    an entry is written, so ``kdrill recover`` can revert what follows. Returns the entry."""
    return ledger.record(fault.kind, cluster=fault.cluster.describe(), target=fault.target(), drill=drill)


@contextmanager
def injected(fault: Fault, ledger: Ledger, drill: str | None = None) -> Iterator[Fault]:
    """Record, inject, yield, and always revert ``fault``.

    The ledger entry is written before :meth:`Fault.inject` runs and removed only after a
    verified revert. Raises whatever inject raised (after reverting), or FaultNotReverted.
    """
    if fault.needs_node_access:
        fault.cluster.require_node_access(f"fault {fault.kind}", fault.node_access_needed())
    entry = recorded(fault, ledger, drill)
    fault._checkpoint = lambda: ledger.update(entry.id, **fault.target())
    with _terminate_as_interrupt():
        try:
            fault.injected_at = time.time()
            log.info("%s injecting: %s", fault.kind, fault.target())
            fault.inject()
            fault.checkpoint()
            ledger.mark_injected(entry.id)
            yield fault
        finally:
            revert_and_verify(fault, ledger, entry.id)


# How long recover waits for a cluster's API server to answer before it gives up on the entries
# only the API can revert. A deadline, not a measurement: the drills measure the API back within
# 25 s of a control-plane fault's revert; a cluster left half up (its node containers restarted
# with the Docker engine) would otherwise cost every entry its full deletion deadline, twice.
API_ANSWER_SECONDS = 60


def api_silence(cluster: Cluster, seconds: float | None = None) -> str | None:
    """Why the API server of ``cluster`` is taken as silent: every ``GET /api/v1`` for at least
    ``seconds`` (default :data:`API_ANSWER_SECONDS`; asked again 2 s after each failure, and one
    ask may take up to 20 s against a server that never answers: the client's 3 retries of 5 s)
    failed to connect (refused, reset, TLS cut by the load balancer, timed out); the last error and
    how long it was tried. None as soon as it answers, with any HTTP status, and when the check
    cannot be made at all (a kubeconfig that does not load: the revert meets and reports that)."""
    import urllib3

    started = time.monotonic()
    deadline = started + (API_ANSWER_SECONDS if seconds is None else seconds)
    while True:
        try:
            cluster.core.get_api_resources(_request_timeout=5)
            return None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        except Exception:  # noqa: BLE001 - an HTTP status is an answer; anything else is the revert's to report
            return None
        if time.monotonic() >= deadline:
            return f"no answer in {time.monotonic() - started:.0f} s; last: {last}"
        threading.Event().wait(2.0)  # the poll interval


def recover(ledger: Ledger, cluster_for: Callable[[dict], Cluster], force: bool = False,
            only: Callable[[Any], bool] | None = None) -> list[dict]:
    """Revert every fault still in ``ledger`` (those ``only`` takes, given one: e.g. one
    context's); returns one result per entry tried.

    ``cluster_for`` turns an entry's ``cluster`` dict into a Cluster. An entry whose revert
    fails is kept, with the error in its result, so ``kdrill recover`` can be run again. An entry
    only the API can revert (its fault needs no node access) is not tried while the cluster's API
    server does not answer (:func:`api_silence`); it says so, and is kept. An entry whose
    recording process is alive is left to it, unless ``force`` (the pid may have been reused by an
    unrelated process).
    """
    # Newest first, as a finally would: a drill's namespace goes after the fault made inside it
    # is reverted (deleting it needs the control plane that fault may have stopped).
    def entries() -> list:
        return [e for e in reversed(ledger.entries()) if only is None or only(e)]

    results = _recover_pass(ledger, entries(), cluster_for, force)
    # A revert can be blocked by what an older entry removes: scaling a webhook's backend back up
    # is an UPDATE that its own fail-closed configuration refuses until the drill's objects (that
    # configuration among them) are deleted. Those get one more try, once something was undone on
    # the cluster (not for an entry left to a live kdrill, a corrupt one, or a cluster that is gone).
    undone = any(r["reverted"] and not (r["error"] or "").startswith("nothing to revert") for r in results)
    failed = {r["id"] for r in results if not r["reverted"] and not (r["error"] or "").startswith("owned by")
              and "cannot be read" not in (r["error"] or "")}
    if failed and undone:
        first = {r["id"]: r["error"] for r in results}
        again = {r["id"]: r for r in _recover_pass(ledger, [e for e in entries() if e.id in failed],
                                                   cluster_for, force)}
        for result in again.values():  # what the first try met stays on record
            result["error"] = f"first try: {first[result['id']]}" + (f"; retry: {result['error']}"
                                                                     if result["error"] else "; the retry succeeded")
        results = [again.get(r["id"], r) for r in results]
    return results


def _recover_pass(ledger: Ledger, entries: list, cluster_for: Callable[[dict], Cluster], force: bool) -> list[dict]:
    """One pass of :func:`recover` over ``entries``, in that order."""
    cluster_for = _once_per_cluster(cluster_for)
    results = []
    started: set[str] = set()
    silent: dict[str, str | None] = {}  # entry's cluster (as JSON) -> why its API server is silent

    def key(entry) -> str:
        return json.dumps(entry.cluster, sort_keys=True, default=str)

    def api_silent(entry, cluster: Cluster) -> str | None:
        # Asked once per cluster until a fault reverted on its nodes may have changed the answer.
        if key(entry) not in silent:
            silent[key(entry)] = api_silence(cluster)
        return silent[key(entry)]

    for index, entry in enumerate(entries):
        result = {"id": entry.id, "kind": getattr(entry, "kind", None), "reverted": False, "error": None}
        if entry.id not in started and getattr(entry, "kind", None) == "drill-namespace":
            # The namespaces that come next, with nothing else between them, are deleted together:
            # each takes several seconds to finalise, even empty.
            started |= _start_namespace_deletions(entries[index:], cluster_for, force, api_silent)
        if not force and owner_alive(entry):
            # A live kdrill on this machine owns it and will revert it in its own finally.
            result["error"] = (f"owned by running kdrill pid {entry.pid}; left to it "
                               "(if that process is not kdrill, run kdrill recover --force)")
            results.append(result)
            continue
        try:
            if getattr(entry, "corrupt", False):
                raise FaultError(f"ledger entry {getattr(entry, 'path', entry.id)} cannot be read "
                                 f"({getattr(entry, 'error', 'unknown error')}); inspect it by hand")
            try:
                cluster = cluster_for(entry.cluster)
            except ClusterGone as gone:
                # The fault went with its cluster: nothing is left broken, so the entry goes too.
                ledger.remove(entry.id)
                result.update(reverted=True, error=f"nothing to revert: {gone}")
                results.append(result)
                continue
            kind = fault_class(entry.kind)
            silence = None if kind.needs_node_access else api_silent(entry, cluster)
            if silence:
                raise FaultNotReverted(
                    f"not tried: the API server of cluster {cluster.name} does not answer "
                    f"({silence}); bring the cluster back (or delete it) and run kdrill recover again")
            fault = kind.from_target(cluster, entry.target)
            # What the revert learns on the way (etcd-restore: the outcomes it acted on) is kept,
            # as in the drill's own revert: a later recover must not redo it from what is gone.
            fault._checkpoint = lambda f=fault, e=entry: ledger.update(e.id, **f.target())
            try:
                revert_and_verify(fault, ledger, entry.id)
            finally:
                if kind.needs_node_access and fault.revert_started_at is not None:
                    # Undone on the nodes (even if its verification then failed), it may have been
                    # what kept the API server down: ask again. One that never got to its revert
                    # changed nothing, and each ask of a silent server costs up to a minute.
                    silent.pop(key(entry), None)
            result["reverted"] = True
        except Exception as exc:  # every entry gets its try; the error is reported, not raised
            result["error"] = f"{type(exc).__name__}: {exc}"
        results.append(result)
    return results


def _once_per_cluster(cluster_for: Callable[[dict], Cluster]) -> Callable[[dict], Cluster]:
    """``cluster_for`` asked once per entry cluster, its answer (a Cluster or the exception it
    raised) given to every entry of that cluster: looking up a node-agent cluster may wait a
    minute for its API server (harness.cli.cluster_for_entry). Per pass: the retry asks again."""
    found: dict[str, Any] = {}

    def once(entry_cluster: dict) -> Cluster:
        key = json.dumps(entry_cluster, sort_keys=True, default=str)
        if key not in found:
            try:
                found[key] = cluster_for(entry_cluster)
            except Exception as exc:  # noqa: BLE001 - each entry of that cluster meets the same error
                found[key] = exc
        if isinstance(found[key], Exception):
            raise found[key]
        return found[key]

    return once


def _start_namespace_deletions(entries: list, cluster_for: Callable[[dict], Cluster], force: bool,
                               api_silent: Callable[[Any, Cluster], str | None]) -> set[str]:
    """Start deleting the namespaces of the leading run of ``drill-namespace`` entries (not those
    a live kdrill owns, unless ``force``, nor those on a cluster whose API server ``api_silent``
    says does not answer: each ask would wait out the client's retries), without waiting;
    :func:`recover` then reverts and verifies each in turn. Returns the ids of the entries looked
    at. Errors are left to the revert, which meets them again."""
    looked: set[str] = set()
    for entry in entries:
        if getattr(entry, "kind", None) != "drill-namespace" or getattr(entry, "corrupt", False):
            break
        looked.add(entry.id)
        if not force and owner_alive(entry):
            continue
        try:
            cluster = cluster_for(entry.cluster)
            if api_silent(entry, cluster):
                continue  # the revert says why it is not tried
            fault_class(entry.kind).from_target(cluster, entry.target).start_deletion()
        except Exception as exc:  # noqa: BLE001 - the revert below tries again and reports
            log.info("could not start deleting namespace %s: %s", entry.target.get("namespace"), exc)
    return looked
