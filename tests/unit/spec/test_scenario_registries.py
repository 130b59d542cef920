"""A data-only scenario's own registries (``workload.registries``): what loading refuses, the
placeholders only manifests may use, the names of the containers and hosts, and the ledger data of
the registry setup and of an outage of one of them. Pure logic; whether pulls queue behind a stuck
one is measured on a real cluster by the serial-image-pull drill."""

from __future__ import annotations

import pytest
from scenario_copies import load_edited

from harness.components.registry import REGISTRY_HOST, container_name, hosts_dir, registry_host
from harness.engine.workload import declared_manifests, manifest_only_values
from harness.faults import FaultError
from harness.faults.registry_outage import RegistryOutage
from harness.probes.pods import go_duration_seconds, pulled_seconds
from harness.scaffolding.drill_registry import DrillRegistry
from harness.spec.scenario import ScenarioError


class FakeCluster:
    name = "kdrill-test"


def registries(d):
    return d["workload"]["registries"]


def pod_spec(d, i):
    return d["workload"]["manifests"][i]["spec"]["template"]["spec"]


def test_the_shipped_scenario_loads(tmp_path):
    scenario = load_edited(tmp_path, "serial-image-pull", lambda d: None)
    assert [r["name"] for r in scenario.workload["registries"]] == ["stuck", "apps"]
    assert scenario.needs_node_access and scenario.fault_kind == "registry-outage"


@pytest.mark.parametrize("edit, field, expected", [
    (lambda d: d["cluster"].update(needs_node_access=False), "cluster.needs_node_access", "true"),
    (lambda d: registries(d)[1].update(name="stuck"), "workload.registries", "each name once"),
    (lambda d: registries(d)[1].update(images=["stuck"]), "workload.registries[].images", "each name once"),
    (lambda d: registries(d)[0].update(name="Stuck"), "workload.registries[0].name", "lowercase"),
    (lambda d: registries(d)[0].update(images=[]), "workload.registries[0].images", ""),
    (lambda d: registries(d)[0].update(port=5001), "workload.registries[0].port", "no such field"),
    # An image no registry declares, or a placeholder that is not a worker's.
    (lambda d: pod_spec(d, 1)["containers"][0].update(image="$(image_other)"), "workload.manifests[1]",
     "placeholders among"),
    (lambda d: pod_spec(d, 1).update(nodeSelector={"kubernetes.io/hostname": "$(worker_0)"}),
     "workload.manifests[1]", "$(worker_<n>)"),
])
def test_bad_registries_are_refused_naming_the_field(tmp_path, edit, field, expected):
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "serial-image-pull", edit)
    assert info.value.field == field, str(info.value)
    assert expected in info.value.expected


def test_registries_are_refused_in_a_scenario_with_a_drill_file(tmp_path):
    def edit(d):
        d["workload"]["registries"] = [{"name": "x", "images": ["y"]}]
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "worker-node-loss", edit)
    assert info.value.field == "workload.registries"


def test_image_and_worker_placeholders_are_for_manifests_only(tmp_path):
    def edit(d):
        d["runner"]["probes"][1]["object"]["name"] = "$(worker_1)"
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "serial-image-pull", edit)
    assert info.value.field.startswith("runner.probes[1].object")


def test_manifests_get_workers_in_name_order_and_the_pushed_images():
    extra = manifest_only_values(["w-b", "w-a"], {"app": "kdrill-registry-apps:5000/kdrill-drill/app:r1"})
    assert extra == {"worker_1": "w-a", "worker_2": "w-b", "image_app": "kdrill-registry-apps:5000/kdrill-drill/app:r1"}
    [pod] = declared_manifests([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                 "spec": {"nodeSelector": {"kubernetes.io/hostname": "$(worker_2)"},
                                          "containers": [{"name": "c", "image": "$(image_app)"}]}}], "ns", None, extra)
    assert pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "w-b"
    assert pod["spec"]["containers"][0]["image"].endswith("/app:r1")
    assert pod["metadata"]["namespace"] == "ns"


def test_a_worker_the_cluster_does_not_have_is_an_error_before_anything_is_made():
    with pytest.raises(KeyError, match="worker_3"):
        declared_manifests([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                             "spec": {"nodeName": "$(worker_3)"}}], "ns", None, manifest_only_values(["a", "b"], {}))


def test_each_registry_has_its_own_container_and_host():
    assert container_name("kdrill-ha") == "kdrill-registry-kdrill-ha"
    assert container_name("kdrill-ha", "stuck") == "kdrill-registry-kdrill-ha-stuck"
    assert registry_host() == REGISTRY_HOST
    assert registry_host("stuck") == "kdrill-registry-stuck:5000"
    assert hosts_dir(registry_host("stuck")) == "/etc/containerd/certs.d/kdrill-registry-stuck:5000"
    for bad in ("Stuck", "a/b", "-x", ""):
        with pytest.raises(ValueError):
            registry_host(bad) if bad else container_name("kdrill-ha", "-")


def test_registry_setup_records_its_host_and_reads_old_entries_as_the_default_host():
    setup = DrillRegistry(FakeCluster(), "kdrill-registry-kdrill-test-stuck", ["n1", "n2"], registry_host("stuck"))
    target = setup.target()
    assert target["registry_host"] == "kdrill-registry-stuck:5000"
    assert DrillRegistry.from_target(FakeCluster(), target).target() == target
    old = {"container": "kdrill-registry-kdrill-test", "nodes": ["n1"]}  # written before registry_host existed
    assert DrillRegistry.from_target(FakeCluster(), old).registry_host == REGISTRY_HOST
    with pytest.raises(ValueError):
        DrillRegistry(FakeCluster(), "c", ["n1"], "../etc:5000")


def test_an_outage_of_a_scenarios_registry_names_its_container():
    fault = RegistryOutage.for_scenario(FakeCluster(), "ns", {"mode": "unresponsive", "registry": "stuck"})
    assert fault.target()["container"] == "kdrill-registry-kdrill-test-stuck"
    assert fault.target()["method"] == "registry-container-paused"
    with pytest.raises(FaultError, match="params.registry"):
        RegistryOutage.for_scenario(FakeCluster(), "ns", {"mode": "unresponsive"})


@pytest.mark.parametrize("text, seconds", [("52ms", 0.052), ("47.6s", 47.6), ("1m2.5s", 62.5), ("850µs", 0.00085),
                                           ("1h0m0s", 3600.0), ("0s", 0.0)])
def test_go_durations_in_seconds(text, seconds):
    assert go_duration_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "47.6", "1.2.3s", "5 s", "abc", "-1s"])
def test_what_is_not_a_go_duration_is_none(text):
    assert go_duration_seconds(text) is None


def test_a_kubelet_pulled_event_says_how_long_the_request_waited():
    message = ('Successfully pulled image "kdrill-registry-apps:5000/kdrill-drill/app:r1" in 52ms '
               '(47.6s including waiting). Image size: 321 bytes.')
    assert pulled_seconds(message) == {"pull_seconds": 0.052, "including_waiting_seconds": 47.6,
                                       "waiting_seconds": 47.548}
    assert pulled_seconds('Container image "kdrill/toolbox:v0.1.0" already present on machine') is None


@pytest.mark.parametrize("params, got", [({"mode": "unresponsive", "registry": "other"}, "'other'"),
                                         ({"mode": "unresponsive"}, "nothing")])
def test_the_outage_must_name_a_declared_registry_before_anything_is_made(tmp_path, params, got):
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "serial-image-pull", lambda d: d["fault"].update(params=params))
    assert info.value.field == "fault.params.registry"
    assert "one of workload.registries: stuck, apps" in info.value.expected and info.value.got == got


class AbsentRegistry:
    asked = 0

    def state(self):
        self.asked += 1
        return None

    def restore(self, *args):
        raise AssertionError("nothing to restore: the container does not exist")


def test_an_outage_of_a_container_that_does_not_exist_leaves_nothing_to_revert():
    """Recorded before inject found no container: the entry must clear (kdrill recover), not fail forever."""
    fault = RegistryOutage(FakeCluster(), "kdrill-registry-kdrill-test-other", "unresponsive")
    fault.registry = AbsentRegistry()
    fault.revert()  # AbsentRegistry.restore fails the test if a restore is attempted
    fault.verify_reverted()
    assert fault.registry.asked


def test_a_data_only_scenario_names_a_cluster_config_that_exists(tmp_path):
    from harness.cli.scenarios import check_references

    scenario = load_edited(tmp_path, "serial-image-pull", lambda d: d["cluster"].update(config="no-such-config"))
    with pytest.raises(ScenarioError) as info:
        check_references(scenario)
    assert info.value.field == "cluster.config" and "one of ha, single" in info.value.expected


def test_a_manifest_pins_a_pod_to_a_worker_without_registries_too(tmp_path):
    def edit(d):
        d["workload"]["manifests"][2]["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "$(worker_1)"}
    scenario = load_edited(tmp_path, "webhook-on-pod-delete", edit)
    assert scenario.workload["manifests"][2]["spec"]["template"]["spec"]["nodeSelector"] == \
        {"kubernetes.io/hostname": "$(worker_1)"}


# --- registry-outage: the refused case as data (scale and kill actions, a declared pod called by name)

def action(d, name):
    return next(a for a in d["runner"]["actions"] if a["name"] == name)


def test_the_refused_registry_outage_loads_with_its_image_on_the_toolbox(tmp_path):
    from harness.spec.scenario import registry_images

    scenario = load_edited(tmp_path, "registry-outage", lambda d: None)
    assert registry_images(scenario.workload["registries"][0]) == [("web", "toolbox")]
    assert registry_images({"images": ["a", {"name": "b"}]}) == [("a", "pause"), ("b", "pause")]
    assert [a["name"] for a in scenario.runner["actions"]] == ["scale-out", "scale-always", "kill"]


@pytest.mark.parametrize("edit, field, expected", [
    (lambda d: registries(d)[0].update(images=[{"name": "web", "base": "ubuntu"}]),
     "workload.registries[0].images[0]", "{name: NAME, base: pause|toolbox}"),
    # a scale acts only on a declared Deployment or StatefulSet
    (lambda d: action(d, "scale-out")["scale"].update(name="coredns", namespace="kube-system"),
     "runner.actions[0].scale", "an object made by workload.manifests"),
    (lambda d: action(d, "scale-out")["scale"].update(kind="Service"), "runner.actions[0].scale.kind",
     "Deployment or StatefulSet"),
    (lambda d: action(d, "scale-out")["scale"].update(replicas=-1), "runner.actions[0].scale.replicas", "0"),
    (lambda d: action(d, "scale-out")["scale"].pop("replicas"), "runner.actions[0].scale.replicas", "an integer"),
    # a container kill only of a declared pod (or a declared StatefulSet's), with node access
    (lambda d: action(d, "kill")["kill_container"].update(name="coredns-0"), "runner.actions[2].kill_container",
     "a Pod made by workload.manifests"),
    (lambda d: action(d, "kill")["kill_container"].update(kind="StatefulSet"),
     "runner.actions[2].kill_container.kind", "Pod"),
    (lambda d: action(d, "kill").update(delete={"kind": "Service", "name": "cached"}), "runner.actions[2]",
     "one of delete"),
    # a call by name only to a Service the manifests make
    (lambda d: d["runner"]["probes"][1]["target"].update(service="kube-dns"), "runner.probes[1].target.service",
     "a Service the manifests make in the drill's namespace: cached"),
    (lambda d: d["runner"]["probes"][1]["target"].update(port=0), "runner.probes[1].target", "name, clusterip, pod-ips, or"),
])
def test_bad_registry_outage_scenarios_are_refused(tmp_path, edit, field, expected):
    with pytest.raises(ScenarioError) as err:
        load_edited(tmp_path, "registry-outage", edit)
    assert err.value.field == field and expected in err.value.expected, err.value


def test_a_container_kill_needs_node_access(tmp_path):
    def edit(d):
        d["cluster"]["needs_node_access"] = False
        d["workload"].pop("registries")  # (which need it too, and are checked first)
        d["fault"] = {"kind": "scale-to-zero", "method": "m", "params": {"target_kind": "StatefulSet",
                                                                        "target_name": "cached"}}
        for m in d["workload"]["manifests"][1:]:
            m["spec"]["template"]["spec"]["containers"][0]["image"] = "$(toolbox_image)"
    with pytest.raises(ScenarioError) as err:
        load_edited(tmp_path, "registry-outage", edit)
    assert err.value.field == "cluster.needs_node_access" and "kill_container" in err.value.expected


def test_a_declared_service_target_is_called_by_its_fully_qualified_name():
    from harness.probes.incluster import declared_service_url

    assert declared_service_url({"service": "cached", "port": 8080, "pod": "cached-0"}, "ns") == \
        "http://cached-0.cached.ns.svc.cluster.local.:8080/"
    assert declared_service_url({"service": "web", "port": 80}, "ns") == "http://web.ns.svc.cluster.local.:80/"
