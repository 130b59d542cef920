"""The scenario format as one JSON Schema (draft 2020-12) for editors and ``kdrill schema``,
generated from the declarations validation itself uses: :data:`harness.spec.schema.SCHEMA`, each
installed fault kind's ``params`` (:class:`harness.spec.params.Param`) and each probe kind's
``required`` and ``fields``. A scenario that validates with kdrill validates against it; the
reverse is not promised (rules across fields, such as a probe naming a declared object, are
kdrill's alone: ``kdrill validate`` is the authority).

A scenario file names it for editors that read the YAML language server's comment::

    # yaml-language-server: $schema=./kdrill-scenario.schema.json
"""

from __future__ import annotations

import copy
from typing import Any

from harness.spec.plugins import fault_kinds, probe_types, registered_fault
from harness.spec.schema import SCHEMA

SCHEMA_ID = "urn:kdrill:scenario"  # an identifier, never fetched


def _described(node: Any) -> Any:
    """``node`` with each ``x-expected`` (kdrill's wording of what a field takes) also given as
    the ``description`` editors show, where the schema has none."""
    if isinstance(node, list):
        return [_described(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _described(value) for key, value in node.items()}
    if "x-expected" in out and "description" not in out:
        out["description"] = "expected: " + out["x-expected"]
    return out


def _when_kind(kind: str, then: dict[str, Any]) -> dict[str, Any]:
    return {"if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]}, "then": then}


def _fault_params() -> list[dict[str, Any]]:
    """One ``if kind == X then params ...`` per installed fault kind that declares its params."""
    rules = []
    for kind in fault_kinds():
        declared = getattr(registered_fault(kind), "params", None)
        if not isinstance(declared, dict):
            continue
        rules.append(_when_kind(kind, {"properties": {"params": {
            "type": "object", "additionalProperties": False,
            # Not "required": a case may give a parameter the fault's own params leave out.
            "properties": {name: param.json_schema() for name, param in declared.items()}}}}))
    return rules


def _probe_fields() -> list[dict[str, Any]]:
    """One ``if kind == X then its fields`` per installed probe kind."""
    rules = []
    for kind, probe_type in sorted(probe_types().items()):
        fields = {"name": {}, "kind": {}, **copy.deepcopy(dict(probe_type.fields))}
        rules.append(_when_kind(kind, {"properties": fields, "additionalProperties": False,
                                       "required": sorted({"name", "kind", *probe_type.required})}))
    return rules


def scenario_json_schema() -> dict[str, Any]:
    """The scenario format as a JSON Schema document (module docstring)."""
    schema = _described(copy.deepcopy(SCHEMA))
    schema.update({"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
                   "title": "kdrill scenario"})
    fault = schema["properties"]["fault"]
    fault["properties"]["kind"] = {**fault["properties"]["kind"], "enum": fault_kinds()}
    fault["allOf"] = _fault_params()
    item = schema["properties"]["runner"]["properties"]["probes"]["items"]
    item["properties"]["kind"] = {**item["properties"]["kind"], "enum": sorted(probe_types())}
    item["allOf"] = _probe_fields()
    return schema
