"""Kubernetes API probes, through kind's ``127.0.0.1`` API server mapping (or the kubeconfig's
server for an existing cluster).

Each sample is one request without retries. Failures are classified in ``labels["error"]``:
``timeout`` (no answer within the timeout), ``refused``/``reset`` (connection), ``http-<code>``
(the API server answered with an error), so a drill can tell an unreachable API server from
one that refuses writes.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.core.timeline import Sample
from harness.kube.providers import Cluster
from harness.probes import Probe


def classify(exc: BaseException) -> str:
    """A short error kind for an exception raised by an API request."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ApiException):
        if exc.status:
            return f"http-{exc.status}"
        text = str(exc.reason)  # status 0: the client never got an HTTP answer
    if "EOF" in text or "closed" in text.lower():
        # e.g. a load balancer with no healthy backend closing the connection during TLS
        return "closed"
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        return classify(exc.reason)
    if isinstance(exc, (urllib3.exceptions.TimeoutError, socket.timeout, TimeoutError)) or "timed out" in text:
        return "timeout"
    if "Connection refused" in text:
        return "refused"
    if "reset" in text.lower() or isinstance(exc, urllib3.exceptions.ProtocolError):
        return "reset"
    return type(exc).__name__


def texts(ok_when: Any, key: str) -> list[str] | None:
    """The texts of an ok_when ``{key: [TEXT, ...]}`` (a non-empty list of non-empty strings, and
    no other key), or None for another form."""
    if isinstance(ok_when, dict) and set(ok_when) == {key} and isinstance(ok_when[key], list) and ok_when[key] \
            and all(isinstance(t, str) and t for t in ok_when[key]):
        return ok_when[key]
    return None


def failed(started: float, exc: BaseException) -> Sample:
    kind = classify(exc)
    detail = getattr(exc, "reason", None) or str(exc)
    return Sample(t=started, ok=False, latency_seconds=time.time() - started,
                  detail=f"{kind}: {str(detail)[:300]}", labels={"error": kind})


class ApiReadProbe(Probe):
    """LIST ConfigMaps in ``namespace``.

    ``resource_version=None`` asks for a consistent read (served from etcd by quorum);
    ``resource_version="0"`` lets the API server answer from its watch cache.
    """

    def __init__(self, name: str, cluster: Cluster, namespace: str, resource_version: str | None = None,
                 timeout_seconds: float = 2.0, **kwargs) -> None:
        super().__init__(name, **kwargs)
        self.core = client.CoreV1Api(cluster.new_api())
        self.namespace, self.resource_version, self.timeout_seconds = namespace, resource_version, timeout_seconds

    def sample(self) -> Sample:
        started = time.time()
        try:
            kwargs = {"resource_version": self.resource_version} if self.resource_version is not None else {}
            result = self.core.list_namespaced_config_map(self.namespace, limit=500,
                                                          _request_timeout=self.timeout_seconds, **kwargs)
        except Exception as exc:
            return failed(started, exc)
        return Sample(t=started, ok=True, latency_seconds=time.time() - started,
                      detail=f"{len(result.items)} items", labels={"resource_version": result.metadata.resource_version or ""})


class ApiWriteProbe(Probe):
    """CREATE one new ConfigMap per sample in ``namespace``: ``<prefix>-<n>``.

    Every acknowledged write (HTTP 201) is a sample with ``labels`` ``name`` and
    ``resource_version``: the write ledger that a drill reads back after a fault to prove that
    nothing acknowledged was lost.
    """

    def __init__(self, name: str, cluster: Cluster, namespace: str, prefix: str = "write",
                 timeout_seconds: float = 2.0, **kwargs) -> None:
        super().__init__(name, **kwargs)
        self.core = client.CoreV1Api(cluster.new_api())
        self.namespace, self.prefix, self.timeout_seconds = namespace, prefix, timeout_seconds
        self.sequence = 0

    def sample(self) -> Sample:
        self.sequence += 1
        object_name = f"{self.prefix}-{self.sequence:06d}"
        started = time.time()
        body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=object_name, labels={"kdrill.io/write-probe": self.prefix}),
                                  data={"sequence": str(self.sequence), "written_at": repr(started)})
        try:
            created = self.core.create_namespaced_config_map(self.namespace, body,
                                                             _request_timeout=self.timeout_seconds)
        except Exception as exc:
            return failed(started, exc)
        return Sample(t=started, ok=True, latency_seconds=time.time() - started, detail="created",
                      labels={"name": object_name, "resource_version": created.metadata.resource_version})

    def acknowledged(self) -> dict[str, str]:
        """name -> resourceVersion of every write the API server acknowledged."""
        return {s.labels["name"]: s.labels["resource_version"] for s in self.timeline.samples() if s.ok}


class ApiUpdateProbe(Probe):
    """UPDATE (merge-patch) one ConfigMap ``name`` in ``namespace`` per sample, creating it first:
    a write that needs etcd's quorum like any other, without adding an object per sample."""

    def __init__(self, name: str, cluster: Cluster, namespace: str, object_name: str, timeout_seconds: float = 2.0,
                 **kwargs) -> None:
        super().__init__(name, **kwargs)
        self.core = client.CoreV1Api(cluster.new_api())
        self.namespace, self.object_name, self.timeout_seconds = namespace, object_name, timeout_seconds
        self.sequence = 0

    def sample(self) -> Sample:
        self.sequence += 1
        started = time.time()
        body = {"data": {"sequence": str(self.sequence), "written_at": repr(started)}}
        try:
            try:
                self.core.patch_namespaced_config_map(self.object_name, self.namespace, body,
                                                      _request_timeout=self.timeout_seconds)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                self.core.create_namespaced_config_map(
                    self.namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=self.object_name), **body),
                    _request_timeout=self.timeout_seconds)
        except Exception as exc:
            return failed(started, exc)
        return Sample(t=started, ok=True, latency_seconds=time.time() - started, detail="updated")


class _InDrillNamespace:
    """A probe kind of a data-only scenario that reads or writes in the drill's namespace and
    takes no field of its own (harness/probes/__init__.py)."""

    in_probe_pod = False
    required = ()
    fields: dict = {}


class ApiRead(_InDrillNamespace):
    """Probe kind ``api-read``: a consistent LIST of ConfigMaps in the drill's namespace every
    interval (:class:`ApiReadProbe`: served from etcd by quorum)."""

    kind = "api-read"

    @classmethod
    def for_scenario(cls, spec: dict, context) -> ApiReadProbe:
        return ApiReadProbe(spec["name"], context.cluster, context.namespace,
                            interval_seconds=context.interval_seconds, max_seconds=context.max_seconds)


class ApiWrite(_InDrillNamespace):
    """Probe kind ``api-write``: an UPDATE of one ConfigMap in the drill's namespace every
    interval (:class:`ApiUpdateProbe`, ConfigMap ``kdrill-write-<probe name>``, created by the
    first sample, deleted with the namespace): a write that goes through admission (every
    webhook that matches ConfigMap UPDATE there) and needs etcd's quorum."""

    kind = "api-write"

    @classmethod
    def for_scenario(cls, spec: dict, context) -> ApiUpdateProbe:
        return ApiUpdateProbe(spec["name"], context.cluster, context.namespace, f"kdrill-write-{spec['name']}",
                              interval_seconds=context.interval_seconds, max_seconds=context.max_seconds)
