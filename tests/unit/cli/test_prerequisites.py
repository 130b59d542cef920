"""What a newcomer's `kdrill run` / `pytest` does before a kind cluster: Docker answering, the
offline images built (with progress and the time left), and one clear line when either fails.

No Docker and no real build here: `docker info` is faked at the subprocess boundary, and the
build graph is replaced by small steps that run shell commands in a temporary cache.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from harness.cli import doctor
from harness.kube import build_tools, images
from harness.kube.build_progress import COLD_SECONDS, Progress, expected_seconds, format_seconds, seconds_left
from harness.kube.build_steps import BuildError, Step, record_seconds, recorded_seconds, run
from harness.kube.images import ensure_built


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KDRILL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


# --- the estimate of the time left ---------------------------------------------------------------

def test_lanes_run_side_by_side_and_the_image_steps_after_them():
    expected = {"go-kubernetes": 840, "go-tools": 720, "rootfs-node": 150, "rootfs-net": 100,
                "components": 70, "node": 60}
    # The longest lane (Kubernetes, 840 s) counts, then the image steps one after another.
    assert seconds_left(list(expected), expected) == 840 + 70 + 60


def test_the_rootfs_lane_adds_up_its_debootstraps_and_can_be_the_longest():
    expected = {"go-tools": 300, "rootfs-node": 150, "rootfs-net": 107, "rootfs-toolbox": 159, "node": 60}
    assert seconds_left(list(expected), expected) == 150 + 107 + 159 + 60


def test_time_already_spent_on_running_steps_is_taken_off():
    expected = {"go-kubernetes": 840, "go-tools": 720, "node": 60}
    elapsed = {"go-kubernetes": 600, "go-tools": 600}
    assert seconds_left(list(expected), expected, elapsed) == 240 + 60
    # A step running longer than its estimate counts as done soon, never as negative time.
    assert seconds_left(["go-kubernetes", "node"], expected, {"go-kubernetes": 900}) == 60


def test_nothing_left_is_zero_seconds():
    assert seconds_left([], {"node": 60}) == 0


def test_the_cold_figures_give_the_measured_cold_build_of_15_to_18_minutes():
    minutes = seconds_left(list(COLD_SECONDS), COLD_SECONDS) / 60
    assert 15 <= minutes <= 18


def test_a_recorded_step_time_wins_over_the_cold_figure():
    expected = expected_seconds(["go-kubernetes", "node"], {"go-kubernetes": 95.0, "rootfs-net": 3.0})
    assert expected == {"go-kubernetes": 95.0, "node": COLD_SECONDS["node"]}


def test_step_times_are_recorded_in_the_cache_for_the_next_estimate(cache):
    assert recorded_seconds() == {}
    record_seconds("go-tools", 701.26)
    record_seconds("node", 61)
    assert recorded_seconds() == {"go-tools": 701.3, "node": 61.0}
    (cache / "durations.json").write_text("not json")
    assert recorded_seconds() == {}


@pytest.mark.parametrize("seconds, text", [(0, "0 s"), (45.4, "45 s"), (89, "89 s"), (90, "2 min"),
                                           (840, "14 min"), (-5, "0 s")])
def test_durations_read_as_a_person_would_say_them(seconds, text):
    assert format_seconds(seconds) == text


def test_progress_lines_say_what_started_finished_how_long_and_what_is_left(tmp_path):
    now = [1000.0]
    lines: list[str] = []
    expected = {"go-kubernetes": 840, "go-tools": 720, "node": 60}
    progress = Progress(list(expected), expected, lines.append, clock=lambda: now[0])
    progress.start("go-kubernetes", tmp_path / "go-kubernetes.log")
    progress.start("go-tools", tmp_path / "go-tools.log")
    now[0] += 700
    progress.built("go-tools", 700)
    now[0] += 60
    progress.heartbeat()
    assert lines[0] == f"[ 0:00] go-kubernetes: building (usually 14 min); log: {tmp_path / 'go-kubernetes.log'}"
    # go-kubernetes has 140 s of its 840 left, then node's 60 s.
    assert lines[2] == "[11:40] go-tools: built in 700 s; 2 step(s) left, about 3 min left"
    assert lines[3] == "[12:40] building go-kubernetes (13 min so far); 2 step(s) left, about 2 min left"
    progress.cached("go-kubernetes")  # built meanwhile by another build: no line, not left
    progress.built("node", 58)
    assert lines[-1].endswith("node: built in 58 s; nothing left")


def test_no_heartbeat_while_nothing_runs():
    lines: list[str] = []
    Progress(["node"], {"node": 60}, lines.append).heartbeat()
    assert lines == []


# --- a failed or impossible build: one clear error -------------------------------------------------

def test_a_failed_step_names_itself_and_its_log_file(cache):
    step = Step("fake-step", [], lambda st: run(["sh", "-c", "echo compiler says no; exit 3"], st.log_file))
    lines: list[str] = []
    with pytest.raises(BuildError) as err:
        step.ensure(Progress(["fake-step"], {"fake-step": 10}, lines.append))
    message = str(err.value)
    assert message.splitlines()[0].startswith("image build step fake-step failed: ")
    assert f"log: {step.log_file}" in message.splitlines()[0]
    assert "exit 3" in message and "compiler says no" in message  # the log's tail says why
    assert "fake-step: FAILED after" in lines[-1] and str(step.log_file) in lines[-1]
    assert not (step.out / ".complete").exists()


def test_a_step_failing_outside_a_command_is_a_build_error_too(cache):
    def build(st: Step) -> None:
        (st.out / "missing-dir" / "binary").read_bytes()

    with pytest.raises(BuildError, match=r"^image build step copy-step failed: .*No such file.*; log: "):
        Step("copy-step", [], build).ensure()


def test_a_build_that_cannot_run_says_what_to_install_before_building_anything(cache, monkeypatch):
    monkeypatch.setattr(images.Build, "missing", lambda self, targets=None: ["rootfs-node", "go-kubernetes"])
    monkeypatch.setattr(build_tools.shutil, "which", lambda name: None)  # neither go nor debootstrap
    monkeypatch.setattr(images.Build, "build_all", lambda *a, **k: pytest.fail("must not build"))
    with pytest.raises(BuildError) as err:
        ensure_built(progress=lambda line: None)
    message = str(err.value)
    assert "not built (rootfs-node, go-kubernetes) and cannot be built here" in message
    assert "go 1.24 or later (https://go.dev/doc/install)" in message
    assert "debootstrap (apt-get install -y debootstrap)" in message


def test_only_the_tools_the_missing_steps_need_are_required(monkeypatch):
    monkeypatch.setattr(build_tools.shutil, "which", lambda name: None)
    assert build_tools.missing_build_tools(go=False, debootstrap=True) == ["debootstrap (apt-get install -y debootstrap)"]
    assert build_tools.missing_build_tools(go=False, debootstrap=False) == []


def test_doctor_fails_on_one_core_and_notes_a_missing_chromium_without_failing(monkeypatch, capsys):
    from harness.cli import main

    passing = doctor.Check("x", True, "fine")
    for name in ("check_docker", "check_memory", "check_inotify", "check_build_tools", "check_ledger",
                 "check_kind", "check_images"):
        monkeypatch.setattr(doctor, name, lambda: passing)
    monkeypatch.setattr(doctor, "CHROMIUM", doctor.Path("/nonexistent/chromium"))
    monkeypatch.setattr(doctor.os, "cpu_count", lambda: 2)
    assert main(["doctor"]) == 0  # chromium only noted: a drill run does not need it
    out = capsys.readouterr().out
    assert "note chromium (tests only): /nonexistent/chromium not found" in out and "apt-get install -y chromium" in out
    monkeypatch.setattr(doctor.os, "cpu_count", lambda: 1)
    assert main(["doctor"]) == 1
    assert "FAIL cpus: 1" in capsys.readouterr().out


# --- ensure_built on a small graph: builds what is missing, then costs one line ----------------------

def _small_graph(self):
    """Three steps writing files (no Docker, no Go): a debootstrap lane step and two after it."""
    def write(text):
        return lambda st: run(["sh", "-c", f"echo {text} > {st.out / 'out'}"], st.log_file)

    s = {"rootfs-node": Step("rootfs-node", [], write("rootfs"))}
    s["node-base"] = Step("node-base", [], write("base"), deps=[s["rootfs-node"]])
    s["node"] = Step("node", [], write("node"), deps=[s["node-base"]])
    return s


def test_ensure_built_builds_what_is_missing_then_only_says_it_is_built(cache, monkeypatch):
    monkeypatch.setattr(images.Build, "_graph", _small_graph)
    monkeypatch.setattr(images, "missing_build_tools", lambda **needs: [])
    lines: list[str] = []
    spent = ensure_built(progress=lines.append, targets=["node"])
    assert sorted(spent) == ["node", "node-base", "rootfs-node"]
    assert lines[0].startswith("kdrill: building 3 kind image step(s) not built yet: rootfs-node, node-base, node; "
                               "about ")
    assert "estimate from cold-build figures" in lines[0]
    built = [line for line in lines if ": built in " in line]
    assert [line.split("] ")[1].split(":")[0] for line in built] == ["rootfs-node", "node-base", "node"]
    left = format_seconds(COLD_SECONDS["node-base"] + COLD_SECONDS["node"])
    assert built[0].endswith(f"2 step(s) left, about {left} left")
    assert lines[-1].startswith("kdrill: kind images built in ")
    assert set(json.loads((cache / "durations.json").read_text())) == {"rootfs-node", "node-base", "node"}

    lines.clear()
    assert ensure_built(progress=lines.append, targets=["node"]) == {}
    assert lines == [f"kdrill: kind images built and current (node image {images.Build().node_image})"]


def test_a_second_estimate_comes_from_the_recorded_step_times(cache, monkeypatch):
    monkeypatch.setattr(images.Build, "_graph", _small_graph)
    monkeypatch.setattr(images, "missing_build_tools", lambda **needs: [])
    record_seconds("rootfs-node", 30)
    record_seconds("node-base", 20)
    record_seconds("node", 10)
    lines: list[str] = []
    ensure_built(progress=lines.append, targets=["node"])
    assert "about 60 s (estimate from the last build's step times)" in lines[0]


# --- Docker not running: one line, how to start it -------------------------------------------------

def _fake_docker(monkeypatch, result=None, raises=None, which="/usr/bin/docker"):
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append((cmd, kwargs))
        if raises:
            raise raises
        return result

    monkeypatch.setattr(doctor.shutil, "which", lambda name: which if name == "docker" else None)
    monkeypatch.setattr(doctor.subprocess, "run", fake_run)
    return calls


def test_docker_not_running_is_one_line_with_the_error_and_how_to_start_it(monkeypatch):
    error = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
    calls = _fake_docker(monkeypatch, subprocess.CompletedProcess(["docker"], 1, "", error + "\nmore detail\n"))
    line = doctor.docker_problem()
    assert "\n" not in line
    assert line.startswith(f"kdrill: Docker is not running (docker info: {error}); start it (")
    if doctor.DOCKER_UP.exists():
        assert line.endswith("docker-up)") and "on this project's machines: bash " in line
    else:
        assert line.endswith("(e.g. sudo systemctl start docker)")
    # Asked once, of `docker info`, bounded by a timeout.
    assert len(calls) == 1 and calls[0][0][:2] == ["docker", "info"]
    assert calls[0][1]["timeout"] == doctor.DOCKER_INFO_TIMEOUT_SECONDS


def test_docker_hanging_is_one_line_too(monkeypatch):
    _fake_docker(monkeypatch, raises=subprocess.TimeoutExpired(["docker", "info"], 20))
    line = doctor.docker_problem(timeout_seconds=20)
    assert line.startswith("kdrill: Docker is not answering (docker info: no answer in 20 s); restart it (")


def test_docker_refusing_this_user_says_so_rather_than_not_running(monkeypatch):
    error = ("permission denied while trying to connect to the Docker daemon socket at "
             "unix:///var/run/docker.sock")
    _fake_docker(monkeypatch, subprocess.CompletedProcess(["docker"], 1, "", error))
    assert doctor.docker_problem() == (f"kdrill: Docker is running but not reachable by this user "
                                       f"(docker info: {error}); run as root or join the docker group")


def test_no_docker_binary_says_how_to_install_it(monkeypatch):
    calls = _fake_docker(monkeypatch, which=None)
    line = doctor.docker_problem()
    assert line.startswith("kdrill: Docker is not installed (no `docker` on PATH); install it (")
    assert calls == []


def test_docker_answering_is_no_problem_and_doctor_shows_its_version(monkeypatch):
    _fake_docker(monkeypatch, subprocess.CompletedProcess(["docker"], 0, "20.10.24+dfsg1\n", ""))
    assert doctor.docker_problem() is None
    assert doctor.check_docker() == doctor.Check("docker", True, "engine 20.10.24+dfsg1")


def test_doctor_and_kdrill_give_the_same_docker_message(monkeypatch):
    error = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
    _fake_docker(monkeypatch, subprocess.CompletedProcess(["docker"], 1, "", error))
    check = doctor.check_docker()
    assert not check.ok
    assert f"kdrill: {check.detail}; {check.fix}" == doctor.docker_problem()


def test_kdrill_commands_stop_with_that_line_before_using_docker(monkeypatch, capsys):
    from harness import cli

    error = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
    _fake_docker(monkeypatch, subprocess.CompletedProcess(["docker"], 1, "", error))
    monkeypatch.setattr(images, "ensure_built", lambda **kw: pytest.fail("must not build without Docker"))
    for argv in (["images", "build"], ["images", "status"], ["cluster", "create"], ["cluster", "status"]):
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        assert exit_.value.code == doctor.docker_problem()


def test_toolbox_image_and_pull_policy_are_checked_settings():
    """Issue 15: the drills' image and pull policy are settings, refused with what was expected."""
    from harness.kube.workloads import toolbox_problem

    assert toolbox_problem(None, None) is None
    assert toolbox_problem("registry.example.com:5000/platform/kdrill-toolbox:v0.1.0", "IfNotPresent") is None
    assert toolbox_problem("docker.io/kdrill/toolbox@sha256:" + "a" * 64, "Always") is None
    problem = toolbox_problem("Bad Image", None)
    assert problem.startswith("KDRILL_TOOLBOX_IMAGE / --toolbox-image: expected an image reference") and "'Bad Image'" in problem
    problem = toolbox_problem(None, "never")
    assert "expected one of Always, IfNotPresent, Never, got 'never'" in problem


@pytest.mark.parametrize("image", ["Kdrill/toolbox:v1", "kdrill/toolbox:t\u00e4g\u00e9", "..:1/kdrill/toolbox",
                                   "host.io:99999/kdrill/toolbox", "r.io/" + "a" * 300,
                                   "registry.example.com/kdrill/toolbox:v0.1.0\n"])
def test_malformed_toolbox_images_a_review_found_are_refused(image):
    from harness.kube.workloads import toolbox_problem

    assert toolbox_problem(image, None) is not None


def test_the_toolbox_environment_is_checked_by_kdrill_run_before_anything(monkeypatch, capsys):
    from harness.cli import main

    monkeypatch.setenv("KDRILL_TOOLBOX_PULL_POLICY", "never")
    assert main(["run", "--plan", "secrets-at-rest"]) == 2
    assert "expected one of Always, IfNotPresent, Never, got 'never'" in capsys.readouterr().err


def test_an_empty_scenarios_directory_is_a_clear_error(tmp_path, capsys):
    from harness.cli import main

    assert main(["run", "--plan", "--scenarios-dir", str(tmp_path)]) == 2
    assert "expected at least one scenario file" in capsys.readouterr().err


def test_doctor_escapes_a_state_directory_that_would_rewrite_the_terminal(monkeypatch, capsys, tmp_path):
    from harness.cli import main

    monkeypatch.setenv("KDRILL_STATE_DIR", f"{tmp_path}/typo\x1b[2J\x1b]0;owned\x07")
    for name in ("check_docker", "check_memory", "check_inotify", "check_build_tools", "check_kind", "check_images"):
        monkeypatch.setattr(doctor, name, lambda: doctor.Check("x", True, "fine"))
    assert main(["doctor"]) == 1  # a state directory that does not exist hides no ledger
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "typo\\x1b[2J\\x1b]0;owned\\x07 is not a directory" in out
