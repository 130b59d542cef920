"""``kdrill run --plan``: what a run would do, read from the scenarios and past runs only.

Nothing is touched: no cluster, no Docker, no ledger. For each drill case: the fault (kind,
method, what it acts on, from the fault's own description), its windows (every ``*_seconds``
parameter), whether it needs node access, the expectations it checks, and its expected duration:
the duration of its record in the most recent intact run under the reports directory that has
one (harness/evidence/history.py), or "unknown".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.components.registry import registry_host
from harness.core.progress import minutes
from harness.evidence.history import list_runs
from harness.evidence.report import scan_records
from harness.faults import fault_class
from harness.kube.objects import KINDS, known_kinds
from harness.kube.providers import NODE_ACCESS_LEVELS
from harness.spec.scenario import ACTION_VERBS, Scenario, registry_images


def _ref_text(kind: str, name: str, namespace: str | None, kinds: dict = KINDS) -> str:
    """An object as the plan names it; placeholders stay as written ($(namespace): the drill's).
    ``kinds``: the runner's, and those the scenario's CustomResourceDefinitions define."""

    if kind in kinds and kinds[kind].namespaced:
        return f"{kind} {namespace or '$(namespace)'}/{name}"
    return f"{kind} {name}"

def past_durations(reports: Path) -> dict[str, tuple[float, str]]:
    """``drill`` or ``drill[case]`` -> (seconds, run id) from the newest intact run that has it."""

    found: dict[str, tuple[float, str]] = {}
    if not Path(reports).is_dir():
        return found
    for run in reversed(list_runs(Path(reports))):
        if run.seal != "intact":
            continue
        for _, record in scan_records(Path(reports) / run.run_id)[0]:
            label = str(record.get("drill")) + (f"[{record['case']}]" if record.get("case") else "")
            seconds = record.get("duration_seconds")
            if (label not in found and isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
                    and 0 < seconds < 86400 and record.get("verdict") != "not-run"):
                found[label] = (float(seconds), run.run_id)
    return found


def expected_seconds(s: Scenario, case: str | None, durations: dict[str, tuple[float, str]]) -> tuple[float, str] | None:
    """A drill case's expected duration and where it comes from: its record in a past run
    (``durations``, :func:`past_durations`), else a data-only scenario's windows (setup not
    counted); None when there is neither."""
    past = durations.get(s.name + (f"[{case}]" if case else ""))
    if past is None and s.runner is not None:
        past = (float(sum(s.runner["windows"].values())), "its windows alone; setup not counted")
    return past


# What an existing cluster's node channel gives, as the plan can tell without touching it.
EXISTING_NODE_AGENT = "the node agent gives exec only"
EXISTING_NO_AGENT = ("without --node-agent only a kind cluster on this machine's Docker gives node access (all "
                     "levels); any other cluster none, and these drills are then skipped")


def _access(s: Scenario, case: str | None = None, existing: str | None = None) -> str:
    """What the drill reaches: the API, and the node access levels it needs (the node agent gives
    ``exec`` only; kind's docker exec gives all; harness/kube/providers/__init__.py). ``existing``: what
    an existing cluster's channel gives (None: a kind cluster kdrill makes)."""
    if not s.needs_node_access:
        optional = fault_class(s.fault_kind).node_access_optional if s.fault_kind else ""
        return f"the API only; with node access (exec) it also {optional}" if optional else "the API only"
    levels = sorted({level for level, _ in s.node_access_levels(case)}, key=NODE_ACCESS_LEVELS.index)
    gives = existing or "kind gives all; the node agent, --node-agent, gives exec only"
    skipped = existing == EXISTING_NODE_AGENT and any(level != "exec" for level in levels)
    return f"the API and node access: {', '.join(levels)} ({gives}{': skipped there' if skipped else ''})"


def _case_facts(s: Scenario, case: str | None, durations: dict) -> tuple[str, dict, dict, tuple | None]:
    """(label, the fault's params but its windows, the windows in seconds, (expected seconds,
    from what) or None) of one case."""
    fault = fault_class(s.fault_kind)
    params: dict[str, Any] = s.params_for(case)
    # Windows: the fault's declared durations (not its timeouts), or the runner's.
    windows = {k: v for k, v in params.items() if getattr(fault.params.get(k), "kind", None) == "seconds"
               and "timeout" not in k}
    if s.runner is not None:
        windows.update(s.runner["windows"])
    others = {k: v for k, v in params.items() if k not in windows}
    return s.name + (f"[{case}]" if case else ""), others, windows, expected_seconds(s, case, durations)


def plan_data(scenarios: list[Scenario], reports: Path, target: str, existing: str | None = None) -> dict:
    """The plan as data (``kdrill run --plan -o json``): the target and, per case, its scenario
    file, fault and params, windows (seconds), node access, checks and expected seconds (None
    when no intact past run says)."""
    durations = past_durations(reports)
    cases = []
    for s in scenarios:
        for case in [c.name for c in s.cases] or [None]:
            label, others, windows, past = _case_facts(s, case, durations)
            cases.append({"case": label, "scenario": s.name, "title": s.title, "file": str(s.path),
                          "fault": {"kind": s.fault_kind, "params": others}, "windows_seconds": windows,
                          "access": _access(s, case, existing),
                          "cluster_config": None if existing else s.cluster_config,
                          "expectations": len(s.expectations_for(case)),
                          "detection": [d.to_dict() for d in s.detection_for(case)],
                          "expected_seconds": past[0] if past else None, "expected_from": past[1] if past else None})
    known = [c["expected_seconds"] for c in cases]
    return {"target": target, "touches_nothing": True, "cases": cases,
            "expected_seconds": None if None in known else sum(known)}


def plan(scenarios: list[Scenario], reports: Path, target: str, clusters: int = 1,
         existing: str | None = None) -> tuple[str, float | None]:
    """The plan as text, and the expected total in seconds (None when a drill has no past run).
    ``clusters``: how many clusters share the cases (harness/core/workers.py); the text then gives the
    least wall time that sharing allows, the total being the cases' sum either way. ``existing``:
    on an existing cluster, what its node channel gives (EXISTING_NODE_AGENT or EXISTING_NO_AGENT;
    None: a kind cluster, made from each scenario's cluster config)."""
    durations = past_durations(reports)
    lines = [f"kdrill run --plan: {len(scenarios)} scenario(s) on {target}; nothing is touched"]
    total, unknown, from_windows, longest = 0.0, [], 0, 0.0
    for s in scenarios:
        for case in [c.name for c in s.cases] or [None]:
            label, others, windows, past = _case_facts(s, case, durations)
            if past is not None and label not in durations:  # at least its windows
                from_windows += 1
            if past is None:
                unknown.append(label)
            else:
                total += past[0]
                longest = max(longest, past[0])
            expected = (f"about {past[0]:.0f} s ({'run ' if not past[1].startswith('its') else ''}{past[1]})"
                        if past else "unknown (no intact past run)")
            lines += [
                f"\n{label}: {s.title}",
                f"  file       {s.path}",
                f"  fault      {s.fault_kind}: {', '.join(f'{k}={v}' for k, v in others.items()) or 'no parameters'}",
                f"  windows    {', '.join(f'{k} {v}' for k, v in windows.items()) or 'none declared'}",
                f"  access     {_access(s, case, existing)}"
                + ("" if existing else f"; cluster config {s.cluster_config}"),
                *([f"  on nodes   it {'; it '.join(f'{phrase} [{level}]' for level, phrase in s.node_access_levels(case))}"]
                  if s.needs_node_access else []),
                *([f"  registry   container kdrill-registry-<cluster>-{r['name']} beside the nodes, pulled from as "
                   f"{registry_host(r['name'])} (each node's containerd told so), images pushed: "
                   f"{', '.join(n if b == 'pause' else f'{n} (on {b})' for n, b in registry_images(r))} "
                   "(removed after the drill, with what the nodes pulled)"
                   for r in s.workload.get("registries") or []]),
                *([f"  creates    {', '.join(_ref_text(m['kind'], m['metadata']['name'], m['metadata'].get('namespace'), known_kinds(s.workload['manifests'])) for m in s.workload['manifests'])}"
                   " (through the ledger; deleted newest first after the drill)"]
                  if s.workload.get("manifests") else []),
                *([f"  action     {a['window']} +{a['after_seconds']} s: {verb.replace('_', ' ')} "
                   + (f"{a[verb]['container']} of " if verb == "kill_container" else "")
                   + f"{_ref_text(a[verb]['kind'], a[verb]['name'], a[verb].get('namespace'), known_kinds(s.workload.get('manifests') or []))}"
                   + (f" to {a[verb]['replicas']} replicas" if verb == "scale" else "")
                   for a in (s.runner or {}).get("actions") or []
                   for verb in [next(v for v in ACTION_VERBS if v in a)]]),
                *([f"  abort      when probe {s.runner['abort']['probe']} fails without a break for more than "
                   f"{s.runner['abort']['max_failing_seconds']} s (the fault is reverted at once)"]
                  if s.runner is not None and s.runner.get("abort") else []),
                *(["  probes     " + ", ".join(f"{p['name']} ({p['kind']})" for p in s.runner["probes"])]
                  if s.runner is not None else []),
                f"  checks     {len(s.expectations_for(case))} expectations, and the vital signs",
                *(["  detection  " + "; ".join(f"{d.alert} firing within {d.fires_within_seconds:g} s, resolved within "
                                              f"{d.resolves_within_seconds:g} s of the revert" for d in detection)
                   + " (read from a Prometheus, when one is named)"] if (detection := s.detection_for(case)) else []),
                f"  expected   {expected}",
            ]
    cases = sum(len(s.cases) or 1 for s in scenarios)
    from_past = cases - len(unknown) - from_windows
    known = minutes(total)
    sources = ", ".join(([f"{from_past} from past runs"] if from_past else [])
                        + ([f"{from_windows} from their windows alone, setup not counted"] if from_windows else []))
    if unknown and not total:
        text = f"unknown: no intact past run of {', '.join(unknown)}"
    else:
        text = f"{known} for {cases - len(unknown)} of {cases} cases ({sources})" + (
            f"; unknown for {', '.join(unknown)} (no intact past run)" if unknown else "")
    lines.append(f"\nexpected drill time: {text}" + ("" if existing else " (plus the cluster's creation when it "
                                                                       "does not exist)"))
    if clusters > 1 and total:
        # Each case runs whole on one cluster: the wall time is at least the longest case, and at
        # least an even share; contention on this machine's cores makes it more (measured, README).
        least = max(total / clusters, longest)
        lines.append(f"on {clusters} clusters in parallel: at least {least / 60:.0f} min of that"
                     f"{' known part' if unknown else ''} (an even share, or the longest case, {longest:.0f} s), "
                     "more where the clusters share this machine's cores")
    return "\n".join(lines), (None if unknown else total)
