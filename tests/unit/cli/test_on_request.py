"""Scenarios that run only when named (``on_request``): left out of "every drill" by `kdrill run`
and by pytest without --kdrill-scenario, which say so, and planned when named. No cluster: the
plan and pytest's collection touch nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from scenario_copies import load_edited

from harness.spec.scenario import ScenarioError

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("value", ["", "   ", 3, ["why"]])
def test_on_request_must_say_why(tmp_path, value):
    with pytest.raises(ScenarioError) as caught:
        load_edited(tmp_path, "pod-delete", lambda d: d.update(on_request=value))
    assert "on_request" in str(caught.value)


def test_on_request_is_kept_as_said(tmp_path):
    scenario = load_edited(tmp_path, "pod-delete", lambda d: d.update(on_request="  only on a team's platform "))
    assert scenario.on_request == "only on a team's platform" and scenario.to_dict()["on_request"] == scenario.on_request
    assert load_edited(tmp_path, "pod-delete", lambda d: None).on_request == ""


def _kdrill(*args, tmp_path):
    return subprocess.run([sys.executable, "-m", "harness.cli", "--reports", str(tmp_path / "reports"), *args],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)


def test_every_drill_leaves_out_an_on_request_one_and_says_why(tmp_path):
    every = _kdrill("run", "--plan", tmp_path=tmp_path)
    assert every.returncode == 0, every.stderr
    assert "not planned: webhook-blast-radius runs only when named" in every.stdout
    assert "webhook-blast-radius[refused]" not in every.stdout and "pod-delete" in every.stdout
    named = _kdrill("run", "--plan", "webhook-blast-radius", tmp_path=tmp_path)
    assert named.returncode == 0 and "webhook-blast-radius[refused]" in named.stdout
    assert "not planned" not in named.stdout


@pytest.mark.parametrize("named, collected", [(False, "no tests collected (2 deselected)"), (True, "2 tests collected")])
def test_pytest_deselects_an_on_request_drill_unless_named(named, collected, tmp_path):
    args = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
            f"--kdrill-reports={tmp_path / 'reports'}",
            "drills/test_webhook_blast_radius.py"] + (["--kdrill-scenario", "webhook-blast-radius"] if named else [])
    result = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert collected in result.stdout, result.stdout[-1000:]
    # A listing is not a run: no run directory with "not-run" records of drills nobody ran.
    assert not (tmp_path / "reports").exists() or not any((tmp_path / "reports").iterdir()), \
        sorted(str(p) for p in (tmp_path / "reports").rglob("*"))
