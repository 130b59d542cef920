"""A real validating admission webhook for drills: its TLS material.

The webhook server is the toolbox image's ``kdrill-webhook`` (``--mode admit`` answers every
AdmissionReview with ``allowed: true``; ``--mode blackhole`` accepts TCP connections and never
answers), declared in a scenario's manifests (scenarios/webhook-outage*.yaml). The API server
calls it through a Service at ``https://<service>.<namespace>.svc:443`` and trusts it through the
``caBundle`` of the webhook configuration, so the runner generates a throw-away CA and a serving
certificate for that name for each drill (:func:`generate_webhook_tls`, ``workload.tls``).

Primary source: "Dynamic Admission Control"
(https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/:
contacting the webhook, ``caBundle``).
"""

from __future__ import annotations

import base64
import datetime as dt
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


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
