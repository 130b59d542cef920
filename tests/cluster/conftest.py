"""Fixtures shared by the cluster tests."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import side_lane
from platform_example import PlatformClusterBuild
from side_lane import ON_SIDE_CLUSTER


@pytest.fixture(scope="session")
def platform_cluster_build(kdrill_cluster, tmp_path_factory):
    """The example profile's one-node cluster (platform_example.py), made at most once, deleted
    at the end of the session at the latest."""
    if kdrill_cluster.provider != "kind":
        pytest.skip("platform profiles build kind clusters")
    build = PlatformClusterBuild(tmp_path_factory.mktemp("platform"))
    yield build
    build.delete()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The SIGKILL cases run on the side cluster (side_lane.py) come last in test_recovery.py, so
    that the module's other tests run on the HA cluster meanwhile. The platform profile's tests run
    right after the module, whose run time its cluster's creation overlaps (test_recovery.py
    starts it)."""
    side = [i for i in items if i.path.name == "test_recovery.py" and getattr(i, "callspec", None) is not None
            and i.callspec.params.get("scenario") in ON_SIDE_CLUSTER]
    rest = [i for i in items if i not in side]
    others = [n for n, i in enumerate(rest) if i.path.name == "test_recovery.py"]
    if side and others:
        items[:] = rest[:others[-1] + 1] + side + rest[others[-1] + 1:]
    platform = [i for i in items if i.path.name == "test_platform_cluster.py"]
    recovery = [i for i in items if i.path.name == "test_recovery.py"]
    if not platform or not recovery:
        return
    rest = [i for i in items if i.path.name != "test_platform_cluster.py"]
    at = rest.index(recovery[-1]) + 1
    items[:] = rest[:at] + platform + rest[at:]


def pytest_collection_finish(session: pytest.Session) -> None:
    """The side cluster's creation starts with the HA cluster's (the plugin's early creation),
    while the tests that need no cluster run, when SIGKILL cases will run on it."""
    config = session.config
    if (config.option.collectonly or getattr(config.option, "showfixtures", False)
            or getattr(config.option, "show_fixtures_per_test", False) or getattr(config.option, "setupplan", False)
            or hasattr(config, "workerinput")  # a pytest-xdist worker: one side cluster per session at most
            or config.getoption("--kdrill-kubeconfig") or config.getoption("--kdrill-context")):
        return
    if not any(_on_side(item) for item in session.items):
        return
    from harness.cli.doctor import docker_problem
    from harness.kube.images import Build

    try:
        if docker_problem() or Build().missing():
            return  # the lane says why when its tests run
    except Exception:
        return
    side_lane.start_early(Path(tempfile.mkdtemp(prefix="kdrill-side-")))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    side_lane.drop_early()


def _on_side(item: pytest.Item) -> bool:
    return (item.path.name == "test_recovery.py" and getattr(item, "callspec", None) is not None
            and item.callspec.params.get("scenario") in ON_SIDE_CLUSTER)
