"""Custom resources in a data-only scenario (scenarios/crd-conversion-outage.yaml): a kind a
declared CustomResourceDefinition defines is known to the manifests after it, to object-state
probes (at any version the definition serves) and to actions; everything else about it is refused
when the scenario loads, and its refs carry what a later process needs to delete it
(harness/spec/manifests.py: crd_problem, custom_kinds, Ref)."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException
from scenario_copies import load_edited, refused_edit

from harness.kube import objects as kube_objects
from harness.probes.object_state import ObjectStateProbe, holds
from harness.scaffolding.drill_objects import _ref_problem
from harness.spec.field_paths import schema_path_problem
from harness.spec.manifests import KINDS, Kind, Ref, crd_problem, custom_kinds
from harness.spec.scenario import ScenarioError

NAME = "crd-conversion-outage"


def manifest(d, kind, name=None):
    return next(m for m in d["workload"]["manifests"] if m["kind"] == kind
                and (name is None or m["metadata"]["name"] == name))


def crd(d):
    return manifest(d, "CustomResourceDefinition")


def probe(d, name):
    return next(p for p in d["runner"]["probes"] if p["name"] == name)


def refused(tmp_path, edit) -> ScenarioError:
    return refused_edit(tmp_path, NAME, edit)


def test_the_shipped_scenario_defines_its_kind_at_the_storage_version(tmp_path):
    scenario = load_edited(tmp_path, NAME, lambda d: None)
    kinds = custom_kinds(scenario.workload["manifests"])
    assert kinds == {"Widget": Kind("conversion.drill.kdrill.io/v1", "Widget", "widgets", True)}


DEFINED = {"widgets.g.io", "deployments.apps", "x.g.io"}  # a forged entry may name any definition


def test_a_custom_resource_ref_is_addressed_at_its_own_version_and_survives_the_ledger():
    ref = Ref("Widget", "w", "kdrill-x", "conversion.drill.kdrill.io/v2", "widgets")
    assert ref.resource.path("w", "kdrill-x") == "/apis/conversion.drill.kdrill.io/v2/namespaces/kdrill-x/widgets/w"
    assert Ref.from_dict(ref.to_dict()) == ref
    assert _ref_problem(ref.to_dict(), {"widgets.conversion.drill.kdrill.io"}) is None
    assert _ref_problem(ref.to_dict()) is not None  # its definition is not among the entry's objects
    assert Ref.from_dict(Ref("ConfigMap", "c", "ns").to_dict()) == Ref("ConfigMap", "c", "ns")


@pytest.mark.parametrize("data, expected", [
    ({"kind": "Widget", "name": "w", "namespace": "ns"}, "of a kind among"),  # no plural: unknown
    ({"kind": "Widget", "name": "w", "namespace": "ns", "apiVersion": "g.io/v1", "plural": "../x"}, "custom"),
    ({"kind": "Widget", "name": "w", "namespace": "ns", "apiVersion": "v1", "plural": "widgets"}, "custom"),
    ({"kind": "ConfigMap", "name": "c", "namespace": "ns", "apiVersion": "g.io/v1", "plural": "x"}, "custom"),
    ({"kind": "Widget", "name": "../w", "namespace": "ns", "apiVersion": "g.io/v1", "plural": "widgets"}, "name"),
    # another group's objects, even with a forged definition beside them
    ({"kind": "Foo", "name": "coredns", "namespace": "kube-system", "apiVersion": "apps/v1",
      "plural": "deployments"}, "custom"),
    ({"kind": "Foo", "name": "w", "namespace": "ns", "apiVersion": "g.io/v1/../x", "plural": "x"}, "custom"),
    ({"kind": "Foo Bar", "name": "w", "namespace": "ns", "apiVersion": "g.io/v1", "plural": "widgets"}, "custom"),
    ({"kind": ["Pod"], "name": "w", "namespace": "ns"}, "of a kind among"),  # no TypeError
])
def test_a_ledger_ref_that_could_reach_another_path_is_refused(data, expected):
    assert expected in (_ref_problem(data, DEFINED) or "")


@pytest.mark.parametrize("edit, field, expected", [
    (lambda m: m["spec"]["versions"][0].update(name="v1/../../../api/v1"), "spec.versions[0].name", "DNS-1035"),
    (lambda m: m["spec"]["versions"][1].update(name="v1"), "spec.versions[1].name", "each once"),
    (lambda m: m["spec"]["versions"][1].pop("served"), "spec.versions[1].served", "true or false"),
    (lambda m: m["spec"]["versions"][0].update(served=False), "spec.versions", "and served"),
    (lambda m: m["spec"].update(group="widgetgroup"), "spec.group", "with a dot"),
    (lambda m: m["spec"]["names"].update(plural="1widgets"), "spec.names.plural", "starting with a letter"),
    (lambda m: m["spec"].update(conversion=[]), "spec.conversion", "strategy"),
    (lambda m: m["spec"]["conversion"]["webhook"].update(clientConfig={"url": "https://203.0.113.7/convert"}),
     "spec.conversion.webhook.clientConfig", "no url"),
    (lambda m: m["spec"]["conversion"]["webhook"]["clientConfig"].update(
        service={"name": "kube-dns", "namespace": "kube-system"}), "spec.conversion.webhook.clientConfig", "no url"),
    (lambda m: m["spec"]["conversion"]["webhook"]["clientConfig"]["service"].update(name="elsewhere"),
     "spec.conversion.webhook.clientConfig.service", "a Service an earlier manifest makes"),
    (lambda m: m["spec"].update(group="apps.k8s.io"), "spec.group", "of the scenario's own"),
    (lambda m: m["spec"].update(group="$(namespace).kdrill.io"), "spec.group", "written out"),
    (lambda m: m["spec"]["names"].update(kind="ConfigMap"), "spec.names.kind", "none of the runner's own"),
    (lambda m: m.update(metadata={"name": "widgets.other.kdrill.io"}), "metadata.name", "<plural>.<group>"),
    (lambda m: m["spec"]["versions"][1].update(storage=True), "spec.versions", "exactly one"),
    (lambda m: m["spec"].update(scope="Everywhere"), "spec.scope", "Namespaced or Cluster"),
])
def test_a_definition_the_api_server_would_refuse_is_refused(tmp_path, edit, field, expected):
    err = refused(tmp_path, lambda d: edit(crd(d)))
    assert err.field.endswith(field) and expected in err.expected, str(err)


def test_crd_problem_accepts_the_shipped_definition(tmp_path):
    scenario = load_edited(tmp_path, NAME, lambda d: None)
    assert crd_problem(crd({"workload": scenario.workload})) is None and "Widget" not in KINDS


def test_an_object_before_its_definition_is_an_unknown_kind(tmp_path):
    def move(d):
        manifests = d["workload"]["manifests"]
        manifests.insert(0, manifests.pop(manifests.index(manifest(d, "Widget"))))
    err = refused(tmp_path, move)
    assert err.field == "workload.manifests[0].kind" and "CustomResourceDefinition" in err.expected, str(err)


def test_an_object_at_a_version_its_definition_does_not_serve_is_refused(tmp_path):
    err = refused(tmp_path, lambda d: manifest(d, "Widget").update(apiVersion="conversion.drill.kdrill.io/v3"))
    assert err.field.endswith(".apiVersion") and "conversion.drill.kdrill.io/v1" in err.expected, str(err)


def test_a_probe_at_an_unserved_version_or_a_built_in_kind_at_a_version_is_refused(tmp_path):
    err = refused(tmp_path, lambda d: probe(d, "own-converted")["object"].update(apiVersion="conversion.drill.kdrill.io/v9"))
    assert err.field.endswith("object.apiVersion") and "serves" in err.expected, str(err)
    err = refused(tmp_path, lambda d: probe(d, "victim-gone")["object"].update(apiVersion="v1/v1"))
    assert err.field.endswith("object.apiVersion") and "only a custom resource" in err.expected, str(err)


def test_only_object_state_probes_read_custom_resources(tmp_path):
    def admission(d):
        d["runner"]["probes"].append({"name": "write-widget", "kind": "admission",
                                      "object": {"kind": "Widget", "name": "other"}, "create": {"spec": {}}})
    err = refused(tmp_path, admission)
    assert err.field.endswith("object.kind") and "only object-state" in err.expected, str(err)


def test_a_second_definition_of_the_same_kind_is_refused(tmp_path):
    def twice(d):
        import copy
        other = copy.deepcopy(crd(d))
        other["metadata"]["name"] = "widgets.other.kdrill.io"
        other["spec"]["group"] = "other.kdrill.io"
        d["workload"]["manifests"].append(other)
    err = refused(tmp_path, twice)
    assert err.field.endswith("spec.names.kind") and "no earlier" in err.expected, str(err)


def test_refused_with_holds_for_no_answered_object():
    # A refusal is judged from the API's error (ObjectStateProbe.sample); an object read is never one.
    ok_when = {"refused_with": ["conversion webhook for"]}
    assert not holds(None, ok_when) and not holds({"kind": "Widget"}, ok_when)
    with pytest.raises(ValueError):
        holds(None, {"refused_with": []})


# --- a controller of the scenario's own kind (scenarios/finalizer-controller-gone.yaml) -----------

OPERATOR = "finalizer-controller-gone"


def refused_operator(tmp_path, edit) -> ScenarioError:
    return refused_edit(tmp_path, OPERATOR, edit)


@pytest.mark.parametrize("rule, where, expected", [
    ({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}, "apiGroups", "scenario's own"),
    ({"apiGroups": ["finalizer.drill.kdrill.io"], "resources": ["*"], "verbs": ["list"]}, "resources", "gadgets"),
    ({"apiGroups": ["finalizer.drill.kdrill.io"], "resources": ["gadgets"], "verbs": ["delete"]}, "verbs",
     "controller's verbs"),
    ({"apiGroups": ["finalizer.drill.kdrill.io"], "resources": ["gadgets"], "verbs": ["list"],
      "nonResourceURLs": ["/metrics"]}, "rules[0]", "no resourceNames nor nonResourceURLs"),
])
def test_a_cluster_role_reaching_beyond_the_scenarios_own_kind_is_refused(tmp_path, rule, where, expected):
    err = refused_operator(tmp_path, lambda d: manifest(d, "ClusterRole").update(rules=[rule]))
    assert err.field.endswith(where) and expected in err.expected, str(err)


@pytest.mark.parametrize("edit, where, expected", [
    (lambda m: m.update(roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                 "name": "cluster-admin"}), "roleRef", "an earlier manifest makes"),
    (lambda m: m.update(subjects=[{"kind": "ServiceAccount", "name": "default", "namespace": "kube-system"}]),
     "subjects[0]", "an earlier manifest makes"),
    (lambda m: m.update(subjects=[{"kind": "Group", "name": "system:authenticated"}]), "subjects[0]", "ServiceAccount"),
    (lambda m: m["metadata"].update(name="operator"), "metadata.name", "$(namespace)"),
])
def test_a_cluster_role_binding_to_anything_but_the_scenarios_own_is_refused(tmp_path, edit, where, expected):
    err = refused_operator(tmp_path, lambda d: edit(manifest(d, "ClusterRoleBinding")))
    assert err.field.endswith(where) and expected in err.expected, str(err)


@pytest.mark.parametrize("edit, where, expected", [
    (lambda d: manifest(d, "Namespace", "$(namespace)-tenant")["metadata"].update(finalizers=["x.io/keep"]),
     "metadata.finalizers", "no finalizers, except"),
    (lambda d: manifest(d, "Gadget")["metadata"].update(finalizers=["kubernetes.io/pvc-protection"]),
     "metadata.finalizers[0]", "finalizer.drill.kdrill.io/<name>"),
])
def test_a_finalizer_kdrill_could_not_remove_itself_is_refused(tmp_path, edit, where, expected):
    err = refused_operator(tmp_path, edit)
    assert err.field.endswith(where) and expected in err.expected, str(err)


def test_an_action_takes_no_api_version(tmp_path):
    def change(d):
        d["runner"]["actions"][0]["delete"]["apiVersion"] = "apps/v1"
    err = refused(tmp_path, change)
    assert err.field == "runner.actions[0].delete.apiVersion" and "no apiVersion" in err.expected, str(err)



@pytest.mark.parametrize("exc, ok, unanswered", [
    (ApiException(status=500, reason="Internal Server Error"), True, False),   # the refusal asked about
    (ApiException(status=403, reason="Forbidden"), False, False),              # refused, another message
    (ApiException(status=0, reason="SSLError"), False, True),                  # no HTTP answer: refused nothing
])
def test_a_refusal_is_judged_from_the_apis_answer_and_no_answer_is_no_refusal(monkeypatch, exc, ok, unanswered):
    exc.body = '{"message": "conversion webhook for g.io/v1, Kind=Widget failed: connection refused"}' \
        if exc.status == 500 else '{"message": "forbidden"}'
    monkeypatch.setattr(kube_objects, "read", lambda *a, **k: (_ for _ in ()).throw(exc))
    probe = ObjectStateProbe.__new__(ObjectStateProbe)  # the sampling alone: no cluster connection
    probe.cluster, probe.api, probe.timeout_seconds = None, None, 1.0
    probe.ref, probe.ok_when = Ref("Widget", "w", "ns", "g.io/v2", "widgets"), {"refused_with": ["conversion webhook"]}
    sample = probe.sample()
    assert sample.ok is ok and ("error" in sample.labels) is unanswered, sample


@pytest.mark.parametrize("name, field, expected", [
    ("own-converted", "spec.colour", "one of color"),   # v2's schema names it color
    ("tenant-stored", "spec.color", "one of colour"),   # the storage version's, colour
    ("tenant-stored", "spec.colour.x", "nothing after spec.colour"),
])
def test_a_custom_resource_field_is_checked_against_the_schema_of_the_version_read(tmp_path, name, field, expected):
    err = refused(tmp_path, lambda d: probe(d, name)["ok_when"].update(field=field))
    assert err.field.endswith("ok_when.field") and expected in err.expected, str(err)


def test_metadata_and_open_parts_of_a_schema_are_not_second_guessed():
    schema = {"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                               "status": {"type": "object", "properties": {
                                                   "items": {"type": "array", "items": {"type": "string"}}}}}}
    assert schema_path_problem(schema, "metadata.deletionTimestamp", "Widget") is None
    assert schema_path_problem(schema, "spec.anything.at.all", "Widget") is None
    assert schema_path_problem(schema, "status.items.0", "Widget") is None
    assert "list index" in schema_path_problem(schema, "status.items.first", "Widget")
