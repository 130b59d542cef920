"""The rules for a data-only scenario's probes (``runner.probes``): an installed kind with the
fields it takes, an object it reads named as the API takes it, node access where it runs on the
nodes, and writes only where the drill may."""

from __future__ import annotations

from harness.spec.action_rules import check_pod_target
from harness.spec.manifests import KINDS, Declared, expand, placeholder_keys, placeholders
from harness.spec.model import ScenarioError
from harness.spec.object_checks import ObjectChecks, ref_text
from harness.spec.plugins import probe_types
from harness.spec.schema_problems import format_field, sub_schema_errors


def check_probes(checks: ObjectChecks) -> None:
    """Each probe of ``runner.probes``, in order, once the manifests are checked. Raises
    ScenarioError for the first problem."""
    declared = checks.declared
    in_manifests = Declared(list(declared.values()), lambda target: declared.get(
        checks.ref(target["kind"], target["name"], target.get("namespace"))))
    for i, probe in enumerate(checks.data["runner"]["probes"]):
        field = f"runner.probes[{i}]"
        probe_type = _check_probe_fields(checks, field, probe)
        _check_probe_reach(checks, field, probe, probe_type, in_manifests)


def _check_probe_fields(checks: ObjectChecks, field: str, probe: dict) -> type:
    """An installed kind, the fields it takes (each valid against the kind's schema), those it
    needs, and what the kind itself finds wrong. Returns the probe class."""
    path = checks.path
    probe_type = probe_types().get(probe["kind"])
    if probe_type is None:
        raise ScenarioError(path, f"{field}.kind", "an installed probe kind (kdrill.probes): "
                            + ", ".join(sorted(probe_types())), repr(probe["kind"]))
    needs, takes = tuple(probe_type.required), tuple(probe_type.fields)
    for key in probe:
        if key not in takes and key not in ("name", "kind"):
            raise ScenarioError(path, f"{field}.{key}", f"no {key}: a {probe['kind']} probe takes "
                                + (", ".join(takes) or "nothing besides its name and kind"), repr(probe[key]))
    for key in needs:
        if key not in probe:
            raise ScenarioError(path, f"{field}.{key}", f"a {key} for a {probe['kind']} probe", "nothing")
    for key in takes:
        if key in probe:
            for problem in sub_schema_errors(path, probe_type.fields[key], probe[key], (f"{field}.{key}",)):
                raise problem.as_error()
    for where, expected, got in getattr(probe_type, "problems", lambda spec: [])(probe):
        raise ScenarioError(path, f"{field}.{where}", expected, got)
    return probe_type


def _check_probe_reach(checks: ObjectChecks, field: str, probe: dict, probe_type: type,
                       in_manifests: Declared) -> None:
    """What the probe reaches: the nodes (only with node access), an object (named as the API
    takes it), the declared objects (as the kind's ``declared_problems`` says), writes and a
    target Service (only the drill's)."""
    path, data = checks.path, checks.data
    on_node = getattr(probe_type, "node_access", lambda spec: None)(probe)
    if on_node and not data["cluster"].get("needs_node_access"):
        raise ScenarioError(path, "cluster.needs_node_access", f"true: {field} {on_node}",
                            repr(data["cluster"].get("needs_node_access", False)))
    if "object" in probe:
        checks.check_kind(f"{field}.object.kind", probe["object"]["kind"], probe["object"].get("apiVersion"))
        if probe["object"]["kind"] not in KINDS and probe["kind"] != "object-state":
            raise ScenarioError(path, f"{field}.object.kind", f"a kind the runner knows for a {probe['kind']} probe "
                                "(only object-state probes read custom resources)", repr(probe["object"]["kind"]))
        checks.check_placeholders(f"{field}.object", probe["object"])
        checks.check_names(f"{field}.object", probe["object"]["kind"], probe["object"]["name"],
                           probe["object"].get("namespace"))
    # what the declared objects say of the probe (a probe kind's declared_problems)
    for where, expected, got in getattr(probe_type, "declared_problems", lambda spec, found: [])(probe,
                                                                                                   in_manifests):
        raise ScenarioError(path, f"{field}.{where}", expected, got)
    if getattr(probe_type, "writes", False):
        _check_probe_writes(checks, field, probe)
    made = checks.made
    if isinstance(probe.get("target"), dict) and ("Service", probe["target"]["service"], "$(namespace)") not in made:
        raise ScenarioError(path, f"{field}.target.service", "a Service the manifests make in the drill's namespace: "
                            + (", ".join(n for k, n, ns in made if k == "Service" and ns == "$(namespace)") or "none"),
                            repr(probe["target"]["service"]))


def _check_probe_writes(checks: ObjectChecks, field: str, probe: dict) -> None:
    """A probe that writes (even as a dry run) acts only where the drill may: an ``update`` only of
    an object the manifests make, a ``create`` only of a namespaced kind in the drill's namespace
    or one the manifests make, under a name that leaves room for its number; what it sends is
    literal (no placeholder in a value or a key)."""
    path, made = checks.path, checks.made
    target = probe["object"]
    this = checks.ref(target["kind"], target["name"], target.get("namespace"))
    if "evict" in probe or ("delete" in probe and target["kind"] == "Pod"):
        # a declared Pod, or one of a declared StatefulSet's (a stable name)
        check_pod_target(checks, field, "object", target)
    elif ("update" in probe or "delete" in probe) and this not in made:
        raise ScenarioError(path, f"{field}.object", "an object made by workload.manifests, as written there (a "
                            "probe never writes to what the drill did not make): "
                            + (", ".join(ref_text(*m) for m in made) or "none"), ref_text(*this))
    for key in ("create", "update"):
        if key in probe and placeholders(probe[key]):
            raise ScenarioError(path, f"{field}.{key}", "literal values (placeholders are expanded in manifests and "
                                "object names only)", ", ".join(f"$({p})" for p in sorted(placeholders(probe[key]))))
        for where in placeholder_keys(probe.get(key)):
            raise ScenarioError(path, format_field((f"{field}.{key}", *where)), "keys without placeholders (sent as "
                                "written)", repr(where[-1]))
    if "create" in probe:
        own = ["$(namespace)"] + [n for k, n, _ in made if k == "Namespace"]
        if this[2] is None or this[2] not in own:
            raise ScenarioError(path, f"{field}.object", "a namespaced kind in the drill's namespace or one the "
                                "manifests make: " + ", ".join(own),
                                f"{target['kind']} in {this[2] or 'no namespace (cluster-scoped)'}")
        # each create is named <name>-<n>: the name must leave room for the number
        kind = checks.kinds[target["kind"]]
        for ns in checks.drill_namespaces:
            longest = expand(f"{target['name']}-{10 ** 7}", {"namespace": ns})
            problem = kind.problem(longest, ns)
            if problem is not None:
                raise ScenarioError(path, f"{field}.object.name", f"a name that, with '-<n>' added for each create "
                                    f"(e.g. {longest!r}), is {problem}", repr(target["name"]))
