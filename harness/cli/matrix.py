"""``kdrill matrix RUN``: the run's failure matrix (harness/evidence/failure_matrix.py), read from
its records, with whether the run is intact under its seal."""

from __future__ import annotations

import argparse
import sys

from harness.cli.output import print_as
from harness.cli.refusals import Refused, named_run_dir, refusing
from harness.evidence import failure_matrix
from harness.evidence.manifest import is_sealed, verify_run
from harness.evidence.reading import ReportError, load_run
from harness.evidence.verification import escaped


def cmd_matrix(args: argparse.Namespace) -> int:
    """Print the matrix (a table, or ``-o csv|json|yaml``). Exit 0; 1 when the run is sealed and
    no longer intact, or a record slot holds no readable record (the matrix is printed all the
    same, said to be unverified; each unread record named on stderr); 2 for a RUN that is not a
    run."""
    with refusing():
        run_dir = named_run_dir(args.reports, args.run)
    try:
        evidence = load_run(run_dir)
    except ReportError as exc:
        raise Refused(f"kdrill matrix: {exc}") from None
    rows = failure_matrix.matrix_rows([record for _, record in evidence.records])
    for path, reason in evidence.unreadable:  # a row missing from the matrix is said, never dropped silently
        print(escaped(f"kdrill matrix: {path.name}: record not read ({reason}); its drill is not in the matrix"),
              file=sys.stderr)
    intact = verify_run(run_dir).ok if is_sealed(run_dir) else None
    if args.output == "csv":
        # Escaped on the terminal; the run's own failure_matrix.csv keeps the records' text as it is.
        print("\n".join(escaped(line) for line in failure_matrix.as_csv(rows).splitlines()))
    elif args.output:
        print_as(args.output, {"columns": list(failure_matrix.COLUMNS), "rows": rows})
    else:
        for row in rows:
            name = row["drill"] + (f"[{row['case']}]" if row["case"] else "")
            recovery = "-" if row["recovery_seconds"] is None else f"{row['recovery_seconds']:.0f} s"
            # Escaped: a record's text (an alert's name) must not rewrite what the terminal shows.
            print("\n".join(escaped(line) for line in (
                f"{name}  {row['verdict']}", f"  impact:     {row['impact']}",
                f"  detection:  {row['detection_verdict'].upper()}: {row['detection']}",
                f"  mitigation: {row['mitigation']}",
                f"  recovery:   {recovery} (expected alerts resolved after the revert)")))
        print({None: f"run {run_dir.name}: not sealed", True: f"run {run_dir.name}: sealed, intact",
               False: f"run {run_dir.name}: sealed, NOT INTACT (kdrill verify says why)"}[intact])
    return 1 if intact is False or evidence.unreadable else 0
