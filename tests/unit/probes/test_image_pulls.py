"""The image-pulls probe (a Pod's pulls from its kubelet's Events) and the max_latency_seconds
measure over it: pure logic on Events as harness.probes.pods.pod_events returns them."""

from __future__ import annotations

import pytest
from scenario_copies import load_edited

from harness.core.timeline import Sample
from harness.engine import measures
from harness.kube.objects import Ref
from harness.probes.image_pulls import ImagePullsProbe, pull_samples
from harness.probes.pods import pulled_seconds
from harness.spec.scenario import ScenarioError


def event(reason: str, at: float, message: str) -> dict:
    out = {"reason": reason, "count": 1, "first": at, "last": at, "message": message}
    if reason == "Pulled" and (pull := pulled_seconds(message)) is not None:
        out["pull"] = pull
    return out


QUEUED = [
    event("Scheduled", 100, "Successfully assigned ns/queued-0 to w1"),
    event("Pulling", 101, 'Pulling image "r/app:t"'),
    event("Pulled", 148, 'Successfully pulled image "r/app:t" in 69ms (46.861s including waiting). Image size: 1 bytes.'),
    event("Started", 148, "Container started"),
]


def test_a_pulled_event_is_a_sample_at_its_request_with_the_wait_as_latency():
    [sample] = pull_samples(QUEUED)
    assert sample.ok
    assert sample.t == pytest.approx(148 - 46.861)
    assert sample.latency_seconds == pytest.approx(46.792)
    assert "including waiting" in sample.detail


def test_a_failed_pull_is_a_failed_sample_and_other_events_are_none():
    samples = pull_samples([event("Failed", 120, 'Failed to pull image "r/x:t": connection refused'),
                            event("Failed", 121, "Error: ErrImagePull"),  # the same failure again, not another pull
                            event("BackOff", 130, 'Back-off pulling image "r/x:t"'),
                            event("Pulled", 140, 'Container image "r/x:t" already present on machine')])
    assert [(s.t, s.ok) for s in samples] == [(120, False)]


def test_max_latency_is_the_longest_wait_in_the_window_and_none_without_a_pull():
    samples = pull_samples(QUEUED) + [Sample(t=200, ok=True, latency_seconds=0.0)]
    assert measures.measure("max_latency_seconds", samples, 100, 150) == pytest.approx(46.792)
    assert measures.measure("max_latency_seconds", samples, 150, 250) == 0.0
    assert measures.measure("max_latency_seconds", samples, 300, 400) is None
    assert measures.measure("max_latency_seconds", [Sample(t=1, ok=False)], 0, 10) is None


def test_an_image_pulls_probe_watches_a_pod_only():
    with pytest.raises(ValueError, match="Pod"):
        ImagePullsProbe("p", object(), Ref("Deployment", "d", "ns"))


class BrokenCluster:
    class core:  # noqa: N801 - stands in for the CoreV1Api attribute
        @staticmethod
        def list_namespaced_event(*args, **kwargs):
            raise TimeoutError("read timed out")


def test_an_unreadable_pod_is_one_failed_sample_never_a_pull():
    timeline = ImagePullsProbe("p", BrokenCluster(), Ref("Pod", "queued-0", "ns")).start().stop()
    [sample] = timeline.samples()
    assert not sample.ok and sample.labels["error"] == "timeout" and "read timed out" in sample.detail


@pytest.mark.parametrize("edit, field, expected", [
    (lambda d: d["runner"]["probes"][4]["object"].update(kind="StatefulSet", name="queued"),
     "runner.probes[4].object.kind", "Pod"),
    (lambda d: d["runner"]["probes"][4].update(ok_when="present"), "runner.probes[4].ok_when", "no ok_when"),
    (lambda d: d["runner"]["probes"][4].pop("object"), "runner.probes[4].object", "a object for a image-pulls"),
    (lambda d: d["expectations"][3].update(unit="ratio"), "expectations[3].unit", "'seconds'"),
])
def test_bad_image_pulls_probes_are_refused(tmp_path, edit, field, expected):
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "serial-image-pull", edit)
    assert info.value.field == field, str(info.value)
    assert expected in info.value.expected


def test_an_events_probe_is_each_event_of_its_reason_at_the_time_it_was_recorded():
    from harness.probes.events import reason_samples

    events = [{"reason": "Scheduled", "count": 1, "first": 90.0, "last": 90.0, "message": "assigned"},
              {"reason": "Pulling", "count": 1, "first": 100.0, "last": 100.0, "message": "Pulling image x"},
              {"reason": "Pulling", "count": 3, "first": 110.0, "last": 140.0, "message": "Pulling image y"},
              {"reason": "Pulling", "count": 1, "first": None, "last": None, "message": "no time"}]
    samples = reason_samples(events, "Pulling")
    # each at the end of the whole second it is stamped with: never before it was recorded
    assert [(s.t, s.ok) for s in samples] == [(101.0, True), (111.0, True), (141.0, True)]
    assert samples[2].detail == "(x3) Pulling image y"
    assert reason_samples(events, "BackOff") == []
