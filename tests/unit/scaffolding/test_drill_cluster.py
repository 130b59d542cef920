"""The pure parts of the drill-cluster ledger kind (harness/scaffolding/drill_cluster.py): the
EncryptionConfiguration it writes, the kind config it renders, and what its ledger entry names.
Creating and deleting the cluster is exercised on a real kind cluster by the secrets-at-rest
drill's `encrypted` case and tests/cluster/test_recovery.py."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from harness.faults import fault_class
from harness.kube.providers import Cluster
from harness.scaffolding.drill_cluster import (
    CONFIG_FILE,
    KEY_NAME,
    NODE_DIR,
    DrillCluster,
    encryption_configuration,
    expected_prefix,
    render_kind_config,
)


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


# --- what a forged ledger entry or a taken name can make it do ----------------------------------

class FakeKind:
    """Stands in for KindProvider: which clusters exist, and what was deleted."""
    existing: set[str] = set()
    deleted: list[str] = []

    def __init__(self, config=None, name=None, **kwargs):
        self.name = name

    def exists(self):
        return self.name in FakeKind.existing

    def delete(self):
        FakeKind.deleted.append(self.name)
        FakeKind.existing.discard(self.name)


@pytest.fixture
def fake_kind(tmp_path, monkeypatch):
    import harness.scaffolding.drill_cluster as drill_cluster

    monkeypatch.setenv("KDRILL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KDRILL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(drill_cluster, "KindProvider", FakeKind)
    FakeKind.existing, FakeKind.deleted = set(), []
    return FakeKind


HOST = Cluster(name="kdrill-ha", provider="kind", kubeconfig=Path("/nonexistent"), context=None, node_access=True)


@pytest.mark.parametrize("name", ["kdrill-ha", "kind", "-enc", "kdrill-ha-enc/..", "Kdrill-ha-enc", ""])
def test_a_ledger_target_naming_another_cluster_is_refused(fake_kind, name):
    with pytest.raises(ValueError, match="ending in '-enc'"):
        DrillCluster.from_target(HOST, {"name": name, "provider": "secretbox", "directory": "/tmp/x"})


def test_the_key_directory_is_derived_from_the_name_never_read_from_the_ledger(fake_kind, tmp_path):
    fault = DrillCluster.from_target(HOST, {"name": "kdrill-ha-enc", "provider": "secretbox", "directory": "/"})
    assert fault.directory == tmp_path / "state" / "clusters" / "kdrill-ha-enc"


def test_a_name_already_taken_is_refused_before_anything_is_touched_and_its_cluster_kept(fake_kind, tmp_path,
                                                                                         monkeypatch):
    fault = DrillCluster(HOST, "kdrill-ha-enc")
    fault.directory.mkdir(parents=True)
    (fault.directory / "theirs").write_text("kept")
    fake_kind.existing = {"kdrill-ha-enc"}
    from harness.faults import FaultError

    with pytest.raises(FaultError, match="already exists"):
        fault.inject()
    assert (fault.directory / "theirs").read_text() == "kept"
    # The revert that follows a failed inject deletes only a cluster that mounts its directory.
    monkeypatch.setattr(DrillCluster, "_ours", lambda self: False)
    fault.revert()
    assert fake_kind.deleted == [] and "kdrill-ha-enc" in fake_kind.existing


def test_its_own_cluster_is_deleted_with_its_key_directory(fake_kind, monkeypatch):
    fault = DrillCluster(HOST, "kdrill-ha-enc")
    fault.directory.mkdir(parents=True)
    fake_kind.existing = {"kdrill-ha-enc"}
    monkeypatch.setattr(DrillCluster, "_ours", lambda self: True)
    fault.revert()
    fault.verify_reverted()
    assert fake_kind.deleted == ["kdrill-ha-enc"] and not fault.directory.exists()


@pytest.mark.parametrize("bad", ["/tmp/a:b", "/tmp/a\nb"])
def test_a_directory_docker_cannot_mount_as_given_is_refused(bad):
    with pytest.raises(ValueError, match="without ':' or control characters"):
        render_kind_config(Path(bad))


# --- an upgrade rehearsal's cluster -------------------------------------------------------------

def test_an_upgrade_cluster_is_ha_mounts_its_directory_on_every_node_and_maps_no_host_port(tmp_path):
    from harness.scaffolding.drill_cluster import UPGRADE_NODE_DIR, render_upgrade_config

    config = yaml.safe_load(render_upgrade_config(tmp_path / "d"))
    roles = [node["role"] for node in config["nodes"]]
    assert roles == ["control-plane"] * 3 + ["worker"] * 2
    for node in config["nodes"]:
        assert node["extraMounts"] == [{"hostPath": str(tmp_path / "d"), "containerPath": UPGRADE_NODE_DIR,
                                        "readOnly": True}]
        assert "extraPortMappings" not in node  # runs beside the session's cluster
    with pytest.raises(ValueError, match="absolute path without ':'"):
        render_upgrade_config(Path("relative"))


def test_an_upgrade_entry_names_its_release_and_rebuilds_from_it(fake_kind):
    fault = DrillCluster(HOST, "kdrill-ha-upg", kubernetes="v1.34.4")
    assert fault.target()["kubernetes"] == "v1.34.4" and "provider" not in fault.target()
    again = DrillCluster.from_target(HOST, fault.target())
    assert again.kubernetes == "v1.34.4" and again.where() == fault.where()


@pytest.mark.parametrize("name, kubernetes, expected", [
    ("kdrill-ha-enc", "v1.34.4", "ending in '-upg'"),  # an encrypted cluster's name is not an upgrade's
    ("kdrill-ha", "v1.34.4", "ending in '-upg'"),  # never the session's own cluster
    ("kdrill-ha-upg", "latest", "Kubernetes 'latest': expected one of"),
    ("kdrill-ha-upg", ["v1.34.4"], "Kubernetes \\['v1.34.4'\\]: expected one of"),
])
def test_a_forged_upgrade_entry_is_refused(fake_kind, name, kubernetes, expected):
    with pytest.raises(ValueError, match=expected):
        DrillCluster.from_target(HOST, {"name": name, "kubernetes": kubernetes, "directory": "/"})


def test_a_release_kdrill_does_not_build_is_refused_for_a_new_cluster(fake_kind):
    with pytest.raises(ValueError, match="Kubernetes 'v1.99.0': expected one of"):
        DrillCluster(HOST, "kdrill-ha-upg", kubernetes="v1.99.0")


def test_an_entry_whose_release_left_the_checkout_is_still_reverted_but_never_created(fake_kind, monkeypatch):
    # The drill crashed on v1.33.2; the checkout now builds another release: recover must still
    # delete the drill's own cluster (only its name and mounts decide that), and nothing recreates it.
    fault = DrillCluster.from_target(HOST, {"name": "kdrill-ha-upg", "kubernetes": "v1.33.2", "directory": "/"})
    assert fault.kubernetes == "v1.33.2"
    fake_kind.existing = {"kdrill-ha-upg"}
    monkeypatch.setattr(DrillCluster, "_ours", lambda self: True)
    fault.revert()
    assert fake_kind.deleted == ["kdrill-ha-upg"]
    with pytest.raises(ValueError, match="Kubernetes 'v1.33.2': expected one of"):
        fault.inject()


@pytest.mark.parametrize("target", [None, [], "kdrill-ha-upg", {}, {"kubernetes": "v1.34.4"}])
def test_a_corrupt_entry_is_a_value_error_naming_what_is_wrong(fake_kind, target):
    with pytest.raises(ValueError, match="ledger target: expected a mapping|drill cluster name None"):
        DrillCluster.from_target(HOST, target)


# --- the rehearsal's params, together -------------------------------------------------------------

@pytest.mark.parametrize("params, problem", [
    ({"from_version": "v1.34.4", "skip_to_version": "v1.36.3", "replicas": 4, "min_available": 3}, None),
    ({"from_version": "v1.34.4", "skip_to_version": "v1.35.0"}, "skip_to_version"),  # the upgrade kubeadm allows
    ({"from_version": "v1.34.4", "skip_to_version": "v1.34.4"}, "skip_to_version"),
    ({"from_version": "v1.34.4", "skip_to_version": "v1.37.0"}, "skip_to_version"),
    ({"replicas": 4, "min_available": 4}, "min_available"),  # no eviction ever allowed: each drain times out
    ({"replicas": 2, "min_available": 7}, "min_available"),
])
def test_the_rehearsal_params_must_fit_each_other(params, problem):
    found = DrillCluster.params_problem(params, [])
    assert (found and found[0]) == problem


@pytest.mark.parametrize("edit, field", [
    (("skip_to_version: v1.36.3", "skip_to_version: v1.35.0"), "fault.params.skip_to_version"),
    (("min_available: 3", "min_available: 7"), "fault.params.min_available"),
])
def test_a_copy_of_the_rehearsal_with_params_that_do_not_fit_is_refused_by_validation(tmp_path, edit, field):
    from harness import faults
    from harness.core import resources
    from harness.spec.loading import load_scenario
    from harness.spec.scenario import ScenarioError

    text = (resources.scenarios_dir() / "control-plane-upgrade.yaml").read_text()
    assert edit[0] in text
    (tmp_path / "control-plane-upgrade.yaml").write_text(text.replace(edit[0], edit[1]))
    with pytest.raises(ScenarioError, match=field):
        faults.check_params(load_scenario(tmp_path / "control-plane-upgrade.yaml"))
