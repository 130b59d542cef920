"""The installed plug-in entry points (``kdrill.faults``, ``kdrill.probes``, ``kdrill.measures``),
read once per process: ``importlib.metadata.entry_points`` reads every installed distribution's
metadata on each call (about 20 ms here), and loading the catalogue asks for them dozens of times."""

from __future__ import annotations

from importlib import metadata

_read: dict[tuple[object, str], tuple[metadata.EntryPoint, ...]] = {}


def installed(group: str) -> tuple[metadata.EntryPoint, ...]:
    """The entry points of ``group``. Cached per reading function, so a test that replaces
    ``importlib.metadata.entry_points`` is answered by its replacement."""
    key = (metadata.entry_points, group)
    if key not in _read:
        _read[key] = tuple(metadata.entry_points(group=group))
    return _read[key]
