"""A scenario's problems against the JSON Schema (``harness.spec.schema``), as kdrill words them:
one :class:`Problem` per field, with what was expected in plain text, ordered as a reader meets
the fields."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from jsonschema.exceptions import ValidationError

from harness.spec.model import ScenarioError
from harness.spec.schema import SCHEMA, VALIDATOR, Validator


@dataclass
class Problem:
    """One field's problem: ``field_path`` as keys and list indexes, ``got`` None when there is
    nothing to show."""

    path: Path
    field_path: tuple[str | int, ...]
    expected: str
    got: str | None

    def as_error(self) -> ScenarioError:
        return ScenarioError(self.path, format_field(self.field_path), self.expected, self.got)


def schema_errors(path: Path, data: dict) -> Iterable[Problem]:
    """Problems of a scenario file's ``data`` against SCHEMA, in the validator's order."""
    return _validator_errors(VALIDATOR, path, data, ())


def sub_schema_errors(path: Path, schema: dict, value: Any, prefix: tuple) -> Iterable[Problem]:
    """Problems of ``value`` against ``schema`` (a probe kind's field), named from ``prefix``."""
    return _validator_errors(Validator(schema), path, value, prefix)


def _validator_errors(validator, path: Path, data: Any, prefix: tuple) -> Iterable[Problem]:
    for err in validator.iter_errors(data):
        where = prefix + tuple(err.absolute_path)
        if err.validator == "required":
            props = err.schema.get("properties", {})
            unknown = [str(k) for k in err.instance if k not in props] if props else []
            for prop in err.validator_value:
                if prop not in err.instance:
                    typo = difflib.get_close_matches(prop, unknown, n=1)  # there, but misspelt
                    yield Problem(path, where + (prop,), f"{_describe(props.get(prop, {}))} (required)",
                                  f"nothing; {typo[0]!r} is there: misspelt?" if typo else "nothing")
        elif err.validator == "additionalProperties":
            known = list(err.schema.get("properties", {}))
            for extra in sorted((k for k in err.instance if k not in known), key=str):
                near = difflib.get_close_matches(str(extra), known, n=1)  # a misspelt key: say which
                hint = f"; did you mean {near[0]!r}?" if near else ""
                yield Problem(path, where + (extra,), f"no such field (allowed: {', '.join(known)}){hint}", None)
        else:
            yield Problem(path, where, _expected_text(err), show(err.instance))


def _expected_text(err: ValidationError) -> str:
    if err.validator != "type" and "x-expected" in err.schema:
        return err.schema["x-expected"]
    v = err.validator_value
    return {
        "type": lambda: _describe(err.schema),
        "enum": lambda: _describe(err.schema),
        "minItems": lambda: f"a list with at least {v} item{'s' if v != 1 else ''}",
        "minLength": lambda: "a non-empty string",
        "minimum": lambda: f"a number >= {v}",
        "exclusiveMinimum": lambda: f"a number > {v}",
        "maximum": lambda: f"a number <= {v}",
        "pattern": lambda: f"a string matching {v}",
        "maxLength": lambda: f"a string of at most {v} characters",
        "maxItems": lambda: f"a list with at most {v} item{'s' if v != 1 else ''}",
    }.get(str(err.validator), lambda: err.message[:200])()  # the library's message quotes the value whole


_TYPE_TEXT = {"string": "a string", "number": "a number", "integer": "an integer",
              "boolean": "a boolean (true or false)", "object": "a mapping", "array": "a list", "null": "nothing"}


def _describe(schema: dict) -> str:
    if "enum" in schema:
        return "one of " + ", ".join(repr(x) for x in schema["enum"])
    types = schema.get("type", [])
    types = [types] if isinstance(types, str) else types
    return " or ".join(_TYPE_TEXT.get(t, t) for t in types) or "a value"


def sort_key(field_path: tuple[str | int, ...]) -> tuple:
    """Order problems as the fields appear in SCHEMA (i.e. as a reader meets
    them in a well-formed file); unknown keys sort after known ones."""
    key: list[tuple[int, str]] = []
    schema: dict = SCHEMA
    for part in field_path:
        if isinstance(part, int):
            key.append((part, ""))
            schema = schema.get("items", {})
        else:
            props = list(schema.get("properties", {}))
            key.append((props.index(part) if part in props else len(props), part))
            schema = schema.get("properties", {}).get(part, {})
    return tuple(key)


def format_field(field_path: Iterable[str | int]) -> str:
    """A dotted field name, e.g. ``expectations[2].bound.op``; ``<file>`` for the whole file."""
    text = ""
    for part in field_path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "<file>"


def show(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."

