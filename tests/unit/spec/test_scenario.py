from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

import harness.spec.scenario as scenario_module
from harness.core import resources
from harness.spec import loading, model, schema
from harness.spec.scenario import SCHEMA, Bound, ScenarioError, find_scenario, load_scenario, load_scenarios

EXAMPLE = Path(__file__).parents[1] / "data" / "example-drill.yaml"


def example_data() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def write(tmp_path: Path, data, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def load_error(tmp_path: Path, data) -> ScenarioError:
    path = write(tmp_path, data)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert info.value.path == path
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)
    return info.value


def with_bound(unit: str, op: str, value) -> dict:
    """The example with its second expectation measured in ``unit`` and bound ``op value``."""
    data = example_data()
    data["expectations"][1]["name"] = f"measured_{unit}"  # its name agrees with the unit
    data["expectations"][1]["unit"] = unit
    data["expectations"][1]["bound"] = {"op": op, "value": value}
    return data


# --- the valid example -------------------------------------------------------

def test_schema_is_a_valid_draft_2020_12_schema():
    Draft202012Validator.check_schema(SCHEMA)


def test_example_loads_with_defaults_and_types():
    s = load_scenario(EXAMPLE)
    assert s.name == "example-drill"
    assert s.drill == "drills/test_example_drill.py"
    assert s.claim.startswith("Existing pods keep running") and not s.claim.endswith("\n")
    assert [src.title for src in s.sources] == ["Kubernetes Components", "Kubelet"]
    assert s.sources[0].section is None and s.sources[1].section == "Synopsis"
    assert (s.cluster_config, s.needs_node_access) == ("ha", True)
    assert (s.fault_kind, s.fault_method) == ("control-plane-stop", "pause-node-containers")
    assert s.fault_params == {"hold_seconds": 60, "mode": "paused"}
    assert s.workload == {"replicas": 3}
    assert s.probe_interval_seconds == 0.25
    assert [e.name for e in s.expectations] == ["workload_http_success_ratio", "api_recovery_seconds",
                                                 "pods_restarted"]
    assert s.expectations[0].bound == Bound(">=", 0.99) and s.expectations[0].phase == "control-plane-down"
    assert [c.name for c in s.cases] == ["paused", "refused"]
    assert s.path == EXAMPLE


def test_optional_fields_default(tmp_path):
    data = example_data()
    for key in ("workload", "probes", "cases"):
        del data[key]
    del data["cluster"]["needs_node_access"]
    del data["fault"]["params"]
    s = load_scenario(write(tmp_path, data))
    assert s.workload == {} and s.cases == () and s.fault_params == {}
    # Not said: its fault (control-plane-stop) decides it.
    assert s.needs_node_access is True
    assert s.probe_interval_seconds == 0.5


def test_node_access_follows_what_the_drill_does_on_the_nodes(tmp_path):
    data = example_data()  # fault control-plane-stop
    data["cluster"]["needs_node_access"] = False
    with pytest.raises(ScenarioError) as refused:
        load_scenario(write(tmp_path, data))
    assert refused.value.field == "cluster.needs_node_access"
    assert "stops the kubelet and kills the control-plane static pods' containers" in refused.value.expected
    # A fault that needs none, in a drill file that still goes to the nodes: it must say why.
    data["fault"] = {"kind": "planted-secret", "method": "m"}
    data["cluster"]["needs_node_access"] = True
    with pytest.raises(ScenarioError) as refused:
        load_scenario(write(tmp_path, data))
    assert refused.value.field == "cluster.node_access_for"
    data["cluster"]["node_access_for"] = "reads etcd with etcdctl on a control-plane node"
    s = load_scenario(write(tmp_path, data))
    assert s.node_access_needs() == ["reads etcd with etcdctl on a control-plane node"]
    del data["cluster"]["needs_node_access"], data["cluster"]["node_access_for"]
    assert load_scenario(write(tmp_path, data)).needs_node_access is False


def test_every_built_in_drill_with_node_access_says_what_it_does_there():
    from harness.spec.scenario import load_scenarios

    for s in load_scenarios(resources.scenarios_dir()):
        if s.needs_node_access:
            assert s.node_access_needs() and all(n.strip() for n in s.node_access_needs()), s.name


def test_expectation_lookup_and_unknown_name():
    s = load_scenario(EXAMPLE)
    assert s.expectation("api_recovery_seconds").unit == "seconds"
    with pytest.raises(KeyError) as info:
        s.expectation("nope")
    assert "nope" in str(info.value) and "api_recovery_seconds" in str(info.value)


def test_params_for_merges_case_over_fault_params_without_aliasing():
    s = load_scenario(EXAMPLE)
    assert s.params_for(None) == {"hold_seconds": 60, "mode": "paused"}
    assert s.params_for("paused") == {"hold_seconds": 60, "mode": "paused"}
    merged = s.params_for("refused")
    assert merged == {"hold_seconds": 60, "mode": "refused"}
    merged["hold_seconds"] = 1
    assert s.fault_params["hold_seconds"] == 60
    with pytest.raises(KeyError, match="refused"):
        s.params_for("unknown-case")


def test_to_dict_is_json_and_round_trips_through_the_schema(tmp_path):
    s = load_scenario(EXAMPLE)
    d = json.loads(json.dumps(s.to_dict()))
    assert d["path"] == str(EXAMPLE)
    assert d["expectations"][0]["bound"] == {"op": ">=", "value": 0.99}
    del d["path"]
    for e in d["expectations"]:
        if e["phase"] is None:
            del e["phase"]
    for src in d["source"]:
        if src["section"] is None:
            del src["section"]
    assert load_scenario(write(tmp_path, d)).to_dict() | {"path": ""} == s.to_dict() | {"path": ""}


def test_scenario_is_hashable():
    assert hash(load_scenario(EXAMPLE)) == hash(load_scenario(EXAMPLE))


def test_loading_never_modifies_the_file():
    before = (EXAMPLE.read_bytes(), EXAMPLE.stat().st_mtime_ns)
    load_scenario(EXAMPLE)
    assert (EXAMPLE.read_bytes(), EXAMPLE.stat().st_mtime_ns) == before


# --- Bound ----------------------------------------------------------------------

@pytest.mark.parametrize("op,value,measured,holds", [
    (">=", 0.99, 0.99, True), (">=", 0.99, 0.98, False), (">", 1, 1, False), ("<", 1, 0.5, True),
    ("<=", 30, 30.0, True), ("<=", 30, 30.1, False), ("==", 3, 3, True), ("==", False, False, True),
    ("==", False, 0, False), ("==", 1, True, False), (">=", 0.5, None, False),
    (">=", 0.5, float("nan"), False), (">=", 0.5, "1", False),
])
def test_bound_holds(op, value, measured, holds):
    assert Bound(op, value).holds(measured) is holds


def test_bound_describe_and_bad_op():
    assert Bound(">=", 0.99).describe() == ">= 0.99"
    assert Bound("==", True).describe() == "== true"
    with pytest.raises(ValueError, match="=>"):
        Bound("=>", 1)


# --- bad input ------------------------------------------------------------------

def test_missing_required_field(tmp_path):
    data = example_data()
    del data["fault"]["kind"]
    err = load_error(tmp_path, data)
    assert err.field == "fault.kind"
    assert str(err).endswith("field 'fault.kind': expected a string (required), got nothing")


def test_missing_top_level_list(tmp_path):
    data = example_data()
    del data["expectations"]
    err = load_error(tmp_path, data)
    assert (err.field, err.expected, err.got) == ("expectations", "a list (required)", "nothing")


def test_wrong_type(tmp_path):
    data = example_data()
    data["cluster"]["needs_node_access"] = "yes please"
    err = load_error(tmp_path, data)
    assert err.field == "cluster.needs_node_access"
    assert err.expected == "a boolean (true or false)" and err.got == "'yes please'"


def test_wrong_type_for_bound_value(tmp_path):
    data = example_data()
    data["expectations"][1]["bound"]["value"] = "thirty"
    err = load_error(tmp_path, data)
    assert err.field == "expectations[1].bound.value"
    assert "a number" in err.expected and err.got == "'thirty'"


@pytest.mark.parametrize("unit, value, expected", [
    ("ratio", 2, "a ratio from 0 to 1"),     # could never pass with >=
    ("ratio", -1, "a ratio from 0 to 1"),    # could never fail with >=
    ("seconds", -5, "seconds, 0 or more"),   # could never pass with <=
])
def test_a_bound_outside_what_its_unit_can_measure_is_refused(tmp_path, unit, value, expected):
    data = example_data()
    data["expectations"][1]["name"] = f"measured_{unit}"  # its name agrees with the unit
    data["expectations"][1]["unit"] = unit
    data["expectations"][1]["bound"] = {"op": ">=" if unit == "ratio" else "<=", "value": value}
    err = load_error(tmp_path, data)
    assert (err.field, err.expected, err.got) == ("expectations[1].bound.value", expected, repr(value))


@pytest.mark.parametrize("unit, op, value", [
    ("count", ">=", 0), ("seconds", ">=", 0), ("ratio", ">=", 0.0), ("count", ">", -1), ("ratio", "<=", 1),
    ("factor", ">=", 0),
])
def test_a_bound_every_measurement_holds_is_refused(tmp_path, unit, op, value):
    data = with_bound(unit, op, value)
    err = load_error(tmp_path, data)
    assert (err.field, err.got) == ("expectations[1].bound", f"{op} {value!r}")
    assert err.expected.startswith("a bound a measurement could break")


@pytest.mark.parametrize("unit, op, value", [
    ("count", ">=", 1), ("count", "==", 0), ("seconds", ">", 0), ("ratio", "<", 1), ("ratio", "<=", 0.0),
])
def test_a_bound_a_measurement_can_break_is_accepted(tmp_path, unit, op, value):
    data = with_bound(unit, op, value)
    load_scenario(write(tmp_path, data))


@pytest.mark.parametrize("unit, op, value", [
    ("seconds", "<", 0), ("count", "<", 0), ("ratio", "<", 0), ("ratio", ">", 1), ("factor", "<", 0.0),
])
def test_a_bound_no_measurement_can_meet_is_refused(tmp_path, unit, op, value):
    # It would fail on every platform, a healthy one too.
    data = with_bound(unit, op, value)
    err = load_error(tmp_path, data)
    assert (err.field, err.got) == ("expectations[1].bound", f"{op} {value!r}")
    assert err.expected.startswith("a bound a measurement could meet")


def test_two_cases_whose_namespaces_would_be_the_same_are_refused(tmp_path):
    # A namespace has at most 63 characters: two long names that differ only past it would share one.
    data = example_data()
    data["name"] = "a-scenario-name"
    data["cases"][0]["name"] = "a" * 49 + "b"  # a case name has at most 50 characters
    data["cases"][1]["name"] = "a" * 49 + "c"
    err = load_error(tmp_path, data)
    assert err.field == "cases[1].name" and "cases[0] runs in kdrill-" in err.expected


@pytest.mark.parametrize("field_path", [("title",), ("claim",), ("expectations", 0, "description"), ("fault", "method")])
def test_text_of_only_spaces_is_refused(tmp_path, field_path):
    data = example_data()
    parent = data
    for key in field_path[:-1]:
        parent = parent[key]
    parent[field_path[-1]] = "  \n "
    err = load_error(tmp_path, data)
    assert err.field == ".".join(str(k) for k in field_path).replace(".0.", "[0].")
    assert err.expected == "a string with text, not only spaces"


def test_a_key_with_control_characters_is_named_escaped(tmp_path):
    data = example_data()
    data["fault"]["\x1b]0;pwned\x07\x1b[31mevil"] = 1
    err = load_error(tmp_path, data)
    assert "\x1b" not in str(err) and "\x07" not in str(err)
    assert "field 'fault.\\x1b]0;pwned\\x07\\x1b[31mevil'" in str(err)


def test_an_empty_list_of_cases_is_refused(tmp_path):
    data = example_data()
    data["cases"] = []
    err = load_error(tmp_path, data)
    assert (err.field, err.got) == ("cases", "[]") and "at least one case" in err.expected


def test_bad_name_pattern(tmp_path):
    data = example_data()
    data["name"] = "Control_Plane"
    err = load_error(tmp_path, data)
    assert err.field == "name" and err.got == "'Control_Plane'"
    assert "lowercase letters and digits in words joined by single '-'" in err.expected


def test_bad_expectation_name_pattern(tmp_path):
    data = example_data()
    data["expectations"][0]["name"] = "has-dash"
    err = load_error(tmp_path, data)
    assert err.field == "expectations[0].name" and "'_'" in err.expected


def test_bad_enum_op_message_matches_documented_form(tmp_path):
    data = example_data()
    data["expectations"][2]["bound"]["op"] = "=>"
    err = load_error(tmp_path, data)
    assert str(err) == (f"{tmp_path / 's.yaml'}: field 'expectations[2].bound.op': "
                        "expected one of '<=', '<', '>=', '>', '==', got '=>'")


def test_unknown_field_lists_allowed(tmp_path):
    data = example_data()
    data["fault"]["colour"] = "red"
    err = load_error(tmp_path, data)
    assert str(err).endswith("field 'fault.colour': expected no such field (allowed: kind, method, params, outside_drill)")
    assert err.got is None


def test_unknown_top_level_field(tmp_path):
    data = example_data()
    data["owner"] = "me"
    err = load_error(tmp_path, data)
    assert err.field == "owner" and "allowed: name, title, drill" in err.expected


def test_free_form_mappings_accept_anything(tmp_path):
    data = example_data()
    data["fault"]["params"] = {"anything": {"nested": [1, 2]}}
    data["workload"] = {"image": "x", "ports": [80]}
    s = load_scenario(write(tmp_path, data))
    assert s.fault_params == {"anything": {"nested": [1, 2]}} and s.workload["ports"] == [80]


@pytest.mark.parametrize("workload, field", [({"replicas": "two"}, "workload.replicas"),
                                              ({"replicas": -3}, "workload.replicas"),
                                              ({"node_port": 99999}, "workload.node_port"),
                                              ({"node_port": "abc"}, "workload.node_port")])
def test_the_workload_keys_drills_read_are_checked_before_anything_runs(tmp_path, workload, field):
    """A review found replicas 'two' and node_port 99999 accepted, failing only once the drill had
    made its namespace."""
    data = example_data()
    data["workload"] = workload
    assert load_error(tmp_path, data).field == field


def test_duplicate_expectation_name(tmp_path):
    data = example_data()
    data["expectations"][2]["name"] = "workload_http_success_ratio"
    err = load_error(tmp_path, data)
    assert err.field == "expectations[2].name"
    assert "expectations[0]" in err.expected and err.got == "'workload_http_success_ratio'"


def test_duplicate_case_name(tmp_path):
    data = example_data()
    data["cases"][1]["name"] = "paused"
    err = load_error(tmp_path, data)
    assert err.field == "cases[1].name" and "cases[0]" in err.expected


def test_bool_bound_needs_equality(tmp_path):
    data = example_data()
    data["expectations"][2]["bound"]["op"] = ">="
    err = load_error(tmp_path, data)
    assert err.field == "expectations[2].bound.value" and "'=='" in err.expected


@pytest.mark.parametrize("interval", [0.6, 1, 0, -0.1, 1e-9, 0.099])
def test_probe_interval_must_be_from_a_tenth_to_half_a_second(tmp_path, interval):
    """Below 0.1 s a probe's 20,000 samples would run out within a long drill (1e-9 is nonsense)."""
    data = example_data()
    data["probes"]["interval_seconds"] = interval
    err = load_error(tmp_path, data)
    assert err.field == "probes.interval_seconds" and err.got == repr(interval)
    assert "from 0.1 to 0.5" in err.expected


@pytest.mark.parametrize("interval", [0.1, 0.25, 0.5])
def test_probe_interval_from_a_tenth_to_half_a_second_is_accepted(tmp_path, interval):
    data = example_data()
    data["probes"]["interval_seconds"] = interval
    assert load_scenario(write(tmp_path, data)).probe_interval_seconds == interval


def test_no_shipped_scenario_samples_faster_than_the_minimum():
    from harness.spec.scenario import MIN_PROBE_INTERVAL_SECONDS

    for scenario in load_scenarios(resources.scenarios_dir()):
        assert scenario.probe_interval_seconds >= MIN_PROBE_INTERVAL_SECONDS, scenario.path


@pytest.mark.parametrize("unit", ["milliseconds", "ms", "Seconds", "minutes", "percent"])
def test_a_drill_files_expectation_unit_outside_the_vocabulary_is_refused(tmp_path, unit):
    """A drill file's scenario (not data-only) too: its drill measures in seconds, not "milliseconds"."""
    data = example_data()
    data["expectations"][0]["unit"] = unit
    err = load_error(tmp_path, data)
    assert err.field == "expectations[0].unit" and err.got == repr(unit)
    assert "seconds, ratio, count" in err.expected


def test_a_cases_expectation_unit_outside_the_vocabulary_is_refused(tmp_path):
    from scenario_copies import load_edited

    def edit(data):
        data["cases"][0].setdefault("expectations", []).append(
            {"name": "extra_seconds", "description": "d", "bound": {"op": "<=", "value": 1}, "unit": "msec"})

    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "leader-failover", edit)
    assert info.value.field.startswith("cases[0].expectations[") and info.value.field.endswith("].unit")
    assert info.value.got == "'msec'"


def test_the_control_plane_stop_drill_measures_seconds_not_milliseconds(tmp_path):
    from scenario_copies import load_edited

    def edit(data):
        next(e for e in data["expectations"] if e["name"] == "api_recovery_seconds")["unit"] = "milliseconds"

    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "control-plane-stop", edit)
    assert info.value.field.endswith(".unit") and info.value.got == "'milliseconds'"


def test_a_data_only_metric_expectation_keeps_the_metrics_own_unit(tmp_path):
    from scenario_copies import load_edited

    def edit(data):
        for e in data["expectations"]:
            if e["unit"] == "apiservices":  # a metric measure: the metric's own unit, any word
                e["unit"] = "unavailable_apiservices"

    scenario = load_edited(tmp_path, "apiservice-unavailable", edit)
    assert "unavailable_apiservices" in {e.unit for e in scenario.expectations}


@pytest.mark.parametrize("name, unit", [("follower_down_write_success_ratio", "count"),
                                         ("quorum_lost_workload_http_success_ratio", "per_second"),
                                         ("quorum_regained_seconds", "count")])
def test_an_expectation_named_in_seconds_or_as_a_ratio_has_that_unit(tmp_path, name, unit):
    from scenario_copies import load_edited

    def edit(data):
        next(e for e in data["expectations"] if e["name"] == name)["unit"] = unit

    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "etcd-member-loss", edit)
    assert info.value.field.endswith(".unit") and info.value.got == repr(unit) and name in info.value.expected


def test_an_expectation_named_as_a_factor_has_that_unit(tmp_path):
    from scenario_copies import load_edited

    def edit(data):
        name = "slow_follower_others_write_median_factor"
        next(e for e in data["expectations"] if e["name"] == name)["unit"] = "ratio"

    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "etcd-slow-disk", edit)
    assert info.value.field.endswith(".unit") and info.value.got == "'ratio'" and "'factor'" in info.value.expected


def test_a_data_only_expectations_phase_is_one_the_runner_opens(tmp_path):
    from scenario_copies import load_edited

    def edit(data):
        data["expectations"][0]["phase"] = "recovery"

    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "pod-delete", edit)
    assert info.value.field == "expectations[0].phase" and info.value.got == "'recovery'"
    assert info.value.expected == "one of the phases the runner opens: setup, baseline, fault, after"


def test_the_runner_opens_the_phases_the_rule_names():
    import re

    from harness.engine import runner
    from harness.spec.schema import RUNNER_PHASES

    opened = re.findall(r'drill\.phase\("([a-z]+)"', Path(runner.__file__).read_text())
    assert tuple(opened) == RUNNER_PHASES


def test_the_unit_vocabulary_holds_every_unit_the_rules_and_measures_use():
    from harness.spec.scenario import BOOL_UNITS, MEASURE_UNITS, UNITS

    assert set(MEASURE_UNITS.values()) | set(BOOL_UNITS) | {"seconds", "ratio"} <= set(UNITS)
    shipped = {e.unit for s in load_scenarios(resources.scenarios_dir())
               for e in [*s.expectations, *(x for c in s.cases for x in c.expectations)]}
    assert shipped <= set(UNITS)


def test_empty_expectations_list(tmp_path):
    data = example_data()
    data["expectations"] = []
    err = load_error(tmp_path, data)
    assert err.field == "expectations" and err.expected == "a list with at least 1 item"


def test_source_url_must_be_http(tmp_path):
    data = example_data()
    data["source"][0]["url"] = "kubernetes.io/docs"
    err = load_error(tmp_path, data)
    assert err.field == "source[0].url" and "URL" in err.expected


def test_yaml_syntax_error_names_the_line(tmp_path):
    text = EXAMPLE.read_text().replace("  config: ha\n", "  config: [ha\n")
    err = load_error(tmp_path, text)
    assert err.field == "<file>" and err.expected == "valid YAML"
    assert err.line is not None and f"line {err.line}" in str(err)


def test_yaml_error_line_is_the_offending_line(tmp_path):
    err = load_error(tmp_path, "name: a\ntitle: b\n  bad: indent\n")
    assert err.line == 3


def test_duplicate_yaml_key_is_an_error(tmp_path):
    text = EXAMPLE.read_text().replace("workload: {replicas: 3}\n", "workload: {replicas: 3}\nworkload: {}\n")
    err = load_error(tmp_path, text)
    assert err.field == "<file>" and "duplicate key 'workload'" in err.got and err.line is not None


@pytest.mark.parametrize("text,got_fragment", [
    ("- a\n- b\n", "list"), ("just a string\n", "str"), ("", "an empty file"),
])
def test_non_mapping_file(tmp_path, text, got_fragment):
    err = load_error(tmp_path, text)
    assert err.field == "<file>" and err.expected == "a mapping of scenario fields"
    assert got_fragment in err.got


def test_first_error_is_deterministic_and_in_file_order(tmp_path):
    data = example_data()
    data["title"] = 5
    del data["fault"]["method"]
    data["expectations"][0]["unit"] = ""
    errors = set()
    for _ in range(3):
        errors.add(str(load_error(tmp_path, data)))
    assert len(errors) == 1
    assert "field 'title'" in errors.pop()


def test_error_is_picklable(tmp_path):
    data = example_data()
    del data["fault"]["kind"]
    err = load_error(tmp_path, data)
    copy = pickle.loads(pickle.dumps(err))
    assert str(copy) == str(err) and copy.field == "fault.kind"


def test_relative_display_path(tmp_path, monkeypatch):
    data = example_data()
    del data["claim"]
    (tmp_path / "scenarios").mkdir()
    write(tmp_path / "scenarios", data, "foo.yaml")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ScenarioError) as info:
        load_scenario(tmp_path / "scenarios" / "foo.yaml")
    assert str(info.value).startswith(f"scenarios{os.sep}foo.yaml: field 'claim': expected a string (required)")


# --- directories ----------------------------------------------------------------

def make_dir(tmp_path: Path, names: dict[str, str]) -> Path:
    d = tmp_path / "scenarios"
    d.mkdir()
    for file_name, scenario_name in names.items():
        data = example_data()
        data["name"] = scenario_name
        write(d, data, file_name)
    (d / "README.md").write_text("not a scenario")
    return d


def test_load_scenarios_sorted_by_name(tmp_path):
    d = make_dir(tmp_path, {"a.yaml": "zeta", "b.yml": "alpha", "c.yaml": "mid"})
    assert [s.name for s in load_scenarios(d)] == ["alpha", "mid", "zeta"]


def test_duplicate_scenario_names_name_both_files(tmp_path):
    d = make_dir(tmp_path, {"one.yaml": "same", "two.yaml": "same"})
    with pytest.raises(ScenarioError) as info:
        load_scenarios(d)
    message = str(info.value)
    assert "one.yaml" in message and "two.yaml" in message and info.value.field == "name"


def test_invalid_file_in_directory_is_reported(tmp_path):
    d = make_dir(tmp_path, {"ok.yaml": "fine"})
    (d / "broken.yaml").write_text("name: [\n")
    with pytest.raises(ScenarioError) as info:
        load_scenarios(d)
    assert info.value.path.name == "broken.yaml"


def test_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_scenarios(tmp_path / "nope")


def test_find_by_name_or_path(tmp_path):
    d = make_dir(tmp_path, {"a.yaml": "control-plane-stop", "b.yaml": "dns-outage"})
    assert find_scenario("dns-outage", d).path == d / "b.yaml"
    assert find_scenario(str(d / "a.yaml"), d).name == "control-plane-stop"
    assert find_scenario(d / "a.yaml").name == "control-plane-stop"


def test_find_unknown_name_lists_known(tmp_path):
    d = make_dir(tmp_path, {"a.yaml": "control-plane-stop", "b.yaml": "dns-outage"})
    with pytest.raises(ScenarioError) as info:
        find_scenario("etcd-loss", d)
    message = str(info.value)
    assert "'etcd-loss'" in message and "'control-plane-stop'" in message and "'dns-outage'" in message


@pytest.mark.parametrize("field, value", [
    (("fault", "params", "hold_seconds"), float("nan")),
    (("fault", "params", "hold_seconds"), float("inf")),
    (("expectations", 0, "bound", "value"), float("inf")),
    (("probes", "interval_seconds"), float("nan")),
])
def test_non_finite_numbers_are_refused_anywhere(tmp_path, field, value):
    data = example_data()
    target = data
    for part in field[:-1]:
        target = target.setdefault(part, {}) if isinstance(part, str) else target[part]
    target[field[-1]] = value
    err = load_error(tmp_path, data)
    assert "finite number" in err.expected or "number" in err.expected, err


@pytest.mark.parametrize("name", ["a--b", "x" * 51, "-a", "a-"])
def test_names_that_would_collide_or_overflow_as_file_names_are_refused(tmp_path, name):
    data = example_data()
    data["name"] = name
    assert load_error(tmp_path, data).field == "name"


@pytest.mark.parametrize("drill_file", ["../outside/test_evil.py", "/abs/test_x.py", "drills/../../x.py",
                                        "tests/test_x.py"])
def test_drill_files_outside_drills_are_refused(tmp_path, drill_file):
    data = example_data()
    data["drill"] = drill_file
    assert load_error(tmp_path, data).field == "drill"


def test_aliases_are_refused_before_they_expand(tmp_path):
    path = tmp_path / "bomb.yaml"
    levels = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]" for i in range(8)]
    path.write_text("\n".join(levels) + "\n")
    with pytest.raises(ScenarioError, match="aliases are not allowed"):
        load_scenario(path)


def test_deep_nesting_is_a_clear_error(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("name: " + "[" * 20000 + "]" * 20000 + "\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert info.value.field == "<file>"


@pytest.mark.parametrize("written, field, got", [
    ("workload: {replicas: 010}", "workload.replicas", "'010'"),  # YAML 1.1 read it as octal 8
    ("workload: {replicas: 1:30}", "workload.replicas", "'1:30'"),  # YAML 1.1: sexagesimal 90
    ("workload: {replicas: 1_0}", "workload.replicas", "'1_0'"),
])
def test_yaml_1_1_numbers_are_not_read_as_numbers_nobody_wrote(tmp_path, written, field, got):
    text = EXAMPLE.read_text().replace("workload: {replicas: 3}", written)
    assert written in text
    err = load_error(tmp_path, text)
    assert err.field == field and got in str(err.got)


def test_yaml_1_1_booleans_stay_strings_and_are_refused(tmp_path):
    data = example_data()
    text = yaml.safe_dump(data, sort_keys=False)
    text = text.replace("needs_node_access: true", "needs_node_access: yes").replace(
        "needs_node_access: false", "needs_node_access: yes")
    assert "needs_node_access: yes" in text
    err = load_error(tmp_path, text)
    assert err.field == "cluster.needs_node_access" and "'yes'" in str(err.got)


def test_yaml_1_2_numbers_and_booleans_still_read():
    from harness.spec.scenario import _StrictLoader

    read = yaml.load("[10, -3, 0, 0.5, 5., .5, 1e3, -2.5e-1, true, False, ~, 2026-11-30]", Loader=_StrictLoader)
    assert read == [10, -3, 0, 0.5, 5.0, 0.5, 1000.0, -0.25, True, False, None, "2026-11-30"]
    assert [type(v) for v in read[:3]] == [int, int, int]


@pytest.mark.parametrize("written, got", [
    ("workload: {replicas: !!int 010}", "explicit tags"),  # would read as octal 8
    ("workload: {replicas: !!int 3}", "explicit tags"),
    ("workload: {replicas: " + "9" * 5000 + "}", "digits"),
    ("workload: {replicas: 3, 1: x}", "a key must be a string, got 1"),
    ("workload: {replicas: 3, true: x}", "a key must be a string, got True"),
])
def test_tags_huge_numbers_and_non_string_keys_are_clear_errors(tmp_path, written, got):
    text = EXAMPLE.read_text().replace("workload: {replicas: 3}", written)
    err = load_error(tmp_path, text)
    assert err.field == "<file>" and got in str(err.got)


def test_a_bound_must_fit_its_unit(tmp_path):
    data = example_data()
    numeric = next(e for e in data["expectations"] if e["unit"] not in ("bool", "flag"))
    numeric["bound"] = {"op": "==", "value": True}
    err = load_error(tmp_path, data)
    assert err.field.endswith(".bound.value") and "a number (its unit is" in err.expected


def test_a_misspelt_field_is_refused_with_the_nearest_known_one(tmp_path):
    """A window key one letter off is named with the key it was meant to be (nothing close: no guess)."""
    from harness.spec.scenario import ScenarioError, load_scenario

    data = yaml.safe_load((resources.scenarios_dir() / "service-without-endpoints.yaml").read_text())
    windows = data["runner"]["windows"]
    windows["hold_second"] = windows.pop("hold_seconds")
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    # The missing key is said first, and points at the stray one.
    assert str(err.value).endswith("field 'runner.windows.hold_seconds': expected a number (required), "
                                   "got nothing; 'hold_second' is there: misspelt?"), err.value
    windows["hold_seconds"] = windows["hold_second"]  # the required key there too: only the stray one is wrong
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value).endswith("did you mean 'hold_seconds'?"), err.value


def test_an_unknown_scenario_name_gets_the_nearest_and_a_case_suffix_is_explained() -> None:
    from harness.spec.scenario import find_scenario

    with pytest.raises(ScenarioError, match="did you mean 'pod-delete'"):
        find_scenario("pod-delet")
    with pytest.raises(ScenarioError, match="'leader-failover' runs every one of its cases"):
        find_scenario("leader-failover[scheduler]")


@pytest.mark.parametrize("typo, meant", [("manifest", "manifests"), ("replica", "replicas"), ("registry", "registries")])
def test_a_misspelt_workload_key_of_a_data_only_scenario_is_refused(tmp_path, typo, meant):
    """Read silently past, ``manifest:`` would drop every object it declares from the drill."""
    data = yaml.safe_load((resources.scenarios_dir() / "webhook-outage-blackhole.yaml").read_text())
    data["workload"][typo] = data["workload"].pop(meant, 2)
    error = load_error(tmp_path, data)
    assert error.field == f"workload.{typo}" and f"did you mean {meant}?" in error.expected, error


def test_a_drill_files_own_workload_keys_still_load():
    """dns-ndots's drill reads workload.drill_zone and its lookups: not the runner's keys, not refused."""
    scenario = load_scenario(resources.scenarios_dir() / "dns-ndots.yaml")
    assert "drill_zone" in scenario.workload


@pytest.mark.parametrize("where", ["title", "claim", "expectations"])
def test_a_terminal_escape_in_any_text_is_refused(tmp_path, where):
    """list, --plan and the report print these: an escape sequence would reach the terminal."""
    data = example_data()
    if where == "expectations":
        data["expectations"][0]["description"] = "ok \x1b]0;pwned\x07"
    else:
        data[where] = "Looks fine\x1b[2K\x1b[1A"
    error = load_error(tmp_path, data)
    assert error.field.startswith(where) and "control characters" in error.expected, error
    assert "\x1b" not in str(error)


@pytest.mark.parametrize("mark", ["\u202e", "\u2066", "\u200f"])
def test_a_bidirectional_override_in_text_is_refused(tmp_path, mark):
    """An override or isolate makes a title read in another order than it is written."""
    data = example_data()
    data["title"] = f"Safe drill {mark}gnp.exe"
    error = load_error(tmp_path, data)
    assert error.field == "title" and "control characters" in error.expected, error
    assert mark not in str(error)


@pytest.mark.parametrize("name", ["pod-delete.txt", "pod-delete.YAML", "pod-delete.yaml.bak"])
def test_a_scenario_file_not_ending_yaml_is_refused_not_taken_for_a_name(tmp_path, name):
    """Taken for the name pod-delete, the copy would be planned and the built-in one run."""
    path = tmp_path / name
    path.write_text((resources.scenarios_dir() / "pod-delete.yaml").read_text())
    for given in (str(path), name):
        with pytest.raises(ScenarioError) as info:
            find_scenario(given)
        assert "ending .yaml or .yml" in info.value.expected and name in str(info.value)


def test_hidden_yaml_files_beside_scenarios_are_not_read_as_scenarios(tmp_path):
    (tmp_path / "pod-delete.yaml").write_text((resources.scenarios_dir() / "pod-delete.yaml").read_text())
    (tmp_path / ".gitlab-ci.yml").write_text("stages: [test]\n")
    assert [s.name for s in load_scenarios(tmp_path)] == ["pod-delete"]


@pytest.mark.parametrize("edit, field, says", [
    ({"kind": "median_latency_seconds", "within_seconds": 1.0}, "within_seconds", "no within_seconds on median"),
    ({"settle_seconds": 50}, "settle_seconds", "fewer seconds than the fault window's 50"),
])
def test_a_measure_narrowed_to_nothing_or_to_a_biased_value_is_refused(tmp_path, edit, field, says):
    data = yaml.safe_load((resources.scenarios_dir() / "dns-saturation.yaml").read_text())
    data["runner"]["windows"]["hold_seconds"] = 50
    expectation = next(e for e in data["expectations"] if (e.get("measure") or {}).get("settle_seconds"))
    expectation["measure"].update(edit)
    if edit.get("kind"):
        expectation["unit"] = "seconds"
    error = load_error(tmp_path, data)
    assert error.field.endswith(f"measure.{field}") and says in error.expected, error


def test_every_name_of_the_scenario_module_is_still_importable_from_it():
    # The parts live in harness/spec/ (schema, model, loading, *_rules); the rest of kdrill and
    # plug-ins import them from harness.spec.scenario.
    for name in scenario_module.__all__ + ["_StrictLoader"]:
        assert getattr(scenario_module, name) is not None, name
    assert scenario_module.load_scenario is loading.load_scenario and scenario_module.Scenario is model.Scenario
    assert scenario_module.SCHEMA is schema.SCHEMA
