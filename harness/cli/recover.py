"""``kdrill recover``: revert every fault the ledger still holds (after a crash), on the cluster
each entry names, and remove what recovering left behind (a node agent, a dead session's Lease)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from harness import faults
from harness.core.ledger import Ledger
from harness.kube.providers import Cluster, ClusterGone, ProviderError, existing, node_agent
from harness.kube.providers.kind import KindProvider
from harness.kube.session_lock import ContextLease
from harness.kube.workloads import TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY
from harness.scaffolding.node_agent import NodeAgentPods


def entry_cluster_problem(entry_cluster: dict) -> str | None:
    """What is wrong with a ledger entry's ``cluster`` (as :meth:`Cluster.describe` wrote it), or
    None. A field missing or of the wrong type must not resolve to another cluster: no kubeconfig
    would be $KUBECONFIG's current context, and a kind name that is no cluster reads as "gone",
    which drops the entry unreverted."""
    provider = entry_cluster.get("provider")
    required = {"kind": ("name",), "existing": ("kubeconfig", "context")}.get(provider)
    if required is None:
        return f"provider: expected 'kind' or 'existing', got {provider!r}"
    for key in required:
        value = entry_cluster.get(key)
        if not isinstance(value, str) or not value:
            return f"{key}: expected the {provider} cluster's {key} (text), got {value!r}"
    if provider == "existing" and entry_cluster.get("node_channel", "agent") != "agent":
        return f"node_channel: expected 'agent' or nothing, got {entry_cluster.get('node_channel')!r}"
    return None


def entry_context(entry_cluster: dict) -> str | None:
    """The context a ledger entry's ``cluster`` was recorded for (a kind cluster's ``kind-NAME``
    when none was recorded), or None for a malformed one."""
    if not isinstance(entry_cluster, dict):
        return None
    context = entry_cluster.get("context")
    if not context and entry_cluster.get("provider") == "kind" and isinstance(entry_cluster.get("name"), str):
        return f"kind-{entry_cluster['name']}"
    return context if isinstance(context, str) else None


def cluster_for_entry(entry_cluster: dict, kubeconfig: str | None = None) -> Cluster:
    """The cluster a ledger entry's ``cluster`` names, reached as the fault reached it (through the
    node agent when it did); an existing cluster through ``kubeconfig`` when given, else the one
    recorded. Raises ClusterGone for a kind cluster that no longer exists, ProviderError for a
    malformed entry or an API server that does not answer."""
    problem = entry_cluster_problem(entry_cluster)
    if problem:  # kept in the ledger (not ClusterGone): a person decides which cluster it was
        raise ProviderError(f"the entry's cluster is malformed ({problem}): fix the entry's cluster or revert by "
                            f"hand; recorded as {entry_cluster!r}"[:600])
    if entry_cluster.get("provider") == "kind":
        provider = KindProvider(name=entry_cluster["name"])
        if not provider.exists():
            raise ClusterGone(f"kind cluster {entry_cluster['name']} no longer exists")
        return provider.cluster(kubeconfig=entry_cluster.get("kubeconfig"))
    cluster = existing.existing_cluster(kubeconfig or entry_cluster.get("kubeconfig"), entry_cluster.get("context"))
    if entry_cluster.get("node_channel") == "agent":
        # What was done through the node agent is undone through it (its namespace is in the
        # ledger too, and recover deletes it after the faults that used it).
        # Right after a control-plane fault the API server can be up on its nodes and still not
        # answer through the cluster's endpoint (a load balancer marks its backends up only after
        # its own health checks): wait for it as the API-only reverts do.
        silence = faults.api_silence(cluster)
        if silence:
            raise ProviderError(f"the API server of context {entry_cluster['context']} does not answer ({silence}); "
                                "what kdrill did through the node agent is undone through it: bring the cluster "
                                "back and run kdrill recover again")
        cluster.node_access = True
        cluster.node_agent = node_agent.NodeAgent(cluster, TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY)
        cluster.nodes_by_role = node_agent.nodes_by_role(cluster)
    return cluster


def _scope_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with --context or --kubeconfig (refused before anything is reverted), or None."""
    if args.context is not None and not args.context.strip():
        return "--context: expected a context name, got an empty value (leave it out for every entry)"
    if not args.kubeconfig:
        return None
    try:
        config = yaml.safe_load(Path(args.kubeconfig).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        return f"--kubeconfig: expected a kubeconfig file, got {args.kubeconfig} ({type(exc).__name__})"
    if not isinstance(config, dict) or not isinstance(config.get("contexts"), list):
        return f"--kubeconfig: expected a kubeconfig (a mapping with contexts), got {args.kubeconfig}"
    return None


def _contexts_not_in_kubeconfig(kubeconfig: str | None, entries: list) -> list[str]:
    """The contexts of existing-cluster ``entries`` that ``kubeconfig`` (checked by
    :func:`_scope_problem`) does not define; none without a kubeconfig."""
    if not kubeconfig:
        return []
    defined = {c.get("name") for c in yaml.safe_load(Path(kubeconfig).read_text())["contexts"] if isinstance(c, dict)}
    wanted = {entry_context(e.cluster) for e in entries if not e.corrupt and isinstance(e.cluster, dict)
              and e.cluster.get("provider") == "existing"}
    return sorted(c for c in wanted if c and c not in defined)


def cmd_recover(args: argparse.Namespace) -> int:
    """Revert every fault in the ledger; exit 0 when each is reverted (and any node agent made here
    removed), 1 otherwise, 2 for a --ledger-dir that does not exist."""
    if args.ledger_dir and not Path(args.ledger_dir).is_dir():
        # A misspelt directory must not read as "nothing to revert".
        print(f"kdrill recover: no ledger directory {args.ledger_dir}", file=sys.stderr)
        return 2
    problem = _scope_problem(args)
    if problem:
        print(f"kdrill recover: {problem}", file=sys.stderr)
        return 2
    ledger = Ledger(Path(args.ledger_dir) if args.ledger_dir else None)
    entries = ledger.entries()
    if not entries:
        print(f"kdrill recover: the ledger ({ledger.directory}) holds no fault; nothing to revert")
        return 0
    print(f"kdrill recover: {len(entries)} fault(s) in {ledger.directory}")
    only = None
    if args.context is not None:
        recorded = sorted({c for e in entries if not e.corrupt and (c := entry_context(e.cluster))})
        if args.context not in recorded:
            # A misspelt context must not read as "nothing to revert" either.
            print(f"kdrill recover: --context: expected a context the ledger holds entries for ("
                  f"{', '.join(recorded) or 'none'}), got {args.context!r}", file=sys.stderr)
            return 2

        def only(entry) -> bool:  # a corrupt entry is tried too: its failure is reported, never hidden
            return entry.corrupt or entry_context(entry.cluster) == args.context

        left = sum(not only(e) for e in entries)
        print(f"  only context {args.context}: {len(entries) - left} entry(ies); {left} of other contexts left as they are")
    missing = _contexts_not_in_kubeconfig(args.kubeconfig, [e for e in entries if only is None or only(e)])
    if missing:
        print(f"kdrill recover: --kubeconfig {args.kubeconfig}: expected the contexts its entries were recorded for, "
              f"got none of {', '.join(missing)}", file=sys.stderr)
        return 2
    agents, by_context = [], {}

    def cluster_for(entry_cluster: dict) -> Cluster:
        cluster = cluster_for_entry(entry_cluster, args.kubeconfig)
        if cluster.node_agent is not None:
            agents.append(cluster)
        if cluster.provider == "existing":
            by_context[cluster.context] = cluster
        return cluster

    results = faults.recover(ledger, cluster_for, force=args.force, only=only)
    for r in results:
        print(f"  {'reverted' if r['reverted'] else 'NOT REVERTED'}  {r['kind']}  {r['id']}"
              + (f"  ({r['error']})" if r["error"] else ""))
    removed = _remove_node_agents(agents)
    _remove_dead_leases(by_context.values())
    return 0 if removed and all(r["reverted"] for r in results) else 1


def _remove_node_agents(agents: list[Cluster]) -> bool:
    """Remove the node agents recovering made anew; returns whether every one is gone.

    A revert through the node agent whose session had already removed it made the agent anew:
    no ledger entry holds that namespace, so it goes here (its pods end themselves after 4 hours
    should this process be killed first)."""
    removed = True
    for cluster in agents:
        if cluster.node_agent.made_namespace:
            try:
                NodeAgentPods(cluster).revert()
                NodeAgentPods(cluster).verify_reverted()
                print(f"  removed  the node agent kdrill recover started on context {cluster.context}")
            except Exception as exc:  # noqa: BLE001 - said, and the exit status says it
                removed = False
                print(f"  NOT REMOVED  the node agent kdrill recover started on context {cluster.context} ({exc})")
    return removed


def _remove_dead_leases(clusters) -> None:
    """The session Lease of a kdrill killed on this machine goes too (a live session's stays)."""
    for cluster in clusters:
        try:
            gone = ContextLease(cluster).remove_if_dead()
            if gone:
                print(f"  removed  {gone}, on context {cluster.context}")
        except Exception as exc:  # noqa: BLE001 - said; it expires by itself
            print(f"  note  the session Lease on context {cluster.context} was not checked ({exc}); "
                  "a dead session's expires by itself")
