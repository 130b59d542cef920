"""Another Kubernetes release built on request (harness.kube.images: ``kdrill images build
kubernetes-v1.34.4``): its steps have their own keys and names, the default build's keep theirs, and
its node image carries its version. The build itself is measured by running it (the note's
figures), not here."""

from __future__ import annotations

import pytest

from harness.kube.images import ON_REQUEST, Build, BuildError, build_for, release_target, releases


def test_each_release_directory_is_an_on_request_target():
    assert "v1.34.4" in releases()
    assert release_target("v1.34.4") in ON_REQUEST


def test_a_release_changes_no_key_of_the_default_build_it_shares():
    default = {s["step"]: s["key"] for s in Build().status()}
    release = {s["step"]: s["key"] for s in Build(release="v1.34.4").status()}
    shared = set(default) & set(release)
    assert {"rootfs-node", "node-base", "toolbox", "base-net", "haproxy"} <= shared
    assert {name: release[name] for name in shared} == {name: default[name] for name in shared}


def test_a_release_has_its_own_binaries_components_preload_and_node_image():
    build = Build(release="v1.34.4")
    assert build.node_image == "kdrill/node:v1.34.4"
    assert build.tags["kube-apiserver"] == "registry.k8s.io/kube-apiserver:v1.34.4"
    assert build.tags["etcd"] == "registry.k8s.io/etcd:3.6.5-0"  # what kubeadm v1.34.4 lists
    node = build.step("kubernetes-v1.34.4")
    assert [d.name for d in node.deps] == ["node-base", "go-kubernetes-v1.34.4", "preload-v1.34.4"]
    assert build.step("go-kubernetes") is build.step("go-tools") is node.deps[1]
    # Its Go step builds on the default go-tools (pause, netd, crictl come from there).
    assert [d.key for d in node.deps[1].deps] == [Build().step("go-tools").key]


def test_build_for_picks_the_release_graph_and_refuses_two_releases():
    assert build_for(["kubernetes-v1.34.4"]).release == "v1.34.4"
    assert build_for(["gatekeeper"]).release is None and build_for(None).release is None
    with pytest.raises(BuildError, match="one Kubernetes release per build"):
        build_for(["kubernetes-v1.34.4", "kubernetes-v1.35.9"])


def test_an_unknown_release_is_refused():
    with pytest.raises(BuildError, match="Kubernetes v1.99.0: expected one of v1.34.4"):
        Build(release="v1.99.0")


def test_a_release_step_is_estimated_from_the_default_step_it_does_the_work_of():
    from harness.kube.build_progress import COLD_SECONDS, expected_seconds

    expected = expected_seconds(["go-kubernetes-v1.34.4", "kubernetes-v1.34.4", "observability"], {})
    assert expected == {"go-kubernetes-v1.34.4": COLD_SECONDS["go-kubernetes"],
                        "kubernetes-v1.34.4": COLD_SECONDS["node"], "observability": 60.0}


# --- odd release directories and targets ----------------------------------------------------------

def _release_dir(root, name, text):
    (root / name).mkdir()
    (root / name / "versions.env").write_text(text)


def test_a_directory_not_named_as_a_release_is_not_one_and_breaks_nothing(tmp_path, monkeypatch):
    import harness.kube.images as images

    _release_dir(tmp_path, "v1.34.4", "KUBERNETES_VERSION=v1.34.4\n")
    _release_dir(tmp_path, "v1.33.0-rc.1", "KUBERNETES_VERSION=v1.33.0-rc.1\n")
    _release_dir(tmp_path, "vendor", "KUBERNETES_VERSION=v1.30.0\n")
    monkeypatch.setattr(images, "RELEASES_DIR", tmp_path)
    assert releases() == ["v1.34.4"]


@pytest.mark.parametrize("text, got", [("ETCD_IMAGE_TAG=3.6.5-0\n", "got nothing"),
                                       ("KUBERNETES_VERSION=v1.35.4\n", "got v1.35.4")])
def test_a_release_whose_versions_env_names_another_release_is_refused(tmp_path, monkeypatch, text, got):
    # Else its images would be tagged as the default build's (kdrill/node:v1.35.4) and replace them.
    import harness.kube.images as images

    _release_dir(tmp_path, "v1.33.1", text)
    monkeypatch.setattr(images, "RELEASES_DIR", tmp_path)
    with pytest.raises(BuildError, match=f"v1.33.1/versions.env: KUBERNETES_VERSION: expected v1.33.1 .*{got}"):
        Build(release="v1.33.1")


def test_one_release_named_twice_is_one_release():
    assert build_for(["kubernetes-v1.34.4", "kubernetes-v1.34.4"]).release == "v1.34.4"
