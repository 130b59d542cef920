"""Probe from a node: a bounded loop of ``curl`` requests run on the node itself.

For what only a node reaches: an etcd member's local health endpoint (kubeadm's
``--listen-metrics-urls=http://127.0.0.1:2381``) or the API server beside it on
``127.0.0.1:6443``, never through the load balancer. The loop runs in the node (one exec for the
whole probe, so a sample costs a curl, not a ``docker exec``), prints one line per request
(started, completed, HTTP code) and stops at its count, its duration or the stop file
:meth:`NodeHttpProbe.stop` writes, whichever comes first. Samples reach the timeline when the
loop ends.
"""

from __future__ import annotations

import re
import shlex
import threading
import uuid
from typing import Any

from harness.core.timeline import Sample, Timeline
from harness.kube.providers import Cluster

# The API server's own client certificate for kubelets, on every kubeadm control-plane node: the
# only credential the node holds for its local API server on 127.0.0.1:6443.
LOCAL_APISERVER_CLIENT = ["--cacert", "/etc/kubernetes/pki/ca.crt",
                          "--cert", "/etc/kubernetes/pki/apiserver-kubelet-client.crt",
                          "--key", "/etc/kubernetes/pki/apiserver-kubelet-client.key"]
# A Prometheus series name (no labels).
METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


class NodeHttpProbe:
    """GET ``url`` from node ``node`` every ``interval_seconds`` (each request bounded by
    ``timeout_seconds``) for at most ``max_seconds`` and ``max_samples``; ``curl_args`` adds
    options such as client certificates (paths on the node) or a POST body; a sample succeeds
    when the HTTP code is one of ``ok_codes``. Same start/stop/timeline shape as
    :class:`harness.probes.Probe`."""

    def __init__(self, name: str, cluster: Cluster, node: str, url: str, curl_args: list[str] | None = None,
                 interval_seconds: float = 0.1, timeout_seconds: float = 5.0, max_seconds: float = 300,
                 max_samples: int = 5000, ok_codes: tuple[str, ...] = ("200",)) -> None:
        self.name, self.cluster, self.node, self.url = name, cluster, node, url
        self.ok_codes = ok_codes
        self.curl_args = list(curl_args or [])
        self.interval_seconds, self.timeout_seconds = interval_seconds, timeout_seconds
        self.max_seconds, self.max_samples = max_seconds, max_samples
        self.timeline = Timeline(name)
        self.error = ""
        self._stop_file = f"/tmp/kdrill-probe-{uuid.uuid4().hex[:12]}.stop"
        self._thread = threading.Thread(target=self._run, name=f"probe-{name}", daemon=True)

    def request(self) -> str:
        """The shell command whose output is one sample's payload: here, the HTTP code."""
        return " ".join(shlex.quote(a) for a in ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                                  "-m", f"{self.timeout_seconds:g}", *self.curl_args, self.url])

    def sample(self, started_at: float, completed_at: float, payload: str) -> Sample:
        """The sample one request's output line makes."""
        code = payload.strip()
        return Sample(t=started_at, ok=code in self.ok_codes, latency_seconds=completed_at - started_at,
                      detail=f"http {code}", labels={"node": self.node})

    def script(self) -> str:
        return (f"end=$(( $(date +%s) + {int(self.max_seconds)} )); i=0\n"
                f"while [ $i -lt {int(self.max_samples)} ] && [ $(date +%s) -lt $end ] "
                f"&& [ ! -e {self._stop_file} ]; do\n"
                f"  t0=$(date +%s.%N); out=$({self.request()}); t1=$(date +%s.%N)\n"
                f"  echo \"$t0 $t1 $out\"; i=$((i+1)); sleep {self.interval_seconds:g}\n"
                f"done\nrm -f {self._stop_file}\n")

    def start(self) -> "NodeHttpProbe":
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            result = self.cluster.node_exec(self.node, ["bash", "-c", self.script()],
                                            timeout_seconds=self.max_seconds + 30, check=False)
        except Exception as exc:  # recorded: a probe never dies of what it measures
            self.error = f"{type(exc).__name__}: {exc}"[:500]
            return
        for line in result.stdout.splitlines():
            try:
                started, completed, payload = (line.split(None, 2) + [""])[:3]
                started_at, completed_at = float(started), float(completed)
            except ValueError:
                continue
            self.timeline.add(self.sample(started_at, completed_at, payload))
        if result.returncode != 0:
            self.error = f"loop on {self.node} exited {result.returncode}: {result.stderr.strip()[-300:]}"

    def stop(self) -> Timeline:
        """Ask the loop to end, and wait for its samples (bounded by ``max_seconds``)."""
        if self._thread.is_alive():
            try:
                self.cluster.node_exec(self.node, ["touch", self._stop_file], timeout_seconds=15, check=False)
            except Exception as exc:  # the loop still ends at its own bound
                self.error = f"stop file not written: {exc}"[:500]
            self._thread.join(timeout=self.max_seconds + 60)
        return self.timeline


class NodeMetricsProbe(NodeHttpProbe):
    """Read the Prometheus exposition at ``url`` from node ``node`` every ``interval_seconds`` and
    keep the values of ``metrics`` (names of series without labels, e.g.
    ``etcd_server_is_leader``). Each sample's ``labels`` holds every value read, by name, as text;
    a read without any of them is a failed sample. Same loop and bounds as :class:`NodeHttpProbe`."""

    def __init__(self, name: str, cluster: Cluster, node: str, url: str, metrics: list[str], **loop: Any) -> None:
        if not metrics or any(not METRIC_NAME.fullmatch(m) for m in metrics):
            raise ValueError(f"metrics: expected names of series without labels, got {metrics!r}")
        super().__init__(name, cluster, node, url, **loop)
        self.metrics = list(metrics)

    def request(self) -> str:
        pattern = shlex.quote("^(" + "|".join(self.metrics) + ") ")
        curl = " ".join(shlex.quote(a) for a in ["curl", "-s", "-m", f"{self.timeout_seconds:g}", *self.curl_args,
                                                  self.url])
        return f"{curl} | grep -E {pattern} | tr '\\n' ' '"

    def sample(self, started_at: float, completed_at: float, payload: str) -> Sample:
        words = payload.split()
        values = {words[i]: words[i + 1] for i in range(0, len(words) - 1, 2) if words[i] in self.metrics}
        return Sample(t=started_at, ok=bool(values), latency_seconds=completed_at - started_at,
                      detail=" ".join(f"{k}={v}" for k, v in values.items()) or "no metric read",
                      labels={"node": self.node, **values})

    def values(self, metric: str) -> list[tuple[float, float]]:
        """(time, value) of every successful read of ``metric``, in order."""
        return [(sent, value) for sent, _, value in self.reads(metric)]

    def reads(self, metric: str) -> list[tuple[float, float, float]]:
        """(sent, answered, value) of every successful read of ``metric``, in order; times in epoch
        seconds. The value is the exposition's state at some moment between the two."""
        return [(s.t, s.t + (s.latency_seconds or 0.0), float(s.labels[metric]))
                for s in self.timeline.samples() if metric in s.labels]
