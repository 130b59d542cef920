"""harness.components.admission: which writes the API server sends to a webhook, predicted from
its configuration alone, and what becomes of a write when webhook backends are down.
Source: https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/"""

from __future__ import annotations

import copy

import pytest

from harness.components.admission import (
    Match,
    Webhook,
    Write,
    expected_outcome,
    label_selector_matches,
    matches,
    webhooks_from,
)

CONFIGMAPS = {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}


def hook_dict(**fields) -> dict:
    """One webhooks[] entry: CREATE of core v1 configmaps, a service client config, sideEffects None."""
    return copy.deepcopy({"name": "check.kdrill.io", "clientConfig": {"service": {"namespace": "drill", "name": "svc"}},
                          "rules": [CONFIGMAPS], "sideEffects": "None", "admissionReviewVersions": ["v1"], **fields})


def config(*hooks: dict, name: str = "cfg", kind: str | None = None) -> dict:
    return {"metadata": {"name": name}, "webhooks": list(hooks), **({"kind": kind} if kind else {})}


def hook(type_: str = "validating", name: str = "cfg", **fields) -> Webhook:
    return webhooks_from(config(hook_dict(**fields), name=name), type_)[0]


def write(**fields) -> Write:
    return Write(**{"operation": "CREATE", "group": "", "version": "v1", "resource": "configmaps",
                    "namespace": "drill", **fields})


def rule(**fields) -> dict:
    return {**CONFIGMAPS, **fields}


# --- configurations and defaults ------------------------------------------------------------

def test_api_defaults_are_applied():
    h = hook()
    assert (h.failure_policy, h.timeout_seconds, h.service, h.url, h.match_policy) == \
           ("Fail", 10.0, ("drill", "svc", 443), None, "Equivalent")
    assert h.rules[0]["scope"] == "*" and h.namespace_selector is None and h.match_conditions == ()
    assert h.id == "validating/cfg/check.kdrill.io"


def test_given_values_are_kept():
    h = hook("mutating", failurePolicy="Ignore", timeoutSeconds=3, matchPolicy="Exact", sideEffects="NoneOnDryRun",
             clientConfig={"url": "https://hook.example:8443/x"}, rules=[rule(scope="Namespaced")])
    assert (h.type, h.failure_policy, h.timeout_seconds, h.match_policy, h.side_effects, h.service, h.url) == \
           ("mutating", "Ignore", 3.0, "Exact", "NoneOnDryRun", None, "https://hook.example:8443/x")
    assert h.rules[0]["scope"] == "Namespaced" and h.id == "mutating/cfg/check.kdrill.io"


def test_a_configuration_without_webhooks_has_none():
    assert webhooks_from({"metadata": {"name": "empty"}}, "validating") == []


def test_webhooks_keep_their_order_and_the_input_is_not_shared():
    cfg = config(hook_dict(name="a.kdrill.io"), hook_dict(name="b.kdrill.io"))
    hooks = webhooks_from(cfg, "mutating")
    assert [h.name for h in hooks] == ["a.kdrill.io", "b.kdrill.io"]
    cfg["webhooks"][0]["rules"][0]["resources"].append("secrets")
    assert hooks[0].rules[0]["resources"] == ["configmaps"]


@pytest.mark.parametrize("configuration, type_, field, got", [
    (["not", "a", "dict"], "validating", "<configuration>", "'list'"),
    ({"webhooks": []}, "validating", "metadata.name", "None"),
    (config(), "admitting", "type", "'admitting'"),
    (config(kind="MutatingWebhookConfiguration"), "validating", "kind", "'MutatingWebhookConfiguration'"),
    ({"metadata": {"name": "cfg"}, "webhooks": {"name": "x"}}, "validating", "webhooks", "'dict'"),
    (config(hook_dict(failurePolicy="Never")), "validating", "webhooks[0].failurePolicy", "'Never'"),
    (config(hook_dict(timeoutSeconds=45)), "validating", "webhooks[0].timeoutSeconds", "45"),
    (config(hook_dict(sideEffects="Maybe")), "validating", "webhooks[0].sideEffects", "'Maybe'"),
    (config(hook_dict(rules=[rule(scope="Global")])), "validating", "webhooks[0].rules[0].scope", "'Global'"),
    (config(hook_dict(rules=[rule(operations=["PATCH"])])), "validating", "webhooks[0].rules[0].operations", "'PATCH'"),
    (config(hook_dict(clientConfig={})), "validating", "webhooks[0].clientConfig", "{}"),
    (config(hook_dict(name="")), "validating", "webhooks[0].name", "''"),
    (config(hook_dict(failure_policy="Ignore")), "validating", "webhooks[0]", "['failure_policy']"),
])
def test_bad_configuration_names_configuration_field_expected_and_got(configuration, type_, field, got):
    with pytest.raises(ValueError) as info:
        webhooks_from(configuration, type_)
    message = str(info.value)
    name = "'cfg'" if isinstance(configuration, dict) and configuration.get("metadata") else "'?'"
    assert message.startswith(f"webhook configuration {name}: {field}: expected "), message
    assert message.endswith(f", got {got}"), message


def test_a_bad_selector_operator_is_refused_with_its_field():
    selector = {"matchExpressions": [{"key": "tier", "operator": "Gt", "values": ["1"]}]}
    with pytest.raises(ValueError, match=r"'cfg': webhooks\[0\]\.namespaceSelector: matchExpressions\[0\]\.operator: "
                                         r"expected one of In, NotIn, Exists, DoesNotExist, got 'Gt'"):
        webhooks_from(config(hook_dict(namespaceSelector=selector)), "validating")


# --- label selectors ------------------------------------------------------------------------

LABELS = {"env": "prod", "tier": "web"}


@pytest.mark.parametrize("selector, expected", [
    (None, True),
    ({}, True),
    ({"matchLabels": {"env": "prod"}}, True),
    ({"matchLabels": {"env": "dev"}}, False),
    ({"matchLabels": {"env": "prod", "team": "a"}}, False),  # every pair must hold
    ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "staging"]}]}, True),
    ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev"]}]}, False),
    ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}, False),  # absent key
    ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]}, False),
    ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}, True),  # absent key
    ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, True),
    ({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, False),
    ({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, True),
    ({"matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]}, False),
    ({"matchLabels": {"env": "prod"}, "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["web"]}]},
     False),  # matchLabels AND matchExpressions
])
def test_label_selector(selector, expected):
    assert label_selector_matches(selector, LABELS) is expected


@pytest.mark.parametrize("selector, text", [
    ({"matchExpressions": [{"key": "env", "operator": "Equals", "values": ["prod"]}]}, "got 'Equals'"),
    ({"matchExpressions": [{"key": "env", "operator": "In", "values": []}]}, "at least one value for In"),
    ({"matchExpressions": [{"key": "env", "operator": "Exists", "values": ["x"]}]}, "none for Exists"),
    ({"match_labels": {"env": "prod"}}, "camelCase"),
])
def test_label_selector_refuses_what_the_api_would(selector, text):
    with pytest.raises(ValueError, match=text):
        label_selector_matches(selector, LABELS)


# --- rules ----------------------------------------------------------------------------------

def test_a_matching_write_is_sent_with_the_rule_named():
    m = matches(hook(), write())
    assert m == Match(True, "rule 0 matches CREATE v1 configmaps in namespace drill")


@pytest.mark.parametrize("rule_fields, write_fields, sent", [
    ({"operations": ["*"]}, {"operation": "DELETE"}, True),
    ({}, {"operation": "UPDATE"}, False),
    ({"operations": ["CREATE", "UPDATE"]}, {"operation": "UPDATE"}, True),
    ({"apiGroups": ["*"], "resources": ["deployments"]}, {"group": "apps", "resource": "deployments"}, True),
    ({"apiVersions": ["*"]}, {"version": "v2"}, True),
    ({}, {"resource": "secrets"}, False),
])
def test_operations_groups_versions_resources(rule_fields, write_fields, sent):
    assert matches(hook(rules=[rule(**rule_fields)]), write(**write_fields)).sent is sent


@pytest.mark.parametrize("resources, resource, subresource, sent", [
    (["*"], "pods", "", True),
    (["*"], "pods", "status", False),  # "*" is every resource, no subresource
    (["*/*"], "pods", "status", True),
    (["*/*"], "pods", "", True),
    (["pods"], "pods", "", True),
    (["pods"], "pods", "status", False),
    (["pods/status"], "pods", "status", True),
    (["pods/status"], "pods", "exec", False),
    (["pods/*"], "pods", "exec", True),
    (["pods/*"], "pods", "", True),  # as the API server matches it (sub "*" takes none too)
    (["pods/*"], "deployments", "scale", False),
    (["*/scale"], "deployments", "scale", True),
    (["*/scale"], "deployments", "status", False),
])
def test_resources_and_subresources(resources, resource, subresource, sent):
    h = hook(rules=[rule(apiGroups=["*"], operations=["*"], resources=resources)])
    assert matches(h, write(resource=resource, subresource=subresource)).sent is sent


@pytest.mark.parametrize("scope, write_fields, sent", [
    ("Cluster", {"namespace": None}, True),
    ("Cluster", {}, False),
    ("Namespaced", {}, True),
    ("Namespaced", {"namespace": None}, False),
    ("*", {"namespace": None}, True),
    # a Namespace is cluster-scoped even when the request carries its name as the namespace
    ("Cluster", {"resource": "namespaces", "namespace": "drill"}, True),
    ("Namespaced", {"resource": "namespaces", "namespace": "drill"}, False),
])
def test_scope(scope, write_fields, sent):
    h = hook(rules=[rule(resources=["*"], scope=scope)])
    assert matches(h, write(**write_fields)).sent is sent


def test_no_rule_says_how_each_differs():
    h = hook(rules=[rule(operations=["DELETE"]), rule(resources=["secrets"], scope="Cluster")])
    m = matches(h, write())
    assert m.sent is False
    assert m.reason == ("no rule matches CREATE v1 configmaps in namespace drill "
                        "(rule 0 differs in operations; rule 1 differs in resources, scope)")


def test_matchpolicy_equivalent_other_version_cannot_tell_but_exact_is_not_sent():
    rules = [rule(apiGroups=["apps"], apiVersions=["v1beta1"], resources=["deployments"])]
    apps_v1 = write(group="apps", resource="deployments")
    equivalent = matches(hook(rules=rules), apps_v1)
    assert equivalent.sent is None and "matchPolicy Equivalent" in equivalent.reason
    assert matches(hook(rules=rules, matchPolicy="Exact"), apps_v1).sent is False


@pytest.mark.parametrize("resource", ["validatingwebhookconfigurations", "mutatingwebhookconfigurations",
                                      "validatingadmissionpolicies", "validatingadmissionpolicybindings",
                                      "mutatingadmissionpolicies", "mutatingadmissionpolicybindings"])
def test_admission_configuration_objects_are_never_sent(resource):
    h = hook(rules=[rule(operations=["*"], apiGroups=["*"], apiVersions=["*"], resources=["*"])])
    m = matches(h, write(group="admissionregistration.k8s.io", resource=resource, namespace=None))
    assert m.sent is False and "never sends" in m.reason
    # the same rule does take another cluster-scoped object of that group's neighbours
    assert matches(h, write(group="rbac.authorization.k8s.io", resource="clusterroles", namespace=None)).sent is True


# --- selectors ------------------------------------------------------------------------------

NOT_SYSTEM = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                    "values": ["kube-system"]}]}


def test_namespace_selector_uses_the_namespace_name_label_the_api_server_sets():
    h = hook(namespaceSelector=NOT_SYSTEM)
    assert matches(h, write(namespace="drill")).sent is True
    m = matches(h, write(namespace="kube-system"))
    assert m.sent is False and "namespaceSelector excludes namespace kube-system" in m.reason


def test_namespace_selector_on_given_namespace_labels():
    h = hook(namespaceSelector={"matchLabels": {"webhooks": "on"}})
    assert matches(h, write(namespace_labels={"webhooks": "on"})).sent is True
    assert matches(h, write(namespace_labels={"webhooks": "off"})).sent is False


def test_namespace_selector_on_a_namespace_object_uses_its_own_labels():
    h = hook(namespaceSelector={"matchLabels": {"team": "a"}}, rules=[rule(resources=["namespaces"])])
    assert matches(h, write(resource="namespaces", namespace=None, namespace_labels={"team": "a"})).sent is True
    assert matches(h, write(resource="namespaces", namespace=None, namespace_labels={"team": "b"})).sent is False


def test_namespace_selector_has_no_effect_on_other_cluster_scoped_objects():
    h = hook(namespaceSelector={"matchLabels": {"team": "a"}}, rules=[rule(resources=["nodes"])])
    m = matches(h, write(resource="nodes", namespace=None))
    assert m.sent is True and "no effect" in m.reason


def test_object_selector():
    h = hook(objectSelector={"matchLabels": {"kdrill.io/check": "webhook"}})
    assert matches(h, write(object_labels={"kdrill.io/check": "webhook"})).sent is True
    m = matches(h, write(object_labels={"app": "x"}))
    assert m.sent is False and "objectSelector excludes" in m.reason


def test_object_selector_never_matches_a_connect():
    h = hook(objectSelector={"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]},
             rules=[rule(operations=["CONNECT"], resources=["pods/exec"])])
    assert matches(h, write(operation="CONNECT", resource="pods", subresource="exec")).sent is False
    assert matches(hook(rules=[rule(operations=["CONNECT"], resources=["pods/exec"])]),
                   write(operation="CONNECT", resource="pods", subresource="exec")).sent is True


def test_match_conditions_cannot_tell_unless_something_else_excludes():
    conditions = [{"name": "not-kubelet", "expression": "request.userInfo.username != 'kubelet'"}]
    m = matches(hook(matchConditions=conditions), write())
    assert m.sent is None and "not-kubelet" in m.reason and "CEL matchConditions not evaluated by kdrill" in m.reason
    assert matches(hook(matchConditions=conditions), write(resource="secrets")).sent is False


def test_an_unknown_operation_is_refused():
    with pytest.raises(ValueError, match="Write.operation: expected one of CREATE, UPDATE, DELETE, CONNECT, "
                                         "got 'PATCH'"):
        write(operation="PATCH")


# --- outcomes -------------------------------------------------------------------------------

def outcome(specs, down=(), dry_run=True):
    """specs: (name, sent, webhook fields) per webhook."""
    pairs = [(hook(name=name, **fields), Match(sent, "test")) for name, sent, fields in specs]
    return expected_outcome(pairs, {f"validating/{name}/check.kdrill.io" for name in down}, dry_run=dry_run)


@pytest.mark.parametrize("specs, down, expected", [
    ([("a", True, {})], ["a"], "rejected"),  # Fail, sent, down
    ([("a", True, {"failurePolicy": "Ignore"})], ["a"], "admitted"),
    ([("a", False, {})], ["a"], "admitted"),  # down but not sent
    ([("a", True, {})], [], "admitted"),  # sent, up
    ([("a", None, {})], ["a"], None),  # may be sent, Fail, down
    ([("a", None, {"failurePolicy": "Ignore"})], ["a"], "admitted"),  # either way the write passes
    ([("a", None, {}), ("b", True, {})], ["a", "b"], "rejected"),  # a certain rejection wins
    ([("a", True, {"failurePolicy": "Ignore"}), ("b", True, {})], ["a"], "admitted"),
])
def test_expected_outcome(specs, down, expected):
    assert outcome(specs, down)[0] == expected


def test_a_rejection_names_the_webhook():
    result, reason = outcome([("a", True, {}), ("b", True, {"failurePolicy": "Ignore"})], ["a", "b"])
    assert result == "rejected"
    assert reason == ('rejected: validating/a/check.kdrill.io: backend down with failurePolicy Fail '
                      '(failed calling webhook "check.kdrill.io")')


def test_ignored_webhooks_give_the_most_delay():
    pairs = [(hook("mutating", name="m1", failurePolicy="Ignore", timeoutSeconds=5), Match(True, "")),
             (hook("mutating", name="m2", failurePolicy="Ignore", timeoutSeconds=7), Match(True, "")),
             (hook(name="v1", failurePolicy="Ignore", timeoutSeconds=3), Match(True, "")),
             (hook(name="v2", failurePolicy="Ignore", timeoutSeconds=4), Match(True, ""))]
    result, reason = expected_outcome(pairs, {h.id for h, _ in pairs})
    assert result == "admitted" and "after up to 16 s of timeouts" in reason, reason  # 5 + 7, then max(3, 4)


@pytest.mark.parametrize("side_effects, sent, dry_run, expected", [
    ("Some", True, True, "rejected"),
    ("Unknown", True, True, "rejected"),
    ("None", True, True, "admitted"),
    ("NoneOnDryRun", True, True, "admitted"),
    ("Some", True, False, "admitted"),  # not a dry run: called as usual
    ("Some", False, True, "admitted"),  # not sent: nothing to refuse
    ("Some", None, True, None),
])
def test_dry_run_and_side_effects(side_effects, sent, dry_run, expected):
    # backend up and failurePolicy Ignore: the refusal comes from sideEffects alone
    specs = [("a", sent, {"sideEffects": side_effects, "failurePolicy": "Ignore"})]
    result, reason = outcome(specs, dry_run=dry_run)
    assert result == expected, reason
    if expected == "rejected":
        assert 'admission webhook "check.kdrill.io" does not support dry run' in reason


def test_dry_run_is_the_default():
    assert outcome([("a", True, {"sideEffects": "Some"})])[0] == "rejected"


def test_a_down_id_that_is_no_given_webhook_is_refused():
    with pytest.raises(ValueError, match=r"backend_down: expected ids of the given webhooks \(validating/a/"
                                         r"check\.kdrill\.io\), got \['validating/b/check\.kdrill\.io'\]"):
        outcome([("a", True, {})], ["b"])
