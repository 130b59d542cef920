"""etcd-member through the node agent, checked without a cluster against simulated nodes (a fake
wall_clock, timers that fire at their due time, a stop unit that records when it ran and how it ended,
commands that arrive late or never). The real run is in tests/cluster/test_node_agent_cluster.py."""

from __future__ import annotations

import re
import subprocess

import pytest

from harness.faults.etcd_member import STOP_TOO_LATE, EtcdMember
from harness.kube.providers import ProviderError


class SimNodes:
    """Agent-channel nodes with a little systemd: timers fire at (arrival + lead); the stop unit
    records when it ran and its exit status; ``slow`` delays (fake seconds) a command before it
    reaches the node; ``refuse`` makes an exec impossible (nothing runs)."""

    node_channel = "agent"

    def __init__(self, clock, offsets=None, slow=None, refuse=None, stop_rc=0):
        self.clock, self.offsets = clock, offsets or {}
        self.slow, self.refuse, self.stop_rc = slow or {}, refuse or set(), stop_rc
        self.timers: dict[tuple[str, str], float] = {}  # (node, unit) -> due (host time)
        self.records: dict[tuple[str, str], float] = {}  # (node, unit) -> .at (node time)
        self.rc: dict[tuple[str, str], str] = {}
        self.stops: list[tuple[str, float, str]] = []  # node, arrival, script
        self.sent: list[tuple[str, list[str]]] = []
        self.name = "fake"

    def require_node_access(self, why, level="exec"):
        return None

    def describe(self):
        return {"name": self.name, "provider": "existing", "node_channel": "agent"}

    def node_exec(self, node, command, timeout_seconds=60, check=True, stdin=None, read_only=False):
        text = " ".join(command)
        for key, delay in self.slow.items():
            if key(node, text):
                self.clock[0] += delay
        self.clock[0] += 0.3
        now = self.clock[0]
        for key in self.refuse:
            if key(node, text):
                raise ProviderError(f"node agent on {node}: exec in kdrill/agent not possible: ApiException")
        self.sent.append((node, command))
        ok = subprocess.CompletedProcess(command, 0, "", "")
        if command[:1] == ["date"]:
            return subprocess.CompletedProcess(command, 0, f"{now + self.offsets.get(node, 0.0):.6f}\n", "")
        if command[0] == "systemd-run":
            unit = next(a for a in command if a.startswith("--unit=")).split("=", 1)[1]
            lead = next((a for a in command if a.startswith("--on-active=")), None)
            if lead:
                self.timers[(node, unit)] = now + float(lead.split("=")[1].rstrip("s"))
                return ok
            self.stops.append((node, now, command[-1]))
            self.records[(node, unit)] = now + self.offsets.get(node, 0.0)
            self.rc[(node, unit)] = str(self.stop_rc)
            return subprocess.CompletedProcess(command, -1, "", "")  # cut by its own kubelet stop
        if command[:3] == ["systemctl", "is-active", "kubelet"]:
            return subprocess.CompletedProcess(command, 0, "active\n", "")
        m = re.search(r"cat /run/kdrill-units/(kdrill-[a-z0-9-]+)\.(at|rc)", text)
        if m:
            unit, ext = m.groups()
            if ext == "at":
                t = self.records.get((node, unit))
                return subprocess.CompletedProcess(command, 0, f"{t:.6f}\n" if t else "", "")
            return subprocess.CompletedProcess(command, 0, self.rc.get((node, unit), ""), "")
        if "crictl ps" in text:
            return subprocess.CompletedProcess(command, 0, "etcd-cid\n", "")
        if "endpoint health" in text:
            return subprocess.CompletedProcess(command, 0, '[{"health": true}]', "")
        return ok



def _cycle(nodes, fault, wall_clock):
    fault.injected_at = wall_clock[0]
    fault.inject()
    wall_clock[0] = max(wall_clock[0], fault.units["start_at"] + 1)  # the timers have fired
    fault.revert()
    fault.reverted_at = wall_clock[0]
    fault.verify_reverted()


def test_a_stop_that_ran_is_a_window_on_the_nodes_own_record(wall_clock) -> None:
    nodes = SimNodes(wall_clock, offsets={"cp2": 2.0})
    fault = EtcdMember(nodes, ["cp1", "cp2"], hold_seconds=30)
    nodes.offsets = {}  # measured 0 at inject here; the records below are on the host's clock
    _cycle(nodes, fault, wall_clock)
    assert fault.window_not_made() == {}
    assert fault.window_started_at == max(fault.stopped_at.values()) > fault.injected_at
    assert set(fault.kubelet_started_at) == {"cp1", "cp2"} and fault.restarted_at >= fault.units["start_at"]


@pytest.mark.parametrize("how, why", [
    ("exec not possible", "never ran"),
    ("stop exited 1", "ended with 1"),
    ("too late", "after the kubelet's start was due"),
])
def test_a_stop_that_never_ran_failed_or_came_too_late_is_no_window(wall_clock, how, why) -> None:
    if how == "exec not possible":
        nodes = SimNodes(wall_clock, refuse={lambda n, t: n == "cp2" and "-stop" in t and "systemd-run" in t})
    else:
        nodes = SimNodes(wall_clock, stop_rc=1 if how == "stop exited 1" else STOP_TOO_LATE)
    fault = EtcdMember(nodes, ["cp1", "cp2"], hold_seconds=30)
    _cycle(nodes, fault, wall_clock)
    missing = fault.window_not_made()
    assert "cp2" in missing and why in missing["cp2"], missing


def test_every_stop_checks_its_nodes_start_is_still_to_come(wall_clock) -> None:
    # A stop that reaches its node after the node's start fired would stop the kubelet for good.
    nodes = SimNodes(wall_clock, slow={lambda n, t: n == "cp2" and "-stop" in t and "systemd-run" in t: 15.0})
    fault = EtcdMember(nodes, ["cp1", "cp2"], hold_seconds=11)
    fault.injected_at = wall_clock[0]
    fault.inject()
    start = fault.units["start"]
    for node, arrived, script in nodes.stops:
        guard = script[script.index("( ") + 2:script.index("systemctl stop kubelet")]
        assert f"/run/kdrill-units/{start}.at" in guard and f"is-active -q {start}.timer" in guard
        assert f"exit {STOP_TOO_LATE}" in guard


@pytest.mark.parametrize("start_fires_during_the_stop", [False, True])
def test_a_start_that_fires_between_the_check_and_the_stop_is_made_again(wall_clock, tmp_path,
                                                                         start_fires_during_the_stop) -> None:
    # The guard reads the start's record, then stops the kubelet: the start's timer may fire in
    # between (its record written, its kubelet start done before the stop). Run as the node would.
    nodes = SimNodes(wall_clock)
    fault = EtcdMember(nodes, ["cp1"], hold_seconds=30)
    fault.injected_at = wall_clock[0]
    fault.inject()
    script = nodes.stops[0][2].replace("/run/kdrill-units", str(tmp_path / "run"))
    fires = f"touch {tmp_path}/run/{fault.units['start']}.at" if start_fires_during_the_stop else "true"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in {"systemctl": f'echo "systemctl $*" >> {tmp_path}/log; '
                                    f'case "$*" in "stop kubelet") {fires};; esac; exit 0',
                       "crictl": "true"}.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    rc = subprocess.run(["sh", "-c", script], env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=20).returncode
    calls = (tmp_path / "log").read_text().splitlines()
    if start_fires_during_the_stop:
        assert rc == STOP_TOO_LATE and calls[-1] == "systemctl start kubelet", calls
    else:
        assert rc == 0 and calls[-1] == "systemctl stop kubelet", calls


def test_a_stop_is_not_sent_when_its_node_would_start_again_at_once(wall_clock) -> None:
    from harness.faults import FaultError

    nodes = SimNodes(wall_clock, slow={lambda n, t: n == "cp2" and "-start" in t: 27.0})
    fault = EtcdMember(nodes, ["cp1", "cp2"], hold_seconds=30)
    fault.injected_at = wall_clock[0]
    with pytest.raises(FaultError, match="would come less than"):
        fault.inject()
    assert nodes.stops == []


def test_the_restore_journal_is_asked_on_the_nodes_clock(wall_clock) -> None:
    nodes = SimNodes(wall_clock, offsets={"cp1": 30.0})
    fault = EtcdMember(nodes, ["cp1"], hold_seconds=30)
    _cycle(nodes, fault, wall_clock)
    since = fault.kubelet_started_at["cp1"]
    asked = next(" ".join(c) for _, c in nodes.sent if "journalctl" in " ".join(c))
    assert f"--since @{since - 1 + fault.units['clock_offsets']['cp1']:.0f}" in asked, asked


def test_an_etcdctl_answer_that_leaves_an_endpoint_out_is_no_health_count() -> None:
    # A cut exec gives no output: every endpoint read as unhealthy once, a count no member gave.
    from harness.components import etcd

    endpoints = ["https://a:2379", "https://b:2379", "https://c:2379"]

    class Answer(SimNodes):
        def __init__(self, stdout, code=0):
            super().__init__([0.0])
            self.stdout, self.code = stdout, code

        def node_exec(self, node, command, timeout_seconds=60, check=True, stdin=None, read_only=False):
            if "endpoint" in command:
                return subprocess.CompletedProcess(command, self.code, self.stdout, "cut")
            return subprocess.CompletedProcess(command, 0, "etcd-cid\n", "")

    two_of_three = '[{"endpoint": "https://a:2379", "health": true}, {"endpoint": "https://b:2379", "health": true},' \
                   ' {"endpoint": "https://c:2379", "health": false}]'
    assert etcd.endpoint_health(Answer(two_of_three, 1), "cp1", endpoints) == {
        "https://a:2379": True, "https://b:2379": True, "https://c:2379": False}
    with pytest.raises(ProviderError, match="answered for 0 of 3 endpoints"):
        etcd.endpoint_health(Answer("", -1), "cp1", endpoints)
    with pytest.raises(ProviderError, match="answered for 1 of 3"):
        etcd.endpoint_health(Answer('[{"endpoint": "https://a:2379", "health": true}]'), "cp1", endpoints)
