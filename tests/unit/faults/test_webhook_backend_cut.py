"""webhook-backend-down's cut of kube-apiserver's open connections to the backend's old pods
(harness/faults/webhook_backend_down.py) and the node's connection table and sockets it reads
(harness/components/conntrack.py). Pure logic: node commands are answered by a stand-in; the
blast-radius drill does it on a cluster."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

import pytest

from harness.components import conntrack
from harness.faults import webhook_backend_down as module
from harness.faults.webhook_backend_down import WebhookBackendDown

VIP = "10.96.245.91"
NODE_IP = "172.18.0.7"


def flow(sport: int, backend: str, client: str = NODE_IP, vip: str = VIP, extra: str = "") -> str:
    return (f"tcp      6 86399 ESTABLISHED src={client} dst={vip} sport={sport} dport=443 {extra}src={backend} "
            f"dst={client} sport=8443 dport=24563 [ASSURED] mark=0 use=1\n")


LISTED = flow(34044, "10.244.3.2") + flow(34054, "10.244.5.3") + (
    # another Service's flow, which only a loose filter would let through
    f"tcp      6 86399 ESTABLISHED src={NODE_IP} dst=10.96.0.1 sport=1111 dport=443 src=172.18.0.5 "
    f"dst={NODE_IP} sport=6443 dport=1111 [ASSURED] mark=0 use=1\n")


def socket_line(port: int, address: str = NODE_IP) -> str:
    return f"ESTAB 0      0      {address}:{port} {VIP}:443\n"


class Nodes:
    """node_exec answered by ``answer(node, argv)``; every call kept; a clock that moves only when
    the fault sleeps (installed by the ``clock`` fixture)."""

    def __init__(self, answer, access=True, control_plane=("cp1", "cp2")):
        self.answer, self.calls = answer, []
        self.access = access
        self.nodes_by_role = {"control-plane": list(control_plane), "worker": ["w1"]}

    def node_access_gives(self, level):
        return self.access

    def node_exec(self, node, command, timeout_seconds=60, check=True, stdin=None, read_only=False):
        self.calls.append((node, list(command)))
        return subprocess.CompletedProcess(command, 0, stdout=self.answer(node, command), stderr="")


def killed(argv) -> str:
    """What ss -K prints: one line per socket it destroyed, here every one its filter names."""
    return "".join(f"ESTAB {a}\n" for a in argv if a.startswith(f"{NODE_IP}:"))


@pytest.fixture
def clock(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(module.time, "sleep", lambda seconds: now.__setitem__(0, now[0] + seconds))
    return now


def test_flows_are_read_with_their_backend_pod_whatever_fields_sit_between():
    text = LISTED + flow(40000, "10.244.3.3", extra="packets=4 bytes=560 zone-orig=1 ")
    nodes = Nodes(lambda node, argv: text)
    flows = conntrack.flows_through(nodes, "cp1", VIP, 443)
    assert flows == [conntrack.Flow(NODE_IP, 34044, "10.244.3.2"), conntrack.Flow(NODE_IP, 34054, "10.244.5.3"),
                     conntrack.Flow(NODE_IP, 40000, "10.244.3.3")]
    (_, argv), = nodes.calls
    assert argv[:3] == ["conntrack", "-L", "-p"] and "ESTABLISHED" in argv and VIP in argv


def test_a_line_conntrack_prints_that_cannot_be_read_is_an_error_not_no_connection():
    nodes = Nodes(lambda node, argv: "tcp 6 86399 ESTABLISHED something new\n")
    with pytest.raises(ValueError, match="without an original and a reply tuple"):
        conntrack.flows_through(nodes, "cp1", VIP, 443)


def test_host_sockets_are_the_nodes_own_connections_to_the_service():
    nodes = Nodes(lambda node, argv: socket_line(34044) + socket_line(34054) + "garbage\n")
    assert conntrack.host_sockets(nodes, "cp1", VIP, 443) == {(NODE_IP, 34044), (NODE_IP, 34054)}
    v6 = Nodes(lambda node, argv: "ESTAB 0 0 [fd00::5]:34044 [fd00:10:96::a1]:443\n")
    assert conntrack.host_sockets(v6, "cp1", "fd00:10:96::a1", 443) == {("fd00::5", 34044)}
    assert v6.calls[0][1][3] == "[fd00:10:96::a1]"  # ss reads an IPv6 address in brackets only


def test_a_cut_names_every_socket_and_counts_what_ss_destroyed():
    nodes = Nodes(lambda node, argv: socket_line(34044))
    assert conntrack.cut(nodes, "cp1", VIP, 443, [(NODE_IP, 34054), (NODE_IP, 34044)]) == 1
    (_, argv), = nodes.calls
    assert argv[:5] == ["ss", "-K", "-tnH", "dst", VIP]
    assert argv[5:] == ["dport", "=", ":443", "(", "src", f"{NODE_IP}:34044", "or", "src", f"{NODE_IP}:34054", ")"]
    assert conntrack.cut(nodes, "cp1", VIP, 443, []) == 0 and len(nodes.calls) == 1  # nothing to cut: no command
    v6 = Nodes(lambda node, argv: "")
    conntrack.cut(v6, "cp1", "fd00:10:96::a1", 443, [("fd00::5", 34044)])
    assert v6.calls[0][1][4] == "[fd00:10:96::a1]" and "[fd00::5]:34044" in v6.calls[0][1]


def test_connections_to_old_pods_are_cut_until_kube_proxy_has_had_time_and_a_round_finds_none(clock):
    # cp1: found in round 1, none in round 2 (no call came), then a reconnection that kube-proxy
    # still sent to an old pod in round 3: the cut must still be going on then.
    rounds = {"cp1": [LISTED, "", flow(35000, "10.244.3.2"), ""], "cp2": [""]}

    def answer(node, argv):
        if argv[0] == "conntrack":
            return rounds[node].pop(0) if len(rounds[node]) > 1 else rounds[node][0]
        if "-K" in argv:
            return killed(argv)
        return socket_line(34044) + socket_line(34054) + socket_line(35000)
    nodes = Nodes(answer)
    got = WebhookBackendDown(nodes, "gatekeeper-system", "gatekeeper-webhook-service")._cut(
        VIP, [443], {"10.244.3.2", "10.244.5.3"})
    assert got["cut"] == {"cp1": 3, "cp2": 0}
    assert got["last_found_seconds"] == 1.0 and got["rounds"] >= 7 and "why" not in got
    assert clock[0] >= module.CUT_SETTLE_SECONDS
    assert all(node != "w1" for node, _ in nodes.calls)  # kube-apiserver's nodes only


def test_a_pods_connection_through_the_node_is_not_taken_for_kube_apiservers(clock):
    pod_flow = flow(40000, "10.244.3.2", client="10.244.0.5")  # a pod on the control-plane node

    def answer(node, argv):
        if argv[0] == "conntrack":
            return pod_flow
        assert "-K" not in argv, "nothing of the node's own to cut"
        return ""  # no host socket to the Service
    got = WebhookBackendDown(Nodes(answer, control_plane=("cp1",)), "ns", "svc")._cut(VIP, [443], {"10.244.3.2"})
    assert got["cut"] == {"cp1": 0} and "why" not in got and got["last_found_seconds"] is None


def test_the_black_hole_pods_connections_are_kept(clock):
    def answer(node, argv):
        assert "-K" not in argv
        return LISTED if argv[0] == "conntrack" else socket_line(34044) + socket_line(34054)
    nodes = Nodes(answer)
    got = WebhookBackendDown(nodes, "ns", "svc", reroute_to={"app": "blackhole"})._cut(VIP, [443], {"10.244.9.9"})
    assert got["cut"] == {"cp1": 0, "cp2": 0} and "why" not in got


def test_connections_still_there_at_the_deadline_are_said(clock):
    def answer(node, argv):
        return LISTED if argv[0] == "conntrack" else "" if "-K" in argv else socket_line(34044)
    got = WebhookBackendDown(Nodes(answer, control_plane=("cp1",)), "ns", "svc")._cut(VIP, [443], {"10.244.3.2"})
    assert "still found after 10 s" in got["why"] and got["cut"] == {"cp1": 0}
    assert clock[0] >= module.CUT_DEADLINE_SECONDS


@pytest.mark.parametrize("access, control_plane, vip, why", [
    (False, ("cp1",), VIP, "no node access"),
    (True, (), VIP, "no control-plane node known"),
    (True, ("cp1",), "None", "the Service has no ClusterIP"),
])
def test_without_a_way_to_the_nodes_nothing_is_cut_and_the_record_says_why(access, control_plane, vip, why):
    nodes = Nodes(lambda node, argv: pytest.fail("no node command without node access"), access=access,
                  control_plane=control_plane)
    got = WebhookBackendDown(nodes, "ns", "svc")._cut(vip, [443], {"10.244.3.2"})
    assert got["cut"] is None and got["why"].startswith(why) and "may go on answering" in got["why"]


def test_a_failing_node_command_is_recorded_not_raised(clock):
    def answer(node, argv):
        raise subprocess.TimeoutExpired(argv, 15)
    got = WebhookBackendDown(Nodes(answer), "ns", "svc")._cut(VIP, [443], {"10.244.3.2"})
    assert got["why"].startswith("cutting stopped:") and got["cut"] == {"cp1": 0, "cp2": 0}


def test_only_the_services_tcp_ports_are_looked_at(monkeypatch):
    service = SimpleNamespace(spec=SimpleNamespace(cluster_ip=VIP, ports=[
        SimpleNamespace(port=53, protocol="UDP"), SimpleNamespace(port=53, protocol="TCP"),
        SimpleNamespace(port=443, protocol=None)]))
    fault = WebhookBackendDown(SimpleNamespace(core=SimpleNamespace(
        read_namespaced_service=lambda name, ns, **kw: service)), "ns", "svc")
    seen = {}
    monkeypatch.setattr(module, "endpoint_addresses", lambda cluster, ns, name: {"10.244.3.2"})
    monkeypatch.setattr(module.ServiceBlackhole, "inject", lambda self: None)
    monkeypatch.setattr(WebhookBackendDown, "_cut", lambda self, ip, ports, backends: seen.update(ports=ports) or {})
    fault.inject()
    assert seen["ports"] == [53, 443]


def test_the_cut_is_in_the_evidence():
    fault = WebhookBackendDown(SimpleNamespace(), "ns", "svc")
    fault.connections_cut = {"cut": {"cp1": 2}, "backends": ["10.244.3.2"]}
    assert fault.evidence()["connections_cut"] == {"cut": {"cp1": 2}, "backends": ["10.244.3.2"]}
