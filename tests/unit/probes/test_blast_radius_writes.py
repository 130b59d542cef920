"""The blast-radius drill's writes (harness/probes/blast_radius.py): each write's description
(what webhooks are matched against) agrees with the request it sends, answers are classified as
the API gives them, and the opt-out labels really defeat the selector they were made from. Pure
logic: the API calls are captured, nothing is sent."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from harness.components.admission import label_selector_matches
from harness.kube import objects as kube_objects
from harness.probes import blast_radius


@pytest.fixture
def sent(monkeypatch):
    calls = []
    monkeypatch.setattr(kube_objects, "dry_run_create",
                        lambda cluster, manifest, timeout_seconds=None, kind=None: calls.append(("create", manifest, kind)))
    monkeypatch.setattr(kube_objects, "dry_run_patch",
                        lambda cluster, ref, body, timeout_seconds=None, kind=None: calls.append(("patch", ref, body, kind)))
    monkeypatch.setattr(kube_objects, "read", lambda cluster, ref, kind=None: {"metadata": {"labels": {"existing": "yes"}}})
    return calls


def _labels(name):
    return {"kubernetes.io/metadata.name": name, "team": "a" if name == "drill-ns" else "platform"}


def test_every_write_is_described_as_it_is_sent(sent):
    writes = blast_radius.catalogue(object(), "drill-ns", "node-1", ("platform-policy", "policy-webhook"), _labels,
                                    opt_out={"exempt": "true"})
    names = [w.name for w in writes]
    assert len(names) == len(set(names)) == 12
    for w in writes:
        sent.clear()
        w.send(3.0)
        (call,) = sent
        if call[0] == "create":
            _, manifest, kind = call
            kind = kind or kube_objects.kind_of(manifest["kind"])
            assert w.write.operation == "CREATE"
            assert (kind.plural, kind.api_version) == (w.write.resource, f"{w.write.group}/{w.write.version}".lstrip("/"))
            assert manifest["metadata"].get("namespace") == (w.write.namespace if kind.namespaced else None)
            assert manifest["metadata"]["labels"] == w.write.object_labels
        else:
            _, ref, body, kind = call
            kind = kind or kube_objects.kind_of(ref.kind)
            assert w.write.operation == "UPDATE" and kind.plural == w.write.resource and ref.namespace == w.write.namespace
            # An UPDATE is matched against the object's labels: what it had, and what the patch adds.
            assert w.write.object_labels == {"existing": "yes", **body["metadata"]["labels"]}
        if w.write.namespace:
            assert w.write.namespace_labels == _labels(w.write.namespace)
    by_name = {w.name: w for w in writes}
    assert by_name["configmap-create-opted-out@drill"].write.object_labels["exempt"] == "true"
    assert {n for n, w in by_name.items() if w.system} == {
        "event-create@drill", "lease-update@kube-node-lease", "node-update", "configmap-create@kube-system"}
    assert {n for n, w in by_name.items() if w.repair} == {"service-update@platform-policy",
                                                          "configmap-create@platform-policy"}


def test_without_a_backend_or_an_opt_out_there_are_no_repair_or_opt_out_writes(sent):
    writes = blast_radius.catalogue(object(), "drill-ns", "node-1", None, _labels)
    assert not any(w.repair for w in writes) and "configmap-create-opted-out@drill" not in [w.name for w in writes]


def _api_error(status, message):
    exc = ApiException(status=status, reason="x")
    exc.body = '{"kind": "Status", "message": %s}' % __import__("json").dumps(message)
    return exc


@pytest.mark.parametrize("error, outcome, webhook", [
    (None, "admitted", None),
    (_api_error(500, 'Internal error occurred: failed calling webhook "policy.platform.example": failed to call '
                     'webhook: Post "https://policy-webhook.platform-policy.svc:443/validate?timeout=5s": dial tcp '
                     '10.96.1.1:443: connect: connection refused'), "rejected", "policy.platform.example"),
    (_api_error(403, 'admission webhook "policy.platform.example" denied the request: no'), "denied", None),
    (_api_error(422, "ConfigMap is invalid"), "denied", None),
    (TimeoutError("read timed out"), "no answer", None),
])
def test_answers_are_classified(error, outcome, webhook):
    got, named, message = blast_radius.classify(error)
    assert (got, named) == (outcome, webhook)
    assert (message == "") == (error is None)


@pytest.mark.parametrize("selector", [
    {"matchLabels": {"tier": "web"}},
    {"matchExpressions": [{"key": "platform.example/policy-exempt", "operator": "DoesNotExist"}]},
    {"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["test", "dev"]}]},
    {"matchExpressions": [{"key": "env", "operator": "In", "values": ["kdrill-not", "prod"]}]},
    {"matchExpressions": [{"key": "team", "operator": "Exists"}, {"key": "env", "operator": "NotIn", "values": ["x"]}]},
])
def test_opt_out_labels_defeat_the_selector(selector):
    labels = blast_radius.excluding_labels(selector)
    assert labels and not label_selector_matches(selector, {"team": "a", **labels})


@pytest.mark.parametrize("selector", [None, {}, {"matchExpressions": [{"key": "team", "operator": "Exists"}]}])
def test_no_opt_out_where_a_label_cannot_defeat_the_selector(selector):
    assert blast_radius.excluding_labels(selector) is None


def test_nodes_leases_and_events_are_not_kinds_a_scenario_or_ledger_may_name():
    # The blast radius writes them as dry runs only; a ledger entry naming a Node must stay refused.
    for name in blast_radius.DRY_RUN_KINDS:
        with pytest.raises(KeyError):
            kube_objects.kind_of(name)


def test_a_dry_run_of_a_kind_only_the_blast_radius_writes_goes_to_its_path(monkeypatch):
    # The Event write once failed before anything was sent: the path came from the declarable kinds.
    paths = []
    monkeypatch.setattr(kube_objects, "_call", lambda cluster, method, path, **kw: paths.append((method, path, kw["query"])))
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e.1", "namespace": "drill-ns"}}
    kube_objects.dry_run_create(object(), event, kind=blast_radius.DRY_RUN_KINDS["Event"])
    kube_objects.dry_run_patch(object(), kube_objects.Ref("Node", "node-1"), {}, kind=blast_radius.DRY_RUN_KINDS["Node"])
    assert paths == [("POST", "/api/v1/namespaces/drill-ns/events", kube_objects.DRY_RUN),
                     ("PATCH", "/api/v1/nodes/node-1", kube_objects.DRY_RUN)]


@pytest.mark.parametrize("selector", [
    # In already listing the first candidates (once StopIteration).
    {"matchExpressions": [{"key": "team", "operator": "In", "values": ["kdrill-not", "kdrill-not-2"]}]},
    # A 63-character value once came back as itself (truncated "-not"), a 62-character one ending in "-".
    {"matchLabels": {"team": "x" * 63}},
    {"matchLabels": {"team": "x" * 62}},
    {"matchLabels": {"team": ""}},
    # A NotIn value that is no label value is skipped for the next requirement.
    {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["not a value!", "ok"]}]},
])
def test_opt_out_labels_are_valid_labels_that_defeat_odd_selectors(selector):
    from harness.spec.params import _LABEL_KEY, _LABEL_VALUE

    labels = blast_radius.excluding_labels(selector)
    assert labels and not label_selector_matches(selector, labels)
    assert all(_LABEL_KEY.fullmatch(k) and _LABEL_VALUE.fullmatch(v) for k, v in labels.items())


@pytest.mark.parametrize("selector", [
    "junk", {"matchLabels": ["a"]}, {"matchExpressions": {"key": "a"}}, {"matchExpressions": ["a"]},
    {"matchExpressions": [{"operator": "DoesNotExist"}]},
    {"matchExpressions": [{"key": "bad key!", "operator": "DoesNotExist"}]},
    {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["not a value!"]}]},
    {"matchExpressions": [{"key": "t", "operator": "In", "values": ["kdrill-not", "kdrill-not-2", "kdrill-not-3"]}]},
])
def test_no_opt_out_from_a_malformed_or_undefeatable_selector(selector):
    assert blast_radius.excluding_labels(selector) is None


def test_kdrill_recover_rebuilds_the_webhook_backend_fault_from_its_ledger_entry():
    # A crash mid-fault leaves only the ledger's target: recover must find this kind and put the
    # recorded selector back (the revert is service-blackhole's, whose recovery is tested on a cluster).
    from harness.faults import fault_class
    from harness.faults.webhook_backend_down import WebhookBackendDown

    fault = WebhookBackendDown(object(), "platform-policy", "policy-webhook", original_selector={"app": "w"},
                               blackhole_selector={"app.kubernetes.io/name": "kdrill-webhook-blackhole"},
                               reroute_to={"app.kubernetes.io/name": "kdrill-webhook-blackhole"})
    again = fault_class("webhook-backend-down").from_target(object(), fault.target())
    assert isinstance(again, WebhookBackendDown)
    assert (again.namespace, again.name, again.original_selector, again.blackhole_selector) == (
        "platform-policy", "policy-webhook", {"app": "w"}, {"app.kubernetes.io/name": "kdrill-webhook-blackhole"})
