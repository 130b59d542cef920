"""Bad input refused before anything is touched, and the run and reports directories a command
names (a run directory holds ``manifest.json`` or ``run.json``)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from harness.evidence.records import RunIdError, validate_run_id


class Refused(SystemExit):
    """Bad input to any command (``run``, ``compare``, ``verify``, ``report``, ``history``, ``new``),
    refused before anything is touched: main() prints the message and exits 2, as for a scenario
    refused on load or an argparse error, so a caller tells "refused" (2) from "a drill failed" or
    "the evidence is not intact" (1)."""


@contextlib.contextmanager
def refusing():
    """A shared helper's one-line SystemExit (named_run_dir, platform_profile, ...) as a Refused."""
    try:
        yield
    except Refused:
        raise
    except SystemExit as exc:
        raise Refused(exc.code) from None


RUN_MARKERS = ("manifest.json", "run.json")


def is_run(path: Path) -> bool:
    """Whether ``path`` is a run directory (holds ``manifest.json`` or ``run.json``)."""
    return any((Path(path) / name).is_file() for name in RUN_MARKERS)


def run_around(path: Path) -> Path | None:
    """The run directory ``path`` is, or is inside (e.g. its ``allure-results``), if any."""
    path = Path(path).absolute()
    return next((p for p in (path, *path.parents) if is_run(p)), None)


def check_reports_not_a_run(reports: str | Path, command: str) -> None:
    """Refuse a reports directory that is a run or inside one: the index (or a run directory)
    written there would break that run's seal."""
    run = run_around(Path(reports))
    if run is not None:
        inside = "" if run == Path(reports).absolute() else f" inside the run {run}"
        raise Refused(f"kdrill {command}: --reports {reports}: expected a reports directory (holding runs), "
                      f"got a run directory{inside} (it holds {' or '.join(RUN_MARKERS)}); writing into it would "
                      "break its seal")


def check_reports_hold_runs(reports: str | Path, command: str) -> None:
    """Refuse a directory that holds no run directory (one with ``run.json`` or ``manifest.json``):
    a mistyped or wrong --reports would otherwise read as "0 runs, intact", and ``history`` would
    write its index.html into it."""
    reports = Path(reports)
    if not any(p.is_dir() and not p.is_symlink() and is_run(p) for p in reports.iterdir()):
        raise Refused(f"kdrill {command}: {reports}: expected a reports directory holding runs (directories "
                      f"with {' or '.join(RUN_MARKERS)}), got none; nothing was written or verified")


def named_run_dir(reports: str, run: str) -> Path:
    """The existing run directory RUN names (``kdrill report``/``verify``): a run id under
    ``reports``, or a path containing ``/`` to a run directory. Its name must be a valid run id
    and it must hold ``manifest.json`` or ``run.json``, so an arbitrary directory is never taken
    for a run. Raises SystemExit with one line otherwise."""
    try:
        if "/" in run or os.sep in run:
            path = Path(run)
            validate_run_id(path.resolve().name)
        else:
            path = Path(reports) / validate_run_id(run)
            if path.is_symlink():  # as history and verify --history skip it: it is not this directory's
                raise SystemExit(f"kdrill: {path} is a symbolic link to {os.readlink(path)}: not a run of "
                                 f"{reports}; name the run where it lives")
    except RunIdError as exc:
        raise SystemExit(f"kdrill: {exc}") from None
    if not path.is_dir():
        if path.parent.exists() and not path.parent.is_dir():
            raise SystemExit(f"kdrill: {path.parent} is not a directory (--reports names the reports directory)")
        raise SystemExit(f"kdrill: no run directory {path}")
    if not is_run(path):
        raise SystemExit(f"kdrill: {path} is not a kdrill run (no manifest.json or run.json)")
    return path
