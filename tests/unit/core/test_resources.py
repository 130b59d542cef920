"""harness/core/resources.py: kdrill's own scenarios, drills and cluster configs, from a checkout or from
the installed package (tests/unit/test_wheel.py installs a real wheel), and `kdrill run` handing
the drills' pytest absolute paths, as it runs in kdrill's directory rather than the caller's."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import cli
from harness.core import resources

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def fresh_lookup():
    resources.data_root.cache_clear()
    yield
    resources.data_root.cache_clear()


def test_in_the_checkout_every_file_is_the_checkouts(fresh_lookup) -> None:
    assert resources.data_root() == resources.checkout() == REPO
    assert resources.scenarios_dir() == REPO / "scenarios"
    assert resources.drill_file("drills/test_data_scenarios.py") == REPO / "drills" / "test_data_scenarios.py"
    assert (resources.clusters_dir() / "ha.yaml").is_file()
    assert resources.default_reports_dir() == REPO / "reports"


def test_installed_data_comes_first_and_reports_go_to_the_working_directory(tmp_path, monkeypatch,
                                                                            fresh_lookup) -> None:
    installed = tmp_path / "site-packages" / "harness" / "_data"
    for name in resources.DATA_NAMES:
        (installed / name).mkdir(parents=True)
    monkeypatch.setattr(resources, "INSTALLED_DATA_DIR", installed)
    monkeypatch.chdir(tmp_path)
    assert resources.data_root() == installed and resources.checkout() is None
    assert resources.drills_dir() == installed / "drills"
    assert resources.default_reports_dir() == tmp_path / "reports"


def test_neither_place_is_one_clear_error(tmp_path, monkeypatch, capsys, fresh_lookup) -> None:
    monkeypatch.setattr(resources, "INSTALLED_DATA_DIR", tmp_path / "_data")
    monkeypatch.setattr(resources, "CHECKOUT_DIR", tmp_path)
    with pytest.raises(resources.ResourcesMissing, match="reinstall kdrill"):
        resources.data_root()
    assert cli.main(["list"]) == 2
    assert "neither in the installed package" in capsys.readouterr().err


def test_run_hands_pytest_absolute_paths_and_the_built_in_drills(tmp_path, monkeypatch) -> None:
    """A team's relative --scenarios-dir and --reports are the caller's directories, though the
    drills' pytest runs in kdrill's; the team's scenario's drill is kdrill's own."""
    import harness.evidence.manifest

    team = tmp_path / "team"
    team.mkdir()
    (team / "control-plane-stop.yaml").write_text((REPO / "scenarios" / "control-plane-stop.yaml").read_text())
    commands = []
    monkeypatch.setattr(harness.evidence.manifest, "load_signing_key", lambda: None)
    monkeypatch.setattr(cli, "prepare_kind", lambda: None)
    monkeypatch.setattr(cli, "run_until_reverted", lambda cmd: commands.append(cmd) or 0)
    monkeypatch.setattr(cli, "report_and_manifest", lambda run_dir: True)
    monkeypatch.setattr(cli, "write_history_index", lambda reports: None)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["--reports", "out", "run", "--run-id", "r1", "--scenarios-dir", "team"]) == 1  # no records
    (cmd,) = commands
    options = dict(arg.split("=", 1) for arg in cmd if arg.startswith("--kdrill-") and "=" in arg)
    assert options["--kdrill-scenarios-dir"] == str(team)
    assert options["--kdrill-reports"] == str(tmp_path / "out")
    assert cmd[cmd.index("--rootdir") + 1] == str(resources.data_root())
    assert str(resources.drills_dir() / "test_data_scenarios.py") in cmd
    assert (tmp_path / "out" / "r1").is_dir()
