"""A data-only scenario's fault acts, in a namespace the drill makes, only on what the drill makes
there; anywhere else only where the scenario says so (``fault.outside_drill``). Checked when the
scenario loads (:func:`check_targets`, called by :func:`harness.faults.check_params`)."""

from __future__ import annotations

from typing import Any

from harness.spec.manifests import APP, OWN_OBJECTS, expand, known_kinds, name_problem
from harness.spec.params import selector_matches
from harness.spec.scenario import ScenarioError, drill_namespace


def check_targets(scenario, fault_type: type) -> None:
    """A data-only scenario's fault acts, in a namespace the drill makes (its own, and each
    Namespace of ``workload.manifests``), only on what the drill makes there: the runner makes
    those namespaces afresh and everything in them (its own objects, spec.manifests.OWN_OBJECTS, and the
    manifests), so any other name there is a typo that would fail only on the cluster, after the
    setup. What a fault acts on is its :meth:`Fault.acts_on` (objects by name) and
    :meth:`Fault.selects_pods` (pods by labels: the selector must match the pod labels of a
    declared Pod, a declared Deployment's or StatefulSet's pod template, or the runner's web
    pods). A target in a namespace the drill does not make (e.g. kube-system, through
    ``target_namespace``) is refused unless the scenario says what it acts on there and why
    (``fault.outside_drill``): the probes measure the drill's own objects, so a namespace typed
    by mistake would drill something else unseen. Names and labels are compared as sent
    (``$(namespace)`` expanded for each case's namespace). Raises ScenarioError naming the
    parameter (``cases[i].params.X`` where a case sets it, else ``fault.params.X``)."""
    if scenario.runner is None:
        return  # a drill file makes its own objects

    manifests = scenario.workload.get("manifests") or []
    outside = "; or a target_namespace outside the drill's, with fault.outside_drill saying why" if "target_namespace" in fault_type.params else ""
    for index, case in enumerate(scenario.cases or [None]):
        namespace = drill_namespace(scenario.name, case.name if case else None)
        params = scenario.params_for(case.name if case else None)

        def sent(value: Any) -> Any:
            return expand(value, {"namespace": namespace})

        def field(param: str) -> str:
            return f"cases[{index}].params.{param}" if case is not None and param in case.params \
                else f"fault.params.{param}"

        # namespace as sent -> (kind, name as sent, name as written) of what is made there, and
        # the labels (as sent) of the pods made there, with what makes them (as written)
        made: dict[str, list[tuple[str, str, str]]] = {namespace: [(k, n, f"{n} (the runner's)")
                                                                   for k, n in OWN_OBJECTS]}
        pods: dict[str, list[tuple[dict, str]]] = {namespace: [({"app": APP}, f"Deployment {APP} (the runner's)")]}
        for manifest in manifests:
            if manifest["kind"] == "Namespace":
                made.setdefault(sent(manifest["metadata"]["name"]), [])
                pods.setdefault(sent(manifest["metadata"]["name"]), [])
        kinds = known_kinds(manifests)
        for manifest in manifests:
            if not kinds[manifest["kind"]].namespaced:
                continue
            where, name = sent(manifest["metadata"].get("namespace") or "$(namespace)"), manifest["metadata"]["name"]
            made[where].append((manifest["kind"], sent(name), name))
            labels = _pod_labels(manifest)
            if labels is not None:
                pods[where].append((sent(labels), f"{manifest['kind']} {name}"))
        def refuse_outside(where: str) -> None:
            if where not in made and name_problem(where, "label") is not None:
                raise ScenarioError(scenario.path, field("target_namespace"), "a namespace name (a DNS label: "
                                    "lowercase letters, digits and '-', at most 63 characters)", repr(where))
            if where not in made and not scenario.fault_outside_drill:
                raise ScenarioError(scenario.path, field("target_namespace"), "a namespace the drill makes ("
                                    + ", ".join(sorted(made)) + "), or fault.outside_drill saying what the fault "
                                    "acts on outside the drill and why", repr(where))

        for param, kind, name, target_namespace in fault_type.acts_on(params):
            where = target_namespace or namespace
            refuse_outside(where)
            if where not in made or any((k, n) == (kind, name) for k, n, _ in made[where]):
                continue
            known = sorted({written for k, _, written in made[where] if k == kind})
            raise ScenarioError(scenario.path, field(param), f"a {kind} the drill makes in {where} (kdrill makes that "
                                "namespace and all that is in it: the runner's own objects and workload.manifests): "
                                + (", ".join(known) or "none") + outside, repr(name))
        for param, selector, target_namespace in fault_type.selects_pods(params):
            where = target_namespace or namespace
            refuse_outside(where)
            if where not in pods or any(selector_matches(selector, labels) for labels, _ in pods[where]):
                continue
            known = "; ".join(f"{what}: " + (",".join(f"{k}={v}" for k, v in labels.items()) or "no labels")
                              for labels, what in pods[where])
            raise ScenarioError(scenario.path, field(param), f"labels matching pods the drill makes in {where} (kdrill "
                                "makes that namespace and all that is in it; their labels: " + (known or "none") + ")"
                                + outside, repr(selector))


def _pod_labels(manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The labels of the pods a declared manifest makes (a Pod's own, a Deployment's, StatefulSet's
    or Job's pod template's), or None for a kind that makes no pod."""
    if manifest["kind"] == "Pod":
        return dict(manifest["metadata"].get("labels") or {})
    if manifest["kind"] in ("Deployment", "StatefulSet", "Job"):
        spec = manifest.get("spec") if isinstance(manifest.get("spec"), dict) else {}
        template = spec.get("template") if isinstance(spec.get("template"), dict) else {}
        metadata = template.get("metadata") if isinstance(template.get("metadata"), dict) else {}
        labels = metadata.get("labels")
        return dict(labels) if isinstance(labels, dict) else {}
    return None
