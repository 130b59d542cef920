"""The writes a webhook blast-radius drill sends, and what became of each.

A fixed catalogue of server-side dry-run writes (admission runs, nothing is stored; source:
https://kubernetes.io/docs/reference/using-api/api-concepts/#dry-run), chosen to show where an
admission webhook reaches when its backend is down: an application's writes in the drill's own
namespace (ConfigMap, Pod, Deployment, Event), a new Namespace, the writes the platform itself
makes all the time (a node's Lease in kube-node-lease, the Node object, a ConfigMap in
kube-system), kdrill's own vital-sign write, and the webhook's repair (an UPDATE of its own
Service, a ConfigMap in its own namespace). Each is described as a
:class:`harness.components.admission.Write`, so the configuration's prediction and the API's
answer can be put side by side.

Outcomes (:class:`Outcome`): ``admitted`` (2xx), ``rejected`` (the API's "failed calling webhook"
error: a webhook could not be called and its failurePolicy is Fail), ``denied`` (any other
refusal: a policy, validation), ``no answer`` (the client gave up after its timeout, seconds).
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from kubernetes.client.exceptions import ApiException

from harness.components.admission import Write, label_selector_matches
from harness.kube import objects as kube_objects
from harness.kube.objects import Kind, Ref
from harness.kube.providers import Cluster
from harness.kube.workloads import TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY
from harness.spec.manifests import VITALS_NAMESPACE
from harness.spec.params import _LABEL_KEY, _LABEL_VALUE

FAILED_CALLING = re.compile(r'failed calling webhook "([^"]+)"')
DRY_RUN_LABEL = "kdrill.io/dry-run"
# Written here as dry runs only: never kinds a scenario may declare, or a ledger entry delete.
DRY_RUN_KINDS = {k.kind: k for k in [Kind("v1", "Event", "events", True), Kind("v1", "Node", "nodes", False),
                                     Kind("coordination.k8s.io/v1", "Lease", "leases", True)]}
VITALS_OBJECT = "vitals-write"  # the ConfigMap the api_write vital sign updates (harness.engine.vitals)


@dataclass(frozen=True)
class CatalogueWrite:
    """One write: ``name`` (``<what>@<where>``), the :class:`Write` webhooks are matched against,
    whether the platform itself makes it (``system``) or it is the webhook's own repair
    (``repair``), and ``send(timeout_seconds)``, which sends it as a dry run."""

    name: str
    write: Write
    send: Callable[[float], Any]
    system: bool = False
    repair: bool = False


@dataclass(frozen=True)
class Outcome:
    """What the API answered: ``outcome`` (see the module doc), ``seconds`` the request took,
    ``webhook`` the webhook named in a "failed calling webhook" error, ``message`` the API's."""

    outcome: str
    seconds: float
    webhook: str | None = None
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "seconds": round(self.seconds, 3), "webhook": self.webhook,
                "message": self.message[:300]}


def classify(exc: BaseException | None) -> tuple[str, str | None, str]:
    """(outcome, webhook, message) for the exception a write raised (None: admitted)."""
    if exc is None:
        return "admitted", None, ""
    if isinstance(exc, ApiException):
        message = kube_objects.api_message(exc)
        failed = FAILED_CALLING.search(message)
        return ("rejected", failed.group(1), message) if failed else ("denied", None, message)
    return "no answer", None, f"{type(exc).__name__}: {exc}"


def send(write: CatalogueWrite, timeout_seconds: float) -> Outcome:
    """Send ``write`` once and classify the answer; never raises for the API's answer."""
    started = time.monotonic()
    try:
        write.send(timeout_seconds)
        error = None
    except Exception as exc:  # the answer is the measurement, whatever it is
        error = exc
    outcome, webhook, message = classify(error)
    return Outcome(outcome, time.monotonic() - started, webhook, message)


def send_all(writes: list[CatalogueWrite], timeout_seconds: float) -> dict[str, Outcome]:
    """Every write at once (a black-holed webhook holds each for its timeoutSeconds): name ->
    :class:`Outcome`."""
    if not writes:
        return {}
    with ThreadPoolExecutor(max_workers=min(8, len(writes))) as pool:
        return dict(zip([w.name for w in writes], pool.map(lambda w: send(w, timeout_seconds), writes)))


def _labelled(name: str) -> dict[str, Any]:
    return {"name": name, "labels": {DRY_RUN_LABEL: "blast-radius"}}


def excluding_labels(selector: dict | None) -> dict[str, str] | None:
    """Labels an object can carry so that ``selector`` (a LabelSelector, the API's camelCase) does
    not match it, from its first requirement that adding a label can defeat; None when there is
    none (an empty selector, or only ``Exists``: a label must then be missing, not added) or the
    selector is one the API would refuse. Always a valid label that the selector really misses."""
    try:
        label_selector_matches(selector, {})  # raises for a malformed selector: nothing to defeat
    except ValueError:
        return None
    for key, value in _defeating(selector or {}):
        # Checked, not trusted: a value is at most 63 characters, and a NotIn value may be any string.
        if _LABEL_KEY.fullmatch(key) and _LABEL_VALUE.fullmatch(value) and \
                not label_selector_matches(selector, {key: value}):
            return {key: value}
    return None


def _defeating(selector: dict) -> Iterator[tuple[str, str]]:
    """Candidate (key, value) pairs, each meant to defeat one requirement of ``selector``."""
    others = ("kdrill-not", "kdrill-not-2", "kdrill-not-3")  # an In list may hold some of them: the next is tried
    for key in selector.get("matchLabels") or {}:
        yield from ((key, v) for v in others)
    for requirement in selector.get("matchExpressions") or []:
        key, op, values = requirement["key"], requirement["operator"], requirement.get("values") or []
        if op == "DoesNotExist":
            yield key, "kdrill"
        elif op == "NotIn":
            yield from ((key, v) for v in values)
        elif op == "In":
            yield from ((key, v) for v in others)


class _DryRuns:
    """The dry-run requests of one cluster's catalogue: create or label-patch, as the API server
    admits them (nothing is stored)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def create(self, manifest: dict[str, Any]) -> Callable[[float], Any]:
        kind = DRY_RUN_KINDS.get(manifest["kind"])
        return lambda timeout: kube_objects.dry_run_create(self.cluster, manifest, timeout_seconds=timeout, kind=kind)

    def current_labels(self, ref: Ref) -> dict[str, str]:
        # An UPDATE is matched against the object's labels, old and new: the patch adds one.
        found = kube_objects.read(self.cluster, ref, kind=DRY_RUN_KINDS.get(ref.kind)) or {}
        return {**((found.get("metadata") or {}).get("labels") or {}), DRY_RUN_LABEL: "blast-radius"}

    def patch(self, ref: Ref) -> Callable[[float], Any]:
        body = {"metadata": {"labels": {DRY_RUN_LABEL: "blast-radius"}}}
        kind = DRY_RUN_KINDS.get(ref.kind)
        return lambda timeout: kube_objects.dry_run_patch(self.cluster, ref, body, timeout_seconds=timeout, kind=kind)


def _configmap(where: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {**_labelled("kdrill-blast-radius"),
                                                                   "namespace": where}, "data": {"a": "b"}}


def _drill_writes(runs: _DryRuns, namespace: str, app: dict[str, str]) -> list[CatalogueWrite]:
    """Creations in the drill's own ``namespace`` (labels ``app``): a ConfigMap, a Pod, a
    Deployment and an Event."""
    pod_spec = {"containers": [{"name": "c", "image": TOOLBOX_IMAGE, "imagePullPolicy": TOOLBOX_PULL_POLICY,
                                "command": ["sleep", "1"]}]}

    def write(resource: str, group: str = "", version: str = "v1") -> Write:
        return Write("CREATE", group, version, resource, namespace=namespace,
                     object_labels={DRY_RUN_LABEL: "blast-radius"}, namespace_labels=app)

    return [
        CatalogueWrite("configmap-create@drill", write("configmaps"), runs.create(_configmap(namespace))),
        CatalogueWrite("pod-create@drill", write("pods"),
                       runs.create({"apiVersion": "v1", "kind": "Pod", "metadata": {**_labelled("kdrill-blast-radius"),
                                                                                    "namespace": namespace},
                                    "spec": pod_spec})),
        CatalogueWrite("deployment-create@drill", write("deployments", "apps"),
                       runs.create({"apiVersion": "apps/v1", "kind": "Deployment",
                                    "metadata": {**_labelled("kdrill-blast-radius"), "namespace": namespace},
                                    "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "kdrill-blast-radius"}},
                                             "template": {"metadata": {"labels": {"app": "kdrill-blast-radius"}},
                                                          "spec": pod_spec}}})),
        CatalogueWrite("event-create@drill", write("events"),
                       runs.create({"apiVersion": "v1", "kind": "Event",
                                    "metadata": {**_labelled("kdrill-blast-radius.1"), "namespace": namespace},
                                    "involvedObject": {"apiVersion": "v1", "kind": "Pod",
                                                       "name": "kdrill-blast-radius", "namespace": namespace},
                                    "reason": "KdrillDryRun", "message": "a dry run: never stored", "type": "Normal"}),
                       system=True),
    ]


def _cluster_writes(runs: _DryRuns, namespace: str, node: str,
                    namespace_labels: Callable[[str], dict[str, str]]) -> list[CatalogueWrite]:
    """Writes outside the drill's namespace: a new Namespace, ``node``'s Lease and Node, a
    ConfigMap in kube-system and the vital signs' own ConfigMap."""
    lease, vitals = Ref("Lease", node, "kube-node-lease"), Ref("ConfigMap", VITALS_OBJECT, VITALS_NAMESPACE)
    return [
        CatalogueWrite("namespace-create", Write("CREATE", "", "v1", "namespaces",
                                                 object_labels={DRY_RUN_LABEL: "blast-radius"},
                                                 namespace_labels={DRY_RUN_LABEL: "blast-radius"}),
                       runs.create({"apiVersion": "v1", "kind": "Namespace", "metadata": _labelled(f"{namespace}-new")})),
        CatalogueWrite("lease-update@kube-node-lease",
                       Write("UPDATE", "coordination.k8s.io", "v1", "leases", namespace="kube-node-lease",
                             object_labels=runs.current_labels(lease),
                             namespace_labels=namespace_labels("kube-node-lease")),
                       runs.patch(lease), system=True),
        CatalogueWrite("node-update", Write("UPDATE", "", "v1", "nodes",
                                            object_labels=runs.current_labels(Ref("Node", node))),
                       runs.patch(Ref("Node", node)), system=True),
        CatalogueWrite("configmap-create@kube-system", Write("CREATE", "", "v1", "configmaps", namespace="kube-system",
                                                             object_labels={DRY_RUN_LABEL: "blast-radius"},
                                                             namespace_labels=namespace_labels("kube-system")),
                       runs.create(_configmap("kube-system")), system=True),
        CatalogueWrite("vital-signs-configmap-update", Write("UPDATE", "", "v1", "configmaps",
                                                             namespace=VITALS_NAMESPACE,
                                                             object_labels=runs.current_labels(vitals),
                                                             namespace_labels=namespace_labels(VITALS_NAMESPACE)),
                       runs.patch(vitals)),
    ]


def _repair_writes(runs: _DryRuns, own: tuple[str, str], labels: dict[str, str]) -> list[CatalogueWrite]:
    """The repair of the webhook backend ``own`` (namespace, Service): its Service updated and a
    ConfigMap made beside it, in a namespace of ``labels``."""
    own_ns, own_service = own
    service = Ref("Service", own_service, own_ns)
    return [
        CatalogueWrite(f"service-update@{own_ns}", Write("UPDATE", "", "v1", "services", namespace=own_ns,
                                                         object_labels=runs.current_labels(service),
                                                         namespace_labels=labels),
                       runs.patch(service), repair=True),
        CatalogueWrite(f"configmap-create@{own_ns}", Write("CREATE", "", "v1", "configmaps", namespace=own_ns,
                                                           object_labels={DRY_RUN_LABEL: "blast-radius"},
                                                           namespace_labels=labels),
                       runs.create(_configmap(own_ns)), repair=True),
    ]


def catalogue(cluster: Cluster, namespace: str, node: str, own: tuple[str, str] | None,
              namespace_labels: Callable[[str], dict[str, str]],
              opt_out: dict[str, str] | None = None) -> list[CatalogueWrite]:
    """The writes for a drill in ``namespace`` (the drill's own), with ``node`` the Node (and its
    Lease) to write and ``own`` the (namespace, Service) of the webhook backend under test, whose
    repair is written there (None: no repair writes). ``namespace_labels(name)`` gives a
    namespace's labels, as the API server matches a namespaceSelector against them. With
    ``opt_out`` (labels a webhook's objectSelector excludes, :func:`excluding_labels`), one more
    ConfigMap carries them."""
    runs = _DryRuns(cluster)
    app = namespace_labels(namespace)
    writes = _drill_writes(runs, namespace, app) + _cluster_writes(runs, namespace, node, namespace_labels)
    if opt_out:
        labelled = _configmap(namespace)
        labelled["metadata"] = {**labelled["metadata"], "name": "kdrill-blast-radius-opt-out",
                                "labels": {**labelled["metadata"]["labels"], **opt_out}}
        writes.append(CatalogueWrite("configmap-create-opted-out@drill",
                                     Write("CREATE", "", "v1", "configmaps", namespace=namespace,
                                           object_labels=labelled["metadata"]["labels"], namespace_labels=app),
                                     runs.create(labelled)))
    if own is not None:
        writes += _repair_writes(runs, own, namespace_labels(own[0]))
    return writes
