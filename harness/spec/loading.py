"""Loading scenario files: :func:`load_scenario` (one file, validated), :func:`load_scenarios`
(a directory) and :func:`find_scenario` (by name or path). Loading only ever reads the file."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import errno
import os
import re
from pathlib import Path
from typing import Any

from harness.core import resources
from harness.spec.model import (
    Bound,
    Case,
    DetectionSpec,
    ExpectationSpec,
    Scenario,
    ScenarioError,
    Source,
    display_path,
)
from harness.spec.plugins import PluginError, data_usable, fault_kinds, registered_fault
from harness.spec.rules import check_rules
from harness.spec.schema import MAX_PROBE_INTERVAL_SECONDS, RUNNER_DRILL
from harness.spec.schema_problems import schema_errors, show, sort_key
from harness.spec.yaml_reading import parse_yaml


def check_data_fault(scenario: Scenario) -> None:
    """A data-only scenario's fault must be installed and build itself from data
    (:func:`harness.faults.data_usable`). Raises ScenarioError naming ``fault.kind``."""
    try:
        fault_type = registered_fault(scenario.fault_kind)
    except PluginError as exc:
        raise ScenarioError(scenario.path, "fault.kind", f"a fault kind with a module in harness/faults ({exc})",
                            scenario.fault_kind) from None
    if not data_usable(fault_type):
        usable = ", ".join(k for k in fault_kinds() if data_usable(registered_fault(k)))
        raise ScenarioError(scenario.path, "fault.kind", f"a fault a data-only scenario can use ({usable}: "
                            "those with for_scenario); others need a drill file", scenario.fault_kind)


def load_scenario(path: Path | str) -> Scenario:
    """Read and validate one scenario file.

    Raises ScenarioError for invalid YAML or content (first problem only, in
    file-field order), OSError if the file cannot be read.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(path, "<file>", "UTF-8 text", f"undecodable byte at offset {exc.start}") from None
    data = parse_yaml(path, text)
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"{type(data).__name__} {show(data)}"
        raise ScenarioError(path, "<file>", "a mapping of scenario fields", got)
    errors = sorted(schema_errors(path, data), key=lambda e: (sort_key(e.field_path), e.expected))
    if errors:
        raise errors[0].as_error()
    _check_no_control_characters(path, data)
    check_rules(path, data)
    scenario = _build(path, data)
    if scenario.runner is not None:  # before what its fault needs: a fault it cannot use at all comes first
        check_data_fault(scenario)
    return _with_node_access(path, data, scenario)


def _with_node_access(path: Path, data: dict, scenario: Scenario) -> Scenario:
    """``scenario`` with ``needs_node_access`` as what it does says, when the file left it out.
    Raises ScenarioError when the file says true for a drill that does nothing on the nodes, or
    false for one that does."""
    needs = scenario.node_access_needs()
    if scenario.needs_node_access and not needs:
        raise ScenarioError(path, "cluster.node_access_for", "what the drill does on the nodes (its fault "
                            f"{scenario.fault_kind} needs no node access), or cluster.needs_node_access false",
                            "nothing")
    if needs and not scenario.needs_node_access:
        if data["cluster"].get("needs_node_access") is False:  # said, and wrong
            raise ScenarioError(path, "cluster.needs_node_access", f"true: it {'; it '.join(needs)}", "false")
        # Not said: what the scenario does decides it (a forgotten flag would otherwise fail on
        # a cluster without node access instead of skipping with the reason).
        scenario = dataclasses.replace(scenario, needs_node_access=True)
    return scenario


# C0 controls but tab and newline, DEL and C1: in a title, claim or name they would reach the
# terminal (list, --plan) and the report as escape sequences. And the bidirectional overrides and
# isolates, which make text read in another order than it is written.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _check_no_control_characters(path: Path, data: Any, field: str = "") -> None:
    """Raises ScenarioError at the first string (key or value) holding a control character."""
    items = (data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ())
    for key, value in items:
        where = f"{field}[{key}]" if isinstance(data, list) else f"{field}.{key}" if field else str(key)
        for text in (key, value):
            if isinstance(text, str) and _CONTROL.search(text):
                raise ScenarioError(path, where, "text without control characters (terminal escape sequences)",
                                    ascii(text)[:120])
        _check_no_control_characters(path, value, where)


def load_scenarios(directory: Path | str) -> list[Scenario]:
    """Load every ``*.yaml``/``*.yml`` file directly in ``directory`` but hidden ones, sorted by name.

    Raises ScenarioError for an invalid file or for two files sharing a name
    (naming both), FileNotFoundError if ``directory`` is not a directory.
    """
    directory = Path(directory)
    if not directory.is_dir():
        if directory.exists():
            raise NotADirectoryError(errno.ENOTDIR, "not a directory (a scenarios directory holds *.yaml files)",
                                     str(directory))
        raise FileNotFoundError(errno.ENOENT, "scenario directory not found", str(directory))
    # Hidden files (.gitlab-ci.yml, an editor's .x.yaml) are not scenarios.
    files = sorted(p for p in directory.iterdir()
                   if p.suffix in (".yaml", ".yml") and not p.name.startswith(".") and p.is_file())
    by_name: dict[str, Scenario] = {}
    for file in files:
        scenario = load_scenario(file)
        if scenario.name in by_name:
            first = by_name[scenario.name].path
            raise ScenarioError(file, "name", f"a name unique across scenarios (already used by {display_path(first)})",
                                repr(scenario.name))
        by_name[scenario.name] = scenario
    return [by_name[name] for name in sorted(by_name)]


def find_scenario(name_or_path: str | Path, directory: Path | str | None = None) -> Scenario:
    """Find a scenario by name (``"control-plane-stop"``) in ``directory``
    (default: the built-in scenarios, harness.core.resources.scenarios_dir()) or load it from a path.

    Raises ScenarioError for an unknown name (listing the known names) or an
    invalid file, FileNotFoundError for a missing path or directory.
    """
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or "/" in text or os.sep in text or "." in text:  # a name has no dot
        if not text.endswith((".yaml", ".yml")):
            # Taken for a name, `drill.txt` would be planned from the file and run from the built-in one.
            raise ScenarioError(Path(text), "<file>", "a scenario file ending .yaml or .yml, or a scenario name",
                                repr(Path(text).name))
        return load_scenario(Path(name_or_path))
    directory = Path(directory) if directory is not None else resources.scenarios_dir()
    scenarios = load_scenarios(directory)
    for scenario in scenarios:
        if scenario.name == text:
            return scenario
    known = ", ".join(repr(s.name) for s in scenarios) or "none"
    base = text.split("[", 1)[0]
    if base != text and any(s.name == base for s in scenarios):  # name[case]: cases are not chosen one by one
        raise ScenarioError(directory, "name", f"a scenario name ({base!r} runs every one of its cases)", repr(text))
    near = difflib.get_close_matches(text, [s.name for s in scenarios], n=1)
    raise ScenarioError(directory, "name", f"a known scenario name (one of {known})",
                        repr(text) + (f"; did you mean {near[0]!r}?" if near else ""))



def _build(path: Path, data: dict) -> Scenario:
    fault = data["fault"]
    return Scenario(
        name=data["name"], title=data["title"], drill=data.get("drill", RUNNER_DRILL), claim=data["claim"].strip(),
        sources=tuple(Source(s["title"], s["url"], s.get("section")) for s in data["source"]),
        cluster_config=data["cluster"]["config"],
        needs_node_access=data["cluster"].get("needs_node_access", False),
        fault_kind=fault["kind"], fault_method=fault["method"],
        fault_params=copy.deepcopy(fault.get("params") or {}),
        fault_outside_drill=(fault.get("outside_drill") or "").strip(),
        workload=copy.deepcopy(data.get("workload") or {}),
        probe_interval_seconds=float(data.get("probes", {}).get("interval_seconds", MAX_PROBE_INTERVAL_SECONDS)),
        expectations=_expectation_specs(data["expectations"]),
        vital_signs={sign: (names,) if isinstance(names, str) else tuple(names)
                     for sign, names in (data.get("vital_signs") or {}).items()},
        severity=data.get("severity", "normal"),
        runner=copy.deepcopy(data.get("runner")),
        node_access_for=data["cluster"].get("node_access_for", ""),
        on_request=data.get("on_request", "").strip(),
        detection=tuple(DetectionSpec(d["alert"], float(d["fires_within_seconds"]), float(d["resolves_within_seconds"]),
                                      tuple(d.get("cases") or ())) for d in data.get("detection") or []),
        cases=tuple(Case(c["name"], copy.deepcopy(c.get("params") or {}), _expectation_specs(c.get("expectations") or []))
                    for c in data.get("cases", [])),
        path=path,
    )


def _expectation_specs(items: list[dict]) -> tuple[ExpectationSpec, ...]:
    return tuple(ExpectationSpec(e["name"], e["description"], Bound(e["bound"]["op"], e["bound"]["value"]),
                                 e["unit"], e.get("phase"), dict(e["tolerance"]) if "tolerance" in e else None,
                                 dict(e["measure"]) if "measure" in e else None)
                 for e in items)

