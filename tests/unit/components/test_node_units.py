"""Timers and samplers held on the nodes (harness.components.node_units), the node-side container
sampler, and control-plane-stop's use of them: the commands sent, checked without a cluster (the
real units run in tests/cluster/test_node_agent_cluster.py and the control-plane-stop drill)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from harness.components import node_units, static_pods
from harness.kube.providers import Cluster, NoNodeAccess, ProviderError


class Nodes:
    """A cluster whose node commands are recorded; ``reachable`` says which nodes answer."""

    def __init__(self, reachable: set[str] | None = None, outputs: dict[str, str] | None = None) -> None:
        self.sent: list[tuple[str, list[str]]] = []
        self.reachable = reachable
        self.outputs = outputs or {}
        self.name = "fake"
        self.nodes_by_role = {"control-plane": ["cp1", "cp2"], "worker": ["w1"]}

    def require_node_access(self, why, level="exec"):
        return None

    def describe(self):
        return {"name": self.name, "provider": "existing", "node_channel": "agent"}

    def node_exec(self, node, command, timeout_seconds=60, check=True, stdin=None, read_only=False):
        if self.reachable is not None and node not in self.reachable:
            raise ProviderError(f"node {node} not reachable")
        self.sent.append((node, command))
        if command[:1] == ["date"]:  # the node's clock: the host's
            return subprocess.CompletedProcess(command, 0, f"{time.time():.6f}\n", "")
        out = next((v for k, v in self.outputs.items() if k in " ".join(command)), "")
        return subprocess.CompletedProcess(command, 0, out, "")


def test_a_unit_is_scheduled_as_a_timer_that_records_when_it_ran() -> None:
    nodes = Nodes()
    lead = node_units.schedule(nodes, "cp1", "kdrill-x-stop", "systemctl stop kubelet", time.time() + 5, 60)
    assert 4.5 < lead <= 5
    node, command = nodes.sent[0]
    assert node == "cp1" and command[0] == "systemd-run" and "--unit=kdrill-x-stop" in command
    assert any(a.startswith("--on-active=") for a in command) and "--collect" in command
    assert "--property=RuntimeMaxSec=60" in command
    assert command[-1].startswith("mkdir -p /run/kdrill-units && date +%s.%N > /run/kdrill-units/kdrill-x-stop.at; ")
    assert command[-1].endswith("systemctl stop kubelet")


@pytest.mark.parametrize("unit", ["kubelet", "kdrill-", "kdrill-a b", "kdrill-x;rm", "KDRILL-x"])
def test_unit_names_outside_kdrills_own_are_refused(unit) -> None:
    with pytest.raises(node_units.UnitError, match="unit name must be all of"):
        node_units.schedule(Nodes(), "cp1", unit, "true", time.time() + 5, 60)


def test_a_unit_due_too_soon_is_refused_before_anything_is_sent() -> None:
    nodes = Nodes()
    with pytest.raises(node_units.UnitError, match="less than"):
        node_units.schedule(nodes, "cp1", "kdrill-late", "true", time.time() + 0.05, 60)
    assert nodes.sent == []


def test_the_sampler_script_is_bounded_and_its_lines_parse(tmp_path: Path) -> None:
    script = node_units.sampler_script("kdrill-s", "echo '{\"containers\": []}'", 0.01, 3)
    script = script.replace(node_units.STATE_DIR, str(tmp_path))
    subprocess.run(["sh", "-c", script], check=True, timeout=10)
    lines = [json.loads(line) for line in (tmp_path / "kdrill-s.jsonl").read_text().splitlines()]
    assert len(lines) == 3 and all(line["ok"] and line["out"] == {"containers": []} for line in lines)
    failing = node_units.sampler_script("kdrill-f", "false", 0.01, 2).replace(node_units.STATE_DIR, str(tmp_path))
    subprocess.run(["sh", "-c", failing], check=True, timeout=10)
    assert [json.loads(x)["ok"] for x in (tmp_path / "kdrill-f.jsonl").read_text().splitlines()] == [False, False]


def test_samples_skip_a_line_cut_short_and_pending_reads_timer_names() -> None:
    nodes = Nodes(outputs={"jsonl": '{"t": 1.5, "ok": true, "out": {}}\n{"t": 2.5, "ok": tr\n',
                           "list-timers": "Thu 2026-12-03 04:10:00 UTC 3s - - kdrill-a-start.timer kdrill-a-start.service\n"})
    assert node_units.samples(nodes, "w1", "kdrill-s") == [{"t": 1.5, "ok": True, "out": {}}]
    assert node_units.pending(nodes, "w1") == ["kdrill-a-start"]


def test_the_node_side_sampler_gives_one_sample_per_node_listing() -> None:
    from harness.probes.node_side import NodeContainerSampler
    from harness.probes.pods import running_container_ids

    listing = {"containers": [{"id": "c1", "state": "CONTAINER_RUNNING", "metadata": {"name": "http"},
                               "labels": {"io.kubernetes.pod.name": "p", "io.kubernetes.pod.uid": "u"}}]}
    line = json.dumps({"t": 10.0, "ok": True, "out": listing}) + "\n" + json.dumps({"t": 11.0, "ok": False, "out": None})
    nodes = Nodes(reachable={"w1"}, outputs={"jsonl": line})
    sampler = NodeContainerSampler("worker-containers", nodes, ["w1", "w2"], "ns", 1.0, 5)
    assert sampler.count == 6
    sampler.started_at = 1.0
    timeline = sampler.collect()
    ok, failed = timeline.samples()
    assert ok.labels == {"node": "w1"} and running_container_ids(ok) == {"c1"} and not failed.ok
    assert "w2" in sampler.errors  # a node that was not read is said, not silently empty


def _cluster() -> Cluster:
    return Cluster(name="k", provider="existing", kubeconfig=Path("/k"), context="c", node_access=True,
                   nodes_by_role={"control-plane": ["cp1", "cp2"]})


def test_control_plane_stop_sets_every_nodes_revert_before_its_stop_and_waits_for_the_stop(monkeypatch) -> None:
    from harness.faults.control_plane_stop import ControlPlaneStop

    nodes = Nodes()
    fault = ControlPlaneStop(_cluster(), hold_seconds=30)
    fault.cluster = nodes
    monkeypatch.setattr("harness.faults.control_plane_stop.SCHEDULE_LEAD_SECONDS", 0.3)
    monkeypatch.setattr("harness.faults.control_plane_stop.SECONDS_PER_COMMAND_MIN", 0.1)
    fault.inject()
    assert time.time() >= fault.units["stop_at"] == fault.injected_at
    assert fault.units["start_at"] == pytest.approx(fault.units["stop_at"] + 30)
    units = [(node, cmd) for node, cmd in nodes.sent if cmd[0] == "systemd-run"]
    order = [(node, next(a for a in cmd if a.startswith("--unit=")).split("=")[1]) for node, cmd in units]
    # Every node's start before any node's stop.
    assert order == [("cp1", fault.units["start"]), ("cp2", fault.units["start"]),
                     ("cp1", fault.units["stop"]), ("cp2", fault.units["stop"])]
    assert "systemctl stop kubelet" in units[2][1][-1] and static_pods.CRICTL_KILL in units[2][1][-1]
    assert units[0][1][-1].endswith("systemctl start kubelet")


def test_the_pause_method_keeps_the_planned_stop_the_drills_node_timers_were_set_against(monkeypatch) -> None:
    """Paused as soon as asked, seconds before the planned stop, the nodes would leave the
    workers' samplers no sample before the window, and the drill would measure nothing."""
    from harness.faults import control_plane_stop
    from harness.faults.control_plane_stop import ControlPlaneStop

    paused: list[tuple[str, float]] = []
    monkeypatch.setattr("harness.faults.control_plane_stop.pause_container",
                        lambda name: paused.append((name, time.time())) or 1)
    monkeypatch.setattr(control_plane_stop, "SCHEDULE_LEAD_SECONDS", 0.4)
    monkeypatch.setattr(control_plane_stop, "SECONDS_PER_COMMAND_MIN", 0.05)
    fault = ControlPlaneStop(_cluster(), method="pause-node-containers")
    fault.cluster = Nodes()
    stop_at = fault.plan_stop()
    fault.inject()
    assert [node for node, _ in paused] == ["cp1", "cp2"]
    assert stop_at <= fault.injected_at <= paused[0][1]
    assert fault.units == {} and fault.target() == {"method": "pause-node-containers", "nodes": ["cp1", "cp2"]}


def test_control_plane_stop_revert_cancels_the_timers_where_it_can_and_waits_for_them_where_it_cannot(monkeypatch):
    from harness.faults import FaultError
    from harness.faults.control_plane_stop import ControlPlaneStop

    nodes = Nodes(reachable={"cp1"})
    fault = ControlPlaneStop(_cluster(), hold_seconds=30)
    fault.cluster = nodes
    fault.units.update(stop_at=time.time() - 40, start_at=time.time() - 10)
    monkeypatch.setattr("harness.faults.control_plane_stop.RESTORE_DEADLINE_SECONDS", 1)
    with pytest.raises(FaultError, match="cp2: not reachable 1 s after its kubelet was due to start"):
        fault.revert()
    sent = [" ".join(cmd) for node, cmd in nodes.sent if node == "cp1"]
    assert any("systemctl start kubelet &&" in c and f"systemctl stop {fault.units['start']}.timer" in c for c in sent)
    assert "cp1" in fault.kubelet_started_at


def test_a_second_check_of_a_reverted_control_plane_stop_needs_no_record_of_the_first(monkeypatch) -> None:
    """kdrill recover's check, or a test's after it, runs in a fault rebuilt from the ledger: no
    kubelet start of its own, and the nodes' timer records already read and removed."""
    from harness.faults.control_plane_stop import ControlPlaneStop

    nodes = Nodes(outputs={"readyz": "ok"})
    target = ControlPlaneStop(_cluster(), hold_seconds=30).target()
    target["units"].update(stop_at=time.time() - 60, start_at=time.time() - 30)
    again = ControlPlaneStop.from_target(_cluster(), target)
    again.cluster = nodes
    monkeypatch.setattr("harness.components.static_pods.kubelet_journal", lambda *a, **k: [])
    again.verify_reverted()
    assert set(again.restore_seconds) == {"cp1", "cp2"} and all(v is not None for v in again.restore_seconds.values())
    assert again.timers_fired == {"cp1": {"stop": None, "start": None}, "cp2": {"stop": None, "start": None}}


@pytest.mark.parametrize("read, least", [
    ({"offset_seconds": 0.19, "uncertainty_seconds": 0.21}, 0.0),  # kind through docker exec: proves nothing
    ({"offset_seconds": -0.05, "uncertainty_seconds": 0.05}, 0.0),
    ({"offset_seconds": 5.0, "uncertainty_seconds": 0.1}, 4.9),
    ({"offset_seconds": -3.0, "uncertainty_seconds": 0.5}, -2.5),
])
def test_a_clock_is_corrected_only_by_the_offset_its_read_proves(read, least) -> None:
    from harness.components.topology import least_offset_seconds

    assert least_offset_seconds(read) == pytest.approx(least)


def test_clock_corrections_take_what_the_runs_reads_prove_and_nothing_from_a_failed_read() -> None:
    from harness.components.topology import clock_corrections

    reads = {"w1": {"offset_seconds": 2.0, "uncertainty_seconds": 0.1},
             "w2": {"error": "ProviderError: node w2 not reachable"},
             "w3": {"offset_seconds": 0.15, "uncertainty_seconds": 0.2}}
    assert clock_corrections(reads, ["w1", "w2", "w3", "w4"]) == pytest.approx(
        {"w1": 1.9, "w2": 0.0, "w3": 0.0, "w4": 0.0})
    assert clock_corrections(None, ["w1"]) == {"w1": 0.0}


def test_a_clock_read_within_a_slow_exec_corrects_nothing_and_an_unreadable_one_is_left_alone(monkeypatch) -> None:
    """kind through docker exec: the node's date runs late in the round trip and reads ahead."""
    from harness.faults.control_plane_stop import ControlPlaneStop

    monkeypatch.setattr("harness.faults.control_plane_stop.SCHEDULE_LEAD_SECONDS", 0.3)
    monkeypatch.setattr("harness.faults.control_plane_stop.SECONDS_PER_COMMAND_MIN", 0.05)

    class LateRead(Nodes):
        def node_exec(self, node, command, timeout_seconds=60, check=True, stdin=None, read_only=False):
            if command[:1] == ["date"]:
                time.sleep(0.1)  # the exec's start-up, then the read, then a quicker return
                out = "not-a-time" if node == "cp2" else f"{time.time():.6f}"
                time.sleep(0.02)  # the raw read: about 0.04 s ahead, within its 0.06 s uncertainty
                return subprocess.CompletedProcess(command, 0, out, "")
            return super().node_exec(node, command, timeout_seconds, check, stdin)

    fault = ControlPlaneStop(_cluster(), hold_seconds=30)
    fault.cluster = LateRead()
    fault.plan_stop()
    assert fault.units["clock_offsets"] == {"cp1": 0.0}


def test_a_pause_with_no_planned_stop_comes_at_once_and_a_late_one_is_in_the_evidence(monkeypatch) -> None:
    from harness.faults.control_plane_stop import ControlPlaneStop

    paused: list[float] = []
    monkeypatch.setattr("harness.faults.control_plane_stop.pause_container", lambda name: paused.append(time.time()) or 1)
    fault = ControlPlaneStop(_cluster(), method="pause-node-containers")
    fault.cluster = Nodes()
    began = time.time()
    fault.inject()
    assert len(paused) == 2 and paused[0] - began < 0.2 and "planned_stop_at" not in fault.evidence()
    late = ControlPlaneStop(_cluster(), method="pause-node-containers")
    late.cluster = Nodes()
    late.planned_stop_at = time.time() - 2  # the drill's own commands took longer than planned
    late.inject()
    assert late.evidence()["paused_late_seconds"] == pytest.approx(2, abs=0.2)


def test_node_records_are_put_on_the_hosts_clock_by_the_nodes_measured_offset(monkeypatch) -> None:
    """A node whose clock runs 5 s ahead: its records, less its offset, are the host's times."""
    from harness.faults.control_plane_stop import ControlPlaneStop
    from harness.probes.node_side import NodeContainerSampler

    monkeypatch.setattr("harness.faults.control_plane_stop.SCHEDULE_LEAD_SECONDS", 0.3)
    monkeypatch.setattr("harness.faults.control_plane_stop.SECONDS_PER_COMMAND_MIN", 0.05)

    class Ahead(Nodes):
        def node_exec(self, node, command, timeout_seconds=60, check=True, stdin=None, read_only=False):
            done = super().node_exec(node, command, timeout_seconds, check, stdin)
            if command[:1] == ["date"]:
                done.stdout = f"{float(done.stdout) + 5:.6f}\n"
            return done

    fault = ControlPlaneStop(_cluster(), hold_seconds=30)
    fault.cluster = nodes = Ahead()
    stop_at = fault.plan_stop()
    offsets = fault.units["clock_offsets"]
    assert set(offsets) == {"cp1", "cp2"} and all(v == pytest.approx(5, abs=0.2) for v in offsets.values())
    assert fault.target()["units"]["clock_offsets"] == offsets  # kdrill recover's check has them too
    # The stop timer ran 0.1 s late by the host's clock: the node wrote its own time, 5 s ahead.
    nodes.outputs = {f"{fault.units['stop']}.at": f"{stop_at + 5.1:.6f}", "readyz": "ok"}
    monkeypatch.setattr("harness.components.static_pods.kubelet_journal", lambda *a, **k: [])
    fault.verify_reverted()
    assert fault.timers_fired["cp1"]["stop"] == pytest.approx(0.1, abs=0.2)
    assert fault.evidence()["node_timers"]["clock_offsets_seconds"] == offsets

    line = json.dumps({"t": 105.0, "ok": True, "out": {"containers": []}})
    sampler = NodeContainerSampler("w", Nodes(outputs={"jsonl": line}), ["w1"], "ns", 1.0, 5, clock_offsets={"w1": 5.0})
    assert [x.t for x in sampler.collect().samples()] == [100.0]
    assert node_units.started_at(Nodes(outputs={".at": "105.5"}), "w1", "kdrill-k", 5.0) == 100.5


def test_the_drills_node_units_are_a_ledger_entry_whose_revert_stops_and_removes_them(tmp_path) -> None:
    """kdrill recover after a crash: the entry alone names every unit on every node."""
    from harness.core.ledger import Ledger
    from harness.faults import FaultError, injected
    from harness.faults.node_units import NodeUnits

    with pytest.raises(FaultError, match="at least one unit per node"):
        NodeUnits(_cluster(), {"w1": []})
    with pytest.raises(node_units.UnitError, match="unit name must be all of"):
        NodeUnits(_cluster(), {"w1": ["kubelet"]})
    ledger = Ledger(tmp_path / "ledger")
    nodes = Nodes()
    held = NodeUnits(_cluster(), {"w1": ["kdrill-kill-a", "kdrill-sampler-b"], "w2": ["kdrill-sampler-b"]})
    held.cluster = nodes
    with injected(held, ledger, drill="d"):
        (entry,) = ledger.entries()
        assert entry.kind == "node-units" and entry.target == held.target()
        assert nodes.sent == []  # the entry exists before anything is set; inject sets nothing
    assert ledger.entries() == []
    stopped = [" ".join(cmd) for node, cmd in nodes.sent if "systemctl stop" in " ".join(cmd)]
    assert len(stopped) == 2 and all("kdrill-sampler-b.timer" in c for c in stopped)
    removed = [" ".join(cmd) for node, cmd in nodes.sent if "rm -f" in " ".join(cmd)]
    assert any("/run/kdrill-units/kdrill-kill-a.at" in c for c in removed)
    again = NodeUnits.from_target(_cluster(), entry.target)
    assert again.units == held.units


def test_a_node_units_revert_that_cannot_reach_a_node_keeps_its_entry(tmp_path) -> None:
    from harness.core.ledger import Ledger
    from harness.faults import FaultError, injected
    from harness.faults.node_units import NodeUnits

    ledger = Ledger(tmp_path / "ledger")
    held = NodeUnits(_cluster(), {"w1": ["kdrill-kill-a"], "w2": ["kdrill-kill-b"]})
    held.cluster = Nodes(reachable={"w1"})
    with pytest.raises(FaultError, match="w2: kdrill-kill-b not removed: ProviderError: node w2 not reachable"):
        with injected(held, ledger, drill="d"):
            pass
    assert [e.kind for e in ledger.entries()] == ["node-units"]  # kdrill recover tries again


class SlowNodes(Nodes):
    """Each node command takes ``delay`` seconds (the node agent's exec on a loaded machine)."""

    def __init__(self, delay: float, **kwargs) -> None:
        super().__init__(**kwargs)
        self.delay = delay

    def node_exec(self, node, command, **kwargs):
        time.sleep(self.delay)
        return super().node_exec(node, command, **kwargs)


def test_the_sampler_starts_on_every_node_however_slow_each_command_is() -> None:
    from harness.probes.node_side import NodeContainerSampler

    nodes = SlowNodes(0.4)
    NodeContainerSampler("w", nodes, ["w1", "w2", "w3", "w4"], "ns", 1.0, 30).start()
    assert [n for n, _ in nodes.sent] == ["w1", "w2", "w3", "w4"]


def test_a_unit_name_with_a_trailing_newline_is_refused() -> None:
    with pytest.raises(node_units.UnitError):
        node_units.check_name("kdrill-x\n")


def test_control_plane_stops_lead_is_sized_from_the_slowest_node(monkeypatch) -> None:
    from harness.faults.control_plane_stop import ControlPlaneStop

    nodes = SlowNodes(0.2)
    fault = ControlPlaneStop(_cluster(), hold_seconds=30)
    fault.cluster = nodes
    monkeypatch.setattr("harness.faults.control_plane_stop.SCHEDULE_LEAD_SECONDS", 0.3)
    monkeypatch.setattr("harness.faults.control_plane_stop.SECONDS_PER_COMMAND_MIN", 0.1)
    fault.inject()  # four timers at 0.2 s each fit in the lead: 0.3 s + 4 commands x 3 x 0.2 s
    assert [cmd for _, cmd in nodes.sent[:2]] == [["true"], ["true"]]  # timed (and agent pods started) first


def test_a_stop_planned_too_close_to_be_set_everywhere_sets_nothing(monkeypatch) -> None:
    from harness.faults import FaultError
    from harness.faults.control_plane_stop import ControlPlaneStop

    nodes = Nodes()
    fault = ControlPlaneStop(_cluster(), hold_seconds=30)
    fault.cluster = nodes
    monkeypatch.setattr("harness.faults.control_plane_stop.SCHEDULE_LEAD_SECONDS", 0.0)
    stop_at = fault.plan_stop(extra_commands=3)
    assert stop_at - time.time() <= (2 * 2 + 3) * 0.5 + 0.1 and fault.units["start_at"] == stop_at + 30
    time.sleep(max(0.0, stop_at - time.time()))  # the drill's own commands took all the lead
    with pytest.raises(FaultError, match="nothing set"):
        fault.inject()
    assert not [cmd for _, cmd in nodes.sent if cmd[0] == "systemd-run"]


def test_a_stop_that_cannot_be_set_on_every_node_is_taken_back_where_it_was_set() -> None:
    from harness.faults.control_plane_stop import ControlPlaneStop

    class RefusesSecondStop(Nodes):
        def node_exec(self, node, command, **kwargs):
            if node == "cp2" and any(a.endswith("-stop") and a.startswith("--unit=") for a in command):
                raise ProviderError("systemd-run refused")
            return super().node_exec(node, command, **kwargs)

    nodes = RefusesSecondStop()
    fault = ControlPlaneStop(_cluster(), hold_seconds=30)
    fault.cluster = nodes
    with pytest.raises(ProviderError, match="refused"):
        fault.inject()
    cancelled = [" ".join(cmd) for node, cmd in nodes.sent if node == "cp1" and cmd[0] == "sh"]
    assert cancelled and f"{fault.units['stop']}.timer" in cancelled[0]


def test_the_start_timer_goes_only_with_a_started_kubelet_in_the_same_command() -> None:
    from harness.faults.control_plane_stop import ControlPlaneStop

    nodes = Nodes()
    fault = ControlPlaneStop(_cluster(), hold_seconds=30)
    fault.cluster = nodes
    fault.units.update(stop_at=time.time() - 1, start_at=time.time() + 29)
    fault.revert()
    (script,) = [cmd[-1] for node, cmd in nodes.sent if node == "cp1"]
    stop_timer, start, start_timer = (script.index(f"{fault.units['stop']}.timer"),
                                      script.index("systemctl start kubelet &&"),
                                      script.index(f"{fault.units['start']}.timer"))
    assert stop_timer < start < start_timer, script


def test_the_in_cluster_probes_samples_are_put_on_the_hosts_clock_by_its_nodes_correction(monkeypatch) -> None:
    from harness.probes.incluster import InClusterProbe

    probe = InClusterProbe(cluster=None, namespace="ns", name="p", targets={"svc": "http://svc/"},
                           clock_offset_seconds=2.0)
    lines = [{"t": 101.0, "target": "svc", "ok": True, "status": 200, "latency_seconds": 0.01},
             {"t": 103.0, "target": "svc", "ok": False, "error": "timed out"},
             {"done": True, "t": 104.0}]
    monkeypatch.setattr(probe, "results", lambda since=None: lines)
    assert [s.t for s in probe.timelines()["svc"].samples()] == [99.0, 101.0]
    assert [s.t for s in probe.timelines(since=100.0)["svc"].samples()] == [101.0]  # since is the host's clock


def test_every_container_kill_in_the_source_waits_for_the_runtime_as_crictl_kill_does():
    """A plain ``crictl stop`` gives the runtime crictl's 2 s default, and failed with
    DeadlineExceeded (an etcd member on kind, a Pod's container through the node agent): every
    kill goes through static_pods.CRICTL_KILL."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    plain = re.compile(r"""["']crictl(\s+|["'],\s*["'])stop""")
    found = [f"{path.relative_to(root)}:{n}" for folder in ("harness", "drills") for path in (root / folder).rglob("*.py")
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if plain.search(line)]
    assert found == []


class Rerun(Nodes):
    """A node whose systemd-run answers ``start_code`` (-1: the exec cut with no exit status), and
    whose unit records exit status ``rc`` after ``polls`` reads (None: never)."""

    def __init__(self, start_code: int = 0, rc: int | None = 0, polls: int = 2) -> None:
        super().__init__()
        self.start_code, self.rc, self.polls = start_code, rc, polls

    def node_exec(self, node, command, timeout_seconds=60, check=True, stdin=None, read_only=False):
        self.sent.append((node, command))
        if command[0] == "systemd-run":
            return subprocess.CompletedProcess(command, self.start_code, "", "")
        if ".rc" in command[-1] and command[-1].startswith("cat "):
            self.polls -= 1
            out = f"{self.rc}\n" if self.rc is not None and self.polls <= 0 else ""
            return subprocess.CompletedProcess(command, 0, out, "")
        return subprocess.CompletedProcess(command, 0, "", "")


def test_a_manifest_edit_runs_as_a_unit_that_always_starts_the_kubelet_and_is_waited_for() -> None:
    node = Rerun()
    static_pods.rerun_with_edit(node, "cp1", "sed -i s/a/b/ /etc/kubernetes/manifests/etcd.yaml", "etcd")
    start = node.sent[0][1]
    post = next(a for a in start if a.startswith("--property=ExecStopPost=/bin/sh -c 'systemctl start kubelet; "))
    assert start[0] == "systemd-run" and "ended by systemd: $SERVICE_RESULT" in post
    unit = next(a for a in start if a.startswith("--unit=")).split("=", 1)[1]
    assert unit.startswith("kdrill-rerun-etcd-")
    assert start[-1].index("systemctl stop kubelet") < start[-1].index("sed -i") < start[-1].index(static_pods.CRICTL_KILL)
    assert f"> {node_units.STATE_DIR}/{unit}.rc" in start[-1]
    assert f"{unit}.rc" in node.sent[-1][1][-1] and node.sent[-1][1][-1].startswith("rm -f"), "its records are removed"


def test_a_start_cut_by_the_kubelets_own_stop_is_waited_for_all_the_same() -> None:
    # Through the node agent the exec runs through the kubelet the script stops.
    node = Rerun(start_code=-1)
    static_pods.rerun_with_edit(node, "cp1", "true", "etcd")
    assert node.polls <= 0


def test_a_failed_edit_is_an_error_and_a_unit_systemd_refuses_is_not_waited_for() -> None:
    with pytest.raises(ProviderError, match="the manifest edit exited 3"):
        static_pods.rerun_with_edit(Rerun(rc=3), "cp1", "false", "etcd")
    refused = Rerun(start_code=1)
    with pytest.raises(node_units.UnitError, match="exited 1"):
        static_pods.rerun_with_edit(refused, "cp1", "true", "etcd")
    assert len(refused.sent) == 1


def test_a_unit_started_now_records_its_exit_status(tmp_path: Path) -> None:
    nodes = Nodes()
    node_units.run_now(nodes, "cp1", "kdrill-now", "exit 7", 60)
    script = nodes.sent[0][1][-1].replace(node_units.STATE_DIR, str(tmp_path))
    assert subprocess.run(["sh", "-c", script], timeout=10).returncode == 7
    assert (tmp_path / "kdrill-now.rc").read_text().strip() == "7" and (tmp_path / "kdrill-now.at").exists()


def test_a_start_that_gives_no_exit_status_says_why_and_only_refusals_and_no_access_raise() -> None:
    assert node_units.run_now(Rerun(), "cp1", "kdrill-now", "true", 60) is None
    assert "no exit status (cut)" in node_units.run_now(Rerun(start_code=-1), "cp1", "kdrill-now", "true", 60)

    class Failing(Nodes):
        def __init__(self, exc):
            super().__init__()
            self.exc = exc

        def node_exec(self, node, command, timeout_seconds=60, check=True, stdin=None, read_only=False):
            raise self.exc

    timed_out = node_units.run_now(Failing(subprocess.TimeoutExpired(["systemd-run"], 30)), "cp1", "kdrill-now",
                                   "true", 60)
    assert "did not return" in timed_out and "timed out" in timed_out
    assert "agent pod gone" in node_units.run_now(Failing(ProviderError("agent pod gone")), "cp1", "kdrill-now",
                                                  "true", 60)
    with pytest.raises(NoNodeAccess):
        node_units.run_now(Failing(NoNodeAccess("no node access")), "cp1", "kdrill-now", "true", 60)
    with pytest.raises(node_units.UnitError, match="exited 1"):
        node_units.run_now(Rerun(start_code=1), "cp1", "kdrill-now", "true", 60)


def test_a_unit_that_never_ends_is_an_error_after_the_deadline(monkeypatch) -> None:
    monkeypatch.setattr(static_pods, "RERUN_DEADLINE_SECONDS", 1)
    with pytest.raises(ProviderError, match="did not end within 1 s; starting it: .*no exit status"):
        static_pods.rerun_with_edit(Rerun(start_code=-1, rc=None), "cp1", "true", "etcd")


class AgentNodes(Nodes):
    node_channel = "agent"


def test_etcd_member_through_the_agent_sets_every_kubelet_start_before_any_stop() -> None:
    from harness.faults.etcd_member import EtcdMember

    nodes = AgentNodes()
    fault = EtcdMember(nodes, ["cp1", "cp2"], hold_seconds=30)
    recorded = []
    fault._checkpoint = lambda: recorded.append(dict(fault.target()))
    fault.injected_at = time.time()
    fault.inject()
    assert recorded and recorded[0]["units"]["start_at"] == pytest.approx(fault.injected_at + 30)
    units = [(node, cmd) for node, cmd in nodes.sent if cmd[0] == "systemd-run"]
    order = [(node, next(a for a in cmd if a.startswith("--unit=")).split("=")[1]) for node, cmd in units]
    assert order == [("cp1", fault.units["start"]), ("cp2", fault.units["start"]),
                     ("cp1", fault.units["stop"]), ("cp2", fault.units["stop"])]
    assert any(a.startswith("--on-active=") for a in units[0][1]) and units[0][1][-1].endswith("systemctl start kubelet")
    assert not any(a.startswith("--on-active=") for a in units[2][1]), "the stop runs now"
    assert "systemctl stop kubelet" in units[2][1][-1] and "'^(etcd)$'" in units[2][1][-1]
    assert set(fault.units["clock_offsets"]) == {"cp1", "cp2"}


def test_etcd_member_through_the_agent_needs_its_hold_and_through_docker_sets_no_timer() -> None:
    from harness.faults import FaultError
    from harness.faults.etcd_member import EtcdMember

    with pytest.raises(FaultError, match="needs hold_seconds"):
        EtcdMember(AgentNodes(), ["cp1"]).inject()
    docker = Nodes()
    docker.node_channel = "docker"
    EtcdMember(docker, ["cp1"], hold_seconds=30).inject()
    assert [cmd[0] for _, cmd in docker.sent] == ["sh"] and "systemctl stop kubelet" in docker.sent[0][1][-1]


def test_etcd_member_revert_starts_what_answers_and_waits_for_the_timers_of_the_rest(monkeypatch) -> None:
    from harness.faults import FaultError
    from harness.faults.etcd_member import EtcdMember

    nodes = AgentNodes(reachable={"cp1"})
    fault = EtcdMember(nodes, ["cp1", "cp2"], units={"stop": "kdrill-etcd-x-stop", "start": "kdrill-etcd-x-start",
                                                      "start_at": time.time() - 10})
    monkeypatch.setattr("harness.faults.etcd_member.RESTORE_DEADLINE_SECONDS", 1)
    with pytest.raises(FaultError, match="cp2: not reachable 1 s after its kubelet was due to start"):
        fault.revert()
    sent = [" ".join(cmd) for node, cmd in nodes.sent if node == "cp1"]
    assert any("systemctl start kubelet &&" in c and "systemctl stop kdrill-etcd-x-start.timer" in c for c in sent)
    assert "cp1" in fault.kubelet_started_at and "cp2" not in fault.kubelet_started_at
    # Rebuilt from the ledger (kdrill recover), the same units are reverted.
    again = EtcdMember.from_target(nodes, fault.target())
    assert again.units == fault.units and again.restarts_by_design()[-2:] == ["kube-apiserver-cp1",
                                                                              "kube-apiserver-cp2"]


def test_a_unit_systemd_ends_records_how_and_the_edit_fails_with_it(tmp_path: Path) -> None:
    # RuntimeMaxSec: systemd sends SIGTERM to the whole unit, then runs ExecStopPost with
    # SERVICE_RESULT set. Without a record the unit would read as still running.
    import os
    import shlex
    import signal

    nodes = Nodes()
    node_units.run_now(nodes, "cp1", "kdrill-k", "sleep 30", 1, stop_post="systemctl start kubelet")
    command = nodes.sent[0][1]
    main = command[-1].replace(node_units.STATE_DIR, str(tmp_path))
    post = next(a for a in command if a.startswith("--property=ExecStopPost=")).split("=", 2)[2]
    post_argv = [a.replace("systemctl start kubelet", "true").replace(node_units.STATE_DIR, str(tmp_path))
                 for a in shlex.split(post)]
    unit = subprocess.Popen(["sh", "-c", main], start_new_session=True)
    started = time.monotonic()
    while not (tmp_path / "kdrill-k.at").exists() and time.monotonic() - started < 10:
        time.sleep(0.05)  # polling for the unit's own record of its start
    os.killpg(unit.pid, signal.SIGTERM)
    unit.wait(timeout=10)
    subprocess.run(post_argv, timeout=10, check=True, env={**os.environ, "SERVICE_RESULT": "timeout"})
    assert (tmp_path / "kdrill-k.rc").read_text().strip() == "ended by systemd: timeout"
    # rerun_with_edit reports it as such, not as an exit status nor as still running.
    with pytest.raises(ProviderError, match=r"\(kdrill-rerun-etcd-\w+\) ended by systemd: timeout"):
        static_pods.rerun_with_edit(Rerun(rc="ended by systemd: timeout"), "cp1", "true", "etcd")


@pytest.mark.parametrize("script", ['sed -i "s|${OLD}|new|" f', "echo $$ > /tmp/pid"])
def test_a_script_systemd_would_rewrite_is_refused_before_anything_is_sent(script) -> None:
    nodes = Nodes()
    with pytest.raises(node_units.UnitError, match="systemd would expand them"):
        node_units.run_now(nodes, "cp1", "kdrill-e", script, 60)
    with pytest.raises(node_units.UnitError, match="systemd would expand them"):
        node_units.schedule(nodes, "cp1", "kdrill-e", script, time.time() + 5, 60)
    assert nodes.sent == []


def _closed_stream(channels: dict[int, str]):
    """The client library's WSClient once its connection is closed, holding ``channels`` (3: the
    error channel, where the exit status is)."""
    from kubernetes.stream.ws_client import WSClient

    ws = WSClient.__new__(WSClient)
    ws._connected, ws._channels, ws._closed_channels = False, dict(channels), set()
    ws.binary, ws._returncode, ws.subprotocol = False, None, "v5.channel.k8s.io"
    ws.update = lambda timeout=0: None
    ws.close = lambda **kw: None
    return ws


@pytest.mark.parametrize("error_channel", [
    "",  # closed with no status at all: the node's kubelet went away
    '{"status":"Failure","reason":"InternalError","message":"x","details":{"causes":[{"message":"EOF"}]}}',
])
def test_a_start_cut_by_the_kubelets_stop_through_the_node_agent_is_waited_for(monkeypatch, error_channel) -> None:
    import kubernetes.stream

    from harness.kube.providers.node_agent import NodeAgent

    sent = []

    def answer(fn, *args, command, **kwargs):
        sent.append(" ".join(command) if isinstance(command, list) else command)
        if "systemd-run" in sent[-1]:  # cut by the script's own `systemctl stop kubelet`
            return _closed_stream({3: error_channel} if error_channel else {})
        return _closed_stream({1: "0\n", 3: '{"status":"Success"}'})  # the status read, the records removed

    agent = Cluster(name="c", provider="existing", kubeconfig=Path("/nonexistent"), context="c", node_access=True)
    agent.node_agent = NodeAgent(agent, "toolbox", "IfNotPresent")
    agent.node_agent.ensure = lambda node: "agent-pod"
    monkeypatch.setattr(agent, "new_api", lambda: None, raising=False)
    monkeypatch.setattr(kubernetes.stream, "stream", answer)
    static_pods.rerun_with_edit(agent, "cp1", "true", "etcd")
    started = next(i for i, c in enumerate(sent) if "systemd-run" in c)
    assert len(sent) > started + 1, sent  # the unit's status was read after the cut start, not given up on


def test_elections_are_read_from_the_members_raft_log_on_the_hosts_clock() -> None:
    from harness.components import etcd

    log = "\n".join([
        '{"level":"info","ts":"2026-12-05T02:37:40.000000Z","msg":"raft.node: a3 elected leader 53 at term 20"}',
        "not json: elected leader ff at term 99",
        '{"level":"info","ts":"2026-12-05T02:37:51.836117Z","msg":"a3 became leader at term 21"}',
        '{"level":"info","ts":"2026-12-05T02:37:51.836117Z","msg":"raft.node: a3 elected leader a3 at term 21"}',
    ])
    nodes = Nodes(outputs={"crictl ps": "etcd-container\n", "crictl logs": log})
    since = 1796438270.0  # 02:37:50 UTC
    found = etcd.elections(nodes, "cp1", since, clock_offset_seconds=0.5)  # the node's clock 0.5 s ahead
    assert found == [{"t": pytest.approx(1796438271.336117), "leader": "a3", "term": 21}]
    asked = " ".join(nodes.sent[-1][1])
    assert "crictl logs --since 2026-12-05T02:37:49Z etcd-container" in asked
