"""Fault ``webhook-backend-down``: the Service behind an installed admission webhook is made to
select no pod (``refused``) or a black-hole pod (``blackhole``), keeping the webhook's own pods,
Deployment and configuration as the platform installed them.

For a webhook kdrill did not install (a policy engine's, a team's own), found by
:func:`harness.components.admission.discover`: the generic ``service-blackhole`` fault on its
Service, under a kind of its own so the scenario's parameters are the drill's, not a Service's
name. ``refused``: the Service's selector gets a label no pod has, its EndpointSlices list no
endpoint, and kube-proxy rejects new connections to its ClusterIP at once. ``blackhole``: the
selector is replaced by a black-hole pod's labels (``kdrill-webhook --mode blackhole`` in the
webhook's namespace, made by the drill and removed after it), which accepts connections and never
answers, so each call waits for the webhook's ``timeoutSeconds``. The revert puts the recorded
selector back and waits for a ready endpoint (see :mod:`harness.faults.service_blackhole`).

A selector change alone stops *new* connections only: kube-apiserver keeps its connections to a
webhook open (keep-alive) and they stay with the backend's pods through the node's connection
tracking (:mod:`harness.components.conntrack`; measured: Gatekeeper's webhook went on answering
every call with its EndpointSlices empty). So, with node access, the fault then cuts every
connection a control-plane node itself (its host network namespace: kube-apiserver) holds to the
Service's ClusterIP that leads to one of its endpoints from before the fault (``ss -K``:
kube-apiserver sees it aborted, as when the pods die), in rounds, for as long as kube-proxy may
still send a reconnection to an old endpoint (CUT_SETTLE_SECONDS) and until a round finds none,
within CUT_DEADLINE_SECONDS. ``evidence()["connections_cut"]`` says how many, per node,
or why none could be (no node access: then a backend with open connections may go on answering,
and the drill's outage does not show).

The revert is a Service UPDATE in the webhook's namespace: a webhook whose own rules would send
that write to itself with ``failurePolicy: Fail`` would block its own repair (the deadlock the
documentation warns about), so the drill refuses to take such a backend down and reports why.

Source: "Dynamic Admission Control"
(https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/:
failure policy, timeouts, avoiding deadlocks in self-hosted webhooks).
"""

from __future__ import annotations

import time
from typing import Any

from harness.components import conntrack
from harness.faults.service_blackhole import ServiceBlackhole
from harness.kube.providers import Cluster
from harness.kube.workloads import endpoint_addresses
from harness.spec.params import Param

MODES = ("refused", "blackhole")
# The cut goes on in rounds CUT_INTERVAL_SECONDS apart for at least CUT_SETTLE_SECONDS, until a
# round finds no connection to an old pod, and at most CUT_DEADLINE_SECONDS. The settle time is a
# bound on kube-proxy applying the endpoint change (its minSyncPeriod, 1 s by default, after the
# EndpointSlice update), with margin: kube-apiserver's reconnections before then may still be
# sent to an old pod, and are cut in the next round. On this machine every one was found in the
# first round, 1.6 to 1.8 s after the cut began (12 drill cases on Gatekeeper; last_found_seconds).
CUT_SETTLE_SECONDS = 3.0
CUT_DEADLINE_SECONDS = 10.0
CUT_INTERVAL_SECONDS = 0.5


class WebhookBackendDown(ServiceBlackhole):
    """Take the webhook backend Service ``namespace/name`` down; ``reroute_to`` (the black-hole
    pod's labels) for ``blackhole``, none for ``refused``."""

    kind = "webhook-backend-down"
    # Driven by the webhook-blast-radius drill, which discovers each webhook's Service: not built
    # from a data-only scenario's params (ServiceBlackhole's for_scenario reads service_name).
    for_scenario = None
    node_access_optional = "cuts kube-apiserver's open connections to the backend's old pods"
    params = {
        "mode": Param("choice", "how each discovered webhook's backend fails", choices=MODES),
        "onset_deadline_seconds": Param("seconds", "how long a write the configuration says is rejected may "
                                        "still be admitted after the fault, before the outage counts as not shown",
                                        minimum=5, maximum=120),
        "recovery_deadline_seconds": Param("seconds", "how long after the revert every write may take to be "
                                           "admitted again", minimum=5, maximum=120),
    }

    def __init__(self, cluster: Cluster, namespace: str, name: str, original_selector: dict[str, str] | None = None,
                 blackhole_selector: dict[str, str] | None = None, reroute_to: dict[str, str] | None = None) -> None:
        super().__init__(cluster, namespace, name, original_selector, blackhole_selector, reroute_to)
        self.method = "blackhole-pod-selector" if reroute_to else "selector-to-no-pod"
        self.connections_cut: dict[str, Any] = {}

    @classmethod
    def acts_on(cls, params: dict[str, Any]) -> list[tuple[str, str, str, str | None]]:
        return []  # discovered in the cluster when the drill runs

    @classmethod
    def selects_pods(cls, params: dict[str, Any]) -> list[tuple[str, str, str | None]]:
        return []

    def inject(self) -> None:
        """The selector change (see ServiceBlackhole.inject), then the cut of the control-plane
        nodes' connections to the backend's pods (module doc). Raises FaultError as the selector
        change does; a failed cut is recorded, not raised (the selector is in place)."""
        service = self.cluster.core.read_namespaced_service(self.name, self.namespace, _request_timeout=10)
        backends = endpoint_addresses(self.cluster, self.namespace, self.name)
        super().inject()
        tcp = [p.port for p in service.spec.ports or [] if (p.protocol or "TCP") == "TCP"]
        self.connections_cut = self._cut(service.spec.cluster_ip, tcp, backends)

    def _cut(self, cluster_ip: str | None, ports: list[int], backends: set[str]) -> dict[str, Any]:
        nodes = self.cluster.nodes_by_role.get("control-plane", [])
        if not self.cluster.node_access_gives("exec") or not nodes or not cluster_ip or cluster_ip == "None":
            why = ("no node access" if not self.cluster.node_access_gives("exec") else
                   "no control-plane node known" if not nodes else "the Service has no ClusterIP")
            return {"cut": None, "why": f"{why}: connections kube-apiserver holds open to the backend's pods "
                    "were left (a backend that keeps them may go on answering)"}
        cut = {node: 0 for node in nodes}
        started = time.monotonic()
        rounds, last_found, left = 0, None, {}
        try:
            while True:
                rounds, left = rounds + 1, {}
                for node in nodes:
                    for port in ports:
                        own = conntrack.host_sockets(self.cluster, node, cluster_ip, port)
                        stale = [(f.client, f.client_port) for f in conntrack.flows_through(
                                 self.cluster, node, cluster_ip, port)
                                 if f.backend in backends and (f.client, f.client_port) in own]
                        if stale:
                            cut[node] += conntrack.cut(self.cluster, node, cluster_ip, port, stale)
                            left[node] = left.get(node, 0) + len(stale)
                elapsed = time.monotonic() - started
                if left:
                    last_found = elapsed
                # Done once a round finds none and kube-proxy has had time to apply the change
                # (a reconnection before that may still be sent to an old pod).
                if (not left and elapsed >= CUT_SETTLE_SECONDS) or elapsed >= CUT_DEADLINE_SECONDS:
                    break
                time.sleep(CUT_INTERVAL_SECONDS)
        except Exception as exc:  # the selector is changed already: the revert must still run
            return {"cut": cut, "rounds": rounds, "why": f"cutting stopped: {exc}"}
        result: dict[str, Any] = {"cut": cut, "backends": sorted(backends), "rounds": rounds,
                                  "last_found_seconds": round(last_found, 3) if last_found is not None else None}
        if left:
            result["why"] = f"connections to the old endpoints still found after {CUT_DEADLINE_SECONDS:.0f} s: {left}"
        return result

    def evidence(self) -> dict[str, Any]:
        """ServiceBlackhole's evidence and ``connections_cut``: {"cut": {node: sockets destroyed}
        or None, "backends": the endpoint IPs before the fault, "rounds", "last_found_seconds":
        when, after the cut began, a connection to an old pod was last found (seconds), "why":
        when not every connection to them could be cut}."""
        return {**super().evidence(), "connections_cut": self.connections_cut}

