"""Fault ``service-blackhole``: a Service's selector is changed so that it matches no pod, or
(``reroute_to``) other pods, e.g. a backend that accepts connections and never answers.

A generic fault for data-only scenarios (harness/engine/runner.py): it needs no node access, only the
API. The Service's ``spec.selector`` is recorded in the ledger, then replaced by the same selector
plus the label ``kdrill.io/blackhole: <random>``, which no pod carries (or by ``reroute_to``). The
EndpointSlice controller then lists no endpoint for the Service (or the other pods'), while its
pods keep running and its name and ClusterIP stay. The revert replaces ``spec.selector`` with the recorded one through a JSON patch (RFC 6902),
which sets the whole map, so the added key goes (a strategic merge patch would merge the maps and
keep it); the verification waits until the selector is the original again and the Service's
EndpointSlices list a ready endpoint.

A Service without a selector (ExternalName, or endpoints managed by hand) has nothing to change
here and is refused before anything is patched.

Source: "Service" (a selector decides which pods back a Service, and the control plane keeps its
EndpointSlices in line with it; "Services without selectors" for what is refused:
https://kubernetes.io/docs/concepts/services-networking/service/) and "EndpointSlices"
(https://kubernetes.io/docs/concepts/services-networking/endpoint-slices/).
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from harness.core.waiting import wait_until
from harness.faults import Fault, FaultError, FaultNotReverted
from harness.kube.providers import Cluster
from harness.kube.workloads import ready_endpoints
from harness.spec.params import Param, labels

log = logging.getLogger("kdrill.faults.service_blackhole")
BLACKHOLE_LABEL = "kdrill.io/blackhole"
# A deadline for the verification, not an expectation: the EndpointSlice controller lists the
# Service's (still running, still ready) pods again once the selector is back, within seconds.
ENDPOINTS_DEADLINE_SECONDS = 60


class ServiceBlackhole(Fault):
    """Make the Service ``namespace/name`` select no pod, keeping everything else about it."""

    kind = "service-blackhole"
    method = "selector-json-patch"
    params = {
        "service_name": Param("name", "the Service whose selector is made to match no pod"),
        "target_namespace": Param("name", "its namespace (default: the drill's own)", required=False),
        "reroute_to": Param("labels", "instead of no pod, the labels of other pods to send the Service's "
                            "traffic to (e.g. a declared backend that accepts connections and never answers)",
                            required=False),
    }

    def __init__(self, cluster: Cluster, namespace: str, name: str, original_selector: dict[str, str] | None = None,
                 blackhole_selector: dict[str, str] | None = None, reroute_to: dict[str, str] | None = None) -> None:
        super().__init__(cluster)
        self.namespace, self.name = namespace, name
        self.reroute_to = dict(reroute_to) if reroute_to else None
        self.original_selector = dict(original_selector) if original_selector is not None else None
        self.blackhole_selector = dict(blackhole_selector) if blackhole_selector is not None else None
        self.ready_after_seconds: float | None = None  # from the revert's end to a ready endpoint again

    @classmethod
    def for_scenario(cls, cluster: Cluster, namespace: str, params: dict[str, Any]) -> "ServiceBlackhole":
        """The fault a data-only scenario's ``fault.params`` describe, in the drill's ``namespace``
        unless ``target_namespace`` says otherwise."""
        return cls(cluster, params.get("target_namespace") or namespace, params["service_name"],
                   reroute_to=labels(params["reroute_to"]) if params.get("reroute_to") else None)

    @classmethod
    def acts_on(cls, params: dict[str, Any]) -> list[tuple[str, str, str, str | None]]:
        """The Service whose selector is replaced (harness/faults/targets.py: check_targets)."""
        return [("service_name", "Service", params["service_name"], params.get("target_namespace"))]

    @classmethod
    def selects_pods(cls, params: dict[str, Any]) -> list[tuple[str, str, str | None]]:
        """The pods ``reroute_to`` sends the Service's traffic to: a reroute that matches none
        would be a black hole the scenario did not ask for (harness/faults/__init__.py:
        check_targets)."""
        return [("reroute_to", params["reroute_to"], params.get("target_namespace"))] if params.get("reroute_to") else []

    def target(self) -> dict[str, Any]:
        """The Service, and once read, its original selector and the one that replaced it."""
        return {"method": self.method, "namespace": self.namespace, "name": self.name,
                "original_selector": self.original_selector, "blackhole_selector": self.blackhole_selector}

    def where(self) -> list[Any]:
        return [f"service {self.namespace}/{self.name}"]

    def evidence(self) -> dict[str, Any]:
        """The selector before and during the fault, and ``ready_after_revert_seconds``: from the
        revert's end until the EndpointSlices listed a ready endpoint again (seconds)."""
        return {"original_selector": self.original_selector, "blackhole_selector": self.blackhole_selector,
                "ready_after_revert_seconds": self.ready_after_seconds}

    def _patch_selector(self, operations: list[dict[str, Any]]) -> None:
        # A list body is sent as application/json-patch+json by the kubernetes client.
        self.cluster.core.patch_namespaced_service(self.name, self.namespace, operations, _request_timeout=10)

    def inject(self) -> None:
        """Refuse a Service without a selector or without a ready endpoint; record the selector
        in the ledger; then replace it by one no pod matches."""
        service = self.cluster.core.read_namespaced_service(self.name, self.namespace, _request_timeout=10)
        selector = dict(service.spec.selector or {})
        if service.spec.type == "ExternalName" or not selector:
            raise FaultError(f"service-blackhole: Service {self.namespace}/{self.name} has no selector "
                             f"(type {service.spec.type}): its endpoints are not chosen by labels, so there is "
                             "nothing to black-hole here")
        if BLACKHOLE_LABEL in selector or (self.reroute_to is not None and selector == self.reroute_to):
            raise FaultError(f"service-blackhole: Service {self.namespace}/{self.name} already selects "
                             f"{selector} (a fault left by an earlier run? `kdrill recover` reverts it)")
        if ready_endpoints(self.cluster, self.namespace, self.name) == 0:
            raise FaultError(f"service-blackhole: Service {self.namespace}/{self.name} has no ready endpoint "
                             "to take away")
        self.original_selector = selector
        self.blackhole_selector = dict(self.reroute_to) if self.reroute_to is not None \
            else {**selector, BLACKHOLE_LABEL: secrets.token_hex(4)}
        self.checkpoint()  # the selector to restore is in the ledger before the patch
        # "test" first: the patch applies only to the selector just recorded.
        self._patch_selector([{"op": "test", "path": "/spec/selector", "value": self.original_selector},
                              {"op": "replace", "path": "/spec/selector", "value": self.blackhole_selector}])

    def revert(self) -> None:
        """Put the recorded selector back, whole, only where the black hole is still in place (a
        JSON-patch ``test`` of it): a selector someone else set meanwhile is not overwritten, and
        the verification then reports it. A no-op when nothing was recorded or the Service is
        gone."""
        if self.original_selector is None:
            return  # never read, never patched
        operations = [{"op": "replace", "path": "/spec/selector", "value": self.original_selector}]
        if self.blackhole_selector is not None:
            operations.insert(0, {"op": "test", "path": "/spec/selector", "value": self.blackhole_selector})
        try:
            self._patch_selector(operations)
        except ApiException as exc:
            if exc.status == 404:
                return  # gone with its namespace: nothing left to restore
            if exc.status != 422:
                raise
            # The test failed (the black hole never applied, or the selector changed since) or
            # there is no selector: verify_reverted says which, and nothing is overwritten.
            log.warning("service-blackhole: %s/%s no longer has the black-hole selector; not overwritten",
                        self.namespace, self.name)

    def verify_reverted(self) -> None:
        """Check the selector is exactly the recorded one (FaultNotReverted at once otherwise),
        then wait until a ready endpoint is listed; raises FaultNotReverted after
        :data:`ENDPOINTS_DEADLINE_SECONDS` (seconds)."""

        if self.original_selector is None:
            return
        since = self.reverted_at or time.time()
        try:
            current = self.cluster.core.read_namespaced_service(self.name, self.namespace, _request_timeout=10)
        except ApiException as exc:
            if exc.status == 404:
                return  # the namespace went (kdrill recover deletes it after this)
            raise
        if dict(current.spec.selector or {}) != self.original_selector:
            # Not waited for: the revert writes the selector once, so it will not change by itself.
            raise FaultNotReverted(f"Service {self.namespace}/{self.name} selects {current.spec.selector}, neither "
                                   f"its original {self.original_selector} nor kdrill's black hole: changed by "
                                   "someone else meanwhile and left as they set it; put the selector right by hand, "
                                   "then remove the ledger entry")

        def restored() -> bool:
            return ready_endpoints(self.cluster, self.namespace, self.name) >= 1

        done = wait_until(restored, ENDPOINTS_DEADLINE_SECONDS, interval_seconds=0.5,
                          description=f"service {self.namespace}/{self.name} selector and endpoints back")
        if not done.ok:
            raise FaultNotReverted(f"Service {self.namespace}/{self.name} is not back to selector "
                                   f"{self.original_selector} with a ready endpoint (last error: {done.last_error})")
        self.ready_after_seconds = round(done.became_true_at - since, 3)

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "ServiceBlackhole":
        """The fault as the ledger recorded it (``kdrill recover``)."""
        return cls(cluster, target["namespace"], target["name"], target.get("original_selector"),
                   target.get("blackhole_selector"))
