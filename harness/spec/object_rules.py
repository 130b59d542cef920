"""The rules for the objects a data-only scenario makes: its registries, its manifests (kinds the
runner knows, known placeholders, names and namespaces the API takes once ``$(namespace)`` is
expanded, each object made once, a Namespace only under a name made from the drill's namespace,
namespaced ones only in the drill's namespace or one the manifests make) and its serving
certificate. :func:`check_objects` runs them, then those of the admission objects, the probes and
the actions, in the order a problem is reported."""

from __future__ import annotations

from pathlib import Path

from harness.spec.action_rules import check_actions
from harness.spec.admission_rules import check_policy_scope, check_webhook_client, check_webhook_scope
from harness.spec.manifests import (
    KINDS,
    OWN_OBJECTS,
    OWNER_LABEL,
    TLS_PLACEHOLDERS,
    apiservice_problem,
    crd_problem,
    expand,
    name_problem,
    placeholders,
    tls_key_misplaced,
)
from harness.spec.model import OWN_NAMESPACE_PREFIX, ScenarioError
from harness.spec.object_checks import ObjectChecks
from harness.spec.probe_rules import check_probes
from harness.spec.rbac_rules import check_rbac


def check_objects(path: Path, data: dict) -> None:
    """The objects a data-only scenario names: kinds the runner knows, known placeholders, names
    and namespaces the API takes once ``$(namespace)`` is expanded (their only placeholder), each
    object made once, a Namespace only under a name made from the drill's namespace, namespaced
    ones only in the drill's namespace or one the manifests make, probes with the fields their
    kind needs, and actions only on objects the manifests make, within their window. Raises
    ScenarioError for the first problem."""
    checks = ObjectChecks(path, data)
    _check_registries(checks)
    made_sent: dict[tuple, int] = {}  # (drill namespace, kind, name, namespace as sent) -> manifest index
    for i, manifest in enumerate((data.get("workload") or {}).get("manifests") or []):
        _check_manifest(checks, i, manifest, made_sent)
    check_webhook_scope(path, data, checks.made, checks.drill_namespaces)
    check_policy_scope(path, data, checks.made)
    _check_tls(checks)
    check_probes(checks)
    check_actions(checks)


def _check_registries(checks: ObjectChecks) -> None:
    """Each registry and image named once; registries only with node access."""
    data = checks.data
    registries = (data.get("workload") or {}).get("registries") or []
    for where, names in (("workload.registries", [r["name"] for r in registries]),
                         ("workload.registries[].images", checks.images)):
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ScenarioError(checks.path, where, "each name once (a manifest names an image by it alone)",
                                ", ".join(twice))
    if registries and not data["cluster"].get("needs_node_access"):
        raise ScenarioError(checks.path, "cluster.needs_node_access", "true: workload.registries writes the nodes' "
                            "containerd configuration", repr(data["cluster"].get("needs_node_access", False)))


def _check_manifest(checks: ObjectChecks, i: int, manifest: dict, made_sent: dict[tuple, int]) -> None:
    """``workload.manifests[i]``, then counted as made (``checks.made``, ``checks.declared``)."""
    field = f"workload.manifests[{i}]"
    _check_manifest_fields(checks, field, manifest)
    this = checks.ref(manifest["kind"], manifest["metadata"]["name"], manifest["metadata"].get("namespace"))
    _check_manifest_place(checks, field, manifest, this)
    # Compared as sent: "$(namespace)-c" and its expansion written out are one object.
    for ns in checks.drill_namespaces:
        sent = (ns, *(expand(part, {"namespace": ns}) if part is not None else None for part in this))
        if sent in made_sent:
            raise ScenarioError(checks.path, f"{field}.metadata.name", f"an object not made twice (workload.manifests"
                                f"[{made_sent[sent]}] makes it too)", f"{this[0]} {this[1]} again")
        made_sent[sent] = i
    checks.made.append(this)
    checks.declared[this] = (field, manifest)


def _check_manifest_fields(checks: ObjectChecks, field: str, manifest: dict) -> None:
    """A known kind at its apiVersion, known placeholders, a Namespace named after the drill's,
    no owner label of its own."""
    path = checks.path
    checks.check_kind(f"{field}.kind", manifest["kind"])
    checks.check_placeholders(field, manifest, checks.manifest_only, workers=True)
    if manifest["kind"] in checks.served:
        checks.check_kind(f"{field}.kind", manifest["kind"], manifest["apiVersion"])
    elif manifest["apiVersion"] != KINDS[manifest["kind"]].api_version:
        raise ScenarioError(path, f"{field}.apiVersion", f"{KINDS[manifest['kind']].api_version!r} for a "
                            f"{manifest['kind']}", repr(manifest["apiVersion"]))
    _check_finalizers(checks, field, manifest)
    if manifest["kind"] == "Namespace" and not str(manifest["metadata"]["name"]).startswith(OWN_NAMESPACE_PREFIX):
        # The drill's namespace is kdrill's by name (kdrill-<scenario>), and so is any name
        # built on it; kube-system, default or a tenant's namespace is not, even one that does
        # not exist yet (kdrill would create it, then delete it with what others put there),
        # and a declared namespace is where the manifests after it, and actions, may act.
        raise ScenarioError(path, f"{field}.metadata.name", f"a name made from the drill's namespace, "
                            f"{OWN_NAMESPACE_PREFIX}<suffix>: kdrill creates and deletes only namespaces "
                            "named after its own", repr(manifest["metadata"]["name"]))
    if OWNER_LABEL in (manifest["metadata"].get("labels") or {}):
        # kdrill sets it to the ledger entry's token; a scenario's value would be replaced.
        raise ScenarioError(path, f"{field}.metadata.labels.{OWNER_LABEL}", f"no {OWNER_LABEL} label: kdrill "
                            "labels the objects it makes itself", repr(manifest["metadata"]["labels"][OWNER_LABEL]))


def _check_finalizers(checks: ObjectChecks, field: str, manifest: dict) -> None:
    """Finalizers only on an object of the scenario's own custom kind, each named under that kind's
    group (``<group>/<name>``): kdrill's revert may remove those, and only those, when the
    controller that owns them is gone (a finalizer of another's would keep the object for ever)."""
    finalizers = manifest["metadata"].get("finalizers")
    if finalizers is None:
        return
    if manifest["kind"] not in checks.served:
        raise ScenarioError(checks.path, f"{field}.metadata.finalizers", "no finalizers, except on an object of a "
                            "kind the scenario's own CustomResourceDefinition defines", repr(finalizers))
    group = checks.kinds[manifest["kind"]].api_version.split("/")[0]
    for i, name in enumerate(finalizers):
        rest = name[len(group) + 1:] if name.startswith(f"{group}/") else ""
        if not rest or name_problem(rest, "label"):
            raise ScenarioError(checks.path, f"{field}.metadata.finalizers[{i}]", f"{group}/<name> (a finalizer "
                                f"of the kind's own group; <name> lowercase letters, digits and '-')", repr(name))


def _check_manifest_place(checks: ObjectChecks, field: str, manifest: dict, this: tuple) -> None:
    """In the drill's namespace or one an earlier manifest makes, under names the API takes, and
    not one of the objects the runner makes itself."""
    path = checks.path
    namespaces = ["$(namespace)"] + [name for kind, name, _ in checks.made if kind == "Namespace"]
    if this[2] is not None and this[2] not in namespaces:
        raise ScenarioError(path, f"{field}.metadata.namespace", "the drill's namespace ($(namespace), the "
                            "default) or a Namespace made by an earlier manifest: "
                            + ", ".join(namespaces), repr(this[2]))
    checks.check_names(f"{field}.metadata", manifest["kind"], manifest["metadata"]["name"],
                       manifest["metadata"].get("namespace"))
    problem = {"APIService": apiservice_problem, "CustomResourceDefinition": crd_problem}.get(
        manifest["kind"], lambda m: None)(manifest)
    if problem:
        where, expected, got = problem
        raise ScenarioError(path, f"{field}.{where}", expected, got)
    if manifest["kind"] == "CustomResourceDefinition":
        webhook = (manifest["spec"].get("conversion") or {}).get("webhook")
        if webhook is not None:
            # Where the API server sends the objects it converts: a Service of the drill's, as for
            # an admission webhook.
            own = {"$(namespace)"} | {name for kind, name, _ in checks.made if kind == "Namespace"}
            check_webhook_client(path, f"{field}.spec.conversion.webhook", webhook, own,
                                 [m for _, m in checks.declared.values()])
        if manifest["spec"]["names"]["kind"] in checks.served:
            raise ScenarioError(path, f"{field}.spec.names.kind", "a kind no earlier CustomResourceDefinition "
                                "defines", repr(manifest["spec"]["names"]["kind"]))
        checks.define(manifest)
    if manifest["kind"] in ("ClusterRole", "ClusterRoleBinding"):
        check_rbac(checks, field, manifest)
    if this[2] == "$(namespace)" and this[:2] in OWN_OBJECTS:
        raise ScenarioError(path, f"{field}.metadata.name", "a name other than those of the objects the runner "
                            "makes in the drill's namespace itself: " + ", ".join(f"{k} {n}" for k, n in OWN_OBJECTS),
                            repr(this[1]))


def _check_tls(checks: ObjectChecks) -> None:
    """``workload.tls`` names a Service the manifests make in the drill's namespace; ``$(tls_key)``
    only in a Secret's stringData; ``$(tls_*)`` only with ``workload.tls``."""
    path, made = checks.path, checks.made
    manifests = (checks.data.get("workload") or {}).get("manifests") or []
    tls = (checks.data.get("workload") or {}).get("tls")
    if tls is not None and ("Service", tls["service"], "$(namespace)") not in made:
        raise ScenarioError(path, "workload.tls.service", "a Service made by workload.manifests in the drill's namespace: "
                            + (", ".join(n for k, n, ns in made if k == "Service" and ns == "$(namespace)") or "none"),
                            repr(tls["service"]))
    for i, manifest in enumerate(manifests):
        misplaced = tls_key_misplaced(manifest)
        if misplaced:
            raise ScenarioError(path, f"workload.manifests[{i}]", "$(tls_key) only in the stringData of a Secret",
                                misplaced)
    if tls is None:
        for i, manifest in enumerate(manifests):
            used = sorted(placeholders(manifest) & set(TLS_PLACEHOLDERS))
            if used:
                raise ScenarioError(path, f"workload.manifests[{i}]", "$(tls_*) placeholders only with workload.tls "
                                    "(the Service the certificate is made for)", ", ".join(f"$({u})" for u in used))
