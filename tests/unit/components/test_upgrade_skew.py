"""The version skew policy as harness.components.upgrade judges a reading of the cluster
("Version Skew Policy", https://kubernetes.io/releases/version-skew-policy/), and the pure parts of
the upgrade's steps. Each rule is shown holding and broken; the readings of a real upgrade are the
control-plane-upgrade drill's."""

from __future__ import annotations

import pytest

from harness.components.upgrade import VersionReading, evicted_pods, minor, mixed_apiserver_seconds, skew_violations

CP = ["cp1", "cp2", "cp3"]


def reading(apis=("v1.35.4", "v1.34.4", "v1.34.4"), kcm=None, kubelets=None, proxies=None, talks_to=None, t=0.0):
    return VersionReading(t=t, apiservers=dict(zip(CP, apis)),
                          controller_managers=kcm or {}, kubelets=kubelets or {}, kube_proxies=proxies or {},
                          talks_to=talks_to or {})


@pytest.mark.parametrize("text, expected", [("v1.35.4", 35), ("Kubernetes v1.34.4", 34), ("v1.100.0", 100)])
def test_minor_reads_kubernetes_versions(text, expected):
    assert minor(text) == expected


@pytest.mark.parametrize("text", ["", "1.35", "v2.1.0", None, "Kubernetes"])
def test_minor_refuses_what_is_not_a_version(text):
    with pytest.raises(ValueError, match="expected v1.MINOR.PATCH"):
        minor(text)


def test_a_rolling_control_plane_one_minor_apart_is_within_the_policy():
    assert skew_violations(reading(kubelets={"w1": "v1.34.4", "cp1": "v1.34.4"},
                                   kcm={"cp1": "v1.35.4", "cp2": "v1.34.4"},
                                   talks_to={"kube-controller-manager/cp1": "cp1",
                                             "kube-controller-manager/cp2": "cp2"})) == []


def test_api_servers_two_minors_apart_break_it():
    [found] = skew_violations(reading(apis=("v1.36.0", "v1.34.4", "v1.34.4")))
    assert "more than one minor apart" in found


def test_a_kubelet_newer_than_the_oldest_api_server_breaks_it():
    [found] = skew_violations(reading(kubelets={"w1": "v1.35.4"}))
    assert found.startswith("kubelet on w1: 1.35 is newer than the kube-apiserver it calls (1.34)")


def test_a_kubelet_that_calls_only_its_own_upgraded_api_server_is_within_the_policy_unless_read_strictly():
    # kubeadm's order: the first control-plane node's kubelet upgraded while the others' API
    # servers are still older; kubeadm points that kubelet at its own node's API server.
    upgraded = reading(kubelets={"cp1": "v1.35.4"}, talks_to={"kubelet/cp1": "cp1"})
    assert skew_violations(upgraded) == []
    [found] = skew_violations(upgraded, strict=True)  # the policy page's HA reading: any instance
    assert "newer than the kube-apiserver it calls (1.34)" in found


def test_a_kubelet_four_minors_older_breaks_it_and_three_does_not():
    apis = ("v1.35.0",) * 3
    assert skew_violations(reading(apis=apis, kubelets={"w1": "v1.32.0"})) == []
    [found] = skew_violations(reading(apis=apis, kubelets={"w1": "v1.31.0"}))
    assert "more than three minors older" in found


def test_kube_proxy_is_held_to_the_kubelet_rules_and_to_its_node():
    [found] = skew_violations(reading(proxies={"w1": "v1.35.4"}))
    assert found.startswith("kube-proxy on w1: 1.35 is newer")


def test_a_controller_manager_is_judged_against_the_api_server_it_calls():
    # Newer than its own API server: broken; calling the newer one: within the policy.
    [found] = skew_violations(reading(kcm={"cp2": "v1.35.4"}, talks_to={"kube-controller-manager/cp2": "cp2"}))
    assert "newer than the kube-apiserver it calls (1.34)" in found
    assert skew_violations(reading(kcm={"cp2": "v1.35.4"}, talks_to={"kube-controller-manager/cp2": "cp1"})) == []


def test_without_knowing_which_it_calls_a_component_is_judged_against_every_api_server():
    [found] = skew_violations(reading(kcm={"cp1": "v1.35.4"}))
    assert "newer than the kube-apiserver it calls (1.34)" in found


def test_a_controller_manager_two_minors_older_breaks_it():
    [found] = skew_violations(reading(apis=("v1.35.0",) * 3, kcm={"cp1": "v1.33.0"}))
    assert "more than one minor older" in found


def test_components_that_did_not_answer_are_not_judged():
    assert skew_violations(reading(apis=(None, None, None), kubelets={"w1": "v1.40.0"})) == []
    assert skew_violations(reading(apis=("v1.34.4", None, None), kubelets={"w1": None})) == []


def test_two_minors_side_by_side_are_timed_from_reading_to_reading():
    one, two = ("v1.34.4",) * 3, ("v1.35.4", "v1.34.4", "v1.34.4")
    readings = [reading(apis=one, t=0), reading(apis=two, t=10), reading(apis=two, t=12), reading(apis=one, t=20)]
    assert mixed_apiserver_seconds(readings) == 10.0
    assert mixed_apiserver_seconds(readings[:1]) == 0.0


def test_the_pods_a_drain_evicted_are_read_from_its_output():
    output = ("node/w1 cordoned\nevicting pod ns/web-1\nerror when evicting pods/\"web-2\" -n \"ns\" (will retry after "
              "5s): Cannot evict pod as it would violate the pod's disruption budget.\npod/web-1 evicted\n"
              "pod/web-2 evicted\nnode/w1 drained\n")
    assert evicted_pods(output) == ["web-1", "web-2"]


def test_kubeadm_refusing_only_a_cgroup_v1_host_is_told_apart_from_other_refusals():
    from harness.components.upgrade import cgroup_v1_refusal

    cgroup = ("[preflight] Some fatal errors occurred:\n\t[ERROR SystemVerification]: cgroups v1 support is deprecated "
              "and will be removed in a future release.\n")
    assert cgroup_v1_refusal(cgroup) is True
    assert cgroup_v1_refusal(cgroup + "\t[ERROR FileAvailable--etc-kubernetes-kubelet.conf]: exists\n") is False
    assert cgroup_v1_refusal("\t[ERROR SystemVerification]: unsupported kernel release\n") is False
    assert cgroup_v1_refusal("[upgrade] SUCCESS!\n") is False


def test_only_a_flag_name_reaches_the_nodes_shell():
    from harness.components.upgrade import drop_kubelet_flag

    for bad in ["pod-infra-container-image; rm -rf /", "x' /etc/passwd '", "", "Flag"]:
        with pytest.raises(ValueError, match="expected lowercase letters, digits and '-'"):
            drop_kubelet_flag(None, "node", bad)
