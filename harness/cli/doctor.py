"""``kdrill doctor``: the prerequisites of a drill run, each with how to fix it."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.core import proc, resources
from harness.core.ledger import Ledger, owner_alive
from harness.kube.build_tools import VERSION_QUERY_SECONDS, missing_build_tools
from harness.kube.images import Build
from harness.kube.providers import ProviderError
from harness.kube.providers.kind import kind_binary

# This project's machines start Debian's Docker with this script, beside the checkout (none for
# an installed kdrill).
_CHECKOUT = resources.checkout()
DOCKER_UP = _CHECKOUT.parent / "shared" / "env" / "docker-up" if _CHECKOUT is not None else None
DOCKER_INFO_TIMEOUT_SECONDS = 20  # a daemon that accepts and never answers must not hang kdrill

MIN_MEMORY_GIB = 8  # the HA cluster idles at a few GiB; drills add load generators and probes
MIN_INOTIFY_INSTANCES = 512
MIN_INOTIFY_WATCHES = 524288


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True  # False: only the tests need it; a drill run does not


MIN_CPUS = 2  # measured figures (README) are from 2 cores; fewer makes the timed paths miss their bounds
CHROMIUM = Path("/usr/bin/chromium")  # Debian's, as tests/browser uses it


def check_cpus() -> Check:
    cpus = os.cpu_count() or 0
    return Check("cpus", cpus >= MIN_CPUS, f"{cpus}", f"the drills' bounds were measured on {MIN_CPUS} cores; "
                 f"give this machine at least {MIN_CPUS}")


def check_browser() -> Check:
    """Chromium, for the report's browser tests in ``python3 -m pytest`` (skipped without it)."""
    found = CHROMIUM.exists() and shutil.which(str(CHROMIUM)) is not None
    return Check("chromium (tests only)", found, str(CHROMIUM) if found else f"{CHROMIUM} not found",
                 "apt-get install -y chromium (without it the report's browser tests are skipped)", required=False)


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _docker_up() -> str:
    """The docker-up script's path as short as it gets from here (relative or absolute)."""
    return min(os.path.relpath(DOCKER_UP), str(DOCKER_UP), key=len)


def _docker_up_hint() -> str:
    if DOCKER_UP is not None and DOCKER_UP.exists():
        return f"on this project's machines: bash {_docker_up()}"
    return "e.g. sudo systemctl start docker"


def docker_problem(timeout_seconds: float = DOCKER_INFO_TIMEOUT_SECONDS) -> str | None:
    """One line saying why Docker cannot be used and how to fix it, or None when ``docker info``
    answers. Runs ``docker info`` once, bounded by ``timeout_seconds``; raises nothing."""
    return _docker_info(timeout_seconds)[0]


def _docker_info(timeout_seconds: float) -> tuple[str | None, str]:
    """``docker info`` once: (the problem line, or None; the engine's version, or "")."""
    if not shutil.which("docker"):
        install = (f"on this project's machines: bash {_docker_up()} installs and starts it"
                   if DOCKER_UP is not None and DOCKER_UP.exists() else "e.g. sudo apt-get install -y docker.io")
        return f"kdrill: Docker is not installed (no `docker` on PATH); install it ({install})", ""
    try:
        result = proc.run(["docker", "info", "--format", "{{.ServerVersion}}"], timeout_seconds=timeout_seconds,
                          check=False)
    except subprocess.TimeoutExpired:
        return (f"kdrill: Docker is not answering (docker info: no answer in {timeout_seconds:.0f} s); "
                f"restart it ({_docker_up_hint()})"), ""
    if result.returncode == 0:
        return None, result.stdout.strip()
    lines = [ln.strip() for ln in (result.stderr + "\n" + result.stdout).splitlines() if ln.strip()]
    error = lines[0].removeprefix("ERROR: ") if lines else f"exit {result.returncode}"
    if "permission denied" in error.lower():
        return (f"kdrill: Docker is running but not reachable by this user (docker info: {error}); "
                "run as root or join the docker group"), ""
    return f"kdrill: Docker is not running (docker info: {error}); start it ({_docker_up_hint()})", ""


def check_docker() -> Check:
    problem, version = _docker_info(DOCKER_INFO_TIMEOUT_SECONDS)
    if problem:
        detail, _, fix = problem.removeprefix("kdrill: ").rpartition("; ")
        return Check("docker", False, detail, fix)
    return Check("docker", True, f"engine {version}")


def check_kind() -> Check:
    try:
        path = kind_binary()
    except ProviderError as exc:
        return Check("kind", False, str(exc), "kdrill images build (kdrill run and pytest build it themselves)")
    version = proc.run([path, "version"], timeout_seconds=VERSION_QUERY_SECONDS, check=False).stdout.strip()
    return Check("kind", True, f"{path} ({version})")


def check_images() -> Check:
    build = Build()
    # What a kind cluster needs (images.TARGETS), not the images built only when asked (gatekeeper).
    missing = [step.name for step in build.order() if step.image and not step.done()]
    if missing:
        return Check("images", False, f"not built or out of date: {', '.join(missing)}",
                     "kdrill images build, or just kdrill run / python3 -m pytest, which build what is "
                     "missing (cold: about 15 to 20 minutes on 2 cores; cached afterwards)")
    return Check("images", True, f"node image {build.node_image} and the rest are built and current")


def check_memory() -> Check:
    total_kib = None
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            total_kib = int(line.split()[1])
    gib = (total_kib or 0) / 2**20
    ok = gib >= MIN_MEMORY_GIB
    return Check("memory", ok, f"{gib:.1f} GiB", f"the HA cluster needs at least {MIN_MEMORY_GIB} GiB")


def check_inotify() -> Check:
    instances = _read_int("/proc/sys/fs/inotify/max_user_instances")
    watches = _read_int("/proc/sys/fs/inotify/max_user_watches")
    ok = (instances or 0) >= MIN_INOTIFY_INSTANCES and (watches or 0) >= MIN_INOTIFY_WATCHES
    return Check("inotify", ok, f"max_user_instances={instances} max_user_watches={watches}",
                 f"sysctl -w fs.inotify.max_user_instances={MIN_INOTIFY_INSTANCES} "
                 f"fs.inotify.max_user_watches={MIN_INOTIFY_WATCHES} (many kubelets share one kernel)")


def check_build_tools() -> Check:
    """Go (1.24 or later) and debootstrap build the offline images."""
    missing = missing_build_tools()
    if missing:
        return Check("build tools", False, "missing: " + ", ".join(missing), "install: " + "; ".join(missing))
    return Check("build tools", True, f"{shutil.which('go')} and debootstrap")


def check_ledger() -> Check:
    ledger = Ledger()
    if os.environ.get("KDRILL_STATE_DIR") and not ledger.directory.parent.is_dir():
        # A mistyped state directory would otherwise read as an empty ledger and hide a crash's faults.
        return Check("fault ledger", False, f"KDRILL_STATE_DIR={os.environ['KDRILL_STATE_DIR']} is not a directory: "
                     "no ledger was read there", "set KDRILL_STATE_DIR to kdrill's state directory, or unset it")
    entries = ledger.entries()
    live = [e for e in entries if owner_alive(e)]
    if live and len(live) == len(entries):
        return Check("fault ledger", True, f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'} held by running "
                     f"kdrill (pid {', '.join(sorted({str(e.pid) for e in live}))}): a drill is in progress")
    if entries:
        return Check("fault ledger", False, f"{len(entries) - len(live)} fault(s) not reverted by a kdrill that is "
                     "no longer running: " + ", ".join(e.id for e in entries if e not in live), "kdrill recover")
    return Check("fault ledger", True, "empty: no fault is left injected")


def checks() -> list[Check]:
    out = [check_docker(), check_cpus(), check_memory(), check_inotify(), check_build_tools(), check_ledger(),
           check_browser()]
    if out[0].ok:
        out += [check_kind(), check_images()]
    return out
