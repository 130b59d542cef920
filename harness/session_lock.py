"""One kdrill session per cluster at a time.

Two sessions on one cluster break each other's drills and evidence: the second deletes the
first's vital-signs probe pod and drill namespaces, and faults overlap. The pytest session that
drives a kind cluster holds an exclusive ``flock`` on ``<tmp>/kdrill-cluster-<name>.lock`` (the
cluster is a machine-wide resource, so the lock is too) for its whole length. A kdrill process it
starts itself (the recovery tests run ``kdrill run`` inside a session) inherits the right to the
cluster through ``$KDRILL_CLUSTER_LOCK``; anything else is refused with the holder's pid.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

ENV = "KDRILL_CLUSTER_LOCK"


class ClusterBusy(RuntimeError):
    """Another kdrill session holds the cluster; the message names its pid."""


def lock_path(cluster: str) -> Path:
    return Path(tempfile.gettempdir()) / f"kdrill-cluster-{cluster}.lock"


class SessionLock:
    """``acquire()`` the cluster for this process (or confirm an inherited hold); ``release()``.
    Raises ClusterBusy when another session holds it."""

    def __init__(self, cluster: str) -> None:
        self.cluster, self.path = cluster, lock_path(cluster)
        self._fd: int | None = None

    def acquire(self) -> "SessionLock":
        if os.environ.get(ENV) == str(self.path):
            return self  # started by the session that holds it
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ClusterBusy(f"another kdrill session (pid {holder}) is running drills on cluster {self.cluster}; "
                              f"wait for it to end, or use another cluster (--cluster-name); lock: {self.path}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd
        os.environ[ENV] = str(self.path)  # kdrill processes this session starts may use the cluster
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.environ.pop(ENV, None)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
