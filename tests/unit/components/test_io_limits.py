"""The lines that set and remove a container's write-IOPS limit, per cgroup version, and what
counts as no limit (harness/components/io_limits.py), and the slow-disk fault's ledger record
(harness/faults/etcd_slow_disk.py): a record read back can only ever remove one container's
limit on one control-plane node."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

import pytest

from harness.components.io_limits import IoLimitTarget, limit_line, unlimited
from harness.faults import FaultError
from harness.faults.etcd_slow_disk import EtcdSlowDisk

ID = "0123456789abcdef" * 4
FILES = {1: f"/sys/fs/cgroup/blkio/kubelet.slice/cri-containerd-{ID}.scope/blkio.throttle.write_iops_device",
         2: f"/sys/fs/cgroup/kubelet.slice/cri-containerd-{ID}.scope/io.max"}


class Nodes(SimpleNamespace):
    """A cluster stand-in: its control-plane nodes, and the commands sent to them (each answered 0)."""

    def __init__(self):
        super().__init__(nodes_by_role={"control-plane": ["cp1", "cp2", "cp3"], "worker": ["w1"]}, sent=[])

    def node_exec(self, node, command, **_):
        self.sent.append((node, command))
        return subprocess.CompletedProcess(command, 0, "", "")


def target(version: int = 1) -> IoLimitTarget:
    return IoLimitTarget(container=ID, cgroup_file=FILES[version], device="254:0", version=version, line_before="")


def test_cgroup_v1_sets_a_count_and_removes_with_zero():
    assert limit_line(target(1), 5) == "254:0 5"
    assert limit_line(target(1), None) == "254:0 0"


def test_cgroup_v2_sets_wiops_and_removes_with_max():
    assert limit_line(target(2), 5) == "254:0 wiops=5"
    assert limit_line(target(2), None) == "254:0 wiops=max"


@pytest.mark.parametrize("line, free", [("", True), ("254:0 0", True), ("254:0 5", False),
                                        ("254:0 rbps=max wbps=max riops=max wiops=max", True),
                                        ("254:0 rbps=max wbps=max riops=max wiops=5", False)])
def test_what_counts_as_no_limit(line, free):
    assert unlimited(line) is free


def test_the_fault_record_round_trips_through_the_ledger():
    fault = EtcdSlowDisk(Nodes(), "cp2", 5, target(1).to_dict())
    again = EtcdSlowDisk.from_target(Nodes(), fault.target())
    assert again.target() == fault.target() and again.located == target(1)
    assert fault.target()["method"] == "blkio-write-iops" and fault.where() == ["cp2"]


@pytest.mark.parametrize("version", [1, 2])
def test_the_revert_only_ever_removes_the_limit(version):
    nodes = Nodes()
    EtcdSlowDisk.from_target(nodes, {"node": "cp2", "write_iops": 5, "located": target(version).to_dict()}).revert()
    [(node, command)] = nodes.sent
    assert node == "cp2" and f"echo '{limit_line(target(version), None)}' >" in command[-1]


def test_a_record_without_the_cgroup_is_reverted_as_nothing_done():
    nodes = Nodes()
    fault = EtcdSlowDisk.from_target(nodes, {"node": "cp1", "write_iops": 5})
    fault.revert()
    assert fault.located is None and nodes.sent == []


@pytest.mark.parametrize("iops", [0, 1001, -3, "5", 5.9, True, None])
def test_a_write_iops_that_is_not_an_integer_in_range_is_refused(iops):
    with pytest.raises(FaultError, match="write_iops: expected an integer from 1 to 1000"):
        EtcdSlowDisk(Nodes(), "cp1", iops)


@pytest.mark.parametrize("node", ["w1", "cp1; reboot", "--privileged", None, ["cp1"]])
def test_a_node_that_is_not_a_control_plane_node_of_the_cluster_is_refused(node):
    with pytest.raises(FaultError, match="node: expected a control-plane node of the cluster"):
        EtcdSlowDisk.from_target(Nodes(), {"node": node, "write_iops": 5, "located": target().to_dict()})


@pytest.mark.parametrize("field, value, says", [
    ("cgroup_file", "/etc/kubernetes/manifests/etcd.yaml", "a path under /sys/fs/cgroup/"),
    ("cgroup_file", "/sys/fs/cgroup/../../etc/blkio.throttle.write_iops_device", "a path under /sys/fs/cgroup/"),
    ("cgroup_file", "/sys/fs/cgroup/./blkio.throttle.write_iops_device", "a path under /sys/fs/cgroup/"),
    ("cgroup_file", "/sys/fs/cgroup/blkio/blkio.throttle.write_iops_device", "the container's own"),
    ("cgroup_file", FILES[2], "the container's own blkio.throttle.write_iops_device"),
    ("container", "x; reboot", "a container id"),
    ("container", {"id": ID}, "a container id"),
    ("device", "254:0; reboot", "MAJ:MIN"),
    ("version", 3, "1 or 2"),
    ("version", True, "1 or 2"),
    ("version", "1", "1 or 2"),
    ("line_before", "254:0 5\nrm -rf /", "sets no write limit"),
    ("line_before", "8:0 0", "sets no write limit"),
    ("line_before", "254:0 1", "sets no write limit"),
    ("line_before", "254:0 zzz=1", "sets no write limit"),
])
def test_a_forged_ledger_record_is_refused_before_anything_is_written(field, value, says):
    nodes = Nodes()
    record = {**target(1).to_dict(), field: value}
    with pytest.raises(FaultError, match=f"{field}: expected .*{says}"):
        EtcdSlowDisk.from_target(nodes, {"node": "cp1", "write_iops": 5, "located": record})
    assert nodes.sent == []


@pytest.mark.parametrize("located", [{}, "x", [1]])
def test_a_located_that_is_no_record_is_refused(located):
    with pytest.raises(FaultError, match="ledger record"):
        EtcdSlowDisk.from_target(Nodes(), {"node": "cp1", "write_iops": 5, "located": located})


def test_a_huge_record_gives_a_short_error():
    with pytest.raises(FaultError) as info:
        EtcdSlowDisk.from_target(Nodes(), {"node": "cp1", "write_iops": 5,
                                           "located": {**target().to_dict(), "container": "x" * 5_000_000}})
    assert len(str(info.value)) < 1000
