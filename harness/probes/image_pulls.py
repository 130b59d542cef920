"""Image-pulls probe: the kubelet's own account of one Pod's image pulls, from its Events.

The kubelet records a ``Pulling`` event when it asks for an image and, once the runtime has it, a
``Pulled`` event saying how long the pull took and how long it took *including waiting*: with
serialized image pulls (the kubelet's default), a request waits in the kubelet's image puller
until the pull before it on that node completes. Each ``Pulled`` event becomes one sample:

- ``t``: when the request was made (the event's time minus the time including waiting; Event
  times have whole seconds, so ``t`` is good to about a second);
- ``ok``: True; ``latency_seconds``: the seconds the request *waited* before its pull began
  (including-waiting minus the pull's own time), so ``max_latency_seconds`` is the longest wait;
- ``detail``: the event's message.

A ``Failed`` event "Failed to pull image ..." is a failed sample at its time. The Events are
read once, when the probe stops (before the drill's objects are deleted): what a sample says is
what the kubelet
reported, not a clock this machine kept. A read that fails is one failed sample with
``labels["error"]``, so no measure mistakes it for a pull.

Source: "Images", https://kubernetes.io/docs/concepts/containers/images/#serial-and-parallel-image-pulls
"""

from __future__ import annotations

from typing import Any

from harness.core.timeline import Sample
from harness.probes.events import PodEventsProbe
from harness.spec.scenario import OBJECT_REF_SCHEMA


def pull_samples(events: list[dict]) -> list[Sample]:
    """Samples (see the module docstring) from :func:`harness.probes.pods.pod_events` output."""
    samples = []
    for event in events:
        at = event.get("last") or event.get("first")
        if at is None:
            continue
        if event["reason"] == "Pulled" and event.get("pull"):
            pull = event["pull"]
            samples.append(Sample(t=at - pull["including_waiting_seconds"], ok=True,
                                  latency_seconds=pull["waiting_seconds"], detail=event["message"]))
        elif event["reason"] == "Failed" and event["message"].startswith("Failed to pull image"):
            # (not its companion "Error: ErrImagePull", nor the BackOff after it: one failed pull)
            samples.append(Sample(t=at, ok=False, detail=event["message"]))
    return sorted(samples, key=lambda s: s.t)


class ImagePullsProbe(PodEventsProbe):
    """Probe kind ``image-pulls``: the image pulls of Pod ``ref`` as samples (module docstring)."""

    kind = "image-pulls"
    required = ("object",)
    fields = {"object": OBJECT_REF_SCHEMA}

    @classmethod
    def for_scenario(cls, spec: dict[str, Any], context) -> "ImagePullsProbe":
        return cls(spec["name"], context.cluster, context.ref(spec["object"]))

    def samples(self, events: list[dict]) -> list[Sample]:
        return pull_samples(events)
