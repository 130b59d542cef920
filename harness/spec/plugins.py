"""The plug-ins a scenario names: fault kinds, probe kinds and measures, found through their entry
points (``kdrill.faults``, ``kdrill.probes``, ``kdrill.measures``), so a team's own package adds
them the way kdrill's own are added. The spec reads what a plug-in class declares (a fault's
params and node access, a probe kind's fields); the classes live in :mod:`harness.faults`,
:mod:`harness.probes` and :mod:`harness.engine.measures`, above this layer."""

from __future__ import annotations

import difflib
import functools

from harness.core.entry_points import installed

FAULT_ENTRY_POINTS = "kdrill.faults"
PROBE_ENTRY_POINTS = "kdrill.probes"
MEASURE_ENTRY_POINTS = "kdrill.measures"

# What a fault or drill needs of the nodes, weakest first. A cluster's node channel gives a prefix of it
# (harness.kube.providers).
#   exec:      run commands on a node (crictl, etcdctl, journalctl) while its kubelet and the API
#              server serve;
#   kubelet:   stop the kubelet, the API server or etcd's quorum, and still revert: the node agent's
#              exec goes through exactly those, so its revert needs a hold on the node itself;
#   container: act on the node machine as a whole or beside it (docker pause, registry
#              containers, a second kind cluster): this machine's Docker engine.
NODE_ACCESS_LEVELS = ("exec", "kubelet", "container")

# Measures over a metric probe's values: a probe of another kind has none to give.
VALUE_MEASURES = ("max_value", "min_value", "rate_per_second")
# Measures of the successful samples' latencies (seconds): a failure is not among them.
LATENCY_MEASURES = ("max_latency_seconds", "median_latency_seconds", "p99_latency_seconds", "min_latency_seconds")


class PluginError(LookupError):
    """No plug-in of that name is installed, or the one registered cannot be loaded or is not one."""


def fault_kinds() -> list[str]:
    """Every fault kind installed: the ``kdrill.faults`` entry points (kdrill's own and plug-ins')."""
    return sorted(ep.name for ep in installed(group=FAULT_ENTRY_POINTS))


def data_usable(fault_type: type) -> bool:
    """Whether a data-only scenario can use ``fault_type``: it builds itself from the scenario's
    params (``for_scenario``). A subclass of such a fault that a drill file drives sets
    ``for_scenario = None``."""
    return callable(getattr(fault_type, "for_scenario", None))


def registered_fault(kind: str) -> type:
    """The class registered for fault ``kind`` in the ``kdrill.faults`` entry points, with that
    ``kind`` and a known node access level. Raises PluginError naming the known kinds (and the
    nearest), or what is wrong with the one registered. :func:`harness.faults.fault_class` also
    checks that it is a ``Fault``."""
    found = [ep for ep in installed(group=FAULT_ENTRY_POINTS) if ep.name == kind]
    if not found:
        near = difflib.get_close_matches(kind, fault_kinds(), n=1)
        raise PluginError(f"no fault kind {kind!r} is installed" + (f"; did you mean {near[0]!r}?" if near else ".")
                          + f" Known: {', '.join(fault_kinds()) or 'none'}. A plug-in registers one under the "
                          f"{FAULT_ENTRY_POINTS!r} entry points; kdrill's own need `pip install -e .` after one is added.")
    try:
        value = found[0].load()
    except Exception as exc:  # a broken plug-in is named, not a traceback
        raise PluginError(f"fault kind {kind!r} ({found[0].value}) cannot be loaded: {type(exc).__name__}: {exc}") \
            from exc
    if not (isinstance(value, type) and getattr(value, "kind", None) == kind):
        raise PluginError(f"{found[0].value}, registered as fault kind {kind!r}, is not a Fault with that kind")
    if getattr(value, "needs_node_access", False) and getattr(value, "node_access_level", None) not in NODE_ACCESS_LEVELS:
        # No channel gives an unknown level: the drill would be skipped everywhere, kind included.
        raise PluginError(f"{found[0].value}, registered as fault kind {kind!r}, needs node access of level "
                          f"{value.node_access_level!r}; expected one of {', '.join(NODE_ACCESS_LEVELS)}")
    return value


@functools.cache
def probe_types() -> dict[str, type]:
    """Every probe kind a data-only scenario may declare: kind -> class, from the
    ``kdrill.probes`` entry points. Raises TypeError for an entry whose class is not one (its
    ``kind`` not the entry's name, or no ``fields``/``required``)."""
    found = {}
    for ep in installed(group=PROBE_ENTRY_POINTS):
        cls = ep.load()
        if getattr(cls, "kind", None) != ep.name or not isinstance(getattr(cls, "fields", None), dict) \
                or not set(getattr(cls, "required", ())) <= set(cls.fields):
            raise TypeError(f"kdrill.probes entry {ep.name} = {ep.value}: not a probe kind (kind, fields, required)")
        found[ep.name] = cls
    return found


def measure_kinds() -> list[str]:
    """Every measure installed: the ``kdrill.measures`` entry points (kdrill's own and plug-ins')."""
    return sorted(ep.name for ep in installed(group=MEASURE_ENTRY_POINTS))
