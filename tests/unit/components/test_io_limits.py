"""The lines that set and remove a container's write-IOPS limit, per cgroup version, and what
counts as no limit (harness/components/io_limits.py), and the slow-disk fault's ledger record
(harness/faults/etcd_slow_disk.py)."""

from __future__ import annotations

import pytest

from harness.components.io_limits import IoLimitTarget, limit_line, unlimited
from harness.faults import FaultError
from harness.faults.etcd_slow_disk import EtcdSlowDisk


FILES = {1: "/sys/fs/cgroup/blkio/kubelet.slice/cri-containerd-c.scope/blkio.throttle.write_iops_device",
         2: "/sys/fs/cgroup/kubelet.slice/cri-containerd-c.scope/io.max"}


def target(version: int) -> IoLimitTarget:
    return IoLimitTarget(container="c" * 64, cgroup_file=FILES[version], device="254:0", version=version,
                         line_before="")


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
    fault = EtcdSlowDisk(None, "kdrill-ha-control-plane2", 5, target(1).to_dict())
    again = EtcdSlowDisk.from_target(None, fault.target())
    assert again.target() == fault.target() and again.located == target(1)
    assert fault.target()["method"] == "blkio-write-iops" and fault.where() == ["kdrill-ha-control-plane2"]


def test_a_record_without_the_cgroup_is_reverted_as_nothing_done():
    fault = EtcdSlowDisk.from_target(None, {"node": "cp", "write_iops": 5})
    assert fault.located is None
    fault.revert()
    fault.verify_reverted()


@pytest.mark.parametrize("iops", [0, 1001, -3])
def test_a_write_iops_out_of_range_is_refused_before_anything_is_touched(iops):
    with pytest.raises(FaultError, match="write_iops: expected 1 to 1000"):
        EtcdSlowDisk(None, "cp", iops)


@pytest.mark.parametrize("field, value, says", [
    ("cgroup_file", "/etc/kubernetes/manifests/etcd.yaml", "a path under /sys/fs/cgroup/"),
    ("cgroup_file", "/sys/fs/cgroup/../../etc/blkio.throttle.write_iops_device", "a path under /sys/fs/cgroup/"),
    ("cgroup_file", "/sys/fs/cgroup/kubelet.slice/io.max", "ending /blkio.throttle.write_iops_device"),
    ("device", "254:0; reboot", "MAJ:MIN"),
    ("version", 3, "1 or 2"),
    ("line_before", "254:0 5\nrm -rf /", "a limit line for the device"),
    ("line_before", "8:0 5", "a limit line for the device"),
])
def test_a_forged_ledger_record_is_refused_before_anything_is_written(field, value, says):
    record = {**target(1).to_dict(), field: value}
    with pytest.raises(FaultError, match=f"{field}: expected .*{says}"):
        EtcdSlowDisk.from_target(None, {"node": "cp", "write_iops": 5, "located": record})


def test_a_limit_the_disk_had_before_is_a_valid_record():
    for version, line in ((1, "254:0 7"), (2, "254:0 rbps=max wbps=1048576 riops=max wiops=max")):
        IoLimitTarget(**{**target(version).to_dict(), "line_before": line})
