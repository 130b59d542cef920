"""Fault ``etcd-member``: stop the etcd member on chosen control-plane nodes.

Method ``stop-kubelet-kill-container``: the node's kubelet is stopped, then the member's
container is killed through the container runtime (``crictl stop --timeout 0``: a failed member,
not a graceful stop, which would hand leadership over and no election would be seen). With the
kubelet stopped nothing starts it again; the static pod manifest, the pod and its mirror pod stay
as they are. The revert stops the node's kube-apiserver (it serves nothing without its member) and starts the
kubelet, which restarts the exited containers of the same pods, so the member rejoins as itself
with its own data directory. Why not move the manifest out of the static pod directory, or start
the kubelet with that kube-apiserver still hanging: see :mod:`harness.components.static_pods`
(the restore then waits minutes on the node's own API server, which waits on this member).

Through the node agent its commands reach a node through that node's kubelet, and, without
quorum, through an API server that cannot serve them: once a member is stopped nothing can be
sent to its node. So there the kubelet's start is held on each node before anything stops, as a
timer due ``hold_seconds`` after the injection (:mod:`harness.components.node_units`: a dead
man's switch that fires whatever becomes of kdrill), the stop runs as a unit of its own, and the
revert starts a node at once where it answers, or waits for its timer. Through docker both are
sent when they happen.

Targets are chosen by role (``leader`` or ``follower``) as etcd itself reports it (see
:mod:`harness.components.etcd`). The revert's verification waits for the member to serve a quorum
read again, and records per node how long that took (``restore_seconds``) and what the kubelet
logged about etcd and mirror pods meanwhile (``restore_journal``), for the evidence.

Source: Kubernetes "Operating etcd clusters for Kubernetes"
(https://kubernetes.io/docs/tasks/administer-cluster/configure-upgrade-etcd/) and "Create static
Pods" (https://kubernetes.io/docs/tasks/configure-pod-container/static-pod/).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from harness.components import node_units, static_pods
from harness.components.etcd import member_healthy
from harness.components.topology import clock_offset, least_offset_seconds
from harness.core.waiting import wait_until
from harness.faults import Fault, FaultError, FaultNotReverted
from harness.kube.providers import Cluster
from harness.spec.params import Param

# Left by the method used before ``stop-kubelet-kill-container``; a ledger entry from that
# time is still reverted by moving the parked manifest back.
MANIFEST = "/etc/kubernetes/manifests/etcd.yaml"
PARKED = "/etc/kubernetes/kdrill-parked/etcd.yaml"

# A deadline for the revert's verification, not an expectation: how long to wait for a restored
# member before declaring the revert failed (and keeping the ledger entry). The drill's bound on
# the restore time is in the scenario; this only has to be well above any real restore on a
# loaded 2-core machine (168 s with the parked manifest, 123 s starting the kubelet beside a
# hanging kube-apiserver, 3 to 7 s with this method; see harness/components/static_pods.py).
RESTORE_DEADLINE_SECONDS = 300

JOURNAL_PATTERN = "etcd|mirror pod|[Mm]irror"
# Each unit held on a node ends within this (systemd kills it after): a kubelet stops or starts in seconds.
UNIT_RUNTIME_MAX_SECONDS = 120
# The kubelet-start timers are set before the stop, and due no sooner than this after: the
# commands setting them take about 0.3 s each through the node agent here.
START_LEAD_SECONDS = 5.0
# A deadline, not a measurement: a node answering again once its kubelet is back.
NODE_ANSWER_SECONDS = 60
# A stop is not sent when its node's kubelet would start again sooner than this after it.
MIN_HOLD_LEFT_SECONDS = 2.0
# The exit status of a stop that found its node's start already gone.
STOP_TOO_LATE = 3

log = logging.getLogger(__name__)


class EtcdMember(Fault):
    """Stop the etcd members on ``nodes`` (control-plane node container names)."""

    kind = "etcd-member"
    method = "stop-kubelet-kill-container"
    needs_node_access = True
    # Through the node agent the kubelet's start is held on the node, set before the stop.
    node_access_level = "exec"
    node_capability = ("stops kubelets and kills etcd members' containers through the container runtime on "
                       "control-plane nodes, with the kubelets' start held on the nodes as timers")
    params = {
        "one_down_hold_seconds": Param("seconds", "how long one member stays stopped", minimum=11, maximum=600),
        "quorum_lost_hold_seconds": Param("seconds", "how long quorum stays lost", minimum=11, maximum=600),
        "settle_seconds": Param("seconds", "failures this soon after a stop are the load balancer's and the "
                                "election's, reported apart (must be below both holds)", minimum=0, maximum=60),
    }

    def __init__(self, cluster: Cluster, nodes: list[str], hold_seconds: float | None = None,
                 units: dict[str, Any] | None = None) -> None:
        super().__init__(cluster)
        if not nodes:
            raise FaultError("etcd-member needs at least one control-plane node")
        self.nodes = list(nodes)
        # Through the node agent: how long the members stay stopped (their kubelets' start is set
        # on the nodes before the stop), and those units' names and due time (epoch seconds).
        self.hold_seconds = hold_seconds
        self.units: dict[str, Any] = dict(units or {})
        # Through the node agent: when each node's stop ran, as the node recorded it (epoch
        # seconds, this machine's clock), read once the node answers again.
        self.stopped_at: dict[str, float] = {}
        self.stop_status: dict[str, int | str | None] = {}  # node -> the stop unit's exit status
        self.kubelet_started_at: dict[str, float] = {}
        self.apiserver_restarted: list[str] = []
        self.restore_seconds: dict[str, float | None] = {}
        self.restore_journal: dict[str, list[str]] = {}

    def target(self) -> dict[str, Any]:
        return {"method": self.method, "nodes": self.nodes, **({"units": self.units} if self.units else {})}

    def window_not_made(self) -> dict[str, str]:
        """Through the node agent, once verified: the nodes whose stop did not run, or failed, by
        their own record (node -> why). Such a window is no fault window: the drill says so
        rather than measure it. Empty through docker (a stop that fails there raises)."""
        if not self.units:
            return {}
        missing = {}
        for node in self.nodes:
            status = self.stop_status.get(node)
            if node not in self.stopped_at:
                missing[node] = "the stop never ran there (no record of it on the node)"
            elif status == STOP_TOO_LATE:
                missing[node] = "the stop came after the kubelet's start was due: nothing was stopped"
            elif status != 0:
                missing[node] = f"the stop ended with {status!r}"
        return missing

    @property
    def window_started_at(self) -> float | None:
        """When the last member stopped (epoch seconds): the node's record through the node
        agent (the stops follow the timers' setting, seconds after the injection began), else
        when the injection began."""
        stopped = [self.stopped_at.get(node) for node in self.nodes]
        return max(stopped) if stopped and None not in stopped else self.injected_at

    @property
    def restarted_at(self) -> float | None:
        """When the last stopped member's kubelet was started again (epoch seconds; by kdrill or by
        its timer on the node, the earlier), once :meth:`verify_reverted` has read it; else when the
        revert ended. Through the node agent the revert ends only once the nodes answer again,
        which needs quorum: measures of the restore start here."""
        started = [self.kubelet_started_at.get(node) for node in self.nodes]
        return max(started) if started and None not in started else self.reverted_at

    def restarts_by_design(self) -> list[str]:
        # A timer's restart cannot say whether it killed the node's kube-apiserver: it may have.
        apiservers = self.nodes if self.units else self.apiserver_restarted
        return [f"etcd-{node}" for node in self.nodes] + [f"kube-apiserver-{node}" for node in apiservers]

    def evidence(self) -> dict[str, Any]:
        return {"restore_seconds": self.restore_seconds, "restore_journal": self.restore_journal,
                "kube_apiserver_restarted_at_restore": (self.apiserver_restarted if not self.units else
                                                        "not known: the timer on the node may have killed it"),
                "side_effect": "the node's kubelet is stopped for the window (pods keep running; node lease not "
                               "renewed); at the restore the node's kube-apiserver, which serves nothing without "
                               "its member, is restarted with it",
                **({"node_timers": {"start_due_at": self.units.get("start_at"),
                                    "stopped_at": self.stopped_at, "stop_exit_status": self.stop_status,
                                    "window_not_made": self.window_not_made(),
                                    "kubelet_started_at": self.kubelet_started_at,
                                    "clock_offsets_seconds": self.units.get("clock_offsets"),
                                    "note": "kubelet start held on each node as a systemd timer (node agent); "
                                            "started at: the earlier of the node's record of the timer, less "
                                            "its clock offset, and kdrill's own start"}}
                   if self.units else {})}

    def inject(self) -> None:
        if self.cluster.node_channel != "agent":
            for node in self.nodes:
                static_pods.stop_kubelet_and_kill(self.cluster, node, ["etcd"])
            return
        if self.hold_seconds is None:
            raise FaultError("through the node agent etcd-member needs hold_seconds: the kubelets' start is set on "
                             "the nodes before the members stop")

        token = uuid.uuid4().hex[:8]
        # The nodes record when their timers ran on their own clocks (kept for kdrill recover too).
        offsets = {node: least_offset_seconds(clock_offset(self.cluster, node)) for node in self.nodes}
        start_at = max((self.injected_at or time.time()) + float(self.hold_seconds), time.time() + START_LEAD_SECONDS)
        self.units = {"stop": f"kdrill-etcd-{token}-stop", "start": f"kdrill-etcd-{token}-start", "start_at": start_at,
                      "clock_offsets": offsets}
        self.checkpoint()  # the ledger knows when the nodes start their kubelets on their own
        for node in self.nodes:  # every node's start first: no node ever has a stop without its start
            node_units.schedule(self.cluster, node, self.units["start"], static_pods.restart_kubelet_script(),
                                start_at, UNIT_RUNTIME_MAX_SECONDS)
        # The stop runs only while its node's start is still to come: a stop arriving after the
        # timer fired (or after kdrill's own start cancelled it) would leave the kubelet stopped.
        # (An elapsed timer may still read active: the start's own record says it ran.)
        # And a start that fired between that check and the stop is made again after it.
        started = f"{node_units.STATE_DIR}/{self.units['start']}.at"
        guarded = (f"[ ! -e {started} ] && systemctl is-active -q {self.units['start']}.timer || exit {STOP_TOO_LATE}; "
                   + static_pods.stop_kubelet_and_kill_script(["etcd"])
                   + f"; if [ -e {started} ]; then {static_pods.restart_kubelet_script()}; exit {STOP_TOO_LATE}; fi")
        for node in self.nodes:
            if time.time() > start_at - MIN_HOLD_LEFT_SECONDS:
                raise FaultError(f"etcd-member: the stop of {node} would come less than {MIN_HOLD_LEFT_SECONDS} s "
                                 f"before its kubelet's start: not sent")
            cut = node_units.run_now(self.cluster, node, self.units["stop"], guarded, UNIT_RUNTIME_MAX_SECONDS)
            if cut:  # by its own kubelet stop (it runs), or never sent: the node's record of the
                # stop, read after the revert, says which (window_not_made)
                log.info("etcd-member: the stop command did not return (%s)", cut)

    def _start_now(self, node: str) -> None:
        """Start the node's kubelet (killing a hanging kube-apiserver first) and, once started,
        cancel its timer, in one command (a command cut short never removes a start that has not
        happened). Raises what the node channel raises when the node cannot be reached."""
        node_units.start_then_cancel(self.cluster, node, [self.units["stop"]], static_pods.restart_kubelet_script(),
                                     [self.units["start"]])
        self.kubelet_started_at.setdefault(node, time.time())

    def _revert_held(self) -> None:
        """The revert through the node agent: each node started now where it answers; the others
        are waited for until their timers have started them (and they answer again)."""
        unreachable = []
        for node in self.nodes:
            try:
                self._start_now(node)
            except Exception:  # noqa: BLE001 - its kubelet is stopped: its timer starts it
                unreachable.append(node)
        due = self.units.get("start_at") or time.time()
        errors = []
        for node in unreachable:
            last = node_units.once_reachable(lambda n=node: self._start_now(n), due, RESTORE_DEADLINE_SECONDS)
            if last is not None:
                errors.append(f"{node}: not reachable {RESTORE_DEADLINE_SECONDS} s after its kubelet was due to start: "
                              f"{last}")
        if errors:
            raise FaultError("; ".join(errors))

    def revert(self) -> None:
        if self.units:
            self._revert_held()
            return
        errors = []
        for node in self.nodes:  # every node gets its revert, whatever happened on the others
            try:
                self.cluster.node_exec(node, ["sh", "-c",
                                              f"if [ -f {PARKED} ] && [ ! -f {MANIFEST} ]; then mv {PARKED} {MANIFEST}; fi"])
                self.kubelet_started_at[node] = time.time()
                if static_pods.restart_kubelet(self.cluster, node):
                    self.apiserver_restarted.append(node)
            except Exception as exc:
                errors.append(f"{node}: {exc}")
        if errors:
            raise FaultError("; ".join(errors))

    def verify_reverted(self) -> None:

        started = time.time()
        problems = []
        for node in self.nodes:
            # Asked until the node answers: through the node agent a command can meet, for a few
            # seconds, the API server beside a member just restarted (the load balancer still
            # sends it requests).
            state = wait_until(lambda n=node: self._kubelet_back(n), NODE_ANSWER_SECONDS, interval_seconds=1.0)
            if not state.ok:
                problems.append(f"{node}: the kubelet is not active {NODE_ANSWER_SECONDS} s after the revert "
                                f"(last error: {state.last_error})")
                continue
            if state.value["timers_left"]:
                problems.append(f"{node}: timers still set: {', '.join(state.value['timers_left'])}")
            # Running is not enough: the member must serve a quorum read again.
            left = max(1.0, started + RESTORE_DEADLINE_SECONDS - time.time())
            healthy = wait_until(lambda n=node: member_healthy(self.cluster, n), left, interval_seconds=1.0)
            since = self.kubelet_started_at.get(node) or self.reverted_at or started
            self.restore_seconds[node] = healthy.became_true_at - since if healthy.ok else None
            # The kubelet's own view of the restore, for the evidence (and for the error below).
            try:
                on_node = since - 1 + (self.units.get("clock_offsets") or {}).get(node, 0.0)  # journalctl's clock
                self.restore_journal[node] = static_pods.kubelet_journal(self.cluster, node, on_node, JOURNAL_PATTERN)
            except Exception as exc:  # noqa: BLE001 - evidence only: say why it is missing
                self.restore_journal[node] = [f"not read: {type(exc).__name__}: {str(exc)[:200]}"]
            if not healthy.ok:
                problems.append(f"{node}: the etcd member does not serve a quorum read {RESTORE_DEADLINE_SECONDS} s "
                                f"after the kubelet was started again (last error: {healthy.last_error}); kubelet: "
                                + " | ".join(self.restore_journal[node][-3:]))
        if problems:
            raise FaultNotReverted("; ".join(problems))

    def _kubelet_back(self, node: str) -> dict[str, Any] | None:
        """None while ``node``'s kubelet is not active; then, with timers held on the node, when
        its start timer ran (into :attr:`kubelet_started_at`, the earlier of that and kdrill's own
        start), which of the fault's timers are still set, and their records removed from the
        node. Raises what the node channel raises."""
        if not static_pods.kubelet_active(self.cluster, node):
            return None
        if not self.units:
            return {"timers_left": []}
        offset = (self.units.get("clock_offsets") or {}).get(node, 0.0)
        fired = node_units.started_at(self.cluster, node, self.units["start"], offset)
        if fired is not None:
            self.kubelet_started_at[node] = min(fired, self.kubelet_started_at.get(node, fired))
        stopped = node_units.started_at(self.cluster, node, self.units["stop"], offset)
        if stopped is not None:
            self.stopped_at[node] = stopped
        self.stop_status[node] = node_units.exit_status(self.cluster, node, self.units["stop"])
        left = [u for u in node_units.pending(self.cluster, node) if u in (self.units["stop"], self.units["start"])]
        node_units.forget(self.cluster, node, [self.units["stop"], self.units["start"]])
        return {"timers_left": left}

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "EtcdMember":
        return cls(cluster, nodes=target["nodes"], units=target.get("units") or {})
