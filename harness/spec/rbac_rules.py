"""The rules for the RBAC objects a data-only scenario declares: a ClusterRole and its
ClusterRoleBinding, for a controller the drill runs (e.g. an operator owning a finalizer on the
scenario's own custom resource). Both are cluster-scoped, so both are confined: the role grants
only the reads and writes a controller needs on the kinds the scenario's own
CustomResourceDefinitions define, and the binding gives it only to a ServiceAccount the scenario
makes. Source: "Using RBAC Authorization",
https://kubernetes.io/docs/reference/access-authn-authz/rbac/ (ClusterRole, ClusterRoleBinding,
referring to subjects)."""

from __future__ import annotations

from typing import Any

from harness.spec.model import OWN_NAMESPACE_PREFIX, ScenarioError

RBAC_GROUP = "rbac.authorization.k8s.io"
# What a controller of the scenario's own kind may do with it: read, watch and change (finalizers,
# status), never create or delete objects, nor anything on other kinds.
CONTROLLER_VERBS = ("get", "list", "watch", "patch", "update")


def _strings(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)


def check_rbac(checks, field: str, manifest: dict) -> None:
    """The manifest at ``field`` (``workload.manifests[i]``), a ClusterRole or ClusterRoleBinding, named after the drill's
    namespace and confined as the module says (``checks``: the scenario's
    :class:`harness.spec.object_checks.ObjectChecks`, with the manifests before it). Raises
    ScenarioError."""
    if not manifest["metadata"]["name"].startswith(OWN_NAMESPACE_PREFIX.rstrip("-")):
        raise ScenarioError(checks.path, f"{field}.metadata.name", "a name made from the drill's namespace, "
                            f"$(namespace)... (a {manifest['kind']} is cluster-scoped: one name per drill)",
                            repr(manifest["metadata"]["name"]))
    if manifest["kind"] == "ClusterRole":
        _check_role(checks, field, manifest)
    else:
        _check_binding(checks, field, manifest)


def _check_role(checks, field: str, manifest: dict) -> None:
    """Only rules on the scenario's custom kinds (declared before it), with controller verbs."""
    own = {kind.api_version.split("/")[0]: set() for kind in (checks.kinds[k] for k in checks.served)}
    for kind in (checks.kinds[k] for k in checks.served):
        own[kind.api_version.split("/")[0]].update({kind.plural, f"{kind.plural}/status"})
    if "aggregationRule" in manifest:
        raise ScenarioError(checks.path, f"{field}.aggregationRule", "no aggregationRule (it would take in the "
                            "rules of other ClusterRoles)", repr(manifest["aggregationRule"]))
    rules = manifest.get("rules")
    if not isinstance(rules, list) or not rules:
        raise ScenarioError(checks.path, f"{field}.rules", "a list of rules", repr(rules))
    for i, rule in enumerate(rules):
        where = f"{field}.rules[{i}]"
        if not isinstance(rule, dict) or set(rule) - {"apiGroups", "resources", "verbs"}:
            raise ScenarioError(checks.path, where, "{apiGroups, resources, verbs} only (no resourceNames nor "
                                "nonResourceURLs)", repr(rule))
        groups, resources, verbs = rule.get("apiGroups"), rule.get("resources"), rule.get("verbs")
        if not _strings(groups) or not set(groups) <= set(own):
            raise ScenarioError(checks.path, f"{where}.apiGroups", "groups of the scenario's own "
                                "CustomResourceDefinitions, declared before it: " + (", ".join(sorted(own)) or "none"),
                                repr(groups))
        allowed = set().union(*(own[g] for g in groups))
        if not _strings(resources) or not set(resources) <= allowed:
            raise ScenarioError(checks.path, f"{where}.resources", "their kinds' plurals (or <plural>/status): "
                                + ", ".join(sorted(allowed)), repr(resources))
        if not _strings(verbs) or not set(verbs) <= set(CONTROLLER_VERBS):
            raise ScenarioError(checks.path, f"{where}.verbs", "a controller's verbs among "
                                + ", ".join(CONTROLLER_VERBS), repr(verbs))


def _check_binding(checks, field: str, manifest: dict) -> None:
    """The scenario's own ClusterRole, to ServiceAccounts the scenario makes."""
    roles = [name for kind, name, _ in checks.made if kind == "ClusterRole"]
    ref = manifest.get("roleRef")
    if not isinstance(ref, dict) or ref.get("apiGroup") != RBAC_GROUP or ref.get("kind") != "ClusterRole" \
            or ref.get("name") not in roles:
        raise ScenarioError(checks.path, f"{field}.roleRef", f"{{apiGroup: {RBAC_GROUP}, kind: ClusterRole, name}} "
                            "of a ClusterRole an earlier manifest makes: " + (", ".join(roles) or "none"), repr(ref))
    accounts = [(ns, name) for kind, name, ns in checks.made if kind == "ServiceAccount"]
    subjects = manifest.get("subjects")
    if not isinstance(subjects, list) or not subjects:
        raise ScenarioError(checks.path, f"{field}.subjects", "a list of ServiceAccounts", repr(subjects))
    for i, subject in enumerate(subjects):
        got = (subject.get("namespace"), subject.get("name")) if isinstance(subject, dict) else None
        if not isinstance(subject, dict) or subject.get("kind") != "ServiceAccount" or got not in accounts:
            raise ScenarioError(checks.path, f"{field}.subjects[{i}]", "{kind: ServiceAccount, name, namespace} of "
                                "a ServiceAccount an earlier manifest makes (namespace written as there): "
                                + (", ".join(f"{ns}/{n}" for ns, n in accounts) or "none"), repr(subject))
