"""One cached step of the offline image build (harness/kube/images.py has the graph): its
content key (SHA-256 of its inputs, see :func:`content_key`), its output under ``$KDRILL_CACHE``
(default ``~/.cache/kdrill``) or the Docker image labelled with that key, the command runner
with its log, and the seconds each step took when last built here."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness.core import proc, resources
from harness.core.files import write_text_atomic
from harness.kube.build_progress import Progress

log = logging.getLogger("kdrill.images")

LABEL = "org.kdrill.content-key"
# A bound for one build command, not an estimate: far above the longest step measured (Kubernetes,
# ~14 min cold), so it only stops a command that hangs (e.g. a fetch that never completes), which
# would otherwise hold `kdrill run` and the pytest plugin forever.
STEP_TIMEOUT_SECONDS = 2 * 3600
DOCKER_QUERY_SECONDS = 60  # `docker image inspect`: seconds on a busy machine


class BuildError(RuntimeError):
    """A build step failed, or cannot run here; the message names the step and where its log
    is, or what is missing and how to get it."""


def cache_dir() -> Path:
    return Path(os.environ.get("KDRILL_CACHE", Path.home() / ".cache" / "kdrill"))


def _files_under(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file())


def content_key(name: str, inputs: list[Path], extra: list[str]) -> str:
    """SHA-256 over a step's name, input files (path and bytes) and extra strings; 16 hex digits."""
    digest = hashlib.sha256(name.encode())
    for root in inputs:
        for f in _files_under(root):
            # "clusters/images/...": the same in a checkout and an installed wheel (harness.core.resources)
            digest.update(str(f.relative_to(resources.data_root())).encode() + b"\0")
            digest.update(f.read_bytes() + b"\0")
    for item in extra:
        digest.update(item.encode() + b"\0")
    return digest.hexdigest()[:16]


def run(cmd: list[str], log_file: Path, extra_env: dict[str, str] | None = None) -> None:
    """Run a build command, ``extra_env`` added to its environment, with its output appended to
    ``log_file`` as it comes, for at most STEP_TIMEOUT_SECONDS seconds. Raises BuildError (exit
    code, log file, the log's last lines) when it fails, subprocess.TimeoutExpired when it runs
    longer."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        try:
            proc.run(cmd, timeout_seconds=STEP_TIMEOUT_SECONDS, output=out, extra_env=extra_env)
            return
        except proc.CommandFailed as exc:
            returncode = exc.returncode
    tail = log_file.read_text(errors="replace").splitlines()[-25:]
    raise BuildError(f"{' '.join(cmd[:3])} failed (exit {returncode}); log: {log_file}\n" + "\n".join(tail))


_durations_lock = threading.Lock()


def recorded_seconds() -> dict[str, float]:
    """Seconds each step took the last time it was built here (step name -> seconds; empty
    when nothing was recorded or the file is unreadable)."""
    try:
        data = json.loads((cache_dir() / "durations.json").read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items() if isinstance(v, (int, float))} if isinstance(data, dict) else {}


def record_seconds(name: str, seconds: float) -> None:
    """Remember that step ``name`` took ``seconds`` to build (for the next build's estimate)."""
    with _durations_lock:  # the build lanes finish steps from several threads
        data = recorded_seconds()
        data[name] = round(seconds, 1)
        cache_dir().mkdir(parents=True, exist_ok=True)
        write_text_atomic(cache_dir() / "durations.json", json.dumps(data, indent=1, sort_keys=True) + "\n")


def docker_image_key(tag: str) -> str | None:
    result = proc.run(
        ["docker", "image", "inspect", "--format", "{{ index .Config.Labels \"" + LABEL + "\" }}", tag],
        timeout_seconds=DOCKER_QUERY_SECONDS, check=False)
    return result.stdout.strip() if result.returncode == 0 else None


@dataclass
class Step:
    name: str
    inputs: list[Path]
    build: Callable[["Step"], None]
    deps: list["Step"] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    image: str | None = None  # set for steps whose output is a Docker image

    @property
    def key(self) -> str:
        return content_key(self.name, self.inputs, self.extra + [d.key for d in self.deps])

    @property
    def out(self) -> Path:
        return cache_dir() / "steps" / f"{self.name}-{self.key}"

    @property
    def log_file(self) -> Path:
        return cache_dir() / "logs" / f"{self.name}-{self.key}.log"

    def done(self) -> bool:
        if self.image:
            return docker_image_key(self.image) == self.key
        return (self.out / ".complete").exists()

    def ensure(self, progress: Progress | None = None) -> float:
        """Build unless cached; returns the seconds spent (0.0 when cached). Raises BuildError
        naming this step and its log file."""
        # With progress lines on the terminal, the log repeats them only at debug level.
        level = logging.DEBUG if progress else logging.INFO
        if self.done():
            log.log(level, "%-16s cached (%s)", self.name, self.key)
            if progress:
                progress.cached(self.name)
            return 0.0
        log.log(level, "%-16s building (%s), log: %s", self.name, self.key, self.log_file)
        if progress:
            progress.start(self.name, self.log_file)
        started = time.monotonic()
        try:
            if not self.image:
                shutil.rmtree(self.out, ignore_errors=True)
                self.out.mkdir(parents=True)
            self.build(self)
            if not self.image:
                (self.out / ".complete").write_text(self.key)
        except (BuildError, OSError, subprocess.SubprocessError) as exc:
            if progress:
                progress.failed(self.name, time.monotonic() - started, self.log_file)
            detail = str(exc) if isinstance(exc, BuildError) else f"{exc}; log: {self.log_file}"
            raise BuildError(f"image build step {self.name} failed: {detail}") from None
        spent = time.monotonic() - started
        log.log(level, "%-16s built in %.0f s", self.name, spent)
        record_seconds(self.name, spent)
        if progress:
            progress.built(self.name, spent)
        return spent
