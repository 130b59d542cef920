"""The rules for the admission objects a data-only scenario declares: a ValidatingAdmissionPolicy
and its binding, a Validating- or MutatingWebhookConfiguration. Each acts only in the drill's own
namespaces, is named after the drill's namespace, and has settings the API server takes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.spec.manifests import expand, name_problem
from harness.spec.model import OWN_NAMESPACE_PREFIX, ScenarioError
from harness.spec.schema_problems import show

# A declared admission webhook must not reach beyond the drill: it is called for every matching
# request in the cluster, and a fail-closed one whose backend is down refuses them all.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def _confined(selector: Any, own: set[str]) -> bool:
    """Whether a namespaceSelector requires ``kubernetes.io/metadata.name In [...]`` of names in
    ``own`` only."""
    expressions = selector.get("matchExpressions") if isinstance(selector, dict) else None
    return any(isinstance(e, dict) and e.get("key") == NAMESPACE_NAME_LABEL and e.get("operator") == "In"
               and isinstance(e.get("values"), list) and e["values"]
               # strings only: a list or mapping among the values is no name (and unhashable)
               and all(isinstance(v, str) for v in e["values"]) and set(e["values"]) <= own
               for e in expressions or [])


def _check_named_after_drill(path: Path, index: int, manifest: dict) -> None:
    """A cluster-scoped admission object (a policy, its binding, a webhook configuration) is named
    after the drill's namespace, ``$(namespace)...``: one name per drill, so two drills' (or two
    cases') objects never collide, and what a drill leaves behind names its drill. Raises
    ScenarioError at ``workload.manifests[index].metadata.name``."""
    if not manifest["metadata"]["name"].startswith(OWN_NAMESPACE_PREFIX.rstrip("-")):
        raise ScenarioError(path, f"workload.manifests[{index}].metadata.name", "a name made from the drill's "
                            f"namespace, $(namespace)... (a {manifest['kind']} is cluster-scoped: one name per "
                            "drill)", repr(manifest["metadata"]["name"]))


def check_policy_scope(path: Path, data: dict, made: list[tuple]) -> None:
    """A declared ValidatingAdmissionPolicy acts only through a declared binding, and both only in
    the drill's own namespaces: every resource rule of the policy is ``scope: Namespaced``, and
    each binding names a declared policy and has a namespaceSelector as a webhook's must.
    Source: https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/
    (matchConstraints, binding matchResources)."""
    own = {"$(namespace)"} | {name for kind, name, _ in made if kind == "Namespace"}
    manifests = (data.get("workload") or {}).get("manifests") or []
    policies = [m["metadata"]["name"] for m in manifests if m["kind"] == "ValidatingAdmissionPolicy"]
    for i, manifest in enumerate(manifests):
        spec = manifest.get("spec") if isinstance(manifest.get("spec"), dict) else {}
        field = f"workload.manifests[{i}].spec"
        if manifest["kind"] in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
            # a binding names its policy by name alone: another binding on the cluster naming a
            # policy called like ours would apply it beyond the drill
            _check_named_after_drill(path, i, manifest)
        if manifest["kind"] == "ValidatingAdmissionPolicy":
            constraints = spec.get("matchConstraints") if isinstance(spec.get("matchConstraints"), dict) else {}
            rules = constraints.get("resourceRules")
            if not isinstance(rules, list) or not rules:
                raise ScenarioError(path, f"{field}.matchConstraints.resourceRules", "a list of rules, each scope: "
                                    "Namespaced", repr(rules))
            for k, rule in enumerate(rules):
                if not isinstance(rule, dict) or rule.get("scope") != "Namespaced":
                    raise ScenarioError(path, f"{field}.matchConstraints.resourceRules[{k}].scope", "Namespaced (a "
                                        "declared policy acts only on objects in the drill's namespaces)",
                                        repr(rule.get("scope") if isinstance(rule, dict) else rule))
        elif manifest["kind"] == "ValidatingAdmissionPolicyBinding":
            if spec.get("policyName") not in policies:
                raise ScenarioError(path, f"{field}.policyName", "a ValidatingAdmissionPolicy the manifests make: "
                                    + (", ".join(policies) or "none"), repr(spec.get("policyName")))
            resources = spec.get("matchResources") if isinstance(spec.get("matchResources"), dict) else {}
            if not _confined(resources.get("namespaceSelector"), own):
                raise ScenarioError(path, f"{field}.matchResources.namespaceSelector", "matchExpressions with "
                                    f"{{key: {NAMESPACE_NAME_LABEL}, operator: In, values: [...]}} naming only the "
                                    "drill's namespaces: " + ", ".join(sorted(own)),
                                    repr(resources.get("namespaceSelector")))


# What the API server's validation of an admissionregistration.k8s.io/v1 webhook refuses (the
# configuration's create fails with 422 only after the setup began): the values it takes.
# Source: https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/
# (side effects, timeouts, webhook names, AdmissionReview versions) and the API reference of
# ValidatingWebhookConfiguration v1.
WEBHOOK_SIDE_EFFECTS = ("None", "NoneOnDryRun")  # v1 takes no other (Unknown and Some were v1beta1's)
WEBHOOK_REVIEW_VERSIONS = ("v1", "v1beta1")  # the AdmissionReview versions an API server sends
WEBHOOK_TIMEOUT_SECONDS = (1, 30)
WEBHOOK_POLICIES = {"failurePolicy": ("Ignore", "Fail"), "matchPolicy": ("Exact", "Equivalent")}
MUTATING_REINVOCATION = ("Never", "IfNeeded")


def _whole_number(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _webhook_api_problem(hook: dict, mutating: bool, drill_namespaces: list[str],
                         earlier: list[str]) -> tuple[str, str, str] | None:
    """What the API server would refuse in one webhook of a declared Validating- or
    MutatingWebhookConfiguration (v1), as (field under the webhook, expected, got), or None.
    ``earlier``: the names (as written) of the configuration's
    webhooks before it, which a name may not repeat."""
    name = hook.get("name")
    for ns in drill_namespaces:
        sent = expand(name, {"namespace": ns}) if isinstance(name, str) else name
        if name_problem(sent) is not None or len(sent.split(".")) < 3:
            shown = f"{sent!r} ($(namespace) is {ns})" if sent != name else repr(name)
            return ("name", "a fully qualified name of at least three DNS labels, e.g. admit-all.kdrill.io (webhook "
                    "name and organisation's domain): lowercase letters, digits, '-' and '.', at most 253 characters",
                    shown)
    if name in earlier:
        return "name", "a name no other webhook of this configuration has", repr(name)
    versions = hook.get("admissionReviewVersions")
    if not isinstance(versions, list) or not versions or not all(isinstance(v, str) for v in versions) \
            or len(set(versions)) != len(versions) or not set(versions) & set(WEBHOOK_REVIEW_VERSIONS):
        return ("admissionReviewVersions", "a list of the AdmissionReview versions the webhook understands, each once, "
                f"with {' or '.join(WEBHOOK_REVIEW_VERSIONS)} among them (required in v1)",
                "nothing" if versions is None else show(versions))
    if hook.get("sideEffects") not in WEBHOOK_SIDE_EFFECTS:
        return ("sideEffects", " or ".join(WEBHOOK_SIDE_EFFECTS) + " (required in v1, which takes no other)",
                "nothing" if "sideEffects" not in hook else show(hook["sideEffects"]))
    if "timeoutSeconds" in hook and not _whole_number(hook["timeoutSeconds"], *WEBHOOK_TIMEOUT_SECONDS):
        return ("timeoutSeconds", "a whole number of seconds from {} to {} (default 10)".format(*WEBHOOK_TIMEOUT_SECONDS),
                show(hook["timeoutSeconds"]))
    policies = {**WEBHOOK_POLICIES, **({"reinvocationPolicy": MUTATING_REINVOCATION} if mutating else {})}
    for key, allowed in policies.items():
        if key in hook and hook[key] not in allowed:
            return key, " or ".join(allowed), show(hook[key])
    service = (hook.get("clientConfig") or {}).get("service") if isinstance(hook.get("clientConfig"), dict) else None
    if isinstance(service, dict) and "port" in service and not _whole_number(service["port"], 1, 65535):
        return "clientConfig.service.port", "a port number from 1 to 65535 (default 443)", show(service["port"])
    return None


def check_webhook_scope(path: Path, data: dict, made: list[tuple], drill_namespaces: list[str]) -> None:
    """Each webhook of a declared Validating/MutatingWebhookConfiguration matches only the
    drill's own namespaces: its rules are ``scope: Namespaced`` (a namespaceSelector does not
    apply to cluster-scoped objects) and its namespaceSelector requires
    ``kubernetes.io/metadata.name In [...]`` of the drill's namespace and namespaces the
    manifests make; and it calls a Service in those namespaces, never a ``url``. The configuration
    is named after the drill's namespace (:func:`_check_named_after_drill`); its settings are
    ones the API server takes (:func:`_webhook_api_problem`), checked for each of
    ``drill_namespaces`` where a name holds ``$(namespace)``.
    Source: https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/
    (matching requests: rules, namespaceSelector; contacting the webhook: url, service)."""
    own = {"$(namespace)"} | {name for kind, name, _ in made if kind == "Namespace"}
    manifests = (data.get("workload") or {}).get("manifests") or []
    for i, manifest in enumerate(manifests):
        if manifest["kind"] not in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            continue
        # a fixed name would meet the configuration of another drill (or case) running meanwhile
        _check_named_after_drill(path, i, manifest)
        webhooks = manifest.get("webhooks")
        if not isinstance(webhooks, list) or not webhooks:
            raise ScenarioError(path, f"workload.manifests[{i}].webhooks", "a list of webhooks", repr(webhooks))
        for j, hook in enumerate(webhooks):
            field = f"workload.manifests[{i}].webhooks[{j}]"
            if not isinstance(hook, dict):
                raise ScenarioError(path, field, "a mapping (one webhook)", repr(hook))
            problem = _webhook_api_problem(hook, manifest["kind"] == "MutatingWebhookConfiguration", drill_namespaces,
                                           [w.get("name") for w in webhooks[:j] if isinstance(w, dict)])
            if problem is not None:
                raise ScenarioError(path, f"{field}.{problem[0]}", problem[1], problem[2])
            _check_webhook_match(path, field, hook, own)
            check_webhook_client(path, field, hook, own, manifests[:i])


def _check_webhook_match(path: Path, field: str, hook: dict, own: set[str]) -> None:
    """The webhook at ``field`` matches only objects in the namespaces of ``own``: rules of
    ``scope: Namespaced`` and a namespaceSelector naming only those. Raises ScenarioError."""
    if not isinstance(hook.get("rules"), list) or not hook["rules"]:
        raise ScenarioError(path, f"{field}.rules", "a list of rules, each scope: Namespaced",
                            repr(hook.get("rules")))
    for k, rule in enumerate(hook["rules"]):
        scope = rule.get("scope") if isinstance(rule, dict) else None
        if scope != "Namespaced":
            raise ScenarioError(path, f"{field}.rules[{k}].scope", "Namespaced (a declared webhook matches only "
                                "objects in the drill's namespaces; the namespaceSelector does not apply to "
                                "cluster-scoped ones)", repr(scope))
    selector = hook.get("namespaceSelector")
    if not _confined(selector, own):
        raise ScenarioError(path, f"{field}.namespaceSelector", "matchExpressions with "
                            f"{{key: {NAMESPACE_NAME_LABEL}, operator: In, values: [...]}} naming only the "
                            "drill's namespaces: " + ", ".join(sorted(own)), repr(selector))


def check_webhook_client(path: Path, field: str, hook: dict, own: set[str], earlier_manifests: list[dict]) -> None:
    """The webhook at ``field`` calls a Service in the namespaces of ``own`` that one of
    ``earlier_manifests`` makes, never a url. Raises ScenarioError."""
    # Where the API server sends what it intercepts (objects, Secrets included): a Service
    # in the drill's namespaces, never a url (which may be outside the cluster).
    client = hook.get("clientConfig")
    service = client.get("service") if isinstance(client, dict) else None
    if not isinstance(client, dict) or "url" in client or not isinstance(service, dict) \
            or service.get("namespace") not in own:
        raise ScenarioError(path, f"{field}.clientConfig", "a service in the drill's namespaces ("
                            + ", ".join(sorted(own)) + "), no url: the API server sends the requests it "
                            "intercepts there, and a drill sends nothing outside the cluster", repr(client)[:200])
    # Its Service made before it: the configuration counts as made once the API server
    # reaches the webhook (harness.engine.workload.serving_problem), which it never would otherwise.
    earlier = [(m["metadata"]["name"], m["metadata"].get("namespace") or "$(namespace)")
               for m in earlier_manifests if m["kind"] == "Service"]
    if (service.get("name"), service["namespace"]) not in earlier:
        raise ScenarioError(path, f"{field}.clientConfig.service", "a Service an earlier manifest makes: "
                            + (", ".join(f"{ns}/{n}" for n, ns in earlier) or "none"),
                            f"{service['namespace']}/{service.get('name')}")

