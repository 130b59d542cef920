"""kdrill's pytest plugin: the cluster, the run's evidence directory and the ``drill`` fixture.

Options (``pytest --help``, group "kdrill"):
  --kdrill-cluster-config NAME   kind config clusters/NAME.yaml (default: ha)
  --kdrill-cluster-name NAME     kind cluster name (default: the config's name); reused if it exists
  --kdrill-keep-cluster          keep a cluster this session created (default: delete it at the end)
  --kdrill-kubeconfig PATH       use an existing cluster instead of kind (no node access)
  --kdrill-context NAME          context in that kubeconfig (default: current); with -n N, one per
                                 worker (repeatable)
  --kdrill-node-agent            on that cluster, reach the nodes through privileged agent pods
                                 (harness/kube/providers/node_agent.py); needs --kdrill-allow-context
  --kdrill-allow-context NAME    let destructive drills run on this non-kind context (repeatable)
  --kdrill-scenario NAME         run only the drills of these scenarios (repeatable)
  --kdrill-reports DIR           evidence root (default: $KDRILL_REPORTS, else reports/ as
                                 harness.core.resources.default_reports_dir says); the run writes DIR/<run-id>/
  --kdrill-run-id ID             run id (default: a new one)
  --kdrill-scenarios-dir DIR     where drills find their scenario files (default: the built-in
                                 scenarios, harness.core.resources.scenarios_dir())
  --kdrill-tier TIER             presubmit (default, $KDRILL_TIER): the representative drill set
                                 and the tests not marked ``full``; full: everything (harness/plugin/tiers.py)

A drill test is marked ``@pytest.mark.scenario("<name>")`` and takes the ``drill`` fixture; one
test case runs per entry in the scenario's ``cases`` (or one when it has none).

With pytest-xdist (``-n N``) each worker drives a cluster of its own and the run is still one run
with one seal: :mod:`harness.core.workers` says how the clusters are kept apart and the evidence merged.

pytest registers the hooks and fixtures below, each imported from the module of its concern:
options.py (options, configuration), collection.py (cases, selection, tiers), cluster.py and
cluster_facts.py (the cluster, what is read of it once), drill_fixture.py (``drill``), records.py
(the run's directory, the records of cases that did not run), workers.py (pytest-xdist),
finish.py (the session's end and the seal).
"""

from __future__ import annotations

from harness.plugin.cluster import kdrill_cluster
from harness.plugin.cluster_facts import kdrill_identity, kdrill_monitoring, kdrill_topology, kdrill_vitals
from harness.plugin.collection import pytest_collection_finish, pytest_collection_modifyitems, pytest_generate_tests
from harness.plugin.drill_fixture import drill
from harness.plugin.finish import pytest_sessionfinish, pytest_unconfigure
from harness.plugin.options import pytest_addoption, pytest_configure, pytest_report_teststatus
from harness.plugin.records import kdrill_run, pytest_runtest_makereport

# What pytest registers from this module (the pytest11 entry point harness.plugin).
__all__ = ["drill", "kdrill_cluster", "kdrill_identity", "kdrill_monitoring", "kdrill_run", "kdrill_topology",
           "kdrill_vitals",
           "pytest_addoption", "pytest_collection_finish", "pytest_collection_modifyitems", "pytest_configure",
           "pytest_generate_tests", "pytest_report_teststatus", "pytest_runtest_makereport", "pytest_sessionfinish",
           "pytest_unconfigure"]
