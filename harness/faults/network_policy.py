"""Fault ``network-policy``: a NetworkPolicy that allows nothing is created for the pods that
carry some labels, isolating them for ingress, egress or both.

A generic fault for data-only scenarios (harness/engine/runner.py): it needs no node access, only the
API. The policy's name and namespace are recorded in the ledger before it is created, and its UID
once it exists. The policy has the pod selector's ``matchLabels``, the policy types asked for and
no rule, which is how the documentation writes "deny all" (a pod selected by a policy of a given
type allows only what some policy's rules allow). The revert deletes the policy with a UID
precondition, so once its UID is recorded it can only ever remove the one kdrill made (without one,
after a crash between create and record, only a policy of that name carrying kdrill's label
``kdrill.io/fault``); the verification checks it is gone.

What the policy *does* is the network plugin's business, not the API's: a plugin that does not
implement NetworkPolicy stores the object and changes nothing. A scenario measures which of the two
its platform does; the fault only guarantees that the object exists for the fault window and is
gone after it.

Source: "Network Policies" (prerequisites: policies are implemented by the network plugin, and
creating one without a controller that implements it has no effect; the two sorts of pod
isolation; "Default policies": deny all ingress or egress traffic:
https://kubernetes.io/docs/concepts/services-networking/network-policies/).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.faults import Fault, FaultError, FaultNotReverted
from harness.kube.providers import Cluster
from harness.spec.params import Param, labels

POLICY_TYPES = ("Ingress", "Egress", "Ingress,Egress")
DEFAULT_NAME = "kdrill-deny-all"
FAULT_LABEL = "kdrill.io/fault"


class NetworkPolicyDeny(Fault):
    """Create the NetworkPolicy ``namespace/name`` selecting the pods with ``pod_labels`` and
    allowing nothing of ``policy_types`` (a list of "Ingress" and/or "Egress")."""

    kind = "network-policy"
    method = "deny-all-policy"
    params = {
        "pod_labels": Param("labels", "the labels of the pods the policy selects, e.g. 'app=web' (key=value pairs: "
                            "the policy's podSelector.matchLabels)"),
        "policy_types": Param("choice", "what the selected pods are isolated for (default Ingress)",
                              choices=POLICY_TYPES, required=False),
        "policy_name": Param("name", f"the NetworkPolicy's name (default {DEFAULT_NAME}; an object-state probe "
                             "that watches it names it too); one of that name already there is refused",
                             required=False),
        "target_namespace": Param("name", "the namespace of the policy and its pods (default: the drill's own)",
                                  required=False),
    }

    def __init__(self, cluster: Cluster, namespace: str, pod_labels: dict[str, str],
                 policy_types: list[str] | None = None, name: str = DEFAULT_NAME, uid: str | None = None) -> None:
        super().__init__(cluster)
        self.namespace, self.name = namespace, name
        self.pod_labels = dict(pod_labels)
        self.policy_types = list(policy_types or ["Ingress"])
        self.uid = uid
        self.refused = False  # a policy of this name was there first: the revert leaves it alone

    @classmethod
    def for_scenario(cls, cluster: Cluster, namespace: str, params: dict[str, Any]) -> "NetworkPolicyDeny":
        """The fault a data-only scenario's ``fault.params`` describe, in the drill's ``namespace``
        unless ``target_namespace`` says otherwise."""
        return cls(cluster, params.get("target_namespace") or namespace, labels(params["pod_labels"]),
                   params.get("policy_types", "Ingress").split(","), params.get("policy_name") or DEFAULT_NAME)

    @classmethod
    def selects_pods(cls, params: dict[str, Any]) -> list[tuple[str, str, str | None]]:
        """The pods the policy selects: a policy that selects none would isolate nothing, and the
        drill would prove nothing (harness/faults/targets.py: check_targets)."""
        return [("pod_labels", params["pod_labels"], params.get("target_namespace"))]

    def manifest(self) -> client.V1NetworkPolicy:
        """The policy: the pod selector, the policy types, and no ingress or egress rule."""
        return client.V1NetworkPolicy(
            metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace,
                                         labels={FAULT_LABEL: self.kind}),
            spec=client.V1NetworkPolicySpec(pod_selector=client.V1LabelSelector(match_labels=self.pod_labels),
                                            policy_types=self.policy_types))

    def target(self) -> dict[str, Any]:
        """The policy (namespace, name, selected labels, types) and, once created, its UID."""
        return {"method": self.method, "namespace": self.namespace, "name": self.name,
                "pod_labels": self.pod_labels, "policy_types": self.policy_types, "uid": self.uid}

    def where(self) -> list[Any]:
        return [f"networkpolicy {self.namespace}/{self.name} selecting "
                + ",".join(f"{k}={v}" for k, v in sorted(self.pod_labels.items()))]

    def evidence(self) -> dict[str, Any]:
        """The policy as created: its UID, selector and types (what the network plugin was given)."""
        return {"policy": f"{self.namespace}/{self.name}", "uid": self.uid, "pod_labels": self.pod_labels,
                "policy_types": self.policy_types}

    def _networking(self) -> client.NetworkingV1Api:
        return client.NetworkingV1Api(self.cluster.api)

    def inject(self) -> None:
        """Refuse when a policy of this name is already there (one left by an earlier run, or the
        team's own: neither is kdrill's to delete); otherwise record, create, record the UID."""
        try:
            existing = self._networking().read_namespaced_network_policy(self.name, self.namespace,
                                                                         _request_timeout=10)
        except ApiException as exc:
            if exc.status != 404:
                raise
        else:
            left = (existing.metadata.labels or {}).get(FAULT_LABEL) == self.kind
            self.refused = True
            raise FaultError(f"network-policy: NetworkPolicy {self.namespace}/{self.name} already exists"
                             + (" with kdrill's label (left by an earlier run? `kdrill recover` deletes it while the "
                                  "ledger records it; otherwise delete it by hand)" if left
                                else " and is not kdrill's: choose another policy_name"))
        self.checkpoint()  # in the ledger before it exists: a crash mid-create is still recovered
        created = self._networking().create_namespaced_network_policy(self.namespace, self.manifest(),
                                                                      _request_timeout=10)
        self.uid = created.metadata.uid
        self.checkpoint()

    def revert(self) -> None:
        """Delete the policy, with a UID precondition when the UID was recorded. A no-op when it
        is already gone, or when inject refused (the policy there is not this fault's). Without a
        recorded UID (a crash between create and record), only a policy carrying kdrill's label
        is deleted."""
        if self.refused:
            return
        api = self._networking()
        try:
            uid = self.uid
            if uid is None:
                current = api.read_namespaced_network_policy(self.name, self.namespace, _request_timeout=10)
                if (current.metadata.labels or {}).get(FAULT_LABEL) != self.kind:
                    return  # not kdrill's: verify_reverted reports it, nothing is deleted
                uid = current.metadata.uid
            api.delete_namespaced_network_policy(self.name, self.namespace, _request_timeout=10,
                                                 body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)))
        except ApiException as exc:
            if exc.status == 404:
                return
            if exc.status != 409:
                raise
            # 409: the UID differs, a policy of the same name made by someone else meanwhile;
            # verify_reverted reports it and it is left alone.

    def verify_reverted(self) -> None:
        """Check the policy kdrill made is gone; raises FaultNotReverted when one of its name and
        UID (or, with no UID recorded, with kdrill's label) is still there, or when another of its
        name stands where kdrill's UID was recorded (left alone: someone else's to judge)."""
        if self.refused:
            return
        try:
            current = self._networking().read_namespaced_network_policy(self.name, self.namespace,
                                                                        _request_timeout=10)
        except ApiException as exc:
            if exc.status == 404:
                return
            raise
        ours = current.metadata.uid == self.uid if self.uid is not None \
            else (current.metadata.labels or {}).get(FAULT_LABEL) == self.kind
        if ours:
            raise FaultNotReverted(f"NetworkPolicy {self.namespace}/{self.name} (uid {current.metadata.uid}) is "
                                   "still there after its deletion")
        if self.uid is not None:
            raise FaultNotReverted(f"NetworkPolicy {self.namespace}/{self.name} is back with another UID "
                                   f"({current.metadata.uid}, kdrill made {self.uid}): someone else created one of "
                                   "that name; it was left alone. Check it, then remove the ledger entry")

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "NetworkPolicyDeny":
        """The fault as the ledger recorded it (``kdrill recover``)."""
        namespace, name = target.get("namespace"), target.get("name")
        if not isinstance(namespace, str) or not isinstance(name, str) or not namespace or not name:
            # Never a default: the revert would act on a policy the entry does not name.
            raise FaultError(f"network-policy: the ledger entry names no policy (namespace {namespace!r}, name "
                             f"{name!r}); inspect it by hand")
        types = target.get("policy_types") or ["Ingress"]
        # The revert needs only the name and UID; the rest is read leniently, for the record.
        pod_labels = target.get("pod_labels")
        return cls(cluster, namespace, pod_labels if isinstance(pod_labels, dict) else {},
                   types.split(",") if isinstance(types, str) else list(types), name, target.get("uid"))
