"""Collection: one test case per case of each drill's scenario, the drills chosen (named scenarios,
or every one but those that run only when named, less what the presubmit tier leaves to the full
tier), and the planned drill cases, each of which gets a record at the end."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core import resources
from harness.evidence.records import record_stem
from harness.faults import FaultError, check_params
from harness.plugin.early_cluster import create_cluster_early
from harness.plugin.session import scenario_of, scenarios_dir, session_scenario
from harness.plugin.tiers import TIMES_FILE, load_times, presubmit_cases
from harness.spec.scenario import ScenarioError, load_scenarios


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "drill" not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("data_scenarios") is not None:
        _generate_data_scenarios(metafunc)
        return
    marker = metafunc.definition.get_closest_marker("scenario")
    if marker is None:
        raise pytest.UsageError(f"{metafunc.definition.nodeid} uses the drill fixture without @pytest.mark.scenario")
    name = marker.args[0]
    wanted = set(metafunc.config.getoption("--kdrill-scenario"))
    if wanted and name not in wanted:
        # Not asked for (it will be deselected): its scenario need not be in the directory,
        # e.g. a copy of one scenario with other bounds in a directory of its own.
        metafunc.parametrize("drill_case", [None], ids=["not-selected"], scope="function")
        return
    try:
        scenario = session_scenario(metafunc.config, name)
        check_params(scenario)  # before any cluster is made or touched
    except (ScenarioError, FaultError) as exc:
        raise pytest.UsageError(f"kdrill: {exc}") from None
    cases = [c.name for c in scenario.cases] or [None]
    metafunc.parametrize("drill_case", cases, ids=[c or "default" for c in cases], scope="function")


def _generate_data_scenarios(metafunc: pytest.Metafunc) -> None:
    """One test case per case of every data-only scenario (harness/engine/runner.py) in the scenarios
    directory, each marked with its scenario like a drill file's test."""
    wanted = set(metafunc.config.getoption("--kdrill-scenario"))
    params = []
    try:
        for scenario in load_scenarios(scenarios_dir(metafunc.config)):
            if scenario.runner is None or (wanted and scenario.name not in wanted):
                continue
            check_params(scenario)
            metafunc.config.__dict__.setdefault("_kdrill_scenarios", {})[scenario.name] = scenario
            params += [pytest.param(case, marks=pytest.mark.scenario(scenario.name),
                                    id=scenario.name + (f"-{case}" if case else ""))
                       for case in [c.name for c in scenario.cases] or [None]]
    except (ScenarioError, FaultError, FileNotFoundError) as exc:
        raise pytest.UsageError(f"kdrill: {exc}") from None
    metafunc.parametrize("drill_case", params or [pytest.param(None, marks=pytest.mark.skip(
        reason="no data-only scenario in the scenarios directory"), id="none")], scope="function")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = set(config.getoption("--kdrill-scenario"))
    keep, drop = [], []
    for item in items:
        name = scenario_of(item)
        if wanted:
            (keep if name in wanted else drop).append(item)
        else:
            # A scenario that runs only when named (on_request) is not one of "every drill".
            (drop if name and _on_request(config, name) else keep).append(item)
    tiered = _tier_deselects(config, keep) if not wanted else []
    if tiered:
        leave = set(tiered)
        keep[:] = [item for item in keep if item not in leave]
        drop += tiered
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"kdrill: presubmit tier: {len(tiered)} test(s) of the full tier deselected "
                                "(--kdrill-tier full runs them; harness/plugin/tiers.py)")
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    # The tests that need no cluster run first (stable order otherwise): a kind cluster this
    # session creates is made meanwhile (create_cluster_early).
    items.sort(key=lambda item: "kdrill_cluster" in getattr(item, "fixturenames", ()))


def _tier_deselects(config: pytest.Config, items: list[pytest.Item]) -> list[pytest.Item]:
    """The items the presubmit tier leaves to the full tier: kdrill's own tests marked ``full``
    and the built-in catalogue's cases outside the representative set. Empty when the tier is
    full, or when tests were picked by hand (a file or node id on the command line, -k, -m)."""
    if config.getoption("--kdrill-tier") != "presubmit":
        return []
    picked = any(str(a).endswith(".py") or "::" in str(a) for a in config.args)
    if picked or config.getoption("keyword") or config.getoption("markexpr"):
        return []
    ours = [item for item in items if _in_kdrill(item)]
    out = [item for item in ours if item.get_closest_marker("full") is not None]
    if any(scenario_of(item) for item in ours):
        presubmit = _presubmit_cases(config)
        if presubmit is not None:
            out += [item for item in ours if item not in out and scenario_of(item)
                    and (scenario_of(item), item.callspec.params.get("drill_case")) not in presubmit]
    return out


def _in_kdrill(item: pytest.Item) -> bool:
    """Whether the item is one of kdrill's own tests or built-in drills (not a team's)."""
    roots = [resources.data_root()] + ([resources.checkout()] if resources.checkout() else [])
    return any(Path(item.path).resolve().is_relative_to(root.resolve()) for root in roots)


def _presubmit_cases(config: pytest.Config) -> set[tuple[str, str | None]] | None:
    """The representative drill set of the built-in catalogue (harness/plugin/tiers.py), or None when
    the drills read another scenarios directory (a team's: the tier does not choose among them)."""
    if scenarios_dir(config).resolve() != resources.scenarios_dir().resolve():
        return None
    try:
        times = load_times(resources.clusters_dir() / TIMES_FILE)
        return set(presubmit_cases(load_scenarios(resources.scenarios_dir()), times))
    except (ScenarioError, ValueError) as exc:
        raise pytest.UsageError(f"kdrill: the presubmit tier cannot be chosen: {exc}") from None


def _on_request(config: pytest.Config, name: str) -> bool:
    try:
        return bool(session_scenario(config, name).on_request)
    except Exception:  # an unreadable scenario is refused where its cases are made
        return False


def pytest_collection_finish(session: pytest.Session) -> None:
    session.config._kdrill_session = session
    # Every drill case still selected (after -k, -m and --kdrill-scenario) gets a record at the
    # end, whether it ran or not.
    session.config._kdrill_planned = [(item, scenario_of(item), item.callspec.params.get("drill_case"))
                                      for item in session.items if scenario_of(item) and hasattr(item, "callspec")]
    # The names go into run.json, so the report can tell a drill that left no record at all.
    session.config._kdrill_planned_names = [record_stem(name, case) for _, name, case in session.config._kdrill_planned]
    create_cluster_early(session)
