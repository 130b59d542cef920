"""Runs side by side: ``kdrill compare`` (two runs' expectations) and ``kdrill history`` (every run
under --reports, and reports/index.html)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path

from harness.cli.output import json_safe, print_as
from harness.cli.refusals import (
    Refused,
    check_reports_hold_runs,
    check_reports_not_a_run,
    named_run_dir,
    refusing,
    run_around,
)
from harness.cli.verify import trusted_fingerprints
from harness.evidence.compare import CompareError, compare_runs, format_table, printable
from harness.evidence.history import chain_status, format_runs, list_runs, write_index
from harness.evidence.signing_keys import configured_trust


def print_comparison(base_dir: Path, run_dir: Path, any_platform: bool, as_json: bool = False,
                     trusted: list[str] | None = None) -> int:
    """Print every expectation of the two runs side by side; 1 if any regressed, 0 if none, 2
    (with one line on stderr) when they cannot be compared. ``trusted``: the fingerprints both
    runs must be signed by (None: $KDRILL_TRUSTED_FINGERPRINTS, if set)."""
    try:
        if trusted is None:
            trusted = configured_trust()
        comparison = compare_runs(base_dir, run_dir, allow_mismatch=any_platform, trusted_fingerprints=trusted)
    except ValueError as exc:  # a bad $KDRILL_TRUSTED_FINGERPRINTS
        print(f"kdrill compare: {exc}", file=sys.stderr)
        return 2
    except CompareError as exc:
        print(f"kdrill compare: {printable(exc)}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(json_safe(comparison.to_dict()), indent=2, allow_nan=False))
    else:
        print(f"kdrill compare {comparison.base} -> {comparison.run}: {len(comparison.rows)} expectations, "
              f"{len(comparison.regressions)} regression(s)")
        print(format_table(comparison))
        for note in comparison.notes:
            print(f"note: {printable(note)}")
    return 1 if comparison.regressions else 0


def write_history_index(reports: Path, chain: str | None = None, trusted: list[str] | None = None) -> Path | None:
    """Rewrite ``<reports>/index.html`` (every run, its verdicts and seal, trends); never raises.
    ``trusted``: the fingerprints every run must be signed by (None: $KDRILL_TRUSTED_FINGERPRINTS,
    if set). Writes nothing into a directory that is itself a run (its seal would break)."""
    if run_around(reports) is not None:
        logging.getLogger("kdrill").warning("not writing %s/index.html: it is a run directory or inside one", reports)
        return None
    try:
        return write_index(reports, chain, configured_trust() if trusted is None else trusted)
    except Exception as exc:  # the index is a view: a failure to draw it must not fail the run
        logging.getLogger("kdrill").warning("could not write %s/index.html: %s", reports, exc)
        return None


def cmd_compare(args: argparse.Namespace) -> int:
    """Compare two sealed runs; exit 1 on a regression, 0 otherwise."""
    try:
        base, run = named_run_dir(args.reports, args.base), named_run_dir(args.reports, args.run)
        trusted = trusted_fingerprints(args)
    except SystemExit as exc:  # a bad argument is "cannot compare" (2), not a regression (1)
        print(exc.code, file=sys.stderr)
        return 2
    return print_comparison(base, run, args.any_platform, args.json, trusted)


def cmd_history(args: argparse.Namespace) -> int:
    """List every run under --reports with its verdicts, platform and seal; write index.html.
    Exit 0 when every run and the chain between them verify (signed by a trusted key, when one is
    given or configured), 1 otherwise (listed either way), 2 when --reports is not a reports
    directory or a trusted key is bad (nothing written)."""
    with refusing():
        trusted = trusted_fingerprints(args)
    reports = Path(args.reports)
    if not reports.exists():
        raise Refused(f"kdrill history: no reports directory {reports} (no run yet, or set --reports / "
                      "KDRILL_REPORTS)")
    if not reports.is_dir():
        raise Refused(f"kdrill history: --reports {reports}: expected a directory, got a file")
    check_reports_not_a_run(reports, "history")
    check_reports_hold_runs(reports, "history")
    runs = list_runs(reports, trusted)
    intact, chain = chain_status(reports, trusted)
    if args.output:  # data only: the index is written by the table form
        print_as(args.output, {"runs": [dataclasses.asdict(r) for r in runs], "intact": intact, "chain": chain})
        return 0 if intact else 1
    print(format_runs(runs))
    print(f"seal: each run's own; {chain}")
    index = write_history_index(reports, chain, trusted)
    if index is not None:
        print(f"index: {index}")
    return 0 if intact else 1
