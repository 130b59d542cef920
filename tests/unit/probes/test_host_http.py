"""The host-http probe a scenario declares and the one a Python drill makes (harness/probes/http.py
host_http) are one probe: the same URL through the cluster's 127.0.0.1 mapping, interval and bound."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.probes.http import HostHttp, HttpProbe, host_http


class MappedCluster:
    """A kind cluster whose NodePort 30080 is mapped to 127.0.0.1:41234."""

    def host_port(self, node_port: int) -> int:
        return {30080: 41234}[node_port]


def test_the_runners_probe_and_a_drills_probe_are_the_same():
    cluster = MappedCluster()
    context = SimpleNamespace(cluster=cluster, interval_seconds=0.5, max_seconds=900)
    declared = HostHttp.for_scenario({"name": "host-http", "node_port": 30080}, context)
    made = host_http(cluster, 30080, 0.5, 900)
    for probe in (declared, made):
        assert isinstance(probe, HttpProbe)
    assert (declared.name, declared.url, declared.interval_seconds, declared.max_seconds) == \
        (made.name, made.url, made.interval_seconds, made.max_seconds) == \
        ("host-http", "http://127.0.0.1:41234/", 0.5, 900)


def test_the_host_never_probes_a_node_or_pod_address():
    with pytest.raises(ValueError, match="127.0.0.1 port mappings"):
        HttpProbe("host-http", "http://172.18.0.3:30080/")
