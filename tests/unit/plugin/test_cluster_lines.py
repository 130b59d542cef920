"""What ``kdrill run`` says about its kind cluster: made or found, and whether it is deleted at
the end (harness/plugin/cluster.py _say_cluster). Pure wording; the real creation and deletion run
in the cluster tests."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.plugin import cluster


def said(capsys, keep: bool, created_seconds: float | None) -> str:
    config = SimpleNamespace(getoption=lambda name: keep if name == "--kdrill-keep-cluster" else None,
                             pluginmanager=SimpleNamespace(getplugin=lambda name: None))
    cluster._say_cluster(config, "kdrill-ha", created_seconds)
    return capsys.readouterr().out.strip()


@pytest.mark.parametrize(("keep", "created", "line"), [
    (False, None, "kdrill: kind cluster kdrill-ha exists: drilled as it is, and kept at the end"),
    (True, None, "kdrill: kind cluster kdrill-ha exists: drilled as it is, and kept at the end"),
    (False, 101.4, "kdrill: created kind cluster kdrill-ha in 101 s; deleted at the end "
                   "(kdrill run --keep-cluster keeps it)"),
    (True, 99.6, "kdrill: created kind cluster kdrill-ha in 100 s; kept at the end (--keep-cluster)"),
])
def test_the_run_says_whether_it_made_the_cluster_and_what_happens_to_it(capsys, keep, created, line):
    assert said(capsys, keep, created) == line
