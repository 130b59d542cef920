"""``kdrill run`` waits for pytest through interrupts and never signals it on a SIGINT: at a
terminal, Ctrl-C reached pytest already; with no terminal, kdrill cannot tell whether the SIGINT
reached pytest too (``timeout -s INT`` signals the whole group), so it says how to stop the drills
(SIGTERM, which it passes on) rather than make one interrupt two. A real child process stands in
for pytest: it exits 3 when no signal reached it within 4 s, 0 on a SIGTERM."""

from __future__ import annotations

import signal
import sys
import threading

import pytest

from harness.cli import pytest_process

CHILD = ("import signal, sys, threading\n"
         "got = threading.Event()\n"
         "signal.signal(signal.SIGTERM, lambda *a: got.set())\n"
         "signal.signal(signal.SIGINT, lambda *a: sys.exit(4))\n"
         "sys.exit(0 if got.wait(4) else 3)\n")


def interrupt_main_thread_in(seconds: float, signum: int) -> threading.Timer:
    # In the main thread, as `kill` gives it to a one-thread kdrill (raise_signal in the timer's
    # own thread would be handled only once the child has ended).
    timer = threading.Timer(seconds, signal.pthread_kill, (threading.main_thread().ident, signum))
    timer.start()
    return timer


@pytest.fixture
def sigint_handled():
    """SIGINT raises KeyboardInterrupt in this process, whatever disposition the test run inherited
    (a background job of a non-interactive shell starts with SIGINT ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("from_terminal, says", [
    (True, "kdrill: interrupted; waiting for the drill to revert its fault"),
    (False, "if it was sent to kdrill alone the drills go on to their normal end; to stop them now, send SIGTERM"),
])
def test_a_sigint_is_never_passed_on_and_the_message_says_what_happens(monkeypatch, capfd, sigint_handled,
                                                                       from_terminal, says):
    monkeypatch.setattr(pytest_process, "terminal_interrupts_group", lambda: from_terminal)
    timer = interrupt_main_thread_in(1.5, signal.SIGINT)
    try:
        code = pytest_process.run_until_reverted([sys.executable, "-c", CHILD])
    finally:
        timer.cancel()
    assert code == 3  # waited for the child's own end; no signal of kdrill's reached it
    assert says in capfd.readouterr().err


def test_started_with_sigint_ignored_it_says_how_to_stop_the_drills(monkeypatch, capfd):
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        timer = interrupt_main_thread_in(1.5, signal.SIGTERM)
        try:
            assert pytest_process.run_until_reverted([sys.executable, "-c", CHILD]) == 0
        finally:
            timer.cancel()
    finally:
        signal.signal(signal.SIGINT, previous)
    err = capfd.readouterr().err
    assert "started with SIGINT ignored" in err and "kill -TERM" in err, err


def test_with_sigint_handled_nothing_is_said_about_it(capfd, sigint_handled):
    timer = interrupt_main_thread_in(1.5, signal.SIGTERM)
    try:
        assert pytest_process.run_until_reverted([sys.executable, "-c", CHILD]) == 0
    finally:
        timer.cancel()
    assert "SIGINT ignored" not in capfd.readouterr().err


def test_a_sigterm_is_passed_on(monkeypatch):
    monkeypatch.setattr(pytest_process, "terminal_interrupts_group", lambda: False)
    timer = interrupt_main_thread_in(1.5, signal.SIGTERM)
    try:
        assert pytest_process.run_until_reverted([sys.executable, "-c", CHILD]) == 0
    finally:
        timer.cancel()


def test_with_no_controlling_terminal_a_sigint_is_not_taken_for_a_ctrl_c(monkeypatch):
    import os

    def no_tty(path, flags):
        raise OSError(6, "No such device or address")

    monkeypatch.setattr(os, "open", no_tty)
    assert pytest_process.terminal_interrupts_group() is False
