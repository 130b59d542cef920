"""The rules for how a scenario is run: by a drill file or by the runner (a data-only scenario,
``runner:``), and for a data-only one what its runner section holds: its workload's keys and
replicas, its probes' names and their calls, its abort guard, the registry its fault takes down,
then its objects (:mod:`harness.spec.object_rules`) and measures (:mod:`harness.spec.measure_rules`)."""

from __future__ import annotations

import difflib
from pathlib import Path

from harness.spec.measure_rules import check_measures, expectation_lists, pod_ips_probes
from harness.spec.model import ScenarioError
from harness.spec.object_rules import check_objects
from harness.spec.schema import MAX_PROBE_INTERVAL_SECONDS

# The timelines the vital signs write into every record (harness/engine/vitals.py): no probe of a
# scenario may have one of these names.
VITAL_SIGN_TIMELINES: tuple[str, ...] = ("api_read", "api_write", "nodes")
# The runner's probe pod stops after this many calls in all (harness/probes/incluster.py), and its
# steady state before the baseline may take up to this long (harness/engine/runner.py).
PROBE_POD_MAX_REQUESTS = 20000
PROBE_STEADY_SECONDS = 60
WORKLOAD_KEYS = ("replicas", "node_port", "manifests", "tls", "registries")  # what the runner reads


def check_runner(path: Path, data: dict) -> None:
    """A scenario has a drill file or a runner section (data-only), not both; a data-only one says
    for each expectation what the runner measures, on a probe it declares. Raises ScenarioError
    for the first problem."""
    if "drill" in data and "runner" in data:
        raise ScenarioError(path, "runner", "no runner section: the drill file runs this scenario", "a runner section")
    if "drill" not in data and "runner" not in data:
        raise ScenarioError(path, "drill", "a drill file (drills/test_<x>.py), or a runner section for a "
                            "data-only scenario", "neither")
    if "runner" not in data:
        _check_drill_file_scenario(path, data)
        return
    _check_workload_keys(path, data)
    check_objects(path, data)
    replicas = (data.get("workload") or {}).get("replicas", 2)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= 20:
        raise ScenarioError(path, "workload.replicas", "a whole number of pods from 1 to 20 for the runner's "
                            "HTTP server", repr(replicas))
    _check_probe_names(path, data)
    _check_probe_pod_calls(path, data, replicas)
    _check_abort_probe(path, data)
    _check_registry_outage(path, data)
    _check_abort_seconds(path, data)
    check_measures(path, data)


def _check_drill_file_scenario(path: Path, data: dict) -> None:
    """A scenario its drill file runs declares no objects, registries or measures for the runner."""
    for key in ("manifests", "registries"):
        if key in (data.get("workload") or {}):
            raise ScenarioError(path, f"workload.{key}", f"no {key}: they are for data-only scenarios "
                                "(the runner creates them); the drill file makes its own objects", key)
    for where, items in expectation_lists(data):
        for i, item in enumerate(items):
            if "measure" in item:
                raise ScenarioError(path, f"{where}[{i}].measure", "no measure: the drill file measures "
                                    "(measure is for data-only scenarios)", repr(item["measure"]))


def _check_workload_keys(path: Path, data: dict) -> None:
    """A data-only scenario's workload has only the keys the runner reads: a misspelt one
    (``manifest:``) would silently drop what it declares. (A drill file may read keys of its own.)"""
    for key in (data.get("workload") or {}):
        if key not in WORKLOAD_KEYS:
            close = difflib.get_close_matches(str(key), WORKLOAD_KEYS, n=1)
            raise ScenarioError(path, f"workload.{key}", "one of " + ", ".join(WORKLOAD_KEYS)
                                + (f" (did you mean {close[0]}?)" if close else ""), repr(key))


def _check_probe_names(path: Path, data: dict) -> None:
    """Each probe named once, not as a vital sign's timeline; a host-http probe on the workload's NodePort."""
    probes = [p["name"] for p in data["runner"]["probes"]]
    for i, name in enumerate(probes):
        if probes.index(name) != i:
            raise ScenarioError(path, f"runner.probes[{i}].name", "a probe name unique in the runner", repr(name))
        if name in VITAL_SIGN_TIMELINES:
            # The record keeps one timeline per name: a probe named so would be overwritten by the
            # vital sign's (or pass its samples off as the vital sign's).
            raise ScenarioError(path, f"runner.probes[{i}].name", "a name that is not a vital sign's timeline ("
                                + ", ".join(VITAL_SIGN_TIMELINES) + ")", repr(name))
    for i, p in enumerate(data["runner"]["probes"]):
        if p["kind"] == "host-http" and p.get("node_port") != (data.get("workload") or {}).get("node_port"):
            raise ScenarioError(path, f"runner.probes[{i}].node_port", "workload.node_port, the NodePort the runner "
                                f"gives its web Service ({(data.get('workload') or {}).get('node_port', 'none declared')})",
                                repr(p.get("node_port")))


def _check_probe_pod_calls(path: Path, data: dict, replicas: int) -> None:
    """The probe pod's calls are bounded in count (the log the runner reads back stays small): its
    targets (one per pod for pod-ips) over the windows and the steady-state wait before them."""
    pod_ips = pod_ips_probes(data)
    in_pod = [p for p in data["runner"]["probes"] if p["kind"] in ("incluster-http", "incluster-dns")]
    calls_per_round = sum(replicas if p["name"] in pod_ips else 1 for p in in_pod)
    interval = float((data.get("probes") or {}).get("interval_seconds", MAX_PROBE_INTERVAL_SECONDS))
    seconds = sum(data["runner"]["windows"].values()) + PROBE_STEADY_SECONDS
    if in_pod and calls_per_round * seconds / interval > PROBE_POD_MAX_REQUESTS:
        raise ScenarioError(path, "runner.probes", f"at most {PROBE_POD_MAX_REQUESTS} calls from the probe pod: its "
                            "targets (a pod-ips probe's one per replica) x (the windows + "
                            f"{PROBE_STEADY_SECONDS} s of steady state) / probes.interval_seconds",
                            f"{calls_per_round} targets x {seconds:g} s / {interval:g} s = "
                            f"{calls_per_round * seconds / interval:.0f} calls")


def _check_abort_probe(path: Path, data: dict) -> None:
    """The abort guard watches an incluster-http probe of one target."""
    guard = data["runner"].get("abort")
    # A pod-ips probe's calls to every pod are one timeline: it keeps answering while any pod does.
    pod_ips = pod_ips_probes(data)
    http_probes = [p["name"] for p in data["runner"]["probes"] if p["kind"] == "incluster-http" and p["name"] not in pod_ips]
    if guard is not None and guard["probe"] in pod_ips:
        raise ScenarioError(path, "runner.abort.probe", "an incluster-http probe of one target (name, clusterip or a "
                            "declared Service): a pod-ips probe keeps answering while any one pod does, so the "
                            f"guard would not see a pod fail: {', '.join(http_probes) or 'none declared'}",
                            repr(guard["probe"]))
    if guard is not None and guard["probe"] not in http_probes:
        # The guard reads the in-cluster probe pod's log while the fault holds; other kinds'
        # samples are not there, so it would see nothing and trip on every run.
        raise ScenarioError(path, "runner.abort.probe", f"one of the incluster-http probes: {', '.join(http_probes)}",
                            repr(guard["probe"]))


def _check_registry_outage(path: Path, data: dict) -> None:
    """A registry-outage fault takes down a registry the workload declares."""
    registry = (data["fault"].get("params") or {}).get("registry")
    declared = [r["name"] for r in (data.get("workload") or {}).get("registries") or []]
    if data["fault"]["kind"] == "registry-outage" and registry not in declared:
        raise ScenarioError(path, "fault.params.registry",
                            f"one of workload.registries: {', '.join(declared) or '(none declared)'}",
                            repr(registry) if registry is not None else "nothing")


def _check_abort_seconds(path: Path, data: dict) -> None:
    """The abort guard can trip: it allows fewer failing seconds than the fault window holds."""
    guard = data["runner"].get("abort")
    if guard is not None and guard["max_failing_seconds"] >= data["runner"]["windows"]["hold_seconds"]:
        raise ScenarioError(path, "runner.abort.max_failing_seconds", "fewer seconds than runner.windows."
                            f"hold_seconds ({data['runner']['windows']['hold_seconds']}): a guard that can trip",
                            repr(guard["max_failing_seconds"]))
