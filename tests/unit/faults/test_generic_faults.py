"""The generic faults data-only scenarios use, pod-delete, service-blackhole and network-policy:
their protocol around the ledger, against a small in-memory stand-in for the Kubernetes API calls
they make.

What is tested is the order and content of those calls (what is recorded before anything is
deleted or patched, what is refused before any change, what the revert sends); whether the
platform behaves as the scenarios claim is measured on a real cluster by the runner."""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.core.ledger import Ledger
from harness.faults import FaultError, FaultNotReverted, injected, network_policy
from harness.faults.network_policy import DEFAULT_NAME, FAULT_LABEL, NetworkPolicyDeny
from harness.faults.pod_delete import PodDelete
from harness.faults.service_blackhole import BLACKHOLE_LABEL, ServiceBlackhole
from harness.kube.providers import Cluster
from harness.spec.params import Param, label_selector

REPO = Path(__file__).resolve().parents[3]
NS = "drill-ns"


@pytest.fixture
def cluster(tmp_path):
    made = Cluster(name="unit", provider="kind", kubeconfig=tmp_path / "kubeconfig", context="kind-unit",
                   node_access=False)
    made.__dict__["api"] = object()  # the fakes below stand in for every API client
    return made


@pytest.fixture
def ledger(tmp_path):
    return Ledger(tmp_path / "ledger")


def targets(ledger: Ledger) -> list[dict]:
    return [copy.deepcopy(e.target) for e in ledger.entries()]


# --- the selector parameter -------------------------------------------------------------------

@pytest.mark.parametrize("selector", ["", "   ", "!app", "app!=web", "app notin (web)", "app!=web, !tier", 5, None,
                                      "app=web,", "app in ()", "Not_A/key=x"])
def test_a_selector_that_matches_everything_or_is_malformed_is_refused(cluster, selector):
    assert Param("selector", "pods").problem(selector) is not None
    with pytest.raises(FaultError, match="selector"):
        PodDelete(cluster, NS, selector)


@pytest.mark.parametrize("selector, parsed", [
    ("app=web", [("app", "=", ("web",))]),
    ("app==web, tier!=db", [("app", "=", ("web",)), ("tier", "!=", ("db",))]),
    ("app.kubernetes.io/name in (web, api),canary", [("app.kubernetes.io/name", "in", ("web", "api")),
                                                     ("canary", "exists", ())]),
])
def test_label_selectors_are_read_as_kubernetes_writes_them(selector, parsed):
    assert label_selector(selector) == parsed
    assert Param("selector", "pods").problem(selector) is None


def test_the_scenario_check_refuses_an_empty_selector_before_anything_runs(tmp_path, tree_entry_points):
    from harness.faults import check_params
    from harness.spec.scenario import ScenarioError, load_scenario

    data = yaml.safe_load((REPO / "scenarios" / "pod-delete.yaml").read_text())
    data["fault"]["params"]["selector"] = ""
    path = tmp_path / "pod-delete.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ScenarioError) as info:
        check_params(load_scenario(path))
    assert info.value.field == "fault.params.selector" and "matches every object" in info.value.expected


# --- pod-delete -------------------------------------------------------------------------------

def _pod(name, uid, owner=("ReplicaSet", "web-5d9f"), ready=True, grace=2, since=None):
    refs = [client.V1OwnerReference(api_version="apps/v1", kind=owner[0], name=owner[1], uid=f"uid-{owner[1]}",
                                    controller=True)] if owner else None
    conditions = [client.V1PodCondition(type="Ready", status="True" if ready else "False",
                                        last_transition_time=since or datetime.now(timezone.utc))]
    return client.V1Pod(metadata=client.V1ObjectMeta(name=name, namespace=NS, uid=uid, labels={"app": "web"},
                                                     owner_references=refs),
                        spec=client.V1PodSpec(containers=[], node_name="worker", termination_grace_period_seconds=grace),
                        status=client.V1PodStatus(phase="Running", conditions=conditions))


class FakePodsApi:
    """Pods owned by ReplicaSet web-5d9f, owned by Deployment web; a deleted pod is replaced by a
    new one, ready after ``ready_after_reads`` reads of the Deployment."""

    def __init__(self, pods, ledger=None, ready_after_reads=0, replace=True):
        self.pods = {p.metadata.name: p for p in pods}
        self.ledger, self.ready_after_reads, self.replace = ledger, ready_after_reads, replace
        self.calls: list[tuple] = []
        self.deployment_reads = 0
        self.made = 0

    # CoreV1Api
    def list_namespaced_pod(self, namespace, label_selector=None, **kwargs):
        self.calls.append(("list", label_selector))
        return client.V1PodList(items=list(self.pods.values()))

    def read_namespaced_pod(self, name, namespace, **kwargs):
        if name not in self.pods:
            raise ApiException(status=404, reason="Not Found")
        return self.pods[name]

    def delete_namespaced_pod(self, name, namespace, body=None, **kwargs):
        self.calls.append(("delete", name, body, targets(self.ledger) if self.ledger else None))
        pod = self.pods.get(name)
        if pod is None:
            raise ApiException(status=404, reason="Not Found")
        if body.preconditions.uid != pod.metadata.uid:
            raise ApiException(status=409, reason="Conflict")
        del self.pods[name]
        if self.replace:
            self.made += 1
            owner = pod.metadata.owner_references[0]
            self.pods[f"web-new{self.made}"] = _pod(f"web-new{self.made}", f"new-{self.made}", (owner.kind, owner.name),
                                                    ready=False)

    # AppsV1Api
    def read_namespaced_replica_set(self, name, namespace, **kwargs):
        self.calls.append(("read-rs", name))
        return SimpleNamespace(metadata=client.V1ObjectMeta(name=name, owner_references=[client.V1OwnerReference(
            api_version="apps/v1", kind="Deployment", name="web", uid="uid-web", controller=True)]))

    def read_namespaced_deployment(self, name, namespace, **kwargs):
        self.deployment_reads += 1
        if self.deployment_reads > self.ready_after_reads:  # the replacements become ready
            for pod in self.pods.values():
                if pod.metadata.uid.startswith("new-"):
                    pod.status.conditions[0].status = "True"
        ready = sum(1 for p in self.pods.values() if p.status.conditions[0].status == "True")
        return SimpleNamespace(metadata=client.V1ObjectMeta(name=name),
                               status=client.V1DeploymentStatus(ready_replicas=ready))


@pytest.fixture
def pods_api(monkeypatch):
    def install(api):
        monkeypatch.setattr(Cluster, "core", property(lambda self: api), raising=False)
        monkeypatch.setattr(Cluster, "apps", property(lambda self: api), raising=False)
        return api
    return install


def test_the_pods_and_ready_counts_are_in_the_ledger_before_the_first_delete(cluster, ledger, pods_api):
    api = pods_api(FakePodsApi([_pod("web-c", "uid-c"), _pod("web-a", "uid-a", ready=False), _pod("web-b", "uid-b")],
                               ledger=ledger))
    fault = PodDelete.for_scenario(cluster, NS, {"selector": "app=web", "count": 2, "grace_period_seconds": 0})
    with injected(fault, ledger):
        deletes = [c for c in api.calls if c[0] == "delete"]
        # Ready pods first, then by name: web-b and web-c, never the unready web-a.
        assert [c[1] for c in deletes] == ["web-b", "web-c"]
        for _, name, body, recorded in deletes:
            assert body.grace_period_seconds == 0 and body.preconditions.uid == f"uid-{name[-1]}"
            (entry,) = recorded
            assert [p["uid"] for p in entry["deleted"]] == ["uid-b", "uid-c"]
            assert entry["owners"] == [{"kind": "Deployment", "name": "web", "ready_before": 2}]
            assert entry["deleted"][0]["owner"] == "Deployment/web"
    assert fault.revert_verified and ledger.entries() == []
    evidence = fault.evidence()
    assert [r["name"] for r in evidence["replacements"]] == ["web-new1", "web-new2"]
    assert evidence["replacements_ready_seconds"] is not None
    assert fault.where() == ["pod drill-ns/web-b (uid uid-b, Deployment/web)",
                             "pod drill-ns/web-c (uid uid-c, Deployment/web)"]


@pytest.mark.parametrize("pods, message", [
    ([_pod("web-a", "uid-a"), _pod("stray", "uid-s", owner=None)], "no controller owns them"),
    ([_pod("web-a", "uid-a", owner=("Job", "batch"))], "owned by Job/batch"),
    ([], "0 running pod"),
])
def test_what_nothing_would_replace_is_refused_before_any_delete(cluster, ledger, pods_api, pods, message):
    api = pods_api(FakePodsApi(pods, ledger=ledger))
    fault = PodDelete(cluster, NS, "app=web")
    with pytest.raises(FaultError, match=message):
        with injected(fault, ledger):
            pass
    assert not [c for c in api.calls if c[0] == "delete"]
    assert fault.revert_verified and ledger.entries() == []  # nothing deleted, nothing to wait for


def test_verify_waits_for_the_owner_ready_count_and_fails_clearly_when_it_never_returns(cluster, ledger, pods_api,
                                                                                         monkeypatch):
    import harness.faults.pod_delete as module

    api = pods_api(FakePodsApi([_pod("web-a", "uid-a"), _pod("web-b", "uid-b")], ready_after_reads=3))
    fault = PodDelete(cluster, NS, "app=web", grace_period_seconds=0)
    with injected(fault, ledger):
        pass
    assert api.deployment_reads > 3 and fault.revert_verified

    monkeypatch.setattr(module, "READY_DEADLINE_SECONDS", 0.3)
    api = pods_api(FakePodsApi([_pod("web-a", "uid-a"), _pod("web-b", "uid-b")], replace=False))
    fault = PodDelete(cluster, NS, "app=web", grace_period_seconds=0)
    with pytest.raises(FaultNotReverted, match="Deployment web: 2"):
        with injected(fault, ledger):
            pass
    (entry,) = ledger.entries()  # kept for kdrill recover
    assert entry.target["deleted"][0]["uid"] == "uid-a"


def test_a_recorded_pod_without_owner_fails_verification_with_what_to_do(cluster):
    fault = PodDelete.from_target(cluster, {"namespace": NS, "selector": "run=x", "deleted": [
        {"name": "x", "uid": "u", "node": "n", "owner": None, "grace_seconds": 0}], "owners": []})
    with pytest.raises(FaultNotReverted, match="no owner: nothing recreates them"):
        fault.verify_reverted()


def test_pod_delete_round_trips_through_the_ledger_and_reverts_nothing(cluster, pods_api):
    api = pods_api(FakePodsApi([]))
    fault = PodDelete(cluster, "other", "app=web", 3, 30, deleted=[{"name": "p", "uid": "u", "owner": "Deployment/web"}],
                      owners=[{"kind": "Deployment", "name": "web", "ready_before": 3}], deleted_at=5.0)
    again = PodDelete.from_target(cluster, fault.target())
    assert again.target() == fault.target()
    again.revert()
    again.revert()
    assert api.calls == []
    with pytest.raises(FaultError, match="1 to 50"):
        PodDelete(cluster, NS, "app=web", count=0)
    with pytest.raises(FaultError, match="0 to 300"):
        PodDelete(cluster, NS, "app=web", grace_period_seconds=301)



def test_a_pod_recorded_but_never_deleted_verifies_at_once(cluster, pods_api, monkeypatch):
    """kdrill killed between the ledger checkpoint and the delete: the cluster is as it was, so
    kdrill recover must not wait for a deletion that never happened."""
    import harness.faults.pod_delete as module

    monkeypatch.setattr(module, "READY_DEADLINE_SECONDS", 1)
    api = pods_api(FakePodsApi([_pod("web-a", "uid-a"), _pod("web-b", "uid-b")]))
    fault = PodDelete.from_target(cluster, {
        "namespace": NS, "selector": "app=web", "count": 1, "grace_period_seconds": None, "deleted_at": None,
        "deleted": [{"name": "web-a", "uid": "uid-a", "node": "w", "owner": "Deployment/web", "grace_seconds": 30}],
        "owners": [{"kind": "Deployment", "name": "web", "ready_before": 2}]})
    fault.revert()
    fault.verify_reverted()
    assert sorted(api.pods) == ["web-a", "web-b"]


def test_the_verification_deadline_takes_at_most_the_parameter_range_of_grace(cluster, pods_api, monkeypatch):
    import harness.faults.pod_delete as module

    waited = []

    def fake_wait(condition, timeout_seconds, **kwargs):
        waited.append(timeout_seconds)
        return SimpleNamespace(ok=True, became_true_at=0.0, last_error=None)

    monkeypatch.setattr(module, "wait_until", fake_wait)
    pods_api(FakePodsApi([]))
    fault = PodDelete.from_target(cluster, {
        "namespace": NS, "selector": "app=web", "deleted_at": 1.0, "owners": [],
        "deleted": [{"name": "p", "uid": "u", "owner": "Deployment/web", "grace_seconds": 10 ** 9}]})
    fault.verify_reverted()
    assert waited == [module.READY_DEADLINE_SECONDS + module.MAX_GRACE_PERIOD_SECONDS]


# --- service-blackhole --------------------------------------------------------------------------

class FakeServiceApi:
    """One Service; its EndpointSlice lists two ready pods whenever its selector is {"app": "web"}.
    Patches are applied as a JSON patch is (RFC 6902: "test", "replace" of an existing member,
    "add")."""

    def __init__(self, selector, service_type="ClusterIP", ledger=None, ready=2):
        self.service = client.V1Service(metadata=client.V1ObjectMeta(name="web", namespace=NS),
                                        spec=client.V1ServiceSpec(selector=selector, type=service_type))
        self.ledger, self.ready = ledger, ready
        self.patches: list[tuple[list, list]] = []

    def read_namespaced_service(self, name, namespace, **kwargs):
        return self.service

    def patch_namespaced_service(self, name, namespace, body, **kwargs):
        assert isinstance(body, list), "a JSON patch, never a merge of maps"
        self.patches.append((copy.deepcopy(body), targets(self.ledger) if self.ledger else None))
        for op in body:
            assert op["path"] == "/spec/selector"
            current = self.service.spec.selector
            if op["op"] == "test" and current != op["value"]:
                raise ApiException(status=422, reason="test failed")
            if op["op"] == "replace" and current is None:
                raise ApiException(status=422, reason="missing member")
            if op["op"] in ("replace", "add"):
                self.service.spec.selector = dict(op["value"])

    def list_namespaced_endpoint_slice(self, namespace, label_selector=None, **kwargs):
        assert label_selector == "kubernetes.io/service-name=web"
        listed = self.ready if self.service.spec.selector == {"app": "web"} else 0
        endpoints = [SimpleNamespace(conditions=SimpleNamespace(ready=True)) for _ in range(listed)]
        return SimpleNamespace(items=[SimpleNamespace(endpoints=endpoints)])


@pytest.fixture
def service_api(monkeypatch):
    import harness.kube.workloads as workloads

    def install(api):
        monkeypatch.setattr(Cluster, "core", property(lambda self: api), raising=False)
        monkeypatch.setattr(workloads.client, "DiscoveryV1Api", lambda api_client: api)
        return api
    return install


def test_the_original_selector_is_in_the_ledger_before_the_patch_and_comes_back_whole(cluster, ledger, service_api):
    api = service_api(FakeServiceApi({"app": "web"}, ledger=ledger))
    fault = ServiceBlackhole.for_scenario(cluster, NS, {"service_name": "web"})
    with injected(fault, ledger):
        (patch, recorded), = api.patches
        assert recorded[0]["original_selector"] == {"app": "web"}
        assert patch[0] == {"op": "test", "path": "/spec/selector", "value": {"app": "web"}}
        assert patch[1]["op"] == "replace" and patch[1]["value"]["app"] == "web"
        assert set(patch[1]["value"]) == {"app", BLACKHOLE_LABEL}
        assert api.service.spec.selector == patch[1]["value"]
    revert, _ = api.patches[1]
    # Only over the black hole it set: a selector changed meanwhile is not overwritten.
    assert revert == [{"op": "test", "path": "/spec/selector", "value": patch[1]["value"]},
                      {"op": "replace", "path": "/spec/selector", "value": {"app": "web"}}]
    assert api.service.spec.selector == {"app": "web"}  # the added key is gone
    assert fault.revert_verified and ledger.entries() == []
    assert fault.evidence()["original_selector"] == {"app": "web"} and fault.where() == ["service drill-ns/web"]


def test_a_reroute_sends_the_service_to_other_pods_and_comes_back_whole(cluster, ledger, service_api):
    api = service_api(FakeServiceApi({"app": "web"}, ledger=ledger))
    fault = ServiceBlackhole.for_scenario(cluster, NS, {"service_name": "web", "reroute_to": "app=black-hole"})
    with injected(fault, ledger):
        (patch, recorded), = api.patches
        assert recorded[0]["original_selector"] == {"app": "web"}
        assert patch[1] == {"op": "replace", "path": "/spec/selector", "value": {"app": "black-hole"}}
        # recover, from the ledger alone, knows what to test for and what to put back
        again = ServiceBlackhole.from_target(cluster, ledger.entries()[0].target)
        assert again.blackhole_selector == {"app": "black-hole"} and again.original_selector == {"app": "web"}
    assert api.service.spec.selector == {"app": "web"} and ledger.entries() == []


def test_a_reroute_is_labels_only(tmp_path):
    from harness.spec.params import Param

    problem = ServiceBlackhole.params["reroute_to"].problem("app in (a, b)")
    assert problem and "what a Service's selector holds" in problem
    assert ServiceBlackhole.params["reroute_to"].problem("app=black-hole,tier=x") is None
    assert isinstance(ServiceBlackhole.params["reroute_to"], Param)


@pytest.mark.parametrize("selector, service_type, ready, message", [
    (None, "ClusterIP", 2, "has no selector"),
    ({}, "ClusterIP", 2, "has no selector"),
    (None, "ExternalName", 0, "type ExternalName"),
    ({"app": "web"}, "ClusterIP", 0, "no ready endpoint"),
    ({"app": "web", BLACKHOLE_LABEL: "x"}, "ClusterIP", 2, "kdrill recover"),
])
def test_what_cannot_be_black_holed_is_refused_before_any_patch(cluster, ledger, service_api, selector, service_type,
                                                                 ready, message):
    api = service_api(FakeServiceApi(selector, service_type, ledger=ledger, ready=ready))
    fault = ServiceBlackhole(cluster, NS, "web")
    with pytest.raises(FaultError, match=message):
        with injected(fault, ledger):
            pass
    assert api.patches == [] and ledger.entries() == []


@pytest.mark.parametrize("now", [None, {"app": "web", "version": "v2"}])
def test_the_revert_never_overwrites_a_selector_changed_meanwhile(cluster, service_api, now):
    api = service_api(FakeServiceApi(None))
    ServiceBlackhole(cluster, NS, "web").revert()  # nothing recorded: nothing sent
    assert api.patches == []
    api.service.spec.selector = now  # someone removed or changed the selector after the black hole
    fault = ServiceBlackhole.from_target(cluster, {"namespace": NS, "name": "web", "original_selector": {"app": "web"},
                                                   "blackhole_selector": {"app": "web", BLACKHOLE_LABEL: "1"}})
    fault.revert()
    assert api.service.spec.selector == now
    with pytest.raises(FaultNotReverted, match="changed by someone else"):
        fault.verify_reverted()


def test_the_revert_is_idempotent(cluster, service_api):
    api = service_api(FakeServiceApi({"app": "web"}))
    fault = ServiceBlackhole.from_target(cluster, {"namespace": NS, "name": "web", "original_selector": {"app": "web"},
                                                   "blackhole_selector": {"app": "web", BLACKHOLE_LABEL: "1"}})
    fault.revert()
    fault.revert()
    fault.verify_reverted()
    assert api.service.spec.selector == {"app": "web"}


def test_verify_fails_while_the_selector_is_not_the_original(cluster, service_api, monkeypatch):
    import harness.faults.service_blackhole as module

    monkeypatch.setattr(module, "ENDPOINTS_DEADLINE_SECONDS", 0.3)
    service_api(FakeServiceApi({"app": "web", "extra": "x"}))
    fault = ServiceBlackhole(cluster, NS, "web", original_selector={"app": "web"})
    with pytest.raises(FaultNotReverted, match="changed by someone else"):
        fault.verify_reverted()


def test_a_service_gone_with_its_namespace_needs_no_revert(cluster, monkeypatch):
    asked = []

    class Gone:
        def patch_namespaced_service(self, *args, **kwargs):
            asked.append("patch")
            raise ApiException(status=404)

        def read_namespaced_service(self, *args, **kwargs):
            asked.append("read")
            raise ApiException(status=404)

    monkeypatch.setattr(Cluster, "core", property(lambda self: Gone()), raising=False)
    fault = ServiceBlackhole(cluster, NS, "web", original_selector={"app": "web"})
    fault.revert()  # a 404 is "nothing left to restore", not an error
    fault.verify_reverted()
    assert "patch" in asked and asked[-1] == "read"


# --- the scenarios --------------------------------------------------------------------------------


# --- network-policy ----------------------------------------------------------------------------
# Whether the platform's network plugin enforces the policy is measured on a real cluster
# (scenarios/network-policy-not-enforced.yaml).

class FakeNetworkingApi:
    """NetworkPolicies by (namespace, name); a delete honours a UID precondition as the API does
    (409 when the stored object's UID differs)."""

    def __init__(self, ledger: Ledger | None = None, fail_delete: bool = False) -> None:
        self.policies: dict[tuple[str, str], client.V1NetworkPolicy] = {}
        self.ledger, self.fail_delete = ledger, fail_delete
        self.created: list[tuple[client.V1NetworkPolicy, list[dict]]] = []
        self.deleted: list[tuple[str, str | None]] = []
        self._uids = 0

    def put(self, name: str, labels: dict[str, str] | None = None) -> client.V1NetworkPolicy:
        self._uids += 1
        policy = client.V1NetworkPolicy(metadata=client.V1ObjectMeta(name=name, namespace=NS, labels=labels,
                                                                     uid=f"uid-{self._uids}"))
        self.policies[(NS, name)] = policy
        return policy

    def read_namespaced_network_policy(self, name, namespace, **kwargs):
        if (namespace, name) not in self.policies:
            raise ApiException(status=404, reason="Not Found")
        return self.policies[(namespace, name)]

    def create_namespaced_network_policy(self, namespace, body, **kwargs):
        if (namespace, body.metadata.name) in self.policies:
            raise ApiException(status=409, reason="AlreadyExists")
        recorded = [copy.deepcopy(e.target) for e in self.ledger.entries()] if self.ledger else []
        self.created.append((body, recorded))
        stored = self.put(body.metadata.name, body.metadata.labels)
        stored.spec = body.spec
        return stored

    def delete_namespaced_network_policy(self, name, namespace, body=None, **kwargs):
        uid = body.preconditions.uid if body is not None and body.preconditions is not None else None
        self.deleted.append((name, uid))
        current = self.read_namespaced_network_policy(name, namespace)
        if uid is not None and current.metadata.uid != uid:
            raise ApiException(status=409, reason="Conflict: precondition failed: UID")
        if not self.fail_delete:
            del self.policies[(namespace, name)]


@pytest.fixture
def networking(monkeypatch):
    def install(api: FakeNetworkingApi) -> FakeNetworkingApi:
        monkeypatch.setattr(network_policy.client, "NetworkingV1Api", lambda api_client: api)
        return api
    return install


def test_the_policy_is_in_the_ledger_before_it_exists_and_deleted_by_its_uid(cluster, ledger, networking):
    api = networking(FakeNetworkingApi(ledger))
    fault = NetworkPolicyDeny.for_scenario(cluster, NS, {"pod_labels": "app=web,tier=front"})
    with injected(fault, ledger):
        (policy, recorded), = api.created
        # Recorded before the create, without a UID (none exists yet).
        assert recorded == [{"method": "deny-all-policy", "namespace": NS, "name": DEFAULT_NAME,
                             "pod_labels": {"app": "web", "tier": "front"}, "policy_types": ["Ingress"],
                             "uid": None}]
        # Deny all: the selector and the types, no rule at all.
        assert policy.spec.pod_selector.match_labels == {"app": "web", "tier": "front"}
        assert policy.spec.policy_types == ["Ingress"]
        assert policy.spec.ingress is None and policy.spec.egress is None
        assert policy.metadata.labels == {FAULT_LABEL: "network-policy"}
        assert ledger.entries()[0].target["uid"] == "uid-1"
    assert api.deleted == [(DEFAULT_NAME, "uid-1")]
    assert api.policies == {} and fault.revert_verified and ledger.entries() == []
    assert fault.evidence()["uid"] == "uid-1"


def test_both_policy_types_and_another_name_are_what_the_scenario_gives(cluster, ledger, networking):
    api = networking(FakeNetworkingApi(ledger))
    fault = NetworkPolicyDeny.for_scenario(cluster, NS, {"pod_labels": "app=web", "policy_types": "Ingress,Egress",
                                                         "policy_name": "deny-web"})
    with injected(fault, ledger):
        (policy, _), = api.created
        assert policy.metadata.name == "deny-web" and policy.spec.policy_types == ["Ingress", "Egress"]
    assert api.policies == {}


@pytest.mark.parametrize("labels, says", [(None, "is not kdrill's: choose another policy_name"),
                                          ({FAULT_LABEL: "network-policy"}, "kdrill recover")])
def test_a_policy_of_that_name_already_there_is_refused_and_left_alone(cluster, ledger, networking, labels, says):
    api = networking(FakeNetworkingApi(ledger))
    theirs = api.put(DEFAULT_NAME, labels)
    fault = NetworkPolicyDeny.for_scenario(cluster, NS, {"pod_labels": "app=web"})
    with pytest.raises(FaultError, match=says):
        with injected(fault, ledger):
            pytest.fail("a refused fault must not be held")
    assert api.created == [] and api.deleted == []
    assert api.policies[(NS, DEFAULT_NAME)] is theirs and ledger.entries() == []


def test_recover_after_a_crash_before_the_uid_was_recorded_deletes_only_a_policy_with_kdrills_label(cluster,
                                                                                                   networking):
    api = networking(FakeNetworkingApi())
    recorded = {"method": "deny-all-policy", "namespace": NS, "name": DEFAULT_NAME, "pod_labels": {"app": "web"},
                "policy_types": ["Ingress"], "uid": None}
    ours = api.put(DEFAULT_NAME, {FAULT_LABEL: "network-policy"})
    fault = NetworkPolicyDeny.from_target(cluster, recorded)
    fault.revert()
    fault.verify_reverted()
    assert api.deleted == [(DEFAULT_NAME, ours.metadata.uid)] and api.policies == {}

    theirs = api.put(DEFAULT_NAME, None)
    fault = NetworkPolicyDeny.from_target(cluster, recorded)
    fault.revert()
    fault.verify_reverted()  # never created by kdrill: nothing to undo
    assert api.deleted[1:] == [] and api.policies[(NS, DEFAULT_NAME)] is theirs


def test_a_policy_someone_else_made_meanwhile_is_not_deleted_and_verification_says_so(cluster, networking):
    api = networking(FakeNetworkingApi())
    fault = NetworkPolicyDeny.from_target(cluster, {"namespace": NS, "name": DEFAULT_NAME,
                                                    "pod_labels": {"app": "web"}, "uid": "uid-of-kdrills"})
    api.put(DEFAULT_NAME, None)  # kdrill's is gone; another of the same name stands there now
    fault.revert()
    assert api.policies  # the UID precondition kept it
    with pytest.raises(FaultNotReverted, match="another UID"):
        fault.verify_reverted()


def test_verification_fails_while_kdrills_policy_is_still_there(cluster, ledger, networking):
    api = networking(FakeNetworkingApi(ledger, fail_delete=True))
    fault = NetworkPolicyDeny.for_scenario(cluster, NS, {"pod_labels": "app=web"})
    with pytest.raises(FaultNotReverted, match="still there"):
        with injected(fault, ledger):
            pass
    assert list(api.policies) == [(NS, DEFAULT_NAME)] and len(ledger.entries()) == 1  # kept for kdrill recover


def test_the_network_policy_revert_is_idempotent(cluster, ledger, networking):
    api = networking(FakeNetworkingApi(ledger))
    fault = NetworkPolicyDeny.for_scenario(cluster, NS, {"pod_labels": "app=web"})
    fault.revert()  # before any inject: nothing was made
    fault.verify_reverted()
    with injected(fault, ledger):
        pass
    fault.revert()
    fault.verify_reverted()
    assert api.policies == {}


@pytest.mark.parametrize("target", [{"namespace": NS}, {"name": DEFAULT_NAME}, {"namespace": NS, "name": ""},
                                    {"namespace": 3, "name": DEFAULT_NAME}])
def test_a_ledger_entry_that_names_no_policy_is_not_reverted_on_a_default_name(cluster, networking, target):
    api = networking(FakeNetworkingApi())
    api.put(DEFAULT_NAME, {FAULT_LABEL: "network-policy"})
    with pytest.raises(FaultError, match="names no policy"):
        NetworkPolicyDeny.from_target(cluster, target)
    assert api.deleted == []


def test_a_ledger_entry_with_odd_labels_or_types_is_still_reverted_by_name_and_uid(cluster, networking):
    api = networking(FakeNetworkingApi())
    ours = api.put(DEFAULT_NAME, {FAULT_LABEL: "network-policy"})
    fault = NetworkPolicyDeny.from_target(cluster, {"namespace": NS, "name": DEFAULT_NAME, "pod_labels": "app=web",
                                                    "policy_types": "Ingress,Egress", "uid": ours.metadata.uid})
    assert fault.policy_types == ["Ingress", "Egress"]
    fault.revert()
    fault.verify_reverted()
    assert api.deleted == [(DEFAULT_NAME, ours.metadata.uid)] and api.policies == {}
