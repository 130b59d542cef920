"""The node agent's pure parts: its pod, what each node channel gives, and which built-in drills a
cluster reached through the node agent runs or skips (and why). Its exec is tested on a real cluster
(tests/cluster/test_node_agent_cluster.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from stand_ins import Nothing, OnNodes

from harness.core import resources
from harness.kube.providers import Cluster, NoNodeAccess
from harness.kube.providers.node_agent import LIFETIME_SECONDS, NAMESPACE, pod_manifest, pod_name
from harness.spec.scenario import load_scenarios

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
    # etcd-space-quota stops a kubelet only inside a script the node runs to its end, kubelet start
    # included; etcd-member-loss holds its kubelets' start on the nodes, set before the stop;
    # etcd-backup-restore holds its whole loss and restore there; etcd-slow-disk writes a cgroup file;
    # serviceaccount-token-outage is control-plane-stop's components method, and reads a worker's
    # kubelet journal only after the return.
    assert runs == {"leader-failover", "etcd-defrag", "secrets-at-rest", "etcd-space-quota", "etcd-member-loss",
                    "etcd-backup-restore", "etcd-slow-disk", "serviceaccount-token-outage"}
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

    from harness.components.topology import Topology
    from harness.core.ledger import Ledger
    from harness.evidence.records import EvidenceWriter
    from harness.plugin.drill import Drill
    from harness.scaffolding.drill_cluster import DrillCluster
    from harness.spec.scenario import find_scenario

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
    import harness.kube.providers.existing as existing
    import harness.kube.providers.kind as kind
    from harness.cli.recover import cluster_for_entry
    from harness.core.ledger import Ledger
    from harness.faults import recover
    from harness.scaffolding.node_agent import NodeAgentPods

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


def test_recover_waits_for_a_node_agent_clusters_api_once_and_keeps_its_entries_while_it_is_silent(
        tmp_path, monkeypatch, capsys):
    # CI 2026-12-05: the control plane was back on its nodes, but the load balancer in front of it
    # cut TLS until its health checks passed; recover listed the nodes at once, failed every entry
    # and left the drill's namespaces behind. It now waits (api_silence), once per cluster.
    import argparse

    import harness.faults as faults
    import harness.kube.providers.existing as existing
    import harness.kube.providers.node_agent as node_agent
    from harness.cli import cmd_recover
    from harness.core.ledger import Ledger
    from harness.scaffolding.node_agent import NodeAgentPods

    asked = []
    monkeypatch.setattr(existing, "existing_cluster", lambda kubeconfig, context: cluster(""))
    monkeypatch.setattr(faults, "api_silence", lambda c, seconds=None: asked.append(c) or "no answer in 60 s; last: EOF")
    monkeypatch.setattr(node_agent, "nodes_by_role", lambda c: pytest.fail("the nodes were listed on a silent API"))
    monkeypatch.setattr(faults, "fault_class", lambda k: NodeAgentPods)
    ledger = Ledger(tmp_path / "ledger")
    where = {"provider": "existing", "kubeconfig": "/k", "context": "ctx", "node_channel": "agent"}
    ids = [ledger.record("node-agent", cluster=where, target={"namespace": f"n{i}"}).id for i in range(3)]
    assert cmd_recover(argparse.Namespace(ledger_dir=str(tmp_path / "ledger"), force=False, context=None, kubeconfig=None)) == 1
    out = capsys.readouterr().out
    assert out.count("NOT REVERTED") == 3 and "API server of context ctx does not answer (no answer in 60 s" in out
    assert len(asked) == 1, "asked once per cluster, not once per entry"
    assert sorted(e.id for e in ledger.entries()) == sorted(ids)


def test_recovers_retry_pass_looks_a_cluster_up_again(tmp_path, monkeypatch, capsys):
    # The node-agent entry's first lookup meets a silent API (its load balancer warming up); an
    # API-only entry for the same context is then reverted, and the retry must ask again, not
    # replay the first answer.
    import argparse

    import harness.faults as faults
    import harness.kube.providers.existing as existing
    import harness.kube.providers.node_agent as node_agent
    from harness.cli import cmd_recover
    from harness.core.ledger import Ledger

    asked = []

    def api_silence(c, seconds=None):
        asked.append(c)
        return "no answer in 60 s; last: EOF" if len(asked) == 1 else None

    monkeypatch.setattr(existing, "existing_cluster", lambda kubeconfig, context: cluster(""))
    monkeypatch.setattr(faults, "api_silence", api_silence)
    monkeypatch.setattr(node_agent, "nodes_by_role", lambda c: {"control-plane": ["cp1"], "worker": []})
    monkeypatch.setattr(faults, "fault_class", lambda k: {"on-nodes": OnNodes, "api-only": Nothing}[k])
    ledger = Ledger(tmp_path / "ledger")
    api_only = {"provider": "existing", "kubeconfig": "/k", "context": "ctx"}
    ledger.record("api-only", cluster=api_only, target={})
    ledger.record("on-nodes", cluster={**api_only, "node_channel": "agent"}, target={})
    assert cmd_recover(argparse.Namespace(ledger_dir=str(tmp_path / "ledger"), force=False, context=None, kubeconfig=None)) == 0
    out = capsys.readouterr().out
    assert "first try: ProviderError: the API server of context ctx does not answer" in out
    assert "the retry succeeded" in out and ledger.entries() == []


def test_a_well_formed_entry_cluster_has_no_problem():
    from harness.cli.recover import entry_cluster_problem

    assert entry_cluster_problem({"provider": "kind", "name": "kdrill-ha", "kubeconfig": "/k", "context": "kind-x",
                                  "node_access": True}) is None
    assert entry_cluster_problem({"provider": "existing", "name": "c", "kubeconfig": "/k", "context": "c",
                                  "node_access": True, "node_channel": "agent"}) is None
    assert entry_cluster_problem({"provider": "existing", "kubeconfig": "/k", "context": "c"}) is None


def test_the_plan_names_the_node_access_levels_each_drill_needs(tmp_path) -> None:
    from harness.cli.plan import plan

    scenarios = {s.name: s for s in load_scenarios(resources.scenarios_dir())}
    text, _ = plan([scenarios["control-plane-stop"], scenarios["etcd-defrag"], scenarios["pod-delete"],
                    scenarios["etcd-backup-restore"]], tmp_path, "x")
    assert "[exec]" in text.split("etcd-backup-restore:")[1].split("\n\n")[0]
    # Per case: control-plane-stop's components case needs exec only, its node-loss case the engine.
    components = text.split("control-plane-stop[components]:")[1].split("control-plane-stop[node-loss]:")[0]
    node_loss = text.split("control-plane-stop[node-loss]:")[1].split("\n\n")[0]
    assert "[exec]" in components and "[container]" not in components, components
    assert "the API and node access: container" in node_loss, node_loss
    assert "the API and node access: exec (" in text and "[exec]" in text
    assert "the API only" in text


def test_a_read_only_exec_whose_handshake_is_never_answered_is_given_up(monkeypatch):
    # An API server whose etcd member is down holds the exec handshake until the member returns
    # (19.3 s seen); the client library sets no timeout on it.
    import socket
    import time

    from kubernetes import client

    from harness.kube import pod_exec

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # the kernel accepts; nothing ever answers
    port = silent.getsockname()[1]

    class Cluster:
        def new_api(self):
            configuration = client.Configuration()
            configuration.host = f"http://127.0.0.1:{port}"
            return client.ApiClient(configuration)

    monkeypatch.setattr(pod_exec, "READ_ONLY_CONNECT_SECONDS", 0.5)
    started = time.monotonic()
    try:
        with pytest.raises(pod_exec.PodExecError, match="not set up within 0.5 s"):
            pod_exec.run(Cluster(), "ns", "pod", ["true"], timeout_seconds=60, read_only=True)
    finally:
        silent.close()
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("there_before", [False, True])
def test_recover_removes_a_node_agent_it_started_itself_and_only_that(tmp_path, monkeypatch, capsys, there_before):
    # 2026-12-05: a drill's revert through the agent failed after its session had removed the
    # agent; recover made the agent anew to revert it, and its privileged namespace stayed (no
    # ledger entry held it). One another kdrill made (there before) is that kdrill's to remove.
    import argparse

    from kubernetes.client.exceptions import ApiException

    import harness.faults as faults
    import harness.kube.providers.existing as existing
    import harness.kube.providers.node_agent as node_agent
    from harness.cli import cmd_recover
    from harness.core.ledger import Ledger

    class Api:
        def __init__(self):
            self.namespaces = {NAMESPACE} if there_before else set()

        def create_namespace(self, body, _request_timeout=None):
            if body["metadata"]["name"] in self.namespaces:
                raise ApiException(status=409)
            self.namespaces.add(body["metadata"]["name"])

        def delete_namespace(self, name, grace_period_seconds=None, _request_timeout=None):
            self.namespaces.discard(name)

        def read_namespace(self, name, _request_timeout=None):
            if name not in self.namespaces:
                raise ApiException(status=404)

    api = Api()

    class MakesAgent(OnNodes):
        def revert(self):
            self.cluster.node_agent.ensure_namespace()  # as a command through the agent would

    class ApiCluster(Cluster):
        @property
        def core(self):
            return api

    def reached(kubeconfig, context):
        return ApiCluster(name="c", provider="existing", kubeconfig=Path("/nonexistent"), context="ctx",
                          node_access=False)

    monkeypatch.setattr(existing, "existing_cluster", reached)
    monkeypatch.setattr(faults, "api_silence", lambda c, seconds=None: None)
    monkeypatch.setattr(node_agent, "nodes_by_role", lambda c: {"control-plane": ["cp1"], "worker": []})
    monkeypatch.setattr(faults, "fault_class", lambda k: MakesAgent)
    ledger = Ledger(tmp_path / "ledger")
    ledger.record("on-nodes", cluster={"provider": "existing", "kubeconfig": "/k", "context": "ctx",
                                       "node_channel": "agent"}, target={})
    assert cmd_recover(argparse.Namespace(ledger_dir=str(tmp_path / "ledger"), force=False, context=None, kubeconfig=None)) == 0
    out = capsys.readouterr().out
    assert (NAMESPACE in api.namespaces) is there_before
    assert ("removed  the node agent kdrill recover started" in out) is not there_before


@pytest.mark.parametrize("answer, kept", [("silent", True), (404, False), ("Running", True), ("Failed", False)])
def test_after_a_failed_exec_the_agent_pod_is_looked_up_again_only_when_the_api_says_it_is_gone(monkeypatch, answer,
                                                                                               kept):
    # An exec that fails while the API is down (a control-plane drill) must not send the next one
    # through ensure()'s creation requests, which wait out their timeouts (about 14 s seen); a pod
    # the API says is gone or ended is made again.
    import json
    import socket
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from kubernetes import client

    from harness.kube import pod_exec
    from harness.kube.providers import ProviderError, node_agent
    from harness.kube.providers.node_agent import NodeAgent

    class Api(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the handler's name
            assert self.path.startswith(f"/api/v1/namespaces/{NAMESPACE}/pods/"), self.path
            if answer == 404:
                body, status = {"kind": "Status", "code": 404, "reason": "NotFound"}, 404
            else:
                state = {"running": {}} if answer == "Running" else {"terminated": {"reason": "Error", "exitCode": 1}}
                body, status = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p"},
                                "status": {"phase": answer, "containerStatuses": [
                                    {"name": "agent", "image": "i", "imageID": "", "ready": answer == "Running",
                                     "restartCount": 0, "state": state}]}}, 200
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    if answer == "silent":
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen()  # the kernel accepts; nothing ever answers
        port, close = server.getsockname()[1], server.close
    else:
        http = HTTPServer(("127.0.0.1", 0), Api)
        threading.Thread(target=http.serve_forever, daemon=True).start()
        port, close = http.server_address[1], http.shutdown

    class Cluster:
        def new_api(self):
            configuration = client.Configuration()
            configuration.host = f"http://127.0.0.1:{port}"
            configuration.retries = False
            return client.ApiClient(configuration)

    def refused(*args, **kwargs):
        raise pod_exec.PodExecError("exec in kdrill-node-agent/p not possible: connection refused")

    monkeypatch.setattr(pod_exec, "run", refused)
    monkeypatch.setattr(node_agent, "STILL_RUNNING_READ_SECONDS", 0.5)
    agent = NodeAgent(Cluster(), "toolbox", "Never")
    agent._ready.add("node-a")  # its pod ran until now
    started = time.monotonic()
    try:
        with pytest.raises(ProviderError, match="connection refused"):
            agent.exec("node-a", ["true"])
    finally:
        close()
    assert ("node-a" in agent._ready) is kept
    assert time.monotonic() - started < 5
