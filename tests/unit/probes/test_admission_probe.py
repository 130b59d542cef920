"""The ``admission`` probe kind (harness/probes/admission.py) and what a data-only scenario may
ask of it, the measures and windows the ported webhook-outage scenario uses, and the scope of a
declared ValidatingAdmissionPolicy: pure logic, no cluster."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException
from scenario_copies import load_edited

from harness.core.timeline import Sample
from harness.engine import measures
from harness.engine.judging import narrow
from harness.kube.objects import Ref, warning_texts
from harness.probes.admission import api_message, create_manifest, holds
from harness.probes.object_state import holds as state_holds
from harness.spec.scenario import RUNNER_DRILL, ScenarioError

NAME = "webhook-outage"
REJECTED = {"rejected_with": ['failed calling webhook "admit-all.kdrill.io"', "connection refused"]}


@pytest.mark.parametrize("outcome, message, ok_when, expected", [
    ("admitted", "", "admitted", True),
    ("rejected", "anything", "admitted", False),
    ("error", "", "admitted", False),
    ("rejected", 'Internal error occurred: failed calling webhook "admit-all.kdrill.io": failed to call webhook: '
                 'Post "https://webhook.ns.svc:443/validate?timeout=5s": dial tcp 10.96.0.9:443: connect: '
                 'connection refused', REJECTED, True),
    # every text must be in the message: a webhook that answered and denied is not a failed call
    ("rejected", 'admission webhook "admit-all.kdrill.io" denied the request', REJECTED, False),
    ("rejected", 'failed calling webhook "admit-all.kdrill.io": context deadline exceeded', REJECTED, False),
    ("admitted", "", REJECTED, False),
    ("error", "connection refused", REJECTED, False),  # no answer from the API server: nothing decided
])
def test_a_write_is_ok_when_its_outcome_is_what_the_probe_asks(outcome, message, ok_when, expected):
    assert holds(outcome, message, ok_when) is expected


@pytest.mark.parametrize("ok_when", ["rejected", {"rejected_with": []}, {"rejected_with": "text"},
                                     {"rejected_with": ["a"], "status": 500}])
def test_a_malformed_ok_when_is_refused(ok_when):
    with pytest.raises(ValueError):
        holds("admitted", "", ok_when)


def test_the_api_message_is_the_status_message():
    exc = ApiException(status=500, reason="Internal Server Error")
    exc.body = json.dumps({"kind": "Status", "message": "failed calling webhook \"x\""})
    assert api_message(exc) == 'failed calling webhook "x"'
    exc.body = "not json"
    assert api_message(exc) == "not json"


def test_each_create_is_a_new_object_of_the_declared_kind_in_its_namespace():
    body = {"metadata": {"labels": {"a": "b"}}, "spec": {"replicas": 0}}
    ref = Ref("Deployment", "matched", "ns-a")
    first, second = create_manifest(ref, body, 1), create_manifest(ref, body, 2)
    assert first == {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 0},
                     "metadata": {"labels": {"a": "b"}, "name": "matched-1", "namespace": "ns-a"}}
    assert second["metadata"]["name"] == "matched-2" and body["metadata"] == {"labels": {"a": "b"}}


def test_median_and_min_latency():
    T = 1000.0
    window = [Sample(t=T + i, ok=ok, latency_seconds=lat)
              for i, (ok, lat) in enumerate([(False, 0.01), (False, 0.02), (True, 0.03), (True, 0.5), (False, 4.0)])]
    assert measures.measure("median_latency_seconds", window, T, T + 5) == pytest.approx(0.03)
    assert measures.measure("min_latency_seconds", window, T + 2, T + 5) == pytest.approx(0.03)
    assert measures.measure("median_latency_seconds", window, T + 10, T + 20) is None
    # from_first_success: the window starts at the first success (T + 2), where 2 of 3 succeeded
    assert measures.first_success_at(window, T, T + 5) == T + 2
    assert measures.measure("success_ratio", window, measures.first_success_at(window, T, T + 5), T + 5) == \
        pytest.approx(2 / 3)
    assert measures.first_success_at(window, T, T + 2) is None


def test_a_window_narrowed_to_the_actions_it_names():
    ran = [{"name": "way-out", "at": 130.0, "ok": True}, {"name": "never", "at": None, "ok": False},
           {"name": "refused", "at": 120.0, "ok": False, "detail": "scale x: not done, it does not exist"},
           {"name": "late", "at": 145.0, "ok": True}]
    assert narrow({"window": "fault", "until_action": "way-out"}, 100.0, 140.0, ran)[:2] == (100.0, 130.0)
    assert narrow({"window": "fault", "from_action": "way-out"}, 100.0, 140.0, ran)[:2] == (130.0, 140.0)
    assert narrow({"window": "fault"}, 100.0, 140.0, ran) == (100.0, 140.0, "")
    # an action that ran after its window ended (a slow API call) narrows to the window's end
    assert narrow({"window": "fault", "from_action": "late"}, 100.0, 140.0, ran)[:2] == (140.0, 140.0)
    for name in ("never", "refused"):
        with pytest.raises(ValueError, match="did not run as declared"):
            narrow({"window": "fault", "from_action": name}, 100.0, 140.0, ran)


def test_object_state_compares_a_field():
    ready = {"field": "status.readyReplicas", "equals": 1}
    assert state_holds({"status": {"readyReplicas": 1}}, ready)
    assert not state_holds({"status": {}}, ready)
    assert state_holds({"status": {}}, {"field": "status.readyReplicas", "equals": None})
    assert not state_holds(None, {"field": "status.readyReplicas", "equals": None})  # absent is not "no field"
    assert state_holds({"status": {"containerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull"}}}]}},
                       {"field": "status.containerStatuses.0.state.waiting.reason", "equals": "ErrImagePull"})
    assert not state_holds({"s": 1}, {"field": "s", "equals": True})  # true is not 1


def probe(d, name):
    return next(p for p in d["runner"]["probes"] if p["name"] == name)


def manifest(d, kind):
    return next(m for m in d["workload"]["manifests"] if m["kind"] == kind)


def expectation(d, name):
    return next(e for e in d["expectations"] if e["name"] == name)


def test_the_shipped_scenario_loads(tmp_path):
    scenario = load_edited(tmp_path, NAME, lambda d: None)
    assert scenario.drill == RUNNER_DRILL  # data only: no drill file
    assert {p["kind"] for p in scenario.runner["probes"]} >= {"admission", "object-state"}


@pytest.mark.parametrize("edit, field, expected", [
    # windows narrowed only to an action of that window, from before until
    (lambda d: expectation(d, "webhook_down_held_ratio")["measure"].update(until_action="nope"),
     "expectations[1].measure.until_action", "an action of the fault window: way-out"),
    (lambda d: expectation(d, "post_revert_write_success_ratio")["measure"].update(from_action="way-out"),
     "expectations[18].measure.from_action", "an action of the after window: none"),
    (lambda d: expectation(d, "webhook_down_held_ratio")["measure"].update(from_action="way-out"),
     "expectations[1].measure.until_action", "an action later than from_action"),
    # an admission probe writes only where the drill may
    (lambda d: probe(d, "own-scale-up-rejected")["object"].update(name="coredns", namespace="kube-system"),
     "runner.probes[6].object", "an object made by workload.manifests"),
    (lambda d: probe(d, "matched-admitted")["object"].update(namespace="kube-system"),
     "runner.probes[1].object", "in the drill's namespace or one the manifests make"),
    (lambda d: probe(d, "matched-admitted").update(object={"kind": "Namespace", "name": "x"}),
     "runner.probes[1].object", "a namespaced kind"),
    (lambda d: probe(d, "matched-admitted").update(update={"patch": {"a": 1}}), "runner.probes[1].create",
     "exactly one of create"),
    (lambda d: probe(d, "matched-admitted").pop("create"), "runner.probes[1].create", "exactly one of create"),
    (lambda d: probe(d, "matched-admitted")["create"].update(spec="$(toolbox_image)"), "runner.probes[1].create",
     "literal values"),
    (lambda d: probe(d, "matched-rejected").update(ok_when={"rejected_with": []}), "runner.probes[2].ok_when",
     "admitted, {rejected_with"),
    (lambda d: expectation(d, "webhook_down_held_ratio")["measure"].update(from_first_success=False),
     "expectations[1].measure.from_first_success", "true (or left out)"),
    (lambda d: probe(d, "webhook-down").update(ok_when={"field": "status..x", "equals": 1}),
     "runner.probes[9].ok_when", "{field: PATH, equals: VALUE}"),
    # a final newline slips past a schema pattern's $; holds() reads the path as it will at run time
    (lambda d: probe(d, "webhook-down").update(ok_when={"field": "status.readyReplicas\n", "equals": 1}),
     "runner.probes[9].ok_when", "{field: PATH, equals: VALUE}"),
    (lambda d: probe(d, "matched-admitted")["object"].update(name="m" * 250), "runner.probes[1].object.name",
     "with '-<n>' added for each create"),
    (lambda d: probe(d, "matched-admitted")["create"].update(metadata={"labels": {"$(namespace)": "x"}}),
     "runner.probes[1].create.metadata.labels.$(namespace)", "keys without placeholders"),
    (lambda d: probe(d, "matched-admitted")["create"].update(metadata={"labels": {"a": 1}}),
     "runner.probes[1].create.metadata.labels.a", "a string"),
    (lambda d: probe(d, "own-restart-rejected").update(object={"kind": "Secret", "name": "webhook-tls"},
                                                       update={"patch": {"a": 1}, "subresource": "scale"}),
     "runner.probes[7].update.subresource", "scale only for a Deployment or StatefulSet"),
    # a webhook configuration calls a Service made before it
    (lambda d: manifest(d, "ValidatingWebhookConfiguration")["webhooks"][0]["clientConfig"]["service"].update(
        name="nope"), "workload.manifests[7].webhooks[0].clientConfig.service", "a Service an earlier manifest makes"),
    # a policy and its binding are named after the drill: a binding names its policy by name alone
    (lambda d: (manifest(d, "ValidatingAdmissionPolicy")["metadata"].update(name="require-owner"),
                manifest(d, "ValidatingAdmissionPolicyBinding")["spec"].update(policyName="require-owner")),
     "workload.manifests[5].metadata.name", "a name made from the drill's namespace"),
    # a declared ValidatingAdmissionPolicy acts only in the drill's namespaces
    (lambda d: manifest(d, "ValidatingAdmissionPolicy")["spec"]["matchConstraints"]["resourceRules"][0].update(
        scope="*"), "workload.manifests[5].spec.matchConstraints.resourceRules[0].scope", "Namespaced"),
    (lambda d: manifest(d, "ValidatingAdmissionPolicyBinding")["spec"]["matchResources"].pop("namespaceSelector"),
     "workload.manifests[6].spec.matchResources.namespaceSelector", "naming only the drill's namespaces"),
    (lambda d: manifest(d, "ValidatingAdmissionPolicyBinding")["spec"]["matchResources"]["namespaceSelector"][
        "matchExpressions"][0].update(values=["kube-system"]),
     "workload.manifests[6].spec.matchResources.namespaceSelector", "naming only the drill's namespaces"),
    (lambda d: manifest(d, "ValidatingAdmissionPolicyBinding")["spec"].update(policyName="someone-elses"),
     "workload.manifests[6].spec.policyName", "a ValidatingAdmissionPolicy the manifests make"),
])
def test_bad_admission_scenarios_are_refused_with_the_field(tmp_path, edit, field, expected):
    with pytest.raises(ScenarioError) as err:
        load_edited(tmp_path, NAME, edit)
    assert err.value.field == field and expected in err.value.expected, err.value


# --- evictions and direct deletions (scenarios/pdb-eviction.yaml) --------------------------------

PDB = "pdb-eviction"


@pytest.mark.parametrize("edit, field, expected", [
    # only a pod is evicted, and only one of the drill's (a declared Pod or its StatefulSet's)
    (lambda p: p.update(object={"kind": "StatefulSet", "name": "guarded"}), "object.kind", "Pod (only a pod"),
    (lambda p: p["object"].update(name="coredns-0"), "object", "a Pod made by workload.manifests"),
    (lambda p: p["object"].update(name="guarded-3"), "object", "guarded-0..guarded-2"),
    (lambda p: p.update(delete={}), "create", "exactly one of create"),
    (lambda p: p.update(evict={"gracePeriodSeconds": 0}), "evict", "{}"),
])
def test_an_eviction_probe_acts_only_on_the_drills_pods(tmp_path, edit, field, expected):
    def change(d):
        edit(next(p for p in d["runner"]["probes"] if p["name"] == "evict-refused"))
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, PDB, change)
    i = [p["name"] for p in load_edited(tmp_path, PDB, lambda d: None).runner["probes"]].index("evict-refused")
    assert info.value.field == f"runner.probes[{i}].{field}" and expected in info.value.expected, str(info.value)


def test_a_delete_probe_acts_only_on_what_the_drill_made(tmp_path):
    def change(d):
        next(p for p in d["runner"]["probes"] if p["name"] == "delete-admitted")["object"] = {
            "kind": "Service", "name": "kubernetes", "namespace": "default"}
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, PDB, change)
    assert info.value.field.endswith(".object") and "made by workload.manifests" in info.value.expected


# --- warnings (scenarios/admission-policy-versus-webhook.yaml) ------------------------------------

def test_admitted_with_warning_needs_the_write_admitted_and_every_text_in_its_warnings():
    ok_when = {"admitted_with_warning": ["label team is required"]}
    said = "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': label team is required"
    assert holds("admitted", said, ok_when)
    assert not holds("admitted", "", ok_when)  # admitted without the warning: the binding did not warn
    assert not holds("rejected", said, ok_when)  # a refusal is no warning, whatever its message


def test_the_warning_header_is_read_as_the_api_server_writes_it():
    header = ('299 - "Validation failed for ValidatingAdmissionPolicy \'p\': label team is required", '
              '299 - "a \\"b\\""')
    assert warning_texts(header) == ["Validation failed for ValidatingAdmissionPolicy \'p\': label team is required",
                                     'a "b"']
    assert warning_texts(None) == [] and warning_texts("garbage") == []


def test_a_warning_is_asked_of_a_create_only(tmp_path):
    def change(d):
        probe = next(p for p in d["runner"]["probes"] if p["name"] == "warned")
        probe.pop("create")
        probe["object"] = {"kind": "Deployment", "name": "webhook"}
        probe["update"] = {"patch": {"metadata": {"labels": {"x": "y"}}}}
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "admission-policy-versus-webhook", change)
    assert info.value.field.endswith(".ok_when") and "create's answer only" in info.value.expected
