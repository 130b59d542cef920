"""The wheel works outside the checkout: it carries the built-in scenarios, drills and cluster
configs (harness/_data/, harness/core/resources.py), and an installed kdrill finds them from any
directory.

One module-scoped build: the checkout is copied to a temporary directory (so the build leaves
nothing in it and stale build/ output cannot leak into the wheel), built with
``pip wheel`` exactly as ``pip install`` builds it (setuptools from the build requirements, fetched
through pip's index like CI's ``pip install -e .``), and installed with ``--no-deps`` into a fresh
venv that takes kdrill's dependencies from this interpreter's site-packages. The installed
``kdrill`` then runs from a directory outside any checkout, with no PYTHONPATH. About 10 s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from harness.spec.scenario import load_scenarios

REPO = Path(__file__).resolve().parents[2]
# Not copied for the build: version control, build output, caches, local environments, evidence
# (at the top of the checkout), and byte code and egg-info anywhere.
# What clusters/platforms/gatekeeper.py writes into its profile (83 MB of image).
BUILT_HERE = {"clusters/platforms/gatekeeper/images/gatekeeper.tar",
              "clusters/platforms/gatekeeper/manifests/10-gatekeeper.yaml"}
NOT_COPIED = {".git", "build", "dist", ".pytest_cache", ".venv", "venv", "reports"}


def _not_copied(directory: str, names: list[str]) -> list[str]:
    top = Path(directory) == REPO
    return [n for n in names if (top and n in NOT_COPIED) or n == "__pycache__" or n.endswith(".egg-info")]


def _run(cmd: list[str], cwd: Path, env: dict[str, str], ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode in ok, (f"{' '.join(cmd)} exited {done.returncode}\n--- stdout\n{done.stdout[-4000:]}"
                                   f"\n--- stderr\n{done.stderr[-4000:]}")
    return done


def _checkout_files(directory: str, pattern: str) -> set[str]:
    """Paths (relative to the checkout) of the files under ``directory`` matching ``pattern``."""
    return {p.relative_to(REPO).as_posix() for p in (REPO / directory).glob(pattern)
            if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel, venv python, environment, a directory outside any checkout)."""
    tmp = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("KDRILL_")}
    env["KDRILL_STATE_DIR"] = str(tmp / "state")  # nothing here may touch the real ledger or key

    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=_not_copied)
    # Evidence and the harness's tests are in a checkout; neither may go into the wheel.
    (src / "reports" / "some-run").mkdir(parents=True)
    (src / "reports" / "some-run" / "run.json").write_text("{}")
    assert (src / "tests" / "unit" / Path(__file__).name).is_file()
    # As clusters/platforms/gatekeeper.py leaves them (built here, not committed): never shipped.
    for built in BUILT_HERE:
        (src / built).parent.mkdir(parents=True, exist_ok=True)
        (src / built).write_text("built here")
    dist = tmp / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(dist), str(src)], tmp, env)
    (wheel,) = dist.glob("kdrill-*.whl")

    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], tmp, env)
    python = venv / "bin" / "python"
    if sys.prefix != sys.base_prefix:
        # Run from a venv: --system-site-packages means the base interpreter's, not this venv's,
        # so this venv's packages (kdrill's dependencies) are added by path, after the new venv's own.
        purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp,
                       env).stdout.strip()
        Path(purelib, "kdrill-test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)],
         tmp, env)
    elsewhere = tmp / "elsewhere"  # the working directory: no checkout here or above
    elsewhere.mkdir()
    return wheel, python, env, elsewhere


def test_the_wheel_holds_the_harness_scenarios_drills_and_cluster_configs_and_nothing_else(installed):
    wheel = installed[0]
    names = {n for n in zipfile.ZipFile(wheel).namelist() if not n.endswith("/")}
    data = {n.removeprefix("harness/_data/") for n in names if n.startswith("harness/_data/")}
    assert data == (_checkout_files("scenarios", "*.yaml") | _checkout_files("drills", "*.py")
                    | _checkout_files("clusters", "**/*")) - BUILT_HERE, \
        "harness/_data/ is not scenarios/, drills/ and clusters/"
    assert {"scenarios/pod-delete.yaml", "drills/test_data_scenarios.py", "clusters/ha.yaml",
            "clusters/images/versions.env"} <= data
    assert _checkout_files("harness", "**/*.py") | _checkout_files("harness", "templates/*.j2") <= names
    assert [n for n in names if n.endswith(".j2") and n.startswith("harness/templates/")]
    assert not [n for n in names if {"reports", "tests", "__pycache__"} & set(n.split("/")) or n.endswith(".pyc")]
    assert not [n for n in names if not n.startswith(("harness/", "kdrill-"))]


def test_the_installed_kdrill_is_the_wheels_and_finds_its_files_there(installed):
    _, python, env, elsewhere = installed
    venv = python.parent.parent
    out = _run([str(python), "-c", "import harness, harness.core.resources as r; print(harness.__file__); "
                "print(r.data_root()); print(r.checkout()); print(r.default_reports_dir())"], elsewhere, env).stdout
    package, data_root, checkout, reports = out.splitlines()
    assert Path(package).is_relative_to(venv) and Path(data_root) == Path(package).parent / "_data"
    assert checkout == "None" and Path(reports) == elsewhere / "reports"
    # The offline image build reads its inputs there, to the same content keys: an installed kdrill
    # and the checkout share ~/.cache/kdrill and the built images.
    from harness.kube.images import Build

    here = Build()
    keys = _run([str(python), "-c", "from harness.kube.images import Build; b = Build(); "
                 "print('\\n'.join(f'{n} {b.step(n).key}' for n in b._steps))"], elsewhere, env).stdout
    assert dict(line.split() for line in keys.splitlines()) == {n: here.step(n).key for n in here._steps}
    # The image build's scripts and entrypoints keep their executable bit (copied into images as is).
    for path in (REPO / "clusters").rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            installed_copy = Path(data_root) / path.relative_to(REPO)
            assert os.access(installed_copy, os.X_OK) == os.access(path, os.X_OK), installed_copy


def test_list_validate_and_plan_work_from_outside_the_checkout(installed, tmp_path):
    _, python, env, elsewhere = installed
    kdrill = str(python.parent / "kdrill")
    expected = sorted(s.name for s in load_scenarios(REPO / "scenarios"))

    listed = _run([kdrill, "list"], elsewhere, env).stdout
    assert sorted(line.split()[0] for line in listed.splitlines() if line and not line[0].isspace()) == expected
    # What runs each is named without a checkout's path: the wheel user has no drills/ folder.
    assert "drills/" not in listed and "Python drill test_control_plane_upgrade.py" in listed

    scenarios = Path(_run([str(python), "-c", "from harness.core import resources; print(resources.scenarios_dir())"],
                          elsewhere, env).stdout.strip())
    files = sorted(str(p) for p in scenarios.glob("*.yaml"))
    assert [Path(f).name for f in files] == sorted(p.name for p in (REPO / "scenarios").glob("*.yaml"))
    validated = _run([kdrill, "validate", *files], elsewhere, env).stdout
    assert [line.startswith("ok: ") for line in validated.splitlines()] == [True] * len(files)

    # A drill-file scenario: its drill and cluster config are read from the installed package.
    plan = _run([kdrill, "run", "--plan", "control-plane-stop"], elsewhere, env).stdout
    assert "control-plane-stop" in plan

    # A team's own directory (--scenarios-dir replaces the built-in set): its scenario names one of
    # kdrill's built-in drills, found in the installed package. A relative directory is the
    # caller's, not kdrill's.
    team = elsewhere / "team-scenarios"
    team.mkdir()
    shutil.copy(REPO / "scenarios" / "control-plane-stop.yaml", team / "control-plane-stop.yaml")
    plan = _run([kdrill, "run", "--plan", "--scenarios-dir", "team-scenarios"], elsewhere, env).stdout
    assert "control-plane-stop" in plan and "pod-delete" not in plan


def test_the_installed_drills_collect_with_the_installed_plugin_and_scenarios(installed):
    """What `kdrill run` hands pytest (drills by path, --rootdir the data directory), collected from
    outside the checkout: every drill imports and finds its scenario. Everything is deselected
    (-m "not cluster"), so nothing runs and no evidence is written."""
    _, python, env, elsewhere = installed
    data_root = Path(_run([str(python), "-c", "from harness.core import resources; print(resources.data_root())"],
                          elsewhere, env).stdout.strip())
    done = _run([str(python), "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                 "--rootdir", str(data_root), str(data_root / "drills"), "-m", "not cluster"], elsewhere, env, ok=(5,))
    deselected = int(done.stdout.rsplit("(", 1)[1].split()[0])  # "no tests collected (24 deselected) in 2s"
    assert deselected >= len(load_scenarios(REPO / "scenarios"))
    assert not (elsewhere / "reports").exists()
