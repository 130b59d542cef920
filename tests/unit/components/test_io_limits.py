"""The lines that set and remove a container's write-IOPS limit, per cgroup version, and what
counts as no limit (harness/components/io_limits.py), and the slow-disk fault's ledger record
(harness/faults/etcd_slow_disk.py)."""

from __future__ import annotations

import pytest

from harness.components.io_limits import IoLimitTarget, limit_line, unlimited
from harness.faults import FaultError
from harness.faults.etcd_slow_disk import EtcdSlowDisk


def target(version: int) -> IoLimitTarget:
    return IoLimitTarget(container="c" * 64, cgroup_file="/sys/fs/cgroup/x", device="254:0", version=version,
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
