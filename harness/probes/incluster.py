"""In-cluster probe: a pod running ``kdrill-probe`` (toolbox image) that calls targets from
inside the cluster at a fixed rate and logs one JSON line per result. The harness reads the log
through the API afterwards, so the measurement is made where the failure happens and survives
a control-plane outage (the log stays on the node until the API answers again).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from harness.core.timeline import Sample, Timeline
from harness.core.waiting import wait_until_or_raise
from harness.kube.providers import Cluster
from harness.kube.workloads import TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY
from harness.spec.scenario import PROBE_POD_MAX_REQUESTS

# Thread start-up and scheduling on a loaded 2-core node, on top of a call's own timeout.
LATE_SLACK_SECONDS = 0.25


@dataclass
class InClusterProbe:
    """``targets``: name -> URL. Bounded by ``duration_seconds`` and ``max_requests``."""

    cluster: Cluster
    namespace: str
    name: str
    targets: dict[str, str]
    interval_seconds: float = 0.5
    duration_seconds: float = 300
    max_requests: int = PROBE_POD_MAX_REQUESTS
    timeout_seconds: float = 1.0
    node: str | None = None
    dns_config: dict | None = None
    # The pod's node's clock minus the host's (seconds): its samples are put on the host's clock.
    clock_offset_seconds: float = 0.0
    started: bool = field(default=False, init=False)

    def pod_manifest(self) -> client.V1Pod:
        args = ["--interval", str(self.interval_seconds), "--duration", str(self.duration_seconds),
                "--max-requests", str(self.max_requests), "--timeout", str(self.timeout_seconds)]
        args += [f"{k}={v}" for k, v in self.targets.items()]
        spec = client.V1PodSpec(
            restart_policy="Never",
            node_name=self.node,
            active_deadline_seconds=int(self.duration_seconds) + 120,
            termination_grace_period_seconds=1,
            containers=[client.V1Container(name="probe", image=TOOLBOX_IMAGE, image_pull_policy=TOOLBOX_PULL_POLICY,
                                           command=["kdrill-probe"], args=args)],
        )
        if self.dns_config:
            spec.dns_config = client.V1PodDNSConfig(**self.dns_config)
        return client.V1Pod(metadata=client.V1ObjectMeta(name=self.name, labels={"kdrill.io/role": "probe"}),
                            spec=spec)

    def start(self, timeout_seconds: float = 120) -> "InClusterProbe":
        """Create the probe pod and wait until it runs. Raises ConditionTimeout."""
        self.cluster.core.create_namespaced_pod(self.namespace, self.pod_manifest())
        self.started = True

        def running():
            pod = self.cluster.core.read_namespaced_pod(self.name, self.namespace, _request_timeout=5)
            return pod.status.phase == "Running"

        wait_until_or_raise(running, timeout_seconds, description=f"probe pod {self.name} running")
        return self

    def results(self, since: float | None = None) -> list[dict]:
        """Every JSON line the probe logged so far (including the final ``done`` line), or those
        logged since ``since`` (epoch seconds; the kubelet filters by whole seconds)."""
        kwargs = {"since_seconds": max(1, int(time.time() - since) + 2)} if since is not None else {}
        text = self.cluster.core.read_namespaced_pod_log(self.name, self.namespace, _request_timeout=30, **kwargs)
        lines = []
        for line in text.splitlines():
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return lines

    def timelines(self, prefix: str = "", since: float | None = None) -> dict[str, Timeline]:
        """One Timeline per target, named ``<prefix><target>`` (samples from ``since`` on, epoch
        seconds, when given)."""
        out: dict[str, Timeline] = {}
        for r in self.results(since):
            if r.get("done"):
                continue
            t = r["t"] - self.clock_offset_seconds
            if since is not None and t < since:
                continue
            tl = out.setdefault(r["target"], Timeline(prefix + r["target"]))
            detail = r.get("error") or f"HTTP {r.get('status')}"
            # kdrill-probe bounds the HTTP part by the timeout, not the lookup (getaddrinfo has no
            # timeout): a call that answered only after its budget is a failure for its client.
            late = r["ok"] and (r.get("latency_seconds") or 0) > self.timeout_seconds + LATE_SLACK_SECONDS
            if late:
                detail = f"took {r['latency_seconds']:.2f} s, over the {self.timeout_seconds} s timeout ({detail})"
            labels = {"target": r["target"]}
            if r.get("resolve_seconds") is not None:
                labels["resolve_seconds"] = str(r["resolve_seconds"])
            tl.add(Sample(t=t, ok=r["ok"] and not late, latency_seconds=r.get("latency_seconds"), detail=detail, labels=labels))
        return {prefix + k: v for k, v in out.items()}

    def delete(self) -> None:
        if self.started:
            try:
                self.cluster.core.delete_namespaced_pod(self.name, self.namespace, grace_period_seconds=0,
                                                        _request_timeout=10)
            except client.exceptions.ApiException as exc:
                if exc.status != 404:
                    raise


class InClusterHttp:
    """Probe kind ``incluster-http`` of a data-only scenario: calls to the runner's built-in HTTP
    server's Service, by name or by ClusterIP (``target``), or to each of its pods by pod IP
    (``pod-ips``: the pod network alone, no kube-proxy, no DNS; the pods as they are when the probe
    starts, one target each, measured as one timeline), or by name to a Service the scenario
    declares (``target: {service, port}``), or to one pod of it (``pod``: a StatefulSet's pod
    under its headless Service, ``<pod>.<service>``). Every such probe of a scenario is one
    target of the runner's single in-cluster probe pod (:class:`InClusterProbe`), which the
    runner starts and proves healthy itself: no ``for_scenario``."""

    kind = "incluster-http"
    in_probe_pod = True
    required = ("target",)
    fields = {"target": {"anyOf": [{"enum": ["name", "clusterip", "pod-ips"]}, {
        "type": "object", "additionalProperties": False, "required": ["service", "port"],
        "properties": {"service": {"type": "string", "pattern": "^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"},
                       "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                       "pod": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"}}}],
        "x-expected": "name, clusterip, pod-ips, or {service: a Service the manifests make, port, pod (optional)}"}}

# Between a pod-ips probe's name and a pod's in the probe pod's target names.
POD_TARGET_SEPARATOR = "@"


def probe_pod_urls(wanted: dict[str, Any], service_urls: dict[str, str], namespace: str) -> dict[str, str]:
    """The probe pod's targets for the ``incluster-http`` and ``incluster-dns`` probes ``wanted``
    (probe name -> its ``target``), given :func:`service_targets`' ``service_urls``: one target
    per probe, but one per pod for a ``pod-ips`` probe, named ``<probe>@<pod>``. Raises
    ValueError when a ``pod-ips`` probe has no pod to call."""
    urls: dict[str, str] = {}
    for name, target in wanted.items():
        if isinstance(target, dict):
            urls[name] = declared_service_url(target, namespace)
        elif target == "pod-ips":
            pods = {k.removeprefix("pod-"): url for k, url in service_urls.items() if k.startswith("pod-")}
            if not pods:
                raise ValueError(f"probe {name}: the Service has no pod with an IP to call")
            urls.update({f"{name}{POD_TARGET_SEPARATOR}{pod}": url for pod, url in sorted(pods.items())})
        else:
            urls[name] = service_urls[target]
    return urls


def merge_pod_timelines(timelines: dict[str, Timeline], wanted: dict[str, Any]) -> dict[str, Timeline]:
    """``timelines`` with each ``pod-ips`` probe's per-pod timelines (``<probe>@<pod>``) merged into
    one named after the probe, in time order (each sample keeps its pod in ``labels["target"]``),
    and the per-pod ones removed."""
    out = dict(timelines)
    for name, target in wanted.items():
        if target != "pod-ips":
            continue
        prefix = f"{name}{POD_TARGET_SEPARATOR}"
        merged = Timeline(name)
        samples = [s for key in sorted(k for k in timelines if k.startswith(prefix)) for s in out.pop(key).samples()]
        for sample in sorted(samples, key=lambda s: s.t):
            merged.add(sample)
        out[name] = merged
    return out


def declared_service_url(target: dict, namespace: str) -> str:
    """The URL an ``incluster-http`` probe calls for ``target: {service, port, pod}``, by its
    fully qualified name with a trailing dot (one lookup, no search-list expansion)."""
    host = f"{target['pod']}.{target['service']}" if target.get("pod") else target["service"]
    return f"http://{host}.{namespace}.svc.cluster.local.:{target['port']}/"


class InClusterDns:
    """Probe kind ``incluster-dns`` of a data-only scenario: lookups of the runner's Service's
    name from the runner's probe pod, as its resolver makes them (the pod's ``ndots``, search
    path and CoreDNS). It is a target of the probe pod like a by-name call, and its samples say
    whether the *name resolved* (:func:`lookups`), whatever the HTTP call after it did: a call
    that fails on a dropped endpoint is a good lookup, one that fails to resolve is not. Only the
    drill's own Service is looked up, so no query leaves the cluster."""

    kind = "incluster-dns"
    in_probe_pod = True
    required = ()
    fields: dict = {}


def lookups(timeline: Timeline, name: str, budget_seconds: float) -> Timeline:
    """The lookups in an in-cluster probe's by-name ``timeline``, as the timeline ``name``: ok
    when the name resolved within ``budget_seconds`` (the probe logs how long getaddrinfo took),
    latency the lookup's seconds. A lookup that resolved only later is a failure, as a late call
    is (with CoreDNS gone, the resolver waits its 5 s timeout and asks again: lookups made just
    before CoreDNS returned resolved 5.0 s later, measured); one that failed keeps its error
    ("dns: ...")."""
    out = Timeline(name)
    for sample in timeline.samples():
        seconds = float(sample.labels["resolve_seconds"]) if "resolve_seconds" in sample.labels else None
        if seconds is None:
            ok, detail = False, sample.detail
        elif seconds > budget_seconds:
            ok, detail = False, f"resolved only after {seconds:.2f} s, over the {budget_seconds:.2f} s budget"
        else:
            ok, detail = True, f"resolved in {seconds:.3f} s"
        out.add(Sample(t=sample.t, ok=ok, latency_seconds=seconds if seconds is not None else sample.latency_seconds,
                       detail=detail, labels={"target": name}))
    return out


def service_targets(cluster: Cluster, namespace: str, service: str, selector: str) -> dict[str, str]:
    """The three ways a client in the cluster reaches a Service's pods, as probe targets:
    ``name`` (through CoreDNS, as an absolute name so the pod's search list, and with it any
    query CoreDNS would forward off the cluster, is never used), ``clusterip`` (kube-proxy only)
    and ``pod-<pod name>`` for each pod that has an IP (the pod network only). Raises ApiException."""
    svc = cluster.core.read_namespaced_service(service, namespace, _request_timeout=5)
    port = svc.spec.ports[0]
    targets = {"name": f"http://{service}.{namespace}.svc.cluster.local.:{port.port}/",
               "clusterip": f"http://{svc.spec.cluster_ip}:{port.port}/"}
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=selector, _request_timeout=5).items
    targets.update({f"pod-{p.metadata.name}": f"http://{p.status.pod_ip}:{port.target_port}/" for p in pods
                    if p.status.pod_ip})
    return targets
