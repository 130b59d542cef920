"""An object-state probe's ``{field, equals}`` compares JSON values as they are: where the probe
reads a declared object that gives the field a value, a VALUE of another type (``"2"`` for a
number) could never hold, and is refused when the scenario loads
(harness/probes/object_state.py: ObjectStateProbe.declared_problems)."""

from __future__ import annotations

import pytest
from scenario_copies import load_edited

from harness.probes.object_state import ObjectStateProbe, holds
from harness.spec.scenario import ScenarioError

NAME = "registry-outage"


def probe(d, name="all-replicas-ready"):
    return next(p for p in d["runner"]["probes"] if p["name"] == name)


def statefulset(d, name="cached"):
    return next(m for m in d["workload"]["manifests"] if m["kind"] == "StatefulSet" and m["metadata"]["name"] == name)


def refused(tmp_path, edit) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, NAME, edit)
    return info.value


def test_a_string_never_equals_the_number_it_spells():
    assert not holds({"spec": {"replicas": 2}}, {"field": "spec.replicas", "equals": "2"})


@pytest.mark.parametrize("ok_when, key, got", [
    ({"field": "spec.replicas", "equals": "2"}, "equals", "'2'"),
    ({"field": "spec.replicas", "equals": True}, "equals", "True"),
    ({"field": "spec.replicas", "in": [2, "3"]}, "in[1]", "'3'"),
    ({"field": "spec.podManagementPolicy", "equals": 1}, "equals", "1"),
    ({"field": "spec.selector", "equals": "app=cached"}, "equals", "'app=cached'"),
    ({"field": "spec.template.spec.terminationGracePeriodSeconds", "equals": "1"}, "equals", "'1'"),
])
def test_a_value_of_another_type_than_the_declared_field_is_refused(tmp_path, ok_when, key, got):
    err = refused(tmp_path, lambda d: probe(d).update(ok_when=ok_when))
    i = [p["name"] for p in load_edited(tmp_path, NAME, lambda d: None).runner["probes"]].index("all-replicas-ready")
    assert err.field == f"runner.probes[{i}].ok_when.{key}" and err.got == got, str(err)
    assert "as workload.manifests[" in err.expected and "no conversion" in err.expected, str(err)


@pytest.mark.parametrize("ok_when", [
    {"field": "spec.replicas", "equals": 3},
    {"field": "spec.replicas", "equals": 2.0},  # JSON has one number type
    {"field": "spec.replicas", "equals": None},  # the field gone
    {"field": "spec.replicas", "in": [0, 3]},
    {"field": "status.readyReplicas", "equals": 3},  # not declared: nothing to compare with
    {"field": "spec.serviceName", "equals": "other"},  # a value of the same type is the scenario's to choose
])
def test_a_value_of_the_declared_type_or_an_undeclared_field_passes(tmp_path, ok_when):
    scenario = load_edited(tmp_path, NAME, lambda d: probe(d).update(ok_when=ok_when))
    assert probe({"runner": scenario.runner})["ok_when"] == ok_when


def test_a_resource_quantity_is_not_compared_the_api_stores_it_as_a_string(tmp_path):
    def edit(d):
        container = statefulset(d)["spec"]["template"]["spec"]["containers"][0]
        container["resources"] = {"requests": {"cpu": 1}}
        probe(d).update(ok_when={"field": "spec.template.spec.containers.0.resources.requests.cpu", "equals": "1"})

    scenario = load_edited(tmp_path, NAME, edit)
    assert probe({"runner": scenario.runner})["ok_when"]["equals"] == "1"


def test_an_object_the_scenario_does_not_declare_is_not_checked(tmp_path):
    scenario = load_edited(tmp_path, NAME, lambda d: probe(d).update(object={"kind": "Deployment", "name": "coredns",
                                                                             "namespace": "kube-system"},
                                                                     ok_when={"field": "spec.replicas", "equals": "2"}))
    assert probe({"runner": scenario.runner})["object"]["name"] == "coredns"


def test_the_help_says_values_are_compared_without_conversion():
    assert "no conversion" in ObjectStateProbe.fields["ok_when"]["x-expected"]
