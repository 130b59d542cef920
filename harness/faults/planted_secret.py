"""Fault ``planted-secret``: a Secret holding a value nobody else knows, written through the API.

Not a failure of the platform but exposure the drill creates on purpose: the value is written to
etcd (and so to every member's disk) through the API server, the way any workload's credentials
are. It is in the ledger (namespace and name, never the value) before it is created; the revert
deletes it and the verification waits until the API answers 404 for it.

The value is random per injection (32 hex digits from :mod:`secrets`) and lives only in this
process: evidence carries its SHA-256, never the value.

Source: "Secrets" (https://kubernetes.io/docs/concepts/configuration/secret/).
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.core.waiting import wait_until
from harness.faults import Fault, FaultNotReverted
from harness.kube.providers import Cluster
from harness.spec.params import Param

DATA_KEY = "token"
# A deadline for the verification, not a measurement: a Secret's deletion is one API write.
GONE_DEADLINE_SECONDS = 60


def value_digest(value: bytes) -> str:
    """``sha256:<hex>`` of ``value``: how evidence names a secret value."""
    return "sha256:" + hashlib.sha256(value).hexdigest()


class PlantedSecret(Fault):
    """The Secret ``namespace/name`` with one data key, :data:`DATA_KEY`, holding :attr:`value`."""

    kind = "planted-secret"
    params = {
        "secret_name": Param("name", "the Secret's name in the drill namespace", required=False),
        # The drill's, not the Secret's: plant it in a cluster of its own whose kube-apiserver
        # encrypts Secrets with this provider (harness/scaffolding/drill_cluster.py).
        "encryption_provider": Param("choice", "plant the Secret in a cluster made with an EncryptionConfiguration "
                                     "using this provider", choices=("secretbox", "aescbc"), required=False),
    }

    def __init__(self, cluster: Cluster, namespace: str, name: str = "kdrill-planted") -> None:
        super().__init__(cluster)
        self.namespace, self.name = namespace, name
        # Only this process knows it; a rebuilt fault (kdrill recover) deletes without knowing it.
        self.value = secrets.token_hex(16).encode()
        self.resource_version: str | None = None

    @property
    def digest(self) -> str:
        return value_digest(self.value)

    @property
    def etcd_key(self) -> str:
        """Where kube-apiserver stores it: ``/registry/secrets/<namespace>/<name>`` (default
        ``--etcd-prefix=/registry``)."""
        return f"/registry/secrets/{self.namespace}/{self.name}"

    def target(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name}

    def where(self) -> list[Any]:
        return [f"secret {self.namespace}/{self.name}"]

    def evidence(self) -> dict[str, Any]:
        return {"etcd_key": self.etcd_key, "value_digest": self.digest, "resource_version": self.resource_version}

    def inject(self) -> None:
        import base64

        body = client.V1Secret(metadata=client.V1ObjectMeta(name=self.name, labels={"kdrill": "planted-secret"}),
                               type="Opaque", data={DATA_KEY: base64.b64encode(self.value).decode()})
        created = self.cluster.core.create_namespaced_secret(self.namespace, body, _request_timeout=10)
        self.resource_version = created.metadata.resource_version

    def revert(self) -> None:
        try:
            self.cluster.core.delete_namespaced_secret(self.name, self.namespace, _request_timeout=10)
        except ApiException as exc:
            if exc.status != 404:  # already gone (or never made): nothing to undo
                raise

    def verify_reverted(self) -> None:

        def gone() -> bool:
            try:
                self.cluster.core.read_namespaced_secret(self.name, self.namespace, _request_timeout=10)
            except ApiException as exc:
                if exc.status == 404:
                    return True
                raise
            return False

        if not wait_until(gone, GONE_DEADLINE_SECONDS, interval_seconds=1.0).ok:
            raise FaultNotReverted(f"secret {self.namespace}/{self.name} still exists "
                                   f"{GONE_DEADLINE_SECONDS} s after its deletion")

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "PlantedSecret":
        return cls(cluster, target["namespace"], target["name"])
