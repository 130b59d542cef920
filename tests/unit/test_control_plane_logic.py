"""Pure logic behind the control-plane-stop drill: CoreDNS placement predictions, node
transitions, kube-system restart deltas, and per-case expectations in scenario files."""

import json

import pytest

from harness.components.dns import lookups_as_predicted, lookups_predicted
from harness.probes.nodes import node_transitions
from harness.probes.pods import restarts_between
from harness.scenario import ScenarioError, load_scenario
from harness.timeline import Sample, Timeline

CP = ["cp1", "cp2", "cp3"]


@pytest.mark.parametrize("dns_nodes, stopped, expected", [
    (["cp1", "cp1"], CP, "fail"),
    (["w1", "w2"], CP, "work"),
    (["cp1", "w1"], CP, "partial"),
    ([], CP, "fail"),
    (["cp1", "cp2"], [], "work"),
])
def test_lookups_predicted_from_placement(dns_nodes, stopped, expected):
    assert lookups_predicted(dns_nodes, stopped) == expected


@pytest.mark.parametrize("prediction, ratio, expected", [
    ("fail", 0.0, True), ("fail", 0.04, True), ("fail", 1.0, False), ("fail", 0.5, False),
    ("work", 1.0, True), ("work", 0.98, False),
    ("partial", 0.5, True), ("partial", 0.0, False), ("partial", 1.0, False),
    ("work", None, None),
])
def test_lookups_as_predicted(prediction, ratio, expected):
    assert lookups_as_predicted(prediction, ratio) is expected


def test_unknown_prediction_raises():
    with pytest.raises(KeyError):
        lookups_as_predicted("maybe", 0.5)


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
