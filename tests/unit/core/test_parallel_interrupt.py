"""A SIGTERM to a parallel run (pytest-xdist, harness/core/workers.py) waits for every worker's
``finally`` to end: xdist alone would tear the workers down and execnet would end one still
reverting 15 s later. Runs a real pytest -n 2 session with kdrill's plugin; no cluster."""

import os
import signal
import subprocess
import sys
import time

TEST = '''
import os, pathlib, time

def _hold(name):
    out = pathlib.Path(os.environ["KDRILL_TEST_OUT"])
    (out / f"{name}.started").write_text("")
    try:
        time.sleep(60)
    finally:
        time.sleep(20)  # a revert longer than execnet's 15 s
        (out / f"{name}.reverted").write_text("")

def test_a():
    _hold("a")

def test_b():
    _hold("b")
'''


def wait_for(predicate, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # bounded; polls a file, not a sleep standing in for it
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def test_sigterm_waits_for_every_workers_revert(tmp_path):
    (tmp_path / "test_hold.py").write_text(TEST)
    out, reports = tmp_path / "out", tmp_path / "reports"
    out.mkdir()
    env = {**os.environ, "KDRILL_TEST_OUT": str(out), "KDRILL_REPORTS": str(reports),
           "KDRILL_STATE_DIR": str(tmp_path / "state")}
    child = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "xdist", "-n", "2", "-p", "no:cacheprovider",
                              "-q", "test_hold.py"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_for(lambda: (out / "a.started").exists() and (out / "b.started").exists(), 60)
        child.send_signal(signal.SIGTERM)
        output, _ = child.communicate(timeout=90)
    finally:
        if child.poll() is None:
            child.kill()
    assert (out / "a.reverted").exists() and (out / "b.reverted").exists(), output
    assert "waiting for every worker to revert" in output
    assert not reports.exists() or not any(reports.iterdir())  # no drill planned: no run left behind
