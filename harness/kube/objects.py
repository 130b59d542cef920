"""Kubernetes objects through the API's REST paths: create, read, delete, evict, scale and dry runs
for the kinds a data-only scenario names (the table, names and placeholders are
:mod:`harness.spec.manifests`; the paths are the API's own,
https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-uris)."""

from __future__ import annotations

import json
import re
from typing import Any

from kubernetes.client.exceptions import ApiException

from harness.kube.providers import Cluster
from harness.spec.manifests import (  # noqa: F401  the table and names, with the calls that use them
    KINDS,
    NAME_RULES,
    PLACEHOLDER,
    PLACEHOLDER_NAMES,
    RESERVED_GROUP_SUFFIXES,
    TLS_PLACEHOLDERS,
    UNSUFFIXED_BUILT_IN_GROUPS,
    WORKER_PLACEHOLDER,
    Kind,
    Ref,
    apiservice_problem,
    condition,
    crd_problem,
    expand,
    kind_of,
    known_kinds,
    name_problem,
    not_ready_reason,
    placeholder_keys,
    placeholders,
    reserved_group,
    state_text,
    tls_key_misplaced,
)

# Per-request timeout, seconds: a read or write the API should answer at once.
REQUEST_TIMEOUT_SECONDS = 10


def _call(cluster: Cluster, method: str, path: str, body: Any = None, api=None,
          timeout_seconds: float = REQUEST_TIMEOUT_SECONDS, query: list[tuple[str, str]] | None = None,
          content_type: str = "application/json", warnings: list[str] | None = None) -> Any:
    """One request on ``path`` (with ``query`` parameters); the answer as plain JSON data, and the
    text of each ``Warning`` header of a 2xx answer appended to ``warnings`` when given (the API
    server's warnings: https://kubernetes.io/docs/reference/using-api/api-concepts/#warnings).
    Raises ApiException for a non-2xx answer (as the typed clients do), or what the client raises
    when nothing answers."""
    api = api or cluster.api
    request = api.param_serialize(method, path, query_params=query or [],
                                  header_params={"Content-Type": content_type, "Accept": "application/json"},
                                  body=body, auth_settings=["BearerToken"])
    response = api.call_api(*request, _request_timeout=timeout_seconds)
    response.read()
    data = api.response_deserialize(response, {"2XX": "object"}).data
    if warnings is not None:
        warnings.extend(warning_texts(response.getheaders().get("Warning")))
    return data


def get_path(cluster: Cluster, path: str, api=None, timeout_seconds: float = REQUEST_TIMEOUT_SECONDS) -> Any:
    """A GET of the API server's ``path`` (e.g. a service proxy's), its JSON answer as plain data.
    Raises ApiException for a non-2xx answer, or what the client raises when nothing answers."""
    return _call(cluster, "GET", path, api=api, timeout_seconds=timeout_seconds)


def post_path(cluster: Cluster, path: str, body: dict[str, Any], dry_run: bool = False,
              warnings: list[str] | None = None, api=None, timeout_seconds: float = REQUEST_TIMEOUT_SECONDS) -> Any:
    """A POST of ``body`` to the API server's ``path`` (a resource of any group and version, served
    or not), as a server-side dry run when ``dry_run``; the answer as plain data, the ``Warning``
    headers' texts appended to ``warnings``. Raises ApiException for a non-2xx answer (404 for a
    group version the server does not serve), or what the client raises when nothing answers."""
    return _call(cluster, "POST", path, body=body, api=api, timeout_seconds=timeout_seconds,
                 query=DRY_RUN if dry_run else None, warnings=warnings)


WARNING = re.compile(r'\d{3} \S+ "((?:[^"\\]|\\.)*)"')


def warning_texts(header: str | None) -> list[str]:
    """The texts of a ``Warning`` header's values (``299 - "text"``, comma-separated; RFC 7234
    section 5.5), unescaped; [] for none."""
    return [re.sub(r"\\(.)", r"\1", text) for text in WARNING.findall(header or "")]


def create(cluster: Cluster, manifest: dict[str, Any], ref: Ref | None = None) -> dict[str, Any]:
    """Create ``manifest`` (its ``metadata.namespace`` set for a namespaced kind; ``ref``: its
    :class:`Ref`, needed for a custom resource). Returns the object the API stored. Raises
    ApiException (409 when it already exists), KeyError for a kind the runner does not know,
    ValueError for a name the API would not take (nothing is sent)."""
    ref = ref or Ref.of(manifest)
    kind = ref.resource
    kind.path(ref.name, ref.namespace)  # the name checked as a read or a delete would check it
    return _call(cluster, "POST", kind.path(namespace=ref.namespace), body=manifest)


# Server-side dry run: the request is authenticated, authorised, passed through mutating and
# validating admission (webhooks with sideEffects None are called) and validated, and nothing is
# stored. Source: https://kubernetes.io/docs/reference/using-api/api-concepts/#dry-run
DRY_RUN = [("dryRun", "All")]


def api_message(exc: ApiException) -> str:
    """The message of the API's Status answer (what ``kubectl`` prints), or the HTTP reason."""
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except (ValueError, AttributeError, TypeError):
        return str(exc.body or exc.reason)


def dry_run_create(cluster: Cluster, manifest: dict[str, Any], api=None,
                   timeout_seconds: float = REQUEST_TIMEOUT_SECONDS, kind: Kind | None = None,
                   warnings: list[str] | None = None) -> dict[str, Any]:
    """A dry-run CREATE of ``manifest`` (its ``metadata.namespace`` set for a namespaced kind):
    the object as admission and validation left it, never stored (``kind``: for one the runner
    does not declare, see :func:`dry_run_patch`; ``warnings``: as for :func:`_call`). Raises ApiException when the
    API refuses it (an admission denial included), what the client raises for no answer, KeyError
    for a kind the runner does not know, ValueError for a name the API would not take."""
    kind = kind or kind_of(manifest["kind"])
    meta = manifest.get("metadata") or {}
    namespace = meta.get("namespace") if kind.namespaced else None
    kind.path(meta["name"], namespace)
    return _call(cluster, "POST", kind.path(namespace=namespace), body=manifest, api=api,
                 timeout_seconds=timeout_seconds, query=DRY_RUN, warnings=warnings)


def dry_run_patch(cluster: Cluster, ref: Ref, patch: dict[str, Any], subresource: str | None = None, api=None,
                  timeout_seconds: float = REQUEST_TIMEOUT_SECONDS, kind: Kind | None = None) -> dict[str, Any]:
    """A dry-run merge PATCH (an UPDATE, for admission) of ``ref`` or its ``subresource`` (e.g.
    ``scale``), never stored; ``kind`` for one the runner does not declare (a dry run only: a
    Node, a Lease). Raises as :func:`dry_run_create`."""
    path = (kind or kind_of(ref.kind)).path(ref.name, ref.namespace) + (f"/{subresource}" if subresource else "")
    return _call(cluster, "PATCH", path, body=patch, api=api, timeout_seconds=timeout_seconds, query=DRY_RUN,
                 content_type="application/merge-patch+json")


def _eviction(ref: Ref, delete_options: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """The path and body of an eviction of the Pod ``ref``. Raises ValueError for a ref that is no
    Pod or a name the API would not take."""
    if ref.kind != "Pod":
        raise ValueError(f"only a Pod can be evicted, got {ref}")
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": ref.name, "namespace": ref.namespace},
            **({"deleteOptions": delete_options} if delete_options else {})}
    return kind_of("Pod").path(ref.name, ref.namespace) + "/eviction", body


def dry_run_evict(cluster: Cluster, ref: Ref, api=None, timeout_seconds: float = REQUEST_TIMEOUT_SECONDS) -> None:
    """A dry-run eviction of the Pod ``ref`` (a create on its ``eviction`` subresource, what a node
    drain sends): the API server checks the pod's PodDisruptionBudgets and evicts nothing. Raises
    ApiException when it refuses (429 when a budget would be broken), ValueError for a ref that is
    no Pod or a name the API would not take."""
    path, body = _eviction(ref, {"dryRun": ["All"]})
    _call(cluster, "POST", path, body=body, api=api, timeout_seconds=timeout_seconds, query=DRY_RUN)


def dry_run_delete(cluster: Cluster, ref: Ref, api=None, timeout_seconds: float = REQUEST_TIMEOUT_SECONDS) -> None:
    """A dry-run DELETE of ``ref``: admitted or refused as the deletion would be, nothing deleted.
    Raises ApiException when the API refuses it (404 when the object does not exist), ValueError
    for a name the API would not take."""
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["All"]}
    _call(cluster, "DELETE", ref.resource.path(ref.name, ref.namespace), body=body, api=api,
          timeout_seconds=timeout_seconds, query=DRY_RUN)


def read(cluster: Cluster, ref: Ref, api=None, timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
         kind: Kind | None = None) -> dict[str, Any] | None:
    """The object, or None when it does not exist (404), read with ``api`` (default: the
    cluster's client) within ``timeout_seconds`` (``kind`` as for :func:`dry_run_patch`). Raises
    ApiException otherwise, what the client raises for no answer, or ValueError for a name the
    API would not take (nothing is sent)."""
    try:
        return _call(cluster, "GET", (kind or ref.resource).path(ref.name, ref.namespace), api=api,
                     timeout_seconds=timeout_seconds)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def delete(cluster: Cluster, ref: Ref, uid: str | None = None) -> bool:
    """Ask the API to delete the object (background propagation), with ``uid`` only that very
    object (a precondition: another one of the same name is not deleted); False when it was
    already gone. Raises ApiException otherwise (409 when ``uid`` is not the object's), or
    ValueError for a name the API would not take (nothing is sent)."""
    options = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background",
               **({"preconditions": {"uid": uid}} if uid else {})}
    try:
        _call(cluster, "DELETE", ref.resource.path(ref.name, ref.namespace), body=options)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def remove_finalizers(cluster: Cluster, ref: Ref, prefix: str) -> list[str]:
    """Remove from the object ``ref`` every finalizer that starts with ``prefix`` (a merge patch
    of the others, with the object's resourceVersion: a concurrent change is refused with 409,
    never overwritten). Returns those removed ([] when it has none, or is gone). Raises
    ApiException."""
    obj = read(cluster, ref)
    meta = (obj or {}).get("metadata") or {}
    finalizers = meta.get("finalizers") or []
    removed = [f for f in finalizers if f.startswith(prefix)]
    if removed:
        patch = {"metadata": {"finalizers": [f for f in finalizers if f not in removed] or None,
                              "resourceVersion": meta.get("resourceVersion")}}
        _call(cluster, "PATCH", ref.resource.path(ref.name, ref.namespace), body=patch,
              content_type="application/merge-patch+json")
    return removed


def evict(cluster: Cluster, ref: Ref, uid: str | None = None) -> bool:
    """Ask the API to evict the Pod ``ref`` (the Eviction API, what a node drain uses: a
    PodDisruptionBudget may refuse it, with 429), with ``uid`` only that very pod; False when it
    was already gone. Raises ApiException otherwise, or ValueError for a ref that is no Pod or a
    name the API would not take (nothing is sent).
    Source: https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/"""
    path, body = _eviction(ref, {"preconditions": {"uid": uid}} if uid else None)
    try:
        _call(cluster, "POST", path, body=body)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


# What a dry run sends to find out whether the API server reaches a declared webhook: the
# smallest valid object of each kind a webhook is checked with (a dry run: nothing is pulled or stored).
_CHECK_IMAGE = "registry.k8s.io/pause:3.10.1"
_CHECK_OBJECTS = {
    ("", "pods"): lambda labels: {"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "check", "image": _CHECK_IMAGE}]}},
    ("apps", "deployments"): lambda labels: {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"labels": labels},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"kdrill.io/check": "webhook"}},
                 "template": {"metadata": {"labels": {"kdrill.io/check": "webhook"}},
                              "spec": {"containers": [{"name": "check", "image": _CHECK_IMAGE}]}}}},
}


def webhook_unreachable_reason(cluster: Cluster, configuration: dict[str, Any]) -> str | None:
    """Why the API server cannot yet call a webhook of ``configuration`` (a Validating- or
    MutatingWebhookConfiguration as stored), or None: for each webhook that matches CREATE of
    Pods or Deployments in namespaces its namespaceSelector names (``kubernetes.io/metadata.name
    In``), a dry-run CREATE there (with its objectSelector's matchLabels) must not fail with
    "failed calling webhook". A Service's endpoints are ready a moment before every node's
    kube-proxy routes its ClusterIP, and the API server calls the webhook through it. Webhooks
    matching neither are not checked. Raises what the client raises when nothing answers."""
    for hook in configuration.get("webhooks") or []:
        selector = hook.get("namespaceSelector") or {}
        namespaces = [v for e in selector.get("matchExpressions") or []
                      if e.get("key") == "kubernetes.io/metadata.name" and e.get("operator") == "In"
                      for v in e.get("values") or []]
        object_selector = hook.get("objectSelector") or {}
        labels = dict(object_selector.get("matchLabels") or {})
        matched = [(g, r) for rule in hook.get("rules") or [] if {"CREATE", "*"} & set(rule.get("operations") or [])
                   for g, r in _CHECK_OBJECTS
                   if {g, "*"} & set(rule.get("apiGroups") or []) and {r, "*"} & set(rule.get("resources") or [])]
        # (an objectSelector with matchExpressions: no object is built to match it, so not checked)
        if not matched or not namespaces or object_selector.get("matchExpressions"):
            continue
        manifest = _CHECK_OBJECTS[matched[0]](labels)
        manifest["metadata"].update(name="kdrill-webhook-check", namespace=namespaces[0])
        try:
            dry_run_create(cluster, manifest)
        except ApiException as exc:
            message = api_message(exc)
            if "failed calling webhook" in message:
                return f"the API server cannot call webhook {hook.get('name')}: {message[:300]}"
    return None


def scale(cluster: Cluster, ref: Ref, replicas: int) -> None:
    """Set ``ref``'s replicas through its scale subresource (a Deployment or StatefulSet), as
    ``kubectl scale`` does. Raises ApiException, or what the client raises for no answer."""
    _call(cluster, "PATCH", kind_of(ref.kind).path(ref.name, ref.namespace) + "/scale",
          body={"spec": {"replicas": replicas}}, content_type="application/merge-patch+json")
