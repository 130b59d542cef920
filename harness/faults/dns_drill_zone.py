"""Fault ``dns-drill-zone``: make CoreDNS answer a zone of the drill's own (``example.com``).

Method ``corefile-drill-zone``: a server block for the drill zone (and any search domain a pod
inherits from its node, which CoreDNS would otherwise forward upstream) is appended to the
``coredns`` ConfigMap's Corefile, the original saved in the ledger first; revert puts it back
byte for byte and waits until no kube-dns pod serves the zone. It lets a drill look up a name
that is not a cluster name (so the search list is tried, as ndots says) without any query
leaving the cluster.

Source: "Customizing DNS Service" (kubernetes.io: the coredns ConfigMap, server blocks) and
CoreDNS's ``template`` and ``reload`` plugins (coredns.io/plugins/template, /reload).
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from harness.components import dns
from harness.core.waiting import wait_until
from harness.faults import Fault, FaultNotReverted
from harness.kube.providers import Cluster

# reload checks every 30 s +/- 15 s (coredns.io/plugins/reload), after the kubelet has synced the
# ConfigMap volume (its periodic pod sync, 1 min by default, which the pod annotation hurries).
RELOAD_TIMEOUT_SECONDS = 300.0
SYNC_ANNOTATION = "kdrill.io/dns-drill-zone"


class DrillZone(Fault):
    """Make CoreDNS authoritative for ``zones`` (the drill zone, e.g. ``example.com``, and any
    search domain a pod inherits from its node) by appending a server block to the ``coredns``
    ConfigMap's Corefile; revert puts the saved original Corefile back byte for byte.

    CoreDNS's ``reload`` plugin reloads a changed Corefile within its interval (30 s +/- 15 s);
    the kubelet refreshes a ConfigMap volume when it next syncs the pod (up to a minute), so
    inject and revert annotate the kube-dns pods (``kdrill.io/dns-drill-zone``): a pod update makes
    the kubelet sync the pod, and its volume, at once. Revert removes the annotation.

    Revert also waits (up to ``RELOAD_TIMEOUT_SECONDS``) until no Ready kube-dns pod serves the
    drill zones any more, and verify checks it.
    """

    kind = "dns-drill-zone"
    method = "corefile-drill-zone"
    step = "drill-zone"

    def __init__(self, cluster: Cluster, zones: list[str], answers: dict[str, str],
                 original_corefile: str | None = None, drill_corefile: str | None = None) -> None:
        super().__init__(cluster)
        self.zones = [dns.fqdn(z) for z in zones]
        self.answers = {dns.fqdn(k): v for k, v in answers.items()}
        self.original_corefile, self.drill_corefile = original_corefile, drill_corefile

    def target(self) -> dict[str, Any]:
        return {"step": self.step, "method": self.method,
                "configmap": f"{dns.COREDNS_NAMESPACE}/{dns.COREDNS_CONFIGMAP}", "zones": self.zones,
                "answers": self.answers, "original_corefile": self.original_corefile,
                "drill_corefile": self.drill_corefile, "annotation": SYNC_ANNOTATION}

    def where(self) -> list[Any]:
        return [f"configmap {dns.COREDNS_NAMESPACE}/{dns.COREDNS_CONFIGMAP}: zones {' '.join(self.zones)}"]

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> DrillZone:
        return cls(cluster, zones=target["zones"], answers=target["answers"],
                   original_corefile=target.get("original_corefile"), drill_corefile=target.get("drill_corefile"))

    def _set_corefile(self, corefile: str) -> None:
        self.cluster.core.patch_namespaced_config_map(dns.COREDNS_CONFIGMAP, dns.COREDNS_NAMESPACE,
                                                      {"data": {"Corefile": corefile}}, _request_timeout=10)

    def _annotate_pods(self, value: str | None) -> None:
        """Set (or, with None, remove) the sync annotation on every kube-dns pod that needs it."""
        for pod in dns.coredns_pods(self.cluster, ready_only=False):
            has = SYNC_ANNOTATION in (pod.metadata.annotations or {})
            if value is None and not has:
                continue
            try:
                self.cluster.core.patch_namespaced_pod(pod.metadata.name, dns.COREDNS_NAMESPACE,
                                                       {"metadata": {"annotations": {SYNC_ANNOTATION: value}}},
                                                       _request_timeout=10)
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def inject(self) -> None:
        original = dns.read_corefile(self.cluster)
        drill = dns.with_drill_zone(original, dns.drill_zone_block(self.zones, self.answers))
        self.original_corefile, self.drill_corefile = original, drill
        # The original Corefile is in the ledger before the ConfigMap changes.
        self.checkpoint()
        self._set_corefile(drill)
        self._annotate_pods(str(int(time.time())))

    def served_everywhere(self) -> bool:
        """Every Ready kube-dns pod runs a configuration with the ``template`` plugin in every
        drill zone (``coredns_plugin_enabled``): the zone is answered by CoreDNS itself."""
        scraped = dns.scrape_all(self.cluster)
        return bool(scraped) and all(set(self.zones) <= dns.served_zones(s, "template") for s in scraped.values())

    def served_anywhere(self) -> list[str]:
        """Ready kube-dns pods whose running configuration still serves a drill zone."""
        return [pod for pod, samples in dns.scrape_all(self.cluster).items()
                if set(self.zones) & dns.served_zones(samples, "template")]

    def revert(self) -> None:
        if self.original_corefile is not None and dns.read_corefile(self.cluster) != self.original_corefile:
            self._set_corefile(self.original_corefile)
        self._annotate_pods(None)
        if self.original_corefile is not None:
            wait_until(lambda: not self.served_anywhere(), RELOAD_TIMEOUT_SECONDS, interval_seconds=1.0,
                       description="drill zone no longer served")

    def verify_reverted(self) -> None:
        if self.original_corefile is not None and dns.read_corefile(self.cluster) != self.original_corefile:
            raise FaultNotReverted("the coredns ConfigMap's Corefile differs from the saved original")
        marked = [p.metadata.name for p in dns.coredns_pods(self.cluster, ready_only=False)
                  if SYNC_ANNOTATION in (p.metadata.annotations or {})]
        if marked:
            raise FaultNotReverted(f"kube-dns pods still annotated {SYNC_ANNOTATION}: {marked}")
        serving = self.served_anywhere()
        if serving:
            raise FaultNotReverted(f"kube-dns pods still serve the drill zone {self.zones}: {serving}")
