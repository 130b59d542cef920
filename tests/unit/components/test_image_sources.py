"""The image-source map (harness/components/image_sources.py): reference rules and where an
outage of each source would show, from plain data (the API reads are not faked here)."""

from __future__ import annotations

import pytest

from harness.components.image_sources import (
    NODE_STATUS_MAX_IMAGES,
    ContainerImage,
    NodeImages,
    image_sources,
    normalised,
    registry_host,
)


@pytest.mark.parametrize("reference, host", [
    ("registry.k8s.io/pause:3.10.1", "registry.k8s.io"),
    ("nginx", "docker.io"),
    ("library/nginx:1.27", "docker.io"),
    ("docker.io/kdrill/toolbox:v0.1.0", "docker.io"),
    ("localhost:5000/app", "localhost:5000"),
    ("localhost/app", "localhost"),
    ("kdrill-registry-drill:5000/kdrill-drill/pause:t", "kdrill-registry-drill:5000"),
    ("team/app@sha256:" + "a" * 64, "docker.io"),
    ("index.docker.io/library/nginx:1", "docker.io"),  # Docker Hub's legacy name is Docker Hub
])
def test_the_registry_host_follows_dockers_reference_rules(reference, host):
    assert registry_host(reference) == host


@pytest.mark.parametrize("reference, as_listed", [
    ("nginx", "docker.io/library/nginx:latest"),
    ("nginx:1.27", "docker.io/library/nginx:1.27"),
    ("team/app", "docker.io/team/app:latest"),
    ("docker.io/kdrill/toolbox:v0.1.0", "docker.io/kdrill/toolbox:v0.1.0"),
    ("registry.k8s.io/coredns/coredns:v1.13.1", "registry.k8s.io/coredns/coredns:v1.13.1"),
    ("localhost:5000/app", "localhost:5000/app:latest"),
    ("nginx@sha256:" + "b" * 64, "docker.io/library/nginx@sha256:" + "b" * 64),
    # name:tag@digest runs the digest, and a node lists it as name@digest
    ("nginx:1.27@sha256:" + "c" * 64, "docker.io/library/nginx@sha256:" + "c" * 64),
    ("registry.k8s.io/x/y:1@sha256:" + "d" * 64, "registry.k8s.io/x/y@sha256:" + "d" * 64),
    ("index.docker.io/library/nginx:1", "docker.io/library/nginx:1"),
])
def test_a_reference_is_normalised_as_a_node_lists_it(reference, as_listed):
    assert normalised(reference) == as_listed


def _nodes(**held):
    return {name: NodeImages(frozenset(images), len(images), True) for name, images in held.items()}


def test_an_image_a_node_lacks_is_where_its_source_would_be_needed():
    containers = [ContainerImage("kube-system/Deployment/coredns", "registry.k8s.io/coredns/coredns:v1.13.1",
                                 "IfNotPresent", "w1")]
    nodes = _nodes(w1={"registry.k8s.io/coredns/coredns:v1.13.1"}, w2=set())
    [source] = image_sources(containers, nodes)
    assert source["source"] == "registry.k8s.io"
    [image] = source["images"]
    assert image["workloads"] == ["kube-system/Deployment/coredns"]
    assert image["nodes_without"] == ["w2"] and image["nodes_unknown"] == []
    assert "a pod placed on w2 pulls from this source" == image["risk"]


def test_held_everywhere_needs_the_source_only_for_a_new_node():
    containers = [ContainerImage("app/Deployment/web", "web:1", "IfNotPresent", "w1")]
    [source] = image_sources(containers, _nodes(w1={"docker.io/library/web:1"}, w2={"docker.io/library/web:1"}))
    assert source["source"] == "docker.io"
    assert source["images"][0]["nodes_without"] == []
    assert source["images"][0]["risk"].startswith("every schedulable node holds it")


def test_always_needs_the_source_at_every_start_whatever_the_nodes_hold():
    containers = [ContainerImage("app/Deployment/web", "web:1", "IfNotPresent", "w1"),
                  ContainerImage("app/StatefulSet/db", "web:1", "Always", "w1")]
    [source] = image_sources(containers, _nodes(w1={"docker.io/library/web:1"}))
    [image] = source["images"]
    assert image["pull_policies"] == ["Always", "IfNotPresent"]
    assert image["workloads"] == ["app/Deployment/web", "app/StatefulSet/db"]
    assert image["risk"].startswith("every container start asks this source")


def test_never_on_a_node_without_the_image_cannot_start_at_all():
    containers = [ContainerImage("tools/DaemonSet/agent", "docker.io/kdrill/toolbox:v0.1.0", "Never", "w1")]
    [source] = image_sources(containers, _nodes(w1={"docker.io/kdrill/toolbox:v0.1.0"}, w2=set()))
    assert source["images"][0]["risk"] == "never pulled: a pod placed on w2 cannot start at all"


def test_a_node_at_the_kubelets_image_cap_is_cannot_tell_not_absent():
    full = {f"docker.io/library/filler-{i}:1" for i in range(NODE_STATUS_MAX_IMAGES)}
    containers = [ContainerImage("app/Deployment/web", "web:1", "IfNotPresent", "w1")]
    nodes = _nodes(w1={"docker.io/library/web:1"}, w2=full)
    image = image_sources(containers, nodes)[0]["images"][0]
    assert image["nodes_without"] == [] and image["nodes_unknown"] == ["w2"]
    assert "cannot tell for w2" in image["risk"]


def test_a_cordoned_node_is_not_where_a_pod_would_go():
    containers = [ContainerImage("app/Deployment/web", "web:1", "IfNotPresent", "w1")]
    nodes = {"w1": NodeImages(frozenset({"docker.io/library/web:1"}), 1, True),
             "w2": NodeImages(frozenset(), 0, False)}
    assert image_sources(containers, nodes)[0]["images"][0]["nodes_without"] == []


def test_sources_and_images_come_sorted_and_grouped_by_host():
    containers = [ContainerImage("a/Pod/p", "quay.io/x/y:1", "IfNotPresent", None),
                  ContainerImage("a/Pod/q", "registry.k8s.io/pause:3.10.1", "IfNotPresent", None),
                  ContainerImage("a/Pod/r", "quay.io/x/a:1", "IfNotPresent", None)]
    got = image_sources(containers, {})
    assert [s["source"] for s in got] == ["quay.io", "registry.k8s.io"]
    assert [i["image"] for i in got[0]["images"]] == ["quay.io/x/a:1", "quay.io/x/y:1"]


def test_with_no_node_to_place_a_pod_on_the_map_says_so():
    containers = [ContainerImage("app/Deployment/web", "web:1", "IfNotPresent", None)]
    cordoned = {"w1": NodeImages(frozenset(), 0, False)}
    assert image_sources(containers, cordoned)[0]["images"][0]["risk"].startswith("no node to place a pod on")
    assert image_sources(containers, {})[0]["images"][0]["risk"].startswith("no node to place a pod on")
