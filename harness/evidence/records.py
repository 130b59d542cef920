"""The evidence a drill leaves behind: one JSON record per drill (and case),
its probe timelines, and one ``run.json`` per run.

Layout of a run directory::

    run.json                          write_run_metadata()
    <drill>[--<case>].json            write_record()
    <drill>[--<case>].timeline.json   write_timelines()

Times are epoch seconds, durations seconds. Files are written atomically.

A run id names a directory directly under the reports root, so every run id that comes in
(``--run-id``, ``kdrill report``/``verify``, the writer) goes through :func:`validate_run_id`
(harness/evidence/layout.py, importable here too);
a new run gets its directory from :func:`create_run_dir`, which refuses to reuse a run id.
Nothing is written into a sealed run (one with ``manifest.json``).
"""

from __future__ import annotations

import getpass
import math
import platform
import re
import secrets
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Mapping

from harness import __version__
from harness.core import proc
from harness.core.ledger import write_json_atomic
from harness.core.timeline import Sample, Timeline
from harness.engine.expectations import Expectations, worst_verdict
from harness.evidence.layout import MANIFEST_NAME, RunIdError, validate_run_id
from harness.spec.scenario import Scenario

_STEM_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class RunExistsError(RunIdError):
    """The run id already names a run directory with something in it."""


class SealedRunError(RuntimeError):
    """Something tried to write into a run that has been sealed."""


def record_stem(drill: str, case: str | None) -> str:
    """A record's file stem: ``<drill>`` or ``<drill>--<case>``."""
    return drill if case is None else f"{drill}--{case}"


def new_run_id() -> str:
    """``YYYYmmddTHHMMSSZ-<6 hex>`` in UTC, e.g. ``20250101T120000Z-a1b2c3``."""
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def create_run_dir(reports_root: Path, run_id: str) -> Path:
    """Creates and returns ``<reports_root>/<run_id>/`` for a new run.

    Refuses to reuse a run id: RunExistsError when that path exists and is anything but a
    directory with no evidence in it yet (``kdrill run`` creates it before its pytest child calls
    this again, and pytest's Allure plugin makes its empty ``allure-results`` first). Raises RunIdError for an invalid run id, OSError when the
    directory cannot be created.
    """
    validate_run_id(run_id)
    root = Path(reports_root)
    root.mkdir(parents=True, exist_ok=True)
    path = root / run_id
    try:
        path.mkdir()
    except FileExistsError:
        started = [p for p in path.iterdir() if not (p.name == "allure-results" and p.is_dir() and not any(p.iterdir()))]
        if path.is_symlink() or not path.is_dir() or started:
            raise RunExistsError(f"run {run_id} already exists in {root}; evidence is never overwritten: "
                                 "choose another run id") from None
    return path


@dataclass
class DrillRecord:
    """Everything one drill (one case) established, as written to ``<stem>.json``.

    Shapes: ``cluster`` = {"name", "provider", "kubernetes_version", "context",
    "nodes": [{"name", "roles": [...], "kubelet_version"}]}; ``fault`` =
    {"kind", "method", "params", "where": [...], "injected_at", "reverted_at",
    "revert_verified"}; ``phases`` = [{"name", "started_at", "ended_at"}];
    ``expectations`` = [Outcome.to_dict()]; ``probes`` = {probe: summarize()};
    ``source`` = [{"title", "url", "section"}]; ``evidence_files`` = {"timeline": file name}.
    """

    run_id: str
    drill: str
    case: str | None = None
    title: str = ""
    claim: str = ""
    verdict: str = "error"  # until the drill proves otherwise
    started_at: float | None = None
    finished_at: float | None = None
    duration_seconds: float | None = None
    cluster: dict[str, Any] = field(default_factory=dict)
    fault: dict[str, Any] = field(default_factory=dict)
    phases: list[dict[str, Any]] = field(default_factory=list)
    expectations: list[dict[str, Any]] = field(default_factory=list)
    probes: dict[str, dict[str, Any]] = field(default_factory=dict)
    observations: dict[str, Any] = field(default_factory=dict)
    # every measurement of an expectation that a later one replaced, in order
    replaced_measurements: list[dict[str, Any]] = field(default_factory=list)
    # harness/core/waiting.py WaitLog: every wait of the drill, how it ended and its last error
    waits: list[dict[str, Any]] = field(default_factory=list)
    waits_dropped: int = 0
    # harness/engine/vitals.py: {"windows", "signs": {sign: {...}}, "flagged": [sign, ...]}
    vital_signs: dict[str, Any] = field(default_factory=dict)
    # harness/plugin/detection.py: {"verdict", "source", "expected", "alerts", "also_fired", ...}; {} when not read
    detection: dict[str, Any] = field(default_factory=dict)
    source: list[dict[str, Any]] = field(default_factory=list)
    scenario: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    evidence_files: dict[str, str] = field(default_factory=dict)
    kdrill_version: str = __version__

    @classmethod
    def for_scenario(cls, run_id: str, scenario: Scenario, case: str | None = None,
                     started_at: float | None = None) -> DrillRecord:
        """A record pre-filled from the scenario (title, claim, sources, fault
        kind/method/params for ``case``). Raises KeyError for an unknown case."""
        return cls(
            run_id=run_id, drill=scenario.name, case=case, title=scenario.title, claim=scenario.claim,
            started_at=time.time() if started_at is None else started_at,
            fault={"kind": scenario.fault_kind, "method": scenario.fault_method,
                   "params": scenario.params_for(case), "where": [], "injected_at": None,
                   "reverted_at": None, "revert_verified": False},
            source=[s.to_dict() for s in scenario.sources], scenario=scenario.to_dict())

    @property
    def stem(self) -> str:
        """``<drill>`` or ``<drill>--<case>``. Raises ValueError if either is unsafe as a file name."""
        for part in (self.drill, self.case):
            if part is not None and not _STEM_PART.match(part):
                raise ValueError(f"unsafe drill/case name for a file name: {part!r}")
        return record_stem(self.drill, self.case)

    def add_phase(self, name: str, started_at: float, ended_at: float | None = None) -> None:
        self.phases.append({"name": name, "started_at": started_at, "ended_at": ended_at})

    def apply_expectations(self, expectations: Expectations) -> None:
        """Store the outcomes and set the verdict from them; any entry in
        ``errors`` makes the verdict "error"."""
        self.expectations = [o.to_dict() for o in expectations.outcomes()]
        # A measurement that was replaced by a later one leaves its trace here.
        latest = {id(o) for o in expectations.outcomes()}
        self.replaced_measurements = [o.to_dict() for o in expectations.history if id(o) not in latest]
        detected = self.detection.get("verdict")  # "passed", "failed", "error", or a verdict-free "not checked"
        self.verdict = worst_verdict([expectations.verdict()] + (["error"] if self.errors else [])
                                     + ([detected] if detected in ("failed", "error") else []))

    def finish(self, finished_at: float | None = None) -> None:
        """Set ``finished_at`` (default now) and ``duration_seconds``."""
        self.finished_at = time.time() if finished_at is None else finished_at
        if self.started_at is not None:
            self.duration_seconds = self.finished_at - self.started_at

    def to_dict(self) -> dict[str, Any]:
        """All fields, JSON-safe (Paths and tuples converted, NaN/inf as strings)."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [_jsonable(v) for v in items]
    if hasattr(value, "to_dict"):
        return _jsonable(value.to_dict())
    return str(value)  # Paths, datetimes, enums: readable beats a crash while writing evidence


class EvidenceWriter:
    """Writes evidence files into ``run_dir`` (created on first write), whose name is the run id.

    Raises RunIdError when the directory's name is not a valid run id; every write raises
    SealedRunError once the run is sealed.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        validate_run_id(self.run_dir.name)

    @classmethod
    def for_new_run(cls, reports_root: Path, run_id: str) -> EvidenceWriter:
        """A writer for a new run's directory, made by :func:`create_run_dir` (same errors)."""
        return cls(create_run_dir(reports_root, run_id))

    def _target(self, name: str) -> Path:
        if (self.run_dir / MANIFEST_NAME).exists():
            raise SealedRunError(f"run {self.run_dir.name} is sealed; not writing {name} into it")
        return self.run_dir / name

    def write_record(self, record: DrillRecord) -> Path:
        """Write ``<run_dir>/<stem>.json`` (pretty, sorted keys). Returns its path.

        Raises RunIdError when ``record.run_id`` is not this directory's run id.
        """
        if record.run_id != self.run_dir.name:
            raise RunIdError(f"record of run {record.run_id!r} does not belong in run {self.run_dir.name}")
        return write_json_atomic(self._target(f"{record.stem}.json"), record.to_dict())

    def write_timelines(self, record_stem: str,
                        timelines: Mapping[str, Timeline | Iterable[Sample]]) -> Path:
        """Write ``<run_dir>/<record_stem>.timeline.json`` = {probe name: [sample dicts]}.

        Put the returned path's ``.name`` in ``record.evidence_files["timeline"]``.
        """
        data = {name: tl.to_list() if isinstance(tl, Timeline) else [s.to_dict() for s in tl]
                for name, tl in timelines.items()}
        return write_json_atomic(self._target(f"{record_stem}.timeline.json"), _jsonable(data))

    def write_run_metadata(self, meta: dict[str, Any]) -> Path:
        """Write ``<run_dir>/run.json``. Raises RunIdError when ``meta["run_id"]`` is set and is
        not this directory's run id."""
        if meta.get("run_id") is not None and meta["run_id"] != self.run_dir.name:
            raise RunIdError(f"metadata of run {meta['run_id']!r} does not belong in run {self.run_dir.name}")
        return write_json_atomic(self._target("run.json"), _jsonable(meta))


def run_metadata(repo_root: Path | None, run_id: str | None = None) -> dict[str, Any]:
    """Facts about this run, gathered locally (no network):
    ``run_id, started_at, user, host, git_commit, git_dirty, kdrill_version,
    python, command``. ``git_commit``/``git_dirty`` are None outside a git
    checkout, without git, or when ``repo_root`` is None (an installed kdrill has no checkout:
    harness.core.resources.checkout()); ``user`` is None when it cannot be determined. Raises
    RunIdError for an invalid ``run_id``."""
    if run_id is not None:
        validate_run_id(run_id)
    try:
        user: str | None = getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name in some containers
        user = None
    commit = _git(repo_root, "rev-parse", "HEAD")
    status = _git(repo_root, "status", "--porcelain") if commit is not None else None
    return {
        "run_id": run_id,
        "started_at": time.time(),
        "user": user,
        "host": socket.gethostname(),
        "git_commit": commit,
        "git_dirty": None if status is None else bool(status),
        "kdrill_version": __version__,
        "python": platform.python_version(),
        "dependencies": dependency_versions(),
        "clock": {"source": "the host's clock (time.time(), epoch seconds); node offsets in cluster.clock_offsets"},
        "command": shlex.join(sys.argv),
    }


def dependency_versions() -> dict[str, str | None]:
    """name -> installed version of each package kdrill depends on (pyproject's dependencies),
    None when it is not installed."""
    try:
        requirements = metadata.requires("kdrill") or []
    except metadata.PackageNotFoundError:
        requirements = []
    names = sorted({re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0] for r in requirements if "extra ==" not in r})
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _git(repo_root: Path | None, *args: str) -> str | None:
    if repo_root is None:
        return None
    try:
        done = proc.run(["git", "-C", str(repo_root), *args], timeout_seconds=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
