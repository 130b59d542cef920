"""Ledger kind ``drill-objects``: not a failure, but the objects a data-only scenario declares
(``workload.manifests``), some of them cluster-scoped (an APIService, a webhook configuration,
a second namespace).

Namespaced objects would go with the drill's namespace; cluster-scoped ones would not, and a
left-over APIService whose backend is gone breaks every namespace deletion in the cluster. So
the objects are written to the ledger before any is created (``planned``), created in order, and
deleted newest first by the revert, in the runner's ``finally`` and by ``kdrill recover`` after a
crash. The revert goes over every planned object, not only those whose creation was answered
(``created``): a creation the API made but whose answer was lost (a timeout, a reset), or one
just before a ``kill -9`` and its checkpoint, is not in ``created`` but is labelled.

kdrill never takes over what it did not make: an object that already exists is refused (the
drill stops before its fault), and the revert deletes only objects carrying this entry's label
``kdrill.io/drill-objects=<token>``, so a platform object of the same name is left alone.
"""

from __future__ import annotations

import copy
import logging
import re
import secrets
import time
from typing import Any, Callable

from kubernetes.client.exceptions import ApiException

from harness.components.static_pods import CRICTL_KILL
from harness.core.waiting import wait_until
from harness.faults import Fault, FaultError, FaultNotReverted
from harness.kube import objects as kube_objects
from harness.kube.objects import Ref
from harness.kube.providers import Cluster
from harness.spec.manifests import OWNER_LABEL

log = logging.getLogger("kdrill.scaffolding.drill_objects")

# The label's value, one per ledger entry (secrets.token_hex); an entry's is checked against this.
TOKEN = re.compile(r"[A-Za-z0-9]{1,63}")
# Deadlines, not measurements: objects gone after their deletion (a namespace's finalisation on
# a loaded 2-core machine takes the longest).
GONE_DEADLINE_SECONDS = 240
# How long a deleted custom resource's controller has to remove its finalizers before the revert does.
FINALIZER_GRACE_SECONDS = 60
POLL_SECONDS = 1.0


class DrillObjects(Fault):
    """Create ``manifests`` (complete, placeholders expanded, namespaced ones with
    ``metadata.namespace``) in order, each once the one before serves (``until_serving``); the
    revert deletes those created, newest first."""

    kind = "drill-objects"

    def __init__(self, cluster: Cluster, manifests: list[dict[str, Any]], token: str | None = None,
                 created: list[dict[str, Any]] | None = None,
                 until_serving: Callable[[Ref], None] | None = None,
                 planned: list[dict[str, Any]] | None = None) -> None:
        super().__init__(cluster)
        self.token = token or secrets.token_hex(6)
        self.manifests = [self._labelled(m) for m in manifests]
        # The runner's kinds and those the manifests' CustomResourceDefinitions define.
        self.kinds = kube_objects.known_kinds(self.manifests)
        # What may exist (the manifests' refs, or the ledger's after a crash), in creation order.
        self.planned: list[dict[str, Any]] = [Ref.of(m, self.kinds).to_dict() for m in self.manifests] \
            or list(planned or [])
        self.created: list[dict[str, Any]] = list(created or [])
        # Called after each creation, before the next: waits until that object serves (raises if
        # it does not), so an APIService is created after its Service and backend (see kube_objects).
        self.until_serving = until_serving or (lambda ref: None)

    def _labelled(self, manifest: dict[str, Any]) -> dict[str, Any]:
        manifest = copy.deepcopy(manifest)
        manifest.setdefault("metadata", {}).setdefault("labels", {})[OWNER_LABEL] = self.token
        return manifest

    def target(self) -> dict[str, Any]:
        # The refs, not the manifests: they may hold a Secret's data, and the revert needs names only.
        return {"token": self.token, "planned": list(self.planned), "created": list(self.created)}

    def where(self) -> list[Any]:
        return [str(Ref.of(m, self.kinds)) for m in self.manifests]

    def inject(self) -> None:
        for manifest in self.manifests:
            ref = Ref.of(manifest, self.kinds)
            try:
                kube_objects.create(self.cluster, manifest, ref)
            except ApiException as exc:
                if exc.status == 409:
                    raise FaultError(f"{ref} already exists; kdrill does not take over an object it did not "
                                     "make (delete it, or rename it in the scenario)") from None
                raise FaultError(f"creating {ref}: HTTP {exc.status} {exc.reason}: {(exc.body or '')[:300]}") from None
            self.created.append(ref.to_dict())
            self.checkpoint()
            self.until_serving(ref)

    def _ours(self, ref: Ref) -> bool | None:
        """True when the object exists and carries this entry's label, False when it exists
        without it, None when it is gone."""
        obj = kube_objects.read(self.cluster, ref)
        if obj is None:
            return None
        return ((obj.get("metadata") or {}).get("labels") or {}).get(OWNER_LABEL) == self.token

    def _newest_first(self) -> list[Ref]:
        """Every object this entry may have made, newest first: the planned ones (a creation may
        have taken effect without its answer), and any created one not among them."""
        refs = [Ref.from_dict(data) for data in self.planned]
        refs += [ref for ref in map(Ref.from_dict, self.created) if ref not in refs]
        return list(reversed(refs))

    def delete_if_ours(self, ref: Ref) -> str:
        """Delete ``ref`` when it carries this entry's label, and only the object read (its uid a
        precondition of the deletion: one that took its name meanwhile is left). Returns
        "deleted", "gone" (it did not exist) or "not ours". Raises ApiException, or what the client
        raises when nothing answers."""
        obj = kube_objects.read(self.cluster, ref)
        if obj is None:
            return "gone"
        meta = obj.get("metadata") or {}
        if (meta.get("labels") or {}).get(OWNER_LABEL) != self.token:
            return "not ours"
        try:
            return "deleted" if kube_objects.delete(self.cluster, ref, uid=meta.get("uid")) else "gone"
        except ApiException as exc:
            if exc.status != 409 or not meta.get("uid"):
                raise
            # The precondition failed when another object has the name now; any other conflict
            # leaves ours there, and is raised so the revert is tried again.
            now = kube_objects.read(self.cluster, ref)
            if now is not None and (now.get("metadata") or {}).get("uid") == meta["uid"]:
                raise
            return "not ours" if now is not None else "gone"

    def _pod_is_ours(self, pod: dict, ref: Ref) -> bool:
        """Whether ``pod`` is this entry's: it carries the label (a declared Pod), or its
        controller is a StatefulSet that does (the very object, by uid)."""
        meta = pod.get("metadata") or {}
        ours = (meta.get("labels") or {}).get(OWNER_LABEL) == self.token
        owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
        if not ours and owner and owner.get("kind") == "StatefulSet":
            parent = kube_objects.read(self.cluster, Ref("StatefulSet", owner.get("name", ""), ref.namespace))
            parent_meta = (parent or {}).get("metadata") or {}
            ours = parent_meta.get("uid") == owner.get("uid") \
                and (parent_meta.get("labels") or {}).get(OWNER_LABEL) == self.token
        return ours

    def evict_if_ours(self, ref: Ref) -> str:
        """Evict the Pod ``ref`` when it is this entry's (:meth:`_pod_is_ours`). Only the pod read
        is evicted (its uid a precondition). Returns "evicted", "gone" or "not ours". Raises
        ApiException (429 when a PodDisruptionBudget refuses), or what the client raises when
        nothing answers."""
        pod = kube_objects.read(self.cluster, ref)
        if pod is None:
            return "gone"
        if not self._pod_is_ours(pod, ref):
            return "not ours"
        return "evicted" if kube_objects.evict(self.cluster, ref, uid=(pod.get("metadata") or {}).get("uid")) else "gone"

    def scale_if_ours(self, ref: Ref, replicas: int) -> str:
        """Set the replicas of the Deployment or StatefulSet ``ref`` (its scale subresource) when
        it carries this entry's label. Returns "scaled", "gone" or "not ours". Raises ApiException,
        or what the client raises when nothing answers."""
        ours = self._ours(ref)
        if ours is None:
            return "gone"
        if not ours:
            return "not ours"
        kube_objects.scale(self.cluster, ref, replicas)
        return "scaled"

    def kill_container_if_ours(self, ref: Ref, container: str) -> str:
        """Stop the running ``container`` of the Pod ``ref`` (when it is this entry's) through its
        node's runtime, at once (``crictl stop --timeout 0``: SIGKILL); the kubelet then does what
        the pod's restartPolicy says. Returns "killed container <id> on <node>", "gone" or "not
        ours". Raises FaultError when the container is not running, ProviderError when the node
        cannot be reached (no node access)."""
        pod = kube_objects.read(self.cluster, ref)
        if pod is None:
            return "gone"
        if not self._pod_is_ours(pod, ref):
            return "not ours"
        status = next((c for c in (pod.get("status") or {}).get("containerStatuses") or []
                       if c.get("name") == container), None)
        container_id = ((status or {}).get("containerID") or "").split("://")[-1]
        if not container_id or not ((status or {}).get("state") or {}).get("running"):
            raise FaultError(f"{ref} has no running container {container!r}")
        node = (pod.get("spec") or {}).get("nodeName")
        self.cluster.node_exec(node, [*CRICTL_KILL.split(), container_id], timeout_seconds=60)
        return f"killed container {container_id[:13]} on {node}"

    def revert(self) -> None:
        errors = []
        for ref in self._newest_first():
            try:
                if self.delete_if_ours(ref) == "deleted" and ref.plural is not None:
                    self._finalised(ref)
            except ApiException as exc:
                errors.append(f"{ref}: HTTP {exc.status} {exc.reason}")
        if errors:
            raise FaultError("could not delete: " + "; ".join(errors))

    def _finalised(self, ref: Ref) -> None:
        """Wait until the deleted custom resource ``ref`` is gone: it may hold a finalizer its
        controller removes, and that controller may be an older object of this entry. After
        :data:`FINALIZER_GRACE_SECONDS`, the finalizers of its own group (the only ones a scenario
        may declare) are removed here, so no object of a drill outlives it. Raises ApiException."""
        if wait_until(lambda: self._ours(ref) is not True, FINALIZER_GRACE_SECONDS, interval_seconds=POLL_SECONDS,
                      description=f"{ref} deleted").ok:
            return
        removed = kube_objects.remove_finalizers(self.cluster, ref, str(ref.api_version).split("/")[0] + "/")
        log.warning("%s still there %d s after its deletion: removed its finalizers %s (their controller did not)",
                    ref, FINALIZER_GRACE_SECONDS, removed)

    def verify_reverted(self) -> None:

        started = time.monotonic()
        for ref in self._newest_first():
            left = GONE_DEADLINE_SECONDS - (time.monotonic() - started)
            # Gone, or someone else's object of that name now (not ours to delete); an API error is "not yet".
            if not wait_until(lambda: self._ours(ref) is not True, max(left, 1.0), interval_seconds=POLL_SECONDS,
                              description=f"{ref} deleted").ok:
                raise FaultNotReverted(f"{ref} still exists {GONE_DEADLINE_SECONDS} s after its deletion")

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "DrillObjects":
        """The entry's objects, for ``kdrill recover``. Raises FaultError, before anything is read
        or deleted, for an entry not as :meth:`target` writes it (edited or damaged): a token that
        is no label value (a missing one once meant a fresh token, nothing deleted and the entry
        dropped), or an object that is no ref of a known kind with a name the API takes. The
        entry then stays for a human to look at."""
        def refuse(field: str, expected: str, got: Any) -> None:
            raise FaultError(f"drill-objects ledger entry: {field}: expected {expected}, got {got!r:.200}; "
                             "inspect it by hand (nothing was read or deleted)")

        token = target.get("token")
        if not isinstance(token, str) or not TOKEN.fullmatch(token):
            refuse("token", "the entry's own label value (letters and digits)", token)
        for key in ("planned", "created"):
            if not isinstance(target.get(key, []), list):
                refuse(key, "a list of objects", target.get(key))
        # The definitions this entry made (a custom resource's is always among them, before it).
        definitions = {data.get("name") for key in ("planned", "created") for data in target.get(key, [])
                       if isinstance(data, dict) and data.get("kind") == "CustomResourceDefinition"}
        for key in ("planned", "created"):
            for i, data in enumerate(target.get(key, [])):
                problem = _ref_problem(data, definitions)
                if problem is not None:
                    refuse(f"{key}[{i}]", problem, data)
        return cls(cluster, [], token=target["token"], created=target.get("created") or [],
                   planned=target.get("planned") or [])


def _ref_problem(data: Any, definitions: set[str] = frozenset()) -> str | None:
    """What a ledger's object ``data`` should be instead, or None: {kind, name, namespace} of a
    kind the runner knows, or of a custom resource with its apiVersion (group/version) and plural,
    whose CustomResourceDefinition (``<plural>.<group>``) is among the entry's own objects
    (``definitions``: their names), named as the API takes them (the names become a request's
    path, and a forged entry must not reach another group's objects)."""
    known = ", ".join(kube_objects.KINDS)
    if not isinstance(data, dict) or set(data) - {"kind", "name", "namespace", "apiVersion", "plural"} \
            or not all(isinstance(v, str) for v in data.values()):
        return f"{{kind, name, namespace}} of a kind among {known}, or a custom resource's with apiVersion and plural"
    if "plural" in data or "apiVersion" in data:
        group, _, version = str(data.get("apiVersion")).rpartition("/")
        if data["kind"] in kube_objects.KINDS or not re.fullmatch(r"[A-Z][A-Za-z0-9]*", data["kind"]) \
                or kube_objects.name_problem(version, "label-1035") or kube_objects.reserved_group(group) \
                or "." not in group or f"{data.get('plural')}.{group}" not in definitions:
            return ("a custom resource: a kind none of the runner's own, at group/version, of a "
                    "CustomResourceDefinition <plural>.<group> this entry made")
    elif data.get("kind") not in kube_objects.KINDS:
        return f"{{kind, name, namespace}} of a kind among {known}"
    if data.get("name") is None:
        return "a name"
    return Ref.from_dict(data).resource.problem(data.get("name"), data.get("namespace"))
