"""Probes: background samplers that record a timestamped :class:`~harness.core.timeline.Sample`
at a fixed interval (0.5 s by default, so measured times are good to about a second).

Each probe is bounded: it stops by itself after ``max_seconds`` (and ``max_samples``) even if
nobody calls :meth:`Probe.stop`. One module per probe kind: ``http``, ``api``, ``pods``,
``incluster``, ``object_state``, ``image_pulls``, ``metric``, ``command``, ``admission``, ``events``, ``nodes``,
``endpoints``, ``etcd``, ``node_http``; ``host_pressure`` samples this machine's CPU pressure in
every drill, and ``blast_radius`` holds the webhook blast-radius drill's catalogue of writes.

The kinds a data-only scenario may declare (``runner.probes[].kind``) are plug-ins: the
``kdrill.probes`` entry points (pyproject.toml), kdrill's own and another package's alike
(:func:`probe_types`). Such a class sets

- ``kind``: the name a scenario uses;
- ``fields``: each field a scenario may give it (besides ``name`` and ``kind``) -> its JSON Schema
  (with ``x-expected``, the text an error shows), and ``required``: those it must have;
- ``in_probe_pod``: True only for ``incluster-http`` and ``incluster-dns``, whose calls run in
  the runner's probe pod;
  every other kind has ``for_scenario(spec, context)`` (``context``: a :class:`ProbeContext`)
  returning a probe with ``start()`` and ``stop() -> Timeline``;
- optionally ``problems(spec)``: what the schema cannot say, as (field, expected, got) tuples,
  checked when the scenario loads;
- optionally ``declared_problems(spec, declared)``: the same, from what the scenario's manifests
  declare (``declared``: a :class:`Declared`; the probe's ``object``, if any, is checked first).
"""

from __future__ import annotations

import abc
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from harness.core.timeline import Sample, Timeline
from harness.spec.manifests import Declared  # noqa: F401  a probe kind's declared_problems gets one
from harness.spec.plugins import PROBE_ENTRY_POINTS, probe_types  # noqa: F401

log = logging.getLogger("kdrill.probes")


class Probe(abc.ABC):
    """Samples :meth:`sample` every ``interval_seconds`` in a daemon thread until stopped,
    ``max_seconds`` have passed or ``max_samples`` were taken."""

    def __init__(self, name: str, interval_seconds: float = 0.5, max_seconds: float = 1800,
                 max_samples: int = 20000) -> None:
        self.name = name
        self.interval_seconds = interval_seconds
        self.max_seconds = max_seconds
        self.max_samples = max_samples
        self.timeline = Timeline(name)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"probe-{name}", daemon=True)

    @abc.abstractmethod
    def sample(self) -> Sample | None:
        """Take one sample. Exceptions are recorded as a failed sample; None records nothing (a
        probe whose read failing says nothing about what it watches)."""

    def start(self) -> "Probe":
        self._thread.start()
        return self

    def stop(self) -> Timeline:
        self._stopped.set()
        self._thread.join(timeout=30)
        return self.timeline

    def _loop(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        next_at = time.monotonic()
        taken = 0
        while not self._stopped.is_set() and time.monotonic() < deadline and taken < self.max_samples:
            started = time.time()
            try:
                result = self.sample()
            except Exception as exc:  # a probe never dies of what it measures
                result = Sample(t=started, ok=False, latency_seconds=time.time() - started,
                                detail=f"{type(exc).__name__}: {exc}"[:500])
            if result is not None:
                self.timeline.add(result)
            taken += 1
            next_at += self.interval_seconds
            # Pacing between samples, not synchronisation: stop() interrupts it at once.
            self._stopped.wait(max(0.0, next_at - time.monotonic()))
        if taken >= self.max_samples or time.monotonic() >= deadline:
            log.warning("probe %s reached its bound (%d samples, %.0f s) and stopped", self.name, taken,
                        self.max_seconds)


class Probes:
    """A set of probes started and stopped together; ``with Probes(...) as p:``."""

    def __init__(self, *probes: Probe) -> None:
        self.probes = list(probes)

    def add(self, probe: Probe) -> Probe:
        self.probes.append(probe)
        return probe

    def start(self) -> "Probes":
        for p in self.probes:
            p.start()
        return self

    def __enter__(self) -> "Probes":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> dict[str, Timeline]:
        return {p.name: p.stop() for p in self.probes}

    def timelines(self) -> dict[str, Timeline]:
        return {p.name: p.timeline for p in self.probes}

    def __getitem__(self, name: str) -> Probe:
        for p in self.probes:
            if p.name == name:
                return p
        raise KeyError(f"no probe {name!r} (probes: {', '.join(p.name for p in self.probes)})")


ENTRY_POINTS = PROBE_ENTRY_POINTS


@dataclass
class ProbeContext:
    """What a data probe is built with: the cluster, the drill's namespace, the scenario's
    sampling interval and the probes' bound (seconds), and ``ref(object_spec)``: a probe's
    ``object`` as a :class:`harness.kube.objects.Ref` (placeholders expanded)."""

    cluster: Any
    namespace: str
    interval_seconds: float
    max_seconds: float
    ref: Callable[[dict], Any]
