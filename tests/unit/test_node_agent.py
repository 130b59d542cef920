"""The node agent's pure parts: its pod, what each node channel gives, and which built-in drills a
cluster reached through the node agent runs or skips (and why). Its exec is tested on a real cluster
(tests/cluster/test_node_agent_cluster.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness import resources
from harness.providers import Cluster, NoNodeAccess
from harness.providers.node_agent import LIFETIME_SECONDS, NAMESPACE, pod_manifest, pod_name
from harness.scenario import load_scenarios

DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def cluster(channel: str) -> Cluster:
    c = Cluster(name="c", provider="existing" if channel != "docker" else "kind", kubeconfig=Path("/nonexistent"),
                context="c", node_access=bool(channel))
    if channel == "agent":
        c.node_agent = object()
    return c


@pytest.mark.parametrize("node", ["kdrill-ha-control-plane", "ip-10-0-1-23.eu-west-1.compute.internal",
                                  "Node_With.Odd_CHARS", "x" * 253, "---"])
def test_the_agent_pod_name_is_valid_unique_per_node_and_bounded(node: str) -> None:
    name = pod_name(node)
    assert DNS_1123_SUBDOMAIN.match(name) and len(name) <= 63, name
    assert pod_name(node) == name and pod_name(node + "x") != name


def test_the_agent_pod_is_pinned_privileged_in_the_host_pid_namespace_and_ends_itself() -> None:
    pod = pod_manifest("n1", "example.org/toolbox:1", "IfNotPresent")
    spec = pod["spec"]
    assert pod["metadata"]["namespace"] == NAMESPACE
    assert spec["nodeName"] == "n1" and spec["hostPID"] is True
    assert spec["tolerations"] == [{"operator": "Exists"}]  # control-plane taints too
    assert spec["restartPolicy"] == "Never" and spec["activeDeadlineSeconds"] == LIFETIME_SECONDS
    assert spec["automountServiceAccountToken"] is False
    container = spec["containers"][0]
    assert container["image"] == "example.org/toolbox:1" and container["imagePullPolicy"] == "IfNotPresent"
    assert container["securityContext"] == {"privileged": True}


def test_each_node_channel_gives_its_levels_and_says_why_not() -> None:
    docker, agent, none = cluster("docker"), cluster("agent"), cluster("")
    assert (docker.node_channel, agent.node_channel, none.node_channel) == ("docker", "agent", "")
    for level in ("exec", "kubelet", "container"):
        docker.require_node_access("x", level)
    agent.require_node_access("x", "exec")
    for level in ("kubelet", "container"):
        with pytest.raises(NoNodeAccess, match=f"level {level!r}.*node agent"):
            agent.require_node_access("fault y", level)
    with pytest.raises(NoNodeAccess, match="--node-agent"):
        none.require_node_access("fault y", "exec")
    assert agent.describe()["node_channel"] == "agent" and "node_channel" not in docker.describe()


def test_through_the_node_agent_drills_that_stop_the_kubelet_or_need_docker_are_skipped_with_the_level() -> None:
    scenarios = {s.name: s for s in load_scenarios(resources.scenarios_dir())}
    agent, docker, none = cluster("agent"), cluster("docker"), cluster("")
    runs = {name for name, s in scenarios.items() if s.needs_node_access and not s.node_access_missing(agent)}
    # Commands on nodes whose kubelet and API server keep serving: these run through the agent.
    assert runs == {"leader-failover", "etcd-defrag", "secrets-at-rest"}
    for name in ("etcd-member-loss", "etcd-space-quota", "etcd-backup-restore"):
        assert any(m.endswith("(needs node access: kubelet)") for m in scenarios[name].node_access_missing(agent)), name
    # control-plane-stop holds its stop and its revert on the nodes as timers: its components case
    # runs through the agent; its node-loss case freezes node containers (docker pause).
    cps = scenarios["control-plane-stop"]
    assert not cps.node_access_missing(agent, "components")
    assert any(m.endswith("(needs node access: container)") for m in cps.node_access_missing(agent, "node-loss"))
    assert any(m.endswith("(needs node access: container)") for m in cps.node_access_missing(agent))  # strongest case
    for name in ("worker-node-loss", "registry-outage", "registry-outage-unresponsive", "serial-image-pull"):
        assert any(m.endswith("(needs node access: container)") for m in scenarios[name].node_access_missing(agent)), name
    for s in scenarios.values():
        assert not s.node_access_missing(docker), s.name  # kind gives everything
        assert bool(s.node_access_missing(none)) == s.needs_node_access, s.name


def test_pause_of_the_control_plane_needs_dockers_engine_even_where_the_kubelet_level_is_given() -> None:
    from harness.faults.control_plane_stop import ControlPlaneStop

    c = cluster("agent")
    c.nodes_by_role = {"control-plane": ["cp1"]}
    with pytest.raises(NoNodeAccess, match="'container'"):
        ControlPlaneStop(c, method="pause-node-containers").inject()


def test_node_agent_is_refused_without_a_cluster_reached_through_a_kubeconfig(capsys) -> None:
    from harness.cli import main

    assert main(["run", "pod-delete", "--node-agent"]) == 2
    assert "--node-agent is for a cluster reached through its kubeconfig" in capsys.readouterr().err


def test_a_cases_own_fault_that_needs_more_than_the_agent_skips_the_drill_before_touching_anything(tmp_path) -> None:
    """secrets-at-rest's case encrypted makes a kind cluster of its own (drill-cluster): through
    the node agent that case is skipped at its fault, with the level, and nothing is recorded."""
    import json

    from harness.drill import Drill
    from harness.evidence import EvidenceWriter
    from harness.faults.drill_cluster import DrillCluster
    from harness.ledger import Ledger
    from harness.scenario import find_scenario
    from harness.topology import Topology

    c = cluster("agent")
    topology = Topology(kubernetes_version="v1.35.4", control_plane=["cp1"], workers=[], kubelet_versions={})
    ledger = Ledger(tmp_path / "ledger")
    drill = Drill(find_scenario("secrets-at-rest", None), "encrypted", c, topology, ledger,
                  EvidenceWriter.for_new_run(tmp_path / "reports", "r1"), "r1")
    with pytest.raises(pytest.skip.Exception) as skipped:
        with drill.inject(DrillCluster(c, "c-enc", "secretbox")):
            raise AssertionError("injected through an agent that cannot make a kind cluster")
    assert "(needs node access: container)" in str(skipped.value) and "node agent" in str(skipped.value)
    assert ledger.entries() == []
    record = json.loads(drill.finish(skipped.value).read_text())
    assert record["verdict"] == "skipped"


@pytest.mark.parametrize("entry_cluster, field", [
    ({}, "provider"),
    ({"provider": "kube"}, "provider"),
    ({"provider": "kind"}, "name"),
    ({"provider": "kind", "name": 5}, "name"),
    ({"provider": "existing", "node_channel": "agent"}, "kubeconfig"),
    ({"provider": "existing", "kubeconfig": "", "context": "", "node_channel": "agent"}, "kubeconfig"),
    ({"provider": "existing", "kubeconfig": 5, "context": "c", "node_channel": "agent"}, "kubeconfig"),
    ({"provider": "existing", "kubeconfig": "/k", "context": ["c"], "node_channel": "agent"}, "context"),
    ({"provider": "existing", "kubeconfig": "/k", "context": "c", "node_channel": "docker"}, "node_channel"),
])
def test_recover_refuses_a_malformed_entry_cluster_before_reaching_any_cluster_and_keeps_the_entry(
        entry_cluster, field, tmp_path, monkeypatch):
    # No kubeconfig would be $KUBECONFIG's current context (another cluster: the agent's namespace
    # deleted, its nodes listed there); a kind name that is no cluster reads as gone and drops the entry.
    import harness.faults as faults
    import harness.providers.existing as existing
    import harness.providers.kind as kind
    from harness.cli import cluster_for_entry
    from harness.faults import recover
    from harness.faults.node_agent import NodeAgentPods
    from harness.ledger import Ledger

    def reached(*args, **kwargs):
        raise AssertionError("a cluster was looked for")

    monkeypatch.setattr(existing, "existing_cluster", reached)
    monkeypatch.setattr(kind.KindProvider, "exists", reached)
    monkeypatch.setattr(faults, "fault_class", lambda k: NodeAgentPods)
    ledger = Ledger(tmp_path / "ledger")
    entry = ledger.record("node-agent", cluster=entry_cluster, target={"namespace": "kdrill-node-agent"})
    [result] = recover(ledger, cluster_for_entry)
    assert not result["reverted"] and "malformed" in result["error"] and f"({field}: expected" in result["error"]
    assert [e.id for e in ledger.entries()] == [entry.id]


def test_a_well_formed_entry_cluster_has_no_problem():
    from harness.cli import entry_cluster_problem

    assert entry_cluster_problem({"provider": "kind", "name": "kdrill-ha", "kubeconfig": "/k", "context": "kind-x",
                                  "node_access": True}) is None
    assert entry_cluster_problem({"provider": "existing", "name": "c", "kubeconfig": "/k", "context": "c",
                                  "node_access": True, "node_channel": "agent"}) is None
    assert entry_cluster_problem({"provider": "existing", "kubeconfig": "/k", "context": "c"}) is None


def test_the_plan_names_the_node_access_levels_each_drill_needs(tmp_path) -> None:
    from harness.plan import plan

    scenarios = {s.name: s for s in load_scenarios(resources.scenarios_dir())}
    text, _ = plan([scenarios["control-plane-stop"], scenarios["etcd-defrag"], scenarios["pod-delete"],
                    scenarios["etcd-member-loss"]], tmp_path, "x")
    assert "the API and node access: kubelet" in text and "[kubelet]" in text
    # Per case: control-plane-stop's components case needs exec only, its node-loss case the engine.
    components = text.split("control-plane-stop[components]:")[1].split("control-plane-stop[node-loss]:")[0]
    node_loss = text.split("control-plane-stop[node-loss]:")[1].split("\n\n")[0]
    assert "[exec]" in components and "[container]" not in components, components
    assert "the API and node access: container" in node_loss, node_loss
    assert "the API and node access: exec (" in text and "[exec]" in text
    assert "the API only" in text
