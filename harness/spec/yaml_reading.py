"""Reading kdrill's own YAML files: :class:`DatelessLoader` (dates stay strings),
:class:`UniqueKeyLoader` (no duplicate or non-string keys) and, for scenario files,
:class:`StrictLoader` (no anchors, aliases or tags; plain scalars as YAML 1.2), with
:func:`parse_yaml` turning what it refuses into a ScenarioError."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from harness.spec.model import ScenarioError

_TIMESTAMP = "tag:yaml.org,2002:timestamp"


class DatelessLoader(yaml.SafeLoader):
    """SafeLoader that reads ``2026-11-30`` as the string it is written as: PyYAML's YAML 1.1
    timestamp rule makes it a date, and an impossible one (``2001-13-40``) a ValueError out of the
    parser. go-yaml, which reads Kubernetes objects, keeps such values strings too. Platform
    profiles (harness/platform/profile.py) read their YAML with it."""


DatelessLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, str):  # every field and name in kdrill's own files is a string
            raise yaml.constructor.ConstructorError(
                None, None, f"a key must be a string, got {key!r} ({type(key).__name__}; quote it if meant)",
                key_node.start_mark)
        try:
            duplicate = key in seen
        except TypeError:  # unhashable key: construct_mapping reports it properly
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first at line {seen[key] + 1})", key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


class UniqueKeyLoader(DatelessLoader):
    """DatelessLoader that rejects duplicate keys (PyYAML silently keeps the last) and keys that
    are not strings: kdrill's own files (scenarios, a profile's platform.yaml) name fields only."""


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class StrictLoader(UniqueKeyLoader):
    """UniqueKeyLoader without anchors, aliases or explicit tags, reading plain scalars as YAML 1.2."""


def _no_alias(self: StrictLoader, *args: Any) -> Any:
    if self.check_event(yaml.events.AliasEvent):
        event = self.peek_event()
        raise yaml.composer.ComposerError(None, None, "anchors and aliases are not allowed in scenario files "
                                          "(they can expand without bound)", event.start_mark)
    event = self.peek_event()
    if getattr(event, "tag", None) is not None:
        # `!!int 010` would read as 8 and `!!bool on` as true again: values are read as written.
        raise yaml.composer.ComposerError(None, None, f"explicit tags ({event.tag}) are not allowed in scenario "
                                          "files: write the value itself", event.start_mark)
    return yaml.composer.Composer.compose_node(self, *args)


StrictLoader.compose_node = _no_alias  # type: ignore[method-assign]

# Plain scalars read as YAML 1.2's core schema, not PyYAML's YAML 1.1: `yes`, `on`, `010`
# (octal 8), `1:30` (sexagesimal 90), `1_000` and `2026-11-30` (a date) stay strings, which the schema
# then refuses where a number or a bool is expected, instead of reading a value nobody wrote.
_BOOL, _INT, _FLOAT = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_BOOL, _INT, _FLOAT)]
    for first, resolvers in DatelessLoader.yaml_implicit_resolvers.items()}
StrictLoader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
StrictLoader.add_implicit_resolver(_INT, re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), list("-+0123456789"))
StrictLoader.add_implicit_resolver(
    _FLOAT, re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*)(?:[eE][-+]?[0-9]+)?|[-+]?[0-9]+[eE][-+]?[0-9]+"
                       r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"), list("-+0123456789."))


def parse_yaml(path: Path, text: str) -> Any:
    """The YAML document ``text`` (of the file at ``path``) read with StrictLoader. Raises
    ScenarioError for YAML it refuses (with line and column when known), nesting too deep or a
    number too large to convert."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - SafeLoader subclass
    except RecursionError:
        raise ScenarioError(path, "<file>", "YAML nested a sane number of levels deep", "nesting too deep") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise ScenarioError(path, "<file>", "numbers of a sane size", str(exc)[:200]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if mark is None:
            raise ScenarioError(path, "<file>", "valid YAML", problem) from None
        line = mark.line + 1
        raise ScenarioError(path, "<file>", "valid YAML",
                            f"{problem} at line {line}, column {mark.column + 1}", line=line) from None

