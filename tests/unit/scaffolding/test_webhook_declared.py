"""A data-only scenario's admission webhook: its per-drill certificate (``workload.tls``), the
scope a declared webhook may have, and eviction actions (scenarios/webhook-on-pod-delete.yaml)."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography import x509
from kubernetes.client.exceptions import ApiException
from scenario_copies import load_edited
from test_declared_objects import FakeApi as DeclaredObjectsApi
from test_declared_objects import cluster, run_action  # noqa: F401 (cluster: the fake Cluster fixture)

from harness.engine.workload import declared_manifests
from harness.kube import objects as kube_objects
from harness.kube.objects import Ref
from harness.probes.object_state import holds
from harness.scaffolding.drill_objects import OWNER_LABEL, DrillObjects
from harness.spec.scenario import ScenarioError

NAME = "webhook-on-pod-delete"


def manifests(d):
    return d["workload"]["manifests"]


def webhook(d):
    return next(m for m in manifests(d) if m["kind"] == "ValidatingWebhookConfiguration")["webhooks"][0]


def error_for(tmp_path, edit) -> ScenarioError:
    with pytest.raises(ScenarioError) as err:
        load_edited(tmp_path, NAME, edit)
    return err.value


def test_the_shipped_scenario_loads(tmp_path):
    scenario = load_edited(tmp_path, NAME, lambda d: None)
    assert scenario.workload["tls"] == {"service": "pod-delete-webhook"}
    assert [a.get("evict") for a in scenario.runner["actions"]] == [{"kind": "Pod", "name": "guarded-0"},
                                                                    {"kind": "Pod", "name": "unguarded-0"}]


@pytest.mark.parametrize("edit, field, expected", [
    # The certificate's placeholders need the Service it is made for.
    (lambda d: d["workload"].pop("tls"), "workload.manifests[0]", "$(tls_*) placeholders only with workload.tls"),
    (lambda d: d["workload"]["tls"].update(service="nowhere"), "workload.tls.service", "a Service made by"),
    # A declared webhook reaches no further than the drill's own namespaces.
    (lambda d: webhook(d).pop("namespaceSelector"), "workload.manifests[6].webhooks[0].namespaceSelector",
     "naming only the drill's namespaces"),
    (lambda d: webhook(d)["namespaceSelector"]["matchExpressions"][0].update(values=["$(namespace)", "kube-system"]),
     "workload.manifests[6].webhooks[0].namespaceSelector", "naming only the drill's namespaces"),
    (lambda d: webhook(d)["namespaceSelector"]["matchExpressions"][0].update(operator="NotIn"),
     "workload.manifests[6].webhooks[0].namespaceSelector", "operator: In"),
    (lambda d: webhook(d)["namespaceSelector"].update(matchExpressions=[], matchLabels={"a": "b"}),
     "workload.manifests[6].webhooks[0].namespaceSelector", "kubernetes.io/metadata.name"),
    # ... and sends what it intercepts to a Service of the drill's, never to a url.
    (lambda d: webhook(d)["clientConfig"].update(url="https://198.51.100.7/validate"),
     "workload.manifests[6].webhooks[0].clientConfig", "no url"),
    (lambda d: webhook(d).update(clientConfig={"url": "https://198.51.100.7/validate", "caBundle": "$(tls_ca_bundle)"}),
     "workload.manifests[6].webhooks[0].clientConfig", "a service in the drill's namespaces"),
    (lambda d: webhook(d)["clientConfig"]["service"].update(namespace="kube-system"),
     "workload.manifests[6].webhooks[0].clientConfig", "a service in the drill's namespaces"),
    (lambda d: webhook(d).pop("clientConfig"), "workload.manifests[6].webhooks[0].clientConfig", "no url"),
    (lambda d: webhook(d)["rules"][0].pop("scope"), "workload.manifests[6].webhooks[0].rules[0].scope", "Namespaced"),
    (lambda d: webhook(d)["rules"][0].update(scope="*"), "workload.manifests[6].webhooks[0].rules[0].scope",
     "Namespaced"),
    (lambda d: webhook(d).pop("rules"), "workload.manifests[6].webhooks[0].rules", "a list of rules"),
    (lambda d: manifests(d)[6].update(webhooks=[]), "workload.manifests[6].webhooks", "a list of webhooks"),
    # An eviction is of a Pod the drill made, or one of its StatefulSets' pods.
    (lambda d: d["runner"]["actions"][0]["evict"].update(name="guarded-1"), "runner.actions[0].evict",
     "a Pod made by workload.manifests, or by one of its StatefulSets"),
    (lambda d: d["runner"]["actions"][0]["evict"].update(name="coredns-0", namespace="kube-system"),
     "runner.actions[0].evict", "a Pod made by workload.manifests"),
    (lambda d: d["runner"]["actions"][0]["evict"].update(kind="StatefulSet", name="guarded"),
     "runner.actions[0].evict.kind", "Pod (only a pod is evicted)"),
    (lambda d: d["runner"]["actions"][0].update(delete={"kind": "StatefulSet", "name": "guarded"}),
     "runner.actions[0]", "one of delete (an object), evict (a Pod)"),
    (lambda d: d["runner"]["actions"][0].pop("evict"), "runner.actions[0]", "one of delete"),
])
def test_bad_webhook_scenarios_are_refused_naming_the_field(tmp_path, edit, field, expected):
    err = error_for(tmp_path, edit)
    assert err.field == field, str(err)
    assert expected in err.expected, str(err)


def test_a_statefulsets_later_ordinals_may_be_evicted(tmp_path):
    def edit(d):
        next(m for m in manifests(d) if m["metadata"]["name"] == "guarded")["spec"]["replicas"] = 2
        d["runner"]["actions"][0]["evict"]["name"] = "guarded-1"
    assert load_edited(tmp_path, NAME, edit).runner["actions"][0]["evict"]["name"] == "guarded-1"


def test_each_drill_gets_a_certificate_for_its_service_and_the_ca_that_signed_it(tmp_path):
    from harness.components.webhook import generate_webhook_tls

    scenario = load_edited(tmp_path, NAME, lambda d: None)
    tls = generate_webhook_tls(scenario.workload["tls"]["service"], "kdrill-x")
    made = declared_manifests(scenario.workload["manifests"], "kdrill-x", tls)
    secret = made[0]["stringData"]
    cert = x509.load_pem_x509_certificate(secret["tls.crt"].encode())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "pod-delete-webhook.kdrill-x.svc" in names
    assert secret["tls.key"].startswith("-----BEGIN PRIVATE KEY-----")
    hook = made[-1]["webhooks"][0]
    ca = x509.load_pem_x509_certificate(base64.b64decode(hook["clientConfig"]["caBundle"]))
    cert.verify_directly_issued_by(ca)
    assert hook["clientConfig"]["service"]["namespace"] == "kdrill-x"
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kdrill-x"]
    # The ledger holds names only: the key is never written there (nor, through it, to the evidence).
    objects = DrillObjects(None, made)
    assert "PRIVATE KEY" not in json.dumps(objects.target()) and "BEGIN" not in json.dumps(objects.target())


def test_two_drills_never_share_a_key():
    from harness.components.webhook import generate_webhook_tls

    assert generate_webhook_tls("w", "ns").key_pem != generate_webhook_tls("w", "ns").key_pem


def test_deleting_holds_while_the_object_has_a_deletion_timestamp():
    assert holds({"metadata": {"deletionTimestamp": "2026-12-01T10:00:00Z"}}, "deleting")
    assert not holds({"metadata": {}}, "deleting")
    assert not holds(None, "deleting")


# --- eviction actions against a fake API ------------------------------------------------------

class FakeApi(DeclaredObjectsApi):
    """The fake API of test_declared_objects, which also evicts: the pod is then Terminating."""

    def __init__(self):
        super().__init__()
        self.evicted = []

    def evict(self, cluster, ref, uid=None):
        if ref not in self.objects:
            return False
        assert uid == self.objects[ref]["metadata"]["uid"]
        self.evicted.append(ref)
        self.objects[ref]["metadata"]["deletionTimestamp"] = "now"
        return True


@pytest.fixture
def fake(monkeypatch):
    api = FakeApi()
    for name in ("create", "read", "delete", "evict"):
        monkeypatch.setattr(kube_objects, name, getattr(api, name))
    return api


STATEFUL_SET = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "guarded", "namespace": "ns"}}


def uid_of_guarded(fake):
    return fake.objects[Ref("StatefulSet", "guarded", "ns")]["metadata"]["uid"]


def pod_of(fake, owner_uid, name="guarded-0", labels=None):
    fake.objects[Ref("Pod", name, "ns")] = {"kind": "Pod", "metadata": {
        "name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels or {},
        "ownerReferences": [{"kind": "StatefulSet", "name": "guarded", "uid": owner_uid, "controller": True}]}}


def evict(cluster, objects, name="guarded-0"):
    return run_action(cluster, objects, {"kind": "Pod", "name": name}, verb="evict")


def test_an_eviction_of_the_drills_statefulset_pod_is_sent_for_that_very_pod(cluster, fake):
    objects = DrillObjects(cluster, [STATEFUL_SET])
    objects.inject()
    pod_of(fake, owner_uid=uid_of_guarded(fake))
    result = evict(cluster, objects)
    assert result["ok"] and result["detail"] == "evict Pod ns/guarded-0: accepted"
    assert fake.evicted == [Ref("Pod", "guarded-0", "ns")]


def test_a_pod_whose_statefulset_is_not_the_drills_is_not_evicted(cluster, fake):
    objects = DrillObjects(cluster, [STATEFUL_SET])
    objects.inject()
    # Same name, another StatefulSet (a uid the drill's does not have): someone else's pod.
    pod_of(fake, owner_uid="uid-theirs")
    result = evict(cluster, objects)
    assert not result["ok"] and "not this drill's" in result["detail"]
    fake.objects[Ref("StatefulSet", "guarded", "ns")]["metadata"]["labels"][OWNER_LABEL] = "other"
    pod_of(fake, owner_uid=uid_of_guarded(fake))
    assert not evict(cluster, objects)["ok"]
    assert fake.evicted == []


def test_a_refused_eviction_is_recorded_as_not_run(cluster, fake, monkeypatch):
    objects = DrillObjects(cluster, [STATEFUL_SET])
    objects.inject()
    pod_of(fake, owner_uid=uid_of_guarded(fake))

    def refused(cluster, ref, uid=None):
        raise ApiException(status=429, reason="TooManyRequests")  # a PodDisruptionBudget's answer
    monkeypatch.setattr(kube_objects, "evict", refused)
    result = evict(cluster, objects)
    assert not result["ok"] and "429" in result["detail"]


def test_the_eviction_request_names_the_pod_and_its_uid(monkeypatch):
    sent = []
    monkeypatch.setattr(kube_objects, "_call", lambda cluster, method, path, body=None, **kw: sent.append((method, path, body)))
    assert kube_objects.evict(None, Ref("Pod", "guarded-0", "ns"), uid="u1")
    assert sent == [("POST", "/api/v1/namespaces/ns/pods/guarded-0/eviction",
                     {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "guarded-0", "namespace": "ns"},
                      "deleteOptions": {"preconditions": {"uid": "u1"}}})]
    with pytest.raises(ValueError):
        kube_objects.evict(None, Ref("Deployment", "web", "ns"))


# --- what a careless or hostile scenario file must not do to the loader -------------------------

def test_a_huge_replicas_count_is_not_enumerated_when_an_eviction_is_checked(tmp_path):
    # Loading once built a list of every <set>-<ordinal> name: 10**12 replicas exhausted memory.
    # In a child process with its address space limited, so a regression fails instead of swapping.
    import subprocess
    import sys
    from pathlib import Path

    code = f"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
sys.path.insert(0, {str(Path(__file__).parents[1])!r})
from pathlib import Path
from scenario_copies import load_edited

def edit(d):
    next(m for m in d["workload"]["manifests"] if m["metadata"]["name"] == "guarded")["spec"]["replicas"] = 10**12
    d["runner"]["actions"][0]["evict"]["name"] = "guarded-999999999999"
print(load_edited(Path({str(tmp_path)!r}), {NAME!r}, edit).runner["actions"][0]["evict"]["name"])
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "guarded-999999999999", done.stderr[-500:]


@pytest.mark.parametrize("edit", [
    lambda d: next(m for m in manifests(d) if m["metadata"]["name"] == "guarded").update(spec="replicas: 1"),
    lambda d: next(m for m in manifests(d) if m["metadata"]["name"] == "guarded")["spec"].update(replicas=-1),
    lambda d: next(m for m in manifests(d) if m["metadata"]["name"] == "guarded")["spec"].update(replicas="1"),
    lambda d: next(m for m in manifests(d) if m["metadata"]["name"] == "guarded")["spec"].update(replicas=True),
    # Leading zeros are no ordinal a StatefulSet names a pod with.
    lambda d: d["runner"]["actions"][0]["evict"].update(name="guarded-00"),
    lambda d: d["runner"]["actions"][0]["evict"].update(namespace="kube-system"),
])
def test_an_eviction_of_a_pod_no_declared_statefulset_makes_is_refused(tmp_path, edit):
    err = error_for(tmp_path, edit)
    assert err.field == "runner.actions[0].evict", str(err)


@pytest.mark.parametrize("edit, field, expected", [
    # Values that are no strings were a TypeError (unhashable) rather than a refusal.
    (lambda d: webhook(d)["namespaceSelector"]["matchExpressions"][0].update(values=[["$(namespace)"]]),
     "workload.manifests[6].webhooks[0].namespaceSelector", "naming only the drill's namespaces"),
    (lambda d: webhook(d)["namespaceSelector"]["matchExpressions"][0].update(values=[{"a": "b"}]),
     "workload.manifests[6].webhooks[0].namespaceSelector", "naming only the drill's namespaces"),
    # Rules and webhooks of the wrong type are named as such, not as a missing scope or selector.
    (lambda d: webhook(d).update(rules={"scope": "Namespaced"}), "workload.manifests[6].webhooks[0].rules",
     "a list of rules"),
    (lambda d: webhook(d).update(rules="Namespaced"), "workload.manifests[6].webhooks[0].rules", "a list of rules"),
    (lambda d: webhook(d).update(rules=[]), "workload.manifests[6].webhooks[0].rules", "a list of rules"),
    (lambda d: manifests(d)[6].update(webhooks=["pod-delete.kdrill.io"]), "workload.manifests[6].webhooks[0]",
     "a mapping"),
    # A mutating webhook is held to the same scope.
    (lambda d: manifests(d)[6].update(kind="MutatingWebhookConfiguration") or webhook_any(d).pop("namespaceSelector"),
     "workload.manifests[6].webhooks[0].namespaceSelector", "naming only the drill's namespaces"),
])
def test_webhooks_of_the_wrong_shape_are_refused_naming_the_field(tmp_path, edit, field, expected):
    err = error_for(tmp_path, edit)
    assert err.field == field, str(err)
    assert expected in err.expected, str(err)


HOOK = "workload.manifests[6].webhooks[0]"


@pytest.mark.parametrize("edit, field, expected, got", [
    # Each is a 422 from the API server when the configuration is created, after the setup began.
    (lambda d: webhook(d).update(timeoutSeconds=0), "timeoutSeconds", "a whole number of seconds from 1 to 30", "0"),
    (lambda d: webhook(d).update(timeoutSeconds=31), "timeoutSeconds", "from 1 to 30", "31"),
    (lambda d: webhook(d).update(timeoutSeconds="5"), "timeoutSeconds", "from 1 to 30", "'5'"),
    (lambda d: webhook(d).update(timeoutSeconds=2.5), "timeoutSeconds", "a whole number", "2.5"),
    (lambda d: webhook(d).update(sideEffects="Some"), "sideEffects", "None or NoneOnDryRun", "'Some'"),
    (lambda d: webhook(d).update(sideEffects="Unknown"), "sideEffects", "None or NoneOnDryRun", "'Unknown'"),
    (lambda d: webhook(d).pop("sideEffects"), "sideEffects", "(required in v1", "nothing"),
    (lambda d: webhook(d).update(name="pod-delete"), "name", "a fully qualified name of at least three DNS labels",
     "'pod-delete'"),
    (lambda d: webhook(d).update(name="pod-delete.io"), "name", "at least three DNS labels", "'pod-delete.io'"),
    (lambda d: webhook(d).update(name="Pod_Delete.kdrill.io"), "name", "lowercase letters", "'Pod_Delete.kdrill.io'"),
    (lambda d: webhook(d).update(name="$(namespace)"), "name", "at least three DNS labels",
     "'kdrill-webhook-on-pod-delete' ($(namespace) is kdrill-webhook-on-pod-delete)"),
    (lambda d: webhook(d).pop("name"), "name", "at least three DNS labels", "None"),
    (lambda d: webhook(d)["clientConfig"]["service"].update(port=0), "clientConfig.service.port",
     "a port number from 1 to 65535", "0"),
    (lambda d: webhook(d)["clientConfig"]["service"].update(port=65536), "clientConfig.service.port", "1 to 65535",
     "65536"),
    (lambda d: webhook(d)["clientConfig"]["service"].update(port="https"), "clientConfig.service.port", "1 to 65535",
     "'https'"),
    (lambda d: webhook(d).pop("admissionReviewVersions"), "admissionReviewVersions", "(required in v1)", "nothing"),
    (lambda d: webhook(d).update(admissionReviewVersions=[]), "admissionReviewVersions", "v1 or v1beta1", "[]"),
    (lambda d: webhook(d).update(admissionReviewVersions=["v2"]), "admissionReviewVersions", "v1 or v1beta1",
     "['v2']"),
    (lambda d: webhook(d).update(admissionReviewVersions=["v1", "v1"]), "admissionReviewVersions", "each once",
     "['v1', 'v1']"),
    (lambda d: webhook(d).update(failurePolicy="fail"), "failurePolicy", "Ignore or Fail", "'fail'"),
    (lambda d: webhook(d).update(matchPolicy="Equal"), "matchPolicy", "Exact or Equivalent", "'Equal'"),
])
def test_webhook_settings_the_api_server_refuses_are_refused_first(tmp_path, edit, field, expected, got):
    err = error_for(tmp_path, edit)
    assert err.field == f"{HOOK}.{field}", str(err)
    assert expected in err.expected and err.got == got, str(err)


def test_a_mutating_webhooks_reinvocation_policy_is_one_the_api_takes(tmp_path):
    def mutating(d, policy):
        manifests(d)[6]["kind"] = "MutatingWebhookConfiguration"
        webhook_any(d)["reinvocationPolicy"] = policy

    load_edited(tmp_path, NAME, lambda d: mutating(d, "IfNeeded"))
    err = error_for(tmp_path, lambda d: mutating(d, "Always"))
    assert err.field == f"{HOOK}.reinvocationPolicy" and err.expected == "Never or IfNeeded", str(err)


def test_two_webhooks_of_one_configuration_have_two_names(tmp_path):
    import copy

    err = error_for(tmp_path, lambda d: manifests(d)[6]["webhooks"].append(copy.deepcopy(webhook(d))))
    assert err.field == "workload.manifests[6].webhooks[1].name" and "no other webhook" in err.expected, str(err)


@pytest.mark.parametrize("kind", ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"])
@pytest.mark.parametrize("name", ["pod-delete", "kdrill-webhook-on-pod-delete", "pod-delete-$(namespace)"])
def test_a_webhook_configuration_is_named_after_the_drills_namespace(tmp_path, kind, name):
    # Cluster-scoped: a fixed name would meet another drill's (or case's) configuration, as a
    # ValidatingAdmissionPolicy's would.
    err = error_for(tmp_path, lambda d: manifests(d)[6].update(kind=kind, metadata={"name": name}))
    assert err.field == "workload.manifests[6].metadata.name" and err.got == repr(name), str(err)
    assert err.expected.startswith("a name made from the drill's namespace, $(namespace)...") and kind in err.expected


def webhook_any(d):
    return next(m for m in manifests(d) if m["kind"].endswith("WebhookConfiguration"))["webhooks"][0]


@pytest.mark.parametrize("edit, got", [
    (lambda d: manifests(d)[0]["metadata"].update(labels={"key": "$(tls_key)"}), "$(tls_key) in a Secret outside"),
    (lambda d: manifests(d)[0]["metadata"].update(annotations={"key": "$(tls_key)"}), "$(tls_key) in a Secret outside"),
    (lambda d: manifests(d).insert(1, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "key"},
                                       "data": {"tls.key": "$(tls_key)"}}), "$(tls_key) in a ConfigMap"),
    (lambda d: manifests(d)[2]["spec"]["template"]["spec"]["containers"][0].update(
        env=[{"name": "KEY", "value": "$(tls_key)"}]), "$(tls_key) in a Deployment"),
])
def test_the_private_key_goes_only_in_a_secrets_string_data(tmp_path, edit, got):
    # Elsewhere it would be readable beside the object, or quoted back in a refusal the evidence keeps.
    err = error_for(tmp_path, edit)
    assert err.field.startswith("workload.manifests[") and "only in the stringData of a Secret" in err.expected, str(err)
    assert got in err.got, str(err)


def test_a_statefulset_numbered_from_spec_ordinals_start_is_evicted_by_those_names(tmp_path):
    def numbered_from_5(d, name):
        next(m for m in manifests(d) if m["metadata"]["name"] == "guarded")["spec"]["ordinals"] = {"start": 5}
        d["runner"]["actions"][0]["evict"]["name"] = name
    assert load_edited(tmp_path, NAME, lambda d: numbered_from_5(d, "guarded-5")).runner["actions"][0]["evict"]
    err = error_for(tmp_path, lambda d: numbered_from_5(d, "guarded-0"))
    assert err.field == "runner.actions[0].evict" and "guarded-5" in err.expected, str(err)
