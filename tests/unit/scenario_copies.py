"""Edited copies of a shipped scenario, for the tests of what loading a scenario refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from harness.core import resources
from harness.spec.scenario import Scenario, ScenarioError, load_scenario


def load_edited(tmp_path: Path, name: str, edit: Callable[[dict[str, Any]], Any]) -> Scenario:
    """Load ``scenarios/<name>.yaml`` after ``edit`` changed its data in place (written as a copy
    in ``tmp_path``). Raises what :func:`load_scenario` raises."""
    data = yaml.safe_load((resources.scenarios_dir() / f"{name}.yaml").read_text())
    edit(data)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_scenario(path)


def refused_edit(tmp_path: Path, name: str, edit: Callable[[dict[str, Any]], Any]) -> ScenarioError:
    """The ScenarioError loading ``scenarios/<name>.yaml`` after ``edit`` raises; fails the test
    when it loads."""
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, name, edit)
    return info.value

