"""harness.core.proc.run: a required timeout, captured text, and one error naming the command, its exit
code and the tail of its stderr. Real child processes (this Python), no Docker."""

import subprocess
import sys

import pytest

from harness.core import proc


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_command_that_succeeds_returns_its_output_as_text() -> None:
    done = proc.run(py("import sys; print('out'); print('err', file=sys.stderr)"), timeout_seconds=30)
    assert (done.returncode, done.stdout, done.stderr) == (0, "out\n", "err\n")


def test_a_failure_names_the_command_its_exit_code_and_the_tail_of_stderr() -> None:
    code = "import sys; sys.stderr.write('x' * 5000 + 'the reason'); sys.exit(3)"
    with pytest.raises(proc.CommandFailed) as err:
        proc.run(py(code), timeout_seconds=30)
    message = str(err.value)
    assert message.startswith(f"{sys.executable} -c ") and " exited 3: ..." in message
    assert message.endswith("the reason") and len(message) < 1200  # the tail, not all 5000 characters
    assert err.value.returncode == 3 and isinstance(err.value, subprocess.CalledProcessError)


def test_stdout_stands_in_when_stderr_says_nothing() -> None:
    with pytest.raises(proc.CommandFailed, match=r" exited 1: only on stdout$"):
        proc.run(py("print('only on stdout'); raise SystemExit(1)"), timeout_seconds=30)


def test_check_false_hands_back_the_exit_code() -> None:
    done = proc.run(py("raise SystemExit(4)"), timeout_seconds=30, check=False)
    assert done.returncode == 4


def test_input_and_extra_env_reach_the_command() -> None:
    code = "import os, sys; print(sys.stdin.read() + os.environ['KDRILL_PROC_TEST'])"
    done = proc.run(py(code), timeout_seconds=30, input="in-", extra_env={"KDRILL_PROC_TEST": "env"})
    assert done.stdout == "in-env\n"


def test_a_command_running_too_long_is_killed_and_says_so() -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        proc.run(py("import time; time.sleep(30)"), timeout_seconds=0.5)


@pytest.mark.parametrize("timeout", [0, -1])
def test_a_timeout_is_required_and_positive(timeout: float) -> None:
    with pytest.raises(TypeError):
        proc.run(py("pass"))  # type: ignore[call-arg]
    with pytest.raises(ValueError):
        proc.run(py("pass"), timeout_seconds=timeout)


def test_output_to_a_log_file_interleaves_stdout_and_stderr(tmp_path) -> None:
    log = tmp_path / "step.log"
    code = "import sys; print('one', flush=True); print('two', file=sys.stderr, flush=True); sys.exit(2)"
    with log.open("ab") as out, pytest.raises(proc.CommandFailed) as err:
        proc.run(py(code), timeout_seconds=30, output=out)
    assert log.read_text() == "one\ntwo\n"
    assert str(err.value).endswith(" exited 2") and err.value.stderr is None
