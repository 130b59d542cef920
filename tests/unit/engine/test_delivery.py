"""Whether a fired alert reached the team's Alertmanager (harness/engine/detection.py's
judge_delivery), from the sightings a watch of /api/v2/alerts keeps (harness/probes/alertmanager.py)."""

from __future__ import annotations

import pytest
from test_detection import REVERT, SPEC, T0, _detected, _record, firing

from harness.engine.detection import judge_delivery, judge_detection
from harness.evidence.reading import checked_verdict
from harness.probes.alertmanager import AlertmanagerError, AlertmanagerWatch, epoch, sightings_of

RULES = {"EtcdMemberDown": 10.0}


def _answer(state="active", starts="1970-01-12T13:46:58.123456789Z", silenced=(), receivers=("team-pager",),
            name="EtcdMemberDown", fingerprint="f1"):
    return [{"labels": {"alertname": name, "node": "cp-2"}, "fingerprint": fingerprint, "startsAt": starts,
             "receivers": [{"name": r} for r in receivers],
             "status": {"state": state, "silencedBy": list(silenced), "inhibitedBy": []}}]


def _judged(sightings):
    detection = judge_detection([SPEC], [firing(T0 + 18, REVERT + 12)], RULES, T0, REVERT)
    return judge_delivery(detection, sightings, T0)


def test_alertmanagers_times_are_read_to_the_microsecond():
    assert epoch("1970-01-12T13:46:40.500000001Z") == pytest.approx(T0 + 0.5)
    assert epoch("yesterday") is None and epoch(5) is None


def test_an_alert_active_in_alertmanager_is_delivered_with_its_receivers():
    seen = sightings_of(_answer(), T0 + 21.0)
    alert = _judged(seen)["alerts"][0]
    assert alert["verdict"] == "passed"
    assert alert["delivery"] == {"outcome": "delivered", "after_seconds": 21.0, "receivers": ["team-pager"], "why": ""}


@pytest.mark.parametrize("sightings, outcome", [
    ([], "not delivered"),
    (sightings_of(_answer(state="suppressed", silenced=["s1"]), T0 + 21.0), "silenced"),
    ([{**sightings_of(_answer(state="suppressed"), T0 + 21.0)[0], "muted_by": ["nights"]}], "muted"),
    # The same alert name, active since before the fault: another failure's, not this one's.
    (sightings_of(_answer(starts="1970-01-12T13:40:00Z"), T0 + 2.0), "not delivered"),
])
def test_an_alert_that_fired_but_told_no_one_fails(sightings, outcome):
    detection = _judged(sightings)
    alert = detection["alerts"][0]
    assert alert["outcome"] == "detected" and alert["delivery"]["outcome"] == outcome
    assert alert["verdict"] == "failed" and detection["verdict"] == "failed"


def test_a_watch_keeps_each_alerts_first_sighting_in_each_state():
    answers = iter([_answer(), _answer(), _answer(state="suppressed", silenced=["s1"])])
    watch = AlertmanagerWatch(lambda: next(answers))
    for _ in range(3):
        watch.poll()
    assert [s["state"] for s in watch.sightings] == ["active", "suppressed"]
    with pytest.raises(AlertmanagerError):
        sightings_of({"alerts": []}, T0)


def test_a_record_whose_alertmanager_was_watched_says_each_alerts_delivery():
    source = {"prometheus": "http://p", "named_by": "x", "alertmanager": "http://am"}
    delivered = {"outcome": "delivered", "after_seconds": 20.0, "receivers": ["team"], "why": ""}
    assert checked_verdict(_record({**_detected(delivery=delivered), "source": source}, [SPEC.to_dict()]))[0] == "passed"
    for forged in ({**_detected(), "source": source},  # its delivery taken out
                   {**_detected(delivery={**delivered, "outcome": "silenced"}), "source": source},
                   {**_detected(delivery="yes"), "source": source}):
        verdict, why = checked_verdict(_record(forged, [SPEC.to_dict()]))
        assert verdict == "error" and "Alertmanager" in why, forged


def test_an_alert_unseen_while_the_watch_was_blind_is_unknown_not_undelivered():
    detection = judge_detection([SPEC], [firing(T0 + 18, REVERT + 12)], RULES, T0, REVERT)
    judged = judge_delivery(detection, [], T0, REVERT, failed_at=[T0 + 30.0])
    alert = judged["alerts"][0]
    assert alert["delivery"]["outcome"] == "unknown" and alert["verdict"] == "passed"
    # A failed poll well before it fired left the watch blind to nothing of it.
    detection = judge_detection([SPEC], [firing(T0 + 18, REVERT + 12)], RULES, T0, REVERT)
    alert = judge_delivery(detection, [], T0, REVERT, failed_at=[T0 + 2.0])["alerts"][0]
    assert alert["delivery"]["outcome"] == "not delivered" and alert["verdict"] == "failed"


class Firing:
    """A Prometheus whose firing alerts are given, one set per reading (the last repeated)."""

    def __init__(self, *readings):
        self.readings = list(readings)

    def firing(self):
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


def test_before_its_fault_a_drill_waits_for_its_alerts_to_stop_firing(monkeypatch):
    from harness.plugin import detection
    monkeypatch.setattr(detection, "POLL_SECONDS", 0.01)
    monitoring = detection.Monitoring(Firing({"EtcdMemberDown", "Other"}, {"Other"}), {})
    quiet = detection.await_quiet(monitoring, [SPEC])
    assert quiet["still_firing"] == [] and quiet["waited_seconds"] >= 0
    monkeypatch.setattr(detection, "QUIET_DEADLINE_SECONDS", 0.05)
    stuck = detection.await_quiet(detection.Monitoring(Firing({"EtcdMemberDown"}), {}), [SPEC])
    assert stuck["still_firing"] == ["EtcdMemberDown"]
    assert detection.await_quiet(monitoring, []) is None and detection.await_quiet(None, [SPEC]) is None
