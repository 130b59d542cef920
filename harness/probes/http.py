"""HTTP probe from the host to a workload, through a ``127.0.0.1`` port mapping of the kind
cluster to a NodePort (the host never addresses node or pod IPs)."""

from __future__ import annotations

import http.client
import time
import urllib.parse

from harness.core.timeline import Sample
from harness.probes import Probe


class HttpProbe(Probe):
    """GET ``url`` every interval; a sample is ok on HTTP 2xx within ``timeout_seconds``."""

    def __init__(self, name: str, url: str, timeout_seconds: float = 1.0, **kwargs) -> None:
        super().__init__(name, **kwargs)
        parts = urllib.parse.urlsplit(url)
        if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"the host probes workloads only through 127.0.0.1 port mappings, not {url}")
        self.url, self.parts, self.timeout_seconds = url, parts, timeout_seconds

    def sample(self) -> Sample:
        started = time.time()
        conn = http.client.HTTPConnection(self.parts.hostname, self.parts.port or 80, timeout=self.timeout_seconds)
        try:
            # A fresh connection per sample: kube-proxy balances per connection.
            conn.request("GET", self.parts.path or "/", headers={"Connection": "close"})
            response = conn.getresponse()
            body = response.read(2048).decode(errors="replace")
        finally:
            conn.close()
        ok = 200 <= response.status < 300
        return Sample(t=started, ok=ok, latency_seconds=time.time() - started,
                      detail=f"HTTP {response.status} {body.strip()[:200]}")


class HostHttp:
    """Probe kind ``host-http``: GET ``/`` of the runner's ``web`` Service from this machine every
    interval, through the ``127.0.0.1`` mapping of its NodePort (``node_port``, which must be the
    scenario's ``workload.node_port``): the path a user outside the cluster takes, through
    kube-proxy on a node, with no API server or DNS in it."""

    kind = "host-http"
    in_probe_pod = False
    required = ("node_port",)
    fields = {"node_port": {"type": "integer", "minimum": 30000, "maximum": 32767,
                            "x-expected": "the scenario's workload.node_port (30000 to 32767)"}}

    @classmethod
    def for_scenario(cls, spec: dict, context) -> HttpProbe:
        return host_http(context.cluster, int(spec["node_port"]), context.interval_seconds, context.max_seconds,
                         name=spec["name"])


def host_http(cluster, node_port: int, interval_seconds: float, max_seconds: float,
              name: str = "host-http") -> HttpProbe:
    """The ``host-http`` probe, as the runner makes it and a Python drill too: GET ``/`` of
    ``node_port`` through its ``127.0.0.1`` mapping (``cluster.host_port``), every
    ``interval_seconds``, for at most ``max_seconds``."""
    return HttpProbe(name, f"http://127.0.0.1:{cluster.host_port(node_port)}/", interval_seconds=interval_seconds,
                     max_seconds=max_seconds)
