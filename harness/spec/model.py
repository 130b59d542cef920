"""What a validated scenario file is: :class:`Scenario` with its :class:`Case`,
:class:`ExpectationSpec` (each with a :class:`Bound`) and :class:`Source` items, and the
:class:`ScenarioError` any problem with one becomes."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.text import escaped
from harness.spec.plugins import NODE_ACCESS_LEVELS, PluginError, probe_types, registered_fault
from harness.spec.schema import OPS

# A Namespace a scenario declares is named after its drill's: "$(namespace)-victim".
OWN_NAMESPACE_PREFIX = "$(namespace)-"


def registry_images(registry: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, base) of each image a declared registry serves (``base`` one of IMAGE_BASES)."""
    return [(i, "pause") if isinstance(i, str) else (i["name"], i.get("base", "pause")) for i in registry["images"]]


def drill_namespace(scenario_name: str, case: str | None = None) -> str:
    """The namespace a drill of scenario ``scenario_name`` (and ``case``) runs in, what
    ``$(namespace)`` means in its declared objects: at most 63 characters, as a namespace's name."""
    return f"kdrill-{scenario_name}{'-' + case if case else ''}"[:63].rstrip("-")


class ScenarioError(ValueError):
    """A scenario file is unreadable or invalid.

    Attributes: ``path`` (Path of the file, or directory for look-ups),
    ``field`` (dotted path such as ``expectations[2].bound.op``, or ``<file>``
    for problems with the file as a whole), ``expected`` (human text),
    ``got`` (repr of what was there, or None when there is nothing to show),
    ``line`` (1-based line number when known, else None).
    """

    def __init__(self, path: Path | str, field: str, expected: str,
                 got: str | None = None, line: int | None = None) -> None:
        self.path = Path(path)
        self.field = field
        self.expected = expected
        self.got = got
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        # The field may be a key the file wrote (an unknown one): escaped like what was got.
        text = f"{escaped(display_path(self.path))}: field '{escaped(self.field)}': expected {self.expected}"
        return text if self.got is None else f"{text}, got {self.got}"

    def __reduce__(self):  # keep picklable (pytest-xdist ships exceptions between processes)
        return (type(self), (self.path, self.field, self.expected, self.got, self.line))


@dataclass(frozen=True)
class DetectionSpec:
    """An alert the platform's monitoring should fire for the drill's failure: within
    ``fires_within_seconds`` of the fault taking effect, resolved within ``resolves_within_seconds``
    of the revert; in every case, or only in ``cases``."""

    alert: str
    fires_within_seconds: float
    resolves_within_seconds: float
    cases: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"alert": self.alert, "fires_within_seconds": self.fires_within_seconds,
                "resolves_within_seconds": self.resolves_within_seconds,
                **({"cases": list(self.cases)} if self.cases else {})}


@dataclass(frozen=True)
class Source:
    """A primary document stating the behaviour under test."""

    title: str
    url: str
    section: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"title": self.title, "url": self.url, "section": self.section}


@dataclass(frozen=True)
class Bound:
    """A pass condition ``measured <op> value``; ``op`` is one of ``OPS``.

    Raises ValueError for an unknown op.
    """

    op: str
    value: float | int | bool

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"bound op must be one of {', '.join(OPS)}, got {self.op!r}")

    def holds(self, measured: Any) -> bool:
        """True when ``measured`` satisfies the bound. None, NaN, non-numbers,
        and a bool compared with a number (or vice versa) never hold."""
        if isinstance(self.value, bool) or isinstance(measured, bool):
            # True == 1 in Python; a flag and a count must not satisfy each other.
            return self.op == "==" and type(measured) is type(self.value) and measured == self.value
        if not isinstance(measured, (int, float)):
            return False
        m, v = measured, self.value
        return {"<=": m <= v, "<": m < v, ">=": m >= v, ">": m > v, "==": m == v}[self.op]

    def describe(self) -> str:
        """E.g. ``">= 0.99"`` or ``"== true"``."""
        value = str(self.value).lower() if isinstance(self.value, bool) else str(self.value)
        return f"{self.op} {value}"

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "value": self.value}


@dataclass(frozen=True)
class ExpectationSpec:
    """One documented, checkable consequence of the claim."""

    name: str
    description: str
    bound: Bound
    unit: str
    phase: str | None = None
    # {"relative": fraction, "absolute": in ``unit``}: the drift `kdrill compare` tolerates
    tolerance: dict[str, float] | None = None
    # {"kind", "probe", "window"}: what the runner measures (data-only scenarios)
    measure: dict[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {"name": self.name, "description": self.description, "bound": self.bound.to_dict(),
                "unit": self.unit, "phase": self.phase}
        if self.tolerance is not None:
            data["tolerance"] = dict(self.tolerance)
        if self.measure is not None:
            data["measure"] = dict(self.measure)
        return data


@dataclass(frozen=True)
class Case:
    """A named variant; ``params`` are merged over the fault params, ``expectations`` are
    checked in this case besides the scenario's own."""

    name: str
    params: dict[str, Any] = field(default_factory=dict, hash=False)
    expectations: tuple[ExpectationSpec, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "params": copy.deepcopy(self.params)}
        if self.expectations:
            data["expectations"] = [e.to_dict() for e in self.expectations]
        return data


@dataclass(frozen=True)
class Scenario:
    """A validated scenario file. ``probe_interval_seconds`` is in seconds."""

    name: str
    title: str
    drill: str
    claim: str
    sources: tuple[Source, ...]
    cluster_config: str
    needs_node_access: bool
    fault_kind: str
    fault_method: str
    fault_params: dict[str, Any] = field(hash=False)
    workload: dict[str, Any] = field(hash=False)
    probe_interval_seconds: float
    expectations: tuple[ExpectationSpec, ...]
    cases: tuple[Case, ...]
    path: Path
    # vital sign -> the expectations that may cover it (the first one a case has covers it there)
    vital_signs: dict[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    severity: str = "normal"  # one of SEVERITIES
    # data-only scenarios: {"windows": {...}, "probes": [...]} (harness/engine/runner.py); None for a drill file
    runner: dict[str, Any] | None = field(default=None, hash=False)
    node_access_for: str = ""  # cluster.node_access_for: what a drill file does on the nodes
    on_request: str = ""  # why it runs only when named; "" for a drill of the default catalogue
    fault_outside_drill: str = ""  # fault.outside_drill: what the fault acts on beyond the drill's objects, and why
    detection: tuple[DetectionSpec, ...] = ()  # what the platform's monitoring should notice

    def detection_for(self, case: str | None = None) -> list[DetectionSpec]:
        """The alerts expected in ``case`` (those without ``cases``, and those naming it)."""
        return [d for d in self.detection if not d.cases or case in d.cases]

    def node_access_needs(self, case: str | None = None) -> list[str]:
        """What the drill does on the nodes, each a phrase after "it": its fault's (the fault
        class's ``node_capability``), its registries', its container kills', and
        ``cluster.node_access_for``. Empty when it needs no node access."""
        return [phrase for _, phrase in self.node_access_levels(case)]

    def node_access_levels(self, case: str | None = None) -> list[tuple[str, str]]:
        """:meth:`node_access_needs` with the level of node access each needs, as (level, phrase);
        levels are :data:`harness.spec.plugins.NODE_ACCESS_LEVELS`. The fault's level may depend on
        its params (``Fault.node_access_level_for``): those of ``case``, or without one the
        strongest over every case."""
        needs = []
        try:
            cls = registered_fault(self.fault_kind)
        except PluginError:  # an unknown or broken kind is refused elsewhere (check_references), with the known ones
            cls = None
        if cls is not None and cls.needs_node_access:
            cases = [case] if case is not None else [c.name for c in self.cases] or [None]
            levels = []
            for name in cases:
                try:
                    levels.append(cls.node_access_level_for(self.params_for(name)))
                except KeyError:  # an unknown case: the class's own level
                    levels.append(cls.node_access_level)
            level = max(levels, key=lambda lv: NODE_ACCESS_LEVELS.index(lv) if lv in NODE_ACCESS_LEVELS else 99)
            needs.append((level, cls.node_capability or f"runs the {self.fault_kind} fault on the nodes"))
        if self.workload.get("registries"):
            needs.append(("container", "runs registry containers beside the kind nodes and writes every node's "
                                       "containerd registry configuration"))
        if any("kill_container" in a for a in (self.runner or {}).get("actions") or []):
            needs.append(("exec", "kills a container through its node's container runtime (crictl)"))
        for probe in (self.runner or {}).get("probes") or []:
            on_node = getattr(probe_types().get(probe.get("kind")), "node_access", lambda spec: None)(probe)
            if on_node:
                needs.append(("exec", on_node))
        if self.node_access_for:
            # A drill file reaches the nodes through Cluster.node_exec, which every channel gives.
            needs.append(("exec", self.node_access_for))
        return needs

    def node_access_missing(self, cluster, case: str | None = None) -> list[str]:
        """The phrases of :meth:`node_access_levels` (for ``case``) that ``cluster``'s node channel
        does not give, each ending with the level it needs. Empty when the drill can run there."""
        return [f"{phrase} (needs node access: {level})" for level, phrase in self.node_access_levels(case)
                if not cluster.node_access_gives(level)]

    def expectation(self, name: str) -> ExpectationSpec:
        """The spec called ``name``. Raises KeyError listing the known names."""
        for spec in self.expectations:
            if spec.name == name:
                return spec
        known = ", ".join(s.name for s in self.expectations)
        raise KeyError(f"scenario {self.name!r} has no expectation {name!r} (known: {known})")

    def case(self, name: str) -> Case:
        """The case called ``name``. Raises KeyError listing the known cases."""
        for case in self.cases:
            if case.name == name:
                return case
        known = ", ".join(c.name for c in self.cases) or "none"
        raise KeyError(f"scenario {self.name!r} has no case {name!r} (known: {known})")

    def expectations_for(self, case_name: str | None = None) -> tuple[ExpectationSpec, ...]:
        """The scenario's expectations followed by the case's own. Raises KeyError for an
        unknown case."""
        if case_name is None:
            return self.expectations
        return self.expectations + self.case(case_name).expectations

    def params_for(self, case_name: str | None = None) -> dict[str, Any]:
        """A fresh copy of the fault params with the case's params merged over
        them (top-level keys; case wins). Raises KeyError for an unknown case."""
        params = copy.deepcopy(self.fault_params)
        if case_name is not None:
            params.update(copy.deepcopy(self.case(case_name).params))
        return params

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable, shaped like the YAML file, plus ``path``."""
        return {
            "name": self.name, "title": self.title, "drill": self.drill, "claim": self.claim,
            "source": [s.to_dict() for s in self.sources],
            "cluster": {"config": self.cluster_config, "needs_node_access": self.needs_node_access,
                        **({"node_access_for": self.node_access_for} if self.node_access_for else {})},
            "fault": {"kind": self.fault_kind, "method": self.fault_method,
                      "params": copy.deepcopy(self.fault_params),
                      **({"outside_drill": self.fault_outside_drill} if self.fault_outside_drill else {})},
            "workload": copy.deepcopy(self.workload),
            "probes": {"interval_seconds": self.probe_interval_seconds},
            "expectations": [e.to_dict() for e in self.expectations],
            "cases": [c.to_dict() for c in self.cases],
            "vital_signs": {sign: list(names) for sign, names in self.vital_signs.items()},
            "severity": self.severity,
            **({"detection": [d.to_dict() for d in self.detection]} if self.detection else {}),
            **({"on_request": self.on_request} if self.on_request else {}),
            **({"runner": copy.deepcopy(self.runner)} if self.runner is not None else {}),
            "path": str(self.path),
        }


def display_path(path: Path) -> str:
    """Path relative to the working directory when it is under it (shorter messages)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve())) if path.is_absolute() else str(path)
    except ValueError:
        return str(path)
