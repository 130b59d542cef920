"""``kdrill matrix RUN``: the run's failure matrix (harness/evidence/failure_matrix.py), read from
its records, with whether the run is intact under its seal."""

from __future__ import annotations

import argparse

from harness.cli.output import print_as
from harness.cli.refusals import named_run_dir, refusing
from harness.evidence import failure_matrix
from harness.evidence.manifest import is_sealed, verify_run
from harness.evidence.verification import escaped


def cmd_matrix(args: argparse.Namespace) -> int:
    """Print the matrix (a table, or ``-o csv|json|yaml``). Exit 0; 1 when the run is sealed and
    no longer intact (the matrix is printed all the same, said to be unverified); 2 for a RUN
    that is not a run."""
    with refusing():
        run_dir = named_run_dir(args.reports, args.run)
    rows = failure_matrix.run_rows(run_dir)
    intact = verify_run(run_dir).ok if is_sealed(run_dir) else None
    if args.output == "csv":
        print(failure_matrix.as_csv(rows), end="")
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
    return 1 if intact is False else 0
