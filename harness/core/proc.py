"""Running a program on this machine: one wrapper, one error.

Every command kdrill runs to get an answer (``docker``, ``kind``, ``git``, ``go``, ``etcdutl``)
and every image build step goes through :func:`run`:

* a timeout in seconds is required: no call waits forever on a hung Docker daemon or build;
* output is captured as text (or, for a long build step, appended to a log file as it comes);
* a non-zero exit raises :class:`CommandFailed`, whose message names the command, its exit code
  and the tail of its stderr. Callers that read the exit code themselves pass ``check=False``
  and get the ``CompletedProcess``. A caller with an error type of its own (ProviderError,
  FaultError, RegistryError, BuildError) catches CommandFailed and raises that;
* a command still running after its timeout is killed and ``subprocess.TimeoutExpired`` is
  raised, as subprocess does: it has no exit code, and callers tell the two apart (``kdrill
  doctor`` says Docker is "not answering" rather than "not running").

Left outside, on purpose: ``kdrill run`` starting pytest (``harness.cli.run_until_reverted``).
Its output goes straight to the terminal, it has no time limit (a drill takes as long as it
takes, and killing it would skip its fault's revert), and it needs a ``Popen`` of its own: it
keeps waiting through Ctrl-C while pytest reverts the fault and passes SIGTERM on.
Commands in a node container go through :meth:`harness.kube.providers.Cluster.node_exec`, which uses
:func:`run`.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from typing import IO, Mapping, Sequence

TAIL_CHARS = 1000  # how much of a failed command's stderr its CommandFailed message quotes


class CommandFailed(subprocess.CalledProcessError):
    """A command exited non-zero. ``cmd``, ``returncode``, ``stdout`` and ``stderr`` are as
    captured (``stdout``/``stderr`` None when the output went to a log file). A
    ``subprocess.CalledProcessError``, so handlers of that (or of ``SubprocessError``) catch it.
    """

    def __str__(self) -> str:
        said = f"{shlex.join(str(a) for a in self.cmd)} exited {self.returncode}"
        if self.returncode < 0:
            said += f" (killed by signal {-self.returncode})"
        detail = _tail(self.stderr) or _tail(self.stdout)
        return f"{said}: {detail}" if detail else said


def _tail(text: str | bytes | None, chars: int = TAIL_CHARS) -> str:
    """The last ``chars`` characters of ``text``, stripped, marked with ``...`` when cut;
    "" for None or blank text. Raises nothing."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    text = (text or "").strip()
    return text if len(text) <= chars else "..." + text[-chars:].lstrip()


def run(cmd: Sequence[str | os.PathLike], *, timeout_seconds: float, check: bool = True,
        input: str | None = None, extra_env: Mapping[str, str] | None = None,
        output: IO[bytes] | None = None) -> subprocess.CompletedProcess:
    """Run ``cmd`` (a program and its arguments, no shell) and wait at most ``timeout_seconds``
    seconds for it; returns the ``CompletedProcess``, its ``stdout`` and ``stderr`` as text.

    ``check``: raise CommandFailed on a non-zero exit (False: return it, the caller reads
    ``returncode``). ``input``: text written to its stdin (None: stdin is inherited).
    ``extra_env``: variables added to this process's environment for it. ``output``: a file
    opened for binary writing that gets its stdout and stderr, interleaved, as they come (a
    build step's log); nothing is captured then.

    Raises CommandFailed (naming the command, the exit code and the tail of stderr, else of
    stdout) when ``check`` and it exits non-zero; ``subprocess.TimeoutExpired`` when it runs
    longer than ``timeout_seconds`` (it is killed first; processes it started are not); OSError
    (e.g. FileNotFoundError) when the program cannot be started; ValueError for a
    ``timeout_seconds`` that is not above 0.
    """
    if not timeout_seconds > 0:
        raise ValueError(f"timeout_seconds must be above 0, not {timeout_seconds!r}")
    args = [str(a) for a in cmd]
    env = {**os.environ, **extra_env} if extra_env else None
    if output is None:
        streams = {"capture_output": True}
    else:
        streams = {"stdout": output, "stderr": subprocess.STDOUT}
    result = subprocess.run(args, input=input, text=True, env=env, timeout=timeout_seconds,
                            **streams)
    if check and result.returncode != 0:
        raise CommandFailed(result.returncode, args, result.stdout, result.stderr)
    return result
