"""A running container's write-IOPS limit on the disk that holds one of its paths, set through its
cgroup on its node.

The limit counts write requests the container's tasks submit to the block device, which includes
the writes an ``fdatasync`` makes the caller wait for (cgroup v1: buffered writes the kernel's own
writeback flushes are not charged to the container, so only synchronous writes are held to it).

- cgroup v1: ``blkio.throttle.write_iops_device``, one ``MAJ:MIN N`` line per limited device;
  writing ``MAJ:MIN 0`` removes the device's limit.
- cgroup v2: ``io.max``, ``MAJ:MIN rbps=.. wbps=.. riops=.. wiops=N``; ``wiops=max`` removes it.

A limit is set on a whole disk, never on a partition: the path's partition is resolved to its disk.

Sources: Linux "Block IO Controller"
(https://docs.kernel.org/admin-guide/cgroup-v1/blkio-controller.html, "Throttling/Upper limit
policy") and "Control Group v2" (https://docs.kernel.org/admin-guide/cgroup-v2.html#io, "io.max").
"""

from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass
from typing import Any

from harness.kube.providers import Cluster, ProviderError

# The exit statuses of the locating script, and what each means.
NO_CONTAINER, NOT_A_DISK, NO_CGROUP_FILE = 3, 4, 5
LOCATE_ERRORS = {NO_CONTAINER: "no running container of that name",
                 NOT_A_DISK: "the path is not on a block device (an overlay or tmpfs has no disk to limit)",
                 NO_CGROUP_FILE: "no writable write-IOPS file in the container's cgroup (on cgroup v2 the io "
                                 "controller must be enabled for the pod's slice)"}

DEVICE = re.compile(r"[0-9]+:[0-9]+")
CONTAINER_ID = re.compile(r"[0-9a-f]{64}")
# A cgroup v1 line ("MAJ:MIN N") or a v2 io.max line ("MAJ:MIN rbps=.. wbps=.. riops=.. wiops=..").
LIMIT_LINE = re.compile(r"[0-9]+:[0-9]+( [0-9]+|( (rbps|wbps|riops|wiops)=([0-9]+|max))+)")


@dataclass
class IoLimitTarget:
    """Where a container's write-IOPS limit is: its id, the cgroup file on its node, the disk
    (``MAJ:MIN``), the cgroup version (1 or 2), and the file's line for that disk before kdrill
    wrote to it ("" when the disk had no limit)."""

    container: str
    cgroup_file: str
    device: str
    version: int
    line_before: str

    def __post_init__(self) -> None:
        """Raises ValueError (field, expected, got) on a target that is no such limit, so a record
        read back (``kdrill recover``) can only ever name one container's limit file, whose line
        for the disk set no write limit before."""
        for field_name, ok, what in self._checks():
            if not ok:
                got = repr(getattr(self, field_name))
                raise ValueError(f"{field_name}: expected {what}, got {got[:200]}")

    def _checks(self) -> list[tuple[str, Any, str]]:
        limit_file = {1: "blkio.throttle.write_iops_device", 2: "io.max"}.get(self.version) \
            if type(self.version) is int else None
        container = self.container if isinstance(self.container, str) else ""
        path = self.cgroup_file if isinstance(self.cgroup_file, str) else ""
        parts = path.split("/")
        return [("container", CONTAINER_ID.fullmatch(container), "a container id (64 hex digits)"),
                ("device", isinstance(self.device, str) and DEVICE.fullmatch(self.device), "MAJ:MIN"),
                ("version", limit_file is not None, "1 or 2"),
                ("cgroup_file", path.startswith("/sys/fs/cgroup/") and not {"", ".", ".."} & set(parts[1:])
                 and limit_file is not None and parts[-1] == limit_file and container and container in parts[-2],
                 f"a path under /sys/fs/cgroup/ to the container's own {limit_file or 'limit file'}"),
                ("line_before", isinstance(self.line_before, str) and len(self.line_before) <= 200
                 and unlimited(self.line_before) and (not self.line_before or (
                     LIMIT_LINE.fullmatch(self.line_before) and self.line_before.split()[0] == self.device)),
                 "empty, or a line for the device that sets no write limit")]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "IoLimitTarget":
        """Raises KeyError or ValueError on a record without these fields, or with others' types."""
        return cls(container=data["container"], cgroup_file=data["cgroup_file"], device=data["device"],
                   version=data["version"], line_before=data["line_before"])


def _locate_script(container_name: str, path: str) -> str:
    name, where = shlex.quote(f"^{container_name}$"), shlex.quote(path)
    return (f"id=$(crictl ps --name {name} --state Running -q | head -1); [ -n \"$id\" ] || exit {NO_CONTAINER}\n"
            "pid=$(crictl inspect -o go-template --template '{{.info.pid}}' \"$id\")\n"
            f"mm=$(findmnt -n -o MAJ:MIN -T {where} | head -1 | tr -d ' ')\n"
            f"sys=$(readlink -f /sys/dev/block/$mm) && [ -e \"$sys/dev\" ] || exit {NOT_A_DISK}\n"
            "[ -e \"$sys/partition\" ] && mm=$(cat \"$(dirname \"$sys\")/dev\")\n"
            "v1=$(awk -F: '$2==\"blkio\"{print $3}' /proc/$pid/cgroup)\n"
            "if [ -n \"$v1\" ]; then f=/sys/fs/cgroup/blkio$v1/blkio.throttle.write_iops_device; v=1\n"
            "else f=/sys/fs/cgroup$(awk -F: '$1==\"0\"{print $3}' /proc/$pid/cgroup)/io.max; v=2; fi\n"
            f"[ -w \"$f\" ] || exit {NO_CGROUP_FILE}\n"
            "printf '%s\\n%s\\n%s\\n%s\\n' \"$id\" \"$f\" \"$mm\" \"$v\"; grep \"^$mm \" \"$f\" || true\n")


def locate(cluster: Cluster, node: str, container_name: str, path: str) -> IoLimitTarget:
    """The write-IOPS limit of the running container ``container_name`` (a CRI container name,
    e.g. ``etcd``) on node ``node``, for the disk holding ``path`` (a path on the node). Changes
    nothing. Raises LookupError with the reason when there is nothing to limit, ProviderError when
    the node does not answer."""
    result = cluster.node_exec(node, ["bash", "-c", _locate_script(container_name, path)], timeout_seconds=30,
                               check=False, read_only=True)
    if result.returncode in LOCATE_ERRORS:
        raise LookupError(f"on node {node}, container {container_name}, path {path}: "
                          f"{LOCATE_ERRORS[result.returncode]}")
    lines = result.stdout.splitlines()
    if result.returncode != 0 or len(lines) < 4:
        raise ProviderError(f"on node {node}: locating {container_name}'s cgroup exited {result.returncode}: "
                            f"{(result.stderr or result.stdout).strip()[:300]}")
    return IoLimitTarget(container=lines[0], cgroup_file=lines[1], device=lines[2], version=int(lines[3]),
                         line_before=lines[4].strip() if len(lines) > 4 else "")


def limit_line(target: IoLimitTarget, write_iops: int | None) -> str:
    """The line that sets ``write_iops`` on the target's disk, or removes the limit (None)."""
    if target.version == 1:
        return f"{target.device} {write_iops or 0}"
    return f"{target.device} wiops={write_iops if write_iops is not None else 'max'}"


def write_limit(cluster: Cluster, node: str, target: IoLimitTarget, line: str) -> bool:
    """Write ``line`` to the target's cgroup file. False when that cgroup is gone (its container
    ended: nothing is limited any more); raises ProviderError when the write fails."""
    script = (f"f={shlex.quote(target.cgroup_file)}; [ -e \"$f\" ] || exit {NO_CONTAINER}; "
              f"echo {shlex.quote(line)} > \"$f\"")
    result = cluster.node_exec(node, ["bash", "-c", script], timeout_seconds=30, check=False)
    if result.returncode == NO_CONTAINER:
        return False
    if result.returncode != 0:
        raise ProviderError(f"on node {node}: writing {line!r} to {target.cgroup_file} exited {result.returncode}: "
                            f"{(result.stderr or result.stdout).strip()[:300]}")
    return True


def current_line(cluster: Cluster, node: str, target: IoLimitTarget) -> str | None:
    """The target's cgroup file's line for its disk now ("" when it has none; v2 lists only limited
    disks, v1 only non-zero limits), or None when that cgroup is gone. Raises ProviderError."""
    script = (f"f={shlex.quote(target.cgroup_file)}; [ -e \"$f\" ] || exit {NO_CONTAINER}; "
              f"grep {shlex.quote('^' + target.device + ' ')} \"$f\" || true")
    result = cluster.node_exec(node, ["bash", "-c", script], timeout_seconds=30, check=False, read_only=True)
    if result.returncode == NO_CONTAINER:
        return None
    if result.returncode != 0:
        raise ProviderError(f"on node {node}: reading {target.cgroup_file} exited {result.returncode}")
    return result.stdout.strip()


def unlimited(line: str) -> bool:
    """Whether a cgroup file's line for a disk sets no write-IOPS limit."""
    return not line or "wiops=max" in line or line.split()[-1] == "0"
