"""What the commands print as data (``-o json|yaml``, ``--json``) and the counts in their lines."""

from __future__ import annotations

import json

import yaml

OUTPUT_FORMATS = ("json", "yaml")


def print_as(output: str, data: object) -> None:
    """``data`` as JSON (indented, keys sorted) or YAML on stdout, for -o."""
    if output == "json":
        print(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        print(yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=True), end="")


def json_safe(value):
    """NaN and infinities (which a record may hold) as strings: JSON has neither."""
    if isinstance(value, float) and value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


def count(n: int, one: str, many: str | None = None) -> str:
    """``n`` and the noun in its number: "1 run", "2 runs", "2 directories"."""
    return f"{n} {one if n == 1 else many or one + 's'}"
