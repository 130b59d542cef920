"""Pure logic of the webhook drills: the per-drill TLS material (workload.tls), and the ledger
round trip of the webhook-outage fault (kept so `kdrill recover` reverts entries an earlier kdrill
wrote). No cluster: the TLS handshake test runs over a local socket pair."""

from __future__ import annotations

import base64
import datetime as dt
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from harness.components.webhook import generate_webhook_tls, service_dns_names
from harness.faults import FaultError
from harness.faults.webhook_outage import WebhookOutage

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def tls():
    return generate_webhook_tls("webhook", "drill-ns", valid_seconds=3600, now=NOW)


def load(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def verifier(ca: x509.Certificate, name: str, at: dt.datetime = NOW):
    return PolicyBuilder().store(Store([ca])).time(at).build_server_verifier(x509.DNSName(name))


def test_service_dns_names():
    assert service_dns_names("webhook", "ns") == ["webhook", "webhook.ns", "webhook.ns.svc",
                                                  "webhook.ns.svc.cluster.local"]
    with pytest.raises(ValueError):
        service_dns_names("", "ns")


def test_serving_certificate_chains_to_the_ca_for_every_service_name(tls):
    ca, leaf = load(tls.ca_pem), load(tls.cert_pem)
    for name in service_dns_names("webhook", "drill-ns"):
        chain = verifier(ca, name).verify(leaf, [])
        assert chain[-1] == ca


def test_serving_certificate_is_refused_for_another_name_or_outside_its_validity(tls):
    ca, leaf = load(tls.ca_pem), load(tls.cert_pem)
    with pytest.raises(VerificationError):
        verifier(ca, "webhook.other-ns.svc").verify(leaf, [])
    with pytest.raises(VerificationError):
        verifier(ca, "webhook.drill-ns.svc", at=NOW + dt.timedelta(hours=2)).verify(leaf, [])
    other_ca = load(generate_webhook_tls("webhook", "drill-ns", now=NOW).ca_pem)
    with pytest.raises(VerificationError):
        verifier(other_ca, "webhook.drill-ns.svc").verify(leaf, [])


def test_certificate_fields(tls):
    ca, leaf = load(tls.ca_pem), load(tls.cert_pem)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert list(leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.SERVER_AUTH]
    # Valid from 5 minutes before "now" (clock skew) for valid_seconds after it.
    assert leaf.not_valid_before_utc == NOW - dt.timedelta(minutes=5)
    assert leaf.not_valid_after_utc == NOW + dt.timedelta(seconds=3600)
    key = serialization.load_pem_private_key(tls.key_pem, password=None)
    assert key.public_key().public_numbers() == leaf.public_key().public_numbers()


def test_each_call_makes_a_new_ca():
    a = generate_webhook_tls("webhook", "ns", now=NOW)
    b = generate_webhook_tls("webhook", "ns", now=NOW)
    assert a.ca_pem != b.ca_pem and a.key_pem != b.key_pem


def test_long_names_still_make_a_certificate():
    namespace = "n" * 63
    tls = generate_webhook_tls("webhook", namespace, now=NOW)
    chain = verifier(load(tls.ca_pem), f"webhook.{namespace}.svc").verify(load(tls.cert_pem), [])
    assert [c.subject for c in chain] == [load(tls.cert_pem).subject, load(tls.ca_pem).subject]


@pytest.mark.parametrize("seconds", [0, -1])
def test_validity_must_be_positive(seconds):
    with pytest.raises(ValueError):
        generate_webhook_tls("webhook", "ns", valid_seconds=seconds)


def test_tls_handshake_with_ca_bundle_over_a_socket_pair(tmp_path: Path):
    # OpenSSL on both ends, as the API server (client, trusting caBundle) and the webhook (server).
    tls = generate_webhook_tls("webhook", "drill-ns")
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    (tmp_path / "tls.crt").write_bytes(tls.cert_pem)
    (tmp_path / "tls.key").write_bytes(tls.key_pem)
    server_ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_ctx = ssl.create_default_context(cadata=base64.b64decode(tls.ca_bundle).decode())
    left, right = socket.socketpair()
    left.settimeout(10)
    right.settimeout(10)
    errors = []

    def serve():
        try:
            with server_ctx.wrap_socket(right, server_side=True) as s:
                s.sendall(s.recv(5))
        except Exception as exc:  # reported by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=serve)
    thread.start()
    with client_ctx.wrap_socket(left, server_hostname="webhook.drill-ns.svc") as c:
        c.sendall(b"hello")
        assert c.recv(5) == b"hello"
    thread.join(10)
    assert not errors


def test_the_ca_bundle_carries_the_ca(tls):
    assert base64.b64decode(tls.ca_bundle) == tls.ca_pem


def test_fault_target_round_trips_through_the_ledger_shape():
    fault = WebhookOutage(None, mode="blackhole", namespace="wh", deployment="webhook", service="webhook",
                          blackhole_selector={"app": "webhook-blackhole"},
                          validating_webhook_configurations=["cfg", "cfg-canary"],
                          validating_admission_policies=["p"], validating_admission_policy_bindings=["p"],
                          original_replicas=1, original_selector={"app": "webhook"})
    target = fault.target()
    assert target["validating_webhook_configurations"] == ["cfg", "cfg-canary"]
    assert WebhookOutage.from_target(None, target).target() == target
    assert "validatingwebhookconfiguration cfg" in fault.where()


def test_fault_refuses_unknown_mode_and_blackhole_without_backend():
    with pytest.raises(FaultError):
        WebhookOutage(None, mode="slow", namespace="wh", deployment="d", service="s")
    with pytest.raises(FaultError):
        WebhookOutage(None, mode="blackhole", namespace="wh", deployment="d", service="s")
