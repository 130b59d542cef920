"""The rules for a data-only scenario's actions (``runner.actions``): each named once, with one
verb, on an object the manifests make (a Pod of theirs, or of one of their StatefulSets, for an
eviction or a container kill), within its window."""

from __future__ import annotations

import re

from harness.spec.model import ScenarioError
from harness.spec.object_checks import ObjectChecks, ref_text
from harness.spec.schema import ACTION_VERBS


def check_actions(checks: ObjectChecks) -> None:
    """Each action of ``runner.actions``, in order, once the manifests are checked. Raises
    ScenarioError for the first problem."""
    actions = checks.data["runner"].get("actions") or []
    for i, action in enumerate(actions):
        _check_action(checks, i, action, actions)


def _check_action(checks: ObjectChecks, i: int, action: dict, actions: list[dict]) -> None:
    """``runner.actions[i]``."""
    path, data = checks.path, checks.data
    field = f"runner.actions[{i}]"
    first = [a["name"] for a in actions].index(action["name"])
    if first != i:
        # Actions.finish tells an action that never ran by its name.
        raise ScenarioError(path, f"{field}.name", f"an action name unique in the runner (runner.actions[{first}] "
                            "has it)", repr(action["name"]))
    verbs = [verb for verb in ACTION_VERBS if verb in action]
    if len(verbs) != 1:
        raise ScenarioError(path, field, "one of delete (an object), evict (a Pod), scale (a Deployment or "
                            "StatefulSet) or kill_container (a Pod's)", " and ".join(verbs) or "neither")
    verb = verbs[0]
    target = action[verb]
    if "apiVersion" in target:
        raise ScenarioError(path, f"{field}.{verb}.apiVersion", "no apiVersion: an action addresses the object at the "
                            "version it is made at", repr(target["apiVersion"]))
    checks.check_kind(f"{field}.{verb}.kind", target["kind"])
    checks.check_placeholders(f"{field}.{verb}", target)
    checks.check_names(f"{field}.{verb}", target["kind"], target["name"], target.get("namespace"))
    if verb == "kill_container" and not data["cluster"].get("needs_node_access"):
        raise ScenarioError(path, "cluster.needs_node_access", f"true: {field}.kill_container stops a container "
                            "through its node's runtime", repr(data["cluster"].get("needs_node_access", False)))
    if verb == "scale" and target["kind"] not in ("Deployment", "StatefulSet"):
        raise ScenarioError(path, f"{field}.scale.kind", "Deployment or StatefulSet", repr(target["kind"]))
    if verb in ("evict", "kill_container"):
        check_pod_target(checks, field, verb, target)
    elif checks.ref(target["kind"], target["name"], target.get("namespace")) not in checks.made:
        # As written: the namespace left out, or "$(namespace)", for the drill's own.
        raise ScenarioError(path, f"{field}.{verb}", "an object made by workload.manifests, as written there "
                            "(an action never touches what the drill did not make): "
                            + (", ".join(ref_text(*m) for m in checks.made) or "none"),
                            ref_text(*checks.ref(target["kind"], target["name"], target.get("namespace"))))
    windows = data["runner"]["windows"]
    length = windows["hold_seconds" if action["window"] == "fault" else "after_seconds"]
    if action["after_seconds"] >= length:
        raise ScenarioError(path, f"{field}.after_seconds", f"fewer seconds than the {action['window']} window "
                            f"({length} s)", repr(action["after_seconds"]))


def check_pod_target(checks: ObjectChecks, field: str, verb: str, target: dict) -> None:
    """An evicted Pod, one whose container is killed, or a probe's evicted or deleted Pod: a Pod
    the manifests make, or one a declared StatefulSet makes (``<name>-<ordinal>``, a stable name)."""
    path, made = checks.path, checks.made
    if target["kind"] != "Pod":
        raise ScenarioError(path, f"{field}.{verb}.kind", f"Pod (only a pod is {verb}ed)"
                            if verb == "evict" else "Pod", repr(target["kind"]))
    this = checks.ref("Pod", target["name"], target.get("namespace"))
    # The ordinal is read from the name, not looked up in a list of every pod: replicas is
    # the scenario's number, and 10**12 of them must not be enumerated here.
    pods = [n for k, n, _ in made if k == "Pod"]
    sets = [(name, namespace, start, replicas) for name, namespace, start, replicas in _stateful_sets(checks.data)
            if replicas > 0]
    ordinal = re.fullmatch(r"(.+)-(0|[1-9][0-9]*)", this[1])
    if this not in [m for m in made if m[0] == "Pod"] and not (ordinal and any(
            (name, namespace) == (ordinal[1], this[2]) and start <= int(ordinal[2]) < start + replicas
            for name, namespace, start, replicas in sets)):
        raise ScenarioError(path, f"{field}.{verb}", "a Pod made by workload.manifests, or by one of its "
                            "StatefulSets (<name>-<ordinal>): " + (", ".join(
                                pods + [f"{name}-{start}" + (f"..{name}-{start + replicas - 1}" if replicas > 1
                                                             else "")
                                        for name, _, start, replicas in sets]) or "none"),
                            f"Pod {target.get('namespace') + '/' if target.get('namespace') else ''}{target['name']}")


def _stateful_sets(data: dict) -> list[tuple[str, str, int, int]]:
    """(name, namespace as written, first ordinal, replicas) of every StatefulSet the manifests
    make: its pods are <name>-<first> to <name>-<first + replicas - 1>."""
    found = []
    for manifest in (data.get("workload") or {}).get("manifests") or []:
        if manifest["kind"] == "StatefulSet":
            spec = manifest.get("spec") or {}
            # the API's default is 1; a spec that is no mapping makes no pods here (the API refuses it)
            replicas = spec.get("replicas", 1) if isinstance(spec, dict) else 0
            ordinals = spec.get("ordinals") if isinstance(spec, dict) else None
            start = ordinals.get("start", 0) if isinstance(ordinals, dict) else 0  # spec.ordinals.start, default 0
            found.append((manifest["metadata"]["name"], manifest["metadata"].get("namespace") or "$(namespace)",
                          start if type(start) is int and start >= 0 else 0, replicas if type(replicas) is int else 0))
    return found

