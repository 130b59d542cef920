"""harness/engine/measures.py and the data-only scenario schema: pure logic, no cluster."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from harness.core import resources
from harness.core.timeline import Sample
from harness.engine import measures
from harness.spec.scenario import RUNNER_DRILL, ScenarioError, load_scenario

T = 1000.0


def samples(pattern: str, every: float = 1.0) -> list[Sample]:
    """One sample per character from T on: '+' ok, '-' failed."""
    return [Sample(t=T + i * every, ok=c == "+") for i, c in enumerate(pattern)]


@pytest.mark.parametrize("pattern, start, end, expected", [
    ("++++", T, T + 4, {"success_ratio": 1.0, "first_failure_seconds": None, "recovery_seconds": 0.0,
                        "longest_failure_seconds": 0.0, "flips": 0}),
    ("++--++", T, T + 6, {"success_ratio": 4 / 6, "first_failure_seconds": 2.0, "recovery_seconds": 4.0,
                          "longest_failure_seconds": 2.0, "flips": 2}),
    ("+---", T, T + 4, {"success_ratio": 0.25, "first_failure_seconds": 1.0, "recovery_seconds": None,
                        "longest_failure_seconds": 3.0, "flips": 1}),       # still failing at the window's end
    ("--+-+", T + 1, T + 4, {"success_ratio": 1 / 3, "first_failure_seconds": 0.0, "recovery_seconds": None,
                             "longest_failure_seconds": 1.0, "flips": 2}),  # only the samples inside the window
    ("+++", T + 10, T + 20, {"success_ratio": None, "first_failure_seconds": None, "recovery_seconds": None,
                             "longest_failure_seconds": None, "flips": None}),  # nothing to measure
])
def test_each_measure_over_its_window(pattern, start, end, expected) -> None:
    got = {kind: measures.measure(kind, samples(pattern), start, end) for kind in expected}
    assert got == pytest.approx(expected)


def test_longest_unanswered_counts_a_hung_request_as_much_as_a_failed_one() -> None:
    """Answers complete at t + latency: a request that hung 3 s leaves 3 s without an answer,
    though every sample succeeded; gaps outside the window do not count."""
    hung = [Sample(t=T, ok=True, latency_seconds=0.1), Sample(t=T + 0.2, ok=True, latency_seconds=3.0),
            Sample(t=T + 3.3, ok=True, latency_seconds=0.1), Sample(t=T + 20, ok=True, latency_seconds=0.1)]
    assert measures.longest_unanswered_seconds(hung, T, T + 4) == pytest.approx(3.1)
    failed = [Sample(t=T + i * 0.5, ok=i not in (2, 3, 4), latency_seconds=0.0) for i in range(8)]
    assert measures.longest_unanswered_seconds(failed, T, T + 4) == pytest.approx(2.0)
    assert measures.longest_unanswered_seconds(failed[:1], T, T + 4) is None  # one answer: no gap to measure
    # Answers that stop for good: the silence until the probe's last request counts (a review found
    # 0.1 s reported here, which would have passed "another member kept answering").
    stopped = [Sample(t=T + i * 0.1, ok=i <= 5, latency_seconds=0.0) for i in range(200)]
    assert measures.longest_unanswered_seconds(stopped, T, T + 10) == pytest.approx(9.5)
    assert measures.longest_unanswered_seconds(stopped, T + 5, T + 5) is None  # an empty window


def data_scenario(tmp_path: Path, edit=lambda d: None, name: str = "service-without-endpoints") -> Path:
    """A copy of the shipped scenario ``name`` changed by ``edit(dict)``."""
    data = yaml.safe_load((resources.scenarios_dir() / f"{name}.yaml").read_text())
    edit(data)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_data_only_scenario_runs_on_the_runner(tmp_path) -> None:
    scenario = load_scenario(data_scenario(tmp_path))
    assert scenario.runner is not None and scenario.drill == RUNNER_DRILL
    assert scenario.expectations[0].measure == {"kind": "success_ratio", "probe": "by-clusterip", "window": "baseline"}


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.update(drill="drills/test_x.py"), "runner"),                       # both
    (lambda d: d.pop("runner"), "drill"),                                           # neither
    (lambda d: d["expectations"][0].pop("measure"), "expectations[0].measure"),
    (lambda d: d["expectations"][0]["measure"].update(probe="nope"), "expectations[0].measure.probe"),
    (lambda d: d["expectations"][0]["measure"].update(kind="p42"), "expectations[0].measure.kind"),
    (lambda d: d["runner"]["probes"].append(dict(d["runner"]["probes"][0])), "runner.probes[2].name"),
    (lambda d: d["runner"]["windows"].update(hold_seconds=3600), "runner.windows.hold_seconds"),
    (lambda d: d["expectations"][0].update(unit="seconds"), "expectations[0].unit"),   # a ratio's unit
    (lambda d: d["workload"].update(replicas=0), "workload.replicas"),
    (lambda d: d.update(title="TODO: later"), "title"),
])
def test_bad_data_only_scenarios_are_refused(tmp_path, edit, field) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario(data_scenario(tmp_path, edit))
    assert info.value.field == field, str(info.value)


def test_a_fault_that_cannot_be_built_from_data_is_refused(tmp_path) -> None:
    from harness.cli.scenarios import check_references

    def etcd(d):
        d["fault"] = {"kind": "etcd-member", "method": "x", "params": {}}
        d["cluster"]["needs_node_access"] = True

    with pytest.raises(ScenarioError, match="for_scenario"):
        check_references(load_scenario(data_scenario(tmp_path, etcd)))


def test_a_new_drill_is_one_file(tmp_path) -> None:
    """A scenario written by someone new, reusing an existing fault: a copy under another name,
    with no drill file, passes every check a run makes before touching anything."""
    from harness.cli.scenarios import check_references

    path = data_scenario(tmp_path, lambda d: d.update(name="my-team-service-scaled-away"))
    check_references(load_scenario(path))


# --- over a metric probe's values ------------------------------------------------------------------

def _read(t: float, value) -> Sample:
    return Sample(t=t, ok=True, latency_seconds=0.01, labels={} if value is None else {"value": str(value)})


def test_value_measures_read_the_metric_values_and_skip_reads_without_one():
    from harness.engine.measures import max_value, min_value

    samples = [_read(100, 0), _read(102, None), _read(104, 1), _read(106, "nan"), _read(108, 1), _read(120, 7)]
    assert max_value(samples, 100, 110) == 1 and min_value(samples, 100, 110) == 0
    assert max_value(samples, 101, 104) is None  # only a failed read in it


def test_rate_per_second_counts_a_drop_as_a_counter_reset_and_needs_two_values_apart_in_time():
    from harness.engine.measures import rate_per_second

    assert rate_per_second([_read(100, 10), _read(110, 30)], 0, 200) == 2.0
    # 10 -> 30 (+20), reset to 5 (+5 counted since the restart), 5 -> 15 (+10): 35 over 30 s.
    assert rate_per_second([_read(100, 10), _read(110, 30), _read(120, 5), _read(130, 15)], 0, 200) == 35 / 30
    assert rate_per_second([_read(100, 10)], 0, 200) is None
    assert rate_per_second([_read(100, 10), _read(100, 12)], 0, 200) is None
    assert rate_per_second([_read(100, 10), _read(105, None), _read(110, 10)], 0, 200) == 0.0


def test_a_value_measure_over_a_probe_that_is_not_a_metric_probe_is_refused(tmp_path):
    from scenario_copies import load_edited

    from harness.spec.scenario import ScenarioError

    def edit(data):
        data["expectations"][0]["measure"]["kind"] = "max_value"

    with pytest.raises(ScenarioError) as refused:
        load_edited(tmp_path, "pod-delete", edit)
    assert refused.value.field.endswith(".measure.probe") and "a probe that records values" in refused.value.expected
    assert "metric" in refused.value.expected and "node-ready" in refused.value.expected


def _labelled(t: float, value) -> Sample:
    """A read whose ``labels["value"]`` is ``value`` as it is (not made text)."""
    return Sample(t=t, ok=True, latency_seconds=0.01, labels={"value": value})


def test_value_measures_skip_flags_and_keep_what_is_past_float_s_range_as_an_infinite_read():
    from harness.engine.measures import max_value, min_value, rate_per_second

    # True is not a value read (float(True) would make it 1).
    assert max_value([_labelled(100, True), _labelled(101, False)], 0, 200) is None
    assert max_value([_labelled(100, True), _read(101, 0)], 0, 200) == 0
    # An integer past float's range is not a crash; it is beyond any float, as "1e309" reads.
    huge = [_labelled(100, 10 ** 400), _read(101, 3), _labelled(102, -10 ** 400)]
    assert max_value(huge, 0, 200) == math.inf and min_value(huge, 0, 200) == -math.inf
    assert rate_per_second(huge, 0, 200) is None


def test_an_infinite_read_is_the_extreme_it_is_not_skipped_for_a_smaller_one():
    from harness.engine.measures import max_value, min_value

    # The metric said +Inf: "the largest value read was 1" would claim what the reads deny.
    samples = [_read(100, 1), _read(101, "+Inf"), _read(102, "-inf"), _read(103, "nan")]
    assert max_value(samples, 0, 200) == math.inf and min_value(samples, 0, 200) == -math.inf
    assert max_value([_read(100, "nan")], 0, 200) is None


def test_rate_per_second_is_none_for_reads_that_cannot_be_a_counter_s():
    from harness.engine.measures import rate_per_second

    # Negative: -5 then -10 is no counter reset to -10 (a rate of -10/s).
    assert rate_per_second([_read(100, -5), _read(101, -10)], 0, 200) is None
    # Infinite, or an increase past float's range.
    assert rate_per_second([_read(100, 1), _read(101, "inf")], 0, 200) is None
    assert rate_per_second([_read(100, 0), _read(101, "1e308"), _read(102, 0), _read(103, "1e308")], 0, 200) is None
    # Two reads at one time that differ: 10 then 5 (a reset, +5) or 5 then 10 (+5, then a reset, +6)?
    assert rate_per_second([_read(100, 10), _read(100, 5), _read(101, 6)], 0, 200) is None
    # The same value twice at one time says nothing new.
    assert rate_per_second([_read(100, 10), _read(100, 10), _read(101, 12)], 0, 200) == 2.0


# --- a fault's marks and facts, and "slower than N s" ------------------------------------------------

def test_a_window_narrowed_to_the_faults_marks_then_settled() -> None:
    from harness.engine.judging import narrow

    marks = {"flood_started": 110.0, "flood_stopped": 150.0, "never": None}
    how = {"window": "fault", "from_mark": "flood_started", "until_mark": "flood_stopped", "settle_seconds": 5}
    start, stop, said = narrow(how, 100.0, 170.0, [], marks)
    assert (start, stop) == (115.0, 150.0) and "from mark flood_started" in said and "5 s to settle" in said
    # settling never passes the window's end
    assert narrow({"window": "fault", "settle_seconds": 90}, 100.0, 140.0, [], marks)[:2] == (140.0, 140.0)
    for name in ("never", "unknown"):
        with pytest.raises(ValueError, match=f"did not mark {name}"):
            narrow({"window": "fault", "from_mark": name}, 100.0, 170.0, [], marks)
    # a mark outside its window is an error, not moved to the window's edge (a review found the
    # whole window measured under the mark's name)
    with pytest.raises(ValueError, match="outside the fault window"):
        narrow({"window": "fault", "from_mark": "flood_stopped"}, 100.0, 140.0, [], marks)
    # marks in the wrong order leave no window
    with pytest.raises(ValueError, match="ends 40.0 s before it starts"):
        narrow({"window": "fault", "from_mark": "flood_stopped", "until_mark": "flood_started"}, 100.0, 170.0, [],
               marks)


def test_within_makes_a_slow_success_a_failure() -> None:
    calls = [Sample(t=T, ok=True, latency_seconds=0.2), Sample(t=T + 1, ok=True, latency_seconds=1.07),
             Sample(t=T + 2, ok=True, latency_seconds=None), Sample(t=T + 3, ok=False, latency_seconds=0.1),
             Sample(t=T + 4, ok=True, latency_seconds=1.0)]
    slow = measures.within(calls, 1.0)
    assert [s.ok for s in slow] == [True, False, False, False, True]  # exactly 1.0 s is within
    assert "slower than 1 s" in slow[1].detail and slow[3] is calls[3]
    assert measures.measure("success_ratio", slow, T, T + 5) == pytest.approx(0.4)
    assert measures.measure("success_ratio", calls, T, T + 5) == pytest.approx(0.8)  # the samples are not changed


def test_p99_latency_is_the_nearest_rank() -> None:
    calls = [Sample(t=T + i, ok=i % 2 == 0, latency_seconds=float(i + 1)) for i in range(200)]
    assert measures.measure("p99_latency_seconds", calls, T, T + 200) == 198.0  # rank ceil(0.99 * 200) = 198
    assert measures.measure("p99_latency_seconds", calls[:1], T, T + 200) == 1.0
    assert measures.measure("p99_latency_seconds", calls, T + 500, T + 600) is None


def dns_scenario(tmp_path: Path, edit=lambda d: None) -> Path:
    return data_scenario(tmp_path, edit, "dns-saturation")


def _measure(name):
    return lambda d: next(e for e in d["expectations"] if e["name"] == name)["measure"]


@pytest.mark.parametrize("edit, field, expected", [
    (lambda d: _measure("names_outside_cluster_zones")(d).update(fact="queries_sent"),
     "expectations[0].measure.fact", "a fact fault dns-saturation measures: forwarded_upstream_before_flood, "
                                     "names_outside_cluster_zones"),
    (lambda d: _measure("names_outside_cluster_zones")(d).update(window="fault"),
     "expectations[0].measure", "{fact} alone"),
    (lambda d: _measure("web_name_recovery_seconds")(d).update(from_mark="flood_began"),
     "expectations[7].measure.from_mark", "a mark fault dns-saturation offers: flood_started, flood_stopped"),
    (lambda d: _measure("web_name_recovery_seconds")(d).pop("window"),
     "expectations[7].measure.window", "what the runner measures"),
    (lambda d: _measure("web_name_recovery_seconds")(d).update(within_seconds=0),
     "expectations[7].measure.within_seconds", "seconds above 0"),
    (lambda d: _measure("web_name_recovery_seconds")(d).update(settle_seconds=-1),
     "expectations[7].measure.settle_seconds", "seconds from 0 to 3600"),
])
def test_bad_marks_and_facts_are_refused(tmp_path, edit, field, expected) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario(dns_scenario(tmp_path, edit))
    assert info.value.field == field and expected in info.value.expected, str(info.value)


@pytest.mark.parametrize("edit, field, expected", [
    # a fact has its unit
    (lambda d: next(e for e in d["expectations"] if e["name"] == "names_outside_cluster_zones").update(unit="ratio"),
     "expectations[0].unit", "'names', the unit of fact names_outside_cluster_zones"),
    # a fault marks times while it is in force
    (lambda d: _measure("after_name_success_ratio")(d).update(from_mark="flood_stopped"),
     "expectations[9].measure.window", "fault, the window from_mark flood_stopped lies in"),
    # a misspelt fault kind is refused as such, not as a fact or mark it lacks
    (lambda d: d["fault"].update(kind="dns-saturatio"), "fault.kind", "dns-saturation"),
    # the flood must end while the fault holds, or its end is never marked
    (lambda d: d["fault"]["params"].update(load_seconds=60), "runner.windows.hold_seconds",
     "at least 73 s: load_seconds + query_timeout_seconds + 10 s"),
    # a fault only a drill file drives is refused as such (a newcomer met its missing facts first)
    (lambda d: d["fault"].update(kind="webhook-backend-down"), "fault.kind", "those with for_scenario"),
])
def test_facts_units_mark_windows_and_the_fault_kind(tmp_path, edit, field, expected) -> None:
    from harness.cli.scenarios import check_references

    with pytest.raises(ScenarioError) as info:
        check_references(load_scenario(dns_scenario(tmp_path, edit)))
    assert info.value.field == field and expected in str(info.value), str(info.value)


def test_a_fault_without_marks_offers_none(tmp_path) -> None:
    def edit(d):
        d["expectations"][0]["measure"].update(from_mark="flood_started")

    with pytest.raises(ScenarioError) as info:
        load_scenario(data_scenario(tmp_path, edit))
    assert info.value.field == "expectations[0].measure.from_mark" and info.value.expected.endswith("offers: none")
