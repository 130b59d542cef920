"""Fault parameters, declared and checked before anything is touched.

Every fault declares the parameters a scenario may give it (``fault.params`` and each case's
``params``): name, kind, unit, range. A scenario is checked against them when it is loaded for a
run, and a problem is a :class:`~harness.spec.scenario.ScenarioError` naming the file, the field, what
was expected and what was there; an unknown name is refused with the nearest known one. Durations
have an upper bound, so a typo cannot hold a fault for a day.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from typing import Any

from harness.spec.manifests import name_problem
from harness.spec.scenario import Scenario, ScenarioError

_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|Mi|Gi|Ki)?$")
# A Kubernetes release as kubeadm and kdrill's release directories name it ("v1.35.4"): one pattern
# for the scenario parameter, the release build and the upgrade steps.
KUBERNETES_RELEASE = re.compile(r"v1\.[0-9]{1,3}\.[0-9]{1,3}")
# Label selectors (https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/): a key
# is an optional DNS-subdomain prefix and "/", then a name of at most 63 characters; a value is
# empty or such a name.
_LABEL_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"^(?:(?=[^/]{{1,253}}/)[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?{_LABEL_NAME}$")
_LABEL_VALUE = re.compile(rf"^(?:{_LABEL_NAME})?$")
_SET_REQUIREMENT = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_EQUALITY_REQUIREMENT = re.compile(r"^(?P<key>[^=!\s]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^=!\s]*)$")
# Operators that only exclude: a selector made of these alone matches every pod without the label.
_EXCLUDING = ("!=", "notin", "!")


def labels(text: Any) -> dict[str, str]:
    """``key=value[,key=value]`` as a mapping: a selector of equalities only, what a Service's
    ``spec.selector`` holds. Raises ValueError for anything else (see :func:`label_selector`)."""
    requirements = label_selector(text)
    if any(op != "=" for _, op, _ in requirements):
        raise ValueError(f"only key=value pairs, got {text!r}")
    return {key: values[0] for key, _, values in requirements}


def label_selector(text: Any) -> list[tuple[str, str, tuple[str, ...]]]:
    """The requirements of a label selector string, as (key, operator, values): operator one of
    "=", "!=", "in", "notin", "exists", "!" ("==" is read as "="). Raises ValueError naming what is
    wrong, also for a selector that would select nearly everything: an empty one (every pod) or
    one made only of exclusions ("!=", "notin", "!key")."""
    if not isinstance(text, str):
        raise ValueError(f"a string is expected, not {type(text).__name__}")
    if not text.strip():
        raise ValueError("an empty selector matches every object")
    parts, depth, current = [], 0, ""
    for char in text:  # commas separate requirements, except inside the value list of "in (a, b)"
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0 or depth > 1:
            raise ValueError(f"unbalanced parentheses in {text!r}")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    requirements = []
    for part in (p.strip() for p in parts):
        if not part:
            raise ValueError(f"an empty requirement in {text!r}")
        if match := _SET_REQUIREMENT.fullmatch(part):
            key, op = match["key"], match["op"]
            values = tuple(v.strip() for v in match["values"].split(","))
            if not values or any(not v or not _LABEL_VALUE.fullmatch(v) for v in values):
                raise ValueError(f"{part!r}: a list of label values is expected in the parentheses")
        elif match := _EQUALITY_REQUIREMENT.fullmatch(part):
            key, op, values = match["key"], {"==": "="}.get(match["op"], match["op"]), (match["value"],)
            if not _LABEL_VALUE.fullmatch(match["value"]):
                raise ValueError(f"{part!r}: {match['value']!r} is not a label value")
        elif part.startswith("!"):
            key, op, values = part[1:].strip(), "!", ()
        else:
            key, op, values = part, "exists", ()
        if not _LABEL_KEY.fullmatch(key):
            raise ValueError(f"{part!r}: {key!r} is not a label key")
        requirements.append((key, op, values))
    if all(op in _EXCLUDING for _, op, _ in requirements):
        raise ValueError(f"{text!r} only excludes, so it matches every object without those labels")
    return requirements


def selector_matches(text: str, labels: dict[str, Any]) -> bool:
    """Whether a label selector (:func:`label_selector`) matches an object with ``labels``, as
    the API matches it: every requirement holds ("!=" and "notin" hold where the key is absent).
    Raises ValueError for a selector :func:`label_selector` refuses."""
    def holds(key: str, op: str, values: tuple[str, ...]) -> bool:
        value = labels.get(key)
        return {"=": lambda: key in labels and value == values[0], "!=": lambda: value != values[0],
                "in": lambda: key in labels and value in values, "notin": lambda: value not in values,
                "exists": lambda: key in labels, "!": lambda: key not in labels}[op]()

    return all(holds(*requirement) for requirement in label_selector(text))


@dataclass(frozen=True)
class Param:
    """One parameter. ``kind``: "seconds", "number", "integer", "choice", "bool", "name" (a
    Kubernetes object name), "quantity" (a Kubernetes resource quantity such as "30m") or
    "selector" (a label selector such as "app=web", never empty: see :func:`label_selector`),
    "labels" (``key=value`` pairs only: :func:`labels`), "version" (a Kubernetes release such as
    "v1.36.3"); ``minimum``/``maximum`` bound numbers
    (inclusive); ``choices`` lists the allowed strings of a "choice"."""

    kind: str
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    required: bool = True

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` (as the expected text), or None when it is fine."""
        if self.kind == "bool":
            return None if isinstance(value, bool) else "true or false"
        if self.kind == "choice":
            return None if value in self.choices else f"one of {', '.join(repr(c) for c in self.choices)}"
        if self.kind == "name":
            return None if name_problem(value) is None else \
                "a Kubernetes object name (lowercase letters, digits, '-' and '.', at most 253 characters)"
        if self.kind == "quantity":
            return None if isinstance(value, str) and _QUANTITY.fullmatch(value) else "a resource quantity such as '30m'"
        if self.kind == "version":
            return None if isinstance(value, str) and KUBERNETES_RELEASE.fullmatch(value) else "a Kubernetes release such as 'v1.36.3'"
        if self.kind in ("selector", "labels"):
            parse, expected = {"selector": (label_selector, "a label selector such as 'app=web' that selects something"),
                               "labels": (labels, "labels such as 'app=web,tier=db', what a Service's selector "
                                                  "holds")}[self.kind]
            try:
                parse(value)
            except ValueError as exc:
                return f"{expected} ({exc})"
            return None
        unit = " of seconds" if self.kind == "seconds" else ""
        what = "a whole number" if self.kind == "integer" else "a number"
        span = f"{what}{unit} from {_fmt(self.minimum)} to {_fmt(self.maximum)}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return span
        try:
            if not math.isfinite(value):
                return span
        except OverflowError:  # an integer too large for a float: out of any range
            return span
        if self.kind == "integer" and not isinstance(value, int):
            return span
        if (self.minimum is not None and value < self.minimum) or (self.maximum is not None and value > self.maximum):
            return span
        return None


    def json_schema(self) -> dict[str, Any]:
        """This parameter as JSON Schema, for editors (``kdrill schema``); :meth:`problem` stays
        what validation asks (a selector's grammar, a quantity's)."""
        unit = " (seconds)" if self.kind == "seconds" else ""
        schema: dict[str, Any] = {"description": self.help + unit}
        if self.kind == "bool":
            schema["type"] = "boolean"
        elif self.kind == "choice":
            schema["enum"] = list(self.choices)
        elif self.kind in ("name", "quantity", "selector", "labels"):
            schema["type"] = "string"
        elif self.kind == "version":
            schema.update({"type": "string", "pattern": f"^{KUBERNETES_RELEASE.pattern}$"})
        else:
            schema["type"] = "integer" if self.kind == "integer" else "number"
            schema.update({k: v for k, v in (("minimum", self.minimum), ("maximum", self.maximum)) if v is not None})
        return schema


def _fmt(value: float | None) -> str:
    return "-" if value is None else (str(int(value)) if float(value).is_integer() else str(value))


def check(scenario: Scenario, declared: dict[str, Param]) -> None:
    """Check the scenario's fault params and every case's against ``declared``.
    Raises ScenarioError for the first problem (unknown name, bad value, required name missing)."""
    sets = [("fault.params", scenario.fault_params)]
    sets += [(f"cases[{i}].params", case.params) for i, case in enumerate(scenario.cases)]
    for where, params in sets:
        for name, value in params.items():
            param = declared.get(name)
            if param is None:
                near = difflib.get_close_matches(str(name), list(declared), n=1)
                hint = f"; did you mean {near[0]!r}?" if near else ""
                raise ScenarioError(scenario.path, f"{where}.{name}",
                                    f"a parameter of fault {scenario.fault_kind!r} "
                                    f"(known: {', '.join(sorted(declared))}){hint}", None)
            problem = param.problem(value)
            if problem:
                raise ScenarioError(scenario.path, f"{where}.{name}", f"{problem} ({param.help})", repr(value))
    for case in scenario.cases or [None]:
        merged = scenario.params_for(case.name if case else None)
        for name, param in declared.items():
            if param.required and name not in merged:
                raise ScenarioError(scenario.path, f"fault.params.{name}",
                                    f"{param.help} (required{f', missing in case {case.name!r}' if case else ''})",
                                    "nothing")
