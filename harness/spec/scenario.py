"""Scenario files: the documented claim a drill checks, and how it checks it.

A scenario is one YAML file in ``scenarios/`` (see ``SCHEMA`` for the shape).
Loading validates it against a JSON Schema (Draft 2020-12) plus a few rules a
schema cannot state (unique names), and turns any problem into a one-line
``ScenarioError`` naming the file, the field and what was expected.

Loading only ever reads the file.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import errno
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from harness.core import resources
from harness.spec.manifests import (KINDS, OWN_OBJECTS, OWNER_LABEL, PLACEHOLDER_NAMES, TLS_PLACEHOLDERS,
                                    WORKER_PLACEHOLDER, Declared, apiservice_problem, expand, name_problem,
                                    placeholder_keys, placeholders, tls_key_misplaced)
from harness.spec.plugins import (LATENCY_MEASURES, NODE_ACCESS_LEVELS, VALUE_MEASURES, PluginError, data_usable,
                                  fault_kinds, measure_kinds, registered_fault, probe_types)

OPS: tuple[str, ...] = ("<=", "<", ">=", ">", "==")
# The timelines the vital signs write into every record (harness/engine/vitals.py): no probe of a
# scenario may have one of these names.
VITAL_SIGN_TIMELINES: tuple[str, ...] = ("api_read", "api_write", "nodes")
# The platform's vital signs every drill records (harness/engine/vitals.py, which imports this list).
VITAL_SIGNS: tuple[str, ...] = ("api_read", "api_write", "service_name", "service_clusterip", "nodes_ready",
                                "kube_system_restarts")
MAX_PROBE_INTERVAL_SECONDS = 0.5
# A probe keeps at most 20,000 samples (harness/probes/__init__.py): at 0.1 s that is 2,000 s of a
# drill; a finer interval would stop sampling midway through a long drill (and hammer the API).
MIN_PROBE_INTERVAL_SECONDS = 0.1

# "x-expected" is our own annotation: the human text used when a value is
# rejected. Draft 2020-12 ignores unknown keywords, so the schema stays valid.
# Names become file names (<scenario>--<case>.json) and namespaces: no "--", which joins the two.
MAX_NAME_LENGTH = 50
# Data-only scenarios (harness/engine/runner.py): the runner's windows and the measures it computes.
RUNNER_DRILL = "drills/test_data_scenarios.py"
RUNNER_WINDOWS = ("baseline", "fault", "after")
ACTION_VERBS = ("delete", "evict", "scale", "kill_container")  # what a runner action does (runner.Actions)
# The unit each of kdrill's own measures gives (a plug-in's is the scenario's to say).
MEASURE_UNITS = {"success_ratio": "ratio", "first_failure_seconds": "seconds", "first_success_seconds": "seconds",
                 "recovery_seconds": "seconds",
                 "longest_failure_seconds": "seconds", "longest_unanswered_seconds": "seconds",
                 "max_latency_seconds": "seconds", "median_latency_seconds": "seconds", "p99_latency_seconds": "seconds",
                 "min_latency_seconds": "seconds"}
# The runner's probe pod stops after this many calls in all (harness/probes/incluster.py), and its
# steady state before the baseline may take up to this long (harness/engine/runner.py).
PROBE_POD_MAX_REQUESTS = 20000
PROBE_STEADY_SECONDS = 60
# The measures that mean the same over a pod-ips probe's calls to every pod, interleaved in one
# timeline, as over one target's: a share of calls, the first failed call, a latency.
POD_IPS_MEASURES = ("success_ratio", "first_failure_seconds", "max_latency_seconds", "median_latency_seconds",
                    "p99_latency_seconds",
                    "min_latency_seconds")
# The units a drill file measures in: an expectation of a drill-file scenario in another unit
# (e.g. "milliseconds" for a drill's seconds) is a mistake, not a conversion. Counts of named
# things keep their noun. Data-only scenarios: a built-in measure's unit is MEASURE_UNITS's, a
# metric measure's is the metric's own (any word).
UNITS: tuple[str, ...] = ("seconds", "ratio", "count", "bool", "flag", "bytes", "per_second",
                          "apiservices", "names", "queries", "requests")
IMAGE_NAME = "^[a-z][a-z0-9]{0,30}$"
IMAGE_BASES = ("pause", "toolbox")  # what a declared registry's image is built on (registry_images)
MAX_NUMBER = 1e12  # any duration, count or bound in a scenario is far below this
SEVERITIES = ("blocker", "critical", "normal", "minor", "trivial")
_NAME = {"type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$", "maxLength": MAX_NAME_LENGTH,
         "x-expected": f"lowercase letters and digits in words joined by single '-', at most {MAX_NAME_LENGTH} characters"}
_TEXT = {"type": "string", "minLength": 1, "x-expected": "a non-empty string"}
_MAPPING = {"type": "object"}  # free-form: whatever the fault or workload needs

_EXPECTATION: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "required": ["name", "description", "bound", "unit"],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z0-9_]+$",
                 "x-expected": "lowercase letters, digits and '_'"},
        "description": _TEXT,
        "bound": {
            "type": "object", "additionalProperties": False,
            "required": ["op", "value"],
            "properties": {
                "op": {"enum": list(OPS)},
                "value": {"type": ["number", "boolean"]},
            },
        },
        # A word (a metric's own unit in a data-only scenario); a drill file's units are checked
        # against UNITS once the scenario is read (_check_rules).
        "unit": {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,39}$",
                 "x-expected": "a unit: lowercase letters, digits and '_' (e.g. seconds, ratio, count)"},
        "phase": _TEXT,
        # Data-only scenarios: what the runner measures for it (harness/engine/measures.py).
        "measure": {
            # {kind, probe, window} (checked in _check_runner), or {fact}: a value the fault measured.
            "type": "object", "additionalProperties": False, "minProperties": 1,
            "properties": {
                "kind": {"type": "string", "pattern": "^[a-z0-9_]+$",
                         "x-expected": "a measure: success_ratio, first_failure_seconds, recovery_seconds, "
                                       "longest_failure_seconds, or one a plug-in installs"},
                "probe": {"type": "string", "pattern": "^[a-z0-9-]+$",
                          "x-expected": "the name of a probe in runner.probes"},
                "window": {"enum": list(RUNNER_WINDOWS)},
                # The window narrowed to an action's time (harness/engine/measures.py).
                "from_action": {"type": "string", "x-expected": "the name of an action of runner.actions"},
                "until_action": {"type": "string", "x-expected": "the name of an action of runner.actions"},
                # ...and to start at the probe's first successful sample in it (harness/engine/measures.py)
                "from_first_success": {"const": True, "x-expected": "true (or left out)"},
                # ...or to a time the fault marks (its marks_offered), then started later to settle.
                "from_mark": {"type": "string", "x-expected": "the name of a mark the fault offers"},
                "until_mark": {"type": "string", "x-expected": "the name of a mark the fault offers"},
                "settle_seconds": {"type": "number", "minimum": 0, "maximum": 3600,
                                   "x-expected": "seconds from 0 to 3600"},
                "fact": {"type": "string", "x-expected": "the name of a fact the fault measures"},
                # A success_ratio judged against a fact: the share of the path's backends the fault
                # takes away (harness/engine/measures.py: as_predicted).
                "predicted_by": {"type": "string", "x-expected": "the name of a ratio fact the fault measures"},
                # A success slower than this counts as a failure (harness/engine/measures.py: within).
                "within_seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600,
                                   "x-expected": "seconds above 0, at most 3600"},
            },
        },
        # How far the measured value may drift, in the worse direction, from a baseline run's
        # before `kdrill compare` calls it a regression (harness/evidence/compare.py has the defaults).
        "tolerance": {
            "type": "object", "additionalProperties": False, "minProperties": 1,
            "properties": {
                "relative": {"type": "number", "minimum": 0, "maximum": 100,
                             "x-expected": "a fraction of the baseline value, e.g. 0.5 for 50 %"},
                "absolute": {"type": "number", "minimum": 0,
                             "x-expected": "a number in the expectation's unit, 0 or more"},
            },
        },
    },
}

# An object a probe reads or an action acts on (also the schema of the object-state and
# image-pulls probe kinds' ``object`` field).
OBJECT_REF_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["kind", "name"],
    "properties": {"kind": {"type": "string", "pattern": "^[A-Za-z]+$"},
                   "name": {"type": "string", "minLength": 1, "maxLength": 253},
                   "namespace": {"type": "string", "minLength": 1, "maxLength": 63}},
    "x-expected": "an object: {kind, name, namespace (for a namespaced kind; default: the drill's)}",
}
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}, "x-expected": "a mapping of strings"}
_MANIFEST = {
    "type": "object", "required": ["apiVersion", "kind", "metadata"],
    "properties": {"apiVersion": {"type": "string", "minLength": 1}, "kind": {"type": "string", "pattern": "^[A-Za-z]+$"},
                   # Only what a scenario says about the object: kdrill adds its owner label to
                   # labels; finalizers (which would keep the object after the revert),
                   # ownerReferences (its deletion left to the garbage collector) and the fields
                   # the API sets itself are not the scenario's to declare.
                   "metadata": {"type": "object", "required": ["name"], "additionalProperties": False,
                                "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 253},
                                               "namespace": {"type": "string", "minLength": 1, "maxLength": 63},
                                               "labels": _STRINGS, "annotations": _STRINGS}}},
    "x-expected": "a Kubernetes manifest: {apiVersion, kind, metadata: {name}, ...}",
}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "kdrill scenario",
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "title", "claim", "source", "cluster", "fault", "expectations"],
    "properties": {
        "name": _NAME,
        "title": _TEXT,
        "drill": {"type": "string", "pattern": r"^drills/[A-Za-z0-9_][A-Za-z0-9_-]*\.py$",
                  "x-expected": "a drill file in kdrill's drills/ directory, e.g. drills/test_x.py"},
        "claim": _TEXT,
        "source": {
            "type": "array", "minItems": 1,
            "items": {
                "type": "object", "additionalProperties": False,
                "required": ["title", "url"],
                "properties": {
                    "title": _TEXT,
                    "url": {"type": "string", "pattern": "^https?://\\S+$",
                            "x-expected": "an http(s) URL"},
                    "section": _TEXT,
                },
            },
        },
        "cluster": {
            "type": "object", "additionalProperties": False,
            "required": ["config"],
            "properties": {
                "config": {"type": "string", "pattern": "^[a-z0-9-]+$",
                           "x-expected": "a clusters/<config>.yaml name: lowercase letters, digits and '-'"},
                "needs_node_access": {"type": "boolean"},
                "node_access_for": {"type": "string", "minLength": 1,
                                    "x-expected": "what the drill does on the nodes beyond its fault, as a phrase "
                                                  "after 'it' (the reason given where there is no node access)"},
            },
        },
        "fault": {
            "type": "object", "additionalProperties": False,
            "required": ["kind", "method"],
            "properties": {
                "kind": {"type": "string", "pattern": "^[a-z0-9-]+$",
                         "x-expected": "a fault kind: lowercase letters, digits and '-'"},
                "method": _TEXT,
                "params": _MAPPING,
            },
        },
        # The keys every drill reads are checked here; a drill's own keys (e.g. dns-saturation's) pass.
        "workload": {"type": "object", "properties": {
            "replicas": {"type": "integer", "minimum": 1, "maximum": 20,
                         "x-expected": "a whole number of pods from 1 to 20"},
            "node_port": {"type": "integer", "minimum": 30000, "maximum": 32767,
                          "x-expected": "a NodePort from 30000 to 32767 that the cluster config maps to 127.0.0.1"},
            # Data-only scenarios: objects created (in order, through the ledger) before the
            # probes start, deleted newest first after the fault (harness/scaffolding/drill_objects.py).
            "manifests": {"type": "array", "minItems": 1, "maxItems": 50, "items": _MANIFEST},
            # A serving certificate for a Service of the manifests (e.g. an admission webhook's),
            # made for each drill with a throw-away CA: $(tls_cert), $(tls_key), $(tls_ca_bundle).
            "tls": {"type": "object", "additionalProperties": False, "required": ["service"],
                    "properties": {"service": {"type": "string", "minLength": 1, "maxLength": 63,
                                               "x-expected": "the name of a Service in the drill's namespace"}},
                    "x-expected": "a mapping {service: NAME}"},
            # Data-only scenarios: OCI registries beside a kind cluster (container
            # kdrill-registry-<cluster>-<name>, pulled from as kdrill-registry-<name>:5000), each
            # with images pushed for the drill (the pause image plus a file, so new to every node;
            # it runs /pause): a manifest names one as $(image_<image>). A registry-outage fault
            # takes one down.
            "registries": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
                "type": "object", "additionalProperties": False, "required": ["name", "images"],
                "properties": {
                    "name": {"type": "string", "pattern": "^[a-z][a-z0-9]{0,15}$",
                             "x-expected": "lowercase letters and digits, starting with a letter, at most 16"},
                    "images": {"type": "array", "minItems": 1, "maxItems": 5, "items": {"anyOf": [
                        {"type": "string", "pattern": IMAGE_NAME},
                        # the base the file is added to: pause (runs /pause, the default) or
                        # toolbox (kdrill's own: kdrill-http and the rest; a push takes ~20 s)
                        {"type": "object", "additionalProperties": False, "required": ["name"],
                         "properties": {"name": {"type": "string", "pattern": IMAGE_NAME},
                                        "base": {"enum": list(IMAGE_BASES)}}}],
                        "x-expected": "an image name (lowercase letters and digits, starting with a letter), or "
                                      "{name: NAME, base: pause|toolbox}"}},
                },
                "x-expected": "a mapping {name: NAME, images: [IMAGE, ...]}"}}},
            "x-expected": "a mapping"},
        # A scenario with no `drill` file is run by harness/engine/runner.py from this.
        "runner": {
            "type": "object", "additionalProperties": False, "required": ["windows", "probes"],
            "properties": {
                "windows": {
                    "type": "object", "additionalProperties": False,
                    "required": ["baseline_seconds", "hold_seconds", "after_seconds"],
                    "properties": {k: {"type": "number", "minimum": 5, "maximum": 600,
                                       "x-expected": "a number of seconds from 5 to 600"}
                                   for k in ("baseline_seconds", "hold_seconds", "after_seconds")},
                },
                "probes": {
                    "type": "array", "minItems": 1,
                    "items": {
                        "type": "object", "required": ["name", "kind"],
                        "properties": {
                            # Not starting with '-': the in-cluster probe gets its names as arguments.
                            "name": {"type": "string", "pattern": "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$", "maxLength": 40,
                                     "x-expected": "lowercase letters, digits and '-', starting and ending with a "
                                                   "letter or digit, at most 40 characters"},
                            # A probe kind installed under the kdrill.probes entry points; the
                            # fields each kind takes are its own (harness/probes/__init__.py) and
                            # are checked with the objects (_check_objects).
                            "kind": {"type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$",
                                     "x-expected": "a probe kind: lowercase words joined by '-'"},
                        },
                    },
                },
                # What the runner does to the cluster during a window besides the fault, e.g. a
                # namespace deletion the fault should block. Only objects of workload.manifests.
                "actions": {
                    "type": "array", "maxItems": 20,
                    "items": {
                        "type": "object", "additionalProperties": False,
                        # and one of delete or evict (checked with the objects: _check_objects)
                        "required": ["name", "window", "after_seconds"],
                        "properties": {
                            "name": {"type": "string", "pattern": "^[a-z0-9-]+$", "maxLength": 40,
                                     "x-expected": "lowercase letters, digits and '-', at most 40 characters"},
                            "window": {"enum": ["fault", "after"]},
                            "after_seconds": {"type": "number", "minimum": 0, "maximum": 600,
                                              "x-expected": "seconds from the window's start, 0 to 600"},
                            # the object is deleted (as kubectl delete does)
                            "delete": OBJECT_REF_SCHEMA,
                            # a Pod is evicted through the Eviction API (as a node drain does)
                            "evict": OBJECT_REF_SCHEMA,
                            # a Deployment or StatefulSet scaled (its scale subresource, as kubectl scale)
                            "scale": {**OBJECT_REF_SCHEMA, "required": ["kind", "name", "replicas"], "properties": {
                                **OBJECT_REF_SCHEMA["properties"],
                                "replicas": {"type": "integer", "minimum": 0, "maximum": 20}},
                                "x-expected": "{kind: Deployment|StatefulSet, name, replicas: 0 to 20}"},
                            # a Pod's container stopped by its node's runtime (crictl stop; the
                            # kubelet restarts it as its restartPolicy says): node access only
                            "kill_container": {**OBJECT_REF_SCHEMA, "required": ["kind", "name", "container"],
                                               "properties": {**OBJECT_REF_SCHEMA["properties"],
                                                              "container": {"type": "string", "pattern": "^[a-z0-9-]{1,63}$"}},
                                               "x-expected": "{kind: Pod, name, container}"},
                        },
                    },
                },
                # Abort condition: a steady-state signal that must not fail for long. When the
                # probe has failed without a break for longer than allowed, the runner reverts
                # the fault at once and records the abort (the drill's verdict is then error).
                "abort": {
                    "type": "object", "additionalProperties": False, "required": ["probe", "max_failing_seconds"],
                    "properties": {
                        "probe": {"type": "string", "x-expected": "the name of a probe in runner.probes"},
                        "max_failing_seconds": {"type": "number", "minimum": 1, "maximum": 600,
                                                "x-expected": "a number of seconds from 1 to 600"},
                    },
                    "x-expected": "a mapping {probe, max_failing_seconds}",
                },
            },
        },
        "probes": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "interval_seconds": {
                    "type": "number", "minimum": MIN_PROBE_INTERVAL_SECONDS, "maximum": MAX_PROBE_INTERVAL_SECONDS,
                    "x-expected": f"a number of seconds from {MIN_PROBE_INTERVAL_SECONDS:g} to "
                                  f"{MAX_PROBE_INTERVAL_SECONDS:g} (probes sample every {MAX_PROBE_INTERVAL_SECONDS:g} "
                                  f"seconds or better, and keep at most 20,000 samples)",
                },
            },
        },
        "expectations": {
            "type": "array", "minItems": 1,
            "items": _EXPECTATION,
        },
        # How bad it is for the platform when the claim does not hold (Allure's severity levels).
        "severity": {"enum": list(SEVERITIES)},
        # Run only when named (kdrill run NAME, --kdrill-scenario NAME), never in "every drill":
        # why, e.g. it drills what a team's platform installed, which kdrill's own cluster lacks.
        "on_request": {"type": "string", "minLength": 1, "pattern": "\\S",
                       "x-expected": "a sentence: why this drill runs only when named"},
        # vital sign -> the expectation that covers it: its degradation is the drill's point,
        # not an unnoticed side effect (harness/engine/vitals.py)
        "vital_signs": {
            "type": "object",
            "propertyNames": {"enum": list(VITAL_SIGNS)},
            "additionalProperties": {
                "anyOf": [{"type": "string", "pattern": "^[a-z0-9_]+$"},
                          {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": "^[a-z0-9_]+$"}}],
                "x-expected": "the name of an expectation of this scenario, or a list of them (one per case)"},
        },
        "cases": {
            "type": "array", "minItems": 1,
            "x-expected": "a list of at least one case (or leave cases out)",
            "items": {
                "type": "object", "additionalProperties": False,
                "required": ["name"],
                "properties": {"name": _NAME, "params": _MAPPING,
                               # added to the scenario's expectations for this case only
                               "expectations": {"type": "array", "items": _EXPECTATION}},
            },
        },
    },
}

_VALIDATOR = Draft202012Validator(SCHEMA)


# A Namespace a scenario declares is named after its drill's: "$(namespace)-victim".
OWN_NAMESPACE_PREFIX = "$(namespace)-"


def registry_images(registry: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, base) of each image a declared registry serves (``base`` one of IMAGE_BASES)."""
    return [(i, "pause") if isinstance(i, str) else (i["name"], i.get("base", "pause")) for i in registry["images"]]


def drill_namespace(scenario_name: str, case: str | None = None) -> str:
    """The namespace a drill of scenario ``scenario_name`` (and ``case``) runs in, what
    ``$(namespace)`` means in its declared objects: at most 63 characters, as a namespace's name."""
    return f"kdrill-{scenario_name}{'-' + case if case else ''}"[:63].rstrip("-")


class ScenarioError(ValueError):
    """A scenario file is unreadable or invalid.

    Attributes: ``path`` (Path of the file, or directory for look-ups),
    ``field`` (dotted path such as ``expectations[2].bound.op``, or ``<file>``
    for problems with the file as a whole), ``expected`` (human text),
    ``got`` (repr of what was there, or None when there is nothing to show),
    ``line`` (1-based line number when known, else None).
    """

    def __init__(self, path: Path | str, field: str, expected: str,
                 got: str | None = None, line: int | None = None) -> None:
        self.path = Path(path)
        self.field = field
        self.expected = expected
        self.got = got
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"{_display(self.path)}: field '{self.field}': expected {self.expected}"
        return text if self.got is None else f"{text}, got {self.got}"

    def __reduce__(self):  # keep picklable (pytest-xdist ships exceptions between processes)
        return (type(self), (self.path, self.field, self.expected, self.got, self.line))


@dataclass(frozen=True)
class Source:
    """A primary document stating the behaviour under test."""

    title: str
    url: str
    section: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"title": self.title, "url": self.url, "section": self.section}


@dataclass(frozen=True)
class Bound:
    """A pass condition ``measured <op> value``; ``op`` is one of ``OPS``.

    Raises ValueError for an unknown op.
    """

    op: str
    value: float | int | bool

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"bound op must be one of {', '.join(OPS)}, got {self.op!r}")

    def holds(self, measured: Any) -> bool:
        """True when ``measured`` satisfies the bound. None, NaN, non-numbers,
        and a bool compared with a number (or vice versa) never hold."""
        if isinstance(self.value, bool) or isinstance(measured, bool):
            # True == 1 in Python; a flag and a count must not satisfy each other.
            return self.op == "==" and type(measured) is type(self.value) and measured == self.value
        if not isinstance(measured, (int, float)):
            return False
        m, v = measured, self.value
        return {"<=": m <= v, "<": m < v, ">=": m >= v, ">": m > v, "==": m == v}[self.op]

    def describe(self) -> str:
        """E.g. ``">= 0.99"`` or ``"== true"``."""
        value = str(self.value).lower() if isinstance(self.value, bool) else str(self.value)
        return f"{self.op} {value}"

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "value": self.value}


@dataclass(frozen=True)
class ExpectationSpec:
    """One documented, checkable consequence of the claim."""

    name: str
    description: str
    bound: Bound
    unit: str
    phase: str | None = None
    # {"relative": fraction, "absolute": in ``unit``}: the drift `kdrill compare` tolerates
    tolerance: dict[str, float] | None = None
    # {"kind", "probe", "window"}: what the runner measures (data-only scenarios)
    measure: dict[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {"name": self.name, "description": self.description, "bound": self.bound.to_dict(),
                "unit": self.unit, "phase": self.phase}
        if self.tolerance is not None:
            data["tolerance"] = dict(self.tolerance)
        if self.measure is not None:
            data["measure"] = dict(self.measure)
        return data


@dataclass(frozen=True)
class Case:
    """A named variant; ``params`` are merged over the fault params, ``expectations`` are
    checked in this case besides the scenario's own."""

    name: str
    params: dict[str, Any] = field(default_factory=dict, hash=False)
    expectations: tuple[ExpectationSpec, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "params": copy.deepcopy(self.params)}
        if self.expectations:
            data["expectations"] = [e.to_dict() for e in self.expectations]
        return data


@dataclass(frozen=True)
class Scenario:
    """A validated scenario file. ``probe_interval_seconds`` is in seconds."""

    name: str
    title: str
    drill: str
    claim: str
    sources: tuple[Source, ...]
    cluster_config: str
    needs_node_access: bool
    fault_kind: str
    fault_method: str
    fault_params: dict[str, Any] = field(hash=False)
    workload: dict[str, Any] = field(hash=False)
    probe_interval_seconds: float
    expectations: tuple[ExpectationSpec, ...]
    cases: tuple[Case, ...]
    path: Path
    # vital sign -> the expectations that may cover it (the first one a case has covers it there)
    vital_signs: dict[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    severity: str = "normal"  # one of SEVERITIES
    # data-only scenarios: {"windows": {...}, "probes": [...]} (harness/engine/runner.py); None for a drill file
    runner: dict[str, Any] | None = field(default=None, hash=False)
    node_access_for: str = ""  # cluster.node_access_for: what a drill file does on the nodes
    on_request: str = ""  # why it runs only when named; "" for a drill of the default catalogue

    def node_access_needs(self, case: str | None = None) -> list[str]:
        """What the drill does on the nodes, each a phrase after "it": its fault's (the fault
        class's ``node_capability``), its registries', its container kills', and
        ``cluster.node_access_for``. Empty when it needs no node access."""
        return [phrase for _, phrase in self.node_access_levels(case)]

    def node_access_levels(self, case: str | None = None) -> list[tuple[str, str]]:
        """:meth:`node_access_needs` with the level of node access each needs, as (level, phrase);
        levels are :data:`harness.spec.plugins.NODE_ACCESS_LEVELS`. The fault's level may depend on
        its params (``Fault.node_access_level_for``): those of ``case``, or without one the
        strongest over every case."""
        needs = []
        try:
            cls = registered_fault(self.fault_kind)
        except PluginError:  # an unknown or broken kind is refused elsewhere (check_references), with the known ones
            cls = None
        if cls is not None and cls.needs_node_access:
            cases = [case] if case is not None else [c.name for c in self.cases] or [None]
            levels = []
            for name in cases:
                try:
                    levels.append(cls.node_access_level_for(self.params_for(name)))
                except KeyError:  # an unknown case: the class's own level
                    levels.append(cls.node_access_level)
            level = max(levels, key=lambda lv: NODE_ACCESS_LEVELS.index(lv) if lv in NODE_ACCESS_LEVELS else 99)
            needs.append((level, cls.node_capability or f"runs the {self.fault_kind} fault on the nodes"))
        if self.workload.get("registries"):
            needs.append(("container", "runs registry containers beside the kind nodes and writes every node's "
                                       "containerd registry configuration"))
        if any("kill_container" in a for a in (self.runner or {}).get("actions") or []):
            needs.append(("exec", "kills a container through its node's container runtime (crictl)"))
        for probe in (self.runner or {}).get("probes") or []:
            on_node = getattr(probe_types().get(probe.get("kind")), "node_access", lambda spec: None)(probe)
            if on_node:
                needs.append(("exec", on_node))
        if self.node_access_for:
            # A drill file reaches the nodes through Cluster.node_exec, which every channel gives.
            needs.append(("exec", self.node_access_for))
        return needs

    def node_access_missing(self, cluster, case: str | None = None) -> list[str]:
        """The phrases of :meth:`node_access_levels` (for ``case``) that ``cluster``'s node channel
        does not give, each ending with the level it needs. Empty when the drill can run there."""
        return [f"{phrase} (needs node access: {level})" for level, phrase in self.node_access_levels(case)
                if not cluster.node_access_gives(level)]

    def expectation(self, name: str) -> ExpectationSpec:
        """The spec called ``name``. Raises KeyError listing the known names."""
        for spec in self.expectations:
            if spec.name == name:
                return spec
        known = ", ".join(s.name for s in self.expectations)
        raise KeyError(f"scenario {self.name!r} has no expectation {name!r} (known: {known})")

    def case(self, name: str) -> Case:
        """The case called ``name``. Raises KeyError listing the known cases."""
        for case in self.cases:
            if case.name == name:
                return case
        known = ", ".join(c.name for c in self.cases) or "none"
        raise KeyError(f"scenario {self.name!r} has no case {name!r} (known: {known})")

    def expectations_for(self, case_name: str | None = None) -> tuple[ExpectationSpec, ...]:
        """The scenario's expectations followed by the case's own. Raises KeyError for an
        unknown case."""
        if case_name is None:
            return self.expectations
        return self.expectations + self.case(case_name).expectations

    def params_for(self, case_name: str | None = None) -> dict[str, Any]:
        """A fresh copy of the fault params with the case's params merged over
        them (top-level keys; case wins). Raises KeyError for an unknown case."""
        params = copy.deepcopy(self.fault_params)
        if case_name is not None:
            params.update(copy.deepcopy(self.case(case_name).params))
        return params

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable, shaped like the YAML file, plus ``path``."""
        return {
            "name": self.name, "title": self.title, "drill": self.drill, "claim": self.claim,
            "source": [s.to_dict() for s in self.sources],
            "cluster": {"config": self.cluster_config, "needs_node_access": self.needs_node_access,
                        **({"node_access_for": self.node_access_for} if self.node_access_for else {})},
            "fault": {"kind": self.fault_kind, "method": self.fault_method,
                      "params": copy.deepcopy(self.fault_params)},
            "workload": copy.deepcopy(self.workload),
            "probes": {"interval_seconds": self.probe_interval_seconds},
            "expectations": [e.to_dict() for e in self.expectations],
            "cases": [c.to_dict() for c in self.cases],
            "vital_signs": {sign: list(names) for sign, names in self.vital_signs.items()},
            "severity": self.severity,
            **({"on_request": self.on_request} if self.on_request else {}),
            **({"runner": copy.deepcopy(self.runner)} if self.runner is not None else {}),
            "path": str(self.path),
        }


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
    data = _parse_yaml(path, text)
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"{type(data).__name__} {_show(data)}"
        raise ScenarioError(path, "<file>", "a mapping of scenario fields", got)
    errors = sorted(_schema_errors(path, data), key=lambda e: (_sort_key(e.field_path), e.expected))
    if errors:
        raise errors[0].as_error()
    _check_no_control_characters(path, data)
    _check_rules(path, data)
    scenario = _build(path, data)
    if scenario.runner is not None:  # before what its fault needs: a fault it cannot use at all comes first
        check_data_fault(scenario)
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
# terminal (list, --plan) and the report as escape sequences.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


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
            raise ScenarioError(file, "name", f"a name unique across scenarios (already used by {_display(first)})",
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


# --- internals -------------------------------------------------------------

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


class _StrictLoader(UniqueKeyLoader):
    """UniqueKeyLoader without anchors, aliases or explicit tags, reading plain scalars as YAML 1.2."""


def _no_alias(self: _StrictLoader, *args: Any) -> Any:
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


_StrictLoader.compose_node = _no_alias  # type: ignore[method-assign]

# Plain scalars read as YAML 1.2's core schema, not PyYAML's YAML 1.1: `yes`, `on`, `010`
# (octal 8), `1:30` (sexagesimal 90), `1_000` and `2026-11-30` (a date) stay strings, which the schema
# then refuses where a number or a bool is expected, instead of reading a value nobody wrote.
_BOOL, _INT, _FLOAT = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_BOOL, _INT, _FLOAT)]
    for first, resolvers in DatelessLoader.yaml_implicit_resolvers.items()}
_StrictLoader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_StrictLoader.add_implicit_resolver(_INT, re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), list("-+0123456789"))
_StrictLoader.add_implicit_resolver(
    _FLOAT, re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*)(?:[eE][-+]?[0-9]+)?|[-+]?[0-9]+[eE][-+]?[0-9]+"
                       r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"), list("-+0123456789."))


def _parse_yaml(path: Path, text: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - SafeLoader subclass
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


@dataclass
class _Problem:
    path: Path
    field_path: tuple[str | int, ...]
    expected: str
    got: str | None

    def as_error(self) -> ScenarioError:
        return ScenarioError(self.path, _format_field(self.field_path), self.expected, self.got)


def _schema_errors(path: Path, data: dict) -> Iterable[_Problem]:
    return _validator_errors(_VALIDATOR, path, data, ())


def _sub_schema_errors(path: Path, schema: dict, value: Any, prefix: tuple) -> Iterable[_Problem]:
    """Problems of ``value`` against ``schema`` (a probe kind's field), named from ``prefix``."""
    return _validator_errors(Draft202012Validator(schema), path, value, prefix)


def _validator_errors(validator, path: Path, data: Any, prefix: tuple) -> Iterable[_Problem]:
    for err in validator.iter_errors(data):
        where = prefix + tuple(err.absolute_path)
        if err.validator == "required":
            props = err.schema.get("properties", {})
            unknown = [str(k) for k in err.instance if k not in props] if props else []
            for prop in err.validator_value:
                if prop not in err.instance:
                    typo = difflib.get_close_matches(prop, unknown, n=1)  # there, but misspelt
                    yield _Problem(path, where + (prop,), f"{_describe(props.get(prop, {}))} (required)",
                                   f"nothing; {typo[0]!r} is there: misspelt?" if typo else "nothing")
        elif err.validator == "additionalProperties":
            known = list(err.schema.get("properties", {}))
            for extra in sorted((k for k in err.instance if k not in known), key=str):
                near = difflib.get_close_matches(str(extra), known, n=1)  # a misspelt key: say which
                hint = f"; did you mean {near[0]!r}?" if near else ""
                yield _Problem(path, where + (extra,), f"no such field (allowed: {', '.join(known)}){hint}", None)
        else:
            yield _Problem(path, where, _expected_text(err), _show(err.instance))


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


def _sort_key(field_path: tuple[str | int, ...]) -> tuple:
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


def _format_field(field_path: Iterable[str | int]) -> str:
    text = ""
    for part in field_path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "<file>"


def _show(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _display(path: Path) -> str:
    """Path relative to the working directory when it is under it (shorter messages)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve())) if path.is_absolute() else str(path)
    except ValueError:
        return str(path)


BOOL_UNITS = ("bool", "flag")  # the units of a yes/no measurement; every other unit is a number


def _check_rules(path: Path, data: dict) -> None:
    """Rules JSON Schema cannot express: unique names, bool bounds only with ==."""
    for list_name in ("expectations", "cases"):
        first_index: dict[str, int] = {}
        for i, item in enumerate(data.get(list_name, [])):
            if item["name"] in first_index:
                raise ScenarioError(
                    path, f"{list_name}[{i}].name",
                    f"a name unique within the file ({list_name}[{first_index[item['name']]}] already uses it)",
                    repr(item["name"]))
            first_index[item["name"]] = i
    for where, value in _numbers(data):
        if isinstance(value, float) and not math.isfinite(value):
            raise ScenarioError(path, where or "<file>", "a finite number", repr(value))
        if abs(value) > MAX_NUMBER:
            raise ScenarioError(path, where or "<file>", f"a number of at most {MAX_NUMBER:g} in size",
                                f"{str(value)[:20]}... ({len(str(value))} digits)" if len(str(value)) > 20 else repr(value))
    _check_no_todo(path, data)
    _check_runner(path, data)
    every_name = {e["name"] for e in data["expectations"]}
    every_name |= {e["name"] for case in data.get("cases", []) for e in case.get("expectations") or []}
    for vital, names in (data.get("vital_signs") or {}).items():
        for expectation in [names] if isinstance(names, str) else names:
            if expectation not in every_name:
                raise ScenarioError(path, f"vital_signs.{vital}", "the name of an expectation of this scenario "
                                    f"(one of {', '.join(sorted(every_name))})", repr(expectation))
    lists = [("expectations", data["expectations"])]
    lists += [(f"cases[{c}].expectations", case.get("expectations") or [])
              for c, case in enumerate(data.get("cases", []))]
    common = {item["name"]: i for i, item in enumerate(data["expectations"])}
    for where, items in lists:
        for i, item in enumerate(items):
            if "runner" not in data and item["unit"] not in UNITS:
                raise ScenarioError(path, f"{where}[{i}].unit", f"a unit the drill measures in: {', '.join(UNITS)} "
                                    "(times in seconds, ratios from 0 to 1)", repr(item["unit"]))
            # The name says what is measured (every shipped one does): a "_seconds" measurement
            # given as a count would be judged as one, in the report and by kdrill compare.
            for suffix, unit in (("_seconds", "seconds"), ("_ratio", "ratio")):
                if item["name"].endswith(suffix) and item["unit"] != unit:
                    raise ScenarioError(path, f"{where}[{i}].unit", f"{unit!r}, as its name {item['name']!r} says",
                                        repr(item["unit"]))
            bound = item["bound"]
            if isinstance(bound["value"], bool) and bound["op"] != "==":
                raise ScenarioError(path, f"{where}[{i}].bound.value",
                                    "a number (true/false is only allowed with op '==')", repr(bound["value"]))
            if isinstance(bound["value"], bool) != (item["unit"] in BOOL_UNITS):
                # A ratio can never equal true: the expectation could never pass (or never fail).
                expected = ("true or false (its unit is " if item["unit"] in BOOL_UNITS else "a number (its unit is ")
                raise ScenarioError(path, f"{where}[{i}].bound.value", f"{expected}{item['unit']!r})",
                                    repr(bound["value"]))
            value = bound["value"]
            if not isinstance(value, bool) and item["unit"] == "ratio" and not 0 <= value <= 1:
                # A ratio is 0 to 1: a bound outside can never pass or never fail.
                raise ScenarioError(path, f"{where}[{i}].bound.value", "a ratio from 0 to 1", repr(value))
            if not isinstance(value, bool) and item["unit"] == "seconds" and value < 0:
                raise ScenarioError(path, f"{where}[{i}].bound.value", "seconds, 0 or more", repr(value))
            if where != "expectations" and item["name"] in common:
                raise ScenarioError(path, f"{where}[{i}].name",
                                    f"a name not used by the scenario's own expectations "
                                    f"(expectations[{common[item['name']]}] already uses it)", repr(item["name"]))


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


WORKLOAD_KEYS = ("replicas", "node_port", "manifests", "tls", "registries")  # what the runner reads


def _check_workload_keys(path: Path, data: dict) -> None:
    """A data-only scenario's workload has only the keys the runner reads: a misspelt one
    (``manifest:``) would silently drop what it declares. (A drill file may read keys of its own.)"""
    for key in (data.get("workload") or {}):
        if key not in WORKLOAD_KEYS:
            close = difflib.get_close_matches(str(key), WORKLOAD_KEYS, n=1)
            raise ScenarioError(path, f"workload.{key}", "one of " + ", ".join(WORKLOAD_KEYS)
                                + (f" (did you mean {close[0]}?)" if close else ""), repr(key))


def _check_runner(path: Path, data: dict) -> None:
    """A scenario has a drill file or a runner section (data-only), not both; a data-only one says
    for each expectation what the runner measures, on a probe it declares."""
    if "drill" in data and "runner" in data:
        raise ScenarioError(path, "runner", "no runner section: the drill file runs this scenario", "a runner section")
    if "drill" not in data and "runner" not in data:
        raise ScenarioError(path, "drill", "a drill file (drills/test_<x>.py), or a runner section for a "
                            "data-only scenario", "neither")
    lists = [("expectations", data["expectations"])]
    lists += [(f"cases[{c}].expectations", case.get("expectations") or [])
              for c, case in enumerate(data.get("cases", []))]
    if "runner" not in data:
        for key in ("manifests", "registries"):
            if key in (data.get("workload") or {}):
                raise ScenarioError(path, f"workload.{key}", f"no {key}: they are for data-only scenarios "
                                    "(the runner creates them); the drill file makes its own objects", key)
        for where, items in lists:
            for i, item in enumerate(items):
                if "measure" in item:
                    raise ScenarioError(path, f"{where}[{i}].measure", "no measure: the drill file measures "
                                        "(measure is for data-only scenarios)", repr(item["measure"]))
        return
    _check_workload_keys(path, data)
    _check_objects(path, data)
    replicas = (data.get("workload") or {}).get("replicas", 2)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= 20:
        raise ScenarioError(path, "workload.replicas", "a whole number of pods from 1 to 20 for the runner's "
                            "HTTP server", repr(replicas))
    probes = [p["name"] for p in data["runner"]["probes"]]
    for i, name in enumerate(probes):
        if probes.index(name) != i:
            raise ScenarioError(path, f"runner.probes[{i}].name", "a probe name unique in the runner", repr(name))
        if name in VITAL_SIGN_TIMELINES:
            # The record keeps one timeline per name: a probe named so would be overwritten by the
            # vital sign's (or pass its samples off as the vital sign's).
            raise ScenarioError(path, f"runner.probes[{i}].name", "a name that is not a vital sign's timeline ("
                                + ", ".join(VITAL_SIGN_TIMELINES) + ")", repr(name))
    for i, p in enumerate(data["runner"]["probes"]):
        if p["kind"] == "host-http" and p.get("node_port") != (data.get("workload") or {}).get("node_port"):
            raise ScenarioError(path, f"runner.probes[{i}].node_port", "workload.node_port, the NodePort the runner "
                                f"gives its web Service ({(data.get('workload') or {}).get('node_port', 'none declared')})",
                                repr(p.get("node_port")))
    guard = data["runner"].get("abort")
    # A pod-ips probe's calls to every pod are one timeline: it keeps answering while any pod does.
    pod_ips = [p["name"] for p in data["runner"]["probes"] if p["kind"] == "incluster-http" and p.get("target") == "pod-ips"]
    http_probes = [p["name"] for p in data["runner"]["probes"] if p["kind"] == "incluster-http" and p["name"] not in pod_ips]
    # The probe pod's calls are bounded in count (the log the runner reads back stays small): its
    # targets (one per pod for pod-ips) over the windows and the steady-state wait before them.
    in_pod = [p for p in data["runner"]["probes"] if p["kind"] in ("incluster-http", "incluster-dns")]
    calls_per_round = sum(replicas if p["name"] in pod_ips else 1 for p in in_pod)
    interval = float((data.get("probes") or {}).get("interval_seconds", MAX_PROBE_INTERVAL_SECONDS))
    seconds = sum(data["runner"]["windows"].values()) + PROBE_STEADY_SECONDS
    if in_pod and calls_per_round * seconds / interval > PROBE_POD_MAX_REQUESTS:
        raise ScenarioError(path, "runner.probes", f"at most {PROBE_POD_MAX_REQUESTS} calls from the probe pod: its "
                            "targets (a pod-ips probe's one per replica) x (the windows + "
                            f"{PROBE_STEADY_SECONDS} s of steady state) / probes.interval_seconds",
                            f"{calls_per_round} targets x {seconds:g} s / {interval:g} s = "
                            f"{calls_per_round * seconds / interval:.0f} calls")
    if guard is not None and guard["probe"] in pod_ips:
        raise ScenarioError(path, "runner.abort.probe", "an incluster-http probe of one target (name, clusterip or a "
                            "declared Service): a pod-ips probe keeps answering while any one pod does, so the "
                            f"guard would not see a pod fail: {', '.join(http_probes) or 'none declared'}",
                            repr(guard["probe"]))
    if guard is not None and guard["probe"] not in http_probes:
        # The guard reads the in-cluster probe pod's log while the fault holds; other kinds'
        # samples are not there, so it would see nothing and trip on every run.
        raise ScenarioError(path, "runner.abort.probe", f"one of the incluster-http probes: {', '.join(http_probes)}",
                            repr(guard["probe"]))
    registry = (data["fault"].get("params") or {}).get("registry")
    declared = [r["name"] for r in (data.get("workload") or {}).get("registries") or []]
    if data["fault"]["kind"] == "registry-outage" and registry not in declared:
        raise ScenarioError(path, "fault.params.registry",
                            f"one of workload.registries: {', '.join(declared) or '(none declared)'}",
                            repr(registry) if registry is not None else "nothing")
    if guard is not None and guard["max_failing_seconds"] >= data["runner"]["windows"]["hold_seconds"]:
        raise ScenarioError(path, "runner.abort.max_failing_seconds", "fewer seconds than runner.windows."
                            f"hold_seconds ({data['runner']['windows']['hold_seconds']}): a guard that can trip",
                            repr(guard["max_failing_seconds"]))

    kinds = measure_kinds()
    try:
        fault_type = registered_fault(data["fault"]["kind"])
    except Exception:  # an unknown kind is refused by its own check, with its own message
        fault_type = None
    if fault_type is not None and not data_usable(fault_type):
        fault_type = None  # ...and so is one the runner cannot build, before its facts or marks
    marks = sorted(getattr(fault_type, "marks_offered", {}))
    facts = getattr(fault_type, "facts_offered", {})
    for where, items in lists:
        for i, item in enumerate(items):
            if "measure" not in item:
                raise ScenarioError(path, f"{where}[{i}].measure", "what the runner measures: {kind, probe, window}, "
                                    "or {fact}", "nothing")
            if fault_type is None and ({"fact", "from_mark", "until_mark"} & set(item["measure"])):
                continue  # the unknown fault kind is refused by its own check, with the nearest known kind
            if "fact" in item["measure"]:
                extra = sorted(set(item["measure"]) - {"fact"})
                if extra:
                    raise ScenarioError(path, f"{where}[{i}].measure", "{fact} alone: the fault measured it, over "
                                        "no probe or window", ", ".join(extra))
                if item["measure"]["fact"] not in facts:
                    raise ScenarioError(path, f"{where}[{i}].measure.fact", f"a fact fault {data['fault']['kind']} "
                                        f"measures: {', '.join(sorted(facts)) or 'none'}", repr(item["measure"]["fact"]))
                unit = facts[item["measure"]["fact"]][0]
                if item["unit"] != unit:
                    raise ScenarioError(path, f"{where}[{i}].unit", f"{unit!r}, the unit of fact {item['measure']['fact']}",
                                        repr(item["unit"]))
                continue
            missing = [k for k in ("kind", "probe", "window") if k not in item["measure"]]
            if missing:
                raise ScenarioError(path, f"{where}[{i}].measure.{missing[0]}", "what the runner measures: {kind, "
                                    "probe, window}, or {fact}", "nothing")
            if "predicted_by" in item["measure"]:
                predicted = item["measure"]["predicted_by"]
                if predicted not in facts or facts[predicted][0] != "ratio":
                    raise ScenarioError(path, f"{where}[{i}].measure.predicted_by", "a ratio fact fault "
                                        f"{data['fault']['kind']} measures: " + (", ".join(sorted(
                                            f for f, (u, _) in facts.items() if u == "ratio")) or "none"), repr(predicted))
                if item["measure"]["kind"] != "success_ratio" or item["unit"] != "bool":
                    raise ScenarioError(path, f"{where}[{i}]", "measure kind success_ratio and unit bool with "
                                        "predicted_by (the ratio is judged against the prediction: true or false)",
                                        f"kind {item['measure']['kind']!r}, unit {item['unit']!r}")
            for key in ("from_mark", "until_mark"):
                if key in item["measure"] and item["measure"][key] not in marks:
                    raise ScenarioError(path, f"{where}[{i}].measure.{key}", f"a mark fault {data['fault']['kind']} "
                                        f"offers: {', '.join(marks) or 'none'}", repr(item["measure"][key]))
                # A fault marks times while it is in force (harness/faults: Fault.marks).
                if key in item["measure"] and item["measure"]["window"] != "fault":
                    raise ScenarioError(path, f"{where}[{i}].measure.window", f"fault, the window {key} "
                                        f"{item['measure'][key]} lies in", repr(item["measure"]["window"]))
            if item["measure"]["kind"] not in kinds:
                raise ScenarioError(path, f"{where}[{i}].measure.kind", f"an installed measure: {', '.join(kinds)}",
                                    repr(item["measure"]["kind"]))
            unit = MEASURE_UNITS.get(item["measure"]["kind"])
            if unit is not None and item["unit"] != unit and "predicted_by" not in item["measure"]:
                raise ScenarioError(path, f"{where}[{i}].unit", f"{unit!r}, the unit of {item['measure']['kind']}",
                                    repr(item["unit"]))
            if item["measure"]["probe"] not in probes:
                raise ScenarioError(path, f"{where}[{i}].measure.probe", f"one of runner.probes: {', '.join(probes)}",
                                    repr(item["measure"]["probe"]))

            if item["measure"]["probe"] in pod_ips and item["measure"]["kind"] not in POD_IPS_MEASURES:
                raise ScenarioError(path, f"{where}[{i}].measure.kind", "a measure that holds over the calls to every "
                                    f"pod together ({', '.join(POD_IPS_MEASURES)}): a pod-ips probe interleaves them, "
                                    "so a run of failures or a recovery would be one pod's hidden by another's answers",
                                    f"{item['measure']['kind']!r} on {item['measure']['probe']!r}, a pod-ips probe")

            probe_kind = next((p.get("kind") for p in data["runner"]["probes"] if p.get("name") == item["measure"]["probe"]),
                              None)
            valued = [k for k, c in probe_types().items() if getattr(c, "records_values", False)]
            if item["measure"]["kind"] in VALUE_MEASURES and probe_kind is not None and probe_kind not in valued:
                raise ScenarioError(path, f"{where}[{i}].measure.probe", f"a probe that records values: "
                                    f"{', '.join(valued)} ({item['measure']['kind']} reads them)",
                                    f"{item['measure']['probe']!r}, a {probe_kind} probe")
            _check_measure_narrowing(path, f"{where}[{i}].measure", item["measure"], data["runner"]["windows"])
            window = item["measure"]["window"]
            in_window = {a["name"]: a for a in data["runner"].get("actions") or [] if a["window"] == window}
            for key in ("from_action", "until_action"):
                if key in item["measure"] and item["measure"][key] not in in_window:
                    raise ScenarioError(path, f"{where}[{i}].measure.{key}", f"an action of the {window} window: "
                                        + (", ".join(in_window) or "none"), repr(item["measure"][key]))
            if "from_action" in item["measure"] and "until_action" in item["measure"] and \
                    in_window[item["measure"]["from_action"]]["after_seconds"] \
                    >= in_window[item["measure"]["until_action"]]["after_seconds"]:
                raise ScenarioError(path, f"{where}[{i}].measure.until_action", "an action later than from_action "
                                    f"({item['measure']['from_action']})", repr(item["measure"]["until_action"]))


WINDOW_SECONDS = {"baseline": "baseline_seconds", "fault": "hold_seconds", "after": "after_seconds"}


def _check_measure_narrowing(path: Path, field: str, measure: dict, windows: dict) -> None:
    """``within_seconds`` only where a slow success counted as failed means something (not on a
    latency or value measure, whose value would silently leave the slow samples out), and
    ``settle_seconds`` shorter than the window it starts in. Raises ScenarioError."""
    if "within_seconds" in measure and measure["kind"] in (*LATENCY_MEASURES, *VALUE_MEASURES):
        raise ScenarioError(path, f"{field}.within_seconds", f"no within_seconds on {measure['kind']}: it makes "
                            "slow successes failures, which a latency or value measure then leaves out",
                            repr(measure["within_seconds"]))
    seconds = windows.get(WINDOW_SECONDS.get(measure["window"], ""))
    if "settle_seconds" in measure and isinstance(seconds, (int, float)) and measure["settle_seconds"] >= seconds:
        raise ScenarioError(path, f"{field}.settle_seconds", f"fewer seconds than the {measure['window']} window's "
                            f"{seconds} (runner.windows.{WINDOW_SECONDS[measure['window']]}): something left to "
                            "measure", repr(measure["settle_seconds"]))


def _check_objects(path: Path, data: dict) -> None:
    """The objects a data-only scenario names: kinds the runner knows, known placeholders, names
    and namespaces the API takes once ``$(namespace)`` is expanded (their only placeholder), each
    object made once, a Namespace only under a name made from the drill's namespace, namespaced
    ones only in the drill's namespace or one the manifests make, probes with the fields their
    kind needs, and actions only on objects the manifests make, within their window."""

    known = ", ".join(f"$({k})" for k in PLACEHOLDER_NAMES)
    kinds = ", ".join(sorted(KINDS))
    # Every namespace this scenario's drills run in (one per case): a name is checked as it will be sent.
    drill_namespaces = [drill_namespace(data["name"], c["name"]) for c in data.get("cases") or []] \
        or [drill_namespace(data["name"])]

    def check_kind(field: str, kind: str) -> None:
        if kind not in KINDS:
            raise ScenarioError(path, field, f"a kind the runner knows: {kinds}", repr(kind))

    registries = (data.get("workload") or {}).get("registries") or []
    images = [image for registry in registries for image, _ in registry_images(registry)]
    for where, names in (("workload.registries", [r["name"] for r in registries]),
                         ("workload.registries[].images", images)):
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ScenarioError(path, where, "each name once (a manifest names an image by it alone)",
                                ", ".join(twice))
    if registries and not data["cluster"].get("needs_node_access"):
        raise ScenarioError(path, "cluster.needs_node_access", "true: workload.registries writes the nodes' "
                            "containerd configuration", repr(data["cluster"].get("needs_node_access", False)))
    # What only a manifest may use: the drill's images and the workers' node names.
    manifest_only = {f"image_{image}" for image in images}

    def check_placeholders(field: str, value: Any, extra: set[str] = frozenset(), workers: bool = False) -> None:
        for where in placeholder_keys(value):
            raise ScenarioError(path, _format_field((field, *where)), "placeholders in values only (keys are sent "
                                "as written)", repr(where[-1]))
        unknown = sorted(u for u in placeholders(value) - set(PLACEHOLDER_NAMES) - extra
                         if not (workers and WORKER_PLACEHOLDER.fullmatch(u)))
        if unknown:
            allowed = known + "".join(f", $({k})" for k in sorted(extra)) + (", $(worker_<n>)" if workers else "")
            raise ScenarioError(path, field, f"placeholders among {allowed}", ", ".join(f"$({u})" for u in unknown))

    def check_names(field: str, kind: str, name: str, namespace: str | None) -> None:
        """``name`` and ``namespace`` (at ``field``.name and .namespace) as the API will get them,
        placeholders expanded for each drill namespace: a name the API would refuse is refused
        here, before anything is made (and one such as "../kube-system/..." never reaches a path)."""
        for key, value in (("name", name), ("namespace", namespace)):
            if value is not None and placeholders(value) - {"namespace"}:
                raise ScenarioError(path, f"{field}.{key}", "a name whose only placeholder is $(namespace)", repr(value))
        for ns in drill_namespaces:
            def sent(value: str | None) -> str | None:
                return None if value is None else expand(value, {"namespace": ns})

            namespace_sent = sent(namespace) if namespace is not None or not KINDS[kind].namespaced else ns
            for key, value, problem in (("namespace", namespace, KINDS[kind].problem(None, namespace_sent)),
                                        ("name", name, KINDS[kind].problem(sent(name), namespace_sent))):
                if problem is not None:
                    shown = f"{sent(value)!r} ($(namespace) is {ns})" if sent(value) != value else repr(value)
                    raise ScenarioError(path, f"{field}.{key}", problem, shown)

    def ref(kind: str, name: str, namespace: str | None) -> tuple:
        return (kind, name, (namespace or "$(namespace)") if KINDS[kind].namespaced else None)

    made: list[tuple] = []
    declared: dict[tuple, tuple[str, dict]] = {}  # an object as written (ref) -> the field and manifest making it
    made_sent: dict[tuple, int] = {}  # (drill namespace, kind, name, namespace as sent) -> manifest index
    for i, manifest in enumerate((data.get("workload") or {}).get("manifests") or []):
        field = f"workload.manifests[{i}]"
        check_kind(f"{field}.kind", manifest["kind"])
        check_placeholders(field, manifest, manifest_only, workers=True)
        if manifest["apiVersion"] != KINDS[manifest["kind"]].api_version:
            raise ScenarioError(path, f"{field}.apiVersion", f"{KINDS[manifest['kind']].api_version!r} for a "
                                f"{manifest['kind']}", repr(manifest["apiVersion"]))
        if manifest["kind"] == "Namespace" and not str(manifest["metadata"]["name"]).startswith(OWN_NAMESPACE_PREFIX):
            # The drill's namespace is kdrill's by name (kdrill-<scenario>), and so is any name
            # built on it; kube-system, default or a tenant's namespace is not, even one that does
            # not exist yet (kdrill would create it, then delete it with what others put there),
            # and a declared namespace is where the manifests after it, and actions, may act.
            raise ScenarioError(path, f"{field}.metadata.name", f"a name made from the drill's namespace, "
                                f"{OWN_NAMESPACE_PREFIX}<suffix>: kdrill creates and deletes only namespaces "
                                "named after its own", repr(manifest["metadata"]["name"]))
        if OWNER_LABEL in (manifest["metadata"].get("labels") or {}):
            # kdrill sets it to the ledger entry's token; a scenario's value would be replaced.
            raise ScenarioError(path, f"{field}.metadata.labels.{OWNER_LABEL}", f"no {OWNER_LABEL} label: kdrill "
                                "labels the objects it makes itself", repr(manifest["metadata"]["labels"][OWNER_LABEL]))
        this = ref(manifest["kind"], manifest["metadata"]["name"], manifest["metadata"].get("namespace"))
        namespaces = ["$(namespace)"] + [name for kind, name, _ in made if kind == "Namespace"]
        if this[2] is not None and this[2] not in namespaces:
            raise ScenarioError(path, f"{field}.metadata.namespace", "the drill's namespace ($(namespace), the "
                                "default) or a Namespace made by an earlier manifest: "
                                + ", ".join(namespaces), repr(this[2]))
        check_names(f"{field}.metadata", manifest["kind"], manifest["metadata"]["name"],
                    manifest["metadata"].get("namespace"))
        problem = apiservice_problem(manifest) if manifest["kind"] == "APIService" else None
        if problem:
            where, expected, got = problem
            raise ScenarioError(path, f"{field}.{where}", expected, got)
        if this[2] == "$(namespace)" and this[:2] in OWN_OBJECTS:
            raise ScenarioError(path, f"{field}.metadata.name", "a name other than those of the objects the runner "
                                "makes in the drill's namespace itself: " + ", ".join(f"{k} {n}" for k, n in OWN_OBJECTS),
                                repr(this[1]))
        # Compared as sent: "$(namespace)-c" and its expansion written out are one object.
        for ns in drill_namespaces:
            sent = (ns, *(expand(part, {"namespace": ns}) if part is not None else None for part in this))
            if sent in made_sent:
                raise ScenarioError(path, f"{field}.metadata.name", f"an object not made twice (workload.manifests"
                                    f"[{made_sent[sent]}] makes it too)", f"{this[0]} {this[1]} again")
            made_sent[sent] = i
        made.append(this)
        declared[this] = (field, manifest)
    _check_webhook_scope(path, data, made, drill_namespaces)
    _check_policy_scope(path, data, made)
    tls = (data.get("workload") or {}).get("tls")
    if tls is not None and ("Service", tls["service"], "$(namespace)") not in made:
        raise ScenarioError(path, "workload.tls.service", "a Service made by workload.manifests in the drill's namespace: "
                            + (", ".join(n for k, n, ns in made if k == "Service" and ns == "$(namespace)") or "none"),
                            repr(tls["service"]))
    for i, manifest in enumerate((data.get("workload") or {}).get("manifests") or []):
        misplaced = tls_key_misplaced(manifest)
        if misplaced:
            raise ScenarioError(path, f"workload.manifests[{i}]", "$(tls_key) only in the stringData of a Secret",
                                misplaced)
    if tls is None:
        for i, manifest in enumerate((data.get("workload") or {}).get("manifests") or []):
            used = sorted(placeholders(manifest) & set(TLS_PLACEHOLDERS))
            if used:
                raise ScenarioError(path, f"workload.manifests[{i}]", "$(tls_*) placeholders only with workload.tls "
                                    "(the Service the certificate is made for)", ", ".join(f"$({u})" for u in used))
    windows = data["runner"]["windows"]
    in_manifests = Declared(list(declared.values()), lambda target: declared.get(
        ref(target["kind"], target["name"], target.get("namespace"))))
    for i, probe in enumerate(data["runner"]["probes"]):
        field = f"runner.probes[{i}]"
        probe_type = probe_types().get(probe["kind"])
        if probe_type is None:
            raise ScenarioError(path, f"{field}.kind", "an installed probe kind (kdrill.probes): "
                                + ", ".join(sorted(probe_types())), repr(probe["kind"]))
        needs, takes = tuple(probe_type.required), tuple(probe_type.fields)
        for key in probe:
            if key not in takes and key not in ("name", "kind"):
                raise ScenarioError(path, f"{field}.{key}", f"no {key}: a {probe['kind']} probe takes "
                                    + (", ".join(takes) or "nothing besides its name and kind"), repr(probe[key]))
        for key in needs:
            if key not in probe:
                raise ScenarioError(path, f"{field}.{key}", f"a {key} for a {probe['kind']} probe", "nothing")
        for key in takes:
            if key in probe:
                for problem in _sub_schema_errors(path, probe_type.fields[key], probe[key], (f"{field}.{key}",)):
                    raise problem.as_error()
        for where, expected, got in getattr(probe_type, "problems", lambda spec: [])(probe):
            raise ScenarioError(path, f"{field}.{where}", expected, got)
        on_node = getattr(probe_type, "node_access", lambda spec: None)(probe)
        if on_node and not data["cluster"].get("needs_node_access"):
            raise ScenarioError(path, "cluster.needs_node_access", f"true: {field} {on_node}",
                                repr(data["cluster"].get("needs_node_access", False)))
        if "object" in probe:
            check_kind(f"{field}.object.kind", probe["object"]["kind"])
            check_placeholders(f"{field}.object", probe["object"])
            check_names(f"{field}.object", probe["object"]["kind"], probe["object"]["name"],
                        probe["object"].get("namespace"))
        # what the declared objects say of the probe (a probe kind's declared_problems)
        for where, expected, got in getattr(probe_type, "declared_problems", lambda spec, found: [])(probe,
                                                                                                       in_manifests):
            raise ScenarioError(path, f"{field}.{where}", expected, got)
        if getattr(probe_type, "writes", False):
            _check_probe_writes(path, field, probe, made, ref, drill_namespaces)
        if isinstance(probe.get("target"), dict) and ("Service", probe["target"]["service"], "$(namespace)") not in made:
            raise ScenarioError(path, f"{field}.target.service", "a Service the manifests make in the drill's namespace: "
                                + (", ".join(n for k, n, ns in made if k == "Service" and ns == "$(namespace)") or "none"),
                                repr(probe["target"]["service"]))
    actions = data["runner"].get("actions") or []
    for i, action in enumerate(actions):
        field = f"runner.actions[{i}]"
        first = [a["name"] for a in actions].index(action["name"])
        if first != i:
            # Actions.finish tells an action that never ran by its name.
            raise ScenarioError(path, f"{field}.name", f"an action name unique in the runner (runner.actions[{first}] "
                                "has it)", repr(action["name"]))
        verbs = [verb for verb in ACTION_VERBS if verb in action]
        if len(verbs) != 1:
            raise ScenarioError(path, field, "one of delete (an object), evict (a Pod), scale (a Deployment or "
                                "StatefulSet) or kill_container (a Pod's)", " and ".join(verbs) or "neither")
        verb = verbs[0]
        target = action[verb]
        check_kind(f"{field}.{verb}.kind", target["kind"])
        check_placeholders(f"{field}.{verb}", target)
        check_names(f"{field}.{verb}", target["kind"], target["name"], target.get("namespace"))
        if verb == "kill_container" and not data["cluster"].get("needs_node_access"):
            raise ScenarioError(path, "cluster.needs_node_access", f"true: {field}.kill_container stops a container "
                                "through its node's runtime", repr(data["cluster"].get("needs_node_access", False)))
        if verb == "scale" and target["kind"] not in ("Deployment", "StatefulSet"):
            raise ScenarioError(path, f"{field}.scale.kind", "Deployment or StatefulSet", repr(target["kind"]))
        if verb in ("evict", "kill_container"):
            if target["kind"] != "Pod":
                raise ScenarioError(path, f"{field}.{verb}.kind", f"Pod (only a pod is {verb}ed)"
                                    if verb == "evict" else "Pod", repr(target["kind"]))
            this = ref("Pod", target["name"], target.get("namespace"))
            # A declared Pod, or one a declared StatefulSet makes: <name>-<ordinal>, a stable name.
            # The ordinal is read from the name, not looked up in a list of every pod: replicas is
            # the scenario's number, and 10**12 of them must not be enumerated here.
            pods = [n for k, n, _ in made if k == "Pod"]
            sets = [(name, namespace, start, replicas) for name, namespace, start, replicas in _stateful_sets(data)
                    if replicas > 0]
            ordinal = re.fullmatch(r"(.+)-(0|[1-9][0-9]*)", this[1])
            if this not in [m for m in made if m[0] == "Pod"] and not (ordinal and any(
                    (name, namespace) == (ordinal[1], this[2]) and start <= int(ordinal[2]) < start + replicas
                    for name, namespace, start, replicas in sets)):
                raise ScenarioError(path, f"{field}.{verb}", "a Pod made by workload.manifests, or by one of its "
                                    "StatefulSets (<name>-<ordinal>): " + (", ".join(
                                        pods + [f"{name}-{start}" + (f"..{name}-{start + replicas - 1}" if replicas > 1
                                                                     else "")
                                                for name, _, start, replicas in sets]) or "none"),
                                    f"Pod {target.get('namespace') + '/' if target.get('namespace') else ''}{target['name']}")
        elif ref(target["kind"], target["name"], target.get("namespace")) not in made:
            # As written: the namespace left out, or "$(namespace)", for the drill's own.
            raise ScenarioError(path, f"{field}.{verb}", "an object made by workload.manifests, as written there "
                                "(an action never touches what the drill did not make): "
                                + (", ".join(_ref_text(*m) for m in made) or "none"),
                                _ref_text(*ref(target["kind"], target["name"], target.get("namespace"))))
        length = windows["hold_seconds" if action["window"] == "fault" else "after_seconds"]
        if action["after_seconds"] >= length:
            raise ScenarioError(path, f"{field}.after_seconds", f"fewer seconds than the {action['window']} window "
                                f"({length} s)", repr(action["after_seconds"]))


def _ref_text(kind: str, name: str, namespace: str | None) -> str:
    """An object as written in a scenario, for an error message: ``Kind namespace/name``."""
    return f"{kind} {namespace + '/' if namespace else ''}{name}"


def _check_probe_writes(path: Path, field: str, probe: dict, made: list[tuple], ref,
                        drill_namespaces: list[str]) -> None:
    """A probe that writes (even as a dry run) acts only where the drill may: an ``update`` only of
    an object the manifests make, a ``create`` only of a namespaced kind in the drill's namespace
    or one the manifests make, under a name that leaves room for its number; what it sends is
    literal (no placeholder in a value or a key)."""
    target = probe["object"]
    this = ref(target["kind"], target["name"], target.get("namespace"))
    if "update" in probe and this not in made:
        raise ScenarioError(path, f"{field}.object", "an object made by workload.manifests, as written there (a "
                            "probe never writes to what the drill did not make): "
                            + (", ".join(_ref_text(*m) for m in made) or "none"), _ref_text(*this))
    for key in ("create", "update"):
        if key in probe and placeholders(probe[key]):
            raise ScenarioError(path, f"{field}.{key}", "literal values (placeholders are expanded in manifests and "
                                "object names only)", ", ".join(f"$({p})" for p in sorted(placeholders(probe[key]))))
        for where in placeholder_keys(probe.get(key)):
            raise ScenarioError(path, _format_field((f"{field}.{key}", *where)), "keys without placeholders (sent as "
                                "written)", repr(where[-1]))
    if "create" in probe:
        own = ["$(namespace)"] + [n for k, n, _ in made if k == "Namespace"]
        if this[2] is None or this[2] not in own:
            raise ScenarioError(path, f"{field}.object", "a namespaced kind in the drill's namespace or one the "
                                "manifests make: " + ", ".join(own),
                                f"{target['kind']} in {this[2] or 'no namespace (cluster-scoped)'}")
        # each create is named <name>-<n>: the name must leave room for the number
        kind = KINDS[target["kind"]]
        for ns in drill_namespaces:
            longest = expand(f"{target['name']}-{10 ** 7}", {"namespace": ns})
            problem = kind.problem(longest, ns)
            if problem is not None:
                raise ScenarioError(path, f"{field}.object.name", f"a name that, with '-<n>' added for each create "
                                    f"(e.g. {longest!r}), is {problem}", repr(target["name"]))


def _stateful_sets(data: dict) -> list[tuple[str, str, int, int]]:
    """(name, namespace as written, first ordinal, replicas) of every StatefulSet the manifests
    make: its pods are <name>-<first> to <name>-<first + replicas - 1>."""
    found = []
    for manifest in (data.get("workload") or {}).get("manifests") or []:
        if manifest["kind"] == "StatefulSet":
            spec = manifest.get("spec") or {}
            # the API's default is 1; a spec that is no mapping makes no pods here (the API refuses it)
            replicas = spec.get("replicas", 1) if isinstance(spec, dict) else 0
            ordinals = spec.get("ordinals") if isinstance(spec, dict) else None
            start = ordinals.get("start", 0) if isinstance(ordinals, dict) else 0  # spec.ordinals.start, default 0
            found.append((manifest["metadata"]["name"], manifest["metadata"].get("namespace") or "$(namespace)",
                          start if type(start) is int and start >= 0 else 0, replicas if type(replicas) is int else 0))
    return found


# A declared admission webhook must not reach beyond the drill: it is called for every matching
# request in the cluster, and a fail-closed one whose backend is down refuses them all.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def _confined(selector: Any, own: set[str]) -> bool:
    """Whether a namespaceSelector requires ``kubernetes.io/metadata.name In [...]`` of names in
    ``own`` only."""
    expressions = selector.get("matchExpressions") if isinstance(selector, dict) else None
    return any(isinstance(e, dict) and e.get("key") == NAMESPACE_NAME_LABEL and e.get("operator") == "In"
               and isinstance(e.get("values"), list) and e["values"]
               # strings only: a list or mapping among the values is no name (and unhashable)
               and all(isinstance(v, str) for v in e["values"]) and set(e["values"]) <= own
               for e in expressions or [])


def _check_named_after_drill(path: Path, index: int, manifest: dict) -> None:
    """A cluster-scoped admission object (a policy, its binding, a webhook configuration) is named
    after the drill's namespace, ``$(namespace)...``: one name per drill, so two drills' (or two
    cases') objects never collide, and what a drill leaves behind names its drill. Raises
    ScenarioError at ``workload.manifests[index].metadata.name``."""
    if not manifest["metadata"]["name"].startswith(OWN_NAMESPACE_PREFIX.rstrip("-")):
        raise ScenarioError(path, f"workload.manifests[{index}].metadata.name", "a name made from the drill's "
                            f"namespace, $(namespace)... (a {manifest['kind']} is cluster-scoped: one name per "
                            "drill)", repr(manifest["metadata"]["name"]))


def _check_policy_scope(path: Path, data: dict, made: list[tuple]) -> None:
    """A declared ValidatingAdmissionPolicy acts only through a declared binding, and both only in
    the drill's own namespaces: every resource rule of the policy is ``scope: Namespaced``, and
    each binding names a declared policy and has a namespaceSelector as a webhook's must.
    Source: https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/
    (matchConstraints, binding matchResources)."""
    own = {"$(namespace)"} | {name for kind, name, _ in made if kind == "Namespace"}
    manifests = (data.get("workload") or {}).get("manifests") or []
    policies = [m["metadata"]["name"] for m in manifests if m["kind"] == "ValidatingAdmissionPolicy"]
    for i, manifest in enumerate(manifests):
        spec = manifest.get("spec") if isinstance(manifest.get("spec"), dict) else {}
        field = f"workload.manifests[{i}].spec"
        if manifest["kind"] in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
            # a binding names its policy by name alone: another binding on the cluster naming a
            # policy called like ours would apply it beyond the drill
            _check_named_after_drill(path, i, manifest)
        if manifest["kind"] == "ValidatingAdmissionPolicy":
            constraints = spec.get("matchConstraints") if isinstance(spec.get("matchConstraints"), dict) else {}
            rules = constraints.get("resourceRules")
            if not isinstance(rules, list) or not rules:
                raise ScenarioError(path, f"{field}.matchConstraints.resourceRules", "a list of rules, each scope: "
                                    "Namespaced", repr(rules))
            for k, rule in enumerate(rules):
                if not isinstance(rule, dict) or rule.get("scope") != "Namespaced":
                    raise ScenarioError(path, f"{field}.matchConstraints.resourceRules[{k}].scope", "Namespaced (a "
                                        "declared policy acts only on objects in the drill's namespaces)",
                                        repr(rule.get("scope") if isinstance(rule, dict) else rule))
        elif manifest["kind"] == "ValidatingAdmissionPolicyBinding":
            if spec.get("policyName") not in policies:
                raise ScenarioError(path, f"{field}.policyName", "a ValidatingAdmissionPolicy the manifests make: "
                                    + (", ".join(policies) or "none"), repr(spec.get("policyName")))
            resources = spec.get("matchResources") if isinstance(spec.get("matchResources"), dict) else {}
            if not _confined(resources.get("namespaceSelector"), own):
                raise ScenarioError(path, f"{field}.matchResources.namespaceSelector", "matchExpressions with "
                                    f"{{key: {NAMESPACE_NAME_LABEL}, operator: In, values: [...]}} naming only the "
                                    "drill's namespaces: " + ", ".join(sorted(own)),
                                    repr(resources.get("namespaceSelector")))


# What the API server's validation of an admissionregistration.k8s.io/v1 webhook refuses (the
# configuration's create fails with 422 only after the setup began): the values it takes.
# Source: https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/
# (side effects, timeouts, webhook names, AdmissionReview versions) and the API reference of
# ValidatingWebhookConfiguration v1.
WEBHOOK_SIDE_EFFECTS = ("None", "NoneOnDryRun")  # v1 takes no other (Unknown and Some were v1beta1's)
WEBHOOK_REVIEW_VERSIONS = ("v1", "v1beta1")  # the AdmissionReview versions an API server sends
WEBHOOK_TIMEOUT_SECONDS = (1, 30)
WEBHOOK_POLICIES = {"failurePolicy": ("Ignore", "Fail"), "matchPolicy": ("Exact", "Equivalent")}
MUTATING_REINVOCATION = ("Never", "IfNeeded")


def _whole_number(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _webhook_api_problem(hook: dict, mutating: bool, drill_namespaces: list[str],
                         earlier: list[str]) -> tuple[str, str, str] | None:
    """What the API server would refuse in one webhook of a declared Validating- or
    MutatingWebhookConfiguration (v1), as (field under the webhook, expected, got), or None.
    ``earlier``: the names (as written) of the configuration's
    webhooks before it, which a name may not repeat."""
    name = hook.get("name")
    for ns in drill_namespaces:
        sent = expand(name, {"namespace": ns}) if isinstance(name, str) else name
        if name_problem(sent) is not None or len(sent.split(".")) < 3:
            shown = f"{sent!r} ($(namespace) is {ns})" if sent != name else repr(name)
            return ("name", "a fully qualified name of at least three DNS labels, e.g. admit-all.kdrill.io (webhook "
                    "name and organisation's domain): lowercase letters, digits, '-' and '.', at most 253 characters",
                    shown)
    if name in earlier:
        return "name", "a name no other webhook of this configuration has", repr(name)
    versions = hook.get("admissionReviewVersions")
    if not isinstance(versions, list) or not versions or not all(isinstance(v, str) for v in versions) \
            or len(set(versions)) != len(versions) or not set(versions) & set(WEBHOOK_REVIEW_VERSIONS):
        return ("admissionReviewVersions", "a list of the AdmissionReview versions the webhook understands, each once, "
                f"with {' or '.join(WEBHOOK_REVIEW_VERSIONS)} among them (required in v1)",
                "nothing" if versions is None else _show(versions))
    if hook.get("sideEffects") not in WEBHOOK_SIDE_EFFECTS:
        return ("sideEffects", " or ".join(WEBHOOK_SIDE_EFFECTS) + " (required in v1, which takes no other)",
                "nothing" if "sideEffects" not in hook else _show(hook["sideEffects"]))
    if "timeoutSeconds" in hook and not _whole_number(hook["timeoutSeconds"], *WEBHOOK_TIMEOUT_SECONDS):
        return ("timeoutSeconds", "a whole number of seconds from {} to {} (default 10)".format(*WEBHOOK_TIMEOUT_SECONDS),
                _show(hook["timeoutSeconds"]))
    policies = {**WEBHOOK_POLICIES, **({"reinvocationPolicy": MUTATING_REINVOCATION} if mutating else {})}
    for key, allowed in policies.items():
        if key in hook and hook[key] not in allowed:
            return key, " or ".join(allowed), _show(hook[key])
    service = (hook.get("clientConfig") or {}).get("service") if isinstance(hook.get("clientConfig"), dict) else None
    if isinstance(service, dict) and "port" in service and not _whole_number(service["port"], 1, 65535):
        return "clientConfig.service.port", "a port number from 1 to 65535 (default 443)", _show(service["port"])
    return None


def _check_webhook_scope(path: Path, data: dict, made: list[tuple], drill_namespaces: list[str]) -> None:
    """Each webhook of a declared Validating/MutatingWebhookConfiguration matches only the
    drill's own namespaces: its rules are ``scope: Namespaced`` (a namespaceSelector does not
    apply to cluster-scoped objects) and its namespaceSelector requires
    ``kubernetes.io/metadata.name In [...]`` of the drill's namespace and namespaces the
    manifests make; and it calls a Service in those namespaces, never a ``url``. The configuration
    is named after the drill's namespace (:func:`_check_named_after_drill`); its settings are
    ones the API server takes (:func:`_webhook_api_problem`), checked for each of
    ``drill_namespaces`` where a name holds ``$(namespace)``.
    Source: https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/
    (matching requests: rules, namespaceSelector; contacting the webhook: url, service)."""
    own = {"$(namespace)"} | {name for kind, name, _ in made if kind == "Namespace"}
    manifests = (data.get("workload") or {}).get("manifests") or []
    for i, manifest in enumerate(manifests):
        if manifest["kind"] not in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            continue
        # a fixed name would meet the configuration of another drill (or case) running meanwhile
        _check_named_after_drill(path, i, manifest)
        webhooks = manifest.get("webhooks")
        if not isinstance(webhooks, list) or not webhooks:
            raise ScenarioError(path, f"workload.manifests[{i}].webhooks", "a list of webhooks", repr(webhooks))
        for j, hook in enumerate(webhooks):
            field = f"workload.manifests[{i}].webhooks[{j}]"
            if not isinstance(hook, dict):
                raise ScenarioError(path, field, "a mapping (one webhook)", repr(hook))
            problem = _webhook_api_problem(hook, manifest["kind"] == "MutatingWebhookConfiguration", drill_namespaces,
                                           [w.get("name") for w in webhooks[:j] if isinstance(w, dict)])
            if problem is not None:
                raise ScenarioError(path, f"{field}.{problem[0]}", problem[1], problem[2])
            if not isinstance(hook.get("rules"), list) or not hook["rules"]:
                raise ScenarioError(path, f"{field}.rules", "a list of rules, each scope: Namespaced",
                                    repr(hook.get("rules")))
            for k, rule in enumerate(hook["rules"]):
                scope = rule.get("scope") if isinstance(rule, dict) else None
                if scope != "Namespaced":
                    raise ScenarioError(path, f"{field}.rules[{k}].scope", "Namespaced (a declared webhook matches only "
                                        "objects in the drill's namespaces; the namespaceSelector does not apply to "
                                        "cluster-scoped ones)", repr(scope))
            selector = hook.get("namespaceSelector")
            if not _confined(selector, own):
                raise ScenarioError(path, f"{field}.namespaceSelector", "matchExpressions with "
                                    f"{{key: {NAMESPACE_NAME_LABEL}, operator: In, values: [...]}} naming only the "
                                    "drill's namespaces: " + ", ".join(sorted(own)), repr(selector))
            # Where the API server sends what it intercepts (objects, Secrets included): a Service
            # in the drill's namespaces, never a url (which may be outside the cluster).
            client = hook.get("clientConfig")
            service = client.get("service") if isinstance(client, dict) else None
            if not isinstance(client, dict) or "url" in client or not isinstance(service, dict) \
                    or service.get("namespace") not in own:
                raise ScenarioError(path, f"{field}.clientConfig", "a service in the drill's namespaces ("
                                    + ", ".join(sorted(own)) + "), no url: the API server sends the requests it "
                                    "intercepts there, and a drill sends nothing outside the cluster", repr(client)[:200])
            # Its Service made before it: the configuration counts as made once the API server
            # reaches the webhook (runner.serving_problem), which it never would otherwise.
            earlier = [(m["metadata"]["name"], m["metadata"].get("namespace") or "$(namespace)")
                       for m in manifests[:i] if m["kind"] == "Service"]
            if (service.get("name"), service["namespace"]) not in earlier:
                raise ScenarioError(path, f"{field}.clientConfig.service", "a Service an earlier manifest makes: "
                                    + (", ".join(f"{ns}/{n}" for n, ns in earlier) or "none"),
                                    f"{service['namespace']}/{service.get('name')}")


def _build(path: Path, data: dict) -> Scenario:
    fault = data["fault"]
    return Scenario(
        name=data["name"], title=data["title"], drill=data.get("drill", RUNNER_DRILL), claim=data["claim"].strip(),
        sources=tuple(Source(s["title"], s["url"], s.get("section")) for s in data["source"]),
        cluster_config=data["cluster"]["config"],
        needs_node_access=data["cluster"].get("needs_node_access", False),
        fault_kind=fault["kind"], fault_method=fault["method"],
        fault_params=copy.deepcopy(fault.get("params") or {}),
        workload=copy.deepcopy(data.get("workload") or {}),
        probe_interval_seconds=float(data.get("probes", {}).get("interval_seconds", MAX_PROBE_INTERVAL_SECONDS)),
        expectations=_expectation_specs(data["expectations"]),
        vital_signs={sign: (names,) if isinstance(names, str) else tuple(names)
                     for sign, names in (data.get("vital_signs") or {}).items()},
        severity=data.get("severity", "normal"),
        runner=copy.deepcopy(data.get("runner")),
        node_access_for=data["cluster"].get("node_access_for", ""),
        on_request=data.get("on_request", "").strip(),
        cases=tuple(Case(c["name"], copy.deepcopy(c.get("params") or {}), _expectation_specs(c.get("expectations") or []))
                    for c in data.get("cases", [])),
        path=path,
    )


def _expectation_specs(items: list[dict]) -> tuple[ExpectationSpec, ...]:
    return tuple(ExpectationSpec(e["name"], e["description"], Bound(e["bound"]["op"], e["bound"]["value"]),
                                 e["unit"], e.get("phase"), dict(e["tolerance"]) if "tolerance" in e else None,
                                 dict(e["measure"]) if "measure" in e else None)
                 for e in items)


def _numbers(value: Any, where: tuple[str | int, ...] = ()) -> Iterable[tuple[str, float | int]]:
    """(field path, value) of every number in a loaded scenario: NaN and infinity mean nothing as
    a duration or a bound (``<= .inf`` can never fail), nor does a 400-digit integer, so none is
    accepted anywhere."""
    if isinstance(value, (float, int)) and not isinstance(value, bool):
        yield _format_field(where), value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _numbers(item, where + (str(key),))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _numbers(item, where + (i,))
