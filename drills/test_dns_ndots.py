"""Drill: count the queries one lookup makes with ndots:5 and ndots:1 (scenarios/dns-ndots.yaml).

Two pods look up ``api.example.com`` once each, one with the default ``ndots:5`` and one with
``dnsConfig`` ``ndots:1``; CoreDNS's ``coredns_dns_requests_total`` counts the queries each lookup
made. The drill zone (``example.com``, the ``dns-drill-zone`` fault) makes CoreDNS answer the name
itself, so no query is forwarded upstream, and every search-list expansion is checked against the
zones CoreDNS answers before any lookup is made.

Why a Python drill: the counts are differences of CoreDNS's counters taken around one lookup run
in a pod, once the counters have held still (nothing else may query meanwhile: the vital signs'
lookups are paused); the runner's probes sample over windows and have no such step.
"""

from __future__ import annotations

import hashlib
import json

import pytest
from kubernetes import client

from harness.components import dns
from harness.core.waiting import wait_until, wait_until_or_raise
from harness.faults.dns_drill_zone import RELOAD_TIMEOUT_SECONDS, DrillZone
from harness.kube.workloads import TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY, delete_namespace

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


def count_lookup_queries(cluster, ns, pod: str, name: str) -> tuple[int, dict, list[str], dict]:
    """Queries CoreDNS received for one getaddrinfo(``name``, AF_INET) in ``pod``: (count,
    count by zone and type, addresses returned, forward plugin counters that moved)."""
    before = dns.steady_scrape(cluster)
    out = dns.pod_exec(cluster, ns, pod, ["python3", "-c", LOOKUP, name])
    after = dns.steady_scrape(cluster)

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


# The sentence of the architecture notes the claim came from, checked exactly: it counts the
# names tried before the name as given.
SOURCE_SENTENCE = "api.example.com generates 4 queries before the actual one"
SOURCE_BEFORE_ACTUAL = 4


def _judge_against_the_search_list(drill, measured: dict, resolv, lookup_name: str) -> None:
    """The ndots:5 lookup's exact count against the one its resolv.conf predicts (every search
    domain tried, in order, before the name as given, once per query type seen), and the source
    sentence confirmed or contradicted by it, with why (the number of search domains)."""
    tried = measured["expected_order"]
    answered = tried.index(dns.fqdn(lookup_name)) + 1
    types = {key.rsplit(" ", 1)[1] for key in measured["by_zone_and_type"]} or {"A"}
    predicted = answered * len(types)
    drill.measure("ndots5_queries_as_search_list_predicts", measured["queries"] == predicted,
                  detail=f"measured {measured['queries']}; predicted {predicted}: {answered} names tried "
                  f"({len(resolv.search)} search domains, then the name as given) x {len(types)} type(s) {sorted(types)}")
    before_actual = measured["queries"] // len(types) - 1
    drill.observe("source_sentence", {
        "text": SOURCE_SENTENCE, "measured_before_actual": before_actual,
        "verdict": "confirmed" if before_actual == SOURCE_BEFORE_ACTUAL else "contradicted",
        "why": f"the pod's search list has {len(resolv.search)} domains ({', '.join(resolv.search)}): each is "
               f"tried before the name as given, so {len(resolv.search)} queries come before the actual one"})


@pytest.mark.cluster
@pytest.mark.destructive
@pytest.mark.scenario("dns-ndots")
def test_dns_ndots(drill):
    cluster, ns, w = drill.cluster, drill.namespace, drill.workload
    lookup_name = w["lookup_name"]
    original_corefile = dns.read_corefile(cluster)

    with drill.phase("setup"):
        drill.fresh_namespace()
        for pod_name, ndots in (("lookup-ndots-default", None), ("lookup-ndots-1", 1)):
            cluster.core.create_namespaced_pod(ns, lookup_pod(pod_name, ndots, seconds=600))
        for pod_name in ("lookup-ndots-default", "lookup-ndots-1"):
            wait_until_or_raise(lambda p=pod_name: pod_running(cluster, ns, p), 120, description=f"{pod_name} running")
        resolv = {p: dns.parse_resolv_conf(dns.pod_exec(cluster, ns, p, ["cat", "/etc/resolv.conf"]))
                  for p in ("lookup-ndots-default", "lookup-ndots-1")}
        drill.observe("resolv_conf", {p: {"search": list(r.search), "ndots": r.ndots, "nameservers": list(r.nameservers)}
                                      for p, r in resolv.items()})
        assert resolv["lookup-ndots-default"].ndots == 5 and resolv["lookup-ndots-1"].ndots == 1, resolv
        cluster_zones = dns.kubernetes_authoritative_zones(original_corefile)
        # The Corefile drilled, whoever wrote it (kubeadm's, or a platform profile's): the
        # evidence says which CoreDNS configuration behaved this way.
        drill.observe("corefile", {"sha256": hashlib.sha256(original_corefile.encode()).hexdigest(),
                                   "text": original_corefile})
        drill.observe("kubernetes_plugin_authoritative_zones", cluster_zones)
        # The drill zone, plus any search domain the pods inherit from their node that CoreDNS
        # would otherwise forward upstream (kind nodes normally have none).
        zones = [dns.fqdn(w["drill_zone"])]
        for r in resolv.values():
            zones += [dns.fqdn(d) for d in r.search if dns.zone_of(d, cluster_zones + zones) is None]

    zone = DrillZone(cluster, zones, {lookup_name: w["lookup_address"]})
    with drill.inject(zone):
        with drill.phase("lookups"):
            served = wait_until(zone.served_everywhere, RELOAD_TIMEOUT_SECONDS, interval_seconds=1.0,
                                description="drill zone served")
            drill.observe("drill_zone", {"zones": zones, "served_after_seconds": served.elapsed_seconds})
            assert served.ok, (f"CoreDNS did not serve the drill zone {zones} within {RELOAD_TIMEOUT_SECONDS:.0f} s: "
                               f"{served.last_error}")
            served_zones = set.intersection(*(dns.served_zones(s, "template") for s in dns.scrape_all(cluster).values()))
            answered_zones = cluster_zones + sorted(served_zones)
            names = [n for r in resolv.values() for n in dns.search_candidates(lookup_name, r.search, r.ndots)]
            outside = dns.outside_zones(names, answered_zones)
            drill.observe("names_checked", {"names": sorted(set(names)), "answered_zones": answered_zones})
            drill.measure("names_outside_cluster_zones", len(outside), detail=f"outside: {outside}" if outside
                          else f"{len(set(names))} names within {answered_zones}")
            # Nothing is looked up before this check passes: a name outside would be forwarded upstream.
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
            _judge_against_the_search_list(drill, counts["lookup-ndots-default"], resolv["lookup-ndots-default"],
                                           lookup_name)
            drill.measure("forwarded_upstream_during_lookups", int(sum(forwarded.values())),
                          detail=json.dumps(forwarded) if forwarded else "no forward plugin counter moved during the lookups")

    final_corefile = dns.read_corefile(cluster)
    serving = {p: sorted(dns.served_zones(s, "template")) for p, s in dns.scrape_all(cluster).items()}
    checks = {"corefile_equal": final_corefile == original_corefile,
              "no_pod_serves_drill_zone": bool(serving) and not any(set(z) & set(zones) for z in serving.values())}
    drill.measure("coredns_restored", all(checks.values()), detail=json.dumps(checks))
    drill.observe("coredns_pods_after", serving)

    delete_namespace(cluster, ns)
    drill.expectations.assert_all()
