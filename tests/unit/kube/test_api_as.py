"""Cluster.api_as: a client that presents a token and nothing of the kubeconfig's user."""

from __future__ import annotations

import base64

from harness.kube.providers import Cluster

PEM = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").decode()
KUBECONFIG = f"""apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "https://127.0.0.1:6443", certificate-authority-data: {PEM}}}
users:
- name: admin
  user: {{client-certificate-data: {PEM}, client-key-data: {PEM}}}
contexts:
- name: c
  context: {{cluster: c, user: admin}}
current-context: c
"""


def _cluster(tmp_path) -> Cluster:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    return Cluster(name="c", provider="existing", kubeconfig=path, context="c", node_access=False)


def test_the_token_is_the_only_credential(tmp_path):
    configuration = _cluster(tmp_path).api_as("t0ken").configuration
    assert configuration.host == "https://127.0.0.1:6443"
    assert configuration.ssl_ca_cert  # the kubeconfig's CA still verifies the server
    assert configuration.cert_file is None and configuration.key_file is None
    assert configuration.auth_settings()["BearerToken"]["value"] == "Bearer t0ken"


def test_the_kubeconfigs_own_client_keeps_its_certificate(tmp_path):
    cluster = _cluster(tmp_path)
    cluster.api_as("t0ken")
    assert cluster.new_api().configuration.cert_file is not None


def test_the_connection_pool_presents_no_client_certificate(tmp_path):
    # The pool is built with the client; a certificate it took would authenticate the request
    # as the kubeconfig's user whatever the token says.
    pool = _cluster(tmp_path).api_as("t0ken").rest_client.pool_manager.connection_pool_kw
    assert pool.get("cert_file") is None and pool.get("key_file") is None
