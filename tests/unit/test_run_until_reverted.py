"""``kdrill run`` waits for pytest through interrupts, and a SIGINT that only kdrill got (``kill
-INT``, a cancelled CI job: no terminal sent it to the whole process group) is passed on to pytest
as SIGTERM, so the drill still reverts its fault and workers get it too. A real child process
stands in for pytest: it exits 0 once it has had a SIGTERM, 3 if none came within 5 s."""

from __future__ import annotations

import signal
import sys
import threading

import pytest

from harness import cli

CHILD = ("import signal, sys, threading\n"
         "got = threading.Event()\n"
         "signal.signal(signal.SIGTERM, lambda *a: got.set())\n"
         "print('ready', flush=True)\n"
         "sys.exit(0 if got.wait(5) else 3)\n")


@pytest.mark.parametrize("from_terminal, exit_code", [(False, 0), (True, 3)])
def test_a_sigint_kdrill_alone_got_is_passed_on_as_sigterm(monkeypatch, capfd, from_terminal, exit_code):
    monkeypatch.setattr(cli, "terminal_interrupts_group", lambda: from_terminal)
    # The interrupt arrives while kdrill waits for the child, in the main thread, as `kill -INT`
    # gives it to a one-thread kdrill (raise_signal in the timer's thread would wait for the child).
    timer = threading.Timer(1.0, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    timer.start()
    try:
        code = cli.run_until_reverted([sys.executable, "-c", CHILD])
    finally:
        timer.cancel()
    # Passed on when no terminal sent it to the group; otherwise the terminal already did (here
    # nobody did, so the child times out: kdrill sent nothing of its own).
    assert code == exit_code
    assert "interrupted; waiting for the drill to revert its fault" in capfd.readouterr().err


def test_with_no_controlling_terminal_a_ctrl_c_cannot_have_reached_the_group(monkeypatch):
    import os

    def no_tty(path, flags):
        raise OSError(6, "No such device or address")

    monkeypatch.setattr(os, "open", no_tty)
    assert cli.terminal_interrupts_group() is False
