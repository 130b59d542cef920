"""Declared objects in data-only scenarios: manifests (ledger kind ``drill-objects``), object-state
probes and actions. Pure logic, and the drill-objects protocol against a small in-memory stand-in
for the API calls it makes; whether the platform behaves as apiservice-unavailable claims is
measured on a real cluster by the runner."""

from __future__ import annotations

import copy
import re
import time

import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from scenario_copies import load_edited

from harness.core import resources
from harness.core.ledger import Ledger
from harness.core.timeline import Sample
from harness.engine import measures
from harness.engine.workload import declared_manifests, object_ref
from harness.faults import FaultError, FaultNotReverted, injected
from harness.kube import objects as kube_objects
from harness.kube.objects import Ref
from harness.kube.providers import Cluster
from harness.probes.object_state import holds
from harness.scaffolding.drill_objects import OWNER_LABEL, DrillObjects
from harness.spec.scenario import ScenarioError

ORIGINAL = resources.scenarios_dir() / "apiservice-unavailable.yaml"


# --- kinds, placeholders, states --------------------------------------------------------------

def test_paths_are_the_apis_own():
    assert kube_objects.kind_of("Namespace").path("x") == "/api/v1/namespaces/x"
    assert kube_objects.kind_of("Deployment").path("web", "ns") == "/apis/apps/v1/namespaces/ns/deployments/web"
    assert kube_objects.kind_of("APIService").path() == "/apis/apiregistration.k8s.io/v1/apiservices"


def test_an_unknown_kind_names_the_known_ones():
    with pytest.raises(KeyError, match="APIService"):
        kube_objects.kind_of("CronTab")


def test_placeholders_expand_everywhere_and_an_unknown_one_is_an_error():
    value = {"a": ["$(namespace)-victim", {"b": "$(namespace)"}], "n": 3}
    assert kube_objects.expand(value, {"namespace": "ns"}) == {"a": ["ns-victim", {"b": "ns"}], "n": 3}
    assert value["a"][0] == "$(namespace)-victim"  # the input is not changed
    with pytest.raises(KeyError, match=r"\$\(nope\)"):
        kube_objects.expand("$(nope)", {"namespace": "ns"})
    assert kube_objects.placeholders(value) == {"namespace"}


def test_an_escaped_placeholder_is_sent_as_written_once_unescaped():
    # As Kubernetes escapes $(VAR) in a container's command: a shell's command substitution
    # must reach the shell, not be refused as an unknown placeholder.
    command = ["sh", "-c", "echo $$(hostname) in $(namespace)"]
    assert kube_objects.placeholders(command) == {"namespace"}
    assert kube_objects.expand(command, {"namespace": "ns"}) == ["sh", "-c", "echo $(hostname) in ns"]
    assert kube_objects.expand("$$(namespace)", {"namespace": "ns"}) == "$(namespace)"
    assert list(kube_objects.placeholder_keys({"$$(x)": 1, "$(y)": 2})) == [("$(y)",)]


def test_declared_manifests_go_in_the_drill_namespace_unless_cluster_scoped_or_placed():
    made = declared_manifests([
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "$(namespace)-victim"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": "$(namespace)-victim"}},
    ], "ns")
    assert [Ref.of(m) for m in made] == [Ref("Namespace", "ns-victim"), Ref("ConfigMap", "a", "ns"),
                                         Ref("ConfigMap", "b", "ns-victim")]
    assert object_ref({"kind": "Namespace", "name": "$(namespace)-victim"}, "ns") == Ref("Namespace", "ns-victim")
    assert object_ref({"kind": "Service", "name": "web"}, "ns") == Ref("Service", "web", "ns")


def condition(type_, status, reason=""):
    return {"type": type_, "status": status, "reason": reason}


def test_readiness_per_kind():
    assert kube_objects.not_ready_reason(None) == "not found"
    deployment = {"kind": "Deployment", "spec": {"replicas": 2}, "status": {"readyReplicas": 1}}
    assert "1 of 2" in kube_objects.not_ready_reason(deployment)
    deployment["status"]["readyReplicas"] = 2
    assert kube_objects.not_ready_reason(deployment) is None
    apiservice = {"kind": "APIService", "status": {"conditions": [condition("Available", "False", "MissingEndpoints")]}}
    assert "MissingEndpoints" in kube_objects.not_ready_reason(apiservice)
    apiservice["status"]["conditions"] = [condition("Available", "True", "Passed")]
    assert kube_objects.not_ready_reason(apiservice) is None
    assert kube_objects.not_ready_reason({"kind": "ConfigMap"}) is None


def test_object_state_predicates():
    terminating = {"kind": "Namespace", "metadata": {"deletionTimestamp": "x"}, "status": {
        "phase": "Terminating", "conditions": [condition("NamespaceDeletionDiscoveryFailure", "True", "DiscoveryFailed")]}}
    assert holds(None, "absent") and not holds(terminating, "absent")
    assert holds(terminating, "present") and not holds(None, "present")
    assert holds(terminating, {"condition": "NamespaceDeletionDiscoveryFailure", "status": "True"})
    assert not holds(terminating, {"condition": "NamespaceDeletionDiscoveryFailure", "status": "False"})
    assert not holds(None, {"condition": "NamespaceDeletionDiscoveryFailure", "status": "True"})
    assert kube_objects.state_text(terminating) == \
        "phase=Terminating deleting NamespaceDeletionDiscoveryFailure(DiscoveryFailed)"
    assert kube_objects.state_text(None) == "absent"
    with pytest.raises(ValueError):
        holds(None, "gone")


def test_first_success_seconds():
    samples = [Sample(10.0, False), Sample(10.5, False), Sample(11.5, True), Sample(12.0, False)]
    assert measures.first_success_seconds(samples, 10.0, 20.0) == 1.5
    assert measures.first_success_seconds(samples[:2], 10.0, 20.0) is None
    assert measures.first_success_seconds(samples, 11.6, 20.0) is None


# --- the scenario fields are checked before anything is touched --------------------------------

def scenario_with(tmp_path, edit):
    return load_edited(tmp_path, "apiservice-unavailable", edit)


def error_for(tmp_path, edit) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        scenario_with(tmp_path, edit)
    return info.value


def test_the_shipped_scenario_loads(tmp_path):
    scenario = scenario_with(tmp_path, lambda d: None)
    assert [m["kind"] for m in scenario.workload["manifests"]] == ["Namespace", "Service", "Deployment", "APIService"]


def manifests(d):
    return d["workload"]["manifests"]


@pytest.mark.parametrize("edit, field, expected", [
    (lambda d: manifests(d)[0].update(kind="CronTab"), "workload.manifests[0].kind", "a kind the runner knows"),
    (lambda d: manifests(d)[3].update(apiVersion="apiregistration.k8s.io/v1beta1"), "workload.manifests[3].apiVersion",
     "'apiregistration.k8s.io/v1'"),
    (lambda d: manifests(d)[1]["metadata"].update(namespace="kube-system"), "workload.manifests[1].metadata.namespace",
     "the drill's namespace"),
    (lambda d: manifests(d).append(copy.deepcopy(manifests(d)[1])), "workload.manifests[4].metadata.name",
     "not made twice"),
    (lambda d: manifests(d)[2]["spec"]["template"]["spec"]["containers"][0].update(image="$(registry)/x"),
     "workload.manifests[2]", "placeholders among"),
    (lambda d: manifests(d)[0].pop("metadata"), "workload.manifests[0].metadata", "a mapping"),
    (lambda d: d["runner"]["actions"][0]["delete"].update(name="kube-system"), "runner.actions[0].delete",
     "an object made by workload.manifests"),
    (lambda d: d["runner"]["actions"][0].update(after_seconds=115), "runner.actions[0].after_seconds",
     "fewer seconds than the fault window"),
    (lambda d: d["runner"]["probes"][1].pop("ok_when"), "runner.probes[1].ok_when", "a ok_when for a object-state"),
    (lambda d: d["runner"]["probes"][1].update(target="name"), "runner.probes[1].target", "no target"),
    (lambda d: d["runner"]["probes"][0].pop("target"), "runner.probes[0].target", "a target for a incluster-http"),
    (lambda d: d["runner"]["probes"][2].update(ok_when="gone"), "runner.probes[2].ok_when", ""),
    (lambda d: d["runner"]["probes"][2]["object"].update(kind="Widget"), "runner.probes[2].object.kind",
     "a kind the runner knows"),
    # An APIService for a built-in group: the API server's own exists (v1.apps); refused before anything is made.
    (lambda d: (manifests(d)[3]["metadata"].update(name="v1.apps"), manifests(d)[3]["spec"].update(group="apps", version="v1")),
     "workload.manifests[3].spec.group", "not one of Kubernetes' built-in groups"),
    (lambda d: manifests(d)[3]["spec"].update(group=""),
     "workload.manifests[3].spec.group", "not one of Kubernetes' built-in groups"),
    (lambda d: (manifests(d)[3]["metadata"].update(name="v1beta1.metrics.k8s.io"),
                manifests(d)[3]["spec"].update(group="metrics.k8s.io", version="v1beta1")),
     "workload.manifests[3].spec.group", "nor under k8s.io or kubernetes.io"),
    (lambda d: manifests(d)[3]["metadata"].update(name="v1beta1.drill.kdrill.io"), "workload.manifests[3].metadata.name",
     "v1alpha1.drill.kdrill.io (the API server requires <version>.<group>)"),
    (lambda d: manifests(d)[3]["spec"].pop("version"), "workload.manifests[3].spec.version", "the version the backend"),
])
def test_bad_declared_objects_are_refused_naming_the_field(tmp_path, edit, field, expected):
    err = error_for(tmp_path, edit)
    assert err.field == field, str(err)
    assert expected in err.expected


def test_manifests_are_refused_in_a_scenario_with_a_drill_file(tmp_path):
    def edit(d):
        d.pop("runner")
        d["drill"] = "drills/test_data_scenarios.py"
        for e in d["expectations"]:
            e.pop("measure")
    err = error_for(tmp_path, edit)
    assert err.field == "workload.manifests"


# --- the drill-objects protocol around the ledger ---------------------------------------------

class FakeApi:
    """The objects the fake cluster holds, by Ref, and every call made, in order."""

    def __init__(self, existing=None):
        self.objects = dict(existing or {})
        self.calls = []

    def create(self, cluster, manifest, ref=None):
        ref = ref or Ref.of(manifest)
        self.calls.append(("create", ref))
        if ref in self.objects:
            raise ApiException(status=409, reason="AlreadyExists")
        self.objects[ref] = copy.deepcopy(manifest)
        self.objects[ref]["metadata"]["uid"] = f"uid-{len(self.calls)}"
        return manifest

    def read(self, cluster, ref, **kwargs):
        self.calls.append(("read", ref))
        return copy.deepcopy(self.objects.get(ref))

    def delete(self, cluster, ref, uid=None):
        self.calls.append(("delete", ref))
        if uid is not None and ref in self.objects and self.objects[ref]["metadata"].get("uid") != uid:
            raise ApiException(status=409, reason="Conflict")  # the API's answer to a failed precondition
        if ref in self.objects and self.objects[ref]["metadata"].get("finalizers"):
            self.objects[ref]["metadata"]["deletionTimestamp"] = "now"  # kept until they are removed
            return True
        return self.objects.pop(ref, None) is not None

    def remove_finalizers(self, cluster, ref, prefix):
        self.calls.append(("remove_finalizers", ref))
        meta = self.objects[ref]["metadata"]
        removed = [f for f in meta["finalizers"] if f.startswith(prefix)]
        meta["finalizers"] = [f for f in meta["finalizers"] if f not in removed]
        if not meta["finalizers"] and meta.get("deletionTimestamp"):
            self.objects.pop(ref)
        return removed


@pytest.fixture
def cluster(tmp_path):
    made = Cluster(name="unit", provider="kind", kubeconfig=tmp_path / "kubeconfig", context="kind-unit",
                   node_access=False)
    made.__dict__["api"] = object()
    return made


@pytest.fixture
def fake(monkeypatch):
    api = FakeApi()
    for name in ("create", "read", "delete", "remove_finalizers"):
        monkeypatch.setattr(kube_objects, name, getattr(api, name))
    return api


MANIFESTS = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns-victim"}},
             {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "v1.x.io"}}]


def test_objects_are_in_the_ledger_before_they_exist_and_deleted_newest_first(cluster, fake, tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    seen_in_ledger = []
    real_create = fake.create

    def create(c, manifest, ref=None):
        seen_in_ledger.append([e.target["token"] for e in ledger.entries()])
        return real_create(c, manifest)

    kube_objects.create = create
    objects = DrillObjects(cluster, MANIFESTS)
    with injected(objects, ledger):
        assert all(seen_in_ledger) and len(seen_in_ledger) == 2
        assert ledger.entries()[0].target["created"] == [{"kind": "Namespace", "name": "ns-victim"},
                                                          {"kind": "APIService", "name": "v1.x.io"}]
        assert all(o["metadata"]["labels"][OWNER_LABEL] == objects.token for o in fake.objects.values())
    assert [c for c in fake.calls if c[0] == "delete"] == [("delete", Ref("APIService", "v1.x.io")),
                                                           ("delete", Ref("Namespace", "ns-victim"))]
    assert fake.objects == {} and ledger.entries() == []


def test_an_existing_object_is_refused_and_never_deleted(cluster, fake, tmp_path):
    theirs = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "v1.x.io"}}
    fake.objects[Ref("APIService", "v1.x.io")] = theirs
    ledger = Ledger(tmp_path / "ledger")
    with pytest.raises(FaultError, match="already exists"):
        with injected(DrillObjects(cluster, MANIFESTS), ledger):
            pass
    assert fake.objects == {Ref("APIService", "v1.x.io"): theirs}  # ours (the namespace) deleted, theirs kept
    assert ledger.entries() == []


def test_recover_rebuilds_from_the_ledger_and_leaves_an_unlabelled_namesake(cluster, fake):
    objects = DrillObjects(cluster, MANIFESTS)
    objects.inject()
    # Someone replaced the APIService with their own meanwhile: not ours to delete.
    fake.objects[Ref("APIService", "v1.x.io")]["metadata"]["labels"] = {}
    again = DrillObjects.from_target(cluster, objects.target())
    again.revert()
    again.verify_reverted()
    assert list(fake.objects) == [Ref("APIService", "v1.x.io")]


def test_an_object_that_stays_fails_the_verification(cluster, fake, monkeypatch):
    import harness.scaffolding.drill_objects as module

    monkeypatch.setattr(module, "GONE_DEADLINE_SECONDS", 0.3)
    monkeypatch.setattr(module, "POLL_SECONDS", 0.1)
    objects = DrillObjects(cluster, MANIFESTS[:1])
    objects.inject()
    fake.delete = lambda c, ref, uid=None: True  # the API accepts the deletion, the object stays (a finalizer)
    monkeypatch.setattr(kube_objects, "delete", fake.delete)
    objects.revert()
    with pytest.raises(FaultNotReverted, match="Namespace ns-victim still exists"):
        objects.verify_reverted()


# --- hostile input: names that would reach outside the drill ---------------------------------

@pytest.mark.parametrize("kind, name, namespace", [
    ("ConfigMap", "../../kube-system/configmaps/coredns", "ns"),  # the client normalises "..": kube-system
    ("ConfigMap", "x", "ns/../kube-system"),
    ("ConfigMap", "%2e%2e%2fkube-system", "ns"),
    ("ConfigMap", "Coredns", "ns"),
    ("ConfigMap", "a" * 254, "ns"),
    ("ConfigMap", "", "ns"),
    ("ConfigMap", "x", None),  # a namespaced kind without its namespace: /namespaces/None/
    ("Namespace", "kube-system", "ns"),  # a cluster-scoped kind with one
    ("Namespace", "a.b", None),  # a namespace is a DNS label
    ("Service", "1web", "ns"),  # a Service is an RFC 1035 label
])
def test_a_name_the_api_would_not_take_never_becomes_a_request(monkeypatch, kind, name, namespace):
    sent = []
    monkeypatch.setattr(kube_objects, "_call", lambda *args, **kwargs: sent.append(args))
    ref = Ref(kind, name, namespace)
    manifest = {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": namespace}}
    calls = [lambda: kube_objects.read(None, ref), lambda: kube_objects.delete(None, ref)]
    if Ref.of(manifest) == ref:  # a creation names a cluster-scoped kind's object without its namespace
        calls.append(lambda: kube_objects.create(None, manifest))
    for call in calls:
        with pytest.raises(ValueError, match="expected"):
            call()
    assert sent == []


def test_valid_names_still_make_paths():
    assert kube_objects.kind_of("APIService").path("v1alpha1.drill.kdrill.io") == \
        "/apis/apiregistration.k8s.io/v1/apiservices/v1alpha1.drill.kdrill.io"
    assert kube_objects.kind_of("ConfigMap").path("a" * 253, "n" * 63).endswith("/configmaps/" + "a" * 253)


def configmap(name="extra", **metadata):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **metadata}}


@pytest.mark.parametrize("edit, field, expected, got", [
    (lambda d: manifests(d).append(configmap("../../kube-system/configmaps/coredns")),
     "workload.manifests[4].metadata.name", "a ConfigMap name", "'../../kube-system/configmaps/coredns'"),
    (lambda d: manifests(d).append(configmap("%2e%2e")), "workload.manifests[4].metadata.name", "a ConfigMap name", None),
    (lambda d: manifests(d).append(configmap("Extra")), "workload.manifests[4].metadata.name", "a ConfigMap name", None),
    (lambda d: manifests(d).append(configmap("a\nb")), "workload.manifests[4].metadata.name", "a ConfigMap name", None),
    (lambda d: manifests(d).append(configmap("$(toolbox_image)")), "workload.manifests[4].metadata.name",
     "only placeholder is $(namespace)", None),
    (lambda d: manifests(d)[1]["metadata"].update(name="backend.svc"), "workload.manifests[1].metadata.name",
     "a Service name", None),
    # A drill namespace of 63 characters leaves no room for "-victim": the API would refuse it midway.
    (lambda d: d.update(name="a" * 50), "workload.manifests[0].metadata.name", "a Namespace name",
     "($(namespace) is kdrill-" + "a" * 50 + ")"),
    (lambda d: manifests(d)[3]["metadata"].update(namespace="kube-system"), "workload.manifests[3].metadata.namespace",
     "no namespace (APIService objects are cluster-scoped)", "'kube-system'"),
    (lambda d: d["runner"]["probes"][1]["object"].update(name="../x"), "runner.probes[1].object.name",
     "APIService name", None),
    (lambda d: d["runner"]["actions"][0]["delete"].update(namespace="kube-system"), "runner.actions[0].delete.namespace",
     "no namespace", "'kube-system'"),
    (lambda d: d["runner"]["actions"][0]["delete"].update(name="$(namespace)-Victim"), "runner.actions[0].delete.name",
     "a Namespace name", "'kdrill-apiservice-unavailable-Victim' ($(namespace) is kdrill-apiservice-unavailable)"),
])
def test_names_are_checked_as_the_api_will_get_them(tmp_path, edit, field, expected, got):
    err = error_for(tmp_path, edit)
    assert err.field == field, str(err)
    assert expected in err.expected
    assert got is None or got in err.got


def namespace_manifest(name):
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


@pytest.mark.parametrize("name", ["kube-system", "default", "team-a", "$(namespace)", "x-$(namespace)"])
def test_a_namespace_is_declared_only_under_the_drills_own_name(tmp_path, name):
    # A declared Namespace would make kube-system or default a place for the manifests after it
    # (and an action could then delete it); one that does not exist yet (a tenant's, made later)
    # would be created and deleted with whatever was put in it meanwhile.
    def edit(d):
        manifests(d)[0] = namespace_manifest(name)
        manifests(d).append(configmap(namespace=name))
    err = error_for(tmp_path, edit)
    assert err.field == "workload.manifests[0].metadata.name", str(err)
    assert "$(namespace)-" in err.expected and err.got == repr(name)


@pytest.mark.parametrize("metadata, field, expected", [
    # Labels kdrill adds its own to: anything but a mapping of strings failed at setup (TypeError)
    # after the namespace and the HTTP server were made, or at the API after earlier objects were.
    ({"labels": "app=x"}, "workload.manifests[1].metadata.labels", "a mapping"),
    ({"labels": None}, "workload.manifests[1].metadata.labels", "a mapping"),
    ({"labels": {"app": 1}}, "workload.manifests[1].metadata.labels.app", "a string"),
    ({"annotations": ["a"]}, "workload.manifests[1].metadata.annotations", "a mapping"),
    # The owner label is kdrill's to set; a scenario's value would be silently replaced.
    ({"labels": {OWNER_LABEL: "0123456789ab"}}, f"workload.manifests[1].metadata.labels.{OWNER_LABEL}",
     "no kdrill.io/drill-objects label"),
    # Lifecycle and ownership are the drill's: a finalizer would keep the object after the revert
    # (allowed only on the scenario's own custom resources: tests/unit/spec/test_custom_resources.py),
    # ownerReferences hand its deletion to the garbage collector, the rest the API sets itself.
    ({"finalizers": ["example.com/keep"]}, "workload.manifests[1].metadata.finalizers", "no finalizers, except"),
    ({"ownerReferences": []}, "workload.manifests[1].metadata.ownerReferences", "no such field"),
    ({"generateName": "x-"}, "workload.manifests[1].metadata.generateName", "no such field"),
    ({"resourceVersion": "1"}, "workload.manifests[1].metadata.resourceVersion", "no such field"),
])
def test_manifest_metadata_is_name_namespace_labels_annotations(tmp_path, metadata, field, expected):
    err = error_for(tmp_path, lambda d: manifests(d)[1]["metadata"].update(metadata))
    assert err.field == field, str(err)
    assert expected in err.expected


def test_labels_and_annotations_of_strings_are_taken(tmp_path):
    scenario = scenario_with(tmp_path, lambda d: manifests(d)[1]["metadata"].update(
        labels={"app.kubernetes.io/name": "backend"}, annotations={"note": "drill"}))
    made = DrillObjects(None, declared_manifests(scenario.workload["manifests"], "ns"))
    assert made.manifests[1]["metadata"]["labels"] == {"app.kubernetes.io/name": "backend", OWNER_LABEL: made.token}


@pytest.mark.parametrize("data, field", [
    ({"$(namespace).conf": "x"}, "workload.manifests[4].data.$(namespace).conf"),
    ({"a": "ok", "$(nope)": "y"}, "workload.manifests[4].data.$(nope)"),
])
def test_a_placeholder_in_a_key_is_refused_not_sent_as_written(tmp_path, data, field):
    # expand() replaces placeholders in values only: the key would reach the API as "$(namespace).conf".
    err = error_for(tmp_path, lambda d: manifests(d).append({**configmap(), "data": data}))
    assert err.field == field, str(err)
    assert "keys are sent as written" in err.expected


def test_action_names_are_unique(tmp_path):
    # Actions.finish tells a run action from one that never ran by its name: with two of one name,
    # the second going unrun would be counted as run, and the drill would not be an error.
    def edit(d):
        again = copy.deepcopy(d["runner"]["actions"][0])
        again.update(window="after", after_seconds=1)
        d["runner"]["actions"].append(again)
    err = error_for(tmp_path, edit)
    assert err.field == "runner.actions[1].name", str(err)
    assert "unique" in err.expected


def test_the_same_object_is_not_made_twice_once_placeholders_are_expanded(tmp_path):
    # Two spellings of one ConfigMap: the second creation would meet a 409 and be blamed on "an
    # object kdrill did not make".
    err = error_for(tmp_path, lambda d: manifests(d).extend([
        configmap("$(namespace)-c"), configmap("kdrill-apiservice-unavailable-c")]))
    assert err.field == "workload.manifests[5].metadata.name", str(err)
    assert "not made twice" in err.expected and "workload.manifests[4]" in err.expected


# --- hostile ledger entries and creations that half happened ------------------------------------

def test_a_creation_that_took_effect_without_an_answer_is_still_deleted(cluster, fake, tmp_path):
    # The API stored the APIService, the answer was lost (a read timeout): it is not in `created`,
    # but it is in `planned`, recorded before anything was made, and it carries this entry's label.
    real_create = fake.create

    def create(c, manifest, ref=None):
        real_create(c, manifest)
        if manifest["kind"] == "APIService":
            raise TimeoutError("read timed out")
        return manifest

    kube_objects.create = create
    ledger = Ledger(tmp_path / "ledger")
    with pytest.raises(TimeoutError):
        with injected(DrillObjects(cluster, MANIFESTS), ledger):
            pass
    assert fake.objects == {} and ledger.entries() == []


def test_recover_deletes_what_was_made_just_before_a_crash(cluster, fake):
    # kill -9 after the APIService's creation, before its checkpoint: the ledger lists it as planned only.
    objects = DrillObjects(cluster, MANIFESTS)
    for manifest in objects.manifests:
        fake.create(cluster, manifest)
    target = {**objects.target(), "created": [Ref("Namespace", "ns-victim").to_dict()]}
    again = DrillObjects.from_target(cluster, target)
    again.revert()
    again.verify_reverted()
    assert fake.objects == {}


PLATFORM = {Ref("Namespace", "kube-system"): {"metadata": {"name": "kube-system"}},
            Ref("ConfigMap", "coredns", "kube-system"): {"metadata": {"name": "coredns"}},
            Ref("APIService", "v1.apps"): {"metadata": {"name": "v1.apps", "labels": {OWNER_LABEL: "someoneelse"}}}}


def test_a_ledger_entry_edited_to_name_platform_objects_deletes_none_of_them(cluster, fake, tmp_path):
    fake.objects.update(copy.deepcopy(PLATFORM))
    refs = [r.to_dict() for r in PLATFORM]
    ledger = Ledger(tmp_path / "ledger")
    entry = ledger.record("drill-objects", cluster=cluster.describe(),
                          target={"token": "0123456789ab", "planned": refs, "created": refs})
    from harness.faults import recover

    results = recover(ledger, lambda c: cluster, force=True)
    assert results[0]["reverted"] and results[0]["id"] == entry.id
    assert fake.objects == PLATFORM and not [c for c in fake.calls if c[0] == "delete"]


@pytest.mark.parametrize("edit, expected", [
    (lambda t: t.pop("token"), "token"),
    (lambda t: t.update(token=None), "token"),  # was: a fresh random token, nothing matched, entry dropped
    (lambda t: t.update(token=""), "token"),
    (lambda t: t.update(token="x/y"), "token"),
    (lambda t: t.update(created="Namespace ns-victim"), "created"),
    (lambda t: t.update(created=["Namespace ns-victim"]), "created[0]"),
    (lambda t: t.update(created=[{"kind": "Node", "name": "worker"}]), "created[0]"),
    (lambda t: t.update(created=[{"kind": "ConfigMap", "name": "../../kube-system/configmaps/coredns",
                                  "namespace": "ns"}]), "created[0]"),
    (lambda t: t.update(created=[{"kind": "ConfigMap", "name": "c"}]), "created[0]"),
    (lambda t: t.update(planned=[{"kind": "Namespace", "name": "ns-victim"}, {"kind": "APIService"}]), "planned[1]"),
])
def test_a_malformed_ledger_entry_is_refused_before_anything_is_touched(cluster, fake, tmp_path, edit, expected):
    objects = DrillObjects(cluster, MANIFESTS)
    objects.inject()
    calls = len(fake.calls)
    target = copy.deepcopy(objects.target())
    edit(target)
    with pytest.raises(FaultError, match=r"drill-objects ledger entry: " + re.escape(expected)):
        DrillObjects.from_target(cluster, target)
    ledger = Ledger(tmp_path / "ledger")
    ledger.record("drill-objects", cluster=cluster.describe(), target=target)
    from harness.faults import recover

    [result] = recover(ledger, lambda c: cluster, force=True)
    assert not result["reverted"] and "inspect it by hand" in result["error"]
    assert len(ledger.entries()) == 1 and len(fake.calls) == calls  # kept, and nothing read or deleted


# --- only this drill's very objects are deleted, by the revert and by actions ---------------------

def test_delete_names_the_object_it_means_by_its_uid(monkeypatch):
    sent = []
    monkeypatch.setattr(kube_objects, "_call", lambda cluster, method, path, body=None, **kw: sent.append(body))
    kube_objects.delete(None, Ref("APIService", "v1.x.io"), uid="u-1")
    assert sent[0]["preconditions"] == {"uid": "u-1"} and sent[0]["propagationPolicy"] == "Background"


def test_an_object_replaced_between_the_read_and_the_delete_is_left(cluster, fake):
    objects = DrillObjects(cluster, MANIFESTS)
    objects.inject()
    theirs = {"kind": "APIService", "metadata": {"name": "v1.x.io", "uid": "theirs"}}
    real_read = fake.read

    def read(c, ref, **kwargs):  # ours is read, then someone else's takes its name
        found = real_read(c, ref, **kwargs)
        if ref == Ref("APIService", "v1.x.io"):
            fake.objects[ref] = copy.deepcopy(theirs)
        return found

    kube_objects.read = read
    objects.revert()
    assert fake.objects == {Ref("APIService", "v1.x.io"): theirs}


class StubDrill:
    def __init__(self, cluster):
        self.namespace, self.cluster, self.said = "ns", cluster, []

    def say(self, line):
        self.said.append(line)


def run_action(cluster, objects, target, verb="delete"):
    """Run one action (``verb``: delete or evict) on ``target`` now, as the runner would."""
    from harness.engine.actions import Actions

    actions = Actions(StubDrill(cluster), [{"name": "a", "window": "fault", "after_seconds": 0, verb: target}],
                      "fault")
    actions.start(time.time(), objects)
    for timer in actions._timers:
        timer.join(5)
    [result] = actions.finish()
    return result


def test_an_action_deletes_the_drills_own_object(cluster, fake):
    objects = DrillObjects(cluster, MANIFESTS)
    objects.inject()
    result = run_action(cluster, objects, {"kind": "Namespace", "name": "ns-victim"})
    assert result["ok"] and "accepted" in result["detail"]
    assert Ref("Namespace", "ns-victim") not in fake.objects


def test_an_action_leaves_an_object_without_the_drills_label(cluster, fake):
    # Validation admits only declared objects, each created by this drill; should one be someone
    # else's by the time the action runs, the action fails rather than delete it.
    objects = DrillObjects(cluster, MANIFESTS)
    objects.inject()
    fake.objects[Ref("Namespace", "ns-victim")]["metadata"]["labels"] = {}
    result = run_action(cluster, objects, {"kind": "Namespace", "name": "ns-victim"})
    assert not result["ok"] and "label" in result["detail"]
    assert Ref("Namespace", "ns-victim") in fake.objects


@pytest.mark.parametrize("kind, api_version, name", [("Service", "v1", "web"), ("Deployment", "apps/v1", "web"),
                                                      ("Pod", "v1", "runner-probe")])
def test_a_declared_object_may_not_be_one_the_runner_makes_itself(tmp_path, kind, api_version, name):
    # Its creation would meet the runner's own object (409) after the setup had begun, and be
    # reported as an object kdrill did not make.
    err = error_for(tmp_path, lambda d: manifests(d).append(
        {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": "$(namespace)"}}))
    assert err.field == "workload.manifests[4].metadata.name", str(err)
    assert "the runner makes" in err.expected


def test_the_runners_names_are_free_in_a_declared_namespace(tmp_path):
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "$(namespace)-victim"}}
    scenario = scenario_with(tmp_path, lambda d: manifests(d).append(service))
    assert scenario.workload["manifests"][-1] == service


def test_a_conflict_on_our_own_object_is_an_error_not_a_replacement(cluster, fake, monkeypatch):
    # A 409 whose object is still ours (same uid) is a conflict to retry, not "someone else's now".
    objects = DrillObjects(cluster, MANIFESTS[:1])
    objects.inject()

    def conflict(c, ref, uid=None):
        raise ApiException(status=409, reason="Conflict")

    monkeypatch.setattr(kube_objects, "delete", conflict)
    with pytest.raises(FaultError, match="Namespace ns-victim: HTTP 409"):
        objects.revert()


@pytest.mark.parametrize("ok_when", [{"condition": "Available", "status": True}, {"condition": "Available"},
                                     {"condition": "Available", "status": "True", "reason": "Passed"},
                                     {"condition": "", "status": "True"}, ["absent"], "Absent", None, 1])
def test_a_malformed_ok_when_is_refused(tmp_path, ok_when):
    err = error_for(tmp_path, lambda d: d["runner"]["probes"][1].update(ok_when=ok_when))
    assert err.field.startswith("runner.probes[1].ok_when"), str(err)
    with pytest.raises(ValueError):
        holds(None, ok_when)


@pytest.mark.parametrize("window, past", [("fault", 0), ("fault", 1), ("after", 0), ("after", 600)])
def test_an_action_at_or_past_its_windows_end_is_refused(tmp_path, window, past):
    windows = yaml.safe_load(ORIGINAL.read_text())["runner"]["windows"]
    length = windows["hold_seconds" if window == "fault" else "after_seconds"]
    seconds = min(length + past, 600)
    err = error_for(tmp_path, lambda d: d["runner"]["actions"][0].update(window=window, after_seconds=seconds))
    assert err.field == "runner.actions[0].after_seconds", str(err)


def test_a_probe_may_read_a_platform_object(tmp_path):
    # Reading changes nothing: watching coredns or kube-system from a probe is allowed.
    scenario = scenario_with(tmp_path, lambda d: d["runner"]["probes"][1].update(
        object={"kind": "Deployment", "name": "coredns", "namespace": "kube-system"}, ok_when="present"))
    assert object_ref(scenario.runner["probes"][1]["object"], "ns") == Ref("Deployment", "coredns", "kube-system")


def test_an_undeclared_action_target_is_named_with_its_namespace(tmp_path):
    # Written out, the drill's namespace is another spelling than the manifest's default: refused
    # (an action matches a manifest as written), and the message shows both sides.
    err = error_for(tmp_path, lambda d: d["runner"]["actions"][0].update(delete={
        "kind": "Service", "name": "apiservice-backend", "namespace": "kdrill-apiservice-unavailable"}))
    assert err.field == "runner.actions[0].delete", str(err)
    assert err.got == "Service kdrill-apiservice-unavailable/apiservice-backend"
    assert "Service $(namespace)/apiservice-backend" in err.expected


def test_reserved_groups_are_kubernetes_own_and_only_those():
    for group in ("", "apps", "batch", "k8s.io", "storage.k8s.io", "metrics.k8s.io", "x.kubernetes.io"):
        assert kube_objects.reserved_group(group), group
    for group in ("drill.kdrill.io", "notk8s.io", "k8s.io.example.com", "apps.example.com"):
        assert not kube_objects.reserved_group(group), group


CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
       "metadata": {"name": "gadgets.g.kdrill.io"},
       "spec": {"group": "g.kdrill.io", "scope": "Namespaced", "names": {"kind": "Gadget", "plural": "gadgets"},
                "versions": [{"name": "v1", "served": True, "storage": True}]}}
HELD = {"apiVersion": "g.kdrill.io/v1", "kind": "Gadget",
        "metadata": {"name": "held", "namespace": "ns", "finalizers": ["g.kdrill.io/cleanup"]}}


def test_a_custom_resource_is_in_the_ledger_with_its_path_and_its_finalizers_are_removed_when_nobody_else_does(
        cluster, fake, monkeypatch):
    # Its controller gone, the revert waits its grace period, then removes the finalizers of the kind's
    # own group and deletes the definition only after the object is gone.
    monkeypatch.setattr("harness.scaffolding.drill_objects.FINALIZER_GRACE_SECONDS", 0.2)
    monkeypatch.setattr("harness.scaffolding.drill_objects.POLL_SECONDS", 0.05)
    made = DrillObjects(cluster, [CRD, HELD])
    made.inject()
    held = Ref("Gadget", "held", "ns", "g.kdrill.io/v1", "gadgets")
    assert made.planned[1] == held.to_dict() and held in fake.objects
    made.revert()
    made.verify_reverted()
    done = [c for c in fake.calls if c[0] != "read"]
    assert done[-3:] == [("delete", held), ("remove_finalizers", held),
                         ("delete", Ref("CustomResourceDefinition", "gadgets.g.kdrill.io"))], done
    assert fake.objects == {}

