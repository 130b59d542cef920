"""docker pause of a kind node container tries again when runc's cgroup v1 freezer gives up
(harness.kube.providers.kind.pause_container); any other error is raised at once."""

import subprocess

import pytest

from harness.core import proc
from harness.kube.providers import kind

FREEZE = ("Error response from daemon: Cannot pause container x: OCI runtime pause failed: unable to freeze: "
          "unknown")


def answers(monkeypatch, replies):
    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd)
        code, stderr = replies.pop(0)
        return subprocess.CompletedProcess(cmd, code, "", stderr)

    monkeypatch.setattr(kind.proc, "run", run)
    monkeypatch.setattr(kind, "PAUSE_RETRY_SECONDS", 0.0)
    return calls


def test_a_freezer_that_gives_up_is_tried_again(monkeypatch):
    calls = answers(monkeypatch, [(1, FREEZE), (1, FREEZE), (0, "")])
    assert kind.pause_container("kdrill-ha-control-plane3") == 3
    assert calls == [["docker", "pause", "kdrill-ha-control-plane3"]] * 3


def test_the_last_freezer_error_is_raised(monkeypatch):
    answers(monkeypatch, [(1, FREEZE)] * 3)
    with pytest.raises(proc.CommandFailed, match="unable to freeze"):
        kind.pause_container("n")


def test_another_error_is_raised_at_once(monkeypatch):
    calls = answers(monkeypatch, [(1, "Error: No such container: n")])
    with pytest.raises(proc.CommandFailed, match="No such container"):
        kind.pause_container("n")
    assert len(calls) == 1
