"""Pure logic of the CoreDNS saturation drill: metrics parsing, Corefile edits, resolv.conf
search expansion, dnsperf output, probe-call statistics and the fault's ledger target."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.components import dns
from harness.faults import FaultError, fault_class
from harness.faults.dns_drill_zone import DrillZone
from harness.faults.dns_saturation import DnsSaturation, rollout_done

# kubeadm's default Corefile, as kind installs it.
KUBEADM_COREFILE = """.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30 {
       disable success cluster.local
       disable denial cluster.local
    }
    loop
    reload
    loadbalance
}
"""

# An excerpt of CoreDNS 1.13's /metrics, after a drill zone was loaded.
METRICS = """# HELP coredns_dns_requests_total Counter of DNS requests made per zone, protocol and family.
# TYPE coredns_dns_requests_total counter
coredns_dns_requests_total{family="1",proto="udp",server="dns://:53",type="A",view="",zone="."} 3
coredns_dns_requests_total{family="1",proto="udp",server="dns://:53",type="A",view="",zone="example.com."} 1
coredns_dns_requests_total{family="1",proto="udp",server="dns://:53",type="other",view="",zone="."} 2
# HELP coredns_plugin_enabled A metric that indicates whether a plugin is enabled on per server and zone basis.
# TYPE coredns_plugin_enabled gauge
coredns_plugin_enabled{name="forward",server="dns://:53",view="",zone="."} 1
coredns_plugin_enabled{name="template",server="dns://:53",view="",zone="example.com."} 1
# HELP coredns_proxy_request_duration_seconds Histogram of the time each request took.
# TYPE coredns_proxy_request_duration_seconds histogram
coredns_proxy_request_duration_seconds_bucket{proxy_name="forward",rcode="NXDOMAIN",to="172.19.0.1:53",le="0.064"} 1
coredns_proxy_request_duration_seconds_bucket{proxy_name="forward",rcode="NXDOMAIN",to="172.19.0.1:53",le="+Inf"} 1
coredns_proxy_request_duration_seconds_sum{proxy_name="forward",rcode="NXDOMAIN",to="172.19.0.1:53"} 0.04
coredns_proxy_request_duration_seconds_count{proxy_name="forward",rcode="NXDOMAIN",to="172.19.0.1:53"} 1
# HELP coredns_proxy_conn_cache_misses_total Counter of connection cache misses per upstream and protocol.
# TYPE coredns_proxy_conn_cache_misses_total counter
coredns_proxy_conn_cache_misses_total{proto="udp",proxy_name="forward",to="172.19.0.1:53"} 1
# HELP coredns_forward_max_concurrent_rejects_total Counter of the number of queries rejected.
# TYPE coredns_forward_max_concurrent_rejects_total counter
coredns_forward_max_concurrent_rejects_total 0
"""


def test_metrics_parse_and_sum_by_labels():
    samples = dns.parse_metrics(METRICS)
    assert dns.metric_sum(samples, "coredns_dns_requests_total") == 6
    assert dns.metric_sum(samples, "coredns_dns_requests_total", zone="example.com.") == 1
    assert dns.requests_by(samples, "zone", "type") == {(".", "A"): 3, ("example.com.", "A"): 1, (".", "other"): 2}
    assert dns.served_zones(samples, "template") == {"example.com."}
    assert dns.served_zones(samples, "kubernetes") == set()


def test_forward_series_counts_upstream_requests_and_connections_only():
    series = dns.forward_series(dns.parse_metrics(METRICS))
    assert sorted(series) == [
        "coredns_forward_max_concurrent_rejects_total{}",
        "coredns_proxy_conn_cache_misses_total{proto=udp,proxy_name=forward,to=172.19.0.1:53}",
        "coredns_proxy_request_duration_seconds_count{proxy_name=forward,rcode=NXDOMAIN,to=172.19.0.1:53}",
    ]


def test_counter_increase_new_series_grown_and_reset():
    before = {"a": 5.0, "b": 2.0, "c": 7.0}
    after = {"a": 5.0, "b": 4.0, "c": 1.0, "d": 3.0}
    # c went down: a restart reset it, so its whole value is new.
    assert dns.counter_increase(before, after) == {"b": 2.0, "c": 1.0, "d": 3.0}
    assert dns.counter_increase(after, after) == {}


def test_parse_metrics_rejects_garbage():
    with pytest.raises(ValueError):
        dns.parse_metrics("coredns_dns_requests_total{zone=\n")


def test_corefile_parse_and_kubernetes_zones():
    blocks = dns.parse_corefile(KUBEADM_COREFILE)
    assert [b.zones for b in blocks] == [["."]]
    names = [d.name for d in blocks[0].directives]
    assert names[:4] == ["errors", "health", "ready", "kubernetes"] and "reload" in names
    # in-addr.arpa and ip6.arpa fall through to forward; cluster.local is answered by the plugin.
    assert dns.kubernetes_authoritative_zones(KUBEADM_COREFILE) == ["cluster.local."]
    bare = KUBEADM_COREFILE.replace("fallthrough in-addr.arpa ip6.arpa", "fallthrough")
    assert dns.kubernetes_authoritative_zones(bare) == []


def test_corefile_parse_errors_and_comments():
    with pytest.raises(ValueError):
        dns.parse_corefile(".:53 {\n errors\n")
    with pytest.raises(ValueError):
        dns.parse_corefile("}\n")
    blocks = dns.parse_corefile('# a comment { \nexample.org:53 {\n  template IN A {\n    answer "x # not a comment"\n  }\n}\n')
    assert blocks[0].zones == ["example.org."]
    assert blocks[0].directives[0].block[0].args == ['"x # not a comment"']


def test_drill_zone_block_appends_a_zone_served_without_forward():
    block = dns.drill_zone_block(["example.com", "corp.internal."], {"api.example.com": "192.0.2.10"})
    assert block.startswith(dns.DRILL_BLOCK_MARK)
    edited = dns.with_drill_zone(KUBEADM_COREFILE, block)
    assert edited.startswith(KUBEADM_COREFILE)  # the original is left as it was, byte for byte
    blocks = dns.parse_corefile(edited)
    assert [b.zones for b in blocks] == [["."], ["example.com.", "corp.internal."]]
    drill = blocks[1]
    assert "forward" not in [d.name for d in drill.directives]
    templates = [d for d in drill.directives if d.name == "template"]
    assert templates[0].args == ["IN", "A", "example.com.", "corp.internal."]
    assert ['"^api[.]example[.]com[.]$"'] == next(d.args for d in templates[0].block if d.name == "match")
    assert "192.0.2.10" in " ".join(next(d.args for d in templates[0].block if d.name == "answer"))
    # The last template answers everything else in the zones: NXDOMAIN, never a fallthrough.
    last = [d.name for d in templates[-1].block]
    assert "fallthrough" not in last and ["NXDOMAIN"] == next(d.args for d in templates[-1].block if d.name == "rcode")


def test_drill_zone_refuses_existing_zone_and_foreign_answers():
    block = dns.drill_zone_block(["example.com"], {"api.example.com": "192.0.2.10"})
    served = dns.with_drill_zone(KUBEADM_COREFILE, block)
    with pytest.raises(ValueError, match="already serves example.com"):
        dns.with_drill_zone(served, block)
    with pytest.raises(ValueError):
        dns.drill_zone_block(["example.com"], {"api.example.org": "192.0.2.10"})
    with pytest.raises(ValueError):
        dns.drill_zone_block([], {})


RESOLV = """search kdrill-dns.svc.cluster.local svc.cluster.local cluster.local
nameserver 10.96.0.10
options ndots:5
"""


def test_resolv_conf_parse():
    r = dns.parse_resolv_conf(RESOLV)
    assert r.search == ("kdrill-dns.svc.cluster.local", "svc.cluster.local", "cluster.local")
    assert r.nameservers == ("10.96.0.10",) and r.ndots == 5
    assert dns.parse_resolv_conf("nameserver 1.2.3.4\n").ndots == 1  # resolv.conf(5) default
    assert dns.parse_resolv_conf("domain a.b\nsearch c d\noptions ndots:99\n").search == ("c", "d")
    assert dns.parse_resolv_conf("options ndots:99\n").ndots == 15


def test_search_candidates_follow_ndots():
    search = ("ns.svc.cluster.local", "svc.cluster.local", "cluster.local")
    assert dns.search_candidates("api.example.com", search, 5) == [
        "api.example.com.ns.svc.cluster.local.", "api.example.com.svc.cluster.local.",
        "api.example.com.cluster.local.", "api.example.com."]
    assert dns.search_candidates("api.example.com", search, 1) == [
        "api.example.com.", "api.example.com.ns.svc.cluster.local.", "api.example.com.svc.cluster.local.",
        "api.example.com.cluster.local."]
    assert dns.search_candidates("web.ns.svc.cluster.local.", search, 5) == ["web.ns.svc.cluster.local."]


def test_zone_of_and_outside_zones():
    zones = ["cluster.local.", "example.com."]
    assert dns.zone_of("api.example.com.cluster.local.", zones) == "cluster.local."
    assert dns.zone_of("api.example.com", zones) == "example.com."
    assert dns.zone_of("notexample.com.", zones) is None
    assert dns.zone_of("x.svc.cluster.local", ["cluster.local", "svc.cluster.local"]) == "svc.cluster.local."
    names = dns.search_candidates("api.example.com", ("ns.svc.cluster.local", "corp.internal"), 5)
    assert dns.outside_zones(names, zones) == ["api.example.com.corp.internal."]
    # The root zone never counts as answered: it is where forward sits.
    assert dns.outside_zones(["a.b."], ["."]) == ["a.b."]


DNSPERF_LOG = """DNS Performance Testing Tool
Version 2.10.0

[Status] Command line: dnsperf -s 10.96.0.10 -d /tmp/queries -l 30 -n 11251 -Q 1500 -c 8 -q 3000 -t 3 -S 1
[Status] Sending queries (to 10.96.0.10:53)
1795977141.159425: 275.261364
[Timeout] Query timed out: msg id 45189
1795977142.167670: 332.451787
[Status] Testing complete (time limit)

Statistics:

  Queries sent:         45195
  Queries completed:    11533 (25.52%)
  Queries lost:         33662 (74.48%)

  Run time (s):         42.132502
"""


def test_dnsperf_report():
    report = dns.dnsperf_report(DNSPERF_LOG)
    assert report["intervals"] == [(1795977141.159425, 275.261364), (1795977142.16767, 332.451787)]
    assert report["statistics"]["Queries sent"] == "45195"
    assert report["statistics"]["Queries lost"] == "33662 (74.48%)"
    assert dns.dnsperf_report("log unavailable: HTTP 404") == {"statistics": {}, "intervals": []}


def test_saturation_target_round_trip_and_bounded_load():
    fault = DnsSaturation(None, "ns", ["web.ns.svc.cluster.local", "kubernetes.default.svc.cluster.local."],
                          cpu_limit="20m", qps=1000, load_seconds=30, load_pods=2, original_spec={"replicas": 2})
    target = fault.target()
    again = fault_class("dns-saturation").from_target(None, target)
    assert isinstance(again, DnsSaturation) and again.target() == target
    args = fault.dnsperf_args("10.96.0.10")
    assert args[args.index("-l") + 1] == "30" and args[args.index("-Q") + 1] == "500"  # qps shared by 2 pods
    assert int(args[args.index("-n") + 1]) == 500 * 30 // 2 + 1  # runs through a 2-name file: a count bound
    pod = fault.load_pod("dns-load-0", "10.96.0.10")
    assert pod.spec.active_deadline_seconds == 90 and pod.spec.restart_policy == "Never"
    assert pod.spec.containers[0].command[4:] == ["web.ns.svc.cluster.local. A", "kubernetes.default.svc.cluster.local. A"]
    container = fault.limit_patch()["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"] == {"limits": {"cpu": "20m"}, "requests": {"cpu": "20m"}}
    assert fault.limit_patch()["spec"]["replicas"] == 1
    assert fault.limit_patch()["metadata"]["annotations"] == {"kdrill.io/dns-saturation": "1 x 20m"}


def test_the_drill_zone_is_a_fault_of_its_own_and_older_entries_still_recover():
    zone = DrillZone(None, ["example.com"], {"api.example.com": "192.0.2.10"}, original_corefile=KUBEADM_COREFILE)
    # Its own kind now; a ledger entry written when it was a step of dns-saturation is still found.
    for kind in ("dns-drill-zone", "dns-saturation"):
        rebuilt = fault_class(kind).from_target(None, zone.target())
        assert isinstance(rebuilt, DrillZone)
        assert rebuilt.original_corefile == KUBEADM_COREFILE and rebuilt.zones == ["example.com."]


class _Recorder:
    """A stand-in API client for the fault's reads: the Services of a namespace, the coredns
    Deployment and Corefile; every write is recorded, so a test can say none was made."""

    def __init__(self, services, corefile=KUBEADM_COREFILE):
        self.writes, self.corefile, self.services = [], corefile, services

    def list_namespaced_service(self, namespace, **_):
        return SimpleNamespace(items=[SimpleNamespace(metadata=SimpleNamespace(name=n)) for n in self.services])

    def read_namespaced_config_map(self, name, namespace, **_):
        return SimpleNamespace(data={"Corefile": self.corefile})

    def read_namespaced_deployment(self, name, namespace, **_):
        return SimpleNamespace(metadata=SimpleNamespace(annotations={}), spec={"replicas": 2})

    def __getattr__(self, name):  # create_*, patch_*, replace_*, delete_*
        return lambda *a, **k: self.writes.append(name)


def test_query_names_are_the_namespaces_services_under_the_cluster_domain():
    api = _Recorder(["web", "web-b"])
    fault = DnsSaturation(SimpleNamespace(core=api, apps=api), "drill-ns")
    names, zones = fault.query_names_for(KUBEADM_COREFILE)
    assert zones == ["cluster.local."]
    assert names == ["kube-dns.kube-system.svc.cluster.local.", "kubernetes.default.svc.cluster.local.",
                     "web-b.drill-ns.svc.cluster.local.", "web.drill-ns.svc.cluster.local."]
    # every zone falls through: there is no name CoreDNS is sure to answer itself
    with pytest.raises(FaultError, match="answers no cluster domain itself"):
        fault.query_names_for(KUBEADM_COREFILE.replace("fallthrough in-addr.arpa ip6.arpa", "fallthrough"))


def test_names_coredns_would_forward_are_refused_before_anything_is_sent_or_changed():
    api = _Recorder([])
    fault = DnsSaturation(SimpleNamespace(core=api, apps=api), "drill-ns",
                          query_names=["web.drill-ns.svc.cluster.local", "api.example.com"])
    with pytest.raises(FaultError, match=r"forward upstream .*api\.example\.com"):
        fault.inject()
    assert api.writes == [] and fault.original_spec is None  # no pod made, nothing patched
    assert fault.facts() == {"names_outside_cluster_zones": 1}
    assert fault.facts_offered.keys() >= fault.facts().keys()


def test_the_flood_marks_come_from_dnsperf_reports(monkeypatch):
    fault = DnsSaturation(None, "ns", ["web.ns.svc.cluster.local"], load_pods=2)
    fault.flood_started_at = 100.0
    logs = {"dns-load-0": "1796000010.5: 500.0\n1796000011.5: 480.0\n1796000040.5: 10.0\n",
            "dns-load-1": "1796000011.0: 500.0\n1796000039.0: 400.0\n"}
    monkeypatch.setattr(fault, "load_logs", lambda: logs)
    monkeypatch.setattr(fault, "load_finished", lambda: True)
    monkeypatch.setattr("harness.faults.dns_saturation.coredns_pod_states", lambda cluster: {})
    fault._read_flood()
    # the time every load pod was sending: the later first report less one interval, the earlier last
    assert fault.marks() == {"flood_started": 1796000010.0, "flood_stopped": 1796000039.0}
    monkeypatch.setattr(fault, "load_finished", lambda: False)  # still sending when the revert began
    fault._read_flood()
    assert fault.marks() == {"flood_started": 1796000010.0, "flood_stopped": None}
    logs["dns-load-1"] = "dnsperf: could not start\n"  # one pod reported nothing: the times are not known
    fault._read_flood()
    assert fault.marks() == {"flood_started": None, "flood_stopped": None}
    assert set(fault.marks_offered) == set(fault.marks())


def test_rollout_done_needs_every_count_and_observed_generation():
    def deployment(generation, observed, replicas, updated, ready, available):
        # Only the fields rollout_done reads.
        return SimpleNamespace(
            metadata=SimpleNamespace(generation=generation),
            status=SimpleNamespace(observed_generation=observed, replicas=replicas, updated_replicas=updated,
                                   ready_replicas=ready, available_replicas=available))
    assert rollout_done(deployment(3, 3, 2, 2, 2, 2), 2)
    assert not rollout_done(deployment(3, 2, 2, 2, 2, 2), 2)  # the controller has not seen the spec yet
    assert not rollout_done(deployment(3, 3, 3, 2, 3, 3), 2)  # an old ReplicaSet still has a pod
    assert not rollout_done(deployment(3, 3, 2, 2, 1, 1), 2)


def test_a_dry_run_that_proves_nothing_stops_the_flood(monkeypatch):
    """The dry run is the check that the flood's names are answered without forwarding: with no
    kube-dns pod to read, or no query completed, it refuses rather than report 0 forwarded."""
    api = _Recorder(["web"])
    api.read_namespaced_pod = lambda *a, **k: SimpleNamespace(status=SimpleNamespace(phase="Failed"))
    api.read_namespaced_pod_log = lambda *a, **k: "dnsperf: could not open the query file\n"
    monkeypatch.setattr(dns, "kube_dns_cluster_ip", lambda cluster: "10.96.0.10")
    fault = DnsSaturation(SimpleNamespace(core=api, apps=api), "drill-ns", dry_run_seconds=1)
    fault.query_names = ["web.drill-ns.svc.cluster.local."]
    monkeypatch.setattr(dns, "steady_scrape", lambda cluster, requests=True: {})
    with pytest.raises(FaultError, match="no Ready kube-dns pod"):
        fault.dry_run()
    assert api.writes == []  # no dry-run pod made
    monkeypatch.setattr(dns, "steady_scrape", lambda cluster, requests=True: {"coredns-a": []})
    with pytest.raises(FaultError, match="completed no query"):
        fault.dry_run()
    assert "forwarded_upstream_before_flood" not in fault.facts()  # not measured: its expectation is an error
