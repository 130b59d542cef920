"""The metric probe (a component's Prometheus metric read through the API): where it reads, what
value it takes, how a sample is judged, and what loading a scenario refuses. Pure logic and a
stand-in for the API client; the API servers' own metric is read from a real cluster by the
apiservice-unavailable drill."""

from __future__ import annotations

import pytest
from scenario_copies import load_edited

from harness.probes.metric import MetricProbe, metric_value, metrics_path
from harness.spec.scenario import Bound, ScenarioError

EXPOSITION = """\
# HELP aggregator_unavailable_apiservice [STABLE] Gauge of APIServices which are marked as unavailable broken down by APIService name.
# TYPE aggregator_unavailable_apiservice gauge
aggregator_unavailable_apiservice{name="v1.apps"} 0
aggregator_unavailable_apiservice{name="v1alpha1.drill.kdrill.io"} 1
aggregator_unavailable_apiservice_total{name="v1alpha1.drill.kdrill.io",reason="FailedDiscoveryCheck"} 7
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",verb="GET"} 10
apiserver_request_total{code="500",verb="GET"} 2
apiserver_request_total{code="201",verb="POST"} 5
process_open_fds 42
"""


def test_the_value_is_the_sum_of_the_series_whose_labels_include_the_given_ones():
    assert metric_value(EXPOSITION, "aggregator_unavailable_apiservice", {"name": "v1alpha1.drill.kdrill.io"}) == 1
    assert metric_value(EXPOSITION, "apiserver_request_total", {"verb": "GET"}) == 12
    assert metric_value(EXPOSITION, "apiserver_request_total", {}) == 17
    assert metric_value(EXPOSITION, "process_open_fds", {}) == 42


def test_another_metric_sharing_the_prefix_is_not_counted_and_a_missing_series_is_none():
    # aggregator_unavailable_apiservice_total starts with the name but is another metric.
    assert metric_value(EXPOSITION, "aggregator_unavailable_apiservice", {}) == 1
    assert metric_value(EXPOSITION, "aggregator_unavailable_apiservice", {"name": "v9.nothing"}) is None
    assert metric_value(EXPOSITION, "no_such_metric", {}) is None
    with pytest.raises(ValueError):
        metric_value(EXPOSITION, "not a name", {})


def test_sources_are_api_paths_and_nothing_else():
    assert metrics_path("apiserver", "ns") == "/metrics"
    assert metrics_path({"node": "kdrill-ha-worker"}, "ns") == "/api/v1/nodes/kdrill-ha-worker/proxy/metrics"
    assert metrics_path({"pod": {"name": "p", "port": 9153}}, "ns") == "/api/v1/namespaces/ns/pods/p:9153/proxy/metrics"
    assert metrics_path({"pod": {"name": "coredns-x", "port": 9153, "namespace": "kube-system"}}, "ns") \
        == "/api/v1/namespaces/kube-system/pods/coredns-x:9153/proxy/metrics"
    for bad in ("kubelet", {"node": "../secrets"}, {"pod": {"name": "p"}}, {"pod": {"name": "p", "port": True}},
                {"pod": {"name": "p", "port": 80, "namespace": "a/b"}}, {"node": "n", "pod": {}}):
        with pytest.raises(ValueError):
            metrics_path(bad, "ns")


class Response:
    """What the client's call_api returns: read() loads data; status and reason as HTTP gave."""

    def __init__(self, text: str, status: int = 200) -> None:
        self.status, self.reason, self.data, self.read_done = status, "OK" if status == 200 else "Forbidden", None, False
        self._text = text

    def read(self):
        self.data, self.read_done = self._text.encode(), True
        return self.data

    headers: dict = {}

    def getheaders(self):
        return self.headers


class FakeApi:
    """The two calls kube_objects makes too: param_serialize, then call_api on what it gave."""

    def __init__(self, answer, status: int = 200) -> None:
        self.answer, self.status, self.paths = answer, status, []

    def param_serialize(self, method, path, header_params=None, auth_settings=None):
        assert auth_settings == ["BearerToken"]
        return (method, "https://127.0.0.1:6443" + path, header_params, None, [])

    def call_api(self, method, url, header_params, body, post_params, _request_timeout=None):
        self.paths.append((method, url.removeprefix("https://127.0.0.1:6443"), _request_timeout))
        if isinstance(self.answer, Exception):
            raise self.answer
        return Response(self.answer, self.status)


class FakeCluster:
    def __init__(self, api) -> None:
        self.api = api

    def new_api(self):
        return self.api


def probe(answer, labels, bound=Bound("==", 0), status=200):
    api = FakeApi(answer, status)
    return MetricProbe("m", FakeCluster(api), "aggregator_unavailable_apiservice", labels, bound), api


def test_a_sample_is_ok_when_the_value_meets_the_bound_and_says_the_value():
    available, api = probe(EXPOSITION, {"name": "v1.apps"})
    sample = available.sample()
    assert sample.ok and sample.labels == {"value": "0"} and "= 0" in sample.detail
    assert api.paths == [("GET", "/metrics", 5.0)]
    unavailable, _ = probe(EXPOSITION, {"name": "v1alpha1.drill.kdrill.io"})
    assert not unavailable.sample().ok


def test_a_missing_series_or_an_unanswered_read_is_a_failure_with_an_error_never_a_value():
    missing, _ = probe(EXPOSITION, {"name": "v9.nothing"}, Bound("<=", 1))
    sample = missing.sample()
    assert not sample.ok and sample.labels["error"] == "no series"
    down, _ = probe(ConnectionRefusedError("[Errno 111] Connection refused"), {"name": "v1.apps"})
    sample = down.sample()
    assert not sample.ok and sample.labels["error"] == "refused"
    forbidden, _ = probe("forbidden", {"name": "v1.apps"}, status=403)
    sample = forbidden.sample()
    assert not sample.ok and sample.labels["error"] == "http-403"


METRIC_PROBE = 4  # runner.probes index of the metric probe in apiservice-unavailable.yaml


@pytest.mark.parametrize("edit, field, expected", [
    (lambda p: p.pop("ok_when"), "ok_when", "a ok_when for a metric probe"),
    (lambda p: p.update(ok_when="present"), "ok_when", "a mapping"),
    (lambda p: p.update(ok_when={"op": "~", "value": 1}), "ok_when.op", "one of"),
    (lambda p: p.update(object={"kind": "Pod", "name": "x"}), "object", "no object"),
    (lambda p: p.update(metric="not a metric"), "metric", "a Prometheus metric name"),
    (lambda p: p.update(source={"node": "../x"}), "source", "apiserver, {node: NAME}"),
    (lambda p: p.update(source={"pod": {"name": "x", "port": 0}}), "source", "apiserver, {node: NAME}"),
    (lambda p: p.update(labels={"name": 1}), "labels.name", ""),
    (lambda p: p.update(interval_seconds=0.1), "interval_seconds", "0.5 to 60"),
])
def test_bad_metric_probes_are_refused(tmp_path, edit, field, expected):
    def change(d):
        assert d["runner"]["probes"][METRIC_PROBE]["kind"] == "metric"
        edit(d["runner"]["probes"][METRIC_PROBE])
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "apiservice-unavailable", change)
    assert info.value.field == f"runner.probes[{METRIC_PROBE}].{field}", str(info.value)
    assert expected in info.value.expected


def test_an_object_state_probe_does_not_take_a_bound(tmp_path):
    def change(d):
        d["runner"]["probes"][1]["ok_when"] = {"op": "==", "value": 1}
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "apiservice-unavailable", change)
    assert info.value.field == "runner.probes[1].ok_when"


def test_a_source_the_probe_would_refuse_is_refused_at_load(tmp_path):
    def change(d):
        d["runner"]["probes"][METRIC_PROBE]["source"] = {"node": "n" * 300}
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "apiservice-unavailable", change)
    assert info.value.field == f"runner.probes[{METRIC_PROBE}].source"


@pytest.mark.parametrize("name, field", [("nodes", "runner.probes[0].name"), ("api_read", "runner.probes[0].name"),
                                         ("-x", "runner.probes[0].name"), ("x-", "runner.probes[0].name")])
def test_a_probe_may_not_take_a_vital_signs_name_or_look_like_an_option(tmp_path, name, field):
    def change(d):
        d["runner"]["probes"][0]["name"] = name
        for e in d["expectations"]:
            if e["measure"]["probe"] == "by-name":
                e["measure"]["probe"] = name
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "apiservice-unavailable", change)
    assert info.value.field == field, str(info.value)


def test_the_abort_guard_watches_an_incluster_http_probe_only(tmp_path):
    def change(d):
        d["runner"]["abort"] = {"probe": "aggregator-metric-available", "max_failing_seconds": 10}
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "apiservice-unavailable", change)
    assert info.value.field == "runner.abort.probe" and "by-name" in info.value.expected


def test_the_value_label_reads_back_as_the_value_read_so_a_counter_s_growth_is_not_rounded_away():
    # A busy API server's request counter is in the millions: 6 significant digits ("1.23457e+06")
    # would make 1234567 and 1234599 the same value, and rate_per_second 0.
    exposition = "# TYPE apiserver_request_total counter\napiserver_request_total{verb=\"GET\"} 1234599\n"
    sample = MetricProbe("m", FakeCluster(FakeApi(exposition)), "apiserver_request_total", {},
                         Bound(">=", 0)).sample()
    assert float(sample.labels["value"]) == 1234599 and sample.labels["value"] == "1234599"
    from harness.probes.metric import exact_text

    for value in (0.0, 0.1, 1e20, 123456789.25, float("inf"), -2.5):
        assert float(exact_text(value)) == value
