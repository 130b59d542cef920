"""Fixtures shared by the cluster tests."""

from __future__ import annotations

import pytest

from platform_example import PlatformClusterBuild


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
    """The platform profile's tests run right after the SIGKILL recovery tests, whose run time its
    cluster's creation overlaps (test_recovery.py starts it)."""
    platform = [i for i in items if i.path.name == "test_platform_cluster.py"]
    recovery = [i for i in items if i.path.name == "test_recovery.py"]
    if not platform or not recovery:
        return
    rest = [i for i in items if i.path.name != "test_platform_cluster.py"]
    at = rest.index(recovery[-1]) + 1
    items[:] = rest[:at] + platform + rest[at:]
