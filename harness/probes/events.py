"""Events probe: one object's Events of one reason, as the component that recorded them reported
them (e.g. the kubelet's ``Pulling`` when it asks the runtime for an image, ``BackOff``,
``Killing``; the scheduler's ``FailedScheduling``).

Each Event becomes a sample at its first time (and one more at its last time when it was
recorded more than once), ``ok`` True, ``detail`` its message: ``first_success_seconds`` is then
when the reason was first recorded, and ``success_ratio`` is not what to ask of it (there are no
failed samples to count against). Event times are whole seconds, cut down: an event stamped
12:00:07 was recorded between 12:00:07 and 12:00:08. Each sample is placed at the end of its
second (the latest it can have been recorded), so a time measured from something this machine
did (an action) is never shorter than the truth, and at most a second longer; placed at the
stamp, an event recorded 0.9 s after an action would seem to come before it (measured: a
Pulling event stamped 0.095 s before the scale-out that caused it). The Events are read once, when the probe stops (before the drill's
objects are deleted), by the object's name; a read that fails is one failed sample with
``labels["error"]``.

Source: "Events", https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/event-v1/
"""

from __future__ import annotations

import time
from typing import Any

from harness.core.timeline import Sample, Timeline
from harness.kube.objects import Ref
from harness.kube.providers import Cluster
from harness.probes.api import failed
from harness.probes.pods import pod_events
from harness.spec.scenario import OBJECT_REF_SCHEMA

# An Event's time has whole seconds (module docstring).
EVENT_TIME_RESOLUTION_SECONDS = 1.0


def reason_samples(events: list[dict], reason: str) -> list[Sample]:
    """Samples (see the module docstring) of the events of ``reason`` in
    :func:`harness.probes.pods.pod_events` output, each at the end of the second it is stamped with."""
    samples, end = [], EVENT_TIME_RESOLUTION_SECONDS
    for event in events:
        if event["reason"] != reason or event.get("first") is None:
            continue
        samples.append(Sample(t=event["first"] + end, ok=True, detail=event["message"]))
        if (event.get("count") or 1) > 1 and event.get("last") and event["last"] != event["first"]:
            samples.append(Sample(t=event["last"] + end, ok=True, detail=f"(x{event['count']}) {event['message']}"))
    return sorted(samples, key=lambda s: s.t)


class PodEventsProbe:
    """A probe of one Pod's Events, read once when :meth:`stop` is called (the Events say what
    the component that recorded them saw, not a clock this machine kept); :meth:`samples` turns
    them into samples. ``start`` and ``stop`` as for a :class:`harness.probes.Probe`."""

    kind = ""  # a subclass's probe kind
    in_probe_pod = False

    @classmethod
    def problems(cls, spec: dict[str, Any]) -> list[tuple[str, str, str]]:
        kind = (spec.get("object") or {}).get("kind")
        return [] if kind == "Pod" else [("object.kind", f"Pod: an {cls.kind} probe reads a Pod's Events", repr(kind))]

    def __init__(self, name: str, cluster: Cluster, ref: Ref) -> None:
        if ref.kind != "Pod":
            raise ValueError(f"an {self.kind} probe watches a Pod, got a {ref.kind}")
        self.name, self.cluster, self.ref = name, cluster, ref
        self.timeline = Timeline(name)

    def samples(self, events: list[dict]) -> list[Sample]:
        raise NotImplementedError

    def start(self) -> "PodEventsProbe":
        return self

    def stop(self) -> Timeline:
        started = time.time()
        try:
            samples = self.samples(pod_events(self.cluster, self.ref.namespace, self.ref.name))
        except Exception as exc:  # recorded as what it is (classified as the API probes do), never as an event
            samples = [failed(started, exc)]
        for sample in samples:
            self.timeline.add(sample)
        return self.timeline


class EventsProbe(PodEventsProbe):
    """Probe kind ``events``: the Events of reason ``reason`` of Pod ``ref`` as samples (module
    docstring)."""

    kind = "events"
    required = ("object", "reason")
    fields = {"object": OBJECT_REF_SCHEMA,
              "reason": {"type": "string", "pattern": "^[A-Z][A-Za-z]{1,62}$",
                         "x-expected": "an Event reason, e.g. Pulling, BackOff, Killing"}}

    @classmethod
    def for_scenario(cls, spec: dict[str, Any], context) -> "EventsProbe":
        return cls(spec["name"], context.cluster, context.ref(spec["object"]), spec["reason"])

    def __init__(self, name: str, cluster: Cluster, ref: Ref, reason: str) -> None:
        super().__init__(name, cluster, ref)
        self.reason = reason

    def samples(self, events: list[dict]) -> list[Sample]:
        return reason_samples(events, self.reason)
