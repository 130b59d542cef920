"""The rules of a scenario file that its JSON Schema cannot state: names unique in their list,
numbers of a sane size, no TODO left from ``kdrill new``, vital signs covered by expectations of
the scenario, and each expectation's unit and bound fitting each other. :func:`check_rules` runs
them (and the runner's, :func:`harness.spec.runner_rules.check_runner`) in the order a problem is
reported: the first found is the one raised."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable

from harness.spec.measure_rules import expectation_lists
from harness.spec.model import ScenarioError, drill_namespace
from harness.spec.runner_rules import check_runner
from harness.spec.schema import MAX_NUMBER, RUNNER_PHASES, UNITS
from harness.spec.schema_problems import format_field

BOOL_UNITS = ("bool", "flag")  # the units of a yes/no measurement; every other unit is a number


def check_rules(path: Path, data: dict) -> None:
    """Rules JSON Schema cannot express: unique names, bool bounds only with ==. ``data`` is a
    scenario file that passed the schema. Raises ScenarioError for the first problem."""
    _check_unique_names(path, data)
    _check_numbers(path, data)
    _check_no_todo(path, data)
    check_runner(path, data)
    _check_vital_signs(path, data)
    _check_detection(path, data)
    common = {item["name"]: i for i, item in enumerate(data["expectations"])}
    for where, items in expectation_lists(data):
        for i, item in enumerate(items):
            _check_unit(path, data, f"{where}[{i}]", item)
            _check_bound(path, f"{where}[{i}]", item)
            if "runner" in data and item.get("phase") is not None and item["phase"] not in RUNNER_PHASES:
                raise ScenarioError(path, f"{where}[{i}].phase", "one of the phases the runner opens: "
                                    f"{', '.join(RUNNER_PHASES)}", repr(item["phase"]))
            if where != "expectations" and item["name"] in common:
                raise ScenarioError(path, f"{where}[{i}].name",
                                    f"a name not used by the scenario's own expectations "
                                    f"(expectations[{common[item['name']]}] already uses it)", repr(item["name"]))


def _check_detection(path: Path, data: dict) -> None:
    """Each alert of ``detection`` expected once in any case, and the cases it names the scenario's."""
    cases = [c["name"] for c in data.get("cases") or []]
    seen: dict[tuple[str, str | None], int] = {}
    for i, item in enumerate(data.get("detection") or []):
        for j, case in enumerate(item.get("cases") or []):
            if case not in cases:
                raise ScenarioError(path, f"detection[{i}].cases[{j}]",
                                    f"the name of a case of this scenario ({', '.join(cases) or 'it has none'})",
                                    repr(case))
        for case in item.get("cases") or cases or [None]:
            first = seen.setdefault((item["alert"], case), i)
            if first != i:
                raise ScenarioError(path, f"detection[{i}].alert", f"an alert expected once in each case "
                                    f"(detection[{first}] already expects it)", repr(item["alert"]))


def _check_unique_names(path: Path, data: dict) -> None:
    """Each expectation and each case named once in its list."""
    for list_name in ("expectations", "cases"):
        first_index: dict[str, int] = {}
        for i, item in enumerate(data.get(list_name, [])):
            if item["name"] in first_index:
                raise ScenarioError(
                    path, f"{list_name}[{i}].name",
                    f"a name unique within the file ({list_name}[{first_index[item['name']]}] already uses it)",
                    repr(item["name"]))
            first_index[item["name"]] = i
    # Each case runs in a namespace of its own, named after it and cut to 63 characters.
    namespaces: dict[str, int] = {}
    for i, case in enumerate(data.get("cases", [])):
        namespace = drill_namespace(data["name"], case["name"])
        if namespace in namespaces:
            raise ScenarioError(path, f"cases[{i}].name", f"a name whose namespace differs from every other case's "
                                f"(cases[{namespaces[namespace]}] runs in {namespace} too: a namespace has at most "
                                "63 characters)", repr(case["name"]))
        namespaces[namespace] = i


def _check_numbers(path: Path, data: dict) -> None:
    """Every number finite and at most MAX_NUMBER in size."""
    for where, value in _numbers(data):
        if isinstance(value, float) and not math.isfinite(value):
            raise ScenarioError(path, where or "<file>", "a finite number", repr(value))
        if abs(value) > MAX_NUMBER:
            raise ScenarioError(path, where or "<file>", f"a number of at most {MAX_NUMBER:g} in size",
                                f"{str(value)[:20]}... ({len(str(value))} digits)" if len(str(value)) > 20 else repr(value))


def _numbers(value: Any, where: tuple[str | int, ...] = ()) -> Iterable[tuple[str, float | int]]:
    """(field path, value) of every number in a loaded scenario: NaN and infinity mean nothing as
    a duration or a bound (``<= .inf`` can never fail), nor does a 400-digit integer, so none is
    accepted anywhere."""
    if isinstance(value, (float, int)) and not isinstance(value, bool):
        yield format_field(where), value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _numbers(item, where + (str(key),))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _numbers(item, where + (i,))


def _check_no_todo(path: Path, data: dict) -> None:
    """A skeleton from ``kdrill new`` is not a drill until its TODOs are replaced."""
    texts = [("title", data.get("title")), ("claim", data.get("claim")),
             ("fault.method", (data.get("fault") or {}).get("method"))]
    texts += [(f"source[{i}].title", s.get("title")) for i, s in enumerate(data.get("source") or [])]
    texts += [(f"expectations[{i}].description", e.get("description"))
              for i, e in enumerate(data.get("expectations") or [])]
    for field_name, text in texts:
        if isinstance(text, str) and "TODO" in text:
            raise ScenarioError(path, field_name, "your own text in place of the TODO", repr(text[:80]))


def _check_vital_signs(path: Path, data: dict) -> None:
    """Each vital sign named in ``vital_signs`` covered by an expectation of the scenario or a case."""
    every_name = {e["name"] for e in data["expectations"]}
    every_name |= {e["name"] for case in data.get("cases", []) for e in case.get("expectations") or []}
    for vital, names in (data.get("vital_signs") or {}).items():
        for expectation in [names] if isinstance(names, str) else names:
            if expectation not in every_name:
                raise ScenarioError(path, f"vital_signs.{vital}", "the name of an expectation of this scenario "
                                    f"(one of {', '.join(sorted(every_name))})", repr(expectation))


def _check_unit(path: Path, data: dict, field: str, item: dict) -> None:
    """A drill file's expectation in one of UNITS; a name ending ``_seconds``, ``_ratio`` or
    ``_factor`` in that unit."""
    if "runner" not in data and item["unit"] not in UNITS:
        raise ScenarioError(path, f"{field}.unit", f"a unit the drill measures in: {', '.join(UNITS)} "
                            "(times in seconds, ratios from 0 to 1)", repr(item["unit"]))
    # The name says what is measured (every shipped one does): a "_seconds" measurement
    # given as a count would be judged as one, in the report and by kdrill compare.
    for suffix, unit in (("_seconds", "seconds"), ("_ratio", "ratio"), ("_factor", "factor")):
        if item["name"].endswith(suffix) and item["unit"] != unit:
            raise ScenarioError(path, f"{field}.unit", f"{unit!r}, as its name {item['name']!r} says",
                                repr(item["unit"]))


def _check_bound(path: Path, field: str, item: dict) -> None:
    """A bound that can both pass and fail in the expectation's unit: true/false only with ``==``
    and a yes/no unit, a ratio from 0 to 1, seconds 0 or more, and no bound every measurement
    in its unit holds (``>= 0``; a ratio's ``<= 1``)."""
    bound = item["bound"]
    if isinstance(bound["value"], bool) and bound["op"] != "==":
        raise ScenarioError(path, f"{field}.bound.value",
                            "a number (true/false is only allowed with op '==')", repr(bound["value"]))
    if isinstance(bound["value"], bool) != (item["unit"] in BOOL_UNITS):
        # A ratio can never equal true: the expectation could never pass (or never fail).
        expected = ("true or false (its unit is " if item["unit"] in BOOL_UNITS else "a number (its unit is ")
        raise ScenarioError(path, f"{field}.bound.value", f"{expected}{item['unit']!r})",
                            repr(bound["value"]))
    value = bound["value"]
    if not isinstance(value, bool) and item["unit"] == "ratio" and not 0 <= value <= 1:
        # A ratio is 0 to 1: a bound outside can never pass or never fail.
        raise ScenarioError(path, f"{field}.bound.value", "a ratio from 0 to 1", repr(value))
    if not isinstance(value, bool) and item["unit"] == "seconds" and value < 0:
        raise ScenarioError(path, f"{field}.bound.value", "seconds, 0 or more", repr(value))
    ceiling = ", nor above 1" if item["unit"] == "ratio" else ""
    if _never_fails(item["unit"], bound["op"], value):
        raise ScenarioError(path, f"{field}.bound", f"a bound a measurement could break (a {item['unit']} is never "
                            f"below 0{ceiling})", f"{bound['op']} {value!r}")
    if _never_passes(item["unit"], bound["op"], value):
        raise ScenarioError(path, f"{field}.bound", f"a bound a measurement could meet (a {item['unit']} is never "
                            f"below 0{ceiling})", f"{bound['op']} {value!r}")


def _never_passes(unit: str, op: str, value: Any) -> bool:
    """Whether no measurement in ``unit`` (0 or more; a ratio at most 1) holds ``op value``: such
    an expectation fails on every platform, a healthy one too."""
    if isinstance(value, bool) or unit not in UNITS or unit in BOOL_UNITS:
        return False
    top = 1 if unit == "ratio" else math.inf
    return {"<": value <= 0, "<=": value < 0, "==": not 0 <= value <= top, ">": value >= top,
            ">=": value > top}.get(op, False)


def _never_fails(unit: str, op: str, value: Any) -> bool:
    """Whether every measurement in ``unit`` (one of UNITS, all of them 0 or more; a ratio also at
    most 1) holds ``op value``: such an expectation proves nothing."""
    if isinstance(value, bool) or unit not in UNITS or unit in BOOL_UNITS:
        return False
    if op == ">=" and value <= 0 or op == ">" and value < 0:
        return True
    return unit == "ratio" and (op == "<=" and value >= 1 or op == "<" and value > 1)
