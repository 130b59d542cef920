"""Fixtures shared by the unit tests."""

from __future__ import annotations

import importlib.metadata
import time
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def declared_entry_points() -> dict[str, dict[str, str]]:
    """The entry points this tree's pyproject.toml declares: group -> {name: "module:attr"}."""
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["entry-points"]


@pytest.fixture
def tree_entry_points(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, str]]:
    """Fault kinds and measures resolved from this tree's pyproject.toml rather than from the
    installed package's metadata, through the same importlib.metadata loading.

    ``pip install -e .`` writes the entry points into the installed metadata once; until it is run
    again, a fault added to pyproject.toml is unknown to ``fault_class`` (and in a second git
    worktree the metadata is the other checkout's). Tests of what this tree ships use this;
    ``test_the_installed_entry_points_are_this_trees`` says when the installation is stale."""
    declared = {group: entries for group, entries in declared_entry_points().items() if group.startswith("kdrill.")}
    installed = importlib.metadata.entry_points

    def entry_points(**params):
        group = params.get("group")
        if group in declared and set(params) == {"group"}:
            return [importlib.metadata.EntryPoint(name, value, group) for name, value in declared[group].items()]
        return installed(**params)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    return declared


@pytest.fixture(autouse=True)
def private_state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every unit test sees its own ``$KDRILL_STATE_DIR`` (a test may set another): ``kdrill run``
    loads the signing key before it refuses bad input, so a test of a refusal would otherwise
    create the user's real key under ``~/.local/state/kdrill``, and a ledger test write to the real ledger."""
    state = tmp_path_factory.mktemp("kdrill-state")
    monkeypatch.setenv("KDRILL_STATE_DIR", str(state))
    return state


@pytest.fixture
def wall_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """A fake ``time.time`` (epoch seconds), read and moved through the list's one item: for
    simulated nodes whose commands and timers advance it."""
    now = [1_800_000_000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    return now
