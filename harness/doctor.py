"""``kdrill doctor``: the prerequisites of a drill run, each with how to fix it."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

MIN_MEMORY_GIB = 8  # the HA cluster idles at a few GiB; drills add load generators and probes
MIN_INOTIFY_INSTANCES = 512
MIN_INOTIFY_WATCHES = 524288


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def check_docker() -> Check:
    if not shutil.which("docker"):
        return Check("docker", False, "no docker CLI", "install Docker, or on this project's machines run ../shared/env/docker-up")
    result = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True)
    if result.returncode != 0:
        return Check("docker", False, "the Docker engine does not answer",
                     "start it: ../shared/env/docker-up (or `systemctl start docker`)")
    return Check("docker", True, f"engine {result.stdout.strip()}")


def check_kind() -> Check:
    from harness.providers import ProviderError
    from harness.providers.kind import kind_binary

    try:
        path = kind_binary()
    except ProviderError as exc:
        return Check("kind", False, str(exc), "kdrill images build")
    version = subprocess.run([path, "version"], capture_output=True, text=True).stdout.strip()
    return Check("kind", True, f"{path} ({version})")


def check_images() -> Check:
    from harness.images import Build

    build = Build()
    missing = [s["step"] for s in build.status() if s["image"] and not s["built"]]
    if missing:
        return Check("images", False, f"not built or out of date: {', '.join(missing)}",
                     "kdrill images build (cold: about 15 to 20 minutes on 2 cores; cached afterwards)")
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
    missing = []
    go = shutil.which("go")
    if not go:
        missing.append("go (1.24 or later: https://go.dev/doc/install)")
    else:
        version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True).stdout.strip()
        parts = version.removeprefix("go").split(".")
        if len(parts) < 2 or (int(parts[0]), int(parts[1].split("rc")[0])) < (1, 24):
            missing.append(f"go 1.24 or later (found {version})")
    if not shutil.which("debootstrap"):
        missing.append("debootstrap (apt-get install -y debootstrap)")
    if missing:
        return Check("build tools", False, "missing: " + ", ".join(missing), "install: " + "; ".join(missing))
    return Check("build tools", True, f"{go} and debootstrap")


def check_ledger() -> Check:
    from harness.ledger import Ledger

    entries = Ledger().entries()
    if entries:
        return Check("fault ledger", False, f"{len(entries)} fault(s) not reverted: "
                     + ", ".join(e.id for e in entries), "kdrill recover")
    return Check("fault ledger", True, "empty: no fault is left injected")


def checks() -> list[Check]:
    out = [check_docker(), check_memory(), check_inotify(), check_build_tools(), check_ledger()]
    if out[0].ok:
        out += [check_kind(), check_images()]
    return out
