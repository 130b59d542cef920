"""The node metrics loop keeps only the series it was asked for, and a read with none of them is a
failed sample (harness/probes/node_http.py: NodeMetricsProbe)."""

from __future__ import annotations

import pytest

from harness.probes.node_http import NodeHttpProbe, NodeMetricsProbe

URL = "http://127.0.0.1:2381/metrics"


def probe(metrics=("etcd_server_is_leader", "etcd_server_leader_changes_seen_total")):
    return NodeMetricsProbe("m", None, "cp1", URL, list(metrics), interval_seconds=0.5)


def test_a_read_keeps_the_asked_series_and_their_values():
    sample = probe().sample(10.0, 10.25, "etcd_server_is_leader 1 etcd_server_leader_changes_seen_total 3 ")
    assert sample.ok and sample.t == 10.0 and sample.latency_seconds == pytest.approx(0.25)
    assert sample.labels == {"node": "cp1", "etcd_server_is_leader": "1", "etcd_server_leader_changes_seen_total": "3"}


def test_a_read_with_none_of_them_fails_and_says_so():
    for payload in ("", "other_metric 1", "etcd_server_is_leader"):
        sample = probe().sample(1.0, 2.0, payload)
        assert not sample.ok and sample.detail == "no metric read"


def test_values_are_the_successful_reads_in_order():
    p = probe()
    for t, payload in ((1.0, "etcd_server_is_leader 0"), (2.0, ""), (3.0, "etcd_server_is_leader 1")):
        p.timeline.add(p.sample(t, t + 0.1, payload))
    assert p.values("etcd_server_is_leader") == [(1.0, 0.0), (3.0, 1.0)]
    assert p.values("etcd_server_leader_changes_seen_total") == []
    assert p.reads("etcd_server_is_leader") == [(1.0, pytest.approx(1.1), 0.0), (3.0, pytest.approx(3.1), 1.0)]


@pytest.mark.parametrize("metrics", [[], ["etcd_server_is_leader{a=\"b\"}"], ["bad name"], ["x; rm -rf /"]])
def test_a_name_that_is_not_a_series_name_is_refused(metrics):
    with pytest.raises(ValueError, match="metrics: expected names of series without labels"):
        probe(metrics)


def test_the_loop_greps_only_the_asked_names():
    script = probe(["etcd_server_is_leader"]).script()
    assert "grep -E '^(etcd_server_is_leader) '" in script and "curl -s -m 5 " + URL in script


def test_the_http_loop_still_judges_by_the_code():
    p = NodeHttpProbe("h", None, "cp1", URL, ok_codes=("201",))
    assert p.sample(1.0, 1.5, "201").ok and not p.sample(1.0, 1.5, "000").ok
    assert p.sample(1.0, 1.5, "503").detail == "http 503"
