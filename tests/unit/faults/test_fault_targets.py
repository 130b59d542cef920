"""A data-only scenario's fault acts, in a namespace the drill makes, only on an object the drill
makes there (harness/faults/targets.py: check_targets): a typo in a target's name is refused by
``kdrill validate``, not found on the cluster after the setup."""

from __future__ import annotations

import pytest
from scenario_copies import load_edited

from harness.faults import check_params
from harness.spec.scenario import ScenarioError, drill_namespace


def refused(tmp_path, name, edit) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        check_params(load_edited(tmp_path, name, edit))
    return info.value


@pytest.mark.parametrize("name", ["apiservice-unavailable", "coredns-scaled-to-zero", "service-blackhole",
                                  "service-without-endpoints", "webhook-on-pod-delete", "webhook-outage-blackhole",
                                  "webhook-outage-ignore"])
def test_the_shipped_targets_are_the_drills_own_or_outside_it(tmp_path, name):
    check_params(load_edited(tmp_path, name, lambda d: None))


def test_a_deployment_the_scenario_does_not_declare_is_refused(tmp_path):
    err = refused(tmp_path, "apiservice-unavailable", lambda d: d["fault"]["params"].update(target_name="apiservice-backnd"))
    assert err.field == "fault.params.target_name" and err.got == "'apiservice-backnd'"
    assert "a Deployment the drill makes in kdrill-apiservice-unavailable" in err.expected
    assert "apiservice-backend, web (the runner's)" in err.expected


def test_a_declared_object_of_another_kind_is_not_the_target(tmp_path):
    # webhook-on-pod-delete declares a Deployment pod-delete-webhook, not a StatefulSet of that name
    err = refused(tmp_path, "webhook-on-pod-delete", lambda d: d["fault"]["params"].update(target_kind="StatefulSet"))
    assert err.field == "fault.params.target_name" and "a StatefulSet the drill makes" in err.expected


def test_a_service_the_scenario_does_not_declare_is_refused(tmp_path):
    err = refused(tmp_path, "service-blackhole", lambda d: d["fault"]["params"].update(service_name="api"))
    assert err.field == "fault.params.service_name" and err.got == "'api'"
    assert "a Service the drill makes" in err.expected and "web (the runner's)" in err.expected


def test_a_target_in_the_drills_namespace_written_out_is_checked_too(tmp_path):
    ns = drill_namespace("service-without-endpoints")
    err = refused(tmp_path, "service-without-endpoints",
                  lambda d: d["fault"]["params"].update(target_name="nothing", target_namespace=ns))
    assert err.field == "fault.params.target_name"


def test_a_target_in_a_declared_namespace_must_be_declared_there(tmp_path):
    # the webhook's Service is in the drill's namespace, not in the declared $(namespace)-policy
    ns = drill_namespace("webhook-outage-blackhole") + "-policy"
    err = refused(tmp_path, "webhook-outage-blackhole", lambda d: d["fault"]["params"].update(target_namespace=ns))
    assert err.field == "fault.params.service_name"
    assert f"a Service the drill makes in {ns}" in err.expected and err.expected.count(": none") == 1


def test_a_cases_own_target_is_named_at_the_case(tmp_path):
    err = refused(tmp_path, "webhook-outage-ignore", lambda d: d["cases"][1]["params"].update(service_name="webhok"))
    assert err.field == "cases[1].params.service_name" and err.got == "'webhok'"


WHY = "kube-system's kube-dns Service: the cluster's DNS is the path drilled"


def test_a_target_outside_the_drills_namespaces_is_refused_unless_the_scenario_says_why(tmp_path):
    def edit(d, why=None):
        d["fault"]["params"].update(service_name="kube-dns", target_namespace="kube-system")
        if why is not None:
            d["fault"]["outside_drill"] = why

    err = refused(tmp_path, "service-blackhole", edit)
    assert err.field == "fault.params.target_namespace" and err.got == "'kube-system'"
    assert "a namespace the drill makes (kdrill-service-blackhole)" in err.expected
    assert "fault.outside_drill" in err.expected
    scenario = load_edited(tmp_path, "service-blackhole", lambda d: edit(d, WHY))
    check_params(scenario)
    assert scenario.to_dict()["fault"]["outside_drill"] == WHY  # the record says it


def test_outside_drill_must_say_something(tmp_path):
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "service-blackhole", lambda d: d["fault"].update(outside_drill=""))
    assert info.value.field == "fault.outside_drill"


# --- pods chosen by their labels -------------------------------------------------------------------

@pytest.mark.parametrize("selector", ["app=web", "app in (web, api)", "app", "app=web,tier!=db", "app notin (api),app"])
def test_a_selector_matching_the_runners_pods_passes(tmp_path, selector):
    check_params(load_edited(tmp_path, "pod-delete", lambda d: d["fault"]["params"].update(selector=selector)))


@pytest.mark.parametrize("selector", ["app=wbe", "app=web,tier=db", "app in (api)", "tier", "app,!app"])
def test_a_selector_matching_no_pod_the_drill_makes_is_refused(tmp_path, selector):
    err = refused(tmp_path, "pod-delete", lambda d: d["fault"]["params"].update(selector=selector))
    assert err.field == "fault.params.selector" and err.got == repr(selector)
    assert "labels matching pods the drill makes in kdrill-pod-delete" in err.expected
    assert "Deployment web (the runner's): app=web" in err.expected


def test_pods_outside_the_drills_namespaces_are_refused_unless_the_scenario_says_why(tmp_path):
    def edit(d, why=None):
        d["fault"]["params"].update(selector="app=web", target_namespace="default")
        if why is not None:
            d["fault"]["outside_drill"] = why

    err = refused(tmp_path, "pod-delete", edit)  # every probe measures the drill's own web, not default's
    assert err.field == "fault.params.target_namespace" and err.got == "'default'"
    check_params(load_edited(tmp_path, "pod-delete", lambda d: edit(d, "default's web pods, the team's own")))


def test_a_declared_statefulsets_pod_template_labels_are_matched(tmp_path):
    # registry-outage declares StatefulSets cached and always: their pods are app=cached, app=always
    def edit(d, selector):
        d["fault"] = {"kind": "pod-delete", "method": "delete", "params": {"selector": selector}}

    check_params(load_edited(tmp_path, "registry-outage", lambda d: edit(d, "app=always")))
    err = refused(tmp_path, "registry-outage", lambda d: edit(d, "app=alway"))
    assert "StatefulSet cached: app=cached" in err.expected and "StatefulSet always: app=always" in err.expected


def test_a_reroute_to_labels_no_pod_has_is_refused(tmp_path):
    err = refused(tmp_path, "webhook-outage-ignore",
                  lambda d: d["cases"][1]["params"].update(reroute_to="app=webhook-blackhol"))
    assert err.field == "cases[1].params.reroute_to" and err.got == "'app=webhook-blackhol'"


@pytest.mark.parametrize("namespace", ["kube.system", "x" * 64])
def test_a_target_namespace_that_cannot_exist_is_refused_whatever_the_scenario_says(tmp_path, namespace):
    def edit(d):
        d["fault"]["params"].update(selector="app=web", target_namespace=namespace)
        d["fault"]["outside_drill"] = "a namespace of the team's"

    err = refused(tmp_path, "pod-delete", edit)
    assert err.field == "fault.params.target_namespace" and "a namespace name (a DNS label" in err.expected


@pytest.mark.parametrize("why", ["   ", "\n"])
def test_a_blank_reason_is_no_reason(tmp_path, why):
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "pod-delete", lambda d: d["fault"].update(outside_drill=why))
    assert info.value.field == "fault.outside_drill"
