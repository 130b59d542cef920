"""Scenario files: the documented claim a drill checks, and how it checks it.

A scenario is one YAML file in ``scenarios/`` (see ``SCHEMA`` for the shape).
Loading validates it against a JSON Schema (Draft 2020-12) plus a few rules a
schema cannot state (unique names), and turns any problem into a one-line
``ScenarioError`` naming the file, the field and what was expected.

Loading only ever reads the file.

This module is where the rest of kdrill imports scenarios from; the parts live beside it:
``schema`` (SCHEMA and the values it names), ``model`` (Scenario and its parts, ScenarioError),
``yaml_reading`` (the YAML loaders), ``loading`` (load_scenario, load_scenarios, find_scenario),
``schema_problems`` (schema problems in plain words), and the rules a schema cannot state:
``rules`` (names, numbers, units, bounds), ``runner_rules``, ``measure_rules``, ``object_rules``
(with ``object_checks``), ``admission_rules``, ``probe_rules`` and ``action_rules``.
"""

from __future__ import annotations

from harness.spec.admission_rules import (
                                          MUTATING_REINVOCATION,
                                          NAMESPACE_NAME_LABEL,
                                          WEBHOOK_POLICIES,
                                          WEBHOOK_REVIEW_VERSIONS,
                                          WEBHOOK_SIDE_EFFECTS,
                                          WEBHOOK_TIMEOUT_SECONDS,
)
from harness.spec.loading import check_data_fault, find_scenario, load_scenario, load_scenarios
from harness.spec.measure_rules import MEASURE_UNITS, POD_IPS_MEASURES, WINDOW_SECONDS
from harness.spec.model import (
                                          OWN_NAMESPACE_PREFIX,
                                          Bound,
                                          Case,
                                          ExpectationSpec,
                                          Scenario,
                                          ScenarioError,
                                          Source,
                                          drill_namespace,
                                          registry_images,
)
from harness.spec.rules import BOOL_UNITS
from harness.spec.runner_rules import PROBE_POD_MAX_REQUESTS, PROBE_STEADY_SECONDS, VITAL_SIGN_TIMELINES, WORKLOAD_KEYS
from harness.spec.schema import (
                                          ACTION_VERBS,
                                          IMAGE_BASES,
                                          IMAGE_NAME,
                                          MAX_NAME_LENGTH,
                                          MAX_NUMBER,
                                          MAX_PROBE_INTERVAL_SECONDS,
                                          MIN_PROBE_INTERVAL_SECONDS,
                                          OBJECT_REF_SCHEMA,
                                          OPS,
                                          RUNNER_DRILL,
                                          RUNNER_WINDOWS,
                                          SCHEMA,
                                          SEVERITIES,
                                          UNITS,
                                          VITAL_SIGNS,
)
from harness.spec.yaml_reading import DatelessLoader, StrictLoader, UniqueKeyLoader

_StrictLoader = StrictLoader  # the name tests read scenario YAML with

__all__ = [
    "ACTION_VERBS", "BOOL_UNITS", "Bound", "Case", "DatelessLoader", "ExpectationSpec", "IMAGE_BASES", "IMAGE_NAME",
    "MAX_NAME_LENGTH", "MAX_NUMBER", "MAX_PROBE_INTERVAL_SECONDS", "MEASURE_UNITS", "MIN_PROBE_INTERVAL_SECONDS",
    "MUTATING_REINVOCATION", "NAMESPACE_NAME_LABEL", "OBJECT_REF_SCHEMA", "OPS", "OWN_NAMESPACE_PREFIX",
    "POD_IPS_MEASURES", "PROBE_POD_MAX_REQUESTS", "PROBE_STEADY_SECONDS", "RUNNER_DRILL", "RUNNER_WINDOWS", "SCHEMA",
    "SEVERITIES", "Scenario", "ScenarioError", "Source", "StrictLoader", "UNITS", "UniqueKeyLoader",
    "VITAL_SIGNS", "VITAL_SIGN_TIMELINES", "WEBHOOK_POLICIES", "WEBHOOK_REVIEW_VERSIONS", "WEBHOOK_SIDE_EFFECTS",
    "WEBHOOK_TIMEOUT_SECONDS", "WINDOW_SECONDS", "WORKLOAD_KEYS", "check_data_fault", "drill_namespace",
    "find_scenario", "load_scenario", "load_scenarios", "registry_images",
]
