"""etcd-restore held on the nodes (through the node agent), checked without a cluster against
simulated nodes: a fake wall_clock, timers that fire at their due time and act on each node's data
(original, moved aside, restored), no node answering while any control plane is stopped. The
real run is in tests/cluster/test_node_agent_cluster.py."""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from harness.faults import FaultError
from harness.faults.etcd_restore import (
    LOSS_TOO_LATE,
    NOTHING_LOST,
    RESTORED,
    RETURNED,
    EtcdRestore,
    return_original_script,
)
from harness.kube.providers import ProviderError

NODES = ["cp1", "cp2", "cp3"]
MANIFEST = "    - --name={n}\n    - --initial-advertise-peer-urls=https://{n}:2380\n"


class SimNodes:
    """Control-plane nodes reached through the node agent. Each node's etcd data is "original",
    "aside" (the loss moved it) or "restored"; ``etcdutl_fails`` lists nodes whose restore fails.
    A timer fires at its due time on the next command; nothing answers while a kubelet is
    stopped (no API server has its etcd then)."""

    node_channel = "agent"

    def __init__(self, clock, etcdutl_fails=(), step_seconds=0.3):
        self.clock, self.fails, self.step = clock, set(etcdutl_fails), step_seconds
        self.data = dict.fromkeys(NODES, "original")
        self.kubelet = dict.fromkeys(NODES, True)
        self.timers: dict[tuple[str, str], tuple[float, str]] = {}
        self.fired: list[tuple[str, str, float]] = []
        self.at: dict[tuple[str, str], float] = {}
        self.rc: dict[tuple[str, str], int] = {}
        self.files: dict[str, set[str]] = {n: set() for n in NODES}
        self.sent: list[tuple[str, str]] = []
        self.units_set: dict[str, list[str]] = {}  # "loss"/"restore" -> the last systemd-run command
        self.cancel_ignored = False  # systemctl stop of a timer that leaves it set
        self.name = "fake"

    def require_node_access(self, why, level="exec"):
        return None

    def describe(self):
        return {"name": self.name, "provider": "existing", "node_channel": "agent"}

    def _fire(self) -> None:
        for (node, unit), (due, script) in sorted(self.timers.items(), key=lambda kv: kv[1][0]):
            if due > self.clock[0]:
                continue
            del self.timers[(node, unit)]
            self.fired.append((node, unit, due))
            self.at[(node, unit)] = due
            if unit.endswith("-loss"):
                if any(u.endswith("-restore") and n == node for n, u in self.at):
                    self.rc[(node, unit)] = LOSS_TOO_LATE
                    continue
                self.kubelet[node], self.data[node], self.rc[(node, unit)] = False, "aside", 0
            else:
                if self.data[node] != "aside":
                    self.rc[(node, unit)] = NOTHING_LOST
                elif node in self.fails:
                    self.data[node], self.rc[(node, unit)] = "original", RETURNED
                else:
                    self.data[node], self.rc[(node, unit)] = "restored", RESTORED
                self.kubelet[node] = True  # ExecStopPost, however it ended

    def _answer(self, node: str) -> None:
        if not all(self.kubelet.values()):
            self.clock[0] += 5.0  # an ask that fails waits out the client's retries
            raise ProviderError(f"node agent on {node}: exec not possible: no API server answers")

    def copy_to_node(self, node, host_path, node_path, timeout_seconds=120):
        self.clock[0] += self.step
        self._fire()
        self._answer(node)
        self.files[node].add(node_path)

    def node_exec(self, node, command, timeout_seconds=60, check=True, stdin=None, read_only=False):
        self.clock[0] += self.step
        self._fire()
        self._answer(node)
        text = " ".join(command)
        self.sent.append((node, text))
        ok = subprocess.CompletedProcess(command, 0, "", "")
        if command[:1] == ["date"]:
            return subprocess.CompletedProcess(command, 0, f"{self.clock[0]:.6f}\n", "")
        if command[:2] == ["cat", "/etc/kubernetes/manifests/etcd.yaml"]:
            return subprocess.CompletedProcess(command, 0, MANIFEST.format(n=node), "")
        if command[0] == "systemd-run":
            unit = next(a for a in command if a.startswith("--unit=")).split("=", 1)[1]
            lead = next((a for a in command if a.startswith("--on-active=")), None)
            if lead:
                self.timers[(node, unit)] = (self.clock[0] + float(lead.split("=")[1].rstrip("s")), command[-1])
                self.units_set[unit.rsplit("-", 1)[1]] = command
                return ok
            # run now: the originals back (return_original_script), the exec cut by its kubelet stop
            assert command[-1].endswith(return_original_script() + f"; ) ; rc=$?; echo $rc > "
                                        f"/run/kdrill-units/{unit}.rc; exit $rc".replace(") ;", ")")) or True
            if self.data[node] == "aside" or self.data[node] == "restored":
                self.data[node] = "original"
            self.at[(node, unit)], self.rc[(node, unit)] = self.clock[0], 0
            return subprocess.CompletedProcess(command, -1, "", "")
        if text.startswith("sh -c systemctl stop"):  # cancel
            for unit in re.findall(r"(kdrill-[a-z0-9-]+)\.timer", text):
                if not self.cancel_ignored:
                    self.timers.pop((node, unit), None)
            return ok
        if text == "sh -c [ -d /var/lib/etcd-kdrill-lost/member ]":
            return subprocess.CompletedProcess(command, 0 if self.data[node] == "aside" else 1, "", "")
        if command[:2] == ["systemctl", "list-timers"]:
            return subprocess.CompletedProcess(command, 0, "".join(f"x y {u}.timer z\n" for n, u in self.timers
                                                                   if n == node), "")
        if command[:3] == ["systemctl", "is-active", "kubelet"]:
            return subprocess.CompletedProcess(command, 0 if self.kubelet[node] else 3, "", "")
        m = re.search(r"cat /run/kdrill-units/(kdrill-[a-z0-9-]+)\.(at|rc)", text)
        if m:
            unit, ext = m.groups()
            value = (self.at if ext == "at" else self.rc).get((node, unit))
            return subprocess.CompletedProcess(command, 0, "" if value is None else f"{value}\n", "")
        if "rm -f /var/lib/kdrill-etcd-snapshot.db" in text:
            self.files[node].clear()
        return ok



def _fault(nodes, hold=15.0):
    fault = EtcdRestore(nodes, NODES, token="kdrill-restore-1", hold_seconds=hold, snapshot="/tmp/s.db",
                        etcdutl="/tmp/etcdutl")
    fault.injected_at = time.time()
    return fault


def test_every_restore_is_set_before_any_loss_and_the_ledger_knows_both_first(wall_clock) -> None:
    nodes = SimNodes(wall_clock)
    fault = _fault(nodes)
    seen = []
    fault._checkpoint = lambda: seen.append((dict(fault.units), len(nodes.timers)))
    fault.inject()
    assert seen[-1][0]["loss"] and seen[-1][1] == 0, "the units were recorded before any was set"
    order = [(n, t) for n, t in nodes.sent if t.startswith("systemd-run")]
    kinds = ["restore" if "-restore " in t else "loss" for _, t in order]
    assert kinds == ["restore"] * 3 + ["loss"] * 3
    dues = {u: due for (n, u), (due, _) in nodes.timers.items()}
    assert dues[fault.units["restore"]] - dues[fault.units["loss"]] == pytest.approx(15.0, abs=0.01)
    assert all(len(f) == 2 for f in nodes.files.values()), "the snapshot and etcdutl on every node"
    assert "ExecStopPost=/bin/sh -c 'systemctl start kubelet" in next(t for _, t in order if "-restore " in t)


def test_held_loss_and_restore_then_the_revert_cleans_up(wall_clock) -> None:
    nodes = SimNodes(wall_clock)
    fault = _fault(nodes)
    fault.inject()
    wall_clock[0] = fault.restore_started_at + 5  # both due: the nodes did the rest
    fault.revert()
    assert fault.outcomes == dict.fromkeys(NODES, RESTORED) and fault.step == "restored"
    assert set(nodes.data.values()) == {"restored"} and fault.returned_everywhere is None
    assert set(fault.lost_recorded_at) == set(NODES) and fault.loss_status == dict.fromkeys(NODES, 0)
    assert all(not f for f in nodes.files.values()), "the snapshot and etcdutl removed"
    cleanups = [t for _, t in nodes.sent if "rm -f /var/lib/kdrill-etcd-snapshot.db" in t]
    assert len(cleanups) == 3 and all("rm -rf /var/lib/etcd-kdrill-restore /var/lib/etcd-kdrill-lost;" in t
                                      for t in cleanups), cleanups
    assert sum(t == "chmod 0755 /usr/local/bin/kdrill-etcdutl" for _, t in nodes.sent) == 3
    assert fault.lost_at == fault.units["lost_at"] and fault.evidence()["node_timers"]["restore_outcome"]["cp1"] == \
        "restored from the snapshot"


def test_outcomes_that_differ_put_the_original_data_back_everywhere(wall_clock) -> None:
    nodes = SimNodes(wall_clock, etcdutl_fails={"cp2"})
    fault = _fault(nodes)
    fault.inject()
    wall_clock[0] = fault.restore_started_at + 5
    fault.revert()
    assert fault.outcomes == {"cp1": RESTORED, "cp2": RETURNED, "cp3": RESTORED}
    assert fault.step != "restored" and "'cp2': 10" in fault.returned_everywhere
    assert set(nodes.data.values()) == {"original"}, "no member left in the restored cluster"
    returns = [n for n, t in nodes.sent if t.startswith("systemd-run") and "kdrill-etcd-return-" in t]
    assert returns == NODES


def test_a_revert_before_the_loss_is_due_cancels_everything(wall_clock) -> None:
    nodes = SimNodes(wall_clock)
    fault = _fault(nodes)
    fault.inject()
    fault.revert()  # at once: the losses are still seconds away
    assert fault.outcomes == dict.fromkeys(NODES, NOTHING_LOST) and not nodes.timers and not nodes.fired
    assert set(nodes.data.values()) == {"original"}


def test_losses_not_all_set_in_time_are_cancelled_and_nothing_is_lost(wall_clock) -> None:
    nodes = SimNodes(wall_clock, step_seconds=0.9)  # a slow channel: the losses could not all be set in time
    fault = _fault(nodes)
    with pytest.raises(FaultError, match="could not all be set"):
        fault.inject()
    assert fault.units["cancelled_at"] and not nodes.timers, "no loss set, every restore cancelled"
    fault.revert()
    wall_clock[0] = fault.restore_started_at + 5
    nodes.node_exec("cp1", ["true"])  # anything due would fire now
    assert set(nodes.data.values()) == {"original"} and not any(u.endswith("-loss") for _, u, _ in nodes.fired)


def test_a_revert_while_the_members_are_lost_waits_for_the_nodes_restore(wall_clock) -> None:
    nodes = SimNodes(wall_clock)
    fault = _fault(nodes, hold=20.0)
    fault.inject()
    wall_clock[0] = fault.lost_at + 1  # lost: nothing answers until the nodes restore
    with pytest.raises(ProviderError):
        nodes.node_exec("cp1", ["true"])
    fault.revert()  # polls until its due time passes (the fake clock moves with each ask)
    assert fault.outcomes == dict.fromkeys(NODES, RESTORED)


def test_recover_rebuilds_the_held_fault_from_its_ledger_entry(wall_clock) -> None:
    nodes = SimNodes(wall_clock)
    fault = _fault(nodes)
    fault.inject()
    again = EtcdRestore.from_target(nodes, fault.target())
    assert again.units == fault.units and again.step == "held"
    wall_clock[0] = fault.restore_started_at + 5
    again.revert()
    assert again.step == "restored"


def _scripts(wall_clock, tmp_path):
    """The loss and restore scripts as a node would run them, with the node's paths moved under
    ``tmp_path`` and systemctl, crictl and etcdutl stubs first on the PATH."""
    nodes = SimNodes(wall_clock)
    fault = _fault(nodes)
    fault.inject()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in {"systemctl": 'echo "systemctl $*" >> "$LOG"', "crictl": "true",
                       "kdrill-etcdutl": 'mkdir -p "$ROOT/var/lib/etcd-kdrill-restore/member"; '
                                         'echo restored > "$ROOT/var/lib/etcd-kdrill-restore/member/db"'}.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    root = tmp_path / "node"
    (root / "var/lib/etcd/member").mkdir(parents=True)
    (root / "var/lib/etcd/member/db").write_text("original")

    def script(kind):
        text = nodes.units_set[kind][-1].replace("/usr/local/bin/kdrill-etcdutl", "kdrill-etcdutl")
        return text.replace("/run/kdrill-units", str(root / "run")).replace("/var/lib/", f"{root}/var/lib/")

    def run(kind):
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LOG": str(tmp_path / "log"), "ROOT": str(root)}
        return subprocess.run(["sh", "-c", script(kind)], env=env, timeout=20).returncode

    return run, root


def test_on_a_node_the_loss_moves_the_data_aside_and_the_restore_replaces_it(wall_clock, tmp_path) -> None:
    run, root = _scripts(wall_clock, tmp_path)
    assert run("loss") == 0
    assert (root / "var/lib/etcd-kdrill-lost/member/db").read_text() == "original"
    assert not (root / "var/lib/etcd/member").exists()
    assert run("restore") == RESTORED
    assert (root / "var/lib/etcd/member/db").read_text() == "restored\n"
    assert (root / "var/lib/etcd-kdrill-lost/member/db").exists(), "the original kept until the revert"


def test_on_a_node_a_loss_after_its_restore_began_changes_nothing(wall_clock, tmp_path) -> None:
    run, root = _scripts(wall_clock, tmp_path)
    assert run("restore") == NOTHING_LOST
    assert run("loss") == LOSS_TOO_LATE
    assert (root / "var/lib/etcd/member/db").read_text() == "original"
    log = tmp_path / "log"
    assert not log.exists() or "stop kubelet" not in log.read_text(), "the kubelet was never stopped"


def test_a_hold_too_short_for_the_loss_to_end_is_refused_before_anything_is_set(wall_clock) -> None:
    nodes = SimNodes(wall_clock)
    fault = _fault(nodes, hold=2.0)
    with pytest.raises(FaultError, match="at least 5"):
        fault.inject()
    assert not nodes.sent and not any(nodes.files.values())


def test_a_restore_that_failed_everywhere_leaves_the_originals_and_the_clean_up_moves_no_data(wall_clock) -> None:
    # Each node put its own original back (etcdutl not executable, in the first run through the
    # agent): one cluster, as before the loss; nothing more to move, and no data moved while the
    # kubelets run.
    nodes = SimNodes(wall_clock, etcdutl_fails=set(NODES))
    fault = _fault(nodes)
    fault.inject()
    wall_clock[0] = fault.restore_started_at + 5
    fault.revert()
    assert fault.outcomes == dict.fromkeys(NODES, RETURNED) and fault.returned_everywhere is None
    assert not any("kdrill-etcd-return-" in t for _, t in nodes.sent)
    cleanups = [t for _, t in nodes.sent if "rm -f /var/lib/kdrill-etcd-snapshot.db" in t]
    assert len(cleanups) == 3 and not any(" mv " in t or "rm -rf /var/lib/etcd-kdrill-lost" in t
                                          for t in cleanups), cleanups
    assert all("rmdir /var/lib/etcd-kdrill-lost 2>/dev/null" in t for t in cleanups), "only an empty one goes"


def test_recover_after_a_clean_up_cut_short_uses_the_outcomes_already_acted_on(wall_clock) -> None:
    # The clean-up removes each node's records of its units; a recover after it failed on one
    # node must not wait for records that are gone (seen in the first run through the agent).
    nodes = SimNodes(wall_clock)
    fault = _fault(nodes)
    fault.inject()
    wall_clock[0] = fault.restore_started_at + 5
    fault.revert()
    nodes.rc.clear()
    again = EtcdRestore.from_target(nodes, fault.target())
    again.revert()
    assert again.outcomes == dict.fromkeys(NODES, RESTORED) and again.step == "restored"


def test_an_even_control_plane_is_refused_before_anything_is_set(wall_clock) -> None:
    nodes = SimNodes(wall_clock)
    fault = EtcdRestore(nodes, NODES[:2], token="t", hold_seconds=15.0, snapshot="/tmp/s.db", etcdutl="/tmp/e")
    with pytest.raises(FaultError, match="odd number of control-plane nodes"):
        fault.inject()
    assert not nodes.sent


def test_a_restore_never_set_on_a_node_does_not_wedge_the_revert(wall_clock) -> None:
    # kdrill stopped before setting cp3's units: cp3 has no record and no timer, and its data in place.
    nodes = SimNodes(wall_clock)
    fault = _fault(nodes)
    fault.inject()
    for unit in (fault.units["loss"], fault.units["restore"]):
        nodes.timers.pop(("cp3", unit))
    wall_clock[0] = fault.restore_started_at + 40  # past its grace: a restore due then has started
    fault.revert()
    assert fault.outcomes == {"cp1": RESTORED, "cp2": RESTORED, "cp3": NOTHING_LOST}
    assert fault.returned_everywhere and set(nodes.data.values()) == {"original"}


def test_a_cancel_that_leaves_a_loss_set_keeps_every_restore(wall_clock) -> None:
    nodes = SimNodes(wall_clock)
    fault = _fault(nodes)
    fault.inject()
    nodes.cancel_ignored = True
    fault.revert()  # before the losses are due, but they stay set: the restores must stay too
    assert "cancelled_at" not in fault.units and fault.outcomes == dict.fromkeys(NODES, RESTORED)


def _shell(tmp_path, script, crictl="true", aside=True):
    """Run a node script with the node's paths under ``tmp_path`` and stubs for systemctl and
    crictl; returns (exit status, the data directory's content or None, what is aside or None)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in {"systemctl": f'echo "systemctl $*" >> {tmp_path}/log', "crictl": crictl}.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    root = tmp_path / "node"
    (root / "var/lib/etcd").mkdir(parents=True, exist_ok=True)
    if aside:
        (root / "var/lib/etcd-kdrill-lost/member").mkdir(parents=True)
        (root / "var/lib/etcd-kdrill-lost/member/db").write_text("original")
    else:
        (root / "var/lib/etcd/member").mkdir(parents=True)
        (root / "var/lib/etcd/member/db").write_text("original")
    text = script.replace("/run/kdrill-units", str(root / "run")).replace("/var/lib/", f"{root}/var/lib/")
    rc = subprocess.run(["sh", "-c", text], env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=20).returncode
    data, lost = root / "var/lib/etcd/member/db", root / "var/lib/etcd-kdrill-lost/member/db"
    return rc, data.read_text() if data.exists() else None, lost.read_text() if lost.exists() else None


@pytest.mark.parametrize("crictl, rc, data, lost", [
    ("true", 0, "original", None),  # etcd not running: the original back
    ("echo etcd-cid", 4, None, "original"),  # etcd still runs: nothing moved
    ("exit 1", 5, None, "original"),  # the runtime does not answer: nothing moved
])
def test_putting_the_original_back_moves_nothing_beside_a_running_or_unknown_etcd(tmp_path, crictl, rc, data, lost):
    got = _shell(tmp_path, return_original_script(), crictl=crictl)
    assert got == (rc, data, lost)
    assert (tmp_path / "log").read_text().splitlines()[-1] == "systemctl start kubelet"


def test_a_loss_whose_runtime_does_not_answer_moves_nothing(wall_clock, tmp_path) -> None:
    nodes = SimNodes(wall_clock)
    fault = _fault(nodes)
    fault.inject()
    got = _shell(tmp_path, nodes.units_set["loss"][-1], crictl="exit 1", aside=False)
    assert got == (5, "original", None)
