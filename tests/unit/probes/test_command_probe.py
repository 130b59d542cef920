"""The command probe's pure parts: how a sample is judged from the command's outcome, which node a
role names, and what loading a scenario refuses (a command on a node needs node access, said).
The node channel is a stand-in returning what a command gave; the real exec runs in
tests/cluster/test_command_probe_cluster.py."""

from __future__ import annotations

import subprocess

import pytest
from scenario_copies import load_edited

from harness.probes.command import CommandProbe, node_of
from harness.spec.scenario import ScenarioError


class Nodes:
    """A cluster whose node channel answers with ``outcome`` (a CompletedProcess or an exception)."""

    name = "c"
    nodes_by_role = {"control-plane": ["cp-b", "cp-a"], "worker": ["w1"]}

    def __init__(self, outcome) -> None:
        self.outcome, self.calls = outcome, []

    def node_exec(self, node, command, timeout_seconds=60, check=True, stdin=None, read_only=False):
        self.calls.append((node, command, timeout_seconds, check))
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


def done(code: int, out: str = "", err: str = "") -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess([], code, out, err)


def test_a_sample_succeeds_on_exit_0_with_the_expected_output_and_fails_with_its_exit_code():
    ok = CommandProbe("p", Nodes(done(0, "Version: 1.2\n")), ["crictl", "version"], {"node_role": "control-plane"},
                      stdout_contains="Version").sample()
    assert ok.ok and ok.labels == {"node": "cp-a", "exit": "0"} and ok.detail == "exit 0: Version: 1.2"
    lacking = CommandProbe("p", Nodes(done(0, "nothing")), ["true"], {"node": "w1"}, stdout_contains="Version").sample()
    assert not lacking.ok and "output lacks 'Version'" in lacking.detail
    failed = CommandProbe("p", Nodes(done(3, "", "boom")), ["false"], {"node": "w1"}).sample()
    assert not failed.ok and failed.labels["exit"] == "3" and failed.detail == "exit 3: boom"


def test_a_timeout_or_an_exec_that_cannot_be_made_is_a_failed_sample_saying_which():
    slow = Nodes(subprocess.TimeoutExpired(["sleep"], 1))
    sample = CommandProbe("p", slow, ["sleep", "9"], {"node": "w1"}, timeout_seconds=1).sample()
    assert not sample.ok and sample.labels["exit"] == "timeout" and slow.calls == [("w1", ["sleep", "9"], 1, False)]
    broken = CommandProbe("p", Nodes(RuntimeError("no agent")), ["true"], {"node": "w1"}).sample()
    assert not broken.ok and broken.labels["exit"] == "error" and "no agent" in broken.detail


def test_a_role_names_its_first_node_by_name_and_a_missing_role_is_refused():
    assert node_of(Nodes(None), {"node_role": "control-plane"}) == "cp-a"
    assert node_of(Nodes(None), {"node": "anything"}) == "anything"
    bare = Nodes(None)
    bare.nodes_by_role = {"control-plane": ["cp"]}
    with pytest.raises(ValueError, match="no worker node"):
        node_of(bare, {"node_role": "worker"})


def _with_probe(where: dict, node_access: bool | None):
    def edit(data):
        data["runner"]["probes"].append({"name": "cmd", "kind": "command", "command": ["true"], "where": where})
        if node_access is None:
            data["cluster"].pop("needs_node_access", None)
        else:
            data["cluster"]["needs_node_access"] = node_access
    return edit


def test_a_command_probe_on_a_node_needs_node_access_said_and_counts_as_exec(tmp_path):
    with pytest.raises(ScenarioError) as refused:
        load_edited(tmp_path, "pod-delete", _with_probe({"node_role": "worker"}, None))
    assert refused.value.field == "cluster.needs_node_access"
    assert "runner.probes[" in refused.value.expected and "command probe 'cmd' on a node" in refused.value.expected
    s = load_edited(tmp_path, "pod-delete", _with_probe({"node_role": "worker"}, True))
    assert ("exec", "runs the command probe 'cmd' on a node (true)") in s.node_access_levels()
    # In a pod it goes through the API server: no node access.
    assert load_edited(tmp_path, "pod-delete", _with_probe({"pod": "p"}, None)).needs_node_access is False


@pytest.mark.parametrize("where", [{}, {"pod": "p", "node": "n"}, {"node_role": "etcd"}, {"pod": "Not_A_Name"},
                                   {"node": "n", "container": "c"}])
def test_a_where_that_is_none_of_its_forms_is_refused_with_the_forms(tmp_path, where):
    with pytest.raises(ScenarioError) as refused:
        load_edited(tmp_path, "pod-delete", _with_probe(where, True))
    assert refused.value.field.startswith("runner.probes[") and ".where" in refused.value.field


@pytest.mark.parametrize("command, field", [([""], "command[0]"), (["  ", "-v"], "command[0]"),
                                            (["sh", "-c", "a\0b"], "command[2]")])
def test_a_command_with_no_program_or_a_nul_character_is_refused_when_the_scenario_loads(tmp_path, command, field):
    # Either would load and then fail every sample as "error": no exec can run it.
    def edit(data):
        _with_probe({"node": "n"}, True)(data)
        data["runner"]["probes"][-1]["command"] = command

    with pytest.raises(ScenarioError) as refused:
        load_edited(tmp_path, "pod-delete", edit)
    assert refused.value.field.endswith(f"].{field}"), refused.value.field
    # An empty argument after the program is a command's own business (grep "" FILE).
    def empty_argument(data):
        _with_probe({"node": "n"}, True)(data)
        data["runner"]["probes"][-1]["command"] = ["grep", "", "/etc/hostname"]

    assert load_edited(tmp_path, "pod-delete", empty_argument).runner["probes"][-1]["command"][1] == ""


def test_a_huge_argument_is_refused_saying_the_limit_not_repeating_the_argument(tmp_path):
    def edit(data):
        _with_probe({"node": "n"}, True)(data)
        data["runner"]["probes"][-1]["command"] = ["echo", "x" * 100_000]

    with pytest.raises(ScenarioError) as refused:
        load_edited(tmp_path, "pod-delete", edit)
    assert refused.value.field.endswith(".command[1]")
    assert refused.value.expected == "a string of at most 4096 characters" and len(str(refused.value)) < 600
