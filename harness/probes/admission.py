"""Admission probe: every interval, one write through the API server's admission chain, as a
server-side dry run (``dryRun=All``: authenticated, authorised, passed through mutating and
validating admission, webhooks with ``sideEffects: None`` called, ValidatingAdmissionPolicies
evaluated, validated, and never stored), so a probe can write twice a second for minutes and
leave nothing behind, and its admission decision is what is measured.

The write is one of:

- ``create``: a new object of ``object.kind`` named ``<object.name>-<n>`` in ``object.namespace``
  (default: the drill's), with the given ``create`` body (``metadata.labels``, ``spec``, ...);
- ``update``: a merge patch of the existing ``object`` (or of its ``scale`` subresource: what
  ``kubectl scale`` sends), e.g. the fix an operator would try during an outage;
- ``evict: {}``: an eviction of the Pod ``object`` (what a node drain sends: its
  PodDisruptionBudgets are checked, and one that would be broken refuses it with 429);
- ``delete: {}``: a DELETE of ``object`` (a direct deletion: no PodDisruptionBudget is consulted).

What "ok" means (``ok_when``):

- ``admitted`` (the default): the API server accepted the write;
- ``{admitted_with_warning: [TEXT, ...]}`` (a ``create`` only): the API server accepted the write
  and its ``Warning`` headers hold every TEXT (e.g. a ValidatingAdmissionPolicy bound with
  ``validationActions: [Warn]``);
- ``{rejected_with: [TEXT, ...]}``: the API server answered with an error whose message holds
  every TEXT, e.g. ``failed calling webhook`` (a webhook the API server could not call, under
  ``failurePolicy: Fail``) or a ValidatingAdmissionPolicy's own message. A timeout or a refused
  connection to the API server itself is never this: no answer, no message. A TEXT naming a
  webhook under kdrill.io (``failed calling webhook "NAME"``) must name a declared one.

Each sample's ``detail`` is ``admitted`` or the API's message, and ``labels`` hold ``outcome``
(``admitted``, ``rejected`` with ``status``, or ``error`` with ``error``: the API server did not
answer), so the evidence shows why a write failed, not only that it did.

Source: https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/
(side effects; dry-run) and https://kubernetes.io/docs/reference/using-api/api-concepts/#dry-run.
"""

from __future__ import annotations

import copy
import re
import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from harness.core.timeline import Sample
from harness.kube import objects as kube_objects
from harness.kube.objects import Ref, api_message
from harness.kube.providers import Cluster
from harness.probes import Probe
from harness.probes.api import failed, texts
from harness.spec.scenario import OBJECT_REF_SCHEMA

ADMITTED = "admitted"
WRITES = ("create", "update", "evict", "delete")
# How the API server names a webhook in a refusal: 'failed calling webhook "NAME": ...' and
# 'admission webhook "NAME" denied the request: ...'.
WEBHOOK_IN_MESSAGE = re.compile(r'webhook "([^"]*)"')
# kdrill's own domain: a webhook named under it is one a drill declares (a platform's never is), so
# a rejected_with naming one the scenario does not declare is a typo, never matched.
KDRILL_DOMAIN = "kdrill.io"
WEBHOOK_CONFIGURATIONS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def holds(outcome: str, message: str, ok_when: str | dict[str, Any]) -> bool:
    """Whether a write whose ``outcome`` is ``admitted`` (``message``: the API server's warnings,
    one per line), ``rejected`` (the API answered with an error ``message``) or ``error`` (no
    answer) is what ``ok_when`` asks for. Raises ValueError for an ``ok_when`` of no such form."""
    if ok_when == ADMITTED:
        return outcome == ADMITTED
    for key, wanted in (("rejected_with", "rejected"), ("admitted_with_warning", ADMITTED)):
        if (said := texts(ok_when, key)) is not None:
            return outcome == wanted and all(text in message for text in said)
    raise ValueError("ok_when must be 'admitted', {rejected_with: [text, ...]} or {admitted_with_warning: [text, ...]}, "
                     f"got {ok_when!r}")


def create_manifest(ref: Ref, body: dict[str, Any], sequence: int) -> dict[str, Any]:
    """The object the ``sequence``-th create of ``body`` sends: ``ref``'s kind, named
    ``<ref.name>-<sequence>`` in ``ref.namespace``. Raises KeyError for a kind the runner does not know."""
    kind = kube_objects.kind_of(ref.kind)
    body = copy.deepcopy(body)
    metadata = {**(body.get("metadata") or {}), "name": f"{ref.name}-{sequence}"}
    if kind.namespaced:
        metadata["namespace"] = ref.namespace
    return {**body, "apiVersion": kind.api_version, "kind": kind.kind, "metadata": metadata}


class AdmissionProbe(Probe):
    """A dry-run create of ``create`` (named ``<ref.name>-<n>`` in ``ref.namespace``) or a dry-run
    merge patch ``update`` of ``ref`` every interval; ``ok`` when :func:`holds` ``ok_when``.
    ``timeout_seconds`` is the client's wait for the API's answer: longer than any webhook's
    ``timeoutSeconds`` (at most 30 s), so what is timed is the API server's decision."""

    kind = "admission"
    in_probe_pod = False
    writes = True  # scenario.py: only where the drill may write (harness/spec/scenario.py, _check_probe_writes)
    required = ("object",)
    fields = {
        "object": OBJECT_REF_SCHEMA,
        "create": {"type": "object", "additionalProperties": True,
                   "properties": {"metadata": {"type": "object", "additionalProperties": False,
                                               "properties": {"labels": {"type": "object",
                                                                         "additionalProperties": {"type": "string"}},
                                                              "annotations": {"type": "object",
                                                                              "additionalProperties": {"type": "string"}}}}},
                   "x-expected": "the body of the object to create, e.g. {metadata: {labels: ...}, spec: ...}"},
        "evict": {"type": "object", "maxProperties": 0,
                  "x-expected": "{} (the Pod object evicted, as a drain does)"},
        "delete": {"type": "object", "maxProperties": 0,
                   "x-expected": "{} (the object deleted directly)"},
        "update": {"type": "object", "additionalProperties": False, "required": ["patch"],
                   "properties": {"patch": {"type": "object", "minProperties": 1},
                                  "subresource": {"enum": ["scale"]}},
                   "x-expected": "{patch: a merge patch, subresource: scale (optional)}"},
        "ok_when": {"anyOf": [{"const": ADMITTED}, {
            "type": "object", "additionalProperties": False, "required": ["rejected_with"],
            "properties": {"rejected_with": {"type": "array", "minItems": 1,
                                             "items": {"type": "string", "minLength": 1}}}}, {
            "type": "object", "additionalProperties": False, "required": ["admitted_with_warning"],
            "properties": {"admitted_with_warning": {"type": "array", "minItems": 1,
                                                     "items": {"type": "string", "minLength": 1}}}}],
            "x-expected": "admitted, {rejected_with: [text the API's message holds, ...]}, or "
                          "{admitted_with_warning: [text the API's warnings hold, ...]} (a create only)"},
    }

    @staticmethod
    def problems(spec: dict[str, Any]) -> list[tuple[str, str, str]]:
        """Exactly one of ``create``, ``update``, ``evict`` (of a Pod) and ``delete``."""
        given = [k for k in WRITES if k in spec]
        if len(given) != 1:
            return [("create", "exactly one of create (a new object each time), update (a patch of the object), "
                     "evict (the Pod, as a drain does) and delete (the object)", " and ".join(given) or "neither")]
        kind = (spec.get("object") or {}).get("kind")
        if isinstance(spec.get("ok_when"), dict) and "admitted_with_warning" in spec["ok_when"] and "create" not in spec:
            return [("ok_when", "admitted or {rejected_with: [...]} (warnings are read from a create's answer only)",
                     repr(spec["ok_when"]))]
        if "evict" in spec and kind != "Pod":
            return [("object.kind", "Pod (only a pod is evicted)", repr(kind))]
        if (spec.get("update") or {}).get("subresource") == "scale" and kind not in ("Deployment", "StatefulSet"):
            return [("update.subresource", "scale only for a Deployment or StatefulSet", f"scale of a {kind}")]
        return []

    @staticmethod
    def declared_problems(spec: dict[str, Any], declared) -> list[tuple[str, str, str]]:
        """A ``rejected_with`` text naming, as the API server does (``webhook "NAME"``), a webhook
        under kdrill's own domain (:data:`KDRILL_DOMAIN`) that no declared Validating- or
        MutatingWebhookConfiguration has (``declared``: a :class:`harness.probes.Declared`): the
        API's message could never hold it. A webhook of another domain may be the platform's, and
        is not checked; nor is anything when a declared webhook's name holds a placeholder."""
        ok_when = spec.get("ok_when")
        if not isinstance(ok_when, dict) or not isinstance(ok_when.get("rejected_with"), list):
            return []
        names = [hook.get("name") for _, manifest in declared.manifests if manifest["kind"] in WEBHOOK_CONFIGURATIONS
                 for hook in manifest.get("webhooks") or [] if isinstance(hook, dict)]
        if any(isinstance(name, str) and kube_objects.placeholders(name) for name in names):
            return []  # named per drill: the literal text cannot be compared
        for i, text in enumerate(ok_when["rejected_with"]):
            for name in WEBHOOK_IN_MESSAGE.findall(text) if isinstance(text, str) else []:
                if name.endswith(f".{KDRILL_DOMAIN}") and name not in names:
                    return [(f"ok_when.rejected_with[{i}]", f"a webhook under {KDRILL_DOMAIN} that a declared webhook "
                             "configuration has (the API server names the webhook it called): "
                             + (", ".join(sorted(set(n for n in names if isinstance(n, str)))) or "none"),
                             repr(text))]
        return []

    @classmethod
    def for_scenario(cls, spec: dict[str, Any], context) -> "AdmissionProbe":
        return cls(spec["name"], context.cluster, context.ref(spec["object"]), create=spec.get("create"),
                   update=spec.get("update"), evict="evict" in spec, delete="delete" in spec,
                   ok_when=spec.get("ok_when", ADMITTED),
                   interval_seconds=context.interval_seconds, max_seconds=context.max_seconds)

    def __init__(self, name: str, cluster: Cluster, ref: Ref, create: dict[str, Any] | None = None,
                 update: dict[str, Any] | None = None, ok_when: str | dict[str, Any] = ADMITTED,
                 timeout_seconds: float = 40.0, evict: bool = False, delete: bool = False, **kwargs) -> None:
        super().__init__(name, **kwargs)
        if [create is not None, update is not None, evict, delete].count(True) != 1:
            raise ValueError("exactly one of create, update, evict and delete")
        holds(ADMITTED, "", ok_when)  # refuse a malformed ok_when now, not on every sample
        self.cluster, self.ref, self.create, self.update = cluster, ref, create, update
        self.evict, self.delete = evict, delete
        self.ok_when, self.timeout_seconds = ok_when, timeout_seconds
        self.api = cluster.new_api()  # its own connection pool, no retries: one sample, one request
        self.sequence = 0

    def sample(self) -> Sample:
        self.sequence += 1
        started = time.time()
        try:
            warnings: list[str] = []
            if self.create is not None:
                kube_objects.dry_run_create(self.cluster, create_manifest(self.ref, self.create, self.sequence), api=self.api,
                                            timeout_seconds=self.timeout_seconds, warnings=warnings)
            elif self.evict:
                kube_objects.dry_run_evict(self.cluster, self.ref, api=self.api, timeout_seconds=self.timeout_seconds)
            elif self.delete:
                kube_objects.dry_run_delete(self.cluster, self.ref, api=self.api, timeout_seconds=self.timeout_seconds)
            else:
                kube_objects.dry_run_patch(self.cluster, self.ref, self.update["patch"], self.update.get("subresource"),
                                           api=self.api, timeout_seconds=self.timeout_seconds)
        except ApiException as exc:
            if not exc.status:  # no HTTP answer: nothing was decided
                return _unanswered(started, exc)
            message = api_message(exc)
            return Sample(t=started, ok=holds("rejected", message, self.ok_when), latency_seconds=time.time() - started,
                          detail=message[:600], labels={"outcome": "rejected", "status": str(exc.status)})
        except Exception as exc:
            return _unanswered(started, exc)
        said = "\n".join(warnings)
        return Sample(t=started, ok=holds(ADMITTED, said, self.ok_when), latency_seconds=time.time() - started,
                      detail=(f"{ADMITTED}; warning: {'; '.join(warnings)}"[:600] if warnings else ADMITTED),
                      labels={"outcome": ADMITTED})


def _unanswered(started: float, exc: BaseException) -> Sample:
    sample = failed(started, exc)
    sample.labels["outcome"] = "error"
    return sample
