"""The JSON Schema (Draft 2020-12) of a scenario file, ``SCHEMA``, and the values it names.

``"x-expected"`` is kdrill's own annotation: the human text used when a value is rejected
(Draft 2020-12 ignores unknown keywords, so the schema stays valid).
"""

from __future__ import annotations

import re
from typing import Any, Iterator

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

OPS: tuple[str, ...] = ("<=", "<", ">=", ">", "==")
# The platform's vital signs every drill records (harness/engine/vitals.py, which imports this list).
VITAL_SIGNS: tuple[str, ...] = ("api_read", "api_write", "service_name", "service_clusterip", "nodes_ready",
                                "kube_system_restarts")
# A vital sign whose success ratio in a window is below this is degraded (the vital signs judge it,
# the report draws it).
HEALTHY_RATIO = 0.99
MAX_PROBE_INTERVAL_SECONDS = 0.5
# A probe keeps at most 20,000 samples (harness/probes/__init__.py): at 0.1 s that is 2,000 s of a
# drill; a finer interval would stop sampling midway through a long drill (and hammer the API).
MIN_PROBE_INTERVAL_SECONDS = 0.1

# Names become file names (<scenario>--<case>.json) and namespaces: no "--", which joins the two.
MAX_NAME_LENGTH = 50
# Data-only scenarios (harness/engine/runner.py): the runner's windows and the measures it computes.
RUNNER_DRILL = "drills/test_data_scenarios.py"
RUNNER_WINDOWS = ("baseline", "fault", "after")
# The phases the runner opens, in order: setup, then one per window. An expectation's ``phase`` names one.
RUNNER_PHASES: tuple[str, ...] = ("setup", *RUNNER_WINDOWS)
ACTION_VERBS = ("delete", "evict", "scale", "kill_container")  # what a runner action does (harness.engine.actions.Actions)
# The units a drill file measures in: an expectation of a drill-file scenario in another unit
# (e.g. "milliseconds" for a drill's seconds) is a mistake, not a conversion. Counts of named
# things keep their noun. Data-only scenarios: a built-in measure's unit is MEASURE_UNITS's, a
# metric measure's is the metric's own (any word).
UNITS: tuple[str, ...] = ("seconds", "ratio", "count", "factor", "bool", "flag", "bytes", "per_second",
                          "apiservices", "names", "queries", "requests")
IMAGE_NAME = "^[a-z][a-z0-9]{0,30}$"
# An alert's name: a Prometheus metric name (the ALERTS series carries it as a label value).
ALERT_NAME = "^[a-zA-Z_][a-zA-Z0-9_]{0,99}$"
IMAGE_BASES = ("pause", "toolbox")  # what a declared registry's image is built on (registry_images)
MAX_NUMBER = 1e12  # any duration, count or bound in a scenario is far below this
SEVERITIES = ("blocker", "critical", "normal", "minor", "trivial")
_NAME = {"type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$", "maxLength": MAX_NAME_LENGTH,
         "x-expected": f"lowercase letters and digits in words joined by single '-', at most {MAX_NAME_LENGTH} characters"}
_TEXT = {"type": "string", "minLength": 1, "pattern": "\\S", "x-expected": "a string with text, not only spaces"}
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
        # against UNITS once the scenario is read (harness.spec.rules).
        "unit": {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,39}$",
                 "x-expected": "a unit: lowercase letters, digits and '_' (e.g. seconds, ratio, count)"},
        "phase": _TEXT,
        # Data-only scenarios: what the runner measures for it (harness/engine/measures.py).
        "measure": {
            # {kind, probe, window} (checked in harness.spec.measure_rules), or {fact}: a value the fault measured.
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
                   "namespace": {"type": "string", "minLength": 1, "maxLength": 63},
                   "apiVersion": {"type": "string", "pattern": "^[a-z0-9.-]+/[a-z0-9]+$"}},
    "x-expected": "an object: {kind, name, namespace (for a namespaced kind; default: the drill's), apiVersion (a "
                  "custom resource's: the version it is read at; default: its storage version)}",
}
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}, "x-expected": "a mapping of strings"}
_MANIFEST = {
    "type": "object", "required": ["apiVersion", "kind", "metadata"],
    "properties": {"apiVersion": {"type": "string", "minLength": 1}, "kind": {"type": "string", "pattern": "^[A-Za-z]+$"},
                   # Only what a scenario says about the object: kdrill adds its owner label to
                   # labels; finalizers only on its own custom resources, under their group (the
                   # revert removes any its controller left: harness/scaffolding/drill_objects.py);
                   # ownerReferences (its deletion left to the garbage collector) and the fields
                   # the API sets itself are not the scenario's to declare.
                   "metadata": {"type": "object", "required": ["name"], "additionalProperties": False,
                                "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 253},
                                               "namespace": {"type": "string", "minLength": 1, "maxLength": 63},
                                               "labels": _STRINGS, "annotations": _STRINGS,
                                               "finalizers": {"type": "array", "minItems": 1, "maxItems": 10,
                                                              "items": {"type": "string", "minLength": 1}}}}},
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
                # What the fault acts on outside what the drill makes, and why: a target_namespace
                # the drill does not make is refused without it (harness/faults: check_targets).
                "outside_drill": {**_TEXT, "pattern": "\\S",
                                  "x-expected": "a sentence: what the fault acts on outside the drill, and why"},
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
                            # are checked in harness.spec.probe_rules.
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
                        # and one verb of ACTION_VERBS (checked in harness.spec.action_rules)
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
        # What the platform's monitoring should notice: each alert firing within seconds of the
        # fault taking effect and resolving within seconds of the revert (harness/engine/detection.py)
        "detection": {
            "type": "array", "minItems": 1,
            "x-expected": "a list of at least one alert (or leave detection out)",
            "items": {
                "type": "object", "additionalProperties": False,
                "required": ["alert", "fires_within_seconds", "resolves_within_seconds"],
                "properties": {
                    "alert": {"type": "string", "pattern": ALERT_NAME,
                              "x-expected": "an alert's name as Prometheus's rules name it ([a-zA-Z_][a-zA-Z0-9_]*)"},
                    # At least a second: Prometheus samples every second at best.
                    "fires_within_seconds": {"type": "number", "minimum": 1, "maximum": 3600,
                                             "x-expected": "seconds from the fault taking effect, from 1 to 3600"},
                    "resolves_within_seconds": {"type": "number", "minimum": 1, "maximum": 3600,
                                                "x-expected": "seconds from the revert, from 1 to 3600"},
                    "cases": {"type": "array", "minItems": 1, "uniqueItems": True, "items": _NAME,
                              "x-expected": "the names of the cases this alert is expected in"},
                },
            },
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

def _pattern(validator, pattern: str, instance: Any, schema: dict) -> Iterator[ValidationError]:
    """The ``pattern`` keyword as editors (ECMA-262) read it: Python's ``$`` also matches before a
    final newline, so ``name: "pod-delete\\n"`` would pass here and fail in an editor (and on the
    cluster, as a namespace name)."""
    if not validator.is_type(instance, "string"):
        return
    if re.search(pattern, instance) is None or (pattern.endswith("$") and instance.endswith("\n")):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


# kdrill's validator: draft 2020-12 with ``pattern`` as editors read it (every schema of the
# scenario format, a probe kind's fields included, is checked through it).
Validator = validators.extend(Draft202012Validator, {"pattern": _pattern})
VALIDATOR = Validator(SCHEMA)
