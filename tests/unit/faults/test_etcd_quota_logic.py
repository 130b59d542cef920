"""etcd-space-quota judges a member by the command line of the etcd process the node runs, not by
a new container: after a crash mid-inject the kubelet may never have run the edited manifest the
revert puts back. The node is a stand-in answering ``ps``: what is tested is the reading."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.faults.etcd_space_quota import EtcdSpaceQuota
from harness.kube.providers import Cluster

QUOTA = 123456789
WITH = f"etcd --advertise-client-urls=https://172.18.0.3:2379 --quota-backend-bytes={QUOTA} --data-dir=/var/lib/etcd"
WITHOUT = "etcd --advertise-client-urls=https://172.18.0.3:2379 --data-dir=/var/lib/etcd"
OTHER_QUOTA = f"etcd --quota-backend-bytes={QUOTA}0 --data-dir=/var/lib/etcd"


class PsNode(Cluster):
    ps_output = ""

    def node_exec(self, node, command, timeout_seconds=60, check=True, read_only=False):
        assert command == ["ps", "-ww", "-C", "etcd", "-o", "args="], command
        return SimpleNamespace(stdout=self.ps_output, returncode=0)


@pytest.mark.parametrize("ps, expected", [
    (WITH + "\n", True),
    (WITHOUT + "\n", False),
    (OTHER_QUOTA + "\n", False),  # another quota is not this fault's
    ("", None),  # no member running: restarting
    (WITH + "\n" + WITHOUT + "\n", None),  # old and new side by side: restarting
])
def test_the_running_member_is_read_from_its_command_line(tmp_path, ps, expected):
    cluster = PsNode(name="unit", provider="kind", kubeconfig=Path(tmp_path / "kubeconfig"), context="kind-unit",
                     node_access=True)
    cluster.ps_output = ps
    fault = EtcdSpaceQuota(cluster, ["cp1"], QUOTA, "ns")
    assert fault.quota_running("cp1") is expected


@pytest.mark.parametrize("when, running, apiserver, done", [
    ("inject", [False, None, True], True, True),  # old member, restarting, then with the quota
    ("revert", [True, None, False], True, True),  # with the quota, restarting, then without it
    ("inject", [False, False, False], True, False),  # never restarted with the quota
    ("revert", [True, True, True], True, False),  # still the small quota
    # The member is back but the node's kube-apiserver (killed with it) is not: the roll must not
    # go on to the next node and take a second API server down.
    ("inject", [False, None, True], False, False),
])
def test_a_roll_waits_for_the_member_the_edited_manifest_describes(tmp_path, monkeypatch, when, running, apiserver,
                                                                   done):
    import harness.faults.etcd_space_quota as module
    from harness.faults import FaultError

    cluster = PsNode(name="unit", provider="kind", kubeconfig=Path(tmp_path / "kubeconfig"), context="kind-unit",
                     node_access=True)
    cluster.node_exec = lambda node, command, **kw: SimpleNamespace(stdout="", returncode=0)
    fault = EtcdSpaceQuota(cluster, ["cp1"], QUOTA, "ns")
    states = iter(running)
    monkeypatch.setattr(fault, "quota_running", lambda node: next(states, running[-1]))
    monkeypatch.setattr("harness.faults.etcd_space_quota.apiserver_ready", lambda c, n: apiserver)
    # The edit and restart itself (a unit on the node) is tested in test_node_units.py.
    monkeypatch.setattr("harness.faults.etcd_space_quota.rerun_with_edit", lambda *a: None)

    def polls(condition, timeout_seconds, **kwargs):  # as many polls as states, no clock
        ok = any(condition() for _ in running)
        return SimpleNamespace(ok=ok)

    monkeypatch.setattr(module, "wait_until", polls)
    if done:
        fault._roll("cp1", "true", when, serving=lambda c, n: True)
        assert "cp1" in fault.restarted_after[when]
    else:
        with pytest.raises(FaultError):
            fault._roll("cp1", "true", when, serving=lambda c, n: True)
