"""Fixtures shared by the cluster tests."""

from __future__ import annotations

import pytest

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
