"""Drill: kill the leading kube-controller-manager or kube-scheduler (scenarios/leader-failover.yaml).

The leader holds the Lease ``kube-system/<component>`` and renews it; the other instances wait.
Killed outright, it releases nothing: another instance takes the Lease only once it has expired
(lease duration after the last renewal it saw). Until then nothing does that component's work: a
Deployment scaled up right after the kill gets no new pods (controller-manager), a new pod is not
bound to a node (scheduler). The drill measures the failover from the Lease itself and the work
delayed by it, against the same work in the baseline.

Why a Python drill: the instance to kill is the Lease holder found at run time, on whichever
control-plane node it runs, and the work it delays is asked for at the moment of the kill and
compared with the same work in the baseline; a data-only scenario names its targets up front.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from harness.core.waiting import hold_until, wait_until
from harness.engine.workload import serve_web
from harness.faults.leader_kill import LeaderKill, holder, lease
from harness.kube.workloads import TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY
from harness.spec.manifests import APP


def _pods(cluster, ns: str) -> list[client.V1Pod]:
    return cluster.core.list_namespaced_pod(ns, label_selector=f"app={APP}", _request_timeout=5).items


def _scale(cluster, ns: str, replicas: int) -> None:
    cluster.apps.patch_namespaced_deployment_scale(APP, ns, {"spec": {"replicas": replicas}}, _request_timeout=10)


def _bare_pod(name: str) -> client.V1Pod:
    """A pod for the scheduler to bind (its running is not the point)."""
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": "bind-me"}),
        spec=client.V1PodSpec(termination_grace_period_seconds=0, containers=[client.V1Container(
            name="sleep", image=TOOLBOX_IMAGE, image_pull_policy=TOOLBOX_PULL_POLICY, command=["sleep", "3600"])]))


class Work:
    """The work only the component's leader does: pods created for a scale-up
    (kube-controller-manager) or a pod bound to a node (kube-scheduler)."""

    def __init__(self, cluster, ns: str, component: str) -> None:
        self.cluster, self.ns, self.component = cluster, ns, component
        self.count = 0

    def start(self, scale_to: int) -> tuple[float, "callable"]:
        """Ask for the work; returns (asked at, a check that returns the time it was done or None)."""
        self.count += 1
        if self.component == "kube-controller-manager":
            before = {p.metadata.name for p in _pods(self.cluster, self.ns)}
            asked = time.time()
            _scale(self.cluster, self.ns, scale_to)

            def done():
                new = [p for p in _pods(self.cluster, self.ns) if p.metadata.name not in before]
                if not new or len(new) + len(before) < scale_to:
                    return None
                return min(p.metadata.creation_timestamp.timestamp() for p in new)
            return asked, done
        name = f"bind-me-{self.count}"
        asked = time.time()
        self.cluster.core.create_namespaced_pod(self.ns, _bare_pod(name), _request_timeout=10)

        def bound():
            pod = self.cluster.core.read_namespaced_pod(name, self.ns, _request_timeout=5)
            condition = next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"
                              and c.status == "True"), None)
            return condition.last_transition_time.timestamp() if pod.spec.node_name and condition else None
        return asked, bound


@pytest.mark.cluster
@pytest.mark.destructive
@pytest.mark.node_access
@pytest.mark.scenario("leader-failover")
def test_leader_failover(drill):
    cluster, ns, p = drill.cluster, drill.namespace, drill.params
    component, observe, scale_to = p["component"], float(p["observe_seconds"]), int(p["scale_to"])
    work = Work(cluster, ns, component)

    with drill.phase("setup"):
        drill.fresh_namespace()
        serve_web(drill, replicas=1)  # the work below scales it up from one
        spec = lease(cluster, component).spec
        drill.observe("lease_before", {"holder": spec.holder_identity, "lease_duration_seconds":
                                       spec.lease_duration_seconds, "lease_transitions": spec.lease_transitions})

    what = "pods created for a scale-up" if component == "kube-controller-manager" else "a new pod bound to a node"
    with drill.phase("baseline"):
        asked, check = work.start(2)
        done = wait_until(check, 60, interval_seconds=0.25, description=f"{component} work done (baseline)")
        # Seen by polling every 0.25 s: the API's own timestamps have whole seconds only.
        drill.measure("baseline_work_seconds", done.became_true_at - asked if done.ok else None, detail=what)

    fault = LeaderKill(cluster, component)
    with drill.inject(fault):
        with drill.phase("failover"):
            old = fault.holder_identity
            drill.say(f"killed {component} leader {old} on {fault.node}")
            asked, check = work.start(scale_to)

            def new_holder():
                identity, _ = holder(cluster, component)
                return identity if identity and identity != old else None

            taken = wait_until(new_holder, observe, interval_seconds=0.25, description="another instance holds the Lease")
            # The new holder's acquireTime (microseconds, set by the node's clock, which is the
            # host's in kind; see the run's clock offsets) times the failover; the poll is the fallback.
            acquired = lease(cluster, component).spec.acquire_time if taken.ok else None
            acquired_at = acquired.timestamp() if acquired is not None else taken.became_true_at
            taken_after = acquired_at - fault.injected_at if taken.ok else None
            drill.measure("new_leader_seconds", taken_after,
                          detail=f"from the kill until {taken.value} acquired the Lease (its acquireTime; seen by "
                                 f"polling {taken.became_true_at - fault.injected_at:.2f} s after the kill); "
                                 f"lease duration {spec.lease_duration_seconds} s", became_true_at=acquired_at)
            drill.measure("new_leader_not_before_lease_expiry_seconds", taken_after,
                          detail="a killed leader releases nothing: the Lease is taken only once it expired")
            finished = wait_until(check, observe, interval_seconds=0.25, description=f"{component} work done (failover)")
            drill.measure("work_done_after_kill_seconds", finished.became_true_at - asked if finished.ok else None,
                          detail=f"{what}, asked {asked - fault.injected_at:.2f} s after the kill",
                          became_true_at=finished.became_true_at)
            if taken.ok and finished.ok:
                # The work's API timestamp has whole seconds (truncated): done after the acquisition
                # means its second is not before the acquisition's second.
                drill.measure("work_waited_for_new_leader", finished.value >= int(acquired_at),
                              detail=f"{what} at {finished.value:.0f} (API time, whole seconds); Lease acquired "
                                     f"at {acquired_at:.3f}")
            else:
                drill.expectations.error("work_waited_for_new_leader", "no new leader or the work was not done")
            drill.observe("lease_after", {"holder": holder(cluster, component)[0],
                                          "lease_transitions": lease(cluster, component).spec.lease_transitions})

    drill.observe("killed_instance_back_after_seconds", fault.restored_after_seconds)
    with drill.phase("recovery"):
        # With the new leader and the killed instance back, the same work is prompt again; the
        # probes (and the vital signs) go on for the window after the revert.
        started = time.time()
        asked, check = work.start(scale_to + 1)
        done = wait_until(check, 60, interval_seconds=0.25, description=f"{component} work done (recovery)")
        drill.measure("recovery_work_seconds", done.became_true_at - asked if done.ok else None, detail=what)
        hold_until(started + float(p["recovery_seconds"]))
    drill.expectations.assert_all()
