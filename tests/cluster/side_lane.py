"""A second kind cluster for the SIGKILL recovery cases whose faults stay inside their drill's
namespace, its declared objects and its registry containers (:data:`ON_SIDE_CLUSTER`).

The SIGKILL matrix times nothing: it asserts what ``kdrill recover`` leaves, not how fast anything
happens. Run one case after another on the session's HA cluster, they would add up. So these cases
run here, in a background thread, one at a time, while the node-level cases run on the HA cluster:
each cluster still has one kdrill session at a time (harness/kube/session_lock.py), and no fault of one
cluster reaches the other.

The cluster has one control-plane node and two workers (registry-outage and serial-image-pull
place pods on two workers; worker-node-loss freezes one) and no host port mappings (none of these scenarios uses one), so it
runs beside the HA cluster.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from pathlib import Path
from typing import Callable

from harness.kube.providers.kind import BackgroundCreation, KindProvider

log = logging.getLogger(__name__)

# The scenarios whose SIGKILL cases run here: their faults touch nothing outside their drill's
# namespace, its declared objects and its registry containers, the side cluster's own CoreDNS
# (the DNS drills), API Priority and Fairness objects (api-overload) and workers (worker-node-loss
# freezes one of its two), or a drill cluster of their own (secrets-at-rest's encrypted case); they
# need no host port and no second control-plane node. In the presubmit tier (one case per fault
# kind, harness/plugin/tiers.py) that is 8 cases here against 4 on the HA cluster.
ON_SIDE_CLUSTER = ("webhook-outage", "registry-outage", "dns-saturation", "dns-ndots", "apiservice-unavailable",
                   "webhook-on-pod-delete", "serial-image-pull", "service-blackhole", "api-overload",
                   "coredns-scaled-to-zero", "worker-node-loss", "secrets-at-rest")

NAME = "kdrill-side"
CONFIG = f"""kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
name: {NAME}
nodes:
  - role: control-plane
  - role: worker
  - role: worker
kubeadmConfigPatches:
  - |
    kind: KubeletConfiguration
    failCgroupV1: false
"""


_early: tuple[KindProvider, BackgroundCreation] | None = None  # start_early's creation, until a lane takes it


def start_early(work: Path) -> None:
    """Start the side cluster's creation now, in a child process (while the tests that need no
    cluster run, beside the HA cluster's); the first :class:`SideLane` takes it. A leftover
    cluster of that name is deleted first. Never raises: on any failure the lane creates it."""
    global _early
    try:
        config = work / "side.yaml"
        config.write_text(CONFIG)
        provider = KindProvider(config)
        if provider.exists():  # left by an interrupted earlier session
            provider.delete()
        _early = (provider, provider.create_in_background())
    except Exception as exc:
        log.info("side cluster not created early: %s", exc)


def drop_early() -> None:
    """Stop and delete an early creation no lane took (its tests did not run). Never raises."""
    global _early
    if _early is None:
        return
    provider, creation = _early
    _early = None
    try:
        creation.stop()
        creation.close()
        if provider.exists():
            provider.delete()
    except BaseException as exc:  # a second Ctrl-C too: say what is left
        log.warning("could not delete the side cluster %s (kind delete cluster --name %s): %s", NAME, NAME, exc)


class SideLane:
    """``cases``: case id -> the arguments after ``(cluster, work directory)`` of ``run_case``.
    :meth:`start` creates the side cluster in a child process and then runs every case on it in a
    thread, in order; :meth:`result` waits for one case and raises what it raised (or why it never
    ran); :meth:`close` lets the running case finish (its own ``finally`` recovers what it broke),
    skips the rest and deletes the cluster."""

    def __init__(self, work: Path, run_case: Callable[..., None], cases: dict[str, tuple]):
        self.work, self.run_case, self.cases = work, run_case, cases
        self._outcomes: dict[str, BaseException | None] = {}
        self._done = {case: threading.Event() for case in cases}
        self._closing = threading.Event()
        self.settled = threading.Event()  # the side cluster's creation ended, made or not
        self._thread: threading.Thread | None = None
        self._creation: BackgroundCreation | None = None
        self.provider: KindProvider | None = None

    def start(self) -> None:
        if not self.cases:
            self.settled.set()
        if not self.cases or self._thread is not None:
            return
        # Each case's directory is made here, in pytest's thread.
        self._dirs = {case: self.work / case for case in self.cases}
        for directory in self._dirs.values():
            directory.mkdir()
        self._thread = threading.Thread(target=self._run, name="sigkill side lane", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        global _early
        try:
            seconds = None
            if _early is not None:  # started while the tests that need no cluster ran
                (self.provider, self._creation), _early = _early, None
                try:
                    seconds = self._creation.result()
                except Exception as exc:  # made again below, from nothing
                    log.warning("the side cluster's early creation failed (%s); creating it again", exc)
                    self._creation.close()
            if seconds is None:
                config = self.work / "side.yaml"
                config.write_text(CONFIG)
                self.provider = KindProvider(config)
                if self.provider.exists():  # left by an interrupted earlier session or a failed creation
                    self.provider.delete()
                self._creation = self.provider.create_in_background()
                seconds = self._creation.result()
            log.info("side cluster %s created in %.0f s", NAME, seconds)
            cluster = self.provider.cluster()
        except BaseException as exc:
            self._end_all(RuntimeError(f"the side cluster {NAME} could not be made: {exc}"))
            return
        finally:
            self.settled.set()
        for case, args in self.cases.items():
            if self._closing.is_set():
                break
            started = time.monotonic()
            try:
                self.run_case(cluster, self._dirs[case], *args)
                self._outcomes[case] = None
            except BaseException as exc:  # an assertion of the case, reported by its test
                exc.side_lane_traceback = traceback.format_exc()
                self._outcomes[case] = exc
            log.info("side cluster case %s ended in %.0f s", case, time.monotonic() - started)
            self._done[case].set()
        self._end_all(RuntimeError("not run: the side lane was closed before it"))

    def _end_all(self, why: BaseException) -> None:
        for case, done in self._done.items():
            if not done.is_set():
                self._outcomes[case] = why
                done.set()

    def result(self, case: str) -> None:
        """Wait for ``case`` (every case bounds its own waits) and raise what it raised."""
        self._done[case].wait()
        outcome = self._outcomes[case]
        if outcome is not None:
            trace = getattr(outcome, "side_lane_traceback", "")
            raise AssertionError(f"on the side cluster {NAME}: {outcome}\n{trace}") from outcome

    def close(self) -> None:
        """Never raises: what could not be deleted is logged."""
        self._closing.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if self._creation is not None:
                self._creation.stop()
                self._creation.close()
            if self.provider is not None and self.provider.exists():
                self.provider.delete()
        except Exception as exc:
            log.warning("could not delete the side cluster %s: %s", NAME, exc)
