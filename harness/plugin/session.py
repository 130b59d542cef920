"""What every part of the plugin reads from the pytest session: the reports and scenarios
directories, each test's scenario, and how the session ends early."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core import resources
from harness.core.workers import worker_id
from harness.spec.scenario import Scenario, find_scenario


def reports_dir(config: pytest.Config) -> Path:
    """--kdrill-reports, else resources.default_reports_dir()."""
    given = config.getoption("--kdrill-reports")
    return Path(given) if given else resources.default_reports_dir()


def scenarios_dir(config: pytest.Config) -> Path:
    """--kdrill-scenarios-dir, else the built-in scenarios."""
    given = config.getoption("--kdrill-scenarios-dir")
    return Path(given) if given else resources.scenarios_dir()


def scenario_of(item_or_func) -> str | None:
    """The scenario name a test is marked with (``@pytest.mark.scenario``), or None."""
    marker = item_or_func.get_closest_marker("scenario") if hasattr(item_or_func, "get_closest_marker") else None
    return marker.args[0] if marker else None


def session_scenario(config: pytest.Config, name: str) -> Scenario:
    """The scenario ``name`` as it was when this session first read it: files edited while a run
    goes on do not change its drills midway. Raises ScenarioError."""
    cache = config.__dict__.setdefault("_kdrill_scenarios", {})
    if name not in cache:
        cache[name] = find_scenario(name, scenarios_dir(config))
    return cache[name]


def end_session(config: pytest.Config, message: str, returncode: int | None = None) -> None:
    """``pytest.exit(message)``; in a pytest-xdist worker, a failure of the session fixture
    instead: xdist takes a worker's exit for a crash (an INTERNALERROR), while a failed session
    fixture fails the case with the message, the worker's end records it, and ``shouldstop``
    ends the whole run (the worker would otherwise fail every other worker's waiting cases)."""
    if worker_id(config) is not None:
        session = getattr(config, "_kdrill_session", None)
        if session is not None:
            session.shouldstop = message
        pytest.fail(message, pytrace=False)
    pytest.exit(message, returncode=returncode)
