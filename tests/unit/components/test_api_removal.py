"""The pure parts of an API version's removal on upgrade (harness/components/api_removal.py): the
deprecated-API metric read from a kube-apiserver's /metrics text, and runtime-config taken out of a
kubeadm ClusterConfiguration. The control-plane-upgrade drill shows both on a real cluster."""

from __future__ import annotations

from harness.components.api_removal import deprecated_requests, drop_runtime_config

METRICS = """\
# HELP apiserver_requested_deprecated_apis [STABLE] Gauge of deprecated APIs that have been requested
# TYPE apiserver_requested_deprecated_apis gauge
apiserver_requested_deprecated_apis{group="networking.k8s.io",removed_release="1.37",resource="servicecidrs",subresource="",version="v1beta1"} 1
apiserver_requested_deprecated_apis{group="networking.k8s.io",removed_release="1.37",resource="ipaddresses",subresource="",version="v1beta1"} 1
apiserver_requested_deprecated_apis_other{group="networking.k8s.io",resource="servicecidrs",version="v1beta1"} 1
"""


def test_the_metric_names_the_release_that_removes_what_was_requested():
    [series] = deprecated_requests(METRICS, "networking.k8s.io", "v1beta1", "servicecidrs")
    assert series["removed_release"] == "1.37" and series["value"] == "1"


def test_other_resources_and_versions_are_not_counted():
    assert deprecated_requests(METRICS, "networking.k8s.io", "v1", "servicecidrs") == []
    assert deprecated_requests("", "networking.k8s.io", "v1beta1", "servicecidrs") == []


def test_runtime_config_loses_only_that_group_version_in_kubeadm_v1beta4():
    config = {"apiServer": {"extraArgs": [
        {"name": "runtime-config", "value": "networking.k8s.io/v1beta1=true,storage.k8s.io/v1beta1=true"},
        {"name": "audit-log-maxage", "value": "7"}]}}
    assert drop_runtime_config(config, "networking.k8s.io/v1beta1") is True
    assert config["apiServer"]["extraArgs"] == [{"name": "runtime-config", "value": "storage.k8s.io/v1beta1=true"},
                                                {"name": "audit-log-maxage", "value": "7"}]


def test_the_argument_goes_when_nothing_is_left_and_twice_changes_nothing():
    config = {"apiServer": {"extraArgs": [{"name": "runtime-config", "value": "networking.k8s.io/v1beta1=true"}]}}
    assert drop_runtime_config(config, "networking.k8s.io/v1beta1") is True
    assert config["apiServer"]["extraArgs"] == []
    assert drop_runtime_config(config, "networking.k8s.io/v1beta1") is False


def test_kubeadm_v1beta3_maps_are_handled_too():
    config = {"apiServer": {"extraArgs": {"runtime-config": "networking.k8s.io/v1beta1=true", "v": "2"}}}
    assert drop_runtime_config(config, "networking.k8s.io/v1beta1") is True
    assert config["apiServer"]["extraArgs"] == {"v": "2"}
    assert drop_runtime_config({}, "networking.k8s.io/v1beta1") is False
