"""The pure parts of an API version's removal on upgrade (harness/components/api_removal.py): the
deprecated-API metric read from a kube-apiserver's /metrics text, and runtime-config taken out of a
kubeadm ClusterConfiguration. The control-plane-upgrade drill shows both on a real cluster."""

from __future__ import annotations

import pytest

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


# --- odd input ----------------------------------------------------------------------------------

SERIES = ('apiserver_requested_deprecated_apis{group="networking.k8s.io",removed_release="1.37",'
          'resource="servicecidrs",subresource="",version="v1beta1"} 1')


def test_a_sample_with_a_timestamp_is_read():
    # The text format allows a timestamp after the value.
    [series] = deprecated_requests(SERIES + " 1765000000000\n", "networking.k8s.io", "v1beta1", "servicecidrs")
    assert series["value"] == "1" and series["removed_release"] == "1.37"


def test_a_label_value_holding_a_closing_brace_is_read():
    text = SERIES.replace('subresource=""', 'subresource="a}b"')
    [series] = deprecated_requests(text, "networking.k8s.io", "v1beta1", "servicecidrs")
    assert series["subresource"] == "a}b"


def test_missing_api_server_or_extra_args_change_nothing_and_add_nothing():
    for config in ({}, {"apiServer": None}, {"apiServer": {"extraArgs": None}}):
        before = dict(config)
        assert drop_runtime_config(config, "networking.k8s.io/v1beta1") is False
        assert config == before


def test_an_entry_without_a_value_is_dropped_too():
    config = {"apiServer": {"extraArgs": {"runtime-config": "networking.k8s.io/v1beta1,api/beta=false"}}}
    assert drop_runtime_config(config, "networking.k8s.io/v1beta1") is True
    assert config["apiServer"]["extraArgs"] == {"runtime-config": "api/beta=false"}


def test_a_null_runtime_config_is_nothing_to_drop():
    assert drop_runtime_config({"apiServer": {"extraArgs": {"runtime-config": None}}}, "x/v1") is False
    assert drop_runtime_config({"apiServer": {"extraArgs": [{"name": "runtime-config", "value": None}]}},
                               "x/v1") is False


@pytest.mark.parametrize("config, field", [
    (None, "ClusterConfiguration: expected a mapping"),
    (["apiServer"], "ClusterConfiguration: expected a mapping"),
    ({"apiServer": "x"}, "apiServer: expected a mapping"),
    ({"apiServer": {"extraArgs": "runtime-config=networking.k8s.io/v1beta1=true"}}, "extraArgs: expected a list"),
    ({"apiServer": {"extraArgs": ["runtime-config=networking.k8s.io/v1beta1=true"]}}, "extraArgs: expected a list"),
    ({"apiServer": {"extraArgs": {"runtime-config": True}}}, "runtime-config: expected a string"),
    ({"apiServer": {"extraArgs": [{"name": "runtime-config", "value": 1}]}}, "runtime-config: expected a string"),
])
def test_a_shape_kubeadm_does_not_write_is_a_value_error_naming_the_field(config, field):
    with pytest.raises(ValueError, match=field):
        drop_runtime_config(config, "networking.k8s.io/v1beta1")
