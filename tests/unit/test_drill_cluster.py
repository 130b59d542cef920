"""The pure parts of the drill-cluster ledger kind (harness/faults/drill_cluster.py): the
EncryptionConfiguration it writes, the kind config it renders, and what its ledger entry names.
Creating and deleting the cluster is exercised on a real kind cluster by the secrets-at-rest
drill's `encrypted` case and tests/cluster/test_recovery.py."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from harness.faults import fault_class
from harness.faults.drill_cluster import (CONFIG_FILE, KEY_NAME, NODE_DIR, DrillCluster, encryption_configuration,
                                          expected_prefix, render_kind_config)
from harness.providers import Cluster


def test_the_encryption_configuration_encrypts_secrets_first_and_reads_plaintext_last():
    key = bytes(range(32))
    config = encryption_configuration("secretbox", key)
    assert (config["apiVersion"], config["kind"]) == ("apiserver.config.k8s.io/v1", "EncryptionConfiguration")
    [rule] = config["resources"]
    assert rule["resources"] == ["secrets"]
    first, last = rule["providers"]
    assert first == {"secretbox": {"keys": [{"name": KEY_NAME, "secret": base64.b64encode(key).decode()}]}}
    assert last == {"identity": {}}  # what was stored before stays readable


@pytest.mark.parametrize("provider, key, expected", [
    ("identity", bytes(32), "one of secretbox, aescbc"),
    ("aesgcm", bytes(32), "one of secretbox, aescbc"),
    ("secretbox", bytes(16), "32-byte key, got 16"),
])
def test_another_provider_or_key_length_is_refused(provider, key, expected):
    with pytest.raises(ValueError, match=expected):
        encryption_configuration(provider, key)


def test_the_kind_config_mounts_the_directory_and_gives_kube_apiserver_the_flag(tmp_path):
    config = yaml.safe_load(render_kind_config(tmp_path / "dir with space"))
    [node] = config["nodes"]
    assert node["role"] == "control-plane" and "extraPortMappings" not in node  # runs beside kdrill-ha
    assert node["extraMounts"] == [{"hostPath": str(tmp_path / "dir with space"), "containerPath": NODE_DIR,
                                    "readOnly": True}]
    patches = [yaml.safe_load(p) for p in config["kubeadmConfigPatches"]]
    [cluster_config] = [p for p in patches if p["kind"] == "ClusterConfiguration"]
    assert cluster_config["apiServer"]["extraArgs"] == {"encryption-provider-config": f"{NODE_DIR}/{CONFIG_FILE}"}
    [volume] = cluster_config["apiServer"]["extraVolumes"]
    assert volume["hostPath"] == volume["mountPath"] == NODE_DIR and volume["readOnly"] is True
    assert any(p["kind"] == "KubeletConfiguration" and p["failCgroupV1"] is False for p in patches)


def test_a_relative_directory_is_refused():
    with pytest.raises(ValueError, match="not an absolute path"):
        render_kind_config(Path("relative/dir"))


def test_the_prefix_names_provider_and_key():
    assert expected_prefix("aescbc") == f"k8s:enc:aescbc:v1:{KEY_NAME}:".encode()


def test_the_ledger_entry_names_the_new_cluster_and_rebuilds_from_its_target(tmp_path, monkeypatch):
    monkeypatch.setenv("KDRILL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KDRILL_CACHE", str(tmp_path / "cache"))
    host = Cluster(name="kdrill-ha", provider="kind", kubeconfig=tmp_path / "ha", context="kind-kdrill-ha",
                   node_access=True)
    fault = DrillCluster(host, "kdrill-ha-enc", "aescbc")
    # recover rebuilds the cluster from the entry's `cluster`: the new one, so a deleted
    # session cluster does not make it forget the drill's.
    assert fault.cluster.describe()["name"] == "kdrill-ha-enc"
    assert fault.cluster.kubeconfig == tmp_path / "cache" / "kubeconfig" / "kdrill-ha-enc"
    assert fault.target() == {"name": "kdrill-ha-enc", "provider": "aescbc",
                              "directory": str(tmp_path / "state" / "clusters" / "kdrill-ha-enc")}
    again = fault_class("drill-cluster").from_target(fault.cluster, fault.target())
    assert again.target() == fault.target()


def test_an_unknown_provider_is_refused_before_anything_is_made():
    host = Cluster(name="h", provider="kind", kubeconfig=Path("/nonexistent"), context=None, node_access=True)
    with pytest.raises(ValueError, match="expected one of secretbox, aescbc"):
        DrillCluster(host, "h-enc", "kms")
