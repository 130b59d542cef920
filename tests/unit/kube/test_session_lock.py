"""One session per cluster: a second holder is refused with the first one's pid; a process the
holder starts inherits the right through the environment."""

import os
import subprocess
import sys

import pytest

from harness.kube.session_lock import ENV, ClusterBusy, SessionLock, lock_path

CHILD = """
import sys
from harness.kube.session_lock import ClusterBusy, SessionLock
try:
    SessionLock(sys.argv[1]).acquire()
    print("acquired")
except ClusterBusy as exc:
    print("busy:", exc)
"""


@pytest.fixture
def name(monkeypatch, tmp_path):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.delenv(ENV, raising=False)
    return f"unit-{os.getpid()}"


def run_child(name, env):
    return subprocess.run([sys.executable, "-c", CHILD, name], capture_output=True, text=True, env=env,
                          timeout=60).stdout.strip()


def test_second_session_is_refused_naming_the_holder(name, tmp_path):
    lock = SessionLock(name).acquire()
    try:
        env = {k: v for k, v in os.environ.items() if k != ENV} | {"TMPDIR": str(tmp_path)}
        out = run_child(name, env)
        assert out.startswith("busy:") and f"pid {os.getpid()}" in out
        # A process this session starts itself carries the lock's path and may go on.
        assert run_child(name, env | {ENV: str(lock_path(name))}) == "acquired"
    finally:
        lock.release()
    env = {k: v for k, v in os.environ.items() if k != ENV} | {"TMPDIR": str(tmp_path)}
    assert run_child(name, env) == "acquired"


def test_release_allows_a_new_holder_in_process(name):
    SessionLock(name).acquire().release()
    SessionLock(name).acquire().release()
    with pytest.raises(ClusterBusy):
        first = SessionLock(name).acquire()
        try:
            os.environ.pop(ENV)  # as if another process: no inherited right
            SessionLock(name).acquire()
        finally:
            first.release()
