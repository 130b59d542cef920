"""Field paths of the kinds the runner knows (:data:`harness.spec.manifests.KINDS`), checked
offline against the Kubernetes Python client's models: the API's OpenAPI schema as the client was
generated from it (each model's ``attribute_map`` gives the JSON names, ``openapi_types`` their
types). A path is keys joined by ``.``, a number indexing a list, any key of a map.

Source: "API Conventions", https://github.com/kubernetes/community/blob/master/contributors/devel/sig-architecture/api-conventions.md
"""

from __future__ import annotations

import re
from typing import Any

import kubernetes.client as models

from harness.spec.manifests import KINDS

# The client writes a list type as List[T] (older ones list[T]), a map as Dict[str, T] (dict(str, T)).
_LIST = re.compile(r"[Ll]ist\[(.+)\]")
_MAP = re.compile(r"Dict\[str, (.+)\]|dict\(str, (.+)\)")
_SCALARS = ("str", "int", "bool", "float", "datetime", "date", "bytearray", "bytes")


def model(kind: str) -> type | None:
    """The client's model class of ``kind`` (e.g. ``V1PodDisruptionBudget``), or None for a kind
    the runner does not know or the client has no model of."""
    known = KINDS.get(kind)
    if known is None:
        return None
    version = known.api_version.split("/")[-1]
    return getattr(models, version[:1].upper() + version[1:] + kind, None)


def path_problem(kind: str, path: str) -> str | None:
    """What ``path`` should be instead, for an object of ``kind``, or None when every key of it is
    a field the API defines there (or the kind has no model, or the path enters a free-form
    object, which the API does not describe)."""
    cls = model(kind)
    if cls is None:
        return None
    type_name, walked = cls.__name__, []
    for part in path.split("."):
        at = ".".join(walked) or "the object's top level"
        if (listed := _LIST.fullmatch(type_name)) is not None:
            if not part.isdigit():
                return f"a list index (0, 1, ...) after {at}, a list"
            type_name = listed.group(1)
        elif (mapped := _MAP.fullmatch(type_name)) is not None:
            type_name = mapped.group(1) or mapped.group(2)
        elif type_name == "object":
            return None
        elif type_name in _SCALARS:
            return f"nothing after {at} (a value of type {type_name})"
        else:
            fields = getattr(models, type_name, None)
            if fields is None:
                return None
            by_json = {json: attribute for attribute, json in fields.attribute_map.items()}
            if part not in by_json:
                return (f"a field of {kind} at {at}: one of {', '.join(sorted(by_json))}")
            type_name = fields.openapi_types[by_json[part]]
        walked.append(part)
    return None


def schema_path_problem(schema: dict[str, Any], path: str, kind: str) -> str | None:
    """What ``path`` should be instead in an object of a custom ``kind`` whose version has the
    structural OpenAPI ``schema`` (a CustomResourceDefinition's ``openAPIV3Schema``), or None
    when every key of it is one the schema defines (or it enters ``metadata``, which the API
    server defines, or a part the schema leaves open: ``x-kubernetes-preserve-unknown-fields``,
    ``additionalProperties``). Source: "Specifying a structural schema",
    https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#specifying-a-structural-schema"""
    parts = path.split(".")
    if parts[0] in ("metadata", "apiVersion", "kind"):
        return None
    node, walked = schema, []
    for part in parts:
        if not isinstance(node, dict) or node.get("x-kubernetes-preserve-unknown-fields") is True:
            return None
        at = ".".join(walked) or "the object's top level"
        if node.get("type") == "array":
            if not part.isdigit():
                return f"a list index (0, 1, ...) after {at}, a list"
            node = node.get("items")
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        elif isinstance(node.get("properties"), dict):
            if part not in node["properties"]:
                return f"a field of {kind} at {at} its schema defines: one of {', '.join(sorted(node['properties']))}"
            node = node["properties"][part]
        elif node.get("type") in ("string", "integer", "number", "boolean"):
            return f"nothing after {at} (a {node['type']} in {kind}'s schema)"
        else:
            return None
        walked.append(part)
    return None
