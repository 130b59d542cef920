"""Drill: saturate CoreDNS and measure name-based vs ClusterIP calls (scenarios/dns-saturation.yaml).

Probes call each Service by its FQDN with a trailing dot (``web-a.<ns>.svc.cluster.local.``), so
every call is exactly one lookup of one name (no search-list expansion) made fresh through the
pod's resolver, and by its ClusterIP (no lookup at all). The search-list expansion is measured on
its own, by the ndots lookups, from CoreDNS's ``coredns_dns_requests_total``.

Why a Python drill: the ndots counts are differences of CoreDNS's counters taken around one
lookup run in a pod, once the counters have held still; every name is checked against the zones
CoreDNS answers itself before any is sent (so nothing is forwarded off the machine); the drill
adds and removes a zone in the Corefile; and the flood's own account is dnsperf's report in the
load pods' logs. The runner's metric probe samples values over windows and has none of these.
"""

from __future__ import annotations

import hashlib
import json
import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.components import dns
from harness.expectations import wait_until, wait_until_or_raise
from harness.faults import injected
from harness.faults.dns_saturation import RELOAD_TIMEOUT_SECONDS, DnsSaturation, DrillZone, rollout_done
from harness.probes.incluster import InClusterProbe
from harness.workloads import TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY, delete_namespace, deploy_http_server

# glibc's resolver with resolv.conf's defaults (timeout:5, attempts:2; resolv.conf(5)) gives up
# on a lookup of one name with one nameserver after about 10 s.
RESOLVER_GIVE_UP_SECONDS = 10.0
# Longer than the loop plugin's 2 s between a (re)start and its self-query.
STEADY_SECONDS = 3.0

LOOKUP = ("import json, socket, sys; "
          "print(json.dumps(sorted({a[4][0] for a in socket.getaddrinfo(sys.argv[1], 80, socket.AF_INET, "
          "socket.SOCK_STREAM)})))")


def lookup_pod(name: str, ndots: int | None, seconds: int) -> client.V1Pod:
    """A pod that only waits (bounded) so the drill can run one lookup in it; ``ndots`` sets
    ``dnsConfig.options`` (None keeps the ClusterFirst default, ndots:5)."""
    spec = client.V1PodSpec(
        restart_policy="Never", active_deadline_seconds=seconds + 60, termination_grace_period_seconds=0,
        containers=[client.V1Container(name="lookup", image=TOOLBOX_IMAGE, image_pull_policy=TOOLBOX_PULL_POLICY,
                                       command=["sleep", str(seconds)])])
    if ndots is not None:
        spec.dns_config = client.V1PodDNSConfig(options=[client.V1PodDNSConfigOption(name="ndots", value=str(ndots))])
    return client.V1Pod(metadata=client.V1ObjectMeta(name=name, labels={"kdrill.io/role": "lookup"}), spec=spec)


def pod_running(cluster, ns, name) -> bool:
    return cluster.core.read_namespaced_pod(name, ns, _request_timeout=5).status.phase == "Running"


def pod_done(cluster, ns, name) -> bool:
    return cluster.core.read_namespaced_pod(name, ns, _request_timeout=5).status.phase in ("Succeeded", "Failed")


def steady_scrape(cluster, requests: bool = True, timeout_seconds: float = 60) -> dict:
    """CoreDNS metrics once the forward plugin's counters (and, with ``requests``,
    ``coredns_dns_requests_total``) have held still for ``STEADY_SECONDS``: a reload's or a start's
    own loop-detection query (sent to itself and forwarded, 2 s after it, coredns.io/plugins/loop)
    is behind us and nothing else is querying, so the next change is ours. Raises ConditionTimeout."""
    readings: list[tuple[float, object, dict]] = []

    def still():
        scraped = dns.scrape_all(cluster)
        key = (sorted(scraped), dns.all_forward_series(scraped), dns.total_requests(scraped) if requests else None)
        now = time.monotonic()
        if readings and readings[-1][1] != key:
            readings.clear()
        readings.append((now, key, scraped))
        return now - readings[0][0] >= STEADY_SECONDS

    wait_until_or_raise(still, timeout_seconds, interval_seconds=1.0, description="CoreDNS counters steady")
    return readings[-1][2]


def count_lookup_queries(cluster, ns, pod: str, name: str) -> tuple[int, dict, list[str], dict]:
    """Queries CoreDNS received for one getaddrinfo(``name``, AF_INET) in ``pod``: (count,
    count by zone and type, addresses returned, forward plugin counters that moved)."""
    before = steady_scrape(cluster)
    out = dns.pod_exec(cluster, ns, pod, ["python3", "-c", LOOKUP, name])
    after = steady_scrape(cluster)

    def by_zone_type(scraped):
        out: dict = {}
        for samples in scraped.values():
            for k, v in dns.requests_by(samples, "zone", "type").items():
                out[k] = out.get(k, 0) + v
        return out

    b, a = by_zone_type(before), by_zone_type(after)
    breakdown = {f"{z} {t}": int(v - b.get((z, t), 0)) for (z, t), v in a.items() if v - b.get((z, t), 0)}
    count = int(dns.total_requests(after) - dns.total_requests(before))
    forwarded = dns.counter_increase(dns.all_forward_series(before), dns.all_forward_series(after))
    return count, breakdown, json.loads(out.strip().splitlines()[-1]), forwarded


def coredns_state(cluster) -> dict:
    """The coredns Deployment spec (API JSON), its status counts, the Corefile, and the zones
    each Ready kube-dns pod serves with the template plugin."""
    d = cluster.apps.read_namespaced_deployment(dns.COREDNS_DEPLOYMENT, dns.COREDNS_NAMESPACE, _request_timeout=10)
    annotations = {k: v for k, v in (d.metadata.annotations or {}).items()
                   if k != "deployment.kubernetes.io/revision"}  # the Deployment controller's own counter
    return {"spec": client.ApiClient().sanitize_for_serialization(d.spec), "deployment": d,
            "metadata": {"labels": d.metadata.labels or {}, "annotations": annotations},
            "corefile": dns.read_corefile(cluster),
            "template_zones": {p: sorted(dns.served_zones(s, "template")) for p, s in dns.scrape_all(cluster).items()}}


@pytest.mark.cluster
@pytest.mark.destructive
@pytest.mark.scenario("dns-saturation")
def test_dns_saturation(drill):
    cluster, ns, w = drill.cluster, drill.namespace, drill.workload
    services = list(w["services"])
    bound = float(w["latency_bound_seconds"])
    lookup_name = w["lookup_name"]

    original = coredns_state(cluster)
    drill.observe("coredns_original_replicas", original["spec"].get("replicas"))
    drill.observe("coredns_original_resources", [c.get("resources") for c in original["spec"]["template"]["spec"]["containers"]])

    with drill.phase("setup"):
        drill.fresh_namespace()
        for pod_name, ndots in (("lookup-ndots-default", None), ("lookup-ndots-1", 1)):
            cluster.core.create_namespaced_pod(ns, lookup_pod(pod_name, ndots, seconds=600))
        for svc in services:
            deploy_http_server(cluster, ns, svc, int(w.get("replicas", 1)))
        for pod_name in ("lookup-ndots-default", "lookup-ndots-1"):
            wait_until_or_raise(lambda p=pod_name: pod_running(cluster, ns, p), 120, description=f"{pod_name} running")
        resolv = {p: dns.parse_resolv_conf(dns.pod_exec(cluster, ns, p, ["cat", "/etc/resolv.conf"]))
                  for p in ("lookup-ndots-default", "lookup-ndots-1")}
        drill.observe("resolv_conf", {p: {"search": list(r.search), "ndots": r.ndots, "nameservers": list(r.nameservers)}
                                      for p, r in resolv.items()})
        assert resolv["lookup-ndots-default"].ndots == 5 and resolv["lookup-ndots-1"].ndots == 1, resolv
        cluster_zones = dns.kubernetes_authoritative_zones(original["corefile"])
        # The Corefile drilled, whoever wrote it (kubeadm's, or a platform profile's): the
        # evidence says which CoreDNS configuration failed this way.
        drill.observe("corefile", {"sha256": hashlib.sha256(original["corefile"].encode()).hexdigest(),
                                   "text": original["corefile"]})
        drill.observe("kubernetes_plugin_authoritative_zones", cluster_zones)
        # The drill zone, plus any search domain the pods inherit from their node that CoreDNS
        # would otherwise forward upstream (kind nodes normally have none).
        zones = [dns.fqdn(w["drill_zone"])]
        for r in resolv.values():
            zones += [dns.fqdn(d) for d in r.search if dns.zone_of(d, cluster_zones + zones) is None]
        # The cluster domain is what follows "<ns>.svc." in the first search domain.
        first = resolv["lookup-ndots-default"].search[0]
        assert first.startswith(f"{ns}.svc."), f"unexpected search list {resolv['lookup-ndots-default'].search}"
        domain = first[len(f"{ns}.svc."):]
        cluster_ips = {svc: cluster.core.read_namespaced_service(svc, ns).spec.cluster_ip for svc in services}
        # FQDNs with a trailing dot: one query per call, no search list (see the module docstring).
        name_urls = {svc: f"http://{svc}.{ns}.svc.{domain}./" for svc in services}
        query_names = [f"{svc}.{ns}.svc.{domain}." for svc in services] + [
            f"kubernetes.default.svc.{domain}.", f"{dns.KUBE_DNS_SERVICE}.{dns.COREDNS_NAMESPACE}.svc.{domain}."]

    zone = DrillZone(cluster, zones, {lookup_name: w["lookup_address"]})
    probe = InClusterProbe(
        cluster, ns, "dns-probe",
        {**{f"name/{svc}": url for svc, url in name_urls.items()},
         **{f"clusterip/{svc}": f"http://{ip}/" for svc, ip in cluster_ips.items()}},
        interval_seconds=drill.interval_seconds, timeout_seconds=bound,
        duration_seconds=float(w["baseline_seconds"]) + float(drill.params["load_seconds"])
        + float(w["after_seconds"]) + 420)
    with drill.phase("ndots"):
        with injected(zone, drill.ledger, drill=drill.name):
            served = wait_until(zone.served_everywhere, RELOAD_TIMEOUT_SECONDS, interval_seconds=1.0,
                                description="drill zone served")
            drill.observe("drill_zone", {"zones": zones, "served_after_seconds": served.elapsed_seconds})
            assert served.ok, (f"CoreDNS did not serve the drill zone {zones} within {RELOAD_TIMEOUT_SECONDS:.0f} s: "
                               f"{served.last_error}")
            served_zones = set.intersection(*(dns.served_zones(s, "template") for s in dns.scrape_all(cluster).values()))
            answered_zones = cluster_zones + sorted(served_zones)
            names = list(query_names) + [dns.fqdn(u.split("/")[2]) for u in name_urls.values()]
            for r in resolv.values():
                names += dns.search_candidates(lookup_name, r.search, r.ndots)
            outside = dns.outside_zones(names, answered_zones)
            drill.observe("names_checked", {"names": sorted(set(names)), "answered_zones": answered_zones})
            drill.measure("names_outside_cluster_zones", len(outside), detail=f"outside: {outside}" if outside
                          else f"{len(set(names))} names within {answered_zones}")
            # Nothing is sent before this check passes: a name outside would be forwarded upstream.
            assert not outside, f"names CoreDNS would forward upstream: {outside}"

            counts, forwarded = {}, {}
            # Every query CoreDNS answers is counted here: the vital-sign probe's own lookups would be too.
            with drill.quiet_vitals("the ndots count takes every query CoreDNS answers as the lookup's"):
                for pod_name, expectation in (("lookup-ndots-default", "ndots5_queries_per_lookup"),
                                              ("lookup-ndots-1", "ndots1_queries_per_lookup")):
                    count, breakdown, addresses, moved = count_lookup_queries(cluster, ns, pod_name, lookup_name)
                    forwarded.update({f"{pod_name}:{k}": v for k, v in moved.items()})
                    counts[pod_name] = {"queries": count, "by_zone_and_type": breakdown, "addresses": addresses,
                                        "expected_order": dns.search_candidates(lookup_name, resolv[pod_name].search,
                                                                                resolv[pod_name].ndots)}
                    assert addresses == [w["lookup_address"]], \
                        f"{lookup_name} was not answered by the drill zone: {addresses}"
                    drill.measure(expectation, count, detail=f"by zone/type {breakdown}; resolved {addresses}")
            drill.observe("ndots_lookups", counts)
            # The probes start now, so the baseline runs while the revert below waits for CoreDNS
            # to reload the restored Corefile (their names are cluster names: no drill zone needed).
            probe.start()
            probe_started = time.time()

    with drill.phase("baseline"):
        fault = DnsSaturation(cluster, ns, query_names, **drill.params)
        # The reload of the restored Corefile has passed (the revert waited for it): from here the
        # forward counters may move only if something the drill sends is forwarded.
        forward_before = dns.all_forward_series(steady_scrape(cluster, requests=False))
        # The flood's own query file, at a low rate, while the probes run: CoreDNS must answer
        # all of it itself before the flood is allowed to start.
        server = dns.kube_dns_cluster_ip(cluster)
        cluster.core.create_namespaced_pod(ns, fault.load_pod("dns-dry-run", server, qps=int(w["dry_run_qps"]),
                                                              seconds=float(w["dry_run_seconds"])))
        wait_until_or_raise(lambda: pod_done(cluster, ns, "dns-dry-run"), 90, description="dnsperf dry run done")
        dry_run = cluster.core.read_namespaced_pod_log("dns-dry-run", ns, _request_timeout=30)
        drill.observe("dry_run_dnsperf", dns.dnsperf_report(dry_run)["statistics"])
        wait_until_or_raise(lambda: _name_samples_since(probe, probe_started + float(w["baseline_seconds"]), services),
                            float(w["baseline_seconds"]) + 60, interval_seconds=1.0, description="baseline samples")
        baseline_window = (probe_started, time.time())
        forwarded.update(dns.counter_increase(forward_before, dns.all_forward_series(dns.scrape_all(cluster))))
        drill.measure("forwarded_upstream_before_flood", int(sum(forwarded.values())),
                      detail=json.dumps(forwarded) if forwarded else
                      "no forward plugin counter moved during the ndots lookups, the probes and the dnsperf dry run")
        assert not forwarded, f"queries were forwarded upstream before the flood: {forwarded}"

    flood_started_at = flood_stopped_at = None
    with drill.inject(fault):
        with drill.phase("saturated"):
            drill.observe("coredns_limited_rollout_seconds", fault.rollout_seconds)
            # dnsperf stops by itself (-l, -n); the fault is held until it has.
            finished = wait_until(fault.load_finished, fault.load_seconds + 90, interval_seconds=1.0)
            reports = {pod: dns.dnsperf_report(log) for pod, log in fault.load_logs().items()}
            # Sending ended at dnsperf's last per-second report (its -l bound), not when the pod
            # was seen finished: dnsperf then still waits -t seconds for answers.
            ends = [r["intervals"][-1][0] for r in reports.values() if r["intervals"]]
            flood_stopped_at = max(ends) if ends else (finished.became_true_at or time.time())
            # ... and began one interval (-S 1) before its first report, once the pod had started.
            starts = [r["intervals"][0][0] - 1.0 for r in reports.values() if r["intervals"]]
            flood_started_at = min(starts) if starts else fault.flood_started_at
            drill.observe("dnsperf", reports)
            drill.observe("coredns_pods_at_flood_end", _pod_states(cluster))
    reverted_at = fault.reverted_at

    with drill.phase("after"):
        after_end = reverted_at + float(w["after_seconds"])
        # kdrill-probe logs a call when it ends; a lookup ends at the latest when the resolver
        # gives up, so calls started in the window are all logged once later ones are.
        wait_until_or_raise(lambda: _name_samples_since(probe, after_end + RESOLVER_GIVE_UP_SECONDS + bound, services),
                            float(w["after_seconds"]) + 60, interval_seconds=1.0, description="after samples")
        timelines = probe.timelines(prefix="dns-probe/")
        probe.delete()
    drill.add_timelines(timelines)

    def samples(kind, svc, start, end):
        return timelines[f"dns-probe/{kind}/{svc}"].samples(start, end)

    during = (flood_started_at + float(w["settle_seconds"]), flood_stopped_at)
    after = (reverted_at, after_end)
    windows = {"baseline": baseline_window, "during": during, "after": after}
    stats = {phase: {f"{kind}/{svc}": dns.call_stats(samples(kind, svc, *win), bound)
                     for kind in ("name", "clusterip") for svc in services}
             for phase, win in windows.items()}
    drill.observe("windows", windows)
    drill.observe("call_stats", stats)

    def worst(phase, kind, key, fn=max):
        values = [stats[phase][f"{kind}/{svc}"][key] for svc in services]
        return None if any(v is None for v in values) else fn(values)

    def summary(phase, kind):
        # By name: the lookup's latency; by ClusterIP there is no lookup, so the call's.
        what = "dns" if kind == "name" else "call"
        return "; ".join(f"{svc}: {what} p50 {_fmt(st[f'{what}_p50_seconds'])} s, p99 {_fmt(st[f'{what}_p99_seconds'])} s, "
                         f"errors {st['errors']}/{st['calls']}, degraded {st['degraded']}"
                         for svc in services for st in [stats[phase][f"{kind}/{svc}"]])

    drill.measure("baseline_name_error_ratio", worst("baseline", "name", "error_ratio"), detail=summary("baseline", "name"))
    drill.measure("baseline_dns_p99_seconds", worst("baseline", "name", "dns_p99_seconds"), detail=summary("baseline", "name"))
    drill.measure("name_degraded_ratio_during", worst("during", "name", "degraded_ratio", min),
                  detail=f"failed or > {bound} s; {summary('during', 'name')}")
    drill.measure("clusterip_success_ratio_during",
                  None if worst("during", "clusterip", "error_ratio") is None
                  else 1 - worst("during", "clusterip", "error_ratio"), detail=summary("during", "clusterip"))

    name_samples = [s for svc in services for s in samples("name", svc, flood_started_at, after_end)]
    back = dns.recovered_at(name_samples, bound)
    drill.measure("dns_recovery_seconds", None if back is None else max(0.0, back - flood_stopped_at),
                  detail=f"load ended {flood_stopped_at:.1f}, CoreDNS restored {reverted_at:.1f}, "
                         f"name calls prompt from {back}", became_true_at=back)
    drill.measure("after_name_error_ratio", worst("after", "name", "error_ratio"), detail=summary("after", "name"))
    drill.measure("after_dns_p99_seconds", worst("after", "name", "dns_p99_seconds"), detail=summary("after", "name"))

    final = coredns_state(cluster)
    replicas = int(original["spec"].get("replicas", 1))
    checks = {"spec_equal": final["spec"] == original["spec"], "metadata_equal": final["metadata"] == original["metadata"],
              "corefile_equal": final["corefile"] == original["corefile"],
              "replicas_ready": rollout_done(final["deployment"], replicas),
              "no_pod_serves_drill_zone": bool(final["template_zones"])
              and not any(set(z) & set(zones) for z in final["template_zones"].values())}
    drill.measure("coredns_restored", all(checks.values()), detail=json.dumps(checks))
    drill.observe("coredns_pods_after", final["template_zones"])

    delete_namespace(cluster, ns)
    drill.expectations.assert_all()


def _name_samples_since(probe: InClusterProbe, since: float, services: list[str]) -> bool:
    """The probe has logged a call by name to every Service started at or after ``since``."""
    try:
        seen = {r["target"] for r in probe.results() if not r.get("done") and r["t"] >= since}
    except ApiException:
        return False
    return all(f"name/{svc}" in seen for svc in services)


def _pod_states(cluster) -> dict:
    """kube-dns pods: node, Ready, restarts (e.g. a liveness probe failing under the flood)."""
    out = {}
    for pod in dns.coredns_pods(cluster, ready_only=False):
        ready = any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))
        out[pod.metadata.name] = {"node": pod.spec.node_name, "ready": ready,
                                  "restarts": sum(c.restart_count for c in (pod.status.container_statuses or []))}
    return out


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"
