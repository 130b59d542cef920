"""The presubmit tier exercises every fault, probe and measure kind installed, every node channel
and the SIGKILL-and-recover path of every fault kind the SIGKILL table holds (harness/plugin/tiers.py):
a kind added with no presubmit drill or test to exercise it fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.core import resources
from harness.plugin import tiers
from harness.spec.plugins import probe_types, registered_fault
from harness.spec.scenario import load_scenarios

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def scenarios():
    return load_scenarios(resources.scenarios_dir())


@pytest.fixture(scope="module")
def times():
    return tiers.load_times(resources.clusters_dir() / tiers.TIMES_FILE)


def presubmit_exercises(scenarios, times) -> set[str]:
    by_name = {s.name: s for s in scenarios}
    chosen = tiers.presubmit_cases(scenarios, times)
    return set(tiers.credited(scenarios)).union(*(tiers.exercised(by_name[n], c) for n, c in chosen))


def test_every_installed_kind_is_exercised_in_presubmit_or_said_why_no_drill_uses_it(scenarios, times):
    exercised = presubmit_exercises(scenarios, times)
    missing = tiers.installed_kinds() - exercised - set(tiers.NOT_IN_THE_CATALOGUE)
    assert not missing, f"no presubmit drill or cluster test exercises {sorted(missing)}: add a drill that does"


def test_what_is_said_to_be_outside_the_catalogue_really_is(scenarios):
    used = set(tiers.credited(scenarios)).union(
        *(tiers.exercised(s, c) for s in tiers.catalogue(scenarios) for c in tiers.cases_of(s)))
    assert not used & set(tiers.NOT_IN_THE_CATALOGUE), sorted(used & set(tiers.NOT_IN_THE_CATALOGUE))
    assert set(tiers.NOT_IN_THE_CATALOGUE) <= tiers.installed_kinds()


def test_every_node_channel_is_exercised(scenarios, times):
    assert {"channel:kind", "channel:node-agent"} <= presubmit_exercises(scenarios, times)


def test_the_catalogues_every_kind_is_in_presubmit_too(scenarios, times):
    """Nothing the full catalogue exercises is left to the full tier alone."""
    catalogue = set().union(*(tiers.exercised(s, c) for s in tiers.catalogue(scenarios) for c in tiers.cases_of(s)))
    assert catalogue <= presubmit_exercises(scenarios, times)


def test_a_new_kind_only_a_full_tier_drill_uses_is_caught(scenarios, times):
    """The rule, not a list: a scenario with a new probe kind is picked, and without it the kind is missing."""
    from dataclasses import replace

    target = next(s for s in scenarios if s.name == "pod-delete")
    probes = [*target.runner["probes"], {"name": "new", "kind": "brand-new-probe"}]
    changed = replace(target, runner={**target.runner, "probes": probes})
    others = [s for s in scenarios if s.name != "pod-delete"]
    chosen = tiers.presubmit_cases([*others, changed], times)
    assert ("pod-delete", None) in chosen
    without = set(tiers.credited(others)).union(
        *(tiers.exercised({s.name: s for s in others}[n], c) for n, c in tiers.presubmit_cases(others, times)))
    assert "probe:brand-new-probe" not in without


def test_the_choice_is_the_rule_cheapest_kinds_per_second_first(scenarios):
    """Given times, a case that adds the same kinds for less time is preferred."""
    webhook = next(s for s in scenarios if s.name == "webhook-outage-blackhole")
    costs = {tiers.case_id(s.name, c): 1000.0 for s in scenarios for c in tiers.cases_of(s)}
    first = tiers.presubmit_cases(scenarios, {**costs, "webhook-outage-blackhole": 1.0})[0]
    assert first == (webhook.name, None)


def test_the_cluster_tests_credited_run_what_they_are_credited_with_and_are_presubmit():
    """Each credited case's record is read by a test function of that file that is not marked full."""
    for path, cases in {**tiers.RUN_BY_CLUSTER_TESTS, **{p: () for p in tiers.EXERCISED_BY_CLUSTER_TESTS}}.items():
        source = (REPO_ROOT / path).read_text()
        module = ast.parse(source)
        assert not any("full" in ast.unparse(n) for n in module.body
                       if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "pytestmark"), path
        presubmit = [ast.get_source_segment(source, f) for f in module.body
                     if isinstance(f, ast.FunctionDef) and f.name.startswith("test_")
                     and not any("full" in ast.unparse(d) for d in f.decorator_list)]
        assert presubmit, f"{path} has no presubmit test"
        for kind in tiers.EXERCISED_BY_CLUSTER_TESTS.get(path, ()):
            assert any(named_in(kind, text) for text in presubmit), (path, kind)
        for name, case in cases:
            # The test reads that case's record: the run really ran it to its end.
            record = f"{name}--{case}.json" if case else f"{name}.json"
            assert any(record in text or (f"{name}--{{case}}.json" in text and f'"{case}"' in text)
                       for text in presubmit), (path, record)
    assert set(tiers.CHANNEL_OF_CLUSTER_TESTS) == set(tiers.RUN_BY_CLUSTER_TESTS)


def named_in(kind: str, source: str) -> bool:
    """Whether a test's ``source`` uses ``kind``: its registered class called, or (a probe, a
    measure) its name quoted, as a scenario's spec or a measure call gives it."""
    family, name = kind.split(":", 1)
    registered = {"fault": registered_fault, "probe": lambda n: probe_types()[n]}.get(family)
    called = registered is not None and f"{registered(name).__name__}(" in source
    return called or (family != "fault" and f'"{name}"' in source)


def test_presubmit_kills_one_case_per_fault_kind_of_the_sigkill_table(scenarios, times):
    table = tiers.SIGKILLED
    chosen = tiers.sigkill_presubmit(table, scenarios, times)
    kinds = {kind for _, _, kind, _ in table}
    assert len(chosen) == len(kinds)
    assert {kind for scenario, case, kind, _ in table if (scenario, case) in chosen} == kinds
    assert tiers.sigkill_credit() == {f"fault:{kind}" for kind in kinds}
    names = {s.name for s in scenarios}
    assert {scenario for scenario, *_ in table} <= names


def test_the_times_file_refuses_what_is_not_seconds(tmp_path):
    path = tmp_path / "times.yaml"
    for text in ("seconds: {pod-delete: -1}\n", "seconds: [1]\n", "- 1\n", "seconds: {pod-delete: true}\n"):
        path.write_text(text)
        with pytest.raises(ValueError, match="expected `seconds"):
            tiers.load_times(path)
    path.write_text("seconds: {pod-delete: 80.5}\n")
    assert tiers.load_times(path) == {"pod-delete": 80.5}
    assert tiers.load_times(tmp_path / "absent.yaml") == {}


def test_the_affected_drills_follow_the_imports(scenarios):
    from harness.cli.affected import affected

    assert affected(scenarios, [Path("harness/faults/node_freeze.py")], REPO_ROOT) == ["worker-node-loss"]
    assert affected(scenarios, [Path("harness/probes/metric.py")], REPO_ROOT) == ["apiservice-unavailable"]
    assert affected(scenarios, [Path("scenarios/pod-delete.yaml")], REPO_ROOT) == ["pod-delete"]
    assert affected(scenarios, [Path("README.md")], REPO_ROOT) == []
    # The runner's test runs every data-only scenario; a drill file's change reaches only its own.
    runs = affected(scenarios, [Path("harness/engine/runner.py")], REPO_ROOT)
    assert {s.name for s in scenarios if s.runner} <= set(runs)
    assert affected(scenarios, [Path("drills/test_dns_ndots.py")], REPO_ROOT) == ["dns-ndots"]
