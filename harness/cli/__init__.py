"""The ``kdrill`` command: :func:`main`, and ``kdrill run`` (:func:`cmd_run`), which runs its steps
(harness/cli/run.py) in order. Its command line and help are harness/cli/arguments.py; each other
command is in the module of its concern:

  run.py, pytest_process.py   kdrill run's refusals, plan and pytest command; its pytest process
  scenarios.py                validate, new, list, schema
  history.py, verify.py       compare and history; verify and report
  cluster.py, recover.py      doctor, images and cluster; recover
  refusals.py, output.py      bad input refused (exit 2) and run directories; -o JSON or YAML
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from pathlib import Path

from harness.cli import arguments
from harness.cli.cluster import cmd_cluster, cmd_doctor, cmd_images, prepare_kind
from harness.cli.history import cmd_compare, cmd_history, print_comparison, write_history_index
from harness.cli.matrix import cmd_matrix
from harness.cli.pytest_process import run_until_reverted
from harness.cli.recover import cmd_recover
from harness.cli.refusals import Refused, refusing
from harness.cli.run import (
    check_consent,
    every_record_passed,
    new_run_dir,
    planned_run,
    print_plan,
    pytest_command,
    summary,
)
from harness.cli.scenarios import cmd_list, cmd_new, cmd_schema, cmd_validate
from harness.cli.verify import cmd_report, cmd_verify, trusted_fingerprints
from harness.core import resources
from harness.core.text import escaped
from harness.evidence.sealing import report_and_manifest
from harness.kube.providers import ProviderError
from harness.spec.scenario import ScenarioError


def cmd_run(args: argparse.Namespace) -> int:
    """``kdrill run``: refuse bad input before anything is touched (the same checks with --plan,
    which then prints the plan), make the kind cluster's prerequisites or check consent for an
    existing cluster, run the drills' pytest into a new run directory, seal it, and judge it.
    Exit 0 only when pytest passed, every record says passed and no regression from --baseline."""
    planned = planned_run(args)
    if args.plan:
        return print_plan(args, planned)
    with refusing():  # a bad $KDRILL_TRUSTED_FINGERPRINTS would only show after the drills ran
        trusted_fingerprints(args)
    if args.kubeconfig or args.context:
        check_consent(args)
    else:
        prepare_kind()
    run_dir = new_run_dir(args.reports, planned.run_id)
    print(f"kdrill run {planned.run_id}: {len(planned.scenarios)} drill(s) on {planned.target}")
    status = run_until_reverted(pytest_command(args, planned, run_dir))
    print(summary(run_dir))
    report_and_manifest(run_dir)
    print(f"evidence: {run_dir}  (report: {run_dir / 'report.html'}; check with `kdrill verify {planned.run_id}`)")
    all_passed = every_record_passed(run_dir)
    regressed = False
    if planned.baseline is not None:
        regressed = print_comparison(planned.baseline, run_dir, args.any_platform) != 0  # 2: not comparable
    write_history_index(Path(args.reports))
    return 0 if status == 0 and all_passed and not regressed else 1


def parser() -> argparse.ArgumentParser:
    """kdrill's argument parser, each command bound to the function that runs it."""
    return arguments.parser({"run": cmd_run, "new": cmd_new, "validate": cmd_validate, "compare": cmd_compare,
                             "history": cmd_history, "list": cmd_list, "recover": cmd_recover, "doctor": cmd_doctor,
                             "images": cmd_images, "cluster": cmd_cluster, "report": cmd_report,
                             "verify": cmd_verify, "schema": cmd_schema, "matrix": cmd_matrix})


REPORTS_COMMANDS = ("run", "compare", "history", "report", "verify", "matrix")  # the commands that read --reports


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after a lone "--" goes to pytest untouched (kdrill run ... -- -x).
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    args = parser().parse_args(argv)
    args.pytest_args = extra
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S")
    try:
        if args.reports == "" and args.command in REPORTS_COMMANDS:
            # Path("") is the current directory: `history` would write ./index.html there.
            raise Refused(f"kdrill {args.command}: --reports / KDRILL_REPORTS: expected a reports directory, got "
                          "an empty value (leave both unset for the default)")
        if args.reports is None:
            args.reports = str(resources.default_reports_dir())
        if os.environ.get("KDRILL_STATE_DIR") is not None and not os.environ["KDRILL_STATE_DIR"].strip():
            # An empty value would mean ~/.local/state/kdrill: another ledger than the one meant.
            raise Refused("kdrill: KDRILL_STATE_DIR: expected kdrill's state directory, got an empty value "
                          "(unset it for ~/.local/state/kdrill)")
        return args.func(args)
    except Refused as exc:
        print(escaped(str(exc.code), keep_newlines=True), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kdrill: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`kdrill compare ... | head`): no traceback, and none at exit either
        # when Python flushes stdout into the closed pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (ScenarioError, ProviderError, resources.ResourcesMissing) as exc:
        print(escaped(f"kdrill: {exc}", keep_newlines=True), file=sys.stderr)
        return 2
    except Exception as exc:
        if isinstance(exc, OSError) and exc.filename:  # e.g. a scenario path that is a directory
            print(escaped(f"kdrill: {exc.filename}: {exc.strerror or exc}"), file=sys.stderr)
            return 2
        return internal_error(exc, args.verbose)


INTERNAL_ERROR = 3  # distinct from 1 (a drill failed, a regression) and 2 (input refused)


def internal_error(exc: Exception, verbose: bool) -> int:
    """One line for an error of kdrill's own (the traceback only with -v); returns the exit status."""
    if verbose:
        traceback.print_exception(exc, file=sys.stderr)
    print(escaped(f"kdrill: internal error: {type(exc).__name__}: {exc}")
          + ("" if verbose else " (-v for the traceback)"), file=sys.stderr)
    return INTERNAL_ERROR
