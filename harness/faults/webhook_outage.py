"""Fault ``webhook-outage``: make a validating admission webhook unavailable.

No built-in scenario uses it any more (scenarios/webhook-outage*.yaml are data-only, with the
generic scale-to-zero and service-blackhole faults); it stays so that `kdrill recover` reverts
what an earlier kdrill's crashed webhook drill left in the ledger, and for a team's own drill file.

Methods (``mode``):

- ``refused``: scale the webhook's Deployment to zero replicas. Its Service keeps its ClusterIP
  but has no endpoints, so kube-proxy rejects the API server's connection at once.
- ``blackhole``: switch the webhook's Service selector to a backend that accepts TCP
  connections and never answers (``kdrill-webhook --mode blackhole``), so every call waits for
  the webhook's ``timeoutSeconds``.

Revert, in this order, because with ``failurePolicy: Fail`` the webhook guards its own
Deployment (the deadlock the Kubernetes documentation warns about): first delete the
ValidatingWebhookConfigurations named in the target, then the ValidatingAdmissionPolicyBindings
and ValidatingAdmissionPolicies, then put the Service selector and the Deployment's replicas
back as captured before injecting. Every step tolerates objects that are already gone, so the
revert is safe after a partial injection, after the drill already deleted the configuration, and
from ``kdrill recover`` in another process (``from_target``).

Source: "Dynamic Admission Control",
https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/
(failure policy, timeouts, avoiding deadlocks).
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.core.waiting import wait_until
from harness.faults import Fault, FaultError, FaultNotReverted
from harness.kube.providers import Cluster
from harness.spec.params import Param

log = logging.getLogger("kdrill.faults.webhook_outage")

MODES = {"refused": "scale-webhook-deployment-to-zero", "blackhole": "service-selector-to-blackhole-backend"}
REQUEST_TIMEOUT_SECONDS = 15
# A restore write can still meet the webhook for the moment an API server's informer takes to
# see the configuration deleted (each API server of an HA control plane has its own).
RESTORE_RETRY_SECONDS = 60


def _missing(exc: ApiException) -> bool:
    return exc.status == 404


class WebhookOutage(Fault):
    """Make the webhook behind ``namespace/service`` unavailable by ``mode`` (``refused`` or
    ``blackhole``), and on revert delete the admission objects named here and restore the
    webhook. ``blackhole_selector`` (pod labels of the never-answering backend) is required for
    ``blackhole``. ``original_replicas``/``original_selector`` are captured by :meth:`inject`
    (or given back by :meth:`from_target`). Raises FaultError for an unknown mode."""

    kind = "webhook-outage"
    params = {
        "mode": Param("choice", "how the webhook's backend fails", choices=tuple(MODES)),
        "failure_policy": Param("choice", "the webhook's failurePolicy", choices=("Fail", "Ignore")),
        "timeout_seconds": Param("integer", "the webhook's timeoutSeconds (the API allows 1 to 30)", minimum=1,
                                 maximum=30),
        "writes_per_check": Param("integer", "writes sent per check", minimum=1, maximum=50),
        "admission_policy": Param("bool", "also check a ValidatingAdmissionPolicy during the outage"),
        "way_out": Param("bool", "also check that deleting the configuration is the way out"),
    }
    needs_node_access = False

    def __init__(self, cluster: Cluster, mode: str, namespace: str, deployment: str, service: str,
                 blackhole_selector: dict[str, str] | None = None,
                 validating_webhook_configurations: list[str] | None = None,
                 validating_admission_policies: list[str] | None = None,
                 validating_admission_policy_bindings: list[str] | None = None,
                 original_replicas: int | None = None, original_selector: dict[str, str] | None = None) -> None:
        super().__init__(cluster)
        if mode not in MODES:
            raise FaultError(f"webhook-outage mode must be one of {', '.join(MODES)}, got {mode!r}")
        if mode == "blackhole" and not blackhole_selector:
            raise FaultError("webhook-outage mode blackhole needs blackhole_selector")
        self.mode, self.namespace, self.deployment, self.service = mode, namespace, deployment, service
        self.blackhole_selector = dict(blackhole_selector or {})
        self.webhook_configurations = list(validating_webhook_configurations or [])
        self.policies = list(validating_admission_policies or [])
        self.bindings = list(validating_admission_policy_bindings or [])
        self.original_replicas = original_replicas
        self.original_selector = dict(original_selector) if original_selector is not None else None

    # --- the interface -----------------------------------------------------------------------

    def target(self) -> dict[str, Any]:
        where = [f"deployment {self.namespace}/{self.deployment}", f"service {self.namespace}/{self.service}"]
        where += [f"validatingwebhookconfiguration {n}" for n in self.webhook_configurations]
        return {"method": MODES[self.mode], "mode": self.mode, "namespace": self.namespace,
                "deployment": self.deployment, "service": self.service,
                "blackhole_selector": self.blackhole_selector,
                "validating_webhook_configurations": self.webhook_configurations,
                "validating_admission_policies": self.policies,
                "validating_admission_policy_bindings": self.bindings,
                "original_replicas": self.original_replicas, "original_selector": self.original_selector,
                "where": where}

    def inject(self) -> None:
        deployment = self._apps.read_namespaced_deployment(self.deployment, self.namespace,
                                                          _request_timeout=REQUEST_TIMEOUT_SECONDS)
        service = self._core.read_namespaced_service(self.service, self.namespace,
                                                     _request_timeout=REQUEST_TIMEOUT_SECONDS)
        self.original_replicas = deployment.spec.replicas
        self.original_selector = dict(service.spec.selector or {})
        self.checkpoint()  # the ledger holds what to restore before anything changes
        if self.mode == "refused":
            self._scale(0)
        else:
            self._set_selector(self.blackhole_selector)

    def revert(self) -> None:
        errors: list[str] = []
        # 1. The configuration first: while it exists, a fail-closed webhook rejects the very
        #    writes (Deployment scale, Pod creation) that would bring it back.
        for name in self.webhook_configurations:
            self._delete(self._admission.delete_validating_webhook_configuration, name, errors)
        for name in self.bindings:
            self._delete(self._admission.delete_validating_admission_policy_binding, name, errors)
        for name in self.policies:
            self._delete(self._admission.delete_validating_admission_policy, name, errors)
        # 2. Then the webhook itself, as it was before the outage.
        if self.original_selector is not None:
            self._restore("service selector", lambda: self._set_selector(self.original_selector), errors)
        if self.original_replicas is not None:
            self._restore("deployment replicas", lambda: self._scale(self.original_replicas), errors)
        if errors:
            raise FaultError("webhook-outage revert incomplete: " + "; ".join(errors))

    def verify_reverted(self) -> None:
        left = []
        for name in self.webhook_configurations:
            if self._exists(self._admission.read_validating_webhook_configuration, name):
                left.append(f"validatingwebhookconfiguration {name} still exists")
        for name in self.bindings:
            if self._exists(self._admission.read_validating_admission_policy_binding, name):
                left.append(f"validatingadmissionpolicybinding {name} still exists")
        for name in self.policies:
            if self._exists(self._admission.read_validating_admission_policy, name):
                left.append(f"validatingadmissionpolicy {name} still exists")
        if self.original_selector is not None:
            service = self._read_or_none(self._core.read_namespaced_service, self.service)
            if service is not None and dict(service.spec.selector or {}) != self.original_selector:
                left.append(f"service {self.namespace}/{self.service} selector is {service.spec.selector}, "
                            f"was {self.original_selector}")
        if self.original_replicas is not None:
            deployment = self._read_or_none(self._apps.read_namespaced_deployment, self.deployment)
            if deployment is not None and deployment.spec.replicas != self.original_replicas:
                left.append(f"deployment {self.namespace}/{self.deployment} has {deployment.spec.replicas} "
                            f"replicas, was {self.original_replicas}")
        if left:
            raise FaultNotReverted("; ".join(left))

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "WebhookOutage":
        return cls(cluster, mode=target["mode"], namespace=target["namespace"], deployment=target["deployment"],
                   service=target["service"], blackhole_selector=target.get("blackhole_selector"),
                   validating_webhook_configurations=target.get("validating_webhook_configurations"),
                   validating_admission_policies=target.get("validating_admission_policies"),
                   validating_admission_policy_bindings=target.get("validating_admission_policy_bindings"),
                   original_replicas=target.get("original_replicas"),
                   original_selector=target.get("original_selector"))

    # --- helpers -----------------------------------------------------------------------------

    @property
    def _apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.cluster.api)

    @property
    def _core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.cluster.api)

    @property
    def _admission(self) -> client.AdmissionregistrationV1Api:
        return client.AdmissionregistrationV1Api(self.cluster.api)

    def _scale(self, replicas: int) -> None:
        # The scale subresource, as `kubectl scale` writes it.
        self._apps.patch_namespaced_deployment_scale(self.deployment, self.namespace, {"spec": {"replicas": replicas}},
                                                     _request_timeout=REQUEST_TIMEOUT_SECONDS)

    def _set_selector(self, selector: dict[str, str]) -> None:
        # A JSON patch replaces the whole map (a merge patch would keep keys absent from it).
        self._core.patch_namespaced_service(self.service, self.namespace,
                                            [{"op": "replace", "path": "/spec/selector", "value": dict(selector)}],
                                            _request_timeout=REQUEST_TIMEOUT_SECONDS)

    def _delete(self, delete, name: str, errors: list[str]) -> None:
        try:
            delete(name, _request_timeout=REQUEST_TIMEOUT_SECONDS)
            log.info("deleted %s", name)
        except ApiException as exc:
            if not _missing(exc):
                errors.append(f"delete {name}: HTTP {exc.status} {exc.reason}")
        except Exception as exc:  # keep going: the other steps may still succeed
            errors.append(f"delete {name}: {type(exc).__name__}: {exc}")

    def _restore(self, what: str, write, errors: list[str]) -> None:
        problems: list[str] = []

        def attempt() -> bool:
            try:
                write()
                return True
            except ApiException as exc:
                if _missing(exc):  # the namespace or object is gone: nothing left to restore
                    return True
                problems.append(f"HTTP {exc.status}: {(exc.body or exc.reason or '')[:300]}")
                return False

        if not wait_until(attempt, RESTORE_RETRY_SECONDS, interval_seconds=1.0, description=f"restore {what}").ok:
            errors.append(f"restore {what}: {problems[-1] if problems else 'no answer'}")

    def _exists(self, read, name: str) -> bool:
        try:
            read(name, _request_timeout=REQUEST_TIMEOUT_SECONDS)
            return True
        except ApiException as exc:
            if _missing(exc):
                return False
            raise FaultNotReverted(f"cannot read {name}: HTTP {exc.status} {exc.reason}") from exc

    def _read_or_none(self, read, name: str):
        try:
            return read(name, self.namespace, _request_timeout=REQUEST_TIMEOUT_SECONDS)
        except ApiException as exc:
            if _missing(exc):
                return None
            raise
