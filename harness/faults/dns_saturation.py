"""Fault ``dns-saturation``: starve CoreDNS (one replica, a tight CPU limit) and flood it.

Method ``limit-and-flood``: the ``coredns`` Deployment in ``kube-system`` is patched to
``replicas`` replicas whose ``coredns`` container has CPU request = limit = ``cpu_limit``, and
load-generator pods run ``dnsperf`` against the kube-dns ClusterIP at ``qps`` queries per second,
bounded by ``-l`` (seconds) and ``-n`` (runs through the query file) so the load stops by itself.
Revert deletes the load pods and puts the saved Deployment spec back exactly, then waits until
the original number of replicas is rolled out and Ready.

No query may leave the cluster (CoreDNS forwards a name it does not answer to this machine's
resolver), so before anything changes the fault checks, and refuses to go on otherwise:

1. the query names are cluster names: the Services of the drill's namespace, ``kubernetes.default``
   and ``kube-dns.kube-system``, under the cluster domain, each inside a zone the Corefile's
   ``kubernetes`` plugin answers without ``fallthrough`` (fact ``names_outside_cluster_zones``);
2. a dry run of the same query file (``dry_run_qps`` for ``dry_run_seconds``) moves none of the
   forward plugin's counters, read once they held still (fact ``forwarded_upstream_before_flood``).

It offers the flood's own times to a data-only scenario's measures (``marks``): ``flood_started``
(one interval before dnsperf's first per-second report) and ``flood_stopped`` (its last report:
sending ended there, after which dnsperf only waits for late answers): the time every load pod
was sending, read from their logs when the revert begins, None when a pod reported nothing. The
window from the injection also holds the dry run and the limited rollout, which are not the
flood.

Behaviour exercised: "DNS for Services and Pods" and "Debugging DNS Resolution" (kubernetes.io):
pods resolve Service names through the kube-dns Service; with CoreDNS saturated, name-based
calls fail or slow down for every Service at once while calls by ClusterIP need no DNS.
"""

from __future__ import annotations

import copy
import hashlib
import math
import time
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.components import dns
from harness.core.waiting import wait_until
from harness.faults import Fault, FaultError, FaultNotReverted
from harness.faults.dns_drill_zone import DrillZone
from harness.kube.providers import Cluster
from harness.kube.workloads import TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY
from harness.spec.params import Param

# Deadlines on platform paths, not expectations: how long to wait before calling a setup or a
# revert failed. Both sit well above the slowest seen on this 2-core machine, because a fresh,
# loaded machine is slower than a warm one (a fixed 120 s deadline on another path failed there).
ROLLOUT_TIMEOUT_SECONDS = 300.0
LOAD_LABEL = "kdrill.io/dns-load"
# On the coredns Deployment while it is limited: a second inject must not save a limited spec as
# the "original" (an earlier run killed before its revert, and kdrill recover not run yet).
LIMITED_ANNOTATION = "kdrill.io/dns-saturation"
DRY_RUN_POD = "dns-dry-run"
# Allowed for the load pods to start sending (dnsperf began 0.50 to 0.58 s into the hold in 4 runs
# here, its first report a second later; the toolbox image is preloaded).
LOAD_START_SECONDS = 10.0
# A deadline for the dry-run pod to start and end, beyond its own seconds (the toolbox image is
# preloaded; the pod's start took a few seconds here).
DRY_RUN_START_SECONDS = 90.0


def _sanitize(obj: Any) -> Any:
    return client.ApiClient().sanitize_for_serialization(obj)


def _not_found(exc: ApiException) -> bool:
    return exc.status == 404


def coredns_pod_states(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """kube-dns pods: node, Ready, restarts (e.g. a liveness probe failing under the flood)."""
    out = {}
    for pod in dns.coredns_pods(cluster, ready_only=False):
        ready = any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))
        out[pod.metadata.name] = {"node": pod.spec.node_name, "ready": ready,
                                  "restarts": sum(c.restart_count for c in (pod.status.container_statuses or []))}
    return out


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
        "dry_run_qps": Param("integer", "queries per second of the dry run before the flood", minimum=1, maximum=100),
        "dry_run_seconds": Param("seconds", "how long the dry run lasts", minimum=1, maximum=30),
    }
    method = "limit-and-flood"
    step = "saturate"
    marks_offered = {
        "flood_started": "one interval (1 s) before dnsperf's first per-second report: sending began "
                         "(the latest of the load pods')",
        "flood_stopped": "dnsperf's last per-second report: sending ended (the earliest of the load pods')",
    }
    facts_offered = {
        "names_outside_cluster_zones": ("names", "query names outside the zones CoreDNS's kubernetes plugin answers"),
        "forwarded_upstream_before_flood": ("requests", "forward plugin counter increase during the dry run, "
                                                        "read on every Ready kube-dns pod"),
    }

    def __init__(self, cluster: Cluster, namespace: str, query_names: list[str] | None = None, replicas: int = 1,
                 cpu_limit: str = "30m", qps: int = 1500, clients: int = 8, max_outstanding: int = 3000,
                 query_timeout_seconds: float = 3.0, load_seconds: float = 40.0, load_pods: int = 1,
                 dry_run_qps: int = 20, dry_run_seconds: float = 3.0,
                 original_spec: dict | None = None, load_pod_names: list[str] | None = None) -> None:
        super().__init__(cluster)
        # None: the cluster names of the namespace's Services, found at inject (query_names_for).
        self.namespace = namespace
        self.query_names = [dns.fqdn(n) for n in query_names] if query_names else None
        self.replicas, self.cpu_limit, self.qps, self.clients = int(replicas), str(cpu_limit), int(qps), int(clients)
        self.max_outstanding, self.query_timeout_seconds = int(max_outstanding), float(query_timeout_seconds)
        self.load_seconds, self.load_pods = float(load_seconds), int(load_pods)
        self.dry_run_qps, self.dry_run_seconds = int(dry_run_qps), float(dry_run_seconds)
        self.original_spec = original_spec
        self.load_pod_names = list(load_pod_names or [f"dns-load-{i}" for i in range(self.load_pods)])
        self.limited_at: float | None = None
        self.flood_started_at: float | None = None
        self.revert_started_at: float | None = None
        self.rollout_seconds: float | None = None
        self._facts: dict[str, Any] = {}
        self._evidence: dict[str, Any] = {}
        self._marks: dict[str, float | None] = {}

    @classmethod
    def for_scenario(cls, cluster: Cluster, namespace: str, params: dict[str, Any]) -> DnsSaturation:
        """The fault of a data-only scenario: its query names are the drill namespace's Services
        (found at inject), ``params`` as :attr:`params` says."""
        return cls(cluster, namespace, **params)

    # -- ledger ---------------------------------------------------------------------------

    @classmethod
    def window_problem(cls, params: dict[str, Any], windows: dict[str, float]) -> str | None:
        """The flood must end inside the hold, or its end (the ``flood_stopped`` mark) is never
        seen: its load pods start, send ``load_seconds``, then wait ``query_timeout_seconds``."""
        least = float(params["load_seconds"]) + float(params["query_timeout_seconds"]) + LOAD_START_SECONDS
        if windows["hold_seconds"] < least:
            return (f"at least {least:g} s: load_seconds + query_timeout_seconds + {LOAD_START_SECONDS:g} s for the "
                    "load pods to start, so the flood ends while the fault holds")
        return None

    def target(self) -> dict[str, Any]:
        return {"step": self.step, "method": self.method,
                "deployment": f"{dns.COREDNS_NAMESPACE}/{dns.COREDNS_DEPLOYMENT}",
                "namespace": self.namespace, "query_names": self.query_names, "replicas": self.replicas,
                "cpu_limit": self.cpu_limit, "qps": self.qps, "clients": self.clients,
                "max_outstanding": self.max_outstanding, "query_timeout_seconds": self.query_timeout_seconds,
                "load_seconds": self.load_seconds, "load_pods": self.load_pods,
                "dry_run_qps": self.dry_run_qps, "dry_run_seconds": self.dry_run_seconds,
                "load_pod_names": self.load_pod_names, "dry_run_pod": DRY_RUN_POD,
                "original_spec": self.original_spec}

    def where(self) -> list[Any]:
        return [f"deployment {dns.COREDNS_NAMESPACE}/{dns.COREDNS_DEPLOYMENT}",
                f"load pods {self.namespace}/{','.join(self.load_pod_names)}"]

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> Fault:
        if target.get("step") == "drill-zone":
            # A ledger entry from before the drill zone was a fault of its own (dns-drill-zone).

            return DrillZone.from_target(cluster, target)
        return cls(cluster, namespace=target["namespace"], query_names=target.get("query_names"),
                   replicas=target["replicas"], cpu_limit=target["cpu_limit"], qps=target["qps"],
                   clients=target["clients"], max_outstanding=target["max_outstanding"],
                   query_timeout_seconds=target["query_timeout_seconds"], load_seconds=target["load_seconds"],
                   load_pods=target["load_pods"], dry_run_qps=target.get("dry_run_qps", 20),
                   dry_run_seconds=target.get("dry_run_seconds", 3.0), original_spec=target.get("original_spec"),
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

    def query_names_for(self, corefile: str) -> tuple[list[str], list[str]]:
        """(query names, the zones CoreDNS answers itself): the drill namespace's Services,
        ``kubernetes.default`` and ``kube-dns.kube-system`` under the cluster domain of
        ``corefile`` (the ``kubernetes`` plugin's zones without ``fallthrough``). Raises
        FaultError when the Corefile has no such zone."""
        zones = dns.kubernetes_authoritative_zones(corefile)
        domain = dns.cluster_domain(zones)
        if domain is None:
            raise FaultError("the coredns Corefile's kubernetes plugin answers no cluster domain itself (every zone "
                             f"falls through, or none is set: {zones}); a query could be forwarded upstream")
        if self.query_names:
            return self.query_names, zones
        services = self.cluster.core.list_namespaced_service(self.namespace, _request_timeout=10).items
        names = [f"{svc.metadata.name}.{self.namespace}.svc.{domain}" for svc in services]
        names += [f"kubernetes.default.svc.{domain}", f"{dns.KUBE_DNS_SERVICE}.{dns.COREDNS_NAMESPACE}.svc.{domain}"]
        return sorted({dns.fqdn(n) for n in names}), zones

    def _pod_done(self, name: str) -> bool:
        pod = self.cluster.core.read_namespaced_pod(name, self.namespace, _request_timeout=5)
        return pod.status.phase in ("Succeeded", "Failed")

    def dry_run(self) -> None:
        """The flood's query file at ``dry_run_qps`` for ``dry_run_seconds``, with the forward
        counters read before and after (once they held still). Raises FaultError when any moved:
        then a flood would send its names upstream too."""
        scraped = dns.steady_scrape(self.cluster, requests=False)
        if not scraped:
            raise FaultError("no Ready kube-dns pod to read CoreDNS's forward counters from; the dry run and the "
                             "flood were not started")
        before = dns.all_forward_series(scraped)
        server = dns.kube_dns_cluster_ip(self.cluster)
        self.cluster.core.create_namespaced_pod(
            self.namespace, self.load_pod(DRY_RUN_POD, server, qps=self.dry_run_qps, seconds=self.dry_run_seconds),
            _request_timeout=10)
        done = wait_until(lambda: self._pod_done(DRY_RUN_POD), self.dry_run_seconds + DRY_RUN_START_SECONDS,
                          interval_seconds=1.0, description="dnsperf dry run done")
        if not done.ok:
            raise FaultError(f"the dnsperf dry run did not end within {self.dry_run_seconds + DRY_RUN_START_SECONDS:.0f} s "
                             f"({done.last_error}); the flood was not started")
        log = self.cluster.core.read_namespaced_pod_log(DRY_RUN_POD, self.namespace, _request_timeout=30)
        statistics = self._evidence["dry_run_dnsperf"] = dns.dnsperf_report(log)["statistics"]
        completed = statistics.get("Queries completed", "0").split()[0]
        # A dry run that asked nothing (dnsperf failed to start) would prove nothing.
        if not completed.isdigit() or int(completed) == 0:
            raise FaultError(f"the dnsperf dry run completed no query (its log: {log[-300:]!r}); the flood was not "
                             "started")
        after = dns.steady_scrape(self.cluster, requests=False)
        if set(after) != set(scraped):
            raise FaultError(f"the kube-dns pods changed during the dry run ({sorted(scraped)} then {sorted(after)}): "
                             "their counters cannot be compared; the flood was not started")
        moved = dns.counter_increase(before, dns.all_forward_series(after))
        self._facts["forwarded_upstream_before_flood"] = int(sum(moved.values()))
        self._evidence["forwarded_during_dry_run"] = moved
        if moved:
            raise FaultError(f"CoreDNS forwarded queries upstream during the dnsperf dry run: {moved}; the flood "
                             "was not started")

    def inject(self) -> None:
        apps = self.cluster.apps
        deployment = apps.read_namespaced_deployment(dns.COREDNS_DEPLOYMENT, dns.COREDNS_NAMESPACE, _request_timeout=10)
        if LIMITED_ANNOTATION in (deployment.metadata.annotations or {}):
            raise FaultError(f"the coredns Deployment is still limited by an earlier dns-saturation fault "
                             f"(annotation {LIMITED_ANNOTATION}); run `kdrill recover` first")
        corefile = dns.read_corefile(self.cluster)
        self.query_names, zones = self.query_names_for(corefile)
        outside = dns.outside_zones(self.query_names, zones)
        self._facts["names_outside_cluster_zones"] = len(outside)
        self._evidence["names_checked"] = {"names": self.query_names, "answered_zones": zones,
                                           "corefile_sha256": hashlib.sha256(corefile.encode()).hexdigest()}
        self.checkpoint()
        # Nothing is sent before both checks pass: a name outside would be forwarded upstream.
        if outside:
            raise FaultError(f"query names CoreDNS would forward upstream (outside {zones}): {outside}")
        self.dry_run()
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
        for name in [*self.load_pod_names, DRY_RUN_POD]:
            try:
                self.cluster.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0,
                                                        _request_timeout=10)
            except ApiException as exc:
                if not _not_found(exc):
                    raise

    def _load_left(self) -> list[str]:
        left = []
        for name in [*self.load_pod_names, DRY_RUN_POD]:
            try:
                self.cluster.core.read_namespaced_pod(name, self.namespace, _request_timeout=5)
                left.append(name)
            except ApiException as exc:
                if not _not_found(exc):
                    raise
        return left

    def _read_flood(self) -> None:
        """Before the load pods go: dnsperf's reports (the marks) and the kube-dns pods' state."""
        if self.flood_started_at is None:
            return
        reports = {pod: dns.dnsperf_report(log) for pod, log in self.load_logs().items()}
        starts = [r["intervals"][0][0] - 1.0 for r in reports.values() if r["intervals"]]
        ends = [r["intervals"][-1][0] for r in reports.values() if r["intervals"]]
        # Every load pod reported, or the flood's times are not known.
        known = len(starts) == len(self.load_pod_names)
        finished = self.load_finished()
        # Both marks bound the time every load pod was sending. A load still sending when the
        # revert began has no stop of its own (the revert's deletion ends it).
        self._marks = {"flood_started": max(starts) if known else None,
                       "flood_stopped": min(ends) if known and finished else None}
        self._evidence.update(dnsperf=reports, load_finished_before_revert=finished,
                              coredns_pods_at_flood_end=coredns_pod_states(self.cluster))

    def marks(self) -> dict[str, float | None]:
        return dict(self._marks)

    def facts(self) -> dict[str, Any]:
        return dict(self._facts)

    def evidence(self) -> dict[str, Any]:
        return {**self._evidence, "coredns_limited_rollout_seconds": self.rollout_seconds,
                "query_names": self.query_names}

    def revert(self) -> None:
        self.revert_started_at = time.time()
        try:
            self._read_flood()
        except Exception as exc:  # evidence only: the revert goes on
            self._evidence["flood_not_read"] = f"{type(exc).__name__}: {exc}"[:300]
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
