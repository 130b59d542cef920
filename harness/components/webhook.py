"""A real validating admission webhook for drills: its TLS material and its manifests.

The webhook server is the toolbox image's ``kdrill-webhook`` (``--mode admit`` answers every
AdmissionReview with ``allowed: true``; ``--mode blackhole`` accepts TCP connections and never
answers). The API server calls it through a Service at ``https://<service>.<namespace>.svc:443``
and trusts it through the ``caBundle`` of the ValidatingWebhookConfiguration, so the harness
generates a throw-away CA and a serving certificate for that name (:func:`generate_webhook_tls`).

Every builder returns a plain manifest (a dict shaped like the YAML a person would apply), which
the Kubernetes Python client sends as it is. The webhook configuration only ever matches
namespaces that carry the drill's scope label (:func:`namespace_selector`), never the system
namespaces, and only CREATE and UPDATE, so namespace deletion is never blocked by it.

Primary sources: "Dynamic Admission Control"
(https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/:
contacting the webhook, ``caBundle``, ``failurePolicy``, ``timeoutSeconds``, avoiding deadlocks)
and "Validating Admission Policy"
(https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/).
"""

from __future__ import annotations

import base64
import datetime as dt
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from harness.workloads import DRILL_LABEL, TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY

WEBHOOK_PORT = 8443  # the container port kdrill-webhook listens on
SERVICE_PORT = 443  # the Service port the API server calls
WEBHOOK_PATH = "/validate"
SCOPE_LABEL = "kdrill.io/admission-scope"  # namespaces the webhook configuration matches
POLICY_SCOPE_LABEL = "kdrill.io/policy-scope"  # namespaces the ValidatingAdmissionPolicy is bound to
# Never matched, whatever labels they carry: a drill must not be able to block the cluster itself.
PROTECTED_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease", "default")
MODES = ("admit", "blackhole")
FAILURE_POLICIES = ("Fail", "Ignore")
# The API server accepts timeoutSeconds from 1 to 30 (admissionregistration.k8s.io/v1).
MIN_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS = 1, 30


@dataclass(frozen=True)
class WebhookTLS:
    """PEM-encoded CA certificate, serving certificate (signed by the CA) and its private key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    @property
    def ca_bundle(self) -> str:
        """The CA certificate as the base64 text a ``clientConfig.caBundle`` holds."""
        return base64.b64encode(self.ca_pem).decode("ascii")


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names a Service is reached by; the API server calls ``<service>.<namespace>.svc``."""
    if not service or not namespace:
        raise ValueError("service and namespace must be non-empty")
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local"]


def generate_webhook_tls(service: str, namespace: str, valid_seconds: float = 86400,
                         now: dt.datetime | None = None) -> WebhookTLS:
    """A new CA (ECDSA P-256) and a serving certificate for ``service`` in ``namespace``.

    The serving certificate names every :func:`service_dns_names` entry as a DNS SAN (the API
    server's Go TLS client checks SANs, not the common name), is for server authentication
    only, and is valid from five minutes before ``now`` (clock skew between this machine and
    the nodes) for ``valid_seconds``. Raises ValueError for empty names or ``valid_seconds <= 0``.
    """
    if valid_seconds <= 0:
        raise ValueError(f"valid_seconds must be > 0, got {valid_seconds}")
    names = service_dns_names(service, namespace)
    now = now or dt.datetime.now(dt.timezone.utc)
    not_before = now - dt.timedelta(minutes=5)
    not_after = now + dt.timedelta(seconds=valid_seconds)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kdrill"),
                         x509.NameAttribute(NameOID.COMMON_NAME, "kdrill webhook CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (x509.CertificateBuilder()
               .subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(not_before).not_valid_after(not_after)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                            crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
               .add_extension(ca_ski, critical=False)
               .sign(ca_key, hashes.SHA256()))

    # X.509 limits a common name to 64 characters; clients go by the SANs anyway.
    common_name = names[2] if len(names[2]) <= 64 else service[:64]
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before).not_valid_after(not_after)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
            .sign(ca_key, hashes.SHA256()))

    return WebhookTLS(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))


def tls_secret(name: str, tls: WebhookTLS) -> dict[str, Any]:
    """A ``kubernetes.io/tls`` Secret holding the serving certificate and key."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "labels": {DRILL_LABEL: "true"}},
            "data": {"tls.crt": base64.b64encode(tls.cert_pem).decode("ascii"),
                     "tls.key": base64.b64encode(tls.key_pem).decode("ascii")}}


DRAIN_MARKER = "/tmp/draining"


def webhook_deployment(name: str, mode: str, secret_name: str, replicas: int = 1, drain_seconds: int = 8,
                       image: str = TOOLBOX_IMAGE, pull_policy: str = TOOLBOX_PULL_POLICY) -> dict[str, Any]:
    """A Deployment of ``kdrill-webhook --mode <mode>`` labelled ``app=<name>``, serving on 8443.

    ``admit`` pods are ready while ``GET /healthz`` answers over HTTPS and they are not draining;
    ``blackhole`` pods once they accept a TCP connection (all they ever do).

    A terminating ``admit`` pod drains for ``drain_seconds``: its preStop hook marks it not ready and keeps
    it serving until kube-proxy has taken it out of the Service's rules. Without that, the API
    server's connections could for a moment be forwarded to the IP of a pod already gone, which
    the node routes off the cluster. Raises ValueError for an unknown mode or ``drain_seconds < 1``.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if drain_seconds < 1:
        raise ValueError(f"drain_seconds must be >= 1, got {drain_seconds}")
    labels = {"app": name, "kdrill.io/webhook-mode": mode}
    if mode == "admit":
        # kubelet keeps probing readiness during termination, so the marker makes the endpoint
        # not serving while the server still answers.
        check = (f"test ! -e {DRAIN_MARKER} && curl -ksf --max-time 1 -o /dev/null "
                 f"https://127.0.0.1:{WEBHOOK_PORT}/healthz")
        readiness: dict[str, Any] = {"exec": {"command": ["sh", "-c", check]}, "timeoutSeconds": 2}
    else:
        readiness = {"tcpSocket": {"port": WEBHOOK_PORT}}
    readiness.update({"periodSeconds": 1, "failureThreshold": 1})
    container = {
        "name": "webhook", "image": image, "imagePullPolicy": pull_policy,
        "command": ["kdrill-webhook", "--mode", mode, "--port", str(WEBHOOK_PORT),
                    "--cert", "/tls/tls.crt", "--key", "/tls/tls.key"],
        "ports": [{"containerPort": WEBHOOK_PORT, "name": "https"}],
        "readinessProbe": readiness,
        "volumeMounts": [{"name": "tls", "mountPath": "/tls", "readOnly": True}],
        "resources": {"requests": {"cpu": "10m", "memory": "20Mi"}},
    }
    if mode == "admit":
        container["lifecycle"] = {"preStop": {"exec": {"command": [
            "sh", "-c", f"touch {DRAIN_MARKER}; sleep {int(drain_seconds)}"]}}}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": {**labels, DRILL_LABEL: "true"}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [container],
                                           "terminationGracePeriodSeconds": int(drain_seconds) + 5,
                                           "volumes": [{"name": "tls", "secret": {"secretName": secret_name}}]}}}}


def webhook_service(name: str, selector: dict[str, str]) -> dict[str, Any]:
    """A ClusterIP Service on port 443 for the pods matching ``selector`` (port 8443)."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "labels": {DRILL_LABEL: "true"}},
            "spec": {"selector": dict(selector),
                     "ports": [{"name": "https", "port": SERVICE_PORT, "targetPort": WEBHOOK_PORT}]}}


def namespace_selector(scope: str, label: str = SCOPE_LABEL) -> dict[str, Any]:
    """Only namespaces labelled ``<label>=<scope>``, and never :data:`PROTECTED_NAMESPACES`."""
    return {"matchLabels": {label: scope},
            "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                  "values": list(PROTECTED_NAMESPACES)}]}


def admission_rules() -> list[dict[str, Any]]:
    """CREATE and UPDATE of Pods, Deployments and the Deployments' scale subresource (what
    ``kubectl scale`` writes). DELETE is left out, so deleting namespaces always works."""
    operations = ["CREATE", "UPDATE"]
    return [{"apiGroups": [""], "apiVersions": ["v1"], "operations": operations,
             "resources": ["pods"], "scope": "Namespaced"},
            {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": operations,
             "resources": ["deployments", "deployments/scale"], "scope": "Namespaced"}]


def validating_webhook_configuration(name: str, webhook_name: str, service_namespace: str, service_name: str,
                                     ca_bundle: str, scope: str, failure_policy: str = "Fail",
                                     timeout_seconds: int = 5, labels: dict[str, str] | None = None
                                     ) -> dict[str, Any]:
    """A ValidatingWebhookConfiguration with one webhook ``webhook_name`` (a fully qualified
    name, e.g. ``admit-all.kdrill.io``) calling ``https://<service>.<namespace>.svc:443/validate``.

    It matches :func:`admission_rules` in the namespaces of :func:`namespace_selector` (``scope``).
    ``timeout_seconds`` is the API server's deadline for each call (1 to 30 seconds);
    ``failure_policy`` (``Fail``/``Ignore``) decides what happens when the call fails.
    Raises ValueError for a policy or timeout out of range, or a webhook name without a dot.
    """
    if failure_policy not in FAILURE_POLICIES:
        raise ValueError(f"failure_policy must be one of {', '.join(FAILURE_POLICIES)}, got {failure_policy!r}")
    if isinstance(timeout_seconds, bool) or not isinstance(timeout_seconds, int) \
            or not MIN_TIMEOUT_SECONDS <= timeout_seconds <= MAX_TIMEOUT_SECONDS:
        raise ValueError(f"timeout_seconds must be an integer from {MIN_TIMEOUT_SECONDS} to {MAX_TIMEOUT_SECONDS}, "
                         f"got {timeout_seconds!r}")
    if "." not in webhook_name:
        raise ValueError(f"webhook name must be fully qualified (contain a dot), got {webhook_name!r}")
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {DRILL_LABEL: "true", **(labels or {})}},
        "webhooks": [{
            "name": webhook_name,
            "clientConfig": {"service": {"namespace": service_namespace, "name": service_name,
                                         "path": WEBHOOK_PATH, "port": SERVICE_PORT},
                             "caBundle": ca_bundle},
            "rules": admission_rules(),
            "namespaceSelector": namespace_selector(scope),
            "failurePolicy": failure_policy,
            "matchPolicy": "Equivalent",
            "sideEffects": "None",
            "timeoutSeconds": timeout_seconds,
            "admissionReviewVersions": ["v1"],
        }],
    }


def required_label_expression(label: str) -> str:
    """The CEL rule of :func:`validating_admission_policy`: the object carries ``label``."""
    if not label or "'" in label:
        raise ValueError(f"label must be non-empty and free of quotes, got {label!r}")
    return f"has(object.metadata.labels) && '{label}' in object.metadata.labels"


def validating_admission_policy(name: str, required_label: str, scope: str,
                                labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A ValidatingAdmissionPolicy (evaluated in the API server, no webhook) that denies Pods and
    Deployments without ``required_label``, in namespaces labelled ``kdrill.io/policy-scope=<scope>``.
    Its message names the label, so a drill can tell its denials from other errors."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": {DRILL_LABEL: "true", **(labels or {})}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": admission_rules()[:1] + [
                                     {**admission_rules()[1], "resources": ["deployments"]}],
                                 "namespaceSelector": namespace_selector(scope, POLICY_SCOPE_LABEL)},
            "validations": [{"expression": required_label_expression(required_label),
                             "message": policy_message(required_label), "reason": "Forbidden"}],
        },
    }


def policy_message(required_label: str) -> str:
    return f"label {required_label} is required"


def validating_admission_policy_binding(name: str, policy_name: str, scope: str,
                                        labels: dict[str, str] | None = None) -> dict[str, Any]:
    """Binds ``policy_name`` with action Deny to namespaces labelled ``kdrill.io/policy-scope=<scope>``."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": {DRILL_LABEL: "true", **(labels or {})}},
        "spec": {"policyName": policy_name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": namespace_selector(scope, POLICY_SCOPE_LABEL)}},
    }


def is_webhook_call_failure(status: int | None, message: str, webhook_name: str) -> bool:
    """Whether an API error is the API server's "failed calling webhook" rejection for
    ``webhook_name`` (what ``failurePolicy: Fail`` returns when the call cannot complete), as
    opposed to the webhook denying the request or any other error."""
    return status is not None and status >= 500 and f'failed calling webhook "{webhook_name}"' in (message or "")
