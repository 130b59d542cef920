"""How long the offline image build takes and what it says meanwhile: each step's cold-build
seconds, the estimate of the time left from them or from the times the last build recorded
(harness.kube.build_steps.recorded_seconds; the build's lanes run side by side), and the progress
lines of one build (:class:`Progress`)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable

# Seconds each step takes in a cold build, measured on this project's 2-core machine (Go 1.24,
# Debian mirror over the network). The three lanes of build_all run side by side: the two Go
# builds share the cores (Kubernetes ~14 min while the tools take ~12 min), and the debootstraps
# (node 2.5 min, net 107 s, toolbox 159 s, haproxy 101 s) run one after another meanwhile. The
# image steps run after them, one at a time: components, preload and node 44 to 78 s each on a
# fresh Docker engine, the small imports and builds a few seconds. Whole cold build: about 15 to
# 18 minutes (10 minutes with Go's own build cache warm). A step's time from the last build that
# ran it (durations.json in the cache) takes precedence. go-etcdutl (built after go-tools, from
# the same etcd modules and dependency versions, so from Go's build cache) took 1 s warm; 60 s
# allows for the few packages only etcdutl has. go-gatekeeper (on request only) took 169 s, its
# downloads included, with the kind images' Go module and build caches already warm.
COLD_SECONDS = {
    "go-kubernetes": 840, "go-tools": 720, "go-etcdutl": 60,
    "rootfs-node": 150, "rootfs-net": 107, "rootfs-toolbox": 159, "rootfs-haproxy": 101,
    "base-net": 5, "node-base": 10, "components": 44, "toolbox": 10, "preload": 60, "node": 78,
    "haproxy": 5, "go-gatekeeper": 170, "gatekeeper": 2,
}
HEARTBEAT_SECONDS = 60  # a progress line at least this often while a long Go build runs


def default_step(name: str) -> str:
    """The default build's step a release's step does the work of ("go-kubernetes-v1.34.4" ->
    "go-kubernetes", "kubernetes-v1.34.4" -> "node"), or ``name`` itself. Its Go step also builds
    etcd and CoreDNS, less than the tools step does."""
    base, _, version = name.rpartition("-v")
    if not version[:1].isdigit():
        return name
    return "node" if base == "kubernetes" else base


def expected_seconds(names: list[str], recorded: dict[str, float]) -> dict[str, float]:
    """Estimated seconds per step: its ``recorded`` time (see recorded_seconds), else its
    COLD_SECONDS figure, or that of the default step it does the work of (60 s for a step with
    neither)."""
    return {n: recorded.get(n, COLD_SECONDS.get(default_step(n), 60.0)) for n in names}


def lane_of(name: str) -> str | None:
    """The parallel lane a step runs in (see Build.build_all), or None for the steps that run
    one at a time after the lanes."""
    if name in ("go-kubernetes", "go-tools"):
        return name
    if name == "go-etcdutl":  # after go-tools, whose Go build cache it mostly reuses
        return "go-tools"
    if name == "go-gatekeeper":
        return name
    return "rootfs" if name.startswith("rootfs-") else None


def seconds_left(todo: list[str], expected: dict[str, float], elapsed: dict[str, float] | None = None) -> float:
    """Estimated seconds until the steps in ``todo`` are built.

    ``expected``: seconds per step; ``elapsed``: seconds already spent on the steps running now.
    The lanes run side by side (the longest one counts), the other steps one after another after
    them. A running step that overran its estimate counts as 0 s left.
    """
    elapsed = elapsed or {}

    def left(name: str) -> float:
        return max(expected[name] - elapsed.get(name, 0.0), 0.0)

    lanes: dict[str, float] = {}
    after = 0.0
    for name in todo:
        lane = lane_of(name)
        if lane is None:
            after += left(name)
        else:
            lanes[lane] = lanes.get(lane, 0.0) + left(name)
    return max(lanes.values(), default=0.0) + after


def format_seconds(seconds: float) -> str:
    """``45 s``, ``3 min``, ``14 min``: how long, for a person (rounded, never negative)."""
    seconds = max(seconds, 0.0)
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


class Progress:
    """Progress lines of one build, passed to ``say``: a step starts (with its log), a step is
    built (its seconds, the steps left, the estimated time left), and while steps run a line
    every ``heartbeat_seconds``. A context manager: the heartbeat runs inside the ``with``.
    Thread-safe: the build lanes report from their own threads."""

    def __init__(self, todo: list[str], expected: dict[str, float], say: Callable[[str], None],
                 heartbeat_seconds: float = HEARTBEAT_SECONDS, clock: Callable[[], float] = time.monotonic):
        self.todo = list(todo)  # not built yet, in build order
        self.expected = expected
        self.say = say
        self.clock = clock
        self.heartbeat_seconds = heartbeat_seconds
        self.started_at = clock()
        self.running: dict[str, float] = {}  # step -> clock() when it started
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def left_seconds(self) -> float:
        now = self.clock()
        return seconds_left(self.todo, self.expected, {n: now - t for n, t in self.running.items()})

    def _line(self, text: str) -> None:
        minutes, seconds = divmod(int(self.clock() - self.started_at), 60)
        self.say(f"[{minutes:2d}:{seconds:02d}] {text}")

    def _left(self) -> str:
        if not self.todo:
            return "nothing left"
        return f"{len(self.todo)} step(s) left, about {format_seconds(self.left_seconds())} left"

    def start(self, name: str, log_file: Path) -> None:
        with self._lock:
            self.running[name] = self.clock()
            self._line(f"{name}: building (usually {format_seconds(self.expected.get(name, 0))}); log: {log_file}")

    def built(self, name: str, seconds: float) -> None:
        with self._lock:
            self.running.pop(name, None)
            if name in self.todo:
                self.todo.remove(name)
            self._line(f"{name}: built in {seconds:.0f} s; {self._left()}")

    def cached(self, name: str) -> None:
        """``name`` turned out to be built already (e.g. by another build meanwhile)."""
        with self._lock:
            if name in self.todo:
                self.todo.remove(name)

    def failed(self, name: str, seconds: float, log_file: Path) -> None:
        with self._lock:
            self.running.pop(name, None)
            still = f"; waiting for {', '.join(self.running)} to stop" if self.running else ""
            self._line(f"{name}: FAILED after {seconds:.0f} s; log: {log_file}{still}")

    def heartbeat(self) -> None:
        with self._lock:
            if self.running:
                now = self.clock()
                doing = ", ".join(f"{n} ({format_seconds(now - t)} so far)" for n, t in self.running.items())
                self._line(f"building {doing}; {self._left()}")

    def __enter__(self) -> "Progress":
        def beat() -> None:
            while not self._stop.wait(self.heartbeat_seconds):
                self.heartbeat()

        self._beat = threading.Thread(target=beat, name="kdrill-build-progress", daemon=True)
        self._beat.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._beat.join()  # no heartbeat line after the build's last line
