"""Fault ``dns-saturation``: starve CoreDNS (one replica, a tight CPU limit) and flood it.

Method ``limit-and-flood``: the ``coredns`` Deployment in ``kube-system`` is patched to
``replicas`` replicas whose ``coredns`` container has CPU request = limit = ``cpu_limit``, and
load-generator pods run ``dnsperf`` against the kube-dns ClusterIP at ``qps`` queries per second,
bounded by ``-l`` (seconds) and ``-n`` (runs through the query file) so the load stops by itself.
The query names are cluster names (``*.cluster.local``), answered by the ``kubernetes`` plugin: no
query leaves the cluster. Revert deletes the load pods and puts the saved Deployment spec back
exactly, then waits until the original number of replicas is rolled out and Ready.

The drill also needs a zone served by CoreDNS itself (``example.com``) for its ndots lookups; that
change to the ``coredns`` ConfigMap is the :class:`DrillZone` step, recorded in the ledger under
the same kind (``step: drill-zone``) so ``kdrill recover`` finds this module for both.

Behaviour exercised: "DNS for Services and Pods" and "Debugging DNS Resolution" (kubernetes.io):
pods resolve Service names through the kube-dns Service; with CoreDNS saturated, name-based
calls fail or slow down for every Service at once while calls by ClusterIP need no DNS.
"""

from __future__ import annotations

import copy
import math
import time
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.components import dns
from harness.expectations import wait_until
from harness.faults import Fault, FaultError, FaultNotReverted
from harness.params import Param
from harness.providers import Cluster
from harness.workloads import TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY

# Deadlines on platform paths, not expectations: how long to wait before calling a setup or a
# revert failed. Both sit well above the slowest seen on this 2-core machine, because a fresh,
# loaded machine is slower than a warm one (a fixed 120 s deadline on another path failed there).
ROLLOUT_TIMEOUT_SECONDS = 300.0
# reload checks every 30 s +/- 15 s (coredns.io/plugins/reload), after the kubelet has synced the
# ConfigMap volume (its periodic pod sync, 1 min by default, which the pod annotation hurries).
RELOAD_TIMEOUT_SECONDS = 300.0
LOAD_LABEL = "kdrill.io/dns-load"
SYNC_ANNOTATION = "kdrill.io/dns-drill-zone"
# On the coredns Deployment while it is limited: a second inject must not save a limited spec as
# the "original" (an earlier run killed before its revert, and kdrill recover not run yet).
LIMITED_ANNOTATION = "kdrill.io/dns-saturation"


def _sanitize(obj: Any) -> Any:
    return client.ApiClient().sanitize_for_serialization(obj)


def _not_found(exc: ApiException) -> bool:
    return exc.status == 404


def rollout_done(deployment: client.V1Deployment, replicas: int) -> bool:
    """The Deployment controller has acted on the current spec and runs exactly ``replicas``
    updated, Ready and available pods (old ReplicaSets scaled to zero)."""
    s = deployment.status
    return (s.observed_generation or 0) >= (deployment.metadata.generation or 0) and all(
        (v or 0) == replicas for v in (s.replicas, s.updated_replicas, s.ready_replicas, s.available_replicas))


class DnsSaturation(Fault):
    """Limit CoreDNS to ``replicas`` x ``cpu_limit`` and flood it from ``load_pods`` pods in
    ``namespace`` for ``load_seconds`` at ``qps`` in total.

    ``query_names``: cluster names (FQDNs under a zone the ``kubernetes`` plugin answers) dnsperf
    asks for, type A. ``original_spec`` (the Deployment spec before the fault, as API JSON) is
    saved into the ledger before anything changes.
    """

    kind = "dns-saturation"
    params = {
        "replicas": Param("integer", "CoreDNS replicas during the flood", minimum=1, maximum=10),
        "cpu_limit": Param("quantity", "CoreDNS's CPU limit during the flood"),
        "qps": Param("integer", "queries per second the load sends", minimum=1, maximum=5000),
        "clients": Param("integer", "dnsperf clients", minimum=1, maximum=64),
        "max_outstanding": Param("integer", "dnsperf's outstanding queries", minimum=1, maximum=10000),
        "query_timeout_seconds": Param("seconds", "dnsperf's per-query timeout", minimum=0.1, maximum=30),
        "load_seconds": Param("seconds", "how long the flood lasts", minimum=5, maximum=300),
        "load_pods": Param("integer", "load generator pods", minimum=1, maximum=4),
    }
    method = "limit-and-flood"
    step = "saturate"

    def __init__(self, cluster: Cluster, namespace: str, query_names: list[str], replicas: int = 1,
                 cpu_limit: str = "30m", qps: int = 1500, clients: int = 8, max_outstanding: int = 3000,
                 query_timeout_seconds: float = 3.0, load_seconds: float = 40.0, load_pods: int = 1,
                 original_spec: dict | None = None, load_pod_names: list[str] | None = None) -> None:
        super().__init__(cluster)
        if not query_names:
            raise FaultError("dns-saturation needs query names")
        self.namespace, self.query_names = namespace, [dns.fqdn(n) for n in query_names]
        self.replicas, self.cpu_limit, self.qps, self.clients = int(replicas), str(cpu_limit), int(qps), int(clients)
        self.max_outstanding, self.query_timeout_seconds = int(max_outstanding), float(query_timeout_seconds)
        self.load_seconds, self.load_pods = float(load_seconds), int(load_pods)
        self.original_spec = original_spec
        self.load_pod_names = list(load_pod_names or [f"dns-load-{i}" for i in range(self.load_pods)])
        self.limited_at: float | None = None
        self.flood_started_at: float | None = None
        self.revert_started_at: float | None = None
        self.rollout_seconds: float | None = None

    # -- ledger ---------------------------------------------------------------------------

    def target(self) -> dict[str, Any]:
        return {"step": self.step, "method": self.method,
                "deployment": f"{dns.COREDNS_NAMESPACE}/{dns.COREDNS_DEPLOYMENT}",
                "namespace": self.namespace, "query_names": self.query_names, "replicas": self.replicas,
                "cpu_limit": self.cpu_limit, "qps": self.qps, "clients": self.clients,
                "max_outstanding": self.max_outstanding, "query_timeout_seconds": self.query_timeout_seconds,
                "load_seconds": self.load_seconds, "load_pods": self.load_pods,
                "load_pod_names": self.load_pod_names, "original_spec": self.original_spec}

    def where(self) -> list[Any]:
        return [f"deployment {dns.COREDNS_NAMESPACE}/{dns.COREDNS_DEPLOYMENT}",
                f"load pods {self.namespace}/{','.join(self.load_pod_names)}"]

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> Fault:
        if target.get("step") == DrillZone.step:
            return DrillZone.from_target(cluster, target)
        return cls(cluster, namespace=target["namespace"], query_names=target["query_names"],
                   replicas=target["replicas"], cpu_limit=target["cpu_limit"], qps=target["qps"],
                   clients=target["clients"], max_outstanding=target["max_outstanding"],
                   query_timeout_seconds=target["query_timeout_seconds"], load_seconds=target["load_seconds"],
                   load_pods=target["load_pods"], original_spec=target.get("original_spec"),
                   load_pod_names=target.get("load_pod_names"))

    # -- inject ---------------------------------------------------------------------------

    def limit_patch(self) -> dict[str, Any]:
        """Strategic merge patch: replicas, and CPU request = limit (a request above the limit
        is invalid) on the coredns container."""
        cpu = {"cpu": self.cpu_limit}
        return {"metadata": {"annotations": {LIMITED_ANNOTATION: f"{self.replicas} x {self.cpu_limit}"}},
                "spec": {"replicas": self.replicas, "template": {"spec": {"containers": [
            {"name": dns.COREDNS_CONTAINER, "resources": {"limits": cpu, "requests": cpu}}]}}}}

    def dnsperf_args(self, server: str, qps: int | None = None, seconds: float | None = None) -> list[str]:
        """dnsperf bounded in time (``-l``) and count (``-n`` runs through the query file); ``qps``
        and ``seconds`` per pod default to the fault's share and ``load_seconds``."""
        qps = qps if qps is not None else max(1, self.qps // max(1, self.load_pods))
        seconds = seconds if seconds is not None else self.load_seconds
        runs = math.ceil(qps * seconds / len(self.query_names)) + 1
        return ["dnsperf", "-s", server, "-d", "/tmp/queries", "-l", f"{seconds:g}", "-n", str(runs),
                "-Q", str(qps), "-c", str(self.clients), "-q", str(self.max_outstanding),
                "-t", f"{self.query_timeout_seconds:g}", "-S", "1"]

    def load_pod(self, name: str, server: str, qps: int | None = None, seconds: float | None = None) -> client.V1Pod:
        """A load-generator pod; with ``qps``/``seconds`` a smaller run of the same queries (the
        drill's check, before the flood, that none of them is forwarded upstream)."""
        seconds = seconds if seconds is not None else self.load_seconds
        queries = [f"{n} A" for n in self.query_names]
        script = 'printf "%s\\n" "$@" > /tmp/queries && exec ' + " ".join(self.dnsperf_args(server, qps, seconds))
        return client.V1Pod(
            metadata=client.V1ObjectMeta(name=name, labels={LOAD_LABEL: "true", "kdrill.io/role": "load"}),
            spec=client.V1PodSpec(
                restart_policy="Never",
                # A second bound besides dnsperf's own: the kubelet kills the pod after this.
                active_deadline_seconds=int(seconds) + 60,
                termination_grace_period_seconds=0,
                containers=[client.V1Container(name="dnsperf", image=TOOLBOX_IMAGE, image_pull_policy=TOOLBOX_PULL_POLICY,
                                               command=["sh", "-c", script, "sh", *queries],
                                               resources=client.V1ResourceRequirements(requests={"cpu": "50m"}))]))

    def inject(self) -> None:
        apps = self.cluster.apps
        deployment = apps.read_namespaced_deployment(dns.COREDNS_DEPLOYMENT, dns.COREDNS_NAMESPACE, _request_timeout=10)
        if LIMITED_ANNOTATION in (deployment.metadata.annotations or {}):
            raise FaultError(f"the coredns Deployment is still limited by an earlier dns-saturation fault "
                             f"(annotation {LIMITED_ANNOTATION}); run `kdrill recover` first")
        self.original_spec = _sanitize(deployment.spec)
        # The original spec is in the ledger before anything changes.
        self.checkpoint()
        apps.patch_namespaced_deployment(dns.COREDNS_DEPLOYMENT, dns.COREDNS_NAMESPACE, self.limit_patch(),
                                         _request_timeout=10)
        started = time.time()
        done = wait_until(lambda: rollout_done(self._deployment(), self.replicas), ROLLOUT_TIMEOUT_SECONDS,
                          interval_seconds=1.0, description="coredns limited rollout")
        if not done.ok:
            raise FaultError(f"coredns did not roll out to {self.replicas} limited replica(s) within "
                             f"{ROLLOUT_TIMEOUT_SECONDS:.0f} s (last error: {done.last_error})")
        self.limited_at = done.became_true_at
        self.rollout_seconds = done.became_true_at - started
        server = dns.kube_dns_cluster_ip(self.cluster)
        self.flood_started_at = time.time()
        for name in self.load_pod_names:
            self.cluster.core.create_namespaced_pod(self.namespace, self.load_pod(name, server), _request_timeout=10)

    def load_finished(self) -> bool:
        """Every load pod has ended (dnsperf stopped by its own bounds) or is gone."""
        for name in self.load_pod_names:
            try:
                pod = self.cluster.core.read_namespaced_pod(name, self.namespace, _request_timeout=5)
            except ApiException as exc:
                if _not_found(exc):
                    continue
                raise
            if pod.status.phase not in ("Succeeded", "Failed"):
                return False
        return True

    def load_logs(self) -> dict[str, str]:
        """Each load pod's log (dnsperf's output), or why it could not be read."""
        out = {}
        for name in self.load_pod_names:
            try:
                out[name] = self.cluster.core.read_namespaced_pod_log(name, self.namespace, _request_timeout=30)
            except ApiException as exc:
                out[name] = f"log unavailable: HTTP {exc.status}"
        return out

    # -- revert ---------------------------------------------------------------------------

    def _deployment(self) -> client.V1Deployment:
        return self.cluster.apps.read_namespaced_deployment(dns.COREDNS_DEPLOYMENT, dns.COREDNS_NAMESPACE,
                                                            _request_timeout=10)

    def _delete_load(self) -> None:
        for name in self.load_pod_names:
            try:
                self.cluster.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0,
                                                        _request_timeout=10)
            except ApiException as exc:
                if not _not_found(exc):
                    raise

    def _load_left(self) -> list[str]:
        left = []
        for name in self.load_pod_names:
            try:
                self.cluster.core.read_namespaced_pod(name, self.namespace, _request_timeout=5)
                left.append(name)
            except ApiException as exc:
                if not _not_found(exc):
                    raise
        return left

    def revert(self) -> None:
        self.revert_started_at = time.time()
        self._delete_load()
        wait_until(lambda: not self._load_left(), 60, description="load pods gone")
        if self.original_spec is None:
            return  # the spec was never read, so nothing was changed

        def restored() -> bool:
            deployment = self._deployment()
            marked = LIMITED_ANNOTATION in (deployment.metadata.annotations or {})
            if not marked and _sanitize(deployment.spec) == self.original_spec:
                return True
            body = _sanitize(deployment)
            body.pop("status", None)
            body["metadata"].pop("managedFields", None)
            body["metadata"].get("annotations", {}).pop(LIMITED_ANNOTATION, None)
            body["spec"] = copy.deepcopy(self.original_spec)
            # replace, not patch: the whole saved spec goes back, fields the fault never touched too.
            # It carries the resourceVersion just read: while the limited rollout is still going,
            # the Deployment controller's status writes make it stale (409 Conflict, seen in CI
            # from `kdrill recover`), so a conflict is "not yet": read again and replace again.
            self.cluster.apps.replace_namespaced_deployment(dns.COREDNS_DEPLOYMENT, dns.COREDNS_NAMESPACE, body,
                                                            _request_timeout=10)
            return True

        done = wait_until(restored, ROLLOUT_TIMEOUT_SECONDS, interval_seconds=0.5, description="coredns spec restored")
        if not done.ok:
            raise FaultError(f"the coredns Deployment's saved spec could not be put back within "
                             f"{ROLLOUT_TIMEOUT_SECONDS:.0f} s (last error: {done.last_error})")
        replicas = int(self.original_spec.get("replicas", 1))
        wait_until(lambda: rollout_done(self._deployment(), replicas), ROLLOUT_TIMEOUT_SECONDS,
                   interval_seconds=1.0, description="coredns original rollout")

    def verify_reverted(self) -> None:
        left = self._load_left()
        if left:
            raise FaultNotReverted(f"load pods still present in {self.namespace}: {left}")
        if self.original_spec is None:
            return
        deployment = self._deployment()
        if LIMITED_ANNOTATION in (deployment.metadata.annotations or {}):
            raise FaultNotReverted(f"the coredns Deployment still carries {LIMITED_ANNOTATION}")
        spec = _sanitize(deployment.spec)
        if spec != self.original_spec:
            changed = sorted(k for k in set(spec) | set(self.original_spec) if spec.get(k) != self.original_spec.get(k))
            raise FaultNotReverted(f"coredns Deployment spec differs from the saved original in {changed}")
        replicas = int(self.original_spec.get("replicas", 1))
        if not rollout_done(deployment, replicas):
            s = deployment.status
            raise FaultNotReverted(f"coredns not back to {replicas} Ready replicas: replicas={s.replicas} "
                                   f"updated={s.updated_replicas} ready={s.ready_replicas} available={s.available_replicas}")


class DrillZone(Fault):
    """Make CoreDNS authoritative for ``zones`` (the drill zone, e.g. ``example.com``, and any
    search domain a pod inherits from its node) by appending a server block to the ``coredns``
    ConfigMap's Corefile; revert puts the saved original Corefile back byte for byte.

    CoreDNS's ``reload`` plugin reloads a changed Corefile within its interval (30 s +/- 15 s);
    the kubelet refreshes a ConfigMap volume when it next syncs the pod (up to a minute), so
    inject and revert annotate the kube-dns pods (``kdrill.io/dns-drill-zone``): a pod update makes
    the kubelet sync the pod, and its volume, at once. Revert removes the annotation.

    ``await_reload``: revert also waits (up to ``RELOAD_TIMEOUT_SECONDS``) until no Ready kube-dns
    pod serves the drill zones any more, and verify checks it. ``from_target`` (``kdrill recover``)
    always waits; a drill whose next step replaces every CoreDNS pod anyway may pass False and
    check the running configuration itself at the end.
    """

    kind = "dns-saturation"
    method = "corefile-drill-zone"
    step = "drill-zone"

    def __init__(self, cluster: Cluster, zones: list[str], answers: dict[str, str],
                 original_corefile: str | None = None, drill_corefile: str | None = None,
                 await_reload: bool = True) -> None:
        super().__init__(cluster)
        self.await_reload = await_reload
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
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "DrillZone":
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
                if not _not_found(exc):
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
        if self.await_reload and self.original_corefile is not None:
            wait_until(lambda: not self.served_anywhere(), RELOAD_TIMEOUT_SECONDS, interval_seconds=1.0,
                       description="drill zone no longer served")

    def verify_reverted(self) -> None:
        if self.original_corefile is not None and dns.read_corefile(self.cluster) != self.original_corefile:
            raise FaultNotReverted("the coredns ConfigMap's Corefile differs from the saved original")
        marked = [p.metadata.name for p in dns.coredns_pods(self.cluster, ready_only=False)
                  if SYNC_ANNOTATION in (p.metadata.annotations or {})]
        if marked:
            raise FaultNotReverted(f"kube-dns pods still annotated {SYNC_ANNOTATION}: {marked}")
        serving = self.served_anywhere() if self.await_reload else []
        if serving:
            raise FaultNotReverted(f"kube-dns pods still serve the drill zone {self.zones}: {serving}")
