"""kind's transient creation failures (a host port taken between kind's choice and Docker's bind)
are retried after deleting what the failed try made; any other failure is not. A recorder takes
the place of ``kind`` and ``docker`` (pure logic); tests/cluster/test_kind_create_race.py holds a
real port against a real creation."""

from __future__ import annotations

import subprocess

import pytest

from harness.kube.providers import ProviderError
from harness.kube.providers import kind as kind_module
from harness.kube.providers.kind import CREATE_ATTEMPTS, KindProvider, transient_create_error

PORT_RACE = ("ERROR: failed to create cluster: command \"docker run --name kdrill-ha-control-plane2 ...\" failed "
             "with error: exit status 125\ndocker: Error response from daemon: driver failed programming external "
             "connectivity on endpoint kdrill-ha-control-plane2 (0f3a): Bind for 127.0.0.1:41229 failed: port is "
             "already allocated.")
PROXY_BIND = ("docker: Error response from daemon: driver failed programming external connectivity on endpoint "
              "x (1): Error starting userland proxy: listen tcp4 127.0.0.1:30080: bind: address already in use.")
BAD_CONFIG = "ERROR: failed to create cluster: unknown apiVersion: kind.x-k8s.io/v1alpha9"


class Recorder:
    """Answers ``kind create cluster`` with the given outcomes in turn (exit 0 for None) and
    everything else with exit 0; keeps every command."""

    def __init__(self, outcomes: list[str | None], left_after_delete: list[str] = ()):
        self.outcomes, self.calls, self.left = list(outcomes), [], list(left_after_delete)

    def __call__(self, cmd, *, timeout_seconds, check=True, **kwargs):
        cmd = [str(c) for c in cmd]
        self.calls.append(cmd)
        if cmd[1:3] == ["create", "cluster"]:
            error = self.outcomes.pop(0)
            return subprocess.CompletedProcess(cmd, 1 if error else 0, "", error or "")
        if cmd[:3] == ["docker", "ps", "-aq"]:
            return subprocess.CompletedProcess(cmd, 0, "\n".join(self.left), "")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    def creations(self) -> int:
        return sum(c[1:3] == ["create", "cluster"] for c in self.calls)

    def deletions(self) -> int:
        return sum(c[1:3] == ["delete", "cluster"] for c in self.calls)


@pytest.fixture
def provider(monkeypatch):
    monkeypatch.setattr(kind_module, "kind_binary", lambda: "kind")
    monkeypatch.setattr(kind_module, "node_image", lambda: "kdrill/node:test")
    return KindProvider("ha", name="kdrill-retry")


def use(monkeypatch, recorder: Recorder) -> Recorder:
    monkeypatch.setattr(kind_module.proc, "run", recorder)
    return recorder


@pytest.mark.parametrize("output, says", [(PORT_RACE, "Bind for 127.0.0.1:41229 failed: port is already allocated"),
                                          (PROXY_BIND, "listen tcp4 127.0.0.1:30080: bind: address already in use")])
def test_the_port_race_is_recognised_by_what_docker_says(output, says):
    assert transient_create_error(output) == says


@pytest.mark.parametrize("output", [BAD_CONFIG, "", "ERROR: node image kdrill/node:x not present locally",
                                    "failed to init node with kubeadm: exit status 1"])
def test_anything_else_is_not_transient(output):
    assert transient_create_error(output) is None


def test_a_transient_failure_is_deleted_and_tried_again_saying_so_in_one_line(monkeypatch, provider, capsys):
    recorder = use(monkeypatch, Recorder([PORT_RACE, None]))
    provider._create_retrying(300, None)
    assert recorder.creations() == 2 and recorder.deletions() == 1
    # The half-made cluster goes before the next try: delete comes between the two creations.
    order = [" ".join(c[1:3]) for c in recorder.calls if c[1:3] in (["create", "cluster"], ["delete", "cluster"])]
    assert order == ["create cluster", "delete cluster", "create cluster"]
    lines = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(lines) == 1 and "failed transiently" in lines[0] and "port is already allocated" in lines[0] \
        and f"attempt 2 of {CREATE_ATTEMPTS}" in lines[0], lines


def test_a_real_error_is_not_retried_and_says_what_kind_said(monkeypatch, provider, capsys):
    recorder = use(monkeypatch, Recorder([BAD_CONFIG]))
    with pytest.raises(ProviderError, match="unknown apiVersion"):
        provider._create_retrying(300, None)
    assert recorder.creations() == 1 and recorder.deletions() == 0
    assert "transiently" not in capsys.readouterr().err


def test_the_tries_are_bounded_and_the_last_failure_is_raised(monkeypatch, provider, capsys):
    recorder = use(monkeypatch, Recorder([PORT_RACE] * CREATE_ATTEMPTS))
    with pytest.raises(ProviderError, match=f"attempt {CREATE_ATTEMPTS} of {CREATE_ATTEMPTS}"):
        provider._create_retrying(300, None)
    assert recorder.creations() == CREATE_ATTEMPTS and recorder.deletions() == CREATE_ATTEMPTS - 1
    assert capsys.readouterr().err.count("failed transiently") == CREATE_ATTEMPTS - 1


def test_a_container_left_after_the_delete_stops_the_retry(monkeypatch, provider):
    use(monkeypatch, Recorder([PORT_RACE, None], left_after_delete=["0f3a"]))
    with pytest.raises(ProviderError, match="could not be removed"):
        provider._create_retrying(300, None)
