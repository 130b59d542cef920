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

from harness.kube_objects import Ref
from harness.probes.api import failed
from harness.probes.pods import pod_events
from harness.providers import Cluster
from harness.scenario import OBJECT_REF_SCHEMA
from harness.timeline import Sample, Timeline


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


class EventsProbe:
    """The Events of reason ``reason`` of Pod ``ref`` as samples (module docstring), read when
    :meth:`stop` is called. ``start`` and ``stop`` as for a :class:`harness.probes.Probe`."""

    kind = "events"
    in_probe_pod = False
    required = ("object", "reason")
    fields = {"object": OBJECT_REF_SCHEMA,
              "reason": {"type": "string", "pattern": "^[A-Z][A-Za-z]{1,62}$",
                         "x-expected": "an Event reason, e.g. Pulling, BackOff, Killing"}}

    @classmethod
    def problems(cls, spec: dict[str, Any]) -> list[tuple[str, str, str]]:
        kind = (spec.get("object") or {}).get("kind")
        return [] if kind == "Pod" else [("object.kind", "Pod: an events probe reads a Pod's Events", repr(kind))]

    @classmethod
    def for_scenario(cls, spec: dict[str, Any], context) -> "EventsProbe":
        return cls(spec["name"], context.cluster, context.ref(spec["object"]), spec["reason"])

    def __init__(self, name: str, cluster: Cluster, ref: Ref, reason: str) -> None:
        if ref.kind != "Pod":
            raise ValueError(f"an events probe watches a Pod, got a {ref.kind}")
        self.name, self.cluster, self.ref, self.reason = name, cluster, ref, reason
        self.timeline = Timeline(name)

    def start(self) -> "EventsProbe":
        return self

    def stop(self) -> Timeline:
        started = time.time()
        try:
            samples = reason_samples(pod_events(self.cluster, self.ref.namespace, self.ref.name), self.reason)
        except Exception as exc:  # recorded as what it is, never as an event
            samples = [failed(started, exc)]
        for sample in samples:
            self.timeline.add(sample)
        return self.timeline
