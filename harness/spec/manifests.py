"""Kubernetes objects a data-only scenario names: its manifests, its object-state probes and its
actions. One table of the kinds the runner knows (:data:`KINDS`), and create, read, delete and
"ready" for each, through the API's REST paths.

Why a table rather than discovery: a drill may break discovery itself (an unavailable
APIService fails it for every client), and a scenario must be refused before anything is
touched when it names a kind the runner cannot handle. The paths are the API's own
(https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-uris).

Order matters, and the runner keeps it: each object is created once the one before it serves
(:func:`not_ready_reason`). Declare a Service before the workload behind it and an APIService
after both: an API server calls an APIService's Service by its ClusterIP from the node's own
network, and a ClusterIP the node's kube-proxy has not programmed yet is no address on the node,
so those first connections leave the node for its default route (on this machine they were
answered from outside the cluster and kept alive, and the APIService stayed unavailable for
minutes). A Service that exists, even without endpoints, is rejected locally instead. On kind,
kdrill's clusters reject such traffic on every node (``KindProvider.guard_service_subnet``); on
another platform, the order is what keeps it in.

Placeholders: every string value (not a mapping key) in a manifest, probe object or action may
hold ``$(namespace)`` (the drill's namespace; the only one an object's name or namespace may
hold), ``$(toolbox_image)`` and ``$(toolbox_pull_policy)`` (the configured toolbox) and, in a
scenario with ``workload.tls``, ``$(tls_cert)`` and ``$(tls_key)`` (PEM: a serving certificate
for that Service and its key, made for the drill and never written to the evidence; the key
only in a Secret's ``stringData``) and
``$(tls_ca_bundle)`` (the CA that signed it, base64, as a ``caBundle`` holds it);
:func:`expand` replaces them, and sends ``$$(name)`` as ``$(name)`` (e.g. a shell's
``$$(hostname)`` in a command). The ``$(NAME)`` form is the one Kubernetes uses for dependent
environment variables in a container's command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator

# ``$(name)``, or ``$$(name)``: escaped, sent as ``$(name)`` (as Kubernetes escapes a container's
# ``$(VAR)``), e.g. a shell's ``$$(hostname)`` in a command.
PLACEHOLDER = re.compile(r"(\$?)\$\(([a-z_][a-z0-9_]*)\)")
PLACEHOLDER_NAMES = ("namespace", "toolbox_image", "toolbox_pull_policy", "tls_cert", "tls_key", "tls_ca_bundle")
# Only with workload.tls: the runner makes them for the drill (harness/components/webhook.py).
TLS_PLACEHOLDERS = ("tls_cert", "tls_key", "tls_ca_bundle")
# In manifests only: $(worker_1), $(worker_2), ...: the cluster's workers' node names, sorted (to
# pin a pod to a node), and $(image_<image>): an image of workload.registries, pushed for the drill.
WORKER_PLACEHOLDER = re.compile(r"worker_[1-9]")


# Object names as the API validates them
# (https://kubernetes.io/docs/concepts/overview/working-with-objects/names/). Checked here as well,
# before a name becomes part of a request's path: the client normalises the path, so a name such
# as "../../kube-system/configmaps/coredns" would otherwise reach another namespace's object.
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
NAME_RULES: dict[str, tuple[re.Pattern, int, str]] = {
    "subdomain": (re.compile(rf"{_LABEL}(\.{_LABEL})*"), 253,
                  "lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"),
    "label": (re.compile(_LABEL), 63, "lowercase letters, digits and '-', starting and ending with a letter or digit"),
    "label-1035": (re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?"), 63,
                   "lowercase letters, digits and '-', starting with a letter and ending with a letter or digit"),
}


def name_problem(name: Any, rule: str = "subdomain") -> str | None:
    """What is wrong with ``name`` under ``rule`` (a key of :data:`NAME_RULES`), or None."""
    pattern, limit, text = NAME_RULES[rule]
    if not isinstance(name, str) or not pattern.fullmatch(name) or len(name) > limit:
        return f"{text}, at most {limit} characters"
    return None


@dataclass(frozen=True)
class Kind:
    """A kind the runner knows: its apiVersion, REST plural, whether it lives in a namespace, and
    the rule its names follow (a key of :data:`NAME_RULES`)."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool
    names: str = "subdomain"

    def problem(self, name: Any, namespace: Any = None) -> str | None:
        """What an object of this kind called ``name`` (None: the collection) in ``namespace``
        should be instead, or None when both are as the API takes them: a namespaced kind needs a
        namespace (a DNS label), a cluster-scoped one has none."""
        if self.namespaced:
            if namespace is None:
                return f"a namespace ({self.kind} objects live in one)"
            if (problem := name_problem(namespace, "label")) is not None:
                return f"a namespace name: {problem}"
        elif namespace is not None:
            return f"no namespace ({self.kind} objects are cluster-scoped)"
        if name is not None and (problem := name_problem(name, self.names)) is not None:
            return f"a {self.kind} name: {problem}"
        return None

    def path(self, name: str | None = None, namespace: str | None = None) -> str:
        """The REST path of the object ``name`` (None: of the collection) in ``namespace``.
        Raises ValueError for a name or namespace the API would not take (:meth:`problem`)."""
        problem = self.problem(name, namespace)
        if problem is not None:
            raise ValueError(f"{self.kind} {name!r} in namespace {namespace!r}: expected {problem}")
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced:
            base += f"/namespaces/{namespace}"
        return f"{base}/{self.plural}" + (f"/{name}" if name is not None else "")


KINDS: dict[str, Kind] = {k.kind: k for k in [
    Kind("v1", "Namespace", "namespaces", False, "label"),
    Kind("v1", "ConfigMap", "configmaps", True),
    Kind("v1", "Secret", "secrets", True),
    Kind("v1", "Service", "services", True, "label-1035"),
    Kind("v1", "ServiceAccount", "serviceaccounts", True),
    Kind("v1", "Pod", "pods", True),
    Kind("apps/v1", "Deployment", "deployments", True),
    Kind("apps/v1", "StatefulSet", "statefulsets", True),
    Kind("batch/v1", "Job", "jobs", True),
    Kind("batch/v1", "CronJob", "cronjobs", True),
    Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", True),
    Kind("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", True),
    Kind("apiregistration.k8s.io/v1", "APIService", "apiservices", False),
    Kind("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration",
         "validatingwebhookconfigurations", False),
    Kind("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration",
         "mutatingwebhookconfigurations", False),
    Kind("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", "validatingadmissionpolicies", False),
    Kind("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding",
         "validatingadmissionpolicybindings", False),
    Kind("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", False),
    # Confined to the scenario's own custom kinds (harness/spec/rbac_rules.py).
    Kind("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", False),
    Kind("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebindings", False),
]}


# API groups a scenario's APIService may not name. The core group ("") and the unsuffixed groups
# Kubernetes serves itself (API reference, "API Groups":
# https://kubernetes.io/docs/reference/using-api/#api-groups), and every group under k8s.io or
# kubernetes.io, which the Kubernetes API conventions reserve for the project (its built-in groups,
# metrics.k8s.io and the like). The API server registers its own APIService for each group it
# serves, so a scenario's would be refused at creation, partway through a drill's setup, and its
# deletion after the drill would remove the API server's own.
UNSUFFIXED_BUILT_IN_GROUPS = frozenset({"", "apps", "autoscaling", "batch", "policy"})
RESERVED_GROUP_SUFFIXES = ("k8s.io", "kubernetes.io")


def reserved_group(group: str) -> bool:
    """Whether ``group`` is Kubernetes' own (:data:`UNSUFFIXED_BUILT_IN_GROUPS`, or k8s.io or
    kubernetes.io, or a group under either)."""
    return group in UNSUFFIXED_BUILT_IN_GROUPS or any(group == s or group.endswith("." + s)
                                                      for s in RESERVED_GROUP_SUFFIXES)


def apiservice_problem(manifest: dict[str, Any]) -> tuple[str, str, str] | None:
    """For an APIService manifest: (field, expected, got) when the API server would refuse it or it
    names a group Kubernetes keeps for itself (:func:`reserved_group`); None when it is one a
    scenario may make. The API server requires the name ``<version>.<group>``."""
    spec = manifest.get("spec") if isinstance(manifest.get("spec"), dict) else {}
    group, version = spec.get("group"), spec.get("version")
    if not isinstance(group, str) or reserved_group(group):
        return ("spec.group", "an API group of the scenario's own (not one of Kubernetes' built-in groups, "
                "nor under k8s.io or kubernetes.io: the API server has its own APIService for those)", repr(group))
    if not isinstance(version, str) or not version:
        return ("spec.version", "the version the backend serves, e.g. v1alpha1", repr(version))
    name = manifest.get("metadata", {}).get("name")
    if name != f"{version}.{group}":
        return ("metadata.name", f"{version}.{group!s} (the API server requires <version>.<group>)", repr(name))
    return None


def crd_problem(manifest: dict[str, Any]) -> tuple[str, str, str] | None:
    """For a CustomResourceDefinition manifest: (field, expected, got) when the API server would
    refuse it, it names a group Kubernetes keeps for itself (:func:`reserved_group`) or a kind the
    runner already knows, or its storage version is not served (objects are read and deleted at
    it); None when a scenario may make it. The API server requires a group with a dot, the name
    ``<plural>.<group>``, versions named as DNS-1035 labels, each once, with ``served`` and
    ``storage`` set, and exactly one storage version
    (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/).
    Where a conversion webhook is called is checked with the scenario's other objects
    (harness/spec/object_rules.py)."""
    spec = manifest.get("spec") if isinstance(manifest.get("spec"), dict) else {}
    names = spec.get("names") if isinstance(spec.get("names"), dict) else {}
    group, plural, kind = spec.get("group"), names.get("plural"), names.get("kind")
    if not isinstance(group, str) or placeholders(group) or reserved_group(group) or name_problem(group) \
            or "." not in group:
        return ("spec.group", "an API group of the scenario's own, written out, with a dot (not one of Kubernetes' "
                "built-in groups, nor under k8s.io or kubernetes.io)", repr(group))
    if not isinstance(kind, str) or not re.fullmatch(r"[A-Z][A-Za-z0-9]*", kind) or kind in KINDS:
        return ("spec.names.kind", "a kind in CamelCase that is none of the runner's own: "
                + ", ".join(sorted(KINDS)), repr(kind))
    if name_problem(plural, "label-1035"):
        return ("spec.names.plural", "the kind's REST name: lowercase letters, digits and '-', starting with a letter",
                repr(plural))
    if manifest.get("metadata", {}).get("name") != f"{plural}.{group}":
        return ("metadata.name", f"{plural}.{group} (the API server requires <plural>.<group>)",
                repr(manifest.get("metadata", {}).get("name")))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        return ("spec.scope", "Namespaced or Cluster", repr(spec.get("scope")))
    return _versions_problem(spec.get("versions")) or _conversion_problem(spec)


def _versions_problem(versions: Any) -> tuple[str, str, str] | None:
    """A CRD's ``spec.versions`` as :func:`crd_problem` requires them, or None."""
    if not isinstance(versions, list) or not versions:
        return ("spec.versions", "a list of versions", repr(versions))
    seen = set()
    for i, version in enumerate(versions):
        name = version.get("name") if isinstance(version, dict) else None
        if name_problem(name, "label-1035") or name in seen:
            return (f"spec.versions[{i}].name", "a version name (a DNS-1035 label, e.g. v1beta1), each once", repr(name))
        seen.add(name)
        for key in ("served", "storage"):
            if not isinstance(version.get(key), bool):
                return (f"spec.versions[{i}].{key}", "true or false", repr(version.get(key)))
    storage = [v for v in versions if v["storage"]]
    if len(storage) != 1 or not storage[0]["served"]:
        return ("spec.versions", "exactly one version with storage: true, and served (objects are made, read and "
                "deleted at it)", repr([v["name"] for v in storage]))
    return None


def _conversion_problem(spec: dict[str, Any]) -> tuple[str, str, str] | None:
    """A CRD's ``spec.conversion``, if given: ``{strategy: None}`` or ``{strategy: Webhook,
    webhook: {clientConfig, conversionReviewVersions}}``; or None."""
    conversion = spec.get("conversion")
    if conversion is None:
        return None
    if not isinstance(conversion, dict) or conversion.get("strategy") not in ("None", "Webhook"):
        return ("spec.conversion", "{strategy: None} or {strategy: Webhook, webhook: {clientConfig, "
                "conversionReviewVersions}}", repr(conversion)[:200])
    if conversion["strategy"] == "Webhook" and not isinstance(conversion.get("webhook"), dict):
        return ("spec.conversion.webhook", "{clientConfig: {service, caBundle}, conversionReviewVersions}",
                repr(conversion.get("webhook"))[:200])
    return None


def custom_kinds(manifests: list[dict[str, Any]]) -> dict[str, Kind]:
    """The kinds the CustomResourceDefinitions among ``manifests`` define (each one checked by
    :func:`crd_problem`): kind name -> :class:`Kind` at the storage version."""
    kinds = {}
    for manifest in manifests:
        if manifest.get("kind") == "CustomResourceDefinition":
            spec = manifest["spec"]
            storage = next(v["name"] for v in spec["versions"] if v.get("storage") is True)
            kinds[spec["names"]["kind"]] = Kind(f"{spec['group']}/{storage}", spec["names"]["kind"],
                                                spec["names"]["plural"], spec["scope"] == "Namespaced")
    return kinds


def known_kinds(manifests: list[dict[str, Any]]) -> dict[str, Kind]:
    """:data:`KINDS` and the kinds the CustomResourceDefinitions among ``manifests`` define
    (:func:`custom_kinds`; a definition may not name one of KINDS): kind name -> :class:`Kind`."""
    return {**custom_kinds(manifests), **KINDS}


def served_versions(manifest: dict[str, Any]) -> list[str]:
    """The apiVersions (``group/version``) a CustomResourceDefinition manifest serves."""
    spec = manifest["spec"]
    return [f"{spec['group']}/{v['name']}" for v in spec["versions"] if v.get("served") is True]


def kind_of(name: str) -> Kind:
    """The :class:`Kind` called ``name``. Raises KeyError naming the known kinds."""
    try:
        return KINDS[name]
    except KeyError:
        raise KeyError(f"kind {name!r} is not one the runner knows: {', '.join(sorted(KINDS))}") from None


def expand(value: Any, values: dict[str, str], leave_unknown: bool = False) -> Any:
    """``value`` with every ``$(name)`` in its strings replaced from ``values`` (recursively, on
    copies). Raises KeyError for a placeholder ``values`` does not have, unless ``leave_unknown``
    (then it stays as written: a platform profile's manifests are the team's, with their own)."""
    if isinstance(value, str):
        def one(match: re.Match) -> str:
            escaped, name = match.groups()
            if escaped:
                return f"$({name})"
            if name not in values:
                if leave_unknown:
                    return match.group(0)
                raise KeyError(f"unknown placeholder $({name}); known: "
                               + ", ".join(f"$({k})" for k in sorted(values)))
            return values[name]
        return PLACEHOLDER.sub(one, value)
    if isinstance(value, dict):
        return {k: expand(v, values, leave_unknown) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v, values, leave_unknown) for v in value]
    return value


def tls_key_misplaced(manifest: dict[str, Any]) -> str | None:
    """Where ``$(tls_key)`` is in ``manifest`` when that is anywhere but a Secret's stringData (as
    the "got" of an error), or None. Elsewhere (a label, a ConfigMap) the private key is readable by
    whoever reads that object, and an object the API refuses is quoted back in its error, which
    the evidence keeps."""
    elsewhere = {k: v for k, v in manifest.items() if (manifest.get("kind"), k) != ("Secret", "stringData")}
    if "tls_key" not in placeholders(elsewhere):
        return None
    return f"$(tls_key) in a {manifest.get('kind')}" + (" outside its stringData" if manifest.get("kind") == "Secret"
                                                        else "")


def placeholders(value: Any) -> set[str]:
    """Every placeholder name used in ``value``'s strings."""
    if isinstance(value, str):
        return {name for escaped, name in PLACEHOLDER.findall(value) if not escaped}
    if isinstance(value, dict):
        return set().union(*(placeholders(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(placeholders(v) for v in value)) if value else set()
    return set()


def placeholder_keys(value: Any, where: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """Where (keys and list indices) each mapping key of ``value`` that holds a placeholder is:
    :func:`expand` replaces placeholders in values only, so such a key would be sent as written."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and placeholders(key):
                yield where + (key,)
            yield from placeholder_keys(item, where + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from placeholder_keys(item, where + (i,))


@dataclass(frozen=True)
class Ref:
    """One object: kind, name, namespace (None for a cluster-scoped kind). For a custom resource
    (a kind a scenario's CustomResourceDefinition defines), also ``api_version`` (group/version:
    the version it is read and written at) and ``plural`` (its REST name), so a ref in the
    ledger is enough to delete it from another process; both None for a kind of :data:`KINDS`."""

    kind: str
    name: str
    namespace: str | None = None
    api_version: str | None = None
    plural: str | None = None

    @classmethod
    def of(cls, manifest: dict[str, Any], kinds: dict[str, Kind] = KINDS) -> "Ref":
        """The ref of ``manifest``, of a kind in ``kinds`` (:func:`known_kinds` for a scenario's
        own custom resources, addressed at the manifest's apiVersion). Raises KeyError for a kind
        of neither."""
        meta = manifest.get("metadata") or {}
        return cls.at(manifest["kind"], meta["name"], meta.get("namespace"), manifest.get("apiVersion"), kinds)

    @classmethod
    def at(cls, kind_name: str, name: str, namespace: str | None, api_version: str | None,
           kinds: dict[str, Kind] = KINDS) -> "Ref":
        """The ref of the object ``kind_name`` ``name`` in ``namespace`` (dropped for a
        cluster-scoped kind), a kind of ``kinds``; a custom resource's at ``api_version``, by
        default its storage version. Raises KeyError for a kind not in ``kinds``."""
        kind = kinds[kind_name] if kind_name in kinds else kind_of(kind_name)
        namespace = namespace if kind.namespaced else None
        if kind_name in KINDS:
            return cls(kind_name, name, namespace)
        return cls(kind_name, name, namespace, api_version or kind.api_version, kind.plural)

    @property
    def resource(self) -> Kind:
        """The :class:`Kind` to address this object by. Raises KeyError for a kind the runner does
        not know (not in :data:`KINDS`, and no ``plural`` given)."""
        if self.plural is None:
            return kind_of(self.kind)
        return Kind(str(self.api_version), self.kind, self.plural, self.namespace is not None)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Ref":
        return cls(data["kind"], data["name"], data.get("namespace"), data.get("apiVersion"), data.get("plural"))

    def to_dict(self) -> dict[str, Any]:
        custom = {"apiVersion": self.api_version, "plural": self.plural} if self.plural else {}
        return {"kind": self.kind, "name": self.name, **({"namespace": self.namespace} if self.namespace else {}),
                **custom}

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    """The status condition of type ``type_`` (a dict with status, reason, message), or None."""
    for item in ((obj or {}).get("status") or {}).get("conditions") or []:
        if item.get("type") == type_:
            return item
    return None


def not_ready_reason(obj: dict[str, Any] | None) -> str | None:
    """Why the object is not yet serving, or None when it is: a Deployment or StatefulSet with
    fewer ready replicas than wanted, a Pod not Ready, an APIService not Available, a
    CustomResourceDefinition not Established; any other
    kind counts as ready once it exists."""
    if obj is None:
        return "not found"
    kind, status = obj.get("kind"), obj.get("status") or {}
    if kind in ("Deployment", "StatefulSet"):
        wanted, ready = (obj.get("spec") or {}).get("replicas", 1), status.get("readyReplicas") or 0
        return None if ready >= wanted else f"{ready} of {wanted} replicas ready"
    if kind == "Pod":
        ready = condition(obj, "Ready")
        return None if ready and ready.get("status") == "True" else f"pod {status.get('phase')}, not Ready"
    if kind == "CustomResourceDefinition":
        # Its objects can be created once the API server serves the new REST path.
        established = condition(obj, "Established")
        return None if established and established.get("status") == "True" else "not Established"
    if kind == "APIService":
        available = condition(obj, "Available")
        if available and available.get("status") == "True":
            return None
        return f"not Available ({(available or {}).get('reason')}: {(available or {}).get('message')})"
    return None


def state_text(obj: dict[str, Any] | None, limit: int = 200) -> str:
    """A one-line summary of an object's state for a probe sample: absent, or its phase,
    deletion mark and conditions that are True (with reasons)."""
    if obj is None:
        return "absent"
    parts = []
    phase = (obj.get("status") or {}).get("phase")
    if phase:
        parts.append(f"phase={phase}")
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        parts.append("deleting")
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("status") == "True":
            parts.append(f"{item.get('type')}({item.get('reason') or ''})")
        elif item.get("type") in ("Available", "Ready"):
            parts.append(f"{item.get('type')}=False({item.get('reason') or ''})")
    return (" ".join(parts) or "present")[:limit]


@dataclass(frozen=True)
class Declared:
    """What a scenario's ``workload.manifests`` declare, for a probe kind's ``declared_problems``:
    ``manifests``, (field, manifest) of each as written, in order; ``find(object)``, (field,
    manifest) of the one making an object ``{kind, name, namespace}`` (as written: the namespace
    left out or ``$(namespace)`` for the drill's), or None."""

    manifests: list[tuple[str, dict[str, Any]]]
    find: Callable[[dict], tuple[str, dict[str, Any]] | None]


# What kdrill makes in a drill's namespace itself. The runner's workload (kind, name) and its probe
# pod: a scenario declaring one of these there is refused when it loads (its creation would meet a
# 409 after the setup had begun).
APP = "web"
PROBE_POD = "runner-probe"
OWN_OBJECTS = (("Deployment", APP), ("Service", APP), ("Pod", PROBE_POD))
# The label on every object a scenario declares (harness.scaffolding.drill_objects), valued with
# its ledger entry's token: a declared object may not carry it already.
OWNER_LABEL = "kdrill.io/drill-objects"
# The namespace of the vital signs' own workload and probes (harness.engine.vitals).
VITALS_NAMESPACE = "kdrill-vitals"
