"""Detection judged from alert intervals (harness/engine/detection.py), the ALERTS series read into
intervals (harness/probes/alerts.py), a scenario's detection section checked when it loads, and a
record's detection read back by the report (harness/evidence/reading.py). Pure logic only: the
real Prometheus is drilled in tests/cluster/test_detection_cluster.py."""

from __future__ import annotations

import pytest
from scenario_copies import load_edited, refused_edit

from harness.engine.detection import also_fired, detection_window, judge_alert, judge_detection, reading_deadline
from harness.evidence.reading import checked_verdict, detection_problems
from harness.probes.alerts import AlertInterval, _runs, source_problem
from harness.spec.model import DetectionSpec

T0 = 1_000_000.0  # the fault took effect
REVERT = T0 + 60.0
SPEC = DetectionSpec("EtcdMemberDown", fires_within_seconds=30, resolves_within_seconds=40)
RULES = {"EtcdMemberDown": 10.0, "NodeNotReady": 0.0}


def firing(start: float, end: float | None, alert: str = "EtcdMemberDown", **labels) -> AlertInterval:
    return AlertInterval(alert, "firing", start, end, {"alertname": alert, **labels})


def pending(start: float, end: float | None, alert: str = "EtcdMemberDown") -> AlertInterval:
    return AlertInterval(alert, "pending", start, end, {"alertname": alert})


def test_an_alert_firing_in_time_and_resolving_in_time_is_detected_with_its_times():
    entry = judge_alert(SPEC, [pending(T0 + 8, T0 + 18), firing(T0 + 18, REVERT + 12)], RULES, T0, REVERT)
    assert entry["outcome"] == "detected" and entry["verdict"] == "passed"
    assert entry["fired_after_seconds"] == 18 and entry["condition_after_seconds"] == 8
    assert entry["resolved_after_seconds"] == 12 and entry["for_seconds"] == 10


def test_a_rule_the_platform_lacks_is_undetected_whatever_fired():
    entry = judge_alert(SPEC, [firing(T0 + 5, T0 + 20)], {"NodeNotReady": 0.0}, T0, REVERT)
    assert entry["outcome"] == "undetected" and entry["verdict"] == "failed"
    assert "no alerting rule named EtcdMemberDown" in entry["why"]


def test_an_alert_that_never_fired_after_the_fault_is_undetected():
    entry = judge_alert(SPEC, [firing(T0 - 300, T0 - 200), pending(T0 + 5, T0 + 7)], RULES, T0, REVERT)
    assert entry["outcome"] == "undetected" and entry["why"] == "it never fired"
    assert entry["fired_after_seconds"] is None


def test_an_alert_firing_before_the_fault_cannot_tell_this_failure():
    entry = judge_alert(SPEC, [firing(T0 - 30, REVERT + 5)], RULES, T0, REVERT)
    assert entry["outcome"] == "already firing" and entry["verdict"] == "failed"


def test_late_firing_and_late_or_missing_resolution_fail_with_their_times():
    late = judge_alert(SPEC, [firing(T0 + 31, REVERT + 5)], RULES, T0, REVERT)
    assert late["outcome"] == "late" and "31.0 s" in late["why"]
    unresolved = judge_alert(SPEC, [firing(T0 + 10, None)], RULES, T0, REVERT)
    assert unresolved["outcome"] == "not resolved" and unresolved["resolved_after_seconds"] is None
    slow = judge_alert(SPEC, [firing(T0 + 10, REVERT + 41)], RULES, T0, REVERT)
    assert slow["outcome"] == "resolved late" and slow["resolved_after_seconds"] == 41


def test_resolution_waits_for_every_series_of_the_alert():
    # Two members down: the alert resolves when the last of its series does.
    entry = judge_alert(SPEC, [firing(T0 + 12, REVERT + 5, node="a"), firing(T0 + 15, REVERT + 30, node="b")],
                        RULES, T0, REVERT)
    assert entry["fired_after_seconds"] == 12 and entry["resolved_after_seconds"] == 30


def test_bounds_are_inclusive_at_the_boundary():
    entry = judge_alert(SPEC, [firing(T0 + 30, REVERT + 40)], RULES, T0, REVERT)
    assert entry["outcome"] == "detected"


def test_what_else_noticed_lists_each_unexpected_alert_once_in_firing_order():
    intervals = [firing(T0 - 100, None, "Watchdog"), firing(T0 + 20, T0 + 30, "NodeNotReady", node="w1"),
                 firing(T0 + 40, REVERT + 2, "NodeNotReady", node="w1"), firing(T0 + 5, REVERT + 9, "EtcdMemberDown"),
                 firing(T0 + 3, None, "APIServerErrors")]
    others = also_fired([SPEC], intervals, T0, REVERT)
    assert [o["alert"] for o in others] == ["APIServerErrors", "NodeNotReady"]
    assert others[1] == {"alert": "NodeNotReady", "fired_after_seconds": 20, "resolved_after_seconds": -30,
                         "labels": {"node": "w1"}}
    result = judge_detection([SPEC], intervals, RULES, T0, REVERT)
    assert result["verdict"] == "passed" and result["already_firing"] == ["Watchdog"]


def test_one_failed_alert_fails_the_drills_detection():
    other = DetectionSpec("NodeNotReady", 30, 40)
    result = judge_detection([SPEC, other], [firing(T0 + 5, REVERT + 5)], RULES, T0, REVERT)
    assert result["verdict"] == "failed"
    assert [a["outcome"] for a in result["alerts"]] == ["detected", "undetected"]


def test_the_window_and_the_reading_deadline_come_from_the_injections_and_the_bounds():
    assert detection_window([]) is None
    assert detection_window([{"injected_at": T0, "reverted_at": T0 + 5}, {"injected_at": T0 + 9, "reverted_at": REVERT}]) \
        == (T0, REVERT)
    assert detection_window([{"injected_at": T0, "reverted_at": None}]) == (T0, None)
    assert reading_deadline([SPEC, DetectionSpec("X", 120, 5)], T0, REVERT, 15) == T0 + 135
    assert reading_deadline([SPEC], T0, REVERT, 15) == REVERT + 55


def test_sampled_times_become_runs_a_gap_of_more_than_a_step_apart():
    assert _runs([5.0, 1.0, 2.0, 3.0, 7.0, 8.0], 1.0) == [(1.0, 3.0), (5.0, 5.0), (7.0, 8.0)]
    assert _runs([], 1.0) == []


@pytest.mark.parametrize("url,ok", [("http://127.0.0.1:30090", True), ("https://prom.example:9090/prometheus", True),
                                    ("127.0.0.1:30090", False), ("file:///etc/passwd", False),
                                    ("http://user:secret@prom:9090", False), ("http://prom:9090/?x=1", False),
                                    ("http://[::1", False), ("http://h x:9090", False), ("http://h:9090\r\nX: y", False),
                                    ("http://h:abc", False), ("http://h:99999", False), ("http://h:", False),
                                    ("http://h/" + "x" * 3000, False)])
def test_a_prometheus_url_is_http_without_credentials(url, ok):
    assert (source_problem(url) is None) is ok


# --- the scenario's detection section -------------------------------------------------------

def test_a_detection_section_loads_per_case(tmp_path):
    def edit(data):
        data["detection"] = [{"alert": "APIServerErrors", "fires_within_seconds": 30, "resolves_within_seconds": 60},
                             {"alert": "SchedulerDown", "fires_within_seconds": 20, "resolves_within_seconds": 60,
                              "cases": ["scheduler"]}]
    scenario = load_edited(tmp_path, "leader-failover", edit)
    assert [d.alert for d in scenario.detection_for("scheduler")] == ["APIServerErrors", "SchedulerDown"]
    assert [d.alert for d in scenario.detection_for("controller-manager")] == ["APIServerErrors"]
    assert scenario.to_dict()["detection"][1]["cases"] == ["scheduler"]


@pytest.mark.parametrize("detection,field,expected", [
    ([{"alert": "Etcd Down", "fires_within_seconds": 30, "resolves_within_seconds": 60}], "detection[0].alert",
     "an alert's name"),
    ([{"alert": "EtcdDown", "fires_within_seconds": 0, "resolves_within_seconds": 60}],
     "detection[0].fires_within_seconds", "from 1 to 3600"),
    ([{"alert": "EtcdDown", "fires_within_seconds": 30}], "detection[0]", "resolves_within_seconds"),
    ([{"alert": "EtcdDown", "fires_within_seconds": 30, "resolves_within_seconds": 60, "cases": ["nosuch"]}],
     "detection[0].cases[0]", "the name of a case of this scenario"),
    ([{"alert": "EtcdDown", "fires_within_seconds": 30, "resolves_within_seconds": 60},
      {"alert": "EtcdDown", "fires_within_seconds": 9, "resolves_within_seconds": 9, "cases": ["scheduler"]}],
     "detection[1].alert", "expected once in each case"),
    ([], "detection", "at least one alert"),
    ([{"alert": "EtcdDown", "fires_within_seconds": 1e-300, "resolves_within_seconds": 60}],
     "detection[0].fires_within_seconds", "from 1 to 3600"),
    ([{"alert": "EtcdDown", "fires_within_seconds": 30, "resolves_within_seconds": 60,
       "cases": ["scheduler", "scheduler"]}], "detection[0].cases", "the names of the cases"),
])
def test_a_bad_detection_section_is_refused_naming_its_field(tmp_path, detection, field, expected):
    error = refused_edit(tmp_path, "leader-failover", lambda data: data.__setitem__("detection", detection))
    assert error.field.startswith(field), (error.field, str(error))
    assert expected in str(error)


# --- a record's detection, read back --------------------------------------------------------

def _record(detection, scenario_detection=None) -> dict:
    """A passed record with one held expectation, ``detection`` (None: left out) and its scenario's."""
    expectation = {"name": "x", "measured": 1.0, "bound": {"op": "<=", "value": 2}, "bound_text": "<= 2",
                   "unit": "seconds", "verdict": "passed"}
    return {"drill": "d", "case": None, "verdict": "passed", "expectations": [expectation], "errors": [],
            "scenario": {"expectations": [{"name": "x", "bound": {"op": "<=", "value": 2}}],
                         **({"detection": scenario_detection} if scenario_detection else {})},
            **({"detection": detection} if detection is not None else {})}


def _detected(**changes) -> dict:
    alert = {"alert": "EtcdMemberDown", "outcome": "detected", "verdict": "passed", "fired_after_seconds": 12.0,
             "fires_within_seconds": 30, "resolved_after_seconds": 20.0, "resolves_within_seconds": 40}
    return {"verdict": "passed", "alerts": [{**alert, **changes}]}


def test_a_passed_record_needs_its_detection_to_hold():
    spec = [SPEC.to_dict()]
    assert checked_verdict(_record(_detected(), spec)) == ("passed", None)
    assert checked_verdict(_record({"verdict": "not checked", "why": "no Prometheus"}, spec))[0] == "passed"
    assert checked_verdict(_record(None))[0] == "passed"  # nothing expected, nothing read
    undetected = _detected(outcome="undetected", verdict="failed")["alerts"]
    for forged in (_detected(fired_after_seconds=31.0), _detected(outcome="undetected"),
                   _detected(resolved_after_seconds=None), _detected(fired_after_seconds=float("nan")),
                   _detected(fired_after_seconds=-5.0), _detected(fired_after_seconds=10 ** 400),
                   _detected(fired_after_seconds=True), _detected(alert=["EtcdMemberDown"]),
                   # bounds widened in the record beyond its scenario's
                   _detected(fired_after_seconds=90.0, fires_within_seconds=100),
                   {"verdict": "failed", "alerts": []}, {"verdict": "passed", "alerts": "all good"},
                   {"verdict": "not checked", "alerts": undetected}, {"verdict": "none expected"},
                   {}, [], "passed", 0,
                   {**_detected(), "already_firing": ["EtcdMemberDown"]},
                   {"verdict": "passed", "alerts": _detected()["alerts"] * 2}):
        verdict, why = checked_verdict(_record(forged, spec))
        assert verdict == "error" and "detection" in why, forged
    # The record's detection deleted outright, its scenario expecting an alert.
    assert "records none" in checked_verdict(_record(None, spec))[1]
    assert detection_problems(_record({"verdict": "passed", "alerts": []}, spec)) == [
        "detection of EtcdMemberDown its scenario expects is missing"]
    # A malformed scenario section never crashes the check.
    assert checked_verdict(_record(_detected(), [{"alert": "EtcdMemberDown", "cases": 5}]))[0] == "error"


# --- reading (harness/plugin/detection.py), with a stand-in for Prometheus's answers --------

class StandIn:
    """Prometheus's two answers as plain data, or an error."""

    def __init__(self, rules=None, intervals=(), error=None):
        self.rules, self.intervals, self.error, self.reads = rules or {}, list(intervals), error, 0

    def alert_rules(self):
        self.reads += 1
        if self.error:
            raise self.error
        return self.rules

    def alert_intervals(self, start, end):
        return [i for i in self.intervals if i.start >= start]

    def notifications(self, start, end):
        return {"sent": 3.0, "errors": 0.0, "dropped": None}


def test_reading_says_not_checked_without_a_prometheus_or_an_injection():
    from harness.plugin.detection import Monitoring, read_detection
    assert read_detection(None, [SPEC], [{"injected_at": T0, "reverted_at": REVERT}])["verdict"] == "not checked"
    monitoring = Monitoring(StandIn(RULES), {"prometheus": "http://p", "named_by": "--prometheus"})
    result = read_detection(monitoring, [SPEC], [])
    assert result["verdict"] == "not checked" and result["why"] == "the fault never took effect"


def test_reading_returns_once_every_alert_has_settled_and_names_its_source(monkeypatch):
    import time as clock

    from harness.plugin.detection import Monitoring, PrometheusError, read_detection
    now = clock.time()
    injections = [{"injected_at": now - 100, "reverted_at": now - 50}]
    settled = StandIn(RULES, [firing(now - 90, now - 40)])
    result = read_detection(Monitoring(settled, {"prometheus": "http://p", "named_by": "x"}), [SPEC], injections)
    assert result["verdict"] == "passed" and result["source"] == {"prometheus": "http://p", "named_by": "x"}
    assert settled.reads == 1  # settled at the first reading: no waiting
    assert result["notifications"] == {"sent": 3.0, "errors": 0.0, "dropped": None}
    broken = StandIn(error=PrometheusError("http://p/api/v1/rules: connection refused"))
    # Past its deadline already: one attempt, then the error is the record's.
    result = read_detection(Monitoring(broken, {}), [DetectionSpec("X", 1, 1)], injections)
    assert result["verdict"] == "error" and "connection refused" in result["why"]


# --- kdrill run's options, refused before anything is touched ---------------------------

@pytest.mark.parametrize("argv, env, said", [
    (["--prometheus", "http://[::1"], {}, "--prometheus: expected an http:// or https:// URL with a host and a port"),
    (["--prometheus", "file:///etc/passwd"], {}, "--prometheus: expected an http:// or https:// URL with a host"),
    ([], {"KDRILL_PROMETHEUS": "http://h x"}, "KDRILL_PROMETHEUS: expected an http:// or https:// URL of at most"),
    (["--prometheus-token-file", "TOKEN"], {}, "--prometheus-token-file is the token for --prometheus URL"),
    (["--prometheus", "http://p:9090", "--prometheus-token-file", "DIR"], {}, "expected a readable file"),
    (["--prometheus", "http://p:9090", "--prometheus-token-file", "TWO_LINES"], {}, "expected one non-empty line"),
    (["--prometheus", "http://p:9090", "--prometheus-token-file", "EMPTY"], {}, "expected one non-empty line"),
    (["--prometheus", "http://p:9090"], {"KDRILL_PROMETHEUS_TOKEN": "a b"}, "KDRILL_PROMETHEUS_TOKEN: expected one"),
    (["--alertmanager", "ftp://am"], {}, "--alertmanager: expected an http:// or https:// URL with a host"),
    (["--alertmanager", "http://am:9093"], {}, "--alertmanager is watched for the alerts a Prometheus says fired"),
    (["--alertmanager-token-file", "TOKEN"], {}, "--alertmanager-token-file is the token for --alertmanager URL"),
    (["--prometheus", "http://p:9090", "--alertmanager", "http://am:9093", "--alertmanager-token-file", "TWO_LINES"],
     {}, "--alertmanager-token-file"),
    (["--prometheus", "http://p:9090"], {"KDRILL_ALERTMANAGER_TOKEN": "a b"}, "KDRILL_ALERTMANAGER_TOKEN: expected one"),
])
def test_bad_prometheus_options_are_refused_before_anything(tmp_path, monkeypatch, capsys, argv, env, said):
    from harness.cli import main
    files = {"TOKEN": "secret\n", "TWO_LINES": "secret\nmore\n", "EMPTY": "\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "DIR").mkdir()
    argv = [str(tmp_path / a) if a in (*files, "DIR") else a for a in argv]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["run", "--plan", "coredns-scaled-to-zero", *argv]) == 2
    err = capsys.readouterr().err
    assert said in err and "secret" not in err
