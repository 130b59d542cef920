"""Pure logic of the registry-outage drill: hosts.toml, names, tags, Docker output parsing, the
kubelet's image pull back-off arithmetic and the fault's ledger target. No Docker, no cluster."""

from __future__ import annotations

import json
import tomllib

import pytest

from harness.components.registry import (
    REGISTRY_HOST,
    RegistryError,
    container_name,
    hosts_dir,
    hosts_toml,
    image_tag,
    max_retry_wait_after_restore,
    parse_host_port,
    parse_push_digest,
    pull_backoff_seconds,
    registry_images,
)
from harness.faults import FaultError, fault_class
from harness.faults.registry_outage import RegistryOutage


class FakeCluster:
    """Only a name: the fault's constructor and target touch nothing else."""

    name = "kdrill-test"


def test_hosts_toml_points_the_registry_host_at_the_container_over_plain_http():
    parsed = tomllib.loads(hosts_toml("kdrill-registry-kdrill-ha"))
    assert parsed["server"] == "http://kdrill-registry-kdrill-ha:5000"
    assert parsed["host"] == {"http://kdrill-registry-kdrill-ha:5000": {"capabilities": ["pull", "resolve"]}}


def test_hosts_toml_port_is_configurable():
    assert tomllib.loads(hosts_toml("reg", port=5001))["server"] == "http://reg:5001"


@pytest.mark.parametrize("bad", ["", "a b", 'x"y', "reg/evil", "reg:5000"])
def test_hosts_toml_rejects_what_is_not_a_host_name(bad):
    with pytest.raises(ValueError):
        hosts_toml(bad)


def test_hosts_dir_is_containerd_certs_d_for_the_host_and_port():
    assert hosts_dir() == f"/etc/containerd/certs.d/{REGISTRY_HOST}"
    assert hosts_dir("kdrill-registry:5000") == "/etc/containerd/certs.d/kdrill-registry:5000"


@pytest.mark.parametrize("bad", ["../etc", "a/b", "host:port", ""])
def test_hosts_dir_rejects_paths(bad):
    with pytest.raises(ValueError):
        hosts_dir(bad)


def test_container_name_is_per_cluster():
    assert container_name("kdrill-ha") == "kdrill-registry-kdrill-ha"


@pytest.mark.parametrize("bad", ["Upper", "under_score", "x" * 60, "trailing-"])
def test_container_name_must_be_a_dns_label(bad):
    with pytest.raises(ValueError):
        container_name(bad)


def test_image_tag_keeps_valid_characters_and_replaces_others():
    assert image_tag("20250101T120000Z-a1b2c3", "registry-outage") == "20250101T120000Z-a1b2c3-registry-outage"
    assert image_tag("run/1", "case two") == "run-1-case-two"
    assert len(image_tag("x" * 300)) == 128


def test_image_tag_needs_something_left():
    with pytest.raises(ValueError):
        image_tag("///", "")


def test_parse_host_port_picks_the_loopback_mapping():
    assert parse_host_port("127.0.0.1:32768\n") == 32768
    assert parse_host_port("0.0.0.0:1\n127.0.0.1:40000\n") == 40000


@pytest.mark.parametrize("output", ["", "0.0.0.0:5000", "[::]:5000\n"])
def test_parse_host_port_refuses_non_loopback(output):
    with pytest.raises(RegistryError):
        parse_host_port(output)


def test_parse_push_digest():
    digest = "sha256:" + "ab" * 32
    assert parse_push_digest(f"The push refers to ...\nv1: digest: {digest} size: 944\n") == digest
    assert parse_push_digest("denied") is None


def test_registry_images_lists_only_tags_under_the_registry_host():
    listing = json.dumps({"images": [
        {"id": "sha256:1", "repoTags": ["kdrill-registry:5000/kdrill/web:b", "kdrill-registry:5000/kdrill/web:a"]},
        {"id": "sha256:2", "repoTags": ["docker.io/kdrill/toolbox:v0.1.0"]},
        {"id": "sha256:3", "repoTags": ["kdrill-registry:50000/other:x"]},
        {"id": "sha256:4", "repoTags": None},
    ]})
    assert registry_images(listing) == ["kdrill-registry:5000/kdrill/web:a", "kdrill-registry:5000/kdrill/web:b"]
    assert registry_images(json.dumps({"images": []})) == []


def test_pull_backoff_doubles_from_10_s_up_to_300_s():
    assert [pull_backoff_seconds(n) for n in range(1, 8)] == [10, 20, 40, 80, 160, 300, 300]
    with pytest.raises(ValueError):
        pull_backoff_seconds(0)


@pytest.mark.parametrize("failing, bound", [
    (0, 25),      # only the first failure can have happened: its 10 s back-off + one re-sync
    (9.9, 25),
    (10, 35),     # a second failure is possible from 10 s on: 20 s back-off
    (29.9, 35),
    (30, 55),     # a third from 30 s: 40 s
    (60, 55),     # the drill's refused case restores about 60 s after the first failure
    (70, 95),
    (1000, 315),  # capped at 300 s
])
def test_max_retry_wait_after_restore(failing, bound):
    assert max_retry_wait_after_restore(failing) == bound


def test_max_retry_wait_after_restore_rejects_negative_time():
    with pytest.raises(ValueError):
        max_retry_wait_after_restore(-1)


@pytest.mark.parametrize("mode, method", [("refused", "registry-server-stopped"),
                                          ("unresponsive", "registry-container-paused")])
def test_fault_target_round_trips_through_the_ledger_data(mode, method):
    fault = RegistryOutage(FakeCluster(), "kdrill-registry-kdrill-test", mode, verify_image="kdrill/web:t1")
    target = fault.target()
    assert target["method"] == method
    assert fault.where() == ["kdrill-registry-kdrill-test"]
    again = RegistryOutage.from_target(FakeCluster(), target)
    assert again.target() == target


def test_fault_kind_resolves_to_this_module():
    assert fault_class("registry-outage") is RegistryOutage


@pytest.mark.parametrize("kwargs", [{"mode": "stopped"}, {"mode": "refused", "verify_image": "kdrill/web"}])
def test_fault_rejects_unknown_mode_and_untagged_image(kwargs):
    with pytest.raises(FaultError):
        RegistryOutage(FakeCluster(), "kdrill-registry-kdrill-test", **kwargs)


def test_the_refused_outage_restore_bound_covers_the_documented_back_off():
    """scenarios/registry-outage.yaml: pulls fail from the scale-out (3 s in) to the restore (60 s
    in); the kubelet's retry after the restore then comes within the back-off in effect plus a
    pod re-sync. Its bound must cover that, plus the pull and start (about 2 s here)."""
    from harness.core import resources
    from harness.spec.scenario import load_scenario

    scenario = load_scenario(resources.scenarios_dir() / "registry-outage.yaml")
    failing = scenario.runner["windows"]["hold_seconds"] - next(
        a["after_seconds"] for a in scenario.runner["actions"] if a["name"] == "scale-out")
    bound = next(e.bound for e in scenario.expectations if e.name == "scale_out_pod_ready_after_restore_seconds")
    assert max_retry_wait_after_restore(failing) == 55.0
    assert bound.value >= max_retry_wait_after_restore(failing) + 5
    assert scenario.runner["windows"]["after_seconds"] > bound.value  # the window can see the bound
