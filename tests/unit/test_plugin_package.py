"""A team's plug-in package keeps working: installed beside kdrill, its fault kind, probe kind and
measure (tests/unit/data/plugin-package, written against harness.faults, harness.core.timeline and
the entry point groups only) are found by a scenario that names them. About 10 s: a venv that takes
kdrill and its dependencies from this interpreter, and the package installed into it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PACKAGE = Path(__file__).resolve().parent / "data" / "plugin-package"


def _run(cmd: list, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """(python of a venv with kdrill-queue installed, environment, a scenarios directory)."""
    tmp = tmp_path_factory.mktemp("plugin")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("KDRILL_")}
    env["KDRILL_STATE_DIR"] = str(tmp / "state")
    made = _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", tmp / "venv"], tmp, env)
    assert made.returncode == 0, made.stderr
    python = tmp / "venv" / "bin" / "python"
    source = tmp / "kdrill-queue"
    shutil.copytree(PACKAGE, source)
    # Built as pip builds any package (setuptools from the build requirements, through pip's index).
    installed = _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", source], tmp, env)
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    scenarios = tmp / "scenarios"
    scenarios.mkdir()
    data = yaml.safe_load((REPO / "scenarios" / "pod-delete.yaml").read_text())
    data.update(name="queue-freeze", title="A queue's consumers freeze: its depth grows")
    data["fault"] = {"kind": "queue-freeze", "method": "records the queue", "params": {"queue": "orders"}}
    data["runner"]["probes"].append({"name": "depth", "kind": "queue-depth", "queue": "orders"})
    data["expectations"].append({"name": "fault_queue_depth", "description": "The queue fills while frozen",
                                 "bound": {"op": ">=", "value": 1}, "unit": "count",
                                 "measure": {"kind": "max_queue_depth", "probe": "depth", "window": "fault"}})
    (scenarios / "queue-freeze.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return python, env, scenarios


def test_a_plug_in_packages_fault_probe_and_measure_are_found_by_a_scenario(venv):
    python, env, scenarios = venv
    validated = _run([python, "-m", "harness.cli", "validate", scenarios / "queue-freeze.yaml"], scenarios, env)
    assert validated.returncode == 0 and validated.stdout.startswith("ok: "), validated.stdout + validated.stderr
    listed = _run([python, "-m", "harness.cli", "list", "--scenarios-dir", scenarios], scenarios, env)
    assert listed.returncode == 0 and "fault queue-freeze" in listed.stdout, listed.stdout + listed.stderr
    loaded = _run([python, "-c", "from harness.faults import fault_class; from harness.engine.measures import "
                   "measure; from harness.core.timeline import Sample; print(fault_class('queue-freeze').__module__, "
                   "measure('max_queue_depth', [Sample(t=1.0, ok=True, detail='7')], 0.0, 2.0))"], scenarios, env)
    assert loaded.stdout.split() == ["kdrill_queue", "7.0"], loaded.stdout + loaded.stderr


def test_without_the_package_the_same_scenario_is_refused_naming_the_kind(venv):
    """kdrill's own interpreter has no kdrill-queue: the first plug-in kind the scenario names is unknown."""
    _, env, scenarios = venv
    refused = _run([sys.executable, "-m", "harness.cli", "validate", scenarios / "queue-freeze.yaml"], scenarios, env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "an installed probe kind (kdrill.probes)" in refused.stdout and "got 'queue-depth'" in refused.stdout
