"""Pure logic behind the control-plane-stop drill: a success ratio judged against a placement, the
workers' containers changed in the window, node transitions, kube-system restart deltas, and
per-case expectations in scenario files."""

import json

import pytest

from harness.core.timeline import Sample, Timeline
from harness.engine.measures import as_predicted
from harness.faults.outage_work import containers_changed, replaced_by
from harness.probes.nodes import node_transitions
from harness.probes.pods import restarts_between
from harness.spec.scenario import ScenarioError, load_scenario

CP = ["cp1", "cp2", "cp3"]


@pytest.mark.parametrize("ratio, share_away, expected", [
    (0.0, 1.0, True), (0.04, 1.0, True), (1.0, 1.0, False), (0.5, 1.0, False),
    (1.0, 0.0, True), (0.98, 0.0, False),
    (0.5, 0.5, True), (0.0, 0.5, False), (1.0, 0.5, False),
    (None, 0.0, None), (1.0, None, None),
])
def test_a_success_ratio_judged_against_the_share_taken_away(ratio, share_away, expected):
    assert as_predicted(ratio, share_away) is expected


def _containers(node, running, t, ok=True):
    listing = {cid: {"pod_uid": pod, "name": "http" if cid != "s" else "sidecar", "state": "CONTAINER_RUNNING"}
               for cid, pod in running.items()}
    return Sample(t=t, ok=ok, detail=json.dumps({node: listing}), labels={"node": node})


def test_a_container_gone_in_the_window_is_a_change_and_an_unsampled_node_is_named():
    tl = Timeline("worker-containers")
    tl.add(_containers("w1", {"a": "p1", "b": "p2"}, 1))
    tl.add(_containers("w1", {"a": "p1", "b": "p2"}, 11))
    tl.add(_containers("w1", {"a": "p1", "c": "p2"}, 12))  # b replaced by c
    tl.add(_containers("w2", {"x": "p3"}, 11))  # nothing before the window
    changed, unsampled = containers_changed(tl, ["w1", "w2"], 10, 20)
    assert changed == {"b"} and unsampled == ["w2"]
    assert containers_changed(tl, ["w1"], 10, 11.5) == (set(), [])


def test_a_replacement_is_another_running_container_of_the_same_pod():
    assert replaced_by(_containers("w1", {"c": "p2"}, 1), "p2", "http", "b")
    assert not replaced_by(_containers("w1", {"b": "p2"}, 1), "p2", "http", "b")
    assert not replaced_by(_containers("w1", {"c": "p9"}, 1), "p2", "http", "b")
    # A sibling container of the pod that was never killed is not its restart.
    assert not replaced_by(_containers("w1", {"s": "p2"}, 1), "p2", "http", "b")


def _node_sample(t, states, ok=True):
    return Sample(t=t, ok=ok, detail=json.dumps(states) if ok else "timeout")


def test_node_transitions_lists_changes_only():
    tl = Timeline("nodes")
    ready = {"ready": "True", "taints": []}
    unknown = {"ready": "Unknown", "taints": ["node.kubernetes.io/unreachable:NoExecute"]}
    tl.add(_node_sample(1, {"w1": ready, "w2": ready}))
    tl.add(_node_sample(2, {"w1": ready, "w2": ready}))
    tl.add(_node_sample(3, {}, ok=False))  # API down: no information, no change
    tl.add(_node_sample(4, {"w1": unknown, "w2": ready}))
    tl.add(_node_sample(5, {"w1": ready, "w2": ready}))
    changes = node_transitions(tl)
    assert [(c["t"], c["node"], c["ready"]) for c in changes] == [
        (1, "w1", "True"), (1, "w2", "True"), (4, "w1", "Unknown"), (5, "w1", "True")]
    assert changes[2]["taints"] == ["node.kubernetes.io/unreachable:NoExecute"]
    assert [c["t"] for c in node_transitions(tl, start=3)] == [4, 4, 5]


def test_a_changing_not_ready_message_is_no_transition_but_a_new_reason_is():
    tl = Timeline("nodes")

    def pleg(seconds):
        return {"ready": "False", "reason": "KubeletNotReady", "taints": [],
                "message": f"PLEG is not healthy: pleg was last seen active {seconds}s ago; threshold is 3m0s"}

    tl.add(_node_sample(1, {"cp2": {"ready": "True", "reason": "KubeletReady", "taints": []}}))
    for t in (2, 3, 4):
        tl.add(_node_sample(t, {"cp2": pleg(180 + t)}))
    tl.add(_node_sample(5, {"cp2": {"ready": "Unknown", "reason": "NodeStatusUnknown", "taints": [],
                                    "message": "Kubelet stopped posting node status."}}))
    changes = node_transitions(tl)
    assert [(c["t"], c["reason"]) for c in changes] == [(1, "KubeletReady"), (2, "KubeletNotReady"), (5, "NodeStatusUnknown")]
    assert changes[1]["message"].endswith("182s ago; threshold is 3m0s")  # the first seen in that state


def test_restarts_between_counts_added_restarts_and_new_pods():
    before = {"etcd-cp1": {"restarts": 2}, "coredns-a": {"restarts": 0}}
    after = {"etcd-cp1": {"restarts": 3}, "coredns-a": {"restarts": 0}, "coredns-b": {"restarts": 1}}
    assert restarts_between(before, after) == {"etcd-cp1": 1, "coredns-b": 1}


SCENARIO = """
name: x
title: t
drill: drills/test_x.py
claim: c
source: [{title: s, url: "https://example.org/"}]
cluster: {config: ha}
fault: {kind: control-plane-stop, method: m}
expectations:
  - {name: common, description: d, bound: {op: "<=", value: 1}, unit: seconds}
cases:
  - name: a
    expectations:
      - {name: only_a, description: d, bound: {op: "==", value: true}, unit: bool}
  - name: b
"""


def test_case_expectations_are_added_to_the_scenarios(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text(SCENARIO)
    scenario = load_scenario(path)
    assert [e.name for e in scenario.expectations_for("a")] == ["common", "only_a"]
    assert [e.name for e in scenario.expectations_for("b")] == ["common"]
    assert [e.name for e in scenario.expectations_for(None)] == ["common"]
    assert scenario.to_dict()["cases"][0]["expectations"][0]["name"] == "only_a"


def test_case_expectation_may_not_shadow_a_common_one(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text(SCENARIO.replace("name: only_a", "name: common"))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert info.value.field == "cases[0].expectations[0].name"
    assert "already uses it" in str(info.value)


def test_case_expectation_bool_bound_needs_equality(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text(SCENARIO.replace('{op: "==", value: true}', '{op: ">=", value: true}'))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert info.value.field == "cases[0].expectations[0].bound.value"


def test_nodes_not_ready_seconds_within_the_window():
    from harness.probes.nodes import nodes_not_ready_seconds

    changes = [{"t": 0, "node": "a", "ready": "True"}, {"t": 0, "node": "b", "ready": "True"},
               {"t": 12, "node": "a", "ready": "Unknown"}, {"t": 15, "node": "a", "ready": "True"},
               {"t": 14, "node": "b", "ready": "False"}]
    assert nodes_not_ready_seconds(changes, 10, 20) == {"a": 3.0, "b": 6.0}
    assert nodes_not_ready_seconds(changes, 16, 20) == {"b": 4.0}
    assert nodes_not_ready_seconds(changes[:2], 0, 20) == {}


def test_node_ready_counts_only_the_statuses_asked_for():
    from harness.probes.nodes import nodes_counted

    states = {"cp1": {"ready": "False"}, "cp2": {"ready": "Unknown"}, "w1": {"ready": "True"}, "w2": {"ready": None}}
    assert nodes_counted(states, ("Unknown",)) == ["cp2"]
    assert nodes_counted(states, ("False", "Unknown")) == ["cp1", "cp2"]


def _edited(tmp_path, edit):
    from scenario_copies import load_edited

    return load_edited(tmp_path, "control-plane-stop", edit)


def test_a_host_http_probe_must_call_the_workloads_node_port(tmp_path):
    def edit(d):
        next(p for p in d["runner"]["probes"] if p["kind"] == "host-http")["node_port"] = 30081
    with pytest.raises(ScenarioError) as info:
        _edited(tmp_path, edit)
    assert info.value.field.endswith(".node_port") and "workload.node_port" in info.value.expected
    assert "30080" in info.value.expected and info.value.got == "30081"


def test_predicted_by_needs_a_ratio_fact_a_success_ratio_and_a_bool(tmp_path):
    def fact(d):
        d["cases"][1]["expectations"][0]["measure"]["predicted_by"] = "new_replicasets"  # a count
    with pytest.raises(ScenarioError) as info:
        _edited(tmp_path, fact)
    assert info.value.field.endswith("measure.predicted_by") and "coredns_replicas_on_stopped_nodes" in info.value.expected

    def kind(d):
        d["cases"][1]["expectations"][0]["measure"]["kind"] = "max_latency_seconds"
    with pytest.raises(ScenarioError) as info:
        _edited(tmp_path, kind)
    assert "success_ratio and unit bool" in info.value.expected


def without_scheduled_runs(d: dict) -> None:
    d["fault"]["params"].pop("scheduled_job")
    d["expectations"] = [e for e in d["expectations"] if not e["name"].startswith("scheduled_run")]


def test_the_runners_hold_is_the_one_the_nodes_revert_at(tmp_path):
    from harness.cli.scenarios import check_references

    def edit(d):
        d["runner"]["windows"]["hold_seconds"] = 45
    with pytest.raises(ScenarioError) as info:
        check_references(_edited(tmp_path, edit))
    assert info.value.field == "runner.windows.hold_seconds" and "62, the hold_seconds param" in info.value.expected

    def short(d):
        d["fault"]["params"].update(hold_seconds=49, kill_after_seconds=10)
        without_scheduled_runs(d)
        d["runner"]["windows"]["hold_seconds"] = 49
    with pytest.raises(ScenarioError) as info:
        check_references(_edited(tmp_path, short))
    assert "kill_after_seconds + 40 s" in info.value.expected

    def long_enough(d):
        d["fault"]["params"].update(hold_seconds=50, kill_after_seconds=10)
        without_scheduled_runs(d)
        d["runner"]["windows"]["hold_seconds"] = 50
    check_references(_edited(tmp_path, long_enough))

    def too_short_for_a_minute(d):  # a window under a minute may hold no every-minute run
        d["fault"]["params"].update(hold_seconds=50, kill_after_seconds=10)
        d["runner"]["windows"]["hold_seconds"] = 50
    with pytest.raises(ScenarioError) as info:
        check_references(_edited(tmp_path, too_short_for_a_minute))
    assert "at least 62 s with scheduled_job" in info.value.expected


def test_the_workers_units_survive_in_the_ledger_entry():
    """kdrill recover rebuilds the fault from its entry: the workers' kills and sampler are in it."""
    from harness.faults.control_plane_stop import ControlPlaneStop

    class Cluster:
        name = "c"
        nodes_by_role = {"control-plane": ["cp1"], "worker": ["w1"]}

    target = {"method": "pause-node-containers", "nodes": ["cp1"],
              "work_units": {"w1": ["kdrill-cps-ab-kill0", "kdrill-cps-ab-sampler"]}}
    fault = ControlPlaneStop.from_target(Cluster(), target)
    assert fault.target()["work_units"] == target["work_units"]


def declared(d: dict, kind: str) -> dict:
    return next(m for m in d["workload"]["manifests"] if m["kind"] == kind)


@pytest.mark.parametrize("edit, field, expected", [
    (lambda d: d["fault"]["params"].update(control_job="restart-me"), "fault.params.control_job",
     "a Job the drill makes in"),
    (lambda d: declared(d, "Job")["spec"]["template"]["spec"].update(restartPolicy="OnFailure"),
     "fault.params.control_job", "restartPolicy Never, parallelism 1, one container"),
    (lambda d: declared(d, "Job")["spec"].update(parallelism=2), "fault.params.control_job",
     "parallelism 1"),
    (lambda d: d["fault"]["params"].update(scheduled_job="replace-me"), "fault.params.scheduled_job",
     "a CronJob the drill makes in"),
    (lambda d: declared(d, "CronJob")["spec"].update(schedule="*/5 * * * *"), "fault.params.scheduled_job",
     "schedule '* * * * *'"),
    (lambda d: declared(d, "CronJob")["spec"]["jobTemplate"]["spec"].pop("suspend"), "fault.params.scheduled_job",
     "jobTemplate.spec.suspend true"),
    (lambda d: declared(d, "CronJob")["spec"].update(startingDeadlineSeconds=30), "fault.params.scheduled_job",
     "startingDeadlineSeconds more than hold_seconds (62)"),
    (lambda d: [d["fault"]["params"].pop(k) for k in ("control_job", "kill_selector", "kill_after_seconds")],
     "fault.params.scheduled_job", "without control_job"),
    (lambda d: d["fault"]["params"].pop("control_job"), "fault.params.kill_selector", "without control_job"),
    (lambda d: d["fault"]["params"].update(kill_selector="app=nobody"), "fault.params.kill_selector",
     "labels matching pods the drill makes"),
])
def test_the_workers_side_is_checked_before_anything_is_touched(tmp_path, edit, field, expected):
    """Each refusal names the parameter and what it needs (the Job, the CronJob as declared)."""
    from harness.cli.scenarios import check_references

    with pytest.raises(ScenarioError) as info:
        check_references(_edited(tmp_path, edit))
    assert info.value.field == field and expected in info.value.expected, str(info.value)


def test_a_fact_the_fault_does_not_measure_with_these_params_is_refused(tmp_path):
    from harness.cli.scenarios import check_references

    def no_workers_side(d):
        for key in ("control_job", "kill_selector", "kill_after_seconds", "scheduled_job"):
            d["fault"]["params"].pop(key)
    with pytest.raises(ScenarioError) as info:
        check_references(_edited(tmp_path, no_workers_side))
    assert "measure.fact" in info.value.field and "none with these params" in info.value.expected


def test_a_node_read_that_fails_records_nothing():
    """An API that does not answer says nothing of the nodes: no sample, so a run of not-Ready
    reads is not lengthened by the API's own outage."""
    from harness.probes.nodes import NodeNotReadyProbe

    probe = NodeNotReadyProbe.__new__(NodeNotReadyProbe)
    probe.name, probe.counted = "nodes", ("Unknown",)

    class Down:
        def list_node(self, **kwargs):
            raise ConnectionError("refused")

    probe.core, probe.timeout_seconds = Down(), 1.0
    assert probe.sample() is None


def test_the_jobs_replacement_after_the_return_is_timed_from_the_api_seen_back():
    from harness.faults.outage_work import replaced_after_return

    returned, api_back = 100.0, 106.0
    assert replaced_after_return({"created": 110.0, "started": 112.0}, api_back, returned) == 6.0
    # Replaced by the Job controller of the first node given back, before the API was first asked.
    assert replaced_after_return({"created": 104.0, "started": 105.0}, api_back, returned) == 0.0
    # Made during the outage: not the return's replacement.
    assert replaced_after_return({"created": 99.0, "started": 107.0}, api_back, returned) is None
    assert replaced_after_return({"created": 110.0, "started": None}, api_back, returned) is None
    assert replaced_after_return({"created": 110.0, "started": 112.0}, None, returned) is None


def test_steady_state_needs_ten_good_calls_in_a_row_to_every_target():
    from harness.engine.runner import STEADY_CALLS, steady

    good = [{"target": "name", "ok": True}] * STEADY_CALLS + [{"target": "clusterip", "ok": True}] * STEADY_CALLS
    assert steady(good, ["name", "clusterip"])
    # One good answer is not steady: a CoreDNS replica that has not learnt the Service still fails.
    assert not steady([{"target": "name", "ok": True}] + good[STEADY_CALLS:], ["name", "clusterip"])
    flapping = good + [{"target": "name", "ok": False}]
    assert not steady(flapping, ["name", "clusterip"])
    assert not steady(good, ["name", "clusterip", "pod-ips"])
