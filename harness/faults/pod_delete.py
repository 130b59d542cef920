"""Fault ``pod-delete``: some of the pods a label selector matches are deleted through the API.

A generic fault for data-only scenarios (harness/engine/runner.py): it needs no node access, only the
API. Before anything is deleted, the pods chosen (name, UID, node, owner) and the ready replicas
of each owning workload are recorded in the ledger. Each delete carries a UID precondition, so it
can only ever remove the pod that was recorded (a StatefulSet's replacement has the same name).

Nothing is undone on revert: the owning controller (a Deployment's ReplicaSet, a StatefulSet, a
DaemonSet) replaces the pods by itself, which is the behaviour under test. The verification waits
until every owner has as many ready replicas as before. A pod that no controller owns would never
be replaced, so a selector matching one is refused before anything is deleted.

Sources: "Disruptions" (a pod deleted directly is a voluntary disruption; a replicated
application stays available: https://kubernetes.io/docs/concepts/workloads/pods/disruptions/),
"Termination of Pods" (graceful and forced deletion; a terminating pod leaves its Service's
EndpointSlices and no longer counts as a replica:
https://kubernetes.io/docs/concepts/workloads/pods/pod-termination/), "ReplicaSet" (keeps the
number of replicas it is asked for: https://kubernetes.io/docs/concepts/workloads/controllers/replicaset/).
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.core.waiting import wait_until
from harness.faults import Fault, FaultError, FaultNotReverted
from harness.kube.providers import Cluster
from harness.spec.params import Param, label_selector

# The workloads whose ready count tells when a deleted pod has been replaced. A pod of a
# ReplicaSet that a Deployment owns is counted on the Deployment.
OWNER_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet")
MAX_COUNT = 50
MAX_GRACE_PERIOD_SECONDS = 300
# A deadline for the verification, not an expectation: a small workload's replacement pods
# scheduled, started (image already on the node) and ready. The grace period the deleted pods were
# given is added to it, since a StatefulSet replaces a pod only once the old one is gone.
READY_DEADLINE_SECONDS = 180


def _controller(meta) -> Any | None:
    """The owner reference marked ``controller: true`` in ``meta``, or None."""
    return next((ref for ref in (meta.owner_references or []) if ref.controller), None)


def _ready(pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))


def _ready_since(pod) -> float | None:
    """When ``pod`` last became Ready (epoch seconds, as its kubelet wrote it: the node's clock,
    whole seconds), or None when it is not Ready."""
    for c in pod.status.conditions or []:
        if c.type == "Ready" and c.status == "True" and c.last_transition_time is not None:
            return c.last_transition_time.timestamp()
    return None


class PodDelete(Fault):
    """Delete ``count`` of the pods in ``namespace`` matching ``selector``, with
    ``grace_period_seconds`` (seconds; None: each pod's own ``terminationGracePeriodSeconds``; 0: a
    forced deletion, the Pod object removed from the API at once and its kubelet left to stop the
    containers). Ready pods are chosen first, then by name, so a run is repeatable."""

    kind = "pod-delete"
    method = "delete"
    params = {
        "selector": Param("selector", "the label selector of the pods to choose from, e.g. 'app=web' (never empty: "
                          "that would match every pod)"),
        "count": Param("integer", "how many of the matching pods are deleted (default 1)", minimum=1,
                       maximum=MAX_COUNT, required=False),
        "grace_period_seconds": Param("integer", "the deletion's grace period in whole seconds (0: forced deletion, "
                                      "the Pod object removed at once; default: each pod's own "
                                      "terminationGracePeriodSeconds)", minimum=0,
                                      maximum=MAX_GRACE_PERIOD_SECONDS, required=False),
        "target_namespace": Param("name", "the pods' namespace (default: the drill's own)", required=False),
    }

    def __init__(self, cluster: Cluster, namespace: str, selector: str, count: int = 1,
                 grace_period_seconds: int | None = None, deleted: list[dict[str, Any]] | None = None,
                 owners: list[dict[str, Any]] | None = None, deleted_at: float | None = None) -> None:
        super().__init__(cluster)
        try:
            label_selector(selector)
        except ValueError as exc:
            raise FaultError(f"pod-delete needs a selector that picks the pods to delete: {exc}") from None
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
            raise FaultError(f"pod-delete deletes 1 to {MAX_COUNT} pods, got count {count!r}")
        if grace_period_seconds is not None and (isinstance(grace_period_seconds, bool)
                                                 or not isinstance(grace_period_seconds, int)
                                                 or not 0 <= grace_period_seconds <= MAX_GRACE_PERIOD_SECONDS):
            raise FaultError(f"pod-delete's grace period is 0 to {MAX_GRACE_PERIOD_SECONDS} whole seconds, "
                             f"got {grace_period_seconds!r}")
        self.namespace, self.selector, self.count = namespace, selector, count
        self.grace_period_seconds = grace_period_seconds
        # Recorded before the first delete: each pod chosen ({name, uid, node, owner, grace_seconds})
        # and each owner ({kind, name, ready_before}).
        self.deleted = list(deleted or [])
        self.owners = list(owners or [])
        self.deleted_at = deleted_at  # epoch seconds, this machine's clock, just before the first delete
        self.ready_after_seconds: float | None = None  # from the revert's end until the owners were ready
        self.replacements: list[dict[str, Any]] | None = None
        self._uids_before: set[str] | None = None  # every matching pod before the deletion (this process only)

    @classmethod
    def for_scenario(cls, cluster: Cluster, namespace: str, params: dict[str, Any]) -> "PodDelete":
        """The fault a data-only scenario's ``fault.params`` describe, in the drill's ``namespace``
        unless ``target_namespace`` says otherwise."""
        return cls(cluster, params.get("target_namespace") or namespace, params["selector"],
                   params.get("count", 1), params.get("grace_period_seconds"))

    @classmethod
    def selects_pods(cls, params: dict[str, Any]) -> list[tuple[str, str, str | None]]:
        """The pods to choose from (harness/faults/targets.py: check_targets)."""
        return [("selector", params["selector"], params.get("target_namespace"))]

    def target(self) -> dict[str, Any]:
        """The selector and, once chosen, the pods deleted and their owners' ready counts before."""
        return {"method": self.method, "namespace": self.namespace, "selector": self.selector, "count": self.count,
                "grace_period_seconds": self.grace_period_seconds, "deleted": self.deleted, "owners": self.owners,
                "deleted_at": self.deleted_at}

    def where(self) -> list[Any]:
        """The pods deleted, or the selector while none is chosen yet."""
        if self.deleted:
            return [f"pod {self.namespace}/{p['name']} (uid {p['uid']}, {p['owner'] or 'no owner'})" for p in self.deleted]
        return [f"pods {self.namespace} matching {self.selector!r}"]

    def evidence(self) -> dict[str, Any]:
        """The pods deleted and their owners; the replacements (name, node, when they became Ready:
        the kubelet's clock, whole seconds); ``replacements_ready_seconds``: from just before the
        first delete until the last replacement was Ready (seconds; None when not measured); and
        ``ready_after_revert_seconds``: how long the verification waited for the owners' ready
        counts (seconds; near 0 when the replacements were ready within the fault window)."""
        ready = [r["ready_at"] for r in self.replacements or [] if r.get("ready_at") is not None]
        measured = self.deleted_at is not None and self.deleted and len(ready) >= len(self.deleted)
        return {"deleted": self.deleted, "owners": self.owners, "grace_period_seconds": self.grace_period_seconds,
                "replacements": self.replacements,
                "replacements_ready_seconds": round(max(ready) - self.deleted_at, 3) if measured else None,
                "ready_after_revert_seconds": self.ready_after_seconds}

    # -- the API ----------------------------------------------------------------------------------

    def _owner_of(self, pod) -> tuple[str, str] | None:
        """(kind, name) of the workload that replaces ``pod``, or None when no controller owns it."""
        ref = _controller(pod.metadata)
        if ref is None:
            return None
        if ref.kind == "ReplicaSet":
            replica_set = self.cluster.apps.read_namespaced_replica_set(ref.name, self.namespace, _request_timeout=10)
            parent = _controller(replica_set.metadata)
            if parent is not None and parent.kind == "Deployment":
                return "Deployment", parent.name
        return ref.kind, ref.name

    def _ready_replicas(self, kind: str, name: str) -> int:
        apps = self.cluster.apps
        if kind == "Deployment":
            return apps.read_namespaced_deployment(name, self.namespace, _request_timeout=10).status.ready_replicas or 0
        if kind == "ReplicaSet":
            return apps.read_namespaced_replica_set(name, self.namespace, _request_timeout=10).status.ready_replicas or 0
        if kind == "StatefulSet":
            return apps.read_namespaced_stateful_set(name, self.namespace, _request_timeout=10).status.ready_replicas or 0
        if kind == "DaemonSet":
            return apps.read_namespaced_daemon_set(name, self.namespace, _request_timeout=10).status.number_ready or 0
        raise FaultError(f"pod-delete cannot tell when a {kind}'s pods are replaced (it knows {', '.join(OWNER_KINDS)})")

    def _matching(self) -> list:
        return self.cluster.core.list_namespaced_pod(self.namespace, label_selector=self.selector,
                                                     _request_timeout=10).items

    def inject(self) -> None:
        """Choose the pods, refuse what nothing would replace, record them and their owners'
        ready counts in the ledger, then delete them."""
        pods = [p for p in self._matching()
                if p.metadata.deletion_timestamp is None and p.status.phase not in ("Succeeded", "Failed")]
        if len(pods) < self.count:
            raise FaultError(f"pod-delete: {len(pods)} running pod(s) in {self.namespace} match {self.selector!r}, "
                             f"{self.count} to delete")
        owner_of = {p.metadata.uid: self._owner_of(p) for p in pods}
        ownerless = sorted(p.metadata.name for p in pods if owner_of[p.metadata.uid] is None)
        if ownerless:
            raise FaultError(f"pod-delete: {', '.join(ownerless)} in {self.namespace} match {self.selector!r} but no "
                             "controller owns them, so nothing would replace them; narrow the selector")
        unknown = sorted({f"{k}/{n}" for k, n in owner_of.values() if k not in OWNER_KINDS})
        if unknown:
            raise FaultError(f"pod-delete: pods matching {self.selector!r} are owned by {', '.join(unknown)}; it can "
                             f"only tell when pods of a {', '.join(OWNER_KINDS)} are replaced")
        chosen = sorted(pods, key=lambda p: (not _ready(p), p.metadata.name))[:self.count]
        owners = sorted({owner_of[p.metadata.uid] for p in chosen})
        self._uids_before = {p.metadata.uid for p in pods}
        self.owners = [{"kind": kind, "name": name, "ready_before": self._ready_replicas(kind, name)}
                       for kind, name in owners]
        self.deleted = [{"name": p.metadata.name, "uid": p.metadata.uid, "node": p.spec.node_name,
                         "owner": "/".join(owner_of[p.metadata.uid]),
                         "grace_seconds": (self.grace_period_seconds if self.grace_period_seconds is not None
                                           else p.spec.termination_grace_period_seconds)}
                        for p in chosen]
        self.checkpoint()  # the pods and the ready counts to come back to are in the ledger before any delete
        self.deleted_at = time.time()
        for pod in self.deleted:
            options = client.V1DeleteOptions(grace_period_seconds=self.grace_period_seconds,
                                             preconditions=client.V1Preconditions(uid=pod["uid"]))
            try:
                self.cluster.core.delete_namespaced_pod(pod["name"], self.namespace, body=options, _request_timeout=10)
            except ApiException as exc:
                # 404: already gone; 409: the name now belongs to another pod (the recorded one is gone).
                if exc.status not in (404, 409):
                    raise

    def revert(self) -> None:
        """Nothing to undo: the owning controllers replace the deleted pods by themselves."""

    def _gone(self, pod: dict[str, Any]) -> bool:
        """Whether the recorded pod is gone from the API (a pod of the same name with another UID
        is its replacement), was never deleted, or, unless a StatefulSet owns it, is at least
        terminating."""
        try:
            current = self.cluster.core.read_namespaced_pod(pod["name"], self.namespace, _request_timeout=10)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        if current.metadata.uid != pod["uid"]:
            return True
        if current.metadata.deletion_timestamp is None:
            # Never deleted: kdrill stopped between recording it and deleting it. Nothing to wait for.
            return True
        return not str(pod["owner"]).startswith("StatefulSet/")

    def verify_reverted(self) -> None:
        """Wait until each deleted pod is gone (or terminating) and each owner has its ready
        replicas of before; raises FaultNotReverted after :data:`READY_DEADLINE_SECONDS` (plus
        the deleted pods' grace period, seconds)."""

        if not self.deleted:
            return  # nothing was chosen, so nothing was deleted
        ownerless = [p["name"] for p in self.deleted if not p.get("owner")]
        if ownerless:
            raise FaultNotReverted(f"pods {', '.join(ownerless)} in {self.namespace} had no owner: nothing recreates "
                                   "them; recreate them by hand, then remove the ledger entry")
        since = self.reverted_at or time.time()

        def restored() -> bool:
            try:
                return all(self._gone(p) for p in self.deleted) and \
                    all(self._ready_replicas(o["kind"], o["name"]) >= o["ready_before"] for o in self.owners)
            except ApiException as exc:
                if exc.status == 404:
                    return True  # the namespace went (kdrill recover deletes it after this)
                raise

        # Capped: the recorded grace is the pod's own terminationGracePeriodSeconds when none was
        # given, which may be years; the ledger's value is not trusted beyond the parameter's range.
        grace = min(max([p.get("grace_seconds") or 0 for p in self.deleted] + [0]), MAX_GRACE_PERIOD_SECONDS)
        done = wait_until(restored, READY_DEADLINE_SECONDS + grace, interval_seconds=0.5,
                          description=f"pods deleted from {self.namespace} replaced")
        if not done.ok:
            wanted = ", ".join(f"{o['kind']} {o['name']}: {o['ready_before']}" for o in self.owners)
            raise FaultNotReverted(f"the pods deleted from {self.namespace} are not replaced: ready replicas wanted "
                                   f"{wanted} (last error: {done.last_error})")
        self.ready_after_seconds = round(done.became_true_at - since, 3)
        self._find_replacements()

    def _find_replacements(self) -> None:
        """The pods matching the selector that did not exist before the deletion (known only to
        the process that deleted them), with when each became Ready, for the evidence."""
        if self._uids_before is None:
            return
        try:
            pods = self._matching()
        except ApiException:
            return  # evidence only: the verification itself has passed
        self.replacements = [{"name": p.metadata.name, "uid": p.metadata.uid, "node": p.spec.node_name,
                              "ready_at": _ready_since(p)}
                             for p in pods if p.metadata.uid not in self._uids_before]

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "PodDelete":
        """The fault as the ledger recorded it (``kdrill recover``)."""
        return cls(cluster, target["namespace"], target["selector"], target.get("count", 1),
                   target.get("grace_period_seconds"), target.get("deleted"), target.get("owners"),
                   target.get("deleted_at"))
