"""Metric probe: one Prometheus metric of a platform component, read through the API at an
interval; each read is a sample whose ``ok`` says whether the metric's value meets ``ok_when``.

Where it is read (``source``), always through the cluster's API endpoint (this machine reaches
a cluster through its 127.0.0.1 mapping only):

- ``apiserver`` (the default): ``GET /metrics`` of the kube-apiserver that answers; with several
  API servers behind a load balancer, whichever it picks, so a metric that differs between them
  shows as a sample that flips;
- ``{node: NAME}``: that node's kubelet, ``/api/v1/nodes/NAME/proxy/metrics``;
- ``{pod: {name: NAME, port: PORT}}`` (in the drill's namespace unless ``namespace`` is given):
  ``/api/v1/namespaces/NS/pods/NAME:PORT/proxy/metrics``.

The value is the sum of the series of ``metric`` whose labels include every one of ``labels``
(a gauge read as it is; a counter as its total). Only the lines of that metric are parsed
(``prometheus_client``'s parser): a kube-apiserver's exposition is about 2 MB here, 1 s of CPU to
parse whole and 7 ms to filter. ``ok_when`` is a bound ``{op, value}``; a series that is not
there, or a read the API does not answer, is a failed sample with ``labels["error"]``, so a
measure cannot mistake it for a value. Each sample's detail is the value read, and
``labels["value"]`` too.

Sources: Kubernetes "Metrics For Kubernetes System Components",
https://kubernetes.io/docs/concepts/cluster-administration/system-metrics/
"""

from __future__ import annotations

import re
import time
from typing import Any

from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from harness.core.timeline import Sample
from harness.kube.providers import Cluster
from harness.probes import Probe
from harness.probes.api import failed
from harness.spec.scenario import OPS, Bound

METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metrics_path(source: str | dict[str, Any], namespace: str) -> str:
    """The API path of ``source``'s metrics (module docstring). Raises ValueError for a source
    that is none of those forms, or a name or port that could not be part of a path."""
    if source == "apiserver":
        return "/metrics"
    if isinstance(source, dict) and set(source) == {"node"} and isinstance(source["node"], str) \
            and re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", source["node"]):
        return f"/api/v1/nodes/{source['node']}/proxy/metrics"
    if isinstance(source, dict) and set(source) == {"pod"} and isinstance(source["pod"], dict):
        pod = source["pod"]
        ns, name, port = pod.get("namespace", namespace), pod.get("name"), pod.get("port")
        if set(pod) <= {"name", "port", "namespace"} and isinstance(name, str) and isinstance(ns, str) \
                and re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", name) \
                and re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", ns) \
                and isinstance(port, int) and not isinstance(port, bool) and 1 <= port <= 65535:
            return f"/api/v1/namespaces/{ns}/pods/{name}:{port}/proxy/metrics"
    raise ValueError("source must be 'apiserver', {node: NAME} or {pod: {name: NAME, port: PORT[, namespace: NS]}}, "
                     f"got {source!r}")


def metric_value(exposition: str, metric: str, labels: dict[str, str]) -> float | None:
    """The sum of ``metric``'s series in Prometheus text ``exposition`` whose labels include
    ``labels``; None when there is none. Raises ValueError for a malformed metric name or line."""
    if not METRIC_NAME.fullmatch(metric):
        raise ValueError(f"not a metric name: {metric!r}")
    # Only this metric's own lines: "name{...} v" or "name v" (not name_total, name_bucket, ...).
    lines = [line for line in exposition.splitlines()
             if line.startswith(metric) and line[len(metric):len(metric) + 1] in ("{", " ")]
    values = [sample.value for family in text_string_to_metric_families("\n".join(lines) + "\n")
              for sample in family.samples
              if sample.name == metric and all(sample.labels.get(k) == v for k, v in labels.items())]
    return sum(values) if values else None


def exact_text(value: float) -> str:
    """``value`` as text that reads back as the same float (``"0"``, ``"1234567"``, ``"0.25"``,
    ``"inf"``): the measures read it again, and ``:g``'s 6 digits would make a counter of 1234567
    and one of 1234599 the same value (a rate of 0)."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


_NAME_253 = {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", "maxLength": 253}
# A metric probe's default interval: a kube-apiserver's metrics are about 2 MB a read here.
DEFAULT_INTERVAL_SECONDS = 2.0


class MetricProbe(Probe):
    """Read ``metric`` (with ``labels``) from ``source`` every ``interval_seconds``; ``ok`` when
    its value meets ``ok_when`` (a :class:`harness.spec.scenario.Bound`)."""

    kind = "metric"
    records_values = True  # max_value, min_value and rate_per_second read them
    in_probe_pod = False
    required = ("metric", "ok_when")
    fields = {
        "metric": {"type": "string", "pattern": "^[a-zA-Z_:][a-zA-Z0-9_:]*$", "x-expected": "a Prometheus metric name"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"},
                   "x-expected": "a mapping of label names to values (strings)"},
        "source": {"anyOf": [{"enum": ["apiserver"]}, {
            "type": "object", "additionalProperties": False, "required": ["node"], "properties": {"node": _NAME_253}}, {
            "type": "object", "additionalProperties": False, "required": ["pod"], "properties": {"pod": {
                "type": "object", "additionalProperties": False, "required": ["name", "port"],
                "properties": {"name": _NAME_253,
                               "namespace": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                                             "maxLength": 63},
                               "port": {"type": "integer", "minimum": 1, "maximum": 65535}}}}}],
            "x-expected": "apiserver, {node: NAME} or {pod: {name: NAME, port: PORT}}"},
        "interval_seconds": {"type": "number", "minimum": 0.5, "maximum": 60,
                             "x-expected": "seconds between reads, 0.5 to 60"},
        "ok_when": {"type": "object", "additionalProperties": False, "required": ["op", "value"],
                    "properties": {"op": {"enum": list(OPS)}, "value": {"type": "number"}},
                    "x-expected": "{op, value} for a metric probe: a bound on the value"},
    }

    @classmethod
    def problems(cls, spec: dict[str, Any]) -> list[tuple[str, str, str]]:
        try:
            metrics_path(spec.get("source", "apiserver"), "default")
        except ValueError:
            return [("source", "apiserver, {node: NAME} or {pod: {name: NAME, port: PORT[, namespace: NS]}} with "
                     "names the API takes", repr(spec.get("source")))]
        return []

    @classmethod
    def for_scenario(cls, spec: dict[str, Any], context) -> "MetricProbe":

        return cls(spec["name"], context.cluster, spec["metric"], spec.get("labels") or {},
                   Bound(spec["ok_when"]["op"], spec["ok_when"]["value"]), source=spec.get("source", "apiserver"),
                   namespace=context.namespace,
                   interval_seconds=float(spec.get("interval_seconds", DEFAULT_INTERVAL_SECONDS)),
                   max_seconds=context.max_seconds)

    def __init__(self, name: str, cluster: Cluster, metric: str, labels: dict[str, str], ok_when,
                 source: str | dict[str, Any] = "apiserver", namespace: str = "default",
                 timeout_seconds: float = 5.0, **kwargs) -> None:
        super().__init__(name, **kwargs)
        if not METRIC_NAME.fullmatch(metric):
            raise ValueError(f"not a metric name: {metric!r}")
        self.path = metrics_path(source, namespace)
        self.metric, self.labels, self.ok_when, self.timeout_seconds = metric, dict(labels), ok_when, timeout_seconds
        self.api = cluster.new_api()  # its own connection pool, no retries: one sample, one request

    def sample(self) -> Sample:
        started = time.time()
        try:
            request = self.api.param_serialize("GET", self.path, header_params={"Accept": "text/plain"},
                                               auth_settings=["BearerToken"])
            response = self.api.call_api(*request, _request_timeout=self.timeout_seconds)
            response.read()
            if not 200 <= response.status < 300:
                raise ApiException(http_resp=response)
            value = metric_value(response.data.decode("utf-8", errors="replace"), self.metric, self.labels)
        except Exception as exc:  # recorded as what it is (classified as the API probes do), never as a value
            return failed(started, exc)
        latency = time.time() - started
        if value is None:
            return Sample(t=started, ok=False, latency_seconds=latency, detail=f"no series {self.metric}{self.labels}",
                          labels={"error": "no series"})
        return Sample(t=started, ok=self.ok_when.holds(value), latency_seconds=latency,
                      detail=f"{self.metric}{self.labels} = {value:g}", labels={"value": exact_text(value)})
