"""The drills' pytest process of ``kdrill run``: started in kdrill's own directory and waited for,
however often Ctrl-C is pressed, until it has reverted its faults."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from harness.core import resources


def run_until_reverted(cmd: list[str]) -> int:
    """Run pytest and wait for it, however often Ctrl-C is pressed; returns its exit status.

    Ctrl-C at the terminal reaches pytest too (same process group); it reverts the fault in its
    ``finally``. The parent must not kill it meanwhile (``subprocess.call`` would, 0.25 s after an
    interrupt), so it only says what is happening and keeps waiting. A SIGINT with no terminal
    behind it may have been sent to kdrill alone (``kill -INT PID``) or to the whole group
    (``timeout -s INT``, a CI runner): kdrill cannot tell which, and passing it on would make the
    second case two interrupts, so it says how to stop the drills instead. SIGTERM is passed on
    as SIGTERM. The one command not run through :func:`harness.core.proc.run`: no time limit, output
    to the terminal.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # Inherited (a background job of a non-interactive shell): Ctrl-C reaches neither kdrill nor pytest.
        print(f"kdrill: started with SIGINT ignored, so Ctrl-C cannot stop the drills; to stop them (each "
              f"fault reverted), send SIGTERM: kill -TERM {os.getpid()}", file=sys.stderr)
    proc = subprocess.Popen(cmd, cwd=resources.data_root())
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: proc.send_signal(signal.SIGTERM))
    try:
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:
                if terminal_interrupts_group():
                    print("kdrill: interrupted; waiting for the drill to revert its fault", file=sys.stderr)
                else:
                    print(f"kdrill: interrupted (SIGINT, no terminal); if it was sent to kdrill alone the drills "
                          f"go on to their normal end; to stop them now, send SIGTERM: kill -TERM {os.getpid()}",
                          file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous)


def terminal_interrupts_group() -> bool:
    """Whether a SIGINT is a Ctrl-C that reached pytest too: kdrill has a controlling terminal and its
    process group (pytest's too) is that terminal's foreground group, to which the terminal sends it.
    False with no terminal (CI, nohup, a pipe from cron), or when kdrill runs in the background."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False  # no controlling terminal
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)
