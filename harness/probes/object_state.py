"""Object-state probe: one object read through the API from this machine at a fixed interval,
each read a sample whose ``ok`` says whether the object is in the state the scenario asks about.

What "ok" means (``ok_when``):

- ``absent``: the object does not exist (e.g. a deleted namespace is finally gone);
- ``present``: it exists (whatever its state);
- ``deleting``: it exists and is being deleted (``metadata.deletionTimestamp`` set: e.g. a pod
  Terminating, a namespace being finalised);
- ``{condition: TYPE, status: "True"|"False"|"Unknown"}``: it exists and has that condition
  with that status (e.g. an APIService ``Available`` ``True``, a namespace's
  ``NamespaceDeletionDiscoveryFailure`` ``True``);
- ``{field: PATH, equals: VALUE}``: it exists and the value at PATH (keys joined by ``.``, a
  number indexes a list: ``status.containerStatuses.0.state.waiting.reason``) equals VALUE; a
  field the object does not have is ``null`` (e.g. a Deployment scaled to zero has no
  ``status.readyReplicas``); ``{field: PATH, in: [VALUE, ...]}``: it equals one of them.
  Values are compared as JSON, with no conversion: ``"2"`` never equals ``2``, nor ``1`` ``true``.
  Where the probe's object is a declared manifest that gives PATH a value, a VALUE of another
  JSON type is refused when the scenario loads (:meth:`ObjectStateProbe.declared_problems`);
- ``{refused_with: [TEXT, ...]}``: the API server answered the read with an error whose message
  holds every TEXT (e.g. a custom resource read at a version its conversion webhook must make:
  ``conversion webhook for``, ``connection refused``); a 404 is never one (it reads as absent),
  nor a request the API server did not answer.

A read the API does not answer is a sample that is neither: ``ok`` False with
``labels["error"]`` set, so a measure over this probe cannot mistake an unreachable API for the
state it asks about. Each sample's detail is the object's state in one line (phase, deletion,
conditions), so the evidence shows what was seen, not only yes or no.
"""

from __future__ import annotations

import re
import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from harness.core.timeline import Sample
from harness.kube import objects as kube_objects
from harness.kube.objects import Ref
from harness.kube.providers import Cluster
from harness.probes import Probe
from harness.probes.api import failed, texts
from harness.spec.field_paths import path_problem, schema_path_problem
from harness.spec.scenario import OBJECT_REF_SCHEMA

CONDITION_STATUSES = ("True", "False", "Unknown")
FIELD_PATH = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")
# Keys under which the API keeps resource quantities, which it stores as strings whatever the
# manifest gave (``cpu: 1`` reads back as ``"1"``): a declared value there says nothing of the type read.
QUANTITY_KEYS = ("requests", "limits", "overhead", "sizeLimit")
_ABSENT = object()


def refused_with(ok_when: Any) -> list[str] | None:
    """The texts of a ``{refused_with: [TEXT, ...]}`` ok_when, or None for another form."""
    return texts(ok_when, "refused_with")


def holds(obj: dict[str, Any] | None, ok_when: str | dict[str, Any]) -> bool:
    """Whether ``obj`` (None: it does not exist), as the API answered it, is in the state
    ``ok_when`` names (an answer is never a refusal: ``refused_with`` holds for no object).
    Raises ValueError for an ``ok_when`` that is none of the forms above."""
    if refused_with(ok_when) is not None:
        return False
    if ok_when == "absent":
        return obj is None
    if ok_when == "present":
        return obj is not None
    if ok_when == "deleting":
        return obj is not None and bool((obj.get("metadata") or {}).get("deletionTimestamp"))
    if isinstance(ok_when, dict) and set(ok_when) == {"condition", "status"} \
            and isinstance(ok_when["condition"], str) and ok_when["condition"] \
            and ok_when["status"] in CONDITION_STATUSES:
        found = kube_objects.condition(obj, ok_when["condition"])
        return found is not None and found.get("status") == ok_when["status"]
    if isinstance(ok_when, dict) and set(ok_when) in ({"field", "equals"}, {"field", "in"}) \
            and isinstance(ok_when["field"], str) and FIELD_PATH.fullmatch(ok_when["field"]) \
            and (isinstance(ok_when.get("in"), list) and ok_when["in"] or "equals" in ok_when):
        if obj is None:
            return False
        value = field_value(obj, ok_when["field"])
        # as JSON compares: true is not 1
        return any(value == wanted and isinstance(value, bool) == isinstance(wanted, bool)
                   for wanted in (ok_when["in"] if "in" in ok_when else [ok_when["equals"]]))
    raise ValueError("ok_when must be 'absent', 'present', 'deleting', {condition, status}, {field, equals}, "
                     f"{{field, in}} or {{refused_with}}, got {ok_when!r}")


def field_value(obj: dict[str, Any], path: str) -> Any:
    """The value at ``path`` in ``obj`` (keys joined by '.', a number indexes a list), or None."""
    value: Any = obj
    for part in path.split("."):
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def _declared_value(manifest: dict[str, Any], path: str) -> Any:
    """The value at ``path`` in ``manifest`` (as :func:`field_value` reads it), or ``_ABSENT``."""
    value: Any = manifest
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _ABSENT
    return value


def _json_type(value: Any) -> str:
    """The JSON type of a YAML-loaded value, as an error names it: true is no number."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "a mapping"


def _custom_field_problem(target: dict[str, Any], path: str, declared) -> str | None:
    """For an object of a kind a declared CustomResourceDefinition defines: what ``path`` should
    be instead, read at the probe's version (its ``apiVersion``, else the storage version) against
    that version's schema (:func:`harness.spec.field_paths.schema_path_problem`); None otherwise."""
    crd = next((m for _, m in declared.manifests if m.get("kind") == "CustomResourceDefinition"
                and (m["spec"].get("names") or {}).get("kind") == target.get("kind")), None)
    if crd is None:
        return None
    wanted = str(target.get("apiVersion") or "").rpartition("/")[2]
    version = next((v for v in crd["spec"]["versions"] if v["name"] == wanted or (not wanted and v["storage"])), None)
    schema = ((version or {}).get("schema") or {}).get("openAPIV3Schema")
    return schema_path_problem(schema, path, target["kind"]) if isinstance(schema, dict) else None


class ObjectStateProbe(Probe):
    """Read ``ref`` every ``interval_seconds``; ``ok`` when :func:`holds` ``ok_when``."""

    kind = "object-state"
    in_probe_pod = False
    required = ("object", "ok_when")
    fields = {
        "object": OBJECT_REF_SCHEMA,
        "ok_when": {"anyOf": [{"enum": ["absent", "present", "deleting"]}, {
            "type": "object", "additionalProperties": False, "required": ["condition", "status"],
            "properties": {"condition": {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9]*$"},
                           "status": {"enum": list(CONDITION_STATUSES)}}}, {
            "type": "object", "additionalProperties": False, "required": ["field"],
            "oneOf": [{"required": ["equals"]}, {"required": ["in"]}],
            "properties": {"field": {"type": "string", "pattern": f"^{FIELD_PATH.pattern}$"},
                           "equals": {"type": ["string", "number", "boolean", "null"]},
                           "in": {"type": "array", "minItems": 1, "maxItems": 20,
                                  "items": {"type": ["string", "number", "boolean", "null"]}}}}, {
            "type": "object", "additionalProperties": False, "required": ["refused_with"],
            "properties": {"refused_with": {"type": "array", "minItems": 1, "maxItems": 10,
                                            "items": {"type": "string", "minLength": 1}}}}],
            "x-expected": "absent, present, deleting, {condition: TYPE, status: \"True\"|\"False\"|\"Unknown\"}, "
                          "{field: PATH, equals: VALUE} or {field: PATH, in: [VALUE, ...]} (VALUE compared as "
                          "JSON, with no conversion: \"2\" is not 2), or {refused_with: [TEXT the API's error "
                          "message holds, ...]}"},
    }

    @staticmethod
    def problems(spec: dict[str, Any]) -> list[tuple[str, str, str]]:
        """``ok_when`` as :func:`holds` reads it (a schema pattern's ``$`` lets a final newline through),
        and its ``field`` a path the API defines for the object's kind (harness/spec/field_paths.py)."""
        try:
            holds(None, spec.get("ok_when"))
        except ValueError:
            return [("ok_when", ObjectStateProbe.fields["ok_when"]["x-expected"], repr(spec.get("ok_when")))]
        ok_when, kind = spec.get("ok_when"), (spec.get("object") or {}).get("kind")
        if isinstance(ok_when, dict) and "field" in ok_when and isinstance(kind, str):
            # A key the API does not define would read as absent (null) forever.
            if (problem := path_problem(kind, ok_when["field"])) is not None:
                return [("ok_when.field", problem, repr(ok_when["field"]))]
        return []

    @staticmethod
    def declared_problems(spec: dict[str, Any], declared) -> list[tuple[str, str, str]]:
        """A ``{field, equals}`` or ``{field, in}`` whose VALUE is of another JSON type than the
        one the probe's object is declared with at that field (``declared``: a
        :class:`harness.probes.Declared`), e.g. ``equals: "2"`` for a declared ``spec.replicas:
        2``: it could never hold. A null VALUE (the field gone), a field the manifest does not give
        or gives null, and resource quantities (:data:`QUANTITY_KEYS`) are not checked."""
        ok_when, found = spec.get("ok_when"), declared.find(spec["object"])
        if isinstance(ok_when, dict) and "field" in ok_when \
                and (problem := _custom_field_problem(spec["object"], ok_when["field"], declared)) is not None:
            return [("ok_when.field", problem, repr(ok_when["field"]))]
        if found is None or not isinstance(ok_when, dict) or "field" not in ok_when:
            return []
        where, manifest = found
        path = ok_when["field"]
        if set(path.split(".")) & set(QUANTITY_KEYS):
            return []
        given = _declared_value(manifest, path)
        if given is _ABSENT or given is None:
            return []
        wanted = [("equals", ok_when["equals"])] if "equals" in ok_when else \
            [(f"in[{i}]", value) for i, value in enumerate(ok_when.get("in") or [])]
        for key, value in wanted:
            if value is not None and _json_type(value) != _json_type(given):
                shown = repr(given) if len(repr(given)) <= 60 else repr(given)[:57] + "..."
                return [(f"ok_when.{key}", f"{_json_type(given)}, as {where} declares {path} ({shown}): "
                         "equals and in compare JSON values as they are, with no conversion (\"2\" is not 2)",
                         repr(value))]
        return []

    @classmethod
    def for_scenario(cls, spec: dict[str, Any], context) -> "ObjectStateProbe":
        return cls(spec["name"], context.cluster, context.ref(spec["object"]), spec["ok_when"],
                   interval_seconds=context.interval_seconds, max_seconds=context.max_seconds)

    def __init__(self, name: str, cluster: Cluster, ref: Ref, ok_when: str | dict[str, Any],
                 timeout_seconds: float = 2.0, **kwargs) -> None:
        super().__init__(name, **kwargs)
        holds(None, ok_when)  # refuse a malformed ok_when now, not on every sample
        self.cluster, self.ref, self.ok_when, self.timeout_seconds = cluster, ref, ok_when, timeout_seconds
        self.api = cluster.new_api()  # its own connection pool, no retries: one sample, one request

    def sample(self) -> Sample:
        started = time.time()
        try:
            obj = kube_objects.read(self.cluster, self.ref, api=self.api, timeout_seconds=self.timeout_seconds)
        except ApiException as exc:
            texts = refused_with(self.ok_when)
            if texts is None or not exc.status:  # no HTTP answer: nothing was refused
                return failed(started, exc)
            message = kube_objects.api_message(exc)
            # A refusal is the state asked about, not an unanswered read: no error label.
            return Sample(t=started, ok=all(text in message for text in texts), latency_seconds=time.time() - started,
                          detail=f"refused: HTTP {exc.status}: {message[:300]}")
        except Exception as exc:
            return failed(started, exc)
        return Sample(t=started, ok=holds(obj, self.ok_when), latency_seconds=time.time() - started,
                      detail=kube_objects.state_text(obj))
