"""A Service's ready endpoints through the API (EndpointSlices), sampled: how many backends
kube-proxy is told to use, which is what changes when the control plane marks pods NotReady.

Source: Kubernetes "EndpointSlices" (https://kubernetes.io/docs/concepts/services-networking/endpoint-slices/).
"""

from __future__ import annotations

import time

from kubernetes import client

from harness.core.timeline import Sample
from harness.kube.providers import Cluster
from harness.probes import Probe


class EndpointReadyProbe(Probe):
    """Count the ready endpoints of ``namespace/service``; ``labels["ready"]`` holds the count.
    A sample is ok when the API answered."""

    def __init__(self, name: str, cluster: Cluster, namespace: str, service: str, timeout_seconds: float = 2.0,
                 **kwargs) -> None:
        super().__init__(name, **kwargs)
        self.discovery = client.DiscoveryV1Api(cluster.new_api())
        self.namespace, self.service, self.timeout_seconds = namespace, service, timeout_seconds

    def sample(self) -> Sample:
        started = time.time()
        slices = self.discovery.list_namespaced_endpoint_slice(
            self.namespace, label_selector=f"kubernetes.io/service-name={self.service}",
            _request_timeout=self.timeout_seconds).items
        ready = sum(1 for s in slices for e in s.endpoints or [] if e.conditions and e.conditions.ready)
        return Sample(t=started, ok=True, latency_seconds=time.time() - started, detail=f"{ready} ready",
                      labels={"ready": str(ready)})
