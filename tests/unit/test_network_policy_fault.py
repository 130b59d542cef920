"""The network-policy fault's protocol around the ledger, against a small in-memory stand-in for
the NetworkingV1 API calls it makes: what is recorded before the policy exists, what is refused
before anything is created, what the revert deletes (only kdrill's policy) and when the
verification fails. Whether the platform's network plugin enforces the policy is measured on a
real cluster (scenarios/network-policy-not-enforced.yaml)."""

from __future__ import annotations

import copy

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.faults import FaultError, FaultNotReverted, injected
from harness.faults import network_policy
from harness.faults.network_policy import DEFAULT_NAME, FAULT_LABEL, NetworkPolicyDeny
from harness.ledger import Ledger
from harness.providers import Cluster

NS = "drill-ns"


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
def cluster(tmp_path):
    made = Cluster(name="unit", provider="kind", kubeconfig=tmp_path / "kubeconfig", context="kind-unit",
                   node_access=False)
    made.__dict__["api"] = object()  # the fake below stands in for the API client
    return made


@pytest.fixture
def ledger(tmp_path):
    return Ledger(tmp_path / "ledger")


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


def test_the_revert_is_idempotent(cluster, ledger, networking):
    api = networking(FakeNetworkingApi(ledger))
    fault = NetworkPolicyDeny.for_scenario(cluster, NS, {"pod_labels": "app=web"})
    fault.revert()  # before any inject: nothing was made
    fault.verify_reverted()
    with injected(fault, ledger):
        pass
    fault.revert()
    fault.verify_reverted()
    assert api.policies == {}
