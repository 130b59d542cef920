"""Fault ``etcd-restore``: every etcd member lost, then the cluster restored from a snapshot.

The loss (:meth:`EtcdRestore.inject`): on every control-plane node the kubelet is stopped and the
control-plane static pods killed (``crictl stop --timeout 0``), then the member's data
(``/var/lib/etcd/member``) is moved aside to :data:`LOST` (kept, not deleted: until a restore
has succeeded it is the way back).

The restore (:meth:`EtcdRestore.restore`), as documented for kubeadm clusters: with every API
server stopped, each member's data directory is rebuilt from the same snapshot with ``etcdutl
snapshot restore`` (its own ``--name`` and peer URL, the whole ``--initial-cluster``, a new
``--initial-cluster-token``; ``--bump-revision`` with ``--mark-compacted`` so that no watcher
resumes from a revision the restored store reuses), then the kubelets are started and run etcd,
the API servers, controller-manager and scheduler again on the restored data.

The revert: after a restore, the moved-aside data is deleted; before one (a drill that failed,
or ``kdrill recover`` after a crash), the original data is moved back on every node, so the
cluster comes back as it was before the loss. Either way the kubelets are started, and the
verification waits until every member serves a quorum read and the API answers.

Through the node agent nothing can be sent to a node from the loss until the restore has brought
an API server back (the exec goes through the API server and the node's kubelet), so the whole
fault is held on the nodes (:mod:`harness.components.node_units`), set while the API still
answers: the snapshot and etcdutl are copied to every node first, then each node gets a restore
unit due at ``restore_at`` (restore its member from the snapshot; if etcdutl fails, move its
original data back; then start the kubelet, however the script ended) and, only once every node
has its restore, a loss unit due at ``lost_at`` (kubelet stopped, control-plane containers
killed, data moved aside; it does nothing if its node's restore has begun). Every node runs the
same restore at the same due time, whatever becomes of kdrill. The revert reads each node's
outcome once it answers; if they differ (one restored, another returned or never lost), the
members would belong to two clusters, so every node's original data is moved back, one node
at a time as a unit of its own (each leaves a quorum for the exec to the next). A revert before
``lost_at`` cancels the losses where it can, and the restores where every loss was cancelled.
It needs an odd number of control-plane nodes (outcomes that differ then still leave one side a
quorum to reach the nodes through), and, as through docker, etcd's data on the filesystem of
/var/lib (moving it aside is then a rename, never a copy). Through docker the steps are sent
when they happen, as before.

Sources: "Operating etcd clusters for Kubernetes", Restoring an etcd cluster
(https://kubernetes.io/docs/tasks/administer-cluster/configure-upgrade-etcd/#restoring-an-etcd-cluster);
etcd "Disaster recovery", Restoring a cluster (https://etcd.io/docs/v3.6/op-guide/recovery/).
"""

from __future__ import annotations

import re
import shlex
import time
from typing import Any

from harness.components import node_units, static_pods
from harness.components.etcd import member_healthy
from harness.components.topology import clock_offset, least_offset_seconds
from harness.core.waiting import wait_until
from harness.faults import Fault, FaultError, FaultNotReverted
from harness.kube.providers import Cluster
from harness.spec.params import Param

DATA = "/var/lib/etcd"  # kubeadm's etcd data directory (hostPath of the etcd static pod)
LOST = "/var/lib/etcd-kdrill-lost"  # the member's data, moved aside by the loss
RESTORING = "/var/lib/etcd-kdrill-restore"  # etcdutl's output, moved into DATA when complete
SNAPSHOT_ON_NODE = "/var/lib/kdrill-etcd-snapshot.db"
ETCDUTL_ON_NODE = "/usr/local/bin/kdrill-etcdutl"
# etcdutl --bump-revision: far above any revision the lost cluster reached in a drill.
BUMP_REVISION = 1_000_000_000
# A deadline for the verification, not a measurement: every member serving a quorum read and the
# API answering after the kubelets start on a loaded 2-core machine.
HEALTHY_DEADLINE_SECONDS = 300

# Through the node agent (held on the nodes). The loss is due this long after the last unit is
# set: the commands setting them take about 0.3 s each through the node agent here.
LOSS_LEAD_SECONDS = 5.0
# A loss is not set when its due time is nearer than this: every node must have it before it fires.
MIN_LOSS_LEAD_SECONDS = 1.0
# The restore is due at least this long after the loss: the loss (kubelet stopped, containers
# killed, data moved) must be done by then; a loss that comes later does nothing.
MIN_HELD_HOLD_SECONDS = 5.0
# Each unit ends within this (systemd kills it after; the restore's kubelet start runs after
# however it ended): the restore of a drill's snapshot took a few seconds here.
UNIT_RUNTIME_MAX_SECONDS = 240
# A deadline, not a measurement: every node's restore outcome readable after its due time (the
# API accepted a write 16.2 s after the restore was due, through the agent here).
OUTCOME_DEADLINE_SECONDS = 300
# A restore with no record of starting this long after its due time, and no timer left, never ran.
NEVER_RAN_GRACE_SECONDS = 30
# A deadline, not a measurement: a node answering its clean-up once the control plane is back.
CLEAN_UP_DEADLINE_SECONDS = 120
# The restore unit's exit status: its member restored, or not (UNLOCKED: its lock could not be taken).
RESTORED, RETURNED, NOTHING_LOST, UNLOCKED = 0, 10, 11, 12
# The loss unit's exit status when its node's restore had begun: nothing was lost.
LOSS_TOO_LATE = 3
OUTCOMES = {RESTORED: "restored from the snapshot", RETURNED: "etcdutl failed: the original data moved back",
            NOTHING_LOST: "nothing lost there (no data moved aside)",
            UNLOCKED: "its lock could not be taken: nothing done"}


def manifest_flag(manifest: str, flag: str) -> str:
    """The value of ``--flag=value`` in a static pod manifest's command. Raises LookupError."""
    found = re.search(rf"^\s*- --{re.escape(flag)}=(\S+)\s*$", manifest, re.MULTILINE)
    if not found:
        raise LookupError(f"--{flag} not in the etcd static pod manifest")
    return found.group(1)


def restore_command(snapshot: str, name: str, peer_url: str, initial_cluster: str, token: str) -> str:
    """The shell command restoring one member's data from ``snapshot`` into DATA/member."""
    restore = [ETCDUTL_ON_NODE, "snapshot", "restore", snapshot, "--name", name,
               "--initial-cluster", initial_cluster, "--initial-cluster-token", token,
               "--initial-advertise-peer-urls", peer_url, "--data-dir", RESTORING,
               "--bump-revision", str(BUMP_REVISION), "--mark-compacted"]
    return (f"rm -rf {RESTORING} && {' '.join(shlex.quote(a) for a in restore)} >/dev/null && "
            f"rm -rf {DATA}/member && mv {RESTORING}/member {DATA}/member && rm -rf {RESTORING}")


# The node's running etcd containers, or exit 5 when the runtime does not answer: an unanswered
# listing must not read as "etcd is not running" before data is moved.
ETCD_RUNNING = "ids=$(crictl --timeout 30s ps -q --state Running --name '^etcd$') || exit 5"


def return_original_script() -> str:
    """On one node: the original data back in place of whatever is there (if any was moved
    aside), the control plane restarted on it; exit 0 only when the data is back (or was never
    moved), 4 when etcd still ran (nothing moved), 5 when the move failed or the runtime did not
    answer. Stops the kubelet: run as a unit of its own, with the kubelet's start after it."""
    return (static_pods.stop_kubelet_and_kill_script(static_pods.CONTROL_PLANE_COMPONENTS) + "; "
            "rc=0; ids=$(crictl --timeout 30s ps -q --state Running --name '^etcd$') || rc=5; "
            f"if [ $rc -eq 0 ] && [ -d {LOST}/member ]; then if [ -n \"$ids\" ]; then rc=4; else "
            f"{{ rm -rf {RESTORING} {DATA}/member && mv {LOST}/member {DATA}/member; }} || rc=5; fi; fi; "
            "systemctl start kubelet; exit $rc")


class EtcdRestore(Fault):
    """Lose the etcd data of every member on ``nodes`` (all control-plane nodes), and restore it."""

    kind = "etcd-restore"
    needs_node_access = True
    # Through the node agent the whole loss and restore are held on the nodes, set beforehand.
    node_access_level = "exec"
    node_capability = ("stops every control-plane node's kubelet and static pods, moves etcd's data aside and restores "
                       "a snapshot on each node (through the node agent: set on the nodes beforehand as systemd timers)")
    params = {
        "markers": Param("integer", "ConfigMaps written before the snapshot, and as many after it", minimum=1,
                         maximum=200),
        "lost_hold_seconds": Param("seconds", "how long the cluster stays without etcd before the restore starts",
                                   minimum=0, maximum=300),
        "baseline_seconds": Param("seconds", "probes before the snapshot", minimum=1, maximum=120),
        "after_seconds": Param("seconds", "probes after the revert", minimum=1, maximum=300),
    }

    def __init__(self, cluster: Cluster, nodes: list[str], token: str, step: str = "none",
                 hold_seconds: float | None = None, snapshot: str | None = None, etcdutl: str | None = None,
                 units: dict[str, Any] | None = None) -> None:
        super().__init__(cluster)
        self.nodes, self.token, self.step = list(nodes), token, step
        self.timings: dict[str, float] = {}
        # Through the node agent: how long the members stay lost, the snapshot and etcdutl (files
        # on this machine) the nodes restore with, and the units held there (names, due times).
        self.hold_seconds, self.snapshot, self.etcdutl = hold_seconds, snapshot, etcdutl
        self.units: dict[str, Any] = dict(units or {})
        self.outcomes: dict[str, int | str | None] = {}  # node -> its restore unit's exit status
        self.lost_recorded_at: dict[str, float] = {}  # node -> when its loss ran (its record, host clock)
        self.loss_status: dict[str, int | str | None] = {}
        self.returned_everywhere: str | None = None  # why the originals were moved back on every node

    @property
    def held(self) -> bool:
        """Whether the loss and the restore are held on the nodes (through the node agent)."""
        return self.cluster.node_channel == "agent"

    @property
    def lost_at(self) -> float | None:
        """When the members were lost (epoch seconds): held on the nodes, when the loss was due
        (the nodes ran it 0.08 to 0.11 s later here: a recovery time from it is that much longer);
        else when the injection began."""
        return self.units.get("lost_at") if self.units else self.injected_at

    @property
    def restore_started_at(self) -> float | None:
        """When the restore began (epoch seconds): held on the nodes, its due time."""
        return self.units.get("restore_at") if self.units else self.timings.get("restore_started_at")

    def target(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "step": self.step, "token": self.token, "lost": LOST,
                **({"units": self.units} if self.units else {})}

    def evidence(self) -> dict[str, Any]:
        held = {}
        if self.units:
            held = {"node_timers": {
                "lost_due_at": self.units.get("lost_at"), "restore_due_at": self.units.get("restore_at"),
                "loss_recorded_at": self.lost_recorded_at, "loss_exit_status": self.loss_status,
                "restore_outcome": {n: OUTCOMES.get(o, repr(o)) if isinstance(o, int) or o is None else o
                                    for n, o in self.outcomes.items()},
                "originals_moved_back_everywhere": self.returned_everywhere,
                "clock_offsets_seconds": self.units.get("clock_offsets"),
                "note": "the loss and the restore held on each node as systemd timers (node agent), set while the "
                        "API answered; the recovery time counts from the loss's due time"}}
        return {"step": self.step, "timings_seconds": {k: round(v, 3) for k, v in self.timings.items()
                                                       if k != "restore_started_at"}, **held}

    def restarts_by_design(self) -> list[str]:
        return [f"{c}-{n}" for n in self.nodes for c in static_pods.CONTROL_PLANE_COMPONENTS]

    def inject(self) -> None:
        if self.held:
            self._inject_held()
            return
        # Recorded first: from here on, recover looks for data moved aside on every node.
        self.step = "lost"
        self.checkpoint()
        for node in self.nodes:  # nothing of the control plane runs anywhere before any data moves
            static_pods.stop_kubelet_and_kill(self.cluster, node, static_pods.CONTROL_PLANE_COMPONENTS)
        for node in self.nodes:
            self.cluster.node_exec(node, ["sh", "-c", f"rm -rf {LOST} && mkdir -p {LOST} && mv {DATA}/member {LOST}/member"])

    def _stage(self, snapshot: str, etcdutl: str) -> tuple[dict[str, tuple[str, str]], str]:
        """Copy the snapshot and etcdutl to every node and read each member's name and peer URL
        from its manifest. Returns ({node: (name, peer URL)}, the initial cluster). Raises
        ProviderError, LookupError."""
        members = {}
        for node in self.nodes:
            # Moving the data aside must be a rename: across filesystems mv copies, and a copy cut
            # short would be taken for the original.
            same = self.cluster.node_exec(node, ["sh", "-c", f'[ "$(stat -c %d {DATA})" = "$(stat -c %d /var/lib)" ]'],
                                          check=False)
            if same.returncode != 0:
                raise FaultError(f"etcd-restore: on {node} {DATA} is not on the filesystem of /var/lib: moving the "
                                 "member's data aside would copy it; this drill does not run there")
            self.cluster.copy_to_node(node, snapshot, SNAPSHOT_ON_NODE)
            self.cluster.copy_to_node(node, etcdutl, ETCDUTL_ON_NODE)
            self.cluster.node_exec(node, ["chmod", "0755", ETCDUTL_ON_NODE])  # the node agent's copy keeps no mode
            manifest = self.cluster.node_exec(node, ["cat", "/etc/kubernetes/manifests/etcd.yaml"]).stdout
            members[node] = (manifest_flag(manifest, "name"), manifest_flag(manifest, "initial-advertise-peer-urls"))
        return members, ",".join(f"{name}={peer}" for name, peer in members.values())

    def _inject_held(self) -> None:
        """Through the node agent: the snapshot and etcdutl staged on every node, every node's
        restore set, then every node's loss (module doc). Raises FaultError when the losses could
        not all be set in time (those set are cancelled), ProviderError, UnitError."""
        import uuid

        if self.hold_seconds is None or not self.snapshot or not self.etcdutl:
            raise FaultError("through the node agent etcd-restore needs hold_seconds, the snapshot and etcdutl: the "
                             "whole restore is set on the nodes before the loss")
        if len(self.nodes) % 2 == 0:
            # Outcomes that differ (one restored, one not) would leave no side with a quorum, so
            # no API server, and nothing could be sent to the nodes to put them back together.
            raise FaultError(f"through the node agent etcd-restore needs an odd number of control-plane nodes, got "
                             f"{len(self.nodes)}: with outcomes that differ no side would keep a quorum")
        if float(self.hold_seconds) < MIN_HELD_HOLD_SECONDS:
            raise FaultError(f"through the node agent etcd-restore needs lost_hold_seconds of at least "
                             f"{MIN_HELD_HOLD_SECONDS:g} (the loss must be done before the restore is due), got "
                             f"{self.hold_seconds:g}")
        started = time.time()
        self.step = "staging"  # from here on, recover removes the copies from the nodes
        self.checkpoint()
        members, initial_cluster = self._stage(self.snapshot, self.etcdutl)
        self.timings["copy"] = time.time() - started
        offsets = {node: least_offset_seconds(clock_offset(self.cluster, node)) for node in self.nodes}
        token = uuid.uuid4().hex[:8]
        lost_at = time.time() + LOSS_LEAD_SECONDS
        self.units = {"loss": f"kdrill-etcd-restore-{token}-loss", "restore": f"kdrill-etcd-restore-{token}-restore",
                      "lost_at": lost_at, "restore_at": lost_at + float(self.hold_seconds), "clock_offsets": offsets}
        self.step = "held"
        self.checkpoint()  # the ledger knows what the nodes will do, and when, before any of it is set
        slowest = 0.0  # the slowest command setting a unit: the losses must all be set, or cancelled, in time
        # The loss and the restore take one lock on their node: a loss that comes late (its node's
        # restore already begun) changes nothing, and a restore never runs beside a loss.
        locked = f"{{ exec 9> {node_units.STATE_DIR}/{self.units['restore']}.lock && flock 9; }} || exit {UNLOCKED}; "
        for node, (name, peer) in members.items():  # every node's restore before any node's loss
            sent = time.time()
            restore = (locked + f"if [ -d {LOST}/member ]; then "
                       f"if {restore_command(SNAPSHOT_ON_NODE, name, peer, initial_cluster, self.token)}; then "
                       f"exit {RESTORED}; fi; rm -rf {RESTORING} {DATA}/member; mv {LOST}/member {DATA}/member; "
                       f"exit {RETURNED}; fi; exit {NOTHING_LOST}")
            node_units.schedule(self.cluster, node, self.units["restore"], restore, self.units["restore_at"],
                                UNIT_RUNTIME_MAX_SECONDS, stop_post="systemctl start kubelet")
            slowest = max(slowest, time.time() - sent)
        # The loss runs only while its node's restore is still to come.
        loss = (locked + f"[ ! -e {node_units.STATE_DIR}/{self.units['restore']}.at ] || exit {LOSS_TOO_LATE}; "
                + static_pods.stop_kubelet_and_kill_script(static_pods.CONTROL_PLANE_COMPONENTS)
                + f"; {ETCD_RUNNING}; [ -z \"$ids\" ] || exit 4; "
                f"rm -rf {LOST} && mkdir -p {LOST} && mv {DATA}/member {LOST}/member")
        # Setting every loss, and cancelling those set should one come too late, must end before the first is due.
        needed = 2 * len(self.nodes) * slowest + MIN_LOSS_LEAD_SECONDS
        if time.time() + needed > lost_at:
            self._cancel_losses([])
            raise FaultError(f"etcd-restore: the losses could not all be set before they were due (setting a unit "
                             f"took up to {slowest:.2f} s); none was set, the restores were cancelled")
        for i, node in enumerate(self.nodes):
            if time.time() > lost_at - MIN_LOSS_LEAD_SECONDS:
                self._cancel_losses(self.nodes[:i])
                raise FaultError(f"etcd-restore: the loss on {node} could not be set {MIN_LOSS_LEAD_SECONDS} s before "
                                 "it was due; the losses set were cancelled")
            node_units.schedule(self.cluster, node, self.units["loss"], loss, lost_at, UNIT_RUNTIME_MAX_SECONDS,
                                record_exit=True)
        self.timings["units_set"] = time.time() - started

    def _cancel_losses(self, nodes: list[str]) -> bool:
        """Before the losses are due: cancel the loss on ``nodes`` (those it may be set on) and,
        when each was cancelled before it was due, every node's restore too. Returns whether
        nothing will happen on any node."""
        cancelled = True
        for node in nodes:
            try:
                node_units.cancel(self.cluster, node, [self.units["loss"]])
                if self.units["loss"] in node_units.pending(self.cluster, node):
                    cancelled = False  # still set: its restore must stay
            except Exception:  # noqa: BLE001 - its loss may still fire: its restore must stay
                cancelled = False
        if not cancelled or (nodes and time.time() >= self.units["lost_at"]):
            return False
        for node in self.nodes:
            node_units.cancel(self.cluster, node, [self.units["restore"]])
        self.units["cancelled_at"] = time.time()  # nothing will run: the revert waits for no outcome
        self.checkpoint()
        return True

    def restore(self, snapshot: str, etcdutl: str) -> None:
        """Restore every member from the snapshot file ``snapshot`` (on this machine) with the
        ``etcdutl`` binary (on this machine), then start the kubelets. Held on the nodes
        (through the node agent) the restore is set already and runs at its due time: nothing
        to do here. Raises ProviderError."""
        if self.units:
            return
        started = time.time()
        self.timings["restore_started_at"] = started
        self.step = "restoring"
        self.checkpoint()
        members, initial_cluster = self._stage(snapshot, etcdutl)
        self.timings["copy"] = time.time() - started
        for node, (name, peer) in members.items():
            self.cluster.node_exec(node, ["sh", "-c", restore_command(SNAPSHOT_ON_NODE, name, peer, initial_cluster,
                                                                      self.token)], timeout_seconds=300)
        self.timings["etcdutl"] = time.time() - started - self.timings["copy"]
        self.step = "restored"
        self.checkpoint()
        for node in self.nodes:
            static_pods.start_kubelet(self.cluster, node)
        self.timings["kubelets_started"] = time.time() - started

    def _outcome(self, node: str) -> tuple[int | str] | None:
        """``node``'s restore outcome (its unit's exit status, see OUTCOMES) as a one-tuple once it
        has one, with its loss's record. Raises what the node channel raises (nothing answers
        before the restore)."""
        outcome = node_units.ended(self.cluster, node, self.units["restore"])
        if outcome is None and time.time() > self.units["restore_at"] + NEVER_RAN_GRACE_SECONDS:
            outcome = self._never_ran(node)
        if outcome is not None:
            offset = (self.units.get("clock_offsets") or {}).get(node, 0.0)
            lost = node_units.started_at(self.cluster, node, self.units["loss"], offset)
            if lost is not None:
                self.lost_recorded_at[node] = lost
            self.loss_status[node] = node_units.exit_status(self.cluster, node, self.units["loss"])
        return outcome

    def _never_ran(self, node: str) -> tuple[int | str] | None:
        """Well past its due time, a restore that never started on ``node`` (no record of it, no
        timer left: kdrill stopped before setting it there): NOTHING_LOST when no data is aside
        there, else a string saying so (the originals then go back everywhere). None while it may
        still run."""
        if node_units.started_at(self.cluster, node, self.units["restore"]) is not None:
            return None  # it runs: its exit status comes
        if self.units["restore"] in node_units.pending(self.cluster, node):
            return None
        aside = self.cluster.node_exec(node, ["sh", "-c", f"[ -d {LOST}/member ]"], check=False).returncode == 0
        return ("never ran, with the member's data aside",) if aside else (NOTHING_LOST,)

    def _revert_held(self) -> None:
        """The revert through the node agent (module doc): the losses cancelled if none is due
        yet; else every node's restore outcome read once it answers, and the originals moved
        back everywhere when the outcomes differ. Raises FaultError."""

        if self.units.get("resolved"):  # an earlier revert (kdrill recover after it failed) acted on them
            self.outcomes = dict(self.units["resolved"])
            return
        if self.units.get("cancelled_at") or (time.time() < self.units["lost_at"] - MIN_LOSS_LEAD_SECONDS
                                              and self._cancel_losses(self.nodes)):
            self.outcomes = dict.fromkeys(self.nodes, NOTHING_LOST)
        for node in self.nodes:
            if node in self.outcomes:
                continue
            due = self.units["restore_at"]
            read = wait_until(lambda n=node: self._outcome(n), max(1.0, due + OUTCOME_DEADLINE_SECONDS - time.time()),
                              interval_seconds=1.0, description=f"the restore's outcome on {node}")
            if not read.ok:
                raise FaultError(f"etcd-restore: {node}'s restore outcome not readable {OUTCOME_DEADLINE_SECONDS} s after "
                                 f"it was due (last error: {read.last_error})")
            (self.outcomes[node],) = read.value
        outcomes = set(self.outcomes.values())
        if outcomes == {RESTORED}:
            self.step = "restored"
        elif not outcomes <= {RETURNED, NOTHING_LOST}:
            # Some restored and some not (members of two clusters), or an outcome that says nothing
            # of the data: the originals back everywhere, one node at a time (the others keep a
            # quorum that the exec to the next goes through). Every node's original data in place
            # already (returned, or never lost) needs nothing.
            self.returned_everywhere = f"the nodes' outcomes: {self.outcomes}"
            for node in self.nodes:
                self._return_original(node)
        # Recorded once acted on: the clean-up then removes the nodes' own records of them.
        self.units["resolved"] = dict(self.outcomes)
        self.checkpoint()

    def _return_original(self, node: str) -> None:
        """:func:`return_original_script` on ``node`` as a unit of its own, waited for. Raises FaultError."""
        import uuid

        unit = f"kdrill-etcd-return-{uuid.uuid4().hex[:8]}"
        cut = node_units.run_now(self.cluster, node, unit, return_original_script(), UNIT_RUNTIME_MAX_SECONDS,
                                 stop_post="systemctl start kubelet")
        ended = wait_until(lambda: node_units.ended(self.cluster, node, unit), UNIT_RUNTIME_MAX_SECONDS + 60,
                           interval_seconds=1.0)
        if not ended.ok or ended.value != (0,):
            raise FaultError(f"etcd-restore: moving the original data back on {node}: "
                             f"{ended.value if ended.ok else 'no outcome'}" + (f" (starting it: {cut})" if cut else ""))
        node_units.forget(self.cluster, node, [unit])

    def revert(self) -> None:
        if self.units:
            self._revert_held()
            self._clean_up_held()
            return
        errors = []
        restored = self.step == "restored"
        for node in self.nodes:  # every node gets its revert, whatever happened on the others
            keep_or_return = (f"rm -rf {LOST}" if restored else
                              f"rm -rf {RESTORING}; if [ -d {LOST}/member ]; then rm -rf {DATA}/member && "
                              f"mv {LOST}/member {DATA}/member; fi; rm -rf {LOST}")
            try:
                self.cluster.node_exec(node, ["sh", "-c", f"{keep_or_return}; rm -f {SNAPSHOT_ON_NODE} {ETCDUTL_ON_NODE}"])
                static_pods.restart_kubelet(self.cluster, node)
            except Exception as exc:
                errors.append(f"{node}: {exc}")
        if errors:
            raise FaultError("; ".join(errors))

    def _clean_up_held(self) -> None:
        """After :meth:`_revert_held`: the copies, the moved-aside data once every member was
        restored (else none is left aside: the data is never moved here, as the kubelets run), and
        the units' records, removed from every node; each asked until it answers (the control
        plane may just have restarted). Raises FaultError."""

        # Not restored: the moved-aside directory is empty once its data went back (a member still
        # there would be left, for the verification to name).
        leftovers = f"rm -rf {RESTORING} {LOST}" if self.step == "restored" else f"rm -rf {RESTORING}; rmdir {LOST} 2>/dev/null"
        errors = []
        for node in self.nodes:
            def clean(n: str = node) -> bool:
                self.cluster.node_exec(n, ["sh", "-c", f"{leftovers}; rm -f {SNAPSHOT_ON_NODE} {ETCDUTL_ON_NODE}"])
                node_units.forget(self.cluster, n, [self.units["loss"], self.units["restore"]])
                return True

            done = wait_until(clean, CLEAN_UP_DEADLINE_SECONDS, interval_seconds=2.0, description=f"clean-up on {node}")
            if not done.ok:
                errors.append(f"{node}: {done.last_error}")
        if errors:
            raise FaultError("etcd-restore: cleaning up: " + "; ".join(errors))

    def verify_reverted(self) -> None:

        started = time.time()
        problems = []
        for node in self.nodes:
            leftover = self.cluster.node_exec(node, ["sh", "-c", f"ls -d {LOST} {RESTORING} {SNAPSHOT_ON_NODE} "
                                                                 f"{ETCDUTL_ON_NODE} 2>/dev/null"], check=False).stdout.split()
            if leftover:
                problems.append(f"{node}: left behind {', '.join(leftover)}")
            if not static_pods.kubelet_active(self.cluster, node):
                problems.append(f"{node}: the kubelet is not active")
                continue
            if self.units:
                left = [u for u in node_units.pending(self.cluster, node)
                        if u in (self.units["loss"], self.units["restore"])]
                if left:
                    problems.append(f"{node}: timers still set: {', '.join(left)}")
            left = max(1.0, started + HEALTHY_DEADLINE_SECONDS - time.time())
            if not wait_until(lambda n=node: member_healthy(self.cluster, n), left, interval_seconds=1.0).ok:
                problems.append(f"{node}: the etcd member does not serve a quorum read")
        left = max(1.0, started + HEALTHY_DEADLINE_SECONDS - time.time())
        if not wait_until(lambda: self.cluster.core.list_namespace(_request_timeout=5), left, interval_seconds=1.0).ok:
            problems.append("the API does not answer")
        if problems:
            raise FaultNotReverted("; ".join(problems))

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "EtcdRestore":
        return cls(cluster, target["nodes"], target["token"], target.get("step", "none"), units=target.get("units"))
