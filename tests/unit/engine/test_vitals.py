"""Vital signs: windows from injections, ratios per window, and which degradation is flagged."""

import json

from harness.core.timeline import Sample
from harness.engine.vitals import assess, drill_windows, nodes_ready_in, ratio_in


def test_windows_from_injections():
    windows = drill_windows(0, 100, [{"injected_at": 10, "reverted_at": 20}, {"injected_at": 30, "reverted_at": 50}])
    assert windows == {"baseline": [(0, 10)], "fault": [(10, 20), (30, 50)], "after": [(50, 100)]}


def test_unreverted_injection_runs_to_the_end_and_no_injection_is_all_baseline():
    assert drill_windows(0, 100, [{"injected_at": 10, "reverted_at": None}])["fault"] == [(10, 100)]
    assert drill_windows(0, 100, []) == {"baseline": [(0, 100)], "fault": [], "after": []}


def test_ratio_in_counts_only_samples_in_the_spans():
    samples = [Sample(t=t, ok=t < 10 or t > 20) for t in range(0, 30)]
    assert ratio_in(samples, [(0, 9)]) == 1.0
    assert ratio_in(samples, [(11, 20)]) == 0.0
    assert ratio_in(samples, [(40, 50)]) is None


def test_nodes_ready_share_ignores_unanswered_samples():
    ready = json.dumps({"a": {"ready": "True", "taints": []}})
    unknown = json.dumps({"a": {"ready": "Unknown", "taints": []}})
    samples = [Sample(t=1, ok=True, detail=ready), Sample(t=2, ok=False, detail="timeout"),
               Sample(t=3, ok=True, detail=unknown)]
    assert nodes_ready_in(samples, [(0, 5)]) == 0.5
    assert nodes_ready_in(samples, [(2, 2)]) is None


def test_degraded_sign_is_flagged_unless_an_expectation_covers_it():
    summary = {
        "api_read": {"baseline": 1.0, "fault": 0.0, "after": 1.0},
        "service_name": {"baseline": 1.0, "fault": 0.5, "after": 1.0},
        "service_clusterip": {"baseline": 1.0, "fault": 1.0, "after": None},
        "kube_system_restarts": {"added": {"coredns-x": 1}},
    }
    assess(summary, {"api_read": "api_success_ratio_while_stopped"})
    assert summary["api_read"] | {} == {**summary["api_read"], "degraded": True, "flagged": False,
                                        "covered_by": "api_success_ratio_while_stopped"}
    assert summary["service_name"]["flagged"] is True
    assert summary["service_clusterip"]["degraded"] is False and summary["service_clusterip"]["flagged"] is False
    assert summary["kube_system_restarts"]["flagged"] is True


def test_a_sign_with_no_sample_in_a_window_of_the_drill_is_flagged():
    windows = {"baseline": [(0, 10)], "fault": [(10, 20)], "after": []}
    summary = {"service_name": {"baseline": 1.0, "fault": None, "after": None},
               "api_read": {"baseline": 1.0, "fault": 1.0, "after": None, "error": "log not readable"}}
    assess(summary, {}, windows)
    assert summary["service_name"]["flagged"] and summary["service_name"]["unmeasured"] == ["fault"]
    assert "not measured: fault" in summary["service_name"]["reason"]
    assert summary["api_read"]["flagged"] and "not readable" in summary["api_read"]["reason"]


def test_node_states_keep_who_set_a_not_ready_and_why():
    from kubernetes.client import V1Node, V1NodeCondition, V1NodeSpec, V1NodeStatus, V1ObjectMeta, V1Taint

    from harness.probes.nodes import MESSAGE_CHARS, node_states

    def node(name, status, reason, message, taints=()):
        return V1Node(metadata=V1ObjectMeta(name=name), spec=V1NodeSpec(taints=list(taints) or None),
                      status=V1NodeStatus(conditions=[
                          V1NodeCondition(type="MemoryPressure", status="False", reason="KubeletHasSufficientMemory"),
                          V1NodeCondition(type="Ready", status=status, reason=reason, message=message)]))

    states = node_states([
        node("cp1", "True", "KubeletReady", "kubelet is posting ready status"),
        node("cp2", "False", "KubeletNotReady", "PLEG is not healthy " + "x" * 500),
        node("w1", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.",
             [V1Taint(key="node.kubernetes.io/unreachable", effect="NoExecute"), V1Taint(key="team", effect="NoSchedule")]),
    ])
    assert states["cp1"] == {"ready": "True", "reason": "KubeletReady", "taints": []}  # no message when Ready
    assert states["cp2"]["reason"] == "KubeletNotReady" and len(states["cp2"]["message"]) == MESSAGE_CHARS
    assert states["w1"] == {"ready": "Unknown", "reason": "NodeStatusUnknown", "taints": ["node.kubernetes.io/unreachable:NoExecute"],
                            "message": "Kubelet stopped posting node status."}


def test_a_paused_probe_pods_samples_are_kept():
    """quiet_vitals deletes the in-cluster probe pod, and its log with it: the samples taken
    before the pause stay in the drill's vital signs (they were lost, and a drill whose pause
    came right after its injection had no in-cluster baseline)."""
    from types import SimpleNamespace

    from kubernetes.client.exceptions import ApiException

    from harness.core.timeline import Timeline
    from harness.engine.vitals import VitalSigns

    def timelines(points):
        out = {}
        for target, t, ok in points:
            out.setdefault(target, Timeline(target)).add(Sample(t=t, ok=ok))
        return out

    def gone(*_, **__):
        raise ApiException(status=404)

    core = SimpleNamespace(delete_namespaced_pod=lambda *a, **k: None, read_namespaced_pod=gone)
    vitals = VitalSigns(SimpleNamespace(core=core), None)
    first = [("name", 10.0, True), ("name", 11.0, True), ("clusterip", 10.5, True), ("name", 2.0, False)]
    vitals.probe = SimpleNamespace(timelines=lambda since=None: timelines(
        [p for p in first if since is None or p[1] >= since]))
    vitals.pause_probe()
    assert vitals.probe is None
    kept = vitals.in_cluster_timelines(since=5.0)
    assert [s.t for s in kept["name"].samples()] == [10.0, 11.0] and len(kept["clusterip"].samples()) == 1
    # the next pod's samples follow, in time order
    vitals.probe = SimpleNamespace(timelines=lambda since=None: timelines([("name", 20.0, False)]))
    merged = vitals.in_cluster_timelines(since=5.0)
    assert [(s.t, s.ok) for s in merged["name"].samples()] == [(10.0, True), (11.0, True), (20.0, False)]
