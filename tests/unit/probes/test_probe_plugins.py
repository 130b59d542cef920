"""Probe kinds are plug-ins (entry points ``kdrill.probes``): kdrill's own are found there,
each declares the fields a scenario may give it, and a kind another package installs is
validated with its own fields, like the built-in ones."""

from __future__ import annotations

import importlib.metadata

import pytest
from scenario_copies import load_edited

from harness import probes
from harness.spec.scenario import ScenarioError


def test_the_built_in_kinds_are_entry_points_with_their_fields():
    kinds = probes.probe_types()
    assert sorted(kinds) == ["admission", "api-read", "api-write", "command", "events", "host-http", "image-pulls",
                             "incluster-dns", "incluster-http", "metric", "node-ready", "object-state"]
    assert sorted(k for k, cls in kinds.items() if cls.in_probe_pod) == ["incluster-dns", "incluster-http"]
    for kind, cls in kinds.items():
        assert cls.kind == kind and set(cls.required) <= set(cls.fields)
        assert cls.in_probe_pod or callable(getattr(cls, "for_scenario", None)), kind


class QueueDepth:
    """A team's own probe kind, as another package would install it."""
    kind = "queue-depth"
    in_probe_pod = False
    required = ("queue",)
    fields = {"queue": {"type": "string", "pattern": "^[a-z]+$", "x-expected": "a queue name"},
              "max_depth": {"type": "integer", "minimum": 0, "x-expected": "a whole number of messages"}}

    @classmethod
    def problems(cls, spec):
        return [("queue", "a queue other than 'dead'", "'dead'")] if spec.get("queue") == "dead" else []


@pytest.fixture
def with_plugin(monkeypatch):
    """QueueDepth installed as a plug-in is: an entry point of the ``kdrill.probes`` group."""
    installed = importlib.metadata.entry_points
    plugin = importlib.metadata.EntryPoint("queue-depth", f"{__name__}:QueueDepth", "kdrill.probes")

    def entry_points(**params):
        found = installed(**params)
        return [*found, plugin] if params == {"group": "kdrill.probes"} else found

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    probes.probe_types.cache_clear()
    yield
    probes.probe_types.cache_clear()


def add_probe(**fields):
    def edit(d):
        d["runner"]["probes"].append({"name": "queue", "kind": "queue-depth", **fields})
    return edit


def test_a_plugin_kind_is_accepted_with_its_own_fields(tmp_path, with_plugin):
    scenario = load_edited(tmp_path, "service-blackhole", add_probe(queue="orders", max_depth=10))
    assert scenario.runner["probes"][-1]["kind"] == "queue-depth"


@pytest.mark.parametrize("fields, field, expected", [
    ({}, "queue", "a queue for a queue-depth probe"),
    ({"queue": "orders", "target": "name"}, "target", "no target: a queue-depth probe takes queue, max_depth"),
    ({"queue": "Orders"}, "queue", "a queue name"),
    ({"queue": "orders", "max_depth": -1}, "max_depth", "a whole number of messages"),
    ({"queue": "dead"}, "queue", "a queue other than 'dead'"),
])
def test_a_plugin_kinds_fields_are_checked_as_it_declares(tmp_path, with_plugin, fields, field, expected):
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "service-blackhole", add_probe(**fields))
    assert info.value.field == f"runner.probes[2].{field}", str(info.value)
    assert expected in info.value.expected


def test_a_kind_nobody_installed_names_the_installed_ones(tmp_path):
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "service-blackhole", add_probe(queue="orders"))
    assert info.value.field == "runner.probes[2].kind"
    assert ("an installed probe kind (kdrill.probes): admission, api-read, api-write, command, events, host-http, "
            "image-pulls, incluster-dns, incluster-http, metric, node-ready, object-state") in info.value.expected


def test_lookups_are_the_by_name_calls_resolution_whatever_the_call_did():
    from harness.core.timeline import Sample, Timeline
    from harness.probes.incluster import lookups

    calls = Timeline("lookups")
    calls.add(Sample(t=1.0, ok=True, latency_seconds=0.02, detail="HTTP 200", labels={"resolve_seconds": "0.004"}))
    calls.add(Sample(t=2.0, ok=False, latency_seconds=0.01, detail="ConnectionRefusedError: refused",
                     labels={"resolve_seconds": "0.003"}))  # resolved, then the endpoint was gone
    calls.add(Sample(t=3.0, ok=False, latency_seconds=0.5, detail="dns: [Errno -3] Temporary failure in name resolution"))
    # Resolved, but only after the resolver's 5 s timeout and a second attempt: late, so failed.
    calls.add(Sample(t=4.0, ok=False, latency_seconds=5.06, detail="took 5.06 s", labels={"resolve_seconds": "5.056"}))
    samples = lookups(calls, "lookups", 1.25).samples()
    assert [(s.ok, s.latency_seconds) for s in samples] == [(True, 0.004), (True, 0.003), (False, 0.5), (False, 5.056)]
    assert samples[2].detail.startswith("dns:") and "over the 1.25 s budget" in samples[3].detail


def test_a_dns_probe_takes_no_target(tmp_path):
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "coredns-scaled-to-zero", lambda d: d["runner"]["probes"][2].update(target="clusterip"))
    assert info.value.field == "runner.probes[2].target" and "no target" in info.value.expected


def test_api_probes_read_and_write_in_the_drills_namespace():
    from harness.probes.api import ApiRead, ApiReadProbe, ApiUpdateProbe, ApiWrite

    class Cluster:
        def new_api(self):
            return None

    context = probes.ProbeContext(Cluster(), "kdrill-x", 0.5, 100, ref=lambda spec: None)
    write = ApiWrite.for_scenario({"name": "writes", "kind": "api-write"}, context)
    assert isinstance(write, ApiUpdateProbe)
    assert (write.namespace, write.object_name, write.interval_seconds, write.max_seconds) == \
        ("kdrill-x", "kdrill-write-writes", 0.5, 100)
    read = ApiRead.for_scenario({"name": "reads", "kind": "api-read"}, context)
    assert isinstance(read, ApiReadProbe) and read.namespace == "kdrill-x" and read.resource_version is None


def test_a_pod_ips_probe_calls_each_pod_and_is_measured_as_one_timeline():
    from harness.core.timeline import Sample, Timeline
    from harness.probes.incluster import merge_pod_timelines, probe_pod_urls

    service = {"name": "http://web.ns.svc.cluster.local.:80/", "clusterip": "http://10.96.0.9:80/",
               "pod-web-a": "http://10.244.1.5:8080/", "pod-web-b": "http://10.244.2.7:8080/"}
    wanted = {"by-clusterip": "clusterip", "by-pod-ip": "pod-ips",
              "declared": {"service": "db", "port": 5432, "pod": "db-0"}}
    urls = probe_pod_urls(wanted, service, "ns")
    assert urls == {"by-clusterip": "http://10.96.0.9:80/", "by-pod-ip@web-a": "http://10.244.1.5:8080/",
                    "by-pod-ip@web-b": "http://10.244.2.7:8080/",
                    "declared": "http://db-0.db.ns.svc.cluster.local.:5432/"}
    with pytest.raises(ValueError, match="by-pod-ip: the Service has no pod"):
        probe_pod_urls({"by-pod-ip": "pod-ips"}, {"name": "n", "clusterip": "c"}, "ns")

    timelines = {"by-clusterip": Timeline("by-clusterip")}
    for pod, samples in (("web-a", [(1.0, True), (3.0, False)]), ("web-b", [(2.0, True), (4.0, True)])):
        timelines[f"by-pod-ip@{pod}"] = Timeline(f"by-pod-ip@{pod}")
        for t, ok in samples:
            timelines[f"by-pod-ip@{pod}"].add(Sample(t=t, ok=ok, labels={"target": f"by-pod-ip@{pod}"}))
    merged = merge_pod_timelines(timelines, wanted)
    assert sorted(merged) == ["by-clusterip", "by-pod-ip"]
    assert [(s.t, s.ok, s.labels["target"]) for s in merged["by-pod-ip"].samples()] == [
        (1.0, True, "by-pod-ip@web-a"), (2.0, True, "by-pod-ip@web-b"), (3.0, False, "by-pod-ip@web-a"),
        (4.0, True, "by-pod-ip@web-b")]


def test_an_incluster_http_probe_takes_pod_ips_and_no_other_word(tmp_path):
    load_edited(tmp_path, "service-blackhole", lambda d: d["runner"]["probes"][1].update(target="pod-ips"))
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "service-blackhole", lambda d: d["runner"]["probes"][0].update(target="pod-ip"))
    assert info.value.field == "runner.probes[0].target" and "pod-ips" in info.value.expected


@pytest.mark.parametrize("edit, field, expected", [
    # A guard that keeps seeing answers while one pod of two is dead.
    (lambda d: d["runner"].update(abort={"probe": "by-pod-ip", "max_failing_seconds": 5}), "runner.abort.probe",
     "a pod-ips probe keeps answering while any one pod does"),
    # A run of failures or a recovery over interleaved pods would be one pod's hidden by another's.
    (lambda d: d["expectations"].append({"name": "pod_ip_recovery_seconds", "description": "d", "unit": "seconds",
                                         "bound": {"op": "<=", "value": 5},
                                         "measure": {"kind": "recovery_seconds", "probe": "by-pod-ip",
                                                     "window": "after"}}),
     "expectations[10].measure.kind", "a measure that holds over the calls to every pod together"),
])
def test_what_a_pod_ips_probe_would_hide_is_refused(tmp_path, edit, field, expected):
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "network-policy-not-enforced", edit)
    assert info.value.field == field and expected in info.value.expected


def test_a_probe_pod_that_would_run_out_of_calls_before_the_after_window_ends_is_refused(tmp_path):
    def many_pods(d):
        d["workload"]["replicas"] = 20
        d["probes"]["interval_seconds"] = 0.1
        d["runner"]["windows"] = {"baseline_seconds": 60, "hold_seconds": 120, "after_seconds": 60}
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, "network-policy-not-enforced", many_pods)
    # by-clusterip, by-name and 20 pods: 22 targets x 300 s / 0.1 s.
    assert info.value.field == "runner.probes" and info.value.got == "22 targets x 300 s / 0.1 s = 66000 calls"
