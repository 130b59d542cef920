"""``kdrill schema``: the scenario format as one JSON Schema for editors, generated from the
declarations validation uses (harness/spec/editor_schema.py). Every shipped scenario validates
against it, and what the fault's or a probe kind's declarations refuse, it refuses too."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from jsonschema import Draft202012Validator

from harness.cli import main
from harness.core import resources
from harness.spec.editor_schema import scenario_json_schema


@pytest.fixture(scope="module")
def validator():
    schema = scenario_json_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def shipped(name: str) -> dict:
    return yaml.safe_load((resources.scenarios_dir() / f"{name}.yaml").read_text())


def test_every_shipped_scenario_validates(validator):
    paths = sorted(resources.scenarios_dir().glob("*.yaml"))
    assert len(paths) > 20
    assert {p.name: [e.message for e in validator.iter_errors(yaml.safe_load(p.read_text()))] for p in paths} == \
        {p.name: [] for p in paths}


def errors(validator, data) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(data)]


@pytest.mark.parametrize("edit, where", [
    (lambda d: d["fault"]["params"].update(cuont=1), "fault.params"),  # a parameter pod-delete does not declare
    (lambda d: d["fault"]["params"].update(count=0), "fault.params.count"),  # below its minimum
    (lambda d: d["fault"].update(kind="pod-delet"), "fault.kind"),  # no such fault kind
    (lambda d: d["runner"]["probes"][0].update(targett="name"), "runner.probes.0"),  # a field incluster-http lacks
    (lambda d: d["runner"]["probes"][0].pop("target"), "runner.probes.0"),  # a field it requires
    (lambda d: d["runner"]["probes"][0].update(kind="incluster-htp"), "runner.probes.0.kind"),
])
def test_what_the_declarations_refuse_the_schema_refuses(validator, edit, where):
    data = copy.deepcopy(shipped("pod-delete"))
    edit(data)
    found = errors(validator, data)
    assert any(line.startswith(where) for line in found), found


def test_kdrill_schema_prints_it(capsys):
    assert main(["schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(scenario_json_schema()))
    assert printed["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert "expected: " in json.dumps(printed)  # kdrill's own wording, as the editor's hover text


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.update(name="pod-delete\n"), "name"),
    (lambda d: d["expectations"][0].update(name=d["expectations"][0]["name"] + "\n"), "expectations[0].name"),
])
def test_a_final_newline_fails_a_pattern_here_as_in_an_editor(tmp_path, edit, field):
    """Python's ``$`` matches before a final newline; ECMA-262's (editors') does not: kdrill's
    validator reads patterns the editors' way, so both refuse it."""
    from scenario_copies import load_edited

    from harness.spec.scenario import ScenarioError

    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "pod-delete", edit)
    assert info.value.field == field
