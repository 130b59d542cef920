"""Test tiers: which built-in drill cases and SIGKILL cases ``python3 -m pytest`` runs (presubmit)
and which only the full tier runs (``--kdrill-tier full``; ``kdrill run`` runs the catalogue).

The presubmit tier is chosen by a rule, not by hand: every fault kind, probe kind, measure kind
and node channel the default catalogue uses (:func:`exercised`) is exercised at least once on a
real cluster, by the cluster tests that run drills to their end (:data:`RUN_BY_CLUSTER_TESTS`)
or by a catalogue case. The cases are picked by a greedy weighted set cover: the case that adds
the most kinds not yet exercised per second of its measured time (``clusters/times/catalogue.yaml``,
written by ``clusters/benchmark_catalogue.py --write-times``), ties by name, until nothing is left;
then each pick the others make redundant is dropped, costliest first.
A kind no built-in scenario uses must be named in :data:`NOT_IN_THE_CATALOGUE` with the reason,
or ``tests/unit/plugin/test_tiers.py`` fails: a kind added without a drill that exercises it is caught.

SIGKILL-and-recover (``tests/cluster/test_recovery.py``): presubmit kills one case per fault kind,
the one whose scenario takes least time; the full tier kills every case of its table.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable

import yaml

from harness.engine.measures import measure_kinds
from harness.faults import fault_kinds
from harness.probes import probe_types

TIERS = ("presubmit", "full")
DEFAULT_TIER = "presubmit"
TIMES_FILE = "times/catalogue.yaml"

# Drill cases that presubmit cluster tests run to their end on the session's clusters: what they
# exercise counts as exercised. Each file names these scenarios (tests/unit/plugin/test_tiers.py checks).
RUN_BY_CLUSTER_TESTS: dict[str, tuple[tuple[str, str | None], ...]] = {
    # One drill through the agent; its full test runs the other four node drills through it.
    "tests/cluster/test_node_agent_cluster.py": (("etcd-defrag", None),),
    "tests/cluster/test_platform_cluster.py": (("webhook-blast-radius", "refused"), ("webhook-blast-radius", "blackhole")),
}
# The node channel each of those tests drills through (a catalogue case on kind: "kind").
CHANNEL_OF_CLUSTER_TESTS = {"tests/cluster/test_node_agent_cluster.py": "node-agent",
                            "tests/cluster/test_platform_cluster.py": "api-only"}

# tests/cluster/test_recovery.py kills every case here (kdrill run, the whole process group) once its
# fault is in force, then runs `kdrill recover`: (scenario, case, the fault kind to wait for, and
# which of its entries). A kill injects the fault on a real cluster with the drill's own params and
# reverts it through the ledger alone (the same revert and verify_reverted as a drill's finally),
# so its fault kind counts as exercised in presubmit (sigkill_credit).
SIGKILLED = [
    # Killed with a fail-closed webhook whose backend is scaled to zero, and which matches that
    # backend's own scale-up: recover's first try at scaling it back is refused, the declared
    # objects (the configuration among them) go, and the retry finds nothing left to scale.
    ("webhook-outage", None, "scale-to-zero", None),
    ("registry-outage", None, "registry-outage", None),
    ("dns-saturation", None, "dns-saturation", "saturate"),
    # Killed with the drill zone in the Corefile: recover puts the saved Corefile back and waits
    # until no kube-dns pod serves the zone.
    ("dns-ndots", None, "dns-drill-zone", None),
    ("etcd-member-loss", None, "etcd-member", None),
    ("control-plane-stop", "node-loss", "control-plane-stop", None),
    # Leaves cluster-scoped objects (FlowSchema, PriorityLevelConfiguration) and a running flood.
    ("api-overload", "confined", "apf-flood", None),
    # Killed while every member's data is moved aside: recover must move it back on every node.
    ("etcd-backup-restore", None, "etcd-restore", None),
    # Killed mid-inject, once the first member's manifest has the small quota (the kubelet is
    # restarting that member; the others are untouched): recover restores that one manifest and
    # leaves the others alone. The kill may come while that node's kubelet is stopped (the fault
    # stops it for the restart): recover must leave it running.
    ("etcd-space-quota", None, "etcd-space-quota", "first-member-edited"),
    # Killed once its own cluster (with an EncryptionConfiguration) is made: recover deletes it.
    ("secrets-at-rest", "encrypted", "drill-cluster", None),
    # Killed with the Service's selector matching no pod: recover puts the recorded selector back.
    ("service-blackhole", None, "service-blackhole", None),
    # Killed with an APIService's backend scaled to zero: recover scales it back, then deletes the
    # declared objects (the APIService, a second namespace) before the drill's namespace.
    ("apiservice-unavailable", None, "scale-to-zero", None),
    # Killed with a fail-closed webhook on pod DELETE whose backend is down: were the namespace
    # deleted before the webhook configuration, its pods could never be deleted (nor it finalised).
    ("webhook-on-pod-delete", None, "scale-to-zero", None),
    # Killed with one of its two registries paused: recover unpauses it, then removes both
    # containers, their hosts.toml on every node and what the nodes pulled from them.
    ("serial-image-pull", None, "registry-outage", None),
    # Killed with a worker frozen (its node container paused): recover unpauses it and waits until
    # the node is Ready again.
    ("worker-node-loss", None, "node-freeze", None),
    # Killed with kube-system's CoreDNS scaled to zero: recover scales it back to the recorded
    # replicas, so names resolve again for every drill after.
    ("coredns-scaled-to-zero", None, "scale-to-zero", None),
    # Killed with a follower's etcd container held to a few write IOPS: recover writes back the
    # cgroup file's line for the disk it recorded, and waits until the member answers a quorum read.
    ("etcd-slow-disk", None, "etcd-slow-disk", None),
]
# Not here: leader-failover (its kill is one crictl stop with the kubelet running, which restarts the
# container at once: nothing is left to undo, its revert only checks the kubelet runs and waits for
# the new leader; recover's removal of what the drill made is the same as every other case's).
# control-plane-stop's components case, killed through the node agent instead
# (tests/cluster/test_node_agent_cluster.py): its control plane must come back from the timers on
# the nodes alone, then recover cleans up from the same ledger entry as on kind.
# secrets-at-rest's planted Secret (it lives about 2 s, inside the drill namespace, which
# recover deletes anyway), etcd-defrag (nothing to undo; its revert only waits for the member) and
# pod-delete (nothing to undo; its revert only waits for the replacements): a kill inside their
# windows would race their own reverts.

# Kinds that presubmit cluster tests exercise directly, with no drill: each built through its
# entry point (a fault through the ledger, injected and reverted), shown succeeding and failing on
# the real cluster. The probe kinds whose only drills take two to three minutes each are here.
EXERCISED_BY_CLUSTER_TESTS: dict[str, tuple[str, ...]] = {
    "tests/cluster/test_command_probe_cluster.py": ("probe:command",),
    "tests/cluster/test_probe_kinds_cluster.py": (
        "probe:api-write", "probe:metric", "probe:image-pulls", "probe:events", "fault:drill-registry",
        "measure:max_value", "measure:first_failure_seconds"),
}

# Kinds installed with kdrill that no built-in scenario uses, each with why it stays.
NOT_IN_THE_CATALOGUE: dict[str, str] = {
    "fault:node-units": "kept so that `kdrill recover` reverts older ledger entries and teams' drill files; "
                        "control-plane-stop's work on the nodes uses its remove_units, exercised there",
    "fault:webhook-outage": "kept for teams' drill files (a webhook configuration's backend taken away by "
                            "name); the built-in webhook drills declare their objects and use scale-to-zero",
    "measure:min_value": "a value measure for teams' metric and node-ready probes; max_value, computed by "
                         "the same code path (measures._values), is exercised",
    "measure:rate_per_second": "a counter measure for teams' metric probes; its samples come from the metric "
                               "probe, exercised by apiservice-unavailable",
}
# Kinds the runner itself makes for every drill, whatever its scenario says.
SCAFFOLDING = ("fault:drill-namespace", "fault:drill-objects")

# A case with no measured time: its declared windows plus this (seconds), or this alone for a
# Python drill. Only a new drill has none; the benchmark writes its time.
UNMEASURED_SETUP_SECONDS = 60.0
UNMEASURED_DRILL_SECONDS = 300.0


def case_id(name: str, case: str | None) -> str:
    """``name`` or ``name[case]``, as the times file and the reports name a case."""
    return f"{name}[{case}]" if case else name


def cases_of(scenario) -> list[str | None]:
    return [c.name for c in scenario.cases] or [None]


def exercised(scenario, case: str | None = None) -> frozenset[str]:
    """What one case of ``scenario`` exercises on a real cluster: ``fault:KIND`` (its fault, and
    the registries and drill cluster it makes), ``probe:KIND``, ``measure:KIND`` and, for a case
    that reaches the nodes, ``channel:kind``."""
    kinds = {f"fault:{scenario.fault_kind}", *SCAFFOLDING}
    if (scenario.workload or {}).get("registries"):
        kinds.add("fault:drill-registry")
    if case == "encrypted" and scenario.name == "secrets-at-rest":
        kinds.add("fault:drill-cluster")  # that case makes a kind cluster of its own
    for probe in (scenario.runner or {}).get("probes") or []:
        kinds.add(f"probe:{probe['kind']}")
    chosen = [c for c in scenario.cases if c.name == case]
    for expectation in (*scenario.expectations, *(chosen[0].expectations if chosen else ())):
        kind = (expectation.measure or {}).get("kind")
        if kind:
            kinds.add(f"measure:{kind}")
    if scenario.needs_node_access:
        kinds.add("channel:kind")
    return frozenset(kinds)


def catalogue(scenarios: Iterable) -> list:
    """The default catalogue: every scenario but those that run only when named."""
    return [s for s in scenarios if not s.on_request]


def sigkill_credit(table: Iterable[tuple] = None) -> frozenset[str]:
    """The fault kinds presubmit's SIGKILL cases inject and recover (one case per kind)."""
    return frozenset(f"fault:{kind}" for _, _, kind, _ in (SIGKILLED if table is None else table))


def credited(scenarios: Iterable) -> frozenset[str]:
    """What the presubmit cluster tests exercise: drills run to their end, kinds exercised
    directly, and the fault kinds the SIGKILL cases inject and recover."""
    by_name = {s.name: s for s in scenarios}
    kinds: set[str] = set()
    for test, cases in RUN_BY_CLUSTER_TESTS.items():
        for name, case in cases:
            if name in by_name:
                kinds |= exercised(by_name[name], case) - {"channel:kind"}
        kinds.add(f"channel:{CHANNEL_OF_CLUSTER_TESTS[test]}")
        if CHANNEL_OF_CLUSTER_TESTS[test] == "node-agent":
            kinds.add("fault:node-agent")  # the agent's privileged pods, in the ledger like a fault
    for direct in EXERCISED_BY_CLUSTER_TESTS.values():
        kinds |= set(direct)
    return frozenset(kinds | sigkill_credit())


def load_times(path: Path) -> dict[str, float]:
    """{case id: seconds} from a times file; empty when there is none. Raises ValueError for a
    file that is not a mapping of case ids to positive seconds."""
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    seconds = data.get("seconds") if isinstance(data, dict) else None
    if not isinstance(seconds, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
            for k, v in seconds.items()):
        raise ValueError(f"{path}: expected `seconds: {{case id: seconds > 0}}`, got {data!r}")
    return {k: float(v) for k, v in seconds.items()}


def cost_seconds(scenario, case: str | None, times: dict[str, float]) -> float:
    """The measured time of a case (seconds), or an estimate for one never measured."""
    if case_id(scenario.name, case) in times:
        return times[case_id(scenario.name, case)]
    windows = (scenario.runner or {}).get("windows")
    if windows:
        return sum(float(v) for v in windows.values()) + UNMEASURED_SETUP_SECONDS
    return UNMEASURED_DRILL_SECONDS


def presubmit_cases(scenarios: Iterable, times: dict[str, float]) -> list[tuple[str, str | None]]:
    """The representative drill set: (scenario name, case) in the order picked (see the module)."""
    scenarios = list(scenarios)
    pool = [(s, c) for s in catalogue(scenarios) for c in cases_of(s)]
    wanted = set().union(*(exercised(s, c) for s, c in pool)) - credited(scenarios)
    chosen: list[tuple[str, str | None]] = []
    while wanted:
        def gain(pair) -> tuple[float, str]:
            s, c = pair
            return len(exercised(s, c) & wanted) / cost_seconds(s, c, times), case_id(s.name, c)

        best = min(pool, key=lambda pair: (-gain(pair)[0], gain(pair)[1]))  # most per second, then by name
        if not exercised(*best) & wanted:
            break  # nothing left can add a kind
        chosen.append((best[0].name, best[1]))
        wanted -= exercised(*best)
        pool.remove(best)
    return _without_redundant(chosen, {s.name: s for s in scenarios}, credited(scenarios), times)


def _without_redundant(chosen: list[tuple[str, str | None]], by_name: dict, covered: frozenset[str],
                       times: dict[str, float]) -> list[tuple[str, str | None]]:
    """Drop, costliest first, each chosen case whose kinds the others (and the credited tests)
    exercise already: a greedy pick made early can be made redundant by later ones."""
    kept = list(chosen)
    for pair in sorted(chosen, key=lambda p: -cost_seconds(by_name[p[0]], p[1], times)):
        others = set(covered).union(*(exercised(by_name[n], c) for n, c in kept if (n, c) != pair))
        if exercised(by_name[pair[0]], pair[1]) <= others:
            kept.remove(pair)
    return kept


def sigkill_presubmit(table: Iterable[tuple], scenarios: Iterable, times: dict[str, float]) -> set[tuple[str, str | None]]:
    """From test_recovery's SIGKILL table (scenario, case, fault kind, step), the case per fault
    kind whose scenario case takes least time (seconds), ties by table order."""
    by_name = {s.name: s for s in scenarios}
    best: dict[str, tuple[float, tuple[str, str | None]]] = {}
    for scenario, case, kind, _step in table:
        seconds = cost_seconds(by_name[scenario], case, times) if scenario in by_name else math.inf
        if kind not in best or seconds < best[kind][0]:
            best[kind] = (seconds, (scenario, case))
    return {pair for _, pair in best.values()}


def installed_kinds() -> frozenset[str]:
    """Every fault, probe and measure kind installed (entry points), prefixed like :func:`exercised`."""

    return frozenset([f"fault:{k}" for k in fault_kinds()] + [f"probe:{k}" for k in probe_types()]
                     + [f"measure:{k}" for k in measure_kinds()])
