"""What the rules for a data-only scenario's objects share (:class:`ObjectChecks`): the drill's
namespaces, the objects its manifests make so far, and the checks of a kind, the placeholders
and the names of any object the scenario names (a manifest, a probe's object, an action's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.spec.manifests import (
    KINDS,
    PLACEHOLDER_NAMES,
    WORKER_PLACEHOLDER,
    Kind,
    custom_kinds,
    expand,
    placeholder_keys,
    placeholders,
    served_versions,
)
from harness.spec.model import ScenarioError, drill_namespace, registry_images
from harness.spec.schema_problems import format_field


def ref_text(kind: str, name: str, namespace: str | None) -> str:
    """An object as written in a scenario, for an error message: ``Kind namespace/name``."""
    return f"{kind} {namespace + '/' if namespace else ''}{name}"


def _sent(value: str | None, namespace: str) -> str | None:
    """``value`` as the API gets it in a drill of namespace ``namespace``."""
    return None if value is None else expand(value, {"namespace": namespace})


class ObjectChecks:
    """The objects of a data-only scenario file ``data`` (at ``path``) as they are checked, in order.

    ``drill_namespaces``: every namespace its drills run in (one per case), so a name is checked
    as it will be sent; ``images``: the names of its registries' images; ``made``: the objects the
    manifests checked so far make, as refs (:meth:`ref`); ``declared``: ref -> (field, manifest);
    ``kinds``: the runner's kinds and those the CustomResourceDefinitions checked so far define;
    ``served``: a custom kind -> the apiVersions its definition serves.
    """

    def __init__(self, path: Path, data: dict) -> None:
        self.path = path
        self.data = data
        self.drill_namespaces = [drill_namespace(data["name"], c["name"]) for c in data.get("cases") or []] \
            or [drill_namespace(data["name"])]
        registries = (data.get("workload") or {}).get("registries") or []
        self.images = [image for registry in registries for image, _ in registry_images(registry)]
        # What only a manifest may use: the drill's images and the workers' node names.
        self.manifest_only = {f"image_{image}" for image in self.images}
        self.made: list[tuple] = []
        self.declared: dict[tuple, tuple[str, dict]] = {}  # an object as written (ref) -> the field and manifest making it
        self.kinds: dict[str, Kind] = dict(KINDS)
        self.served: dict[str, list[str]] = {}

    def define(self, crd: dict) -> None:
        """Count the kind the CustomResourceDefinition ``crd`` (checked) defines as known."""
        kind = custom_kinds([crd])[crd["spec"]["names"]["kind"]]
        self.kinds[kind.kind] = kind
        self.served[kind.kind] = served_versions(crd)

    def ref(self, kind: str, name: str, namespace: str | None) -> tuple:
        """An object as written: (kind, name, namespace, "$(namespace)" when left out, None when cluster-scoped)."""
        return (kind, name, (namespace or "$(namespace)") if self.kinds[kind].namespaced else None)

    def check_kind(self, field: str, kind: str, api_version: str | None = None) -> None:
        """Raises ScenarioError for a kind the runner does not know (nor an earlier manifest's
        CustomResourceDefinition defines), or an ``api_version`` (at ``field``'s sibling
        apiVersion) other than one its definition serves; a kind of the runner's takes none."""
        if kind not in self.kinds:
            raise ScenarioError(self.path, field, "a kind the runner knows, or one a CustomResourceDefinition of an "
                                f"earlier manifest defines: {', '.join(sorted(self.kinds))}", repr(kind))
        if api_version is not None and api_version not in self.served.get(kind, []):
            where = field.rsplit(".", 1)[0] + ".apiVersion"
            raise ScenarioError(self.path, where, f"a version its CustomResourceDefinition serves: "
                                f"{', '.join(self.served[kind])}" if kind in self.served else
                                f"no apiVersion for a {kind} (only a custom resource is read at a version)",
                                repr(api_version))

    def check_placeholders(self, field: str, value: Any, extra: set[str] = frozenset(), workers: bool = False) -> None:
        """Placeholders in values only, each a known one (or of ``extra``, or ``$(worker_<n>)``
        with ``workers``). Raises ScenarioError."""
        for where in placeholder_keys(value):
            raise ScenarioError(self.path, format_field((field, *where)), "placeholders in values only (keys are sent "
                                "as written)", repr(where[-1]))
        unknown = sorted(u for u in placeholders(value) - set(PLACEHOLDER_NAMES) - extra
                         if not (workers and WORKER_PLACEHOLDER.fullmatch(u)))
        if unknown:
            known = ", ".join(f"$({k})" for k in PLACEHOLDER_NAMES)
            allowed = known + "".join(f", $({k})" for k in sorted(extra)) + (", $(worker_<n>)" if workers else "")
            raise ScenarioError(self.path, field, f"placeholders among {allowed}", ", ".join(f"$({u})" for u in unknown))

    def check_names(self, field: str, kind: str, name: str, namespace: str | None) -> None:
        """``name`` and ``namespace`` (at ``field``.name and .namespace) as the API will get them,
        placeholders expanded for each drill namespace: a name the API would refuse is refused
        here, before anything is made (and one such as "../kube-system/..." never reaches a path)."""
        for key, value in (("name", name), ("namespace", namespace)):
            if value is not None and placeholders(value) - {"namespace"}:
                raise ScenarioError(self.path, f"{field}.{key}", "a name whose only placeholder is $(namespace)",
                                    repr(value))
        for ns in self.drill_namespaces:
            namespace_sent = _sent(namespace, ns) if namespace is not None or not self.kinds[kind].namespaced else ns
            for key, value, problem in (("namespace", namespace, self.kinds[kind].problem(None, namespace_sent)),
                                        ("name", name, self.kinds[kind].problem(_sent(name, ns), namespace_sent))):
                if problem is not None:
                    shown = f"{_sent(value, ns)!r} ($(namespace) is {ns})" if _sent(value, ns) != value else repr(value)
                    raise ScenarioError(self.path, f"{field}.{key}", problem, shown)
