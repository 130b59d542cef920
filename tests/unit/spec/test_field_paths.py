"""An object-state probe's ``ok_when.field`` must be a path the API defines for the object's kind
(harness/spec/field_paths.py, from the Kubernetes client's models): a misspelt key would read as
absent on every sample, and is refused when the scenario loads."""

from __future__ import annotations

import pytest
from scenario_copies import load_edited

from harness.spec.field_paths import model, path_problem
from harness.spec.manifests import KINDS
from harness.spec.scenario import ScenarioError


def test_every_kind_the_runner_knows_has_a_model():
    assert {kind: model(kind) for kind in KINDS if model(kind) is None} == {}


@pytest.mark.parametrize("kind, path", [
    ("PodDisruptionBudget", "spec.minAvailable"),
    ("PodDisruptionBudget", "status.conditions.0.status"),
    ("Pod", "status.containerStatuses.0.state.waiting.reason"),
    ("Pod", "metadata.labels.app"),  # any key of a map
    ("Pod", "spec.containers.0.resources.requests.cpu"),
    ("StatefulSet", "status.readyReplicas"),
    ("APIService", "status.conditions.0.type"),
    ("ValidatingWebhookConfiguration", "webhooks.0.failurePolicy"),
])
def test_a_path_the_api_defines_passes(kind, path):
    assert path_problem(kind, path) is None


@pytest.mark.parametrize("kind, path, expected", [
    ("PodDisruptionBudget", "spec.minAvailabel", "a field of PodDisruptionBudget at spec: one of maxUnavailable, "
                                                 "minAvailable, selector, unhealthyPodEvictionPolicy"),
    ("Deployment", "status.readyReplica", "a field of Deployment at status: one of"),
    ("Pod", "status.containerStatuses.first.ready", "a list index (0, 1, ...) after status.containerStatuses"),
    ("Pod", "metadata.name.first", "nothing after metadata.name (a value of type str)"),
    ("Namespace", "phase", "a field of Namespace at the object's top level"),
])
def test_a_path_the_api_does_not_define_says_what_it_should_be(kind, path, expected):
    assert path_problem(kind, path).startswith(expected)


def test_a_scenario_with_a_misspelt_field_is_refused_naming_it(tmp_path):
    def edit(d):
        probe = next(p for p in d["runner"]["probes"] if p["name"] == "all-replicas-ready")
        probe["ok_when"] = {"field": "status.readyReplica", "equals": 3}

    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "registry-outage", edit)
    assert info.value.field.endswith(".ok_when.field") and info.value.got == "'status.readyReplica'"
    assert "readyReplicas" in info.value.expected


def test_nothing_goes_below_a_secrets_bytes():
    assert path_problem("Secret", "data.token.x") == "nothing after data.token (a value of type bytes)"
    assert path_problem("Secret", "data.token") is None
