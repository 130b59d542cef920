"""The ``kdrill`` command.

  kdrill run [SCENARIO...] [-- PYTEST-ARGS]   run drills (all by default) on a kind cluster,
                               write reports/<run-id>/
  kdrill run --plan [SCENARIO...]   what a run would do and how long it would take; touches nothing
  kdrill validate FILE...      check scenario files as kdrill run would (no cluster)
  kdrill new NAME              write a commented data-only scenario skeleton NAME.yaml
  kdrill list [--claims] [--scenarios-dir DIR]   the scenarios, or the documented claims and which
                               drill checks each
  kdrill compare BASE RUN      every expectation of two runs side by side (exit 1 on a regression)
  kdrill history               every run with verdicts, platform and seal; writes reports/index.html
  kdrill recover               revert every fault the ledger still holds (after a crash)
  kdrill doctor                check Docker, kind, images, memory, inotify limits; say how to fix
  kdrill images build|status   build the offline kind images (cached by content); `build gatekeeper`: that one only
  kdrill cluster create|delete|status   a kind cluster from clusters/ (default: ha)
  kdrill report RUN [--stdout] check that a verified run's sealed report.html re-renders from its
                               evidence (never writes into a sealed run)
  kdrill verify RUN            check reports/RUN's signature, run id and every file (exit 1 on any problem)
  kdrill verify --history [DIR]   verify every run in DIR (default: reports/) and the chain linking them

Exit status: 0 success; 1 a drill failed, a regression, or (verify, history, report) evidence that
is not intact; 2 bad input refused before anything is touched (a run id or directory that is not a
run, a bad --fingerprint or --public-key, an empty or wrong --reports, a bad `new` name or --dir);
3 an internal error of kdrill's (one line; the traceback with -v); 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from harness import __version__
from harness.core import resources


class Refused(SystemExit):
    """Bad input to any command (``run``, ``compare``, ``verify``, ``report``, ``history``, ``new``),
    refused before anything is touched: main() prints the message and exits 2, as for a scenario
    refused on load or an argparse error, so a caller tells "refused" (2) from "a drill failed" or
    "the evidence is not intact" (1)."""


@contextlib.contextmanager
def refusing():
    """A shared helper's one-line SystemExit (_run_dir, _platform_profile, ...) as a Refused."""
    try:
        yield
    except Refused:
        raise
    except SystemExit as exc:
        raise Refused(exc.code) from None


RUN_MARKERS = ("manifest.json", "run.json")


def _is_run(path: Path) -> bool:
    """Whether ``path`` is a run directory (holds ``manifest.json`` or ``run.json``)."""
    return any((Path(path) / name).is_file() for name in RUN_MARKERS)


def _run_around(path: Path) -> Path | None:
    """The run directory ``path`` is, or is inside (e.g. its ``allure-results``), if any."""
    path = Path(path).absolute()
    return next((p for p in (path, *path.parents) if _is_run(p)), None)


def _check_reports_not_a_run(reports: str | Path, command: str) -> None:
    """Refuse a reports directory that is a run or inside one: the index (or a run directory)
    written there would break that run's seal."""
    run = _run_around(Path(reports))
    if run is not None:
        inside = "" if run == Path(reports).absolute() else f" inside the run {run}"
        raise Refused(f"kdrill {command}: --reports {reports}: expected a reports directory (holding runs), "
                      f"got a run directory{inside} (it holds {' or '.join(RUN_MARKERS)}); writing into it would "
                      "break its seal")


def _run_dir(reports: str, run: str) -> Path:
    """The existing run directory RUN names (``kdrill report``/``verify``): a run id under
    ``reports``, or a path containing ``/`` to a run directory. Its name must be a valid run id
    and it must hold ``manifest.json`` or ``run.json``, so an arbitrary directory is never taken
    for a run. Raises SystemExit with one line otherwise."""
    from harness.evidence.records import RunIdError, validate_run_id

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
    if not _is_run(path):
        raise SystemExit(f"kdrill: {path} is not a kdrill run (no manifest.json or run.json)")
    return path


def _cluster_count(args: argparse.Namespace) -> int:
    """How many clusters ``kdrill run`` drills in parallel: ``--clusters``, or one per repeated
    ``--context``. Raises Refused for a count out of range or one that disagrees with the contexts."""
    from harness.core.workers import MAX_WORKERS

    contexts = len(args.context)
    count = args.clusters if args.clusters is not None else max(contexts, 1)
    if not 1 <= count <= MAX_WORKERS:
        raise Refused(f"kdrill: --clusters: expected 1 to {MAX_WORKERS}, got {count}")
    if (contexts > 1 or (count > 1 and (contexts or args.kubeconfig))) and count != contexts:
        raise Refused(f"kdrill: --clusters {count} with {contexts} --context: on existing clusters, one --context "
                      "per cluster")
    if len(set(args.context)) != contexts:
        raise Refused("kdrill: a --context given twice: each parallel worker drills a cluster of its own")
    return count


def _contexts_read(kubeconfig: str | None, contexts: list[str]) -> list[str]:
    """The contexts drilled (the current one when none is given), each read from ``kubeconfig``
    (default: $KUBECONFIG, else ~/.kube/config); nothing is sent to a cluster. Raises Refused for a
    file that is missing or not a kubeconfig, or a context it does not have: the plan would
    otherwise name a cluster the run cannot reach."""
    from harness.kube.providers import ProviderError
    from harness.kube.providers.existing import existing_cluster

    try:
        return [existing_cluster(kubeconfig, context).context for context in contexts or [None]]
    except ProviderError as exc:
        raise Refused(f"kdrill: {'--kubeconfig' if kubeconfig else 'kubeconfig'}: {exc}") from None


def cmd_run(args: argparse.Namespace) -> int:
    from harness.evidence.records import RunIdError, create_run_dir, new_run_id, validate_run_id
    from harness.evidence.manifest import SigningKeyError, load_signing_key
    from harness.spec.scenario import find_scenario, load_scenarios

    # Bad input is refused before anything is touched: the reports directory, the run id and the
    # signing key first.
    _check_reports_not_a_run(args.reports, "run")
    with refusing():
        baseline = _run_dir(args.reports, args.baseline) if args.baseline else None
    try:
        run_id = validate_run_id(args.run_id) if args.run_id is not None else new_run_id()
        if (Path(args.reports) / run_id).exists():
            raise RunIdError(f"run id {run_id!r} names an existing run in {args.reports}; choose another")
        if not args.plan:
            load_signing_key()
    except (RunIdError, SigningKeyError) as exc:
        raise Refused(f"kdrill: {exc}") from None
    from harness.kube.workloads import toolbox_problem

    # The options, or else the environment the drills would read: refused here, before anything runs.
    problem = toolbox_problem(args.toolbox_image if args.toolbox_image is not None else os.environ.get("KDRILL_TOOLBOX_IMAGE"),
                              args.toolbox_pull_policy if args.toolbox_pull_policy is not None
                              else os.environ.get("KDRILL_TOOLBOX_PULL_POLICY"))
    if problem:
        raise Refused(f"kdrill: {problem}")
    with refusing():
        profile = _platform_profile(args.platform)
    if args.cluster_name is not None:  # kind would refuse it only after the images and Docker
        from harness.kube.providers.kind import cluster_name_problem

        problem = cluster_name_problem(args.cluster_name)
        if problem:
            raise Refused(f"kdrill: --cluster-name: {problem}")
    if args.output and not args.plan:
        raise Refused("kdrill run: -o is for --plan; a run's evidence is in its run directory (kdrill verify -o)")
    if args.node_agent and not (args.kubeconfig or args.context):
        raise Refused("kdrill: --node-agent is for a cluster reached through its kubeconfig (--kubeconfig, "
                         "--context); on kind kdrill reaches the nodes itself")
    if args.node_agent and not args.allow_context and not args.plan:
        # The drills' session would refuse it too, but after this run's directory was made.
        raise Refused("kdrill: --node-agent runs privileged pods on every node of the cluster; consent with "
                         "--allow-context CONTEXT (the context drilled)")
    if profile is not None and (args.kubeconfig or args.context):
        raise Refused("kdrill: --platform builds a kind cluster; an existing cluster (--kubeconfig, --context) is "
                         "drilled as it is (its record, if any, is in the evidence)")
    clusters = _cluster_count(args)
    # The drills run in a pytest process that inherits these (harness/kube/workloads.py reads them).
    if args.toolbox_image:
        os.environ["KDRILL_TOOLBOX_IMAGE"] = args.toolbox_image
    if args.toolbox_pull_policy:
        os.environ["KDRILL_TOOLBOX_PULL_POLICY"] = args.toolbox_pull_policy

    # Absolute: the drills' pytest runs in kdrill's own directory (resources.data_root()), not here.
    args.reports = str(Path(args.reports).absolute())
    scenarios_dir = Path(args.scenarios_dir).absolute() if args.scenarios_dir else resources.scenarios_dir()
    as_files = [a for a in args.scenarios if a.endswith((".yaml", ".yml"))]
    if as_files:
        # The drill reads its scenario by name from one directory: that file's, so its edits count.
        directories = {Path(a).resolve().parent for a in as_files}
        if len(directories) > 1 or len(as_files) != len(args.scenarios):
            raise Refused("kdrill: give scenario names, or scenario files from one directory, not a mix")
        missing = [a for a in as_files if not Path(a).is_file()]
        if missing:
            raise Refused(f"kdrill: no scenario file {', '.join(missing)} (names: `kdrill list`)")
        scenarios_dir = directories.pop()
        # The drills' pytest loads that whole directory (harness/plugin.py, load_scenarios): so
        # here too, for a file it would refuse (another file of the same name, an invalid one) is
        # refused now, before the run directory and kind, and the plan agrees with the run.
        by_path = {s.path.resolve(): s for s in load_scenarios(scenarios_dir)}
        # (find_scenario: a file load_scenarios would not list, if any, is read alone as before)
        scenarios = [by_path.get(Path(a).resolve()) or find_scenario(a) for a in as_files]
    else:
        scenarios = [find_scenario(name, scenarios_dir) for name in args.scenarios] if args.scenarios \
            else load_scenarios(scenarios_dir)
    if not args.scenarios:
        # "Every drill" leaves out those that run only when named, and says so.
        for s in scenarios:
            if s.on_request:
                print(f"not planned: {s.name} runs only when named ({s.on_request})")
        scenarios = [s for s in scenarios if not s.on_request]
    if not scenarios:
        from harness.spec.scenario import ScenarioError

        raise ScenarioError(scenarios_dir, "(directory)", "at least one scenario file (*.yaml)", "none")
    for s in scenarios:
        check_references(s)
    # The same checks with --plan as without: the plan says what the run would do, or refuses.
    configs = sorted({s.cluster_config for s in scenarios})
    if len(configs) > 1 and not (args.kubeconfig or args.context):
        raise Refused(f"kdrill: the chosen scenarios need different cluster configs ({', '.join(configs)}); "
                      "run them separately")
    if profile is not None and not args.cluster_name:  # the kind config is the scenarios' one
        with refusing():
            _check_platform_names(profile, configs)
    target = (f"context {', '.join(_contexts_read(args.kubeconfig, args.context))}" if args.kubeconfig or args.context
              else _kind_target(configs[0], profile, args.cluster_name, clusters))
    if args.plan:
        from harness.cli.plan import EXISTING_NO_AGENT, EXISTING_NODE_AGENT, plan

        existing = None
        if args.kubeconfig or args.context:
            existing = EXISTING_NODE_AGENT if args.node_agent else EXISTING_NO_AGENT
        if args.output:
            from harness.cli.plan import plan_data

            print_as(args.output, plan_data(scenarios, Path(args.reports), target, existing))
            return 0
        print(plan(scenarios, Path(args.reports), target, clusters, existing)[0])
        if args.node_agent and not args.allow_context:
            print("note: the run itself is refused without --allow-context CONTEXT: --node-agent runs privileged "
                  "pods on every node")
        return 0
    if args.kubeconfig or args.context:
        # The drills' session checks consent too, but only after this run's directory is made.
        from harness.kube.providers import ProviderError
        from harness.kube.providers.existing import consented_cluster

        try:
            for context in args.context or [None]:
                consented_cluster(args.kubeconfig, context, args.allow_context)
        except ProviderError as exc:
            raise Refused(f"kdrill: refused: {exc}") from None
    else:
        prepare_kind()
    try:
        run_dir = create_run_dir(Path(args.reports), run_id)
    except RunIdError as exc:
        raise Refused(f"kdrill: {exc}") from None
    print(f"kdrill run {run_id}: {len(scenarios)} drill(s) on {target}")
    files = sorted({str(resources.drill_file(s.drill)) for s in scenarios})
    cmd = [sys.executable, "-m", "pytest", *files, "-p", "no:cacheprovider", "-o", "addopts=",
           "--rootdir", str(resources.data_root()), "-q", "-s", "--no-header", "-r", "fEs", "--tb=short",
           f"--junitxml={run_dir / 'junit.xml'}", f"--alluredir={run_dir / 'allure-results'}",
           f"--kdrill-reports={args.reports}", f"--kdrill-run-id={run_id}",
           f"--kdrill-scenarios-dir={scenarios_dir}"]
    for s in scenarios:
        cmd.append(f"--kdrill-scenario={s.name}")
    if args.kubeconfig or args.context:  # $KUBECONFIG and --context alone work as with kubectl
        if args.kubeconfig:
            cmd += [f"--kdrill-kubeconfig={args.kubeconfig}"]
        for context in args.context:
            cmd.append(f"--kdrill-context={context}")
        for ctx in args.allow_context:
            cmd.append(f"--kdrill-allow-context={ctx}")
        if args.node_agent:
            cmd.append("--kdrill-node-agent")
    else:
        cmd.append(f"--kdrill-cluster-config={configs[0]}")
        if args.cluster_name:
            cmd.append(f"--kdrill-cluster-name={args.cluster_name}")
        if profile is not None:
            cmd.append(f"--kdrill-platform={profile.root}")
        if args.keep_cluster:
            cmd.append("--kdrill-keep-cluster")
    if clusters > 1:  # pytest-xdist: one worker, one cluster each
        # worksteal: a worker that runs out of cases takes the other's waiting ones (the cases' times
        # differ tenfold, so an even split up front leaves one cluster idle).
        # No replacement for a crashed worker: it would make a new cluster beside the crashed one's.
        cmd += ["-p", "xdist", f"--numprocesses={clusters}", "--dist=worksteal", "--max-worker-restart=0"]
    if args.ticket:
        cmd.append(f"--kdrill-ticket={args.ticket}")
    if args.approved_by:
        cmd.append(f"--kdrill-approved-by={args.approved_by}")
    cmd += args.pytest_args
    status = run_until_reverted(cmd)
    print(summary(run_dir))
    report_and_manifest(run_dir)
    print(f"evidence: {run_dir}  (report: {run_dir / 'report.html'}; check with `kdrill verify {run_id}`)")
    # Exit 0 only when pytest passed and every record the run left says passed: a skipped,
    # refused or unrun drill that was asked for is not a success.
    from harness.evidence.report import checked_verdict, scan_records

    records, unreadable = scan_records(run_dir)
    all_passed = bool(records) and not unreadable and all(checked_verdict(r)[0] == "passed" for _, r in records)
    regressed = False
    if baseline is not None:
        regressed = print_comparison(baseline, run_dir, args.any_platform) != 0  # 2: not comparable
    write_history_index(Path(args.reports))
    return 0 if status == 0 and all_passed and not regressed else 1


def print_comparison(base_dir: Path, run_dir: Path, any_platform: bool, as_json: bool = False,
                     trusted: list[str] | None = None) -> int:
    """Print every expectation of the two runs side by side; 1 if any regressed, 0 if none, 2
    (with one line on stderr) when they cannot be compared."""
    from harness.evidence.compare import CompareError, compare_runs, format_table
    from harness.evidence.compare import _printable as printable

    try:
        comparison = compare_runs(base_dir, run_dir, allow_mismatch=any_platform, trusted_fingerprints=trusted or [])
    except CompareError as exc:
        print(f"kdrill compare: {printable(exc)}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(_json_safe(comparison.to_dict()), indent=2, allow_nan=False))
    else:
        print(f"kdrill compare {comparison.base} -> {comparison.run}: {len(comparison.rows)} expectations, "
              f"{len(comparison.regressions)} regression(s)")
        print(format_table(comparison))
        for note in comparison.notes:
            print(f"note: {printable(note)}")
    return 1 if comparison.regressions else 0


def _json_safe(value):
    """NaN and infinities (which a record may hold) as strings: JSON has neither."""
    if isinstance(value, float) and value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def write_history_index(reports: Path, chain: str | None = None) -> Path | None:
    """Rewrite ``<reports>/index.html`` (every run, its verdicts and seal, trends); never raises.
    Writes nothing into a directory that is itself a run (its seal would break)."""
    from harness.evidence.history import write_index

    if _run_around(reports) is not None:
        logging.getLogger("kdrill").warning("not writing %s/index.html: it is a run directory or inside one", reports)
        return None
    try:
        return write_index(reports, chain)
    except Exception as exc:  # the index is a view: a failure to draw it must not fail the run
        logging.getLogger("kdrill").warning("could not write %s/index.html: %s", reports, exc)
        return None


def cmd_compare(args: argparse.Namespace) -> int:
    """Compare two sealed runs; exit 1 on a regression, 0 otherwise."""
    try:
        base, run = _run_dir(args.reports, args.base), _run_dir(args.reports, args.run)
        trusted = _trusted_fingerprints(args)
    except SystemExit as exc:  # a bad argument is "cannot compare" (2), not a regression (1)
        print(exc.code, file=sys.stderr)
        return 2
    return print_comparison(base, run, args.any_platform, args.json, trusted)


def cmd_history(args: argparse.Namespace) -> int:
    """List every run under --reports with its verdicts, platform and seal; write index.html.
    Exit 0 when every run and the chain between them verify, 1 otherwise (listed either way), 2
    when --reports is not a reports directory (nothing written)."""
    from harness.evidence.history import chain_status, format_runs, list_runs

    reports = Path(args.reports)
    if not reports.exists():
        raise Refused(f"kdrill history: no reports directory {reports} (no run yet, or set --reports / "
                      "KDRILL_REPORTS)")
    if not reports.is_dir():
        raise Refused(f"kdrill history: --reports {reports}: expected a directory, got a file")
    _check_reports_not_a_run(reports, "history")
    runs = list_runs(reports)
    intact, chain = chain_status(reports)
    if args.output:  # data only: the index is written by the table form
        import dataclasses

        print_as(args.output, {"runs": [dataclasses.asdict(r) for r in runs], "intact": intact, "chain": chain})
        return 0 if intact else 1
    print(format_runs(runs))
    print(f"seal: each run's own; {chain}")
    index = write_history_index(reports, chain)
    if index is not None:
        print(f"index: {index}")
    return 0 if intact else 1


def check_references(scenario) -> None:
    """What a scenario names must exist: its drill file (among kdrill's own drills, wherever the
    scenario file is), cluster config and fault module. Raises ScenarioError naming the file and
    field."""
    from harness.faults import FaultError, check_params, fault_class
    from harness.spec.scenario import ScenarioError, check_data_fault

    drills = resources.drills_dir()
    drill_file = resources.drill_file(scenario.drill).resolve()
    if not drill_file.is_file() or drills.resolve() not in drill_file.parents:
        raise ScenarioError(scenario.path, "drill", f"an existing test file in {drills}", scenario.drill)
    if not (resources.clusters_dir() / f"{scenario.cluster_config}.yaml").is_file():
        known = ", ".join(sorted(p.stem for p in resources.clusters_dir().glob("*.yaml")))
        raise ScenarioError(scenario.path, "cluster.config", f"one of {known}", scenario.cluster_config)
    if scenario.runner is not None:  # data-only: the runner's test runs it, its fault builds from data
        check_data_fault(scenario)
        check_params(scenario)
        return
    # A drill runs for the scenarios its tests are marked with: a new name needs a test of its own.
    marked = set(re.findall(r"""mark\.scenario\(\s*["']([a-z0-9-]+)["']""", drill_file.read_text(encoding="utf-8")))
    if scenario.name not in marked:
        raise ScenarioError(scenario.path, "name", f"a scenario that a test in {scenario.drill} is marked with "
                            f"(@pytest.mark.scenario: {', '.join(sorted(marked)) or 'none'}); a copy with other "
                            "bounds keeps its name, a new name needs a test of its own", repr(scenario.name))
    try:
        fault_class(scenario.fault_kind)
    except FaultError as exc:
        raise ScenarioError(scenario.path, "fault.kind", f"a fault kind with a module in harness/faults ({exc})",
                            scenario.fault_kind) from None
    check_params(scenario)


def run_until_reverted(cmd: list[str]) -> int:
    """Run pytest and wait for it, however often Ctrl-C is pressed.

    Ctrl-C at the terminal reaches pytest too (same process group); it reverts the fault in its
    ``finally``. The parent must not kill it meanwhile (``subprocess.call`` would, 0.25 s after an
    interrupt), so it only says what is happening and keeps waiting. A SIGINT with no terminal
    behind it may have been sent to kdrill alone (``kill -INT PID``) or to the whole group
    (``timeout -s INT``, a CI runner): kdrill cannot tell which, and passing it on would make the
    second case two interrupts, so it says how to stop the drills instead. SIGTERM is passed on
    as SIGTERM. The one command not run through :func:`harness.core.proc.run`: no time limit, output
    to the terminal.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # Inherited (a background job of a non-interactive shell): Ctrl-C reaches neither kdrill nor pytest.
        print(f"kdrill: started with SIGINT ignored, so Ctrl-C cannot stop the drills; to stop them (each "
              f"fault reverted), send SIGTERM: kill -TERM {os.getpid()}", file=sys.stderr)
    proc = subprocess.Popen(cmd, cwd=resources.data_root())
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: proc.send_signal(signal.SIGTERM))
    try:
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:
                if terminal_interrupts_group():
                    print("kdrill: interrupted; waiting for the drill to revert its fault", file=sys.stderr)
                else:
                    print(f"kdrill: interrupted (SIGINT, no terminal); if it was sent to kdrill alone the drills "
                          f"go on to their normal end; to stop them now, send SIGTERM: kill -TERM {os.getpid()}",
                          file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous)


def terminal_interrupts_group() -> bool:
    """Whether a SIGINT is a Ctrl-C that reached pytest too: kdrill has a controlling terminal and its
    process group (pytest's too) is that terminal's foreground group, to which the terminal sends it.
    False with no terminal (CI, nohup, a pipe from cron), or when kdrill runs in the background."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False  # no controlling terminal
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def summary(run_dir: Path) -> str:
    """One line per drill record: verdict, drill, failed expectations."""
    from harness.evidence.report import checked_verdict, expectation_problem, scan_records

    lines = [f"\n{'verdict':8} {'drill':40} {'duration':>9}  failed expectations"]
    records, unreadable = scan_records(run_dir)
    for path, reason in unreadable:  # never dropped silently: it counts as an error
        lines.append(f"{'error':8} {path.name:40} {'':>9}  unreadable record: {reason}")
    for path, record in records:
        name = str(record["drill"]) + (f"[{record['case']}]" if record.get("case") else "")
        verdict, _ = checked_verdict(record)  # as the report judges it, not as the record says
        failed = [f"{e.get('name')}={e.get('measured')}" for e in record.get("expectations") or []
                  if not isinstance(e, dict) or expectation_problem(e) is not None]
        duration = record.get("duration_seconds")
        duration = f"{duration:.0f} s" if isinstance(duration, (int, float)) else "-"
        lines.append(f"{str(verdict):8} {name:40} {duration:>9}  {', '.join(failed) or '-'}")
    return "\n".join(lines)


def report_and_manifest(run_dir: Path) -> bool:
    """Seal a finished run: render report.html, then sign a manifest of everything in the run.

    The sealing point: ``kdrill run`` and the pytest plugin call this when a run ends. The report
    is rendered first, showing the seal it is about to get, so the manifest covers it; if it
    cannot be rendered the run is sealed all the same, with the error in the manifest. The
    manifest links the most recently sealed run in the same reports directory
    (harness.evidence.manifest). A run is sealed once: when it already is (inside ``kdrill run`` the
    plugin seals it first), the seal is verified and nothing is written, so an edit made since
    is never laundered into a new seal. Returns whether report.html exists.

    Raises SystemExit with one line (and the problems) when the directory's name is not a valid
    run id, the sealed run no longer verifies, the signing key cannot be loaded, or sealing
    fails."""
    from datetime import datetime, timezone

    from harness.evidence.records import RunIdError, validate_run_id
    from harness.evidence.manifest import (ManifestError, PublicKeyInfo, is_sealed, load_signing_key, previous_run,
                                  seal_run, verify_run)
    from harness.evidence.report import REPORT_NAME, build_report

    run_dir = Path(run_dir)
    try:
        validate_run_id(run_dir.name)
    except RunIdError as exc:
        raise SystemExit(f"kdrill: not sealing {run_dir}: {exc}") from None
    if is_sealed(run_dir):
        result = verify_run(run_dir)
        if not result.ok:
            raise SystemExit(f"kdrill: {run_dir} was sealed and no longer matches its seal; it is not sealed "
                             "again:\n" + "\n".join(f"  {p}" for p in result.problems))
        return (run_dir / REPORT_NAME).is_file()
    try:
        key = load_signing_key()
    except ManifestError as exc:
        raise SystemExit(f"kdrill: cannot seal {run_dir}: {exc}") from None
    signer = PublicKeyInfo.from_key(key)
    previous = previous_run(run_dir.parent, run_dir.name)
    now = datetime.now(tz=timezone.utc)  # one time for the page and the seal: re-rendering reproduces it
    seal = {"public_key": signer.pem, "fingerprint_sha256": signer.fingerprint,
            "previous": previous.to_dict() if previous else None}
    error = None
    try:
        # The measurements for Prometheus/Grafana, sealed with the records they come from.
        from harness.evidence import openmetrics

        openmetrics.write(run_dir)
    except Exception as exc:  # noqa: BLE001 - a view of the records; the records are the evidence
        print(f"kdrill: {run_dir.name}: OpenMetrics file not written: {type(exc).__name__}: {exc}", file=sys.stderr)
    try:
        build_report(run_dir, seal=seal, generated_at=now)
    except Exception as exc:  # noqa: BLE001 - the evidence is sealed whether or not its page renders
        error = f"{type(exc).__name__}: {exc}"
        print(f"kdrill: report not written: {error}", file=sys.stderr)
    try:
        seal_run(run_dir, key, previous=previous, sealed_at=now, report_error=error)
    except (ManifestError, OSError) as exc:
        raise SystemExit(f"kdrill: {run_dir} was NOT sealed: {exc}") from None
    return error is None


def cmd_validate(args: argparse.Namespace) -> int:
    """Check each scenario file as ``kdrill run`` would before touching anything; exit 2 if any
    is refused (each refusal names file, field, expected and got)."""
    from harness.spec.scenario import ScenarioError, load_scenario

    bad = 0
    for file in args.files:
        try:
            if not Path(file).is_file():
                given = Path(file)
                got = ("a directory" if given.is_dir() else "a broken symbolic link" if given.is_symlink()
                       and not given.exists() else "not a regular file" if given.exists() else "no such file")
                raise ScenarioError(given, "<file>", "a scenario file (validate takes files; `kdrill run` and "
                                    "`--plan` also take scenario names)", got)
            scenario = load_scenario(Path(file))
            check_references(scenario)
        except (ScenarioError, OSError) as exc:
            bad += 1
            print(f"refused: {exc}")
            continue
        # Counted per case, with the case's own, as --plan and the records count them.
        counts = (", ".join(f"case {c.name}: {len(scenario.expectations_for(c.name))}" for c in scenario.cases)
                  if scenario.cases else str(len(scenario.expectations)))
        print(f"ok: {file}: {scenario.name} (fault {scenario.fault_kind}, expectations {counts})")
    return 2 if bad else 0


def cmd_new(args: argparse.Namespace) -> int:
    """Write a commented data-only scenario skeleton; refuse (exit 2) a bad name, a --dir that is
    not a directory or an existing file."""
    from jinja2 import Environment, PackageLoader

    from harness.faults import data_usable, fault_class, fault_kinds
    from harness.engine.measures import measure_kinds
    from harness.probes import probe_types
    from harness.spec.scenario import MAX_NAME_LENGTH

    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", args.name) or len(args.name) > MAX_NAME_LENGTH:
        raise Refused(f"kdrill new: name {args.name!r}: expected lowercase letters and digits in words joined "
                      f"by single '-', at most {MAX_NAME_LENGTH} characters")
    directory = Path(args.dir)
    # The nearest part of --dir that exists must be a directory (the rest is created).
    existing = next((p for p in (directory, *directory.parents) if p.exists() or p.is_symlink()), None)
    if existing is not None and not existing.is_dir():
        got = "a broken symbolic link" if not existing.exists() else "a file"
        raise Refused(f"kdrill new: --dir {args.dir}: expected a directory, got {got}"
                      + ("" if existing == directory else f" ({existing})"))
    path = directory / f"{args.name}.yaml"
    if path.exists() or path.is_symlink():
        raise Refused(f"kdrill new: {path} exists; choose another name or --dir")
    kinds = [k for k in fault_kinds() if data_usable(fault_class(k))]
    fault_params = [f"{k}: " + ", ".join(f"{name}{'*' if param.required else ''}" for name, param in
                                         fault_class(k).params.items())
                    + (f"; marks: {', '.join(sorted(fault_class(k).marks_offered))}"
                       if fault_class(k).marks_offered else "")
                    + (f"; facts: {', '.join(f'{n} ({unit})' for n, (unit, _) in sorted(fault_class(k).facts_offered.items()))}"
                       if fault_class(k).facts_offered else "")
                    for k in kinds]
    text = Environment(loader=PackageLoader("harness", "templates"), keep_trailing_newline=True).get_template(
        "scenario.yaml.j2").render(name=args.name, path=path, kinds=", ".join(kinds), fault_params=fault_params,
                                   measures=", ".join(measure_kinds()),
                                   probe_kinds=", ".join(sorted(probe_types())))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("x", encoding="utf-8") as out:
        out.write(text)
    print(f"wrote {path}: fill in the TODOs, then `kdrill validate {path}` and "
          f"`kdrill run --plan --scenarios-dir {directory} {args.name}`")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """The scenarios (or their claims) in ``--scenarios-dir``, as ``kdrill run`` would find them."""
    directory = Path(args.scenarios_dir) if args.scenarios_dir else resources.scenarios_dir()
    if not directory.is_dir():
        raise Refused(f"kdrill list: --scenarios-dir {directory} is not a directory")
    if not any(directory.glob("*.yaml")) and not any(directory.glob("*.yml")):
        raise Refused(f"kdrill list: --scenarios-dir {directory}: expected scenario files (*.yaml), got none")
    if args.claims and args.output:
        raise Refused("kdrill list: --claims is a table for people; -o gives the scenarios, claims included")
    if args.claims:
        from harness.spec.claims import format_claims, list_claims

        print(format_claims(list_claims(directory)))
        return 0
    from harness.spec.scenario import load_scenarios

    if args.output:
        print_as(args.output, [{"path": str(s.path), **s.to_dict()} for s in load_scenarios(directory)])
        return 0
    for s in load_scenarios(directory):
        node = (" (needs node access)" if s.needs_node_access else "") + (" (runs only when named)" if s.on_request else "")
        print(f"{s.name:28} {s.title}{node}\n{'':28} fault {s.fault_kind}; cluster {s.cluster_config}; {s.drill}")
    return 0


OUTPUT_FORMATS = ("json", "yaml")


def print_as(output: str, data: object) -> None:
    """``data`` as JSON (indented, keys sorted) or YAML on stdout, for -o."""
    if output == "json":
        print(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        import yaml

        print(yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=True), end="")


def entry_cluster_problem(entry_cluster: dict) -> str | None:
    """What is wrong with a ledger entry's ``cluster`` (as :meth:`Cluster.describe` wrote it), or
    None. A field missing or of the wrong type must not resolve to another cluster: no kubeconfig
    would be $KUBECONFIG's current context, and a kind name that is no cluster reads as "gone",
    which drops the entry unreverted."""
    provider = entry_cluster.get("provider")
    required = {"kind": ("name",), "existing": ("kubeconfig", "context")}.get(provider)
    if required is None:
        return f"provider: expected 'kind' or 'existing', got {provider!r}"
    for key in required:
        value = entry_cluster.get(key)
        if not isinstance(value, str) or not value:
            return f"{key}: expected the {provider} cluster's {key} (text), got {value!r}"
    if provider == "existing" and entry_cluster.get("node_channel", "agent") != "agent":
        return f"node_channel: expected 'agent' or nothing, got {entry_cluster.get('node_channel')!r}"
    return None


def cluster_for_entry(entry_cluster: dict):
    from harness.kube.providers import ClusterGone, ProviderError
    from harness.kube.providers.existing import existing_cluster
    from harness.kube.providers.kind import KindProvider

    problem = entry_cluster_problem(entry_cluster)
    if problem:  # kept in the ledger (not ClusterGone): a person decides which cluster it was
        raise ProviderError(f"the entry's cluster is malformed ({problem}): fix the entry's cluster or revert by "
                            f"hand; recorded as {entry_cluster!r}"[:600])
    if entry_cluster.get("provider") == "kind":
        provider = KindProvider(name=entry_cluster["name"])
        if not provider.exists():
            raise ClusterGone(f"kind cluster {entry_cluster['name']} no longer exists")
        return provider.cluster(kubeconfig=entry_cluster.get("kubeconfig"))
    cluster = existing_cluster(entry_cluster.get("kubeconfig"), entry_cluster.get("context"))
    if entry_cluster.get("node_channel") == "agent":
        # What was done through the node agent is undone through it (its namespace is in the
        # ledger too, and recover deletes it after the faults that used it).
        from harness.faults import api_silence
        from harness.kube.providers.node_agent import NodeAgent, nodes_by_role
        from harness.kube.workloads import TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY

        # Right after a control-plane fault the API server can be up on its nodes and still not
        # answer through the cluster's endpoint (a load balancer marks its backends up only after
        # its own health checks: CI 2026-12-05): wait for it as the API-only reverts do.
        silence = api_silence(cluster)
        if silence:
            raise ProviderError(f"the API server of context {entry_cluster['context']} does not answer ({silence}); "
                                "what kdrill did through the node agent is undone through it: bring the cluster "
                                "back and run kdrill recover again")
        cluster.node_access = True
        cluster.node_agent = NodeAgent(cluster, TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY)
        cluster.nodes_by_role = nodes_by_role(cluster)
    return cluster


def cmd_recover(args: argparse.Namespace) -> int:
    from harness.faults import recover
    from harness.core.ledger import Ledger

    if args.ledger_dir and not Path(args.ledger_dir).is_dir():
        # A misspelt directory must not read as "nothing to revert".
        print(f"kdrill recover: no ledger directory {args.ledger_dir}", file=sys.stderr)
        return 2
    ledger = Ledger(Path(args.ledger_dir) if args.ledger_dir else None)
    entries = ledger.entries()
    if not entries:
        print(f"kdrill recover: the ledger ({ledger.directory}) holds no fault; nothing to revert")
        return 0
    print(f"kdrill recover: {len(entries)} fault(s) in {ledger.directory}")
    agents = []

    existing = {}

    def cluster_for(entry_cluster: dict):
        cluster = cluster_for_entry(entry_cluster)
        if cluster.node_agent is not None:
            agents.append(cluster)
        if cluster.provider == "existing":
            existing[cluster.context] = cluster
        return cluster

    results = recover(ledger, cluster_for, force=args.force)
    for r in results:
        print(f"  {'reverted' if r['reverted'] else 'NOT REVERTED'}  {r['kind']}  {r['id']}"
              + (f"  ({r['error']})" if r["error"] else ""))
    # A revert through the node agent whose session had already removed it made the agent anew:
    # no ledger entry holds that namespace, so it goes here (its pods end themselves after 4 hours
    # should this process be killed first).
    removed = True
    for cluster in agents:
        if cluster.node_agent.made_namespace:
            from harness.scaffolding.node_agent import NodeAgentPods

            try:
                NodeAgentPods(cluster).revert()
                NodeAgentPods(cluster).verify_reverted()
                print(f"  removed  the node agent kdrill recover started on context {cluster.context}")
            except Exception as exc:  # noqa: BLE001 - said, and the exit status says it
                removed = False
                print(f"  NOT REMOVED  the node agent kdrill recover started on context {cluster.context} ({exc})")
    # The session Lease of a kdrill killed on this machine goes too (a live session's stays).
    from harness.core.session_lock import ContextLease

    for cluster in existing.values():
        try:
            gone = ContextLease(cluster).remove_if_dead()
            if gone:
                print(f"  removed  {gone}, on context {cluster.context}")
        except Exception as exc:  # noqa: BLE001 - said; it expires by itself
            print(f"  note  the session Lease on context {cluster.context} was not checked ({exc}); "
                  "a dead session's expires by itself")
    return 0 if removed and all(r["reverted"] for r in results) else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    from harness.cli.doctor import checks

    problems = 0
    for check in checks():
        mark = "ok  " if check.ok else "FAIL" if check.required else "note"
        print(f"{mark} {check.name}: {check.detail}")
        if not check.ok:
            problems += check.required
            print(textwrap.indent(f"fix: {check.fix}", "       "))
    return 1 if problems else 0


def require_docker() -> None:
    """Docker must answer before anything that uses it. Raises SystemExit with one line saying
    why not and how to start (or install) it."""
    from harness.cli.doctor import docker_problem

    problem = docker_problem()
    if problem:
        raise SystemExit(problem)


def build_images(targets: list[str] | None = None) -> None:
    """Every image a kind cluster needs (or ``targets``: harness.kube.images.ON_REQUEST), building what
    is missing with progress lines and the estimated time left (one line when all is built).
    Raises SystemExit naming what failed: the build impossible here (what to install), or the
    failed step and its log file."""
    from harness.kube.images import BuildError, ensure_built

    try:
        ensure_built(progress=lambda line: print(line, flush=True), targets=targets)
    except BuildError as exc:
        raise SystemExit(f"kdrill: {exc}") from None


def _platform_profile(directory: str | None, configs: list[str] = ()):
    """The checked platform profile of ``--platform`` (None without one), checked also for the
    cluster name it makes from each kind config of ``configs`` (_check_platform_names). Raises
    SystemExit with the profile's file, field, expected and got."""
    if directory is None:
        return None
    if not directory.strip():  # an unset variable in `--platform "$DIR"`: not "no profile"
        raise SystemExit("kdrill: platform profile: --platform: expected a profile directory (holding platform.yaml), "
                         "got an empty value (leave --platform out for none)")
    from harness.platform.profile import ProfileError, load

    try:
        profile = load(directory)
    except ProfileError as exc:
        raise SystemExit(f"kdrill: platform profile: {exc}") from None
    _check_platform_names(profile, configs)
    return profile


def _kind_target(config: str, profile, cluster_name: str | None, clusters: int = 1) -> str:
    """The kind cluster a run uses, as its header names it: the config, the cluster's name (given,
    else the config's, with the profile's name after it; with ``clusters`` > 1, each worker's,
    harness.core.workers.cluster_name) and the platform profile with its hash. Raises ProviderError
    for a config kind cannot read, Refused for a worker's cluster name kind would refuse."""
    from harness.kube.providers.kind import cluster_name_of, cluster_name_problem, config_path
    from harness.core.workers import cluster_name as worker_cluster

    name = cluster_name or cluster_name_of(config_path(config))
    if profile is not None:
        name = cluster_name or profile.cluster_name(name)
    if clusters > 1:
        names = [worker_cluster(name, f"gw{i}") for i in range(clusters)]
        problem = next(filter(None, map(cluster_name_problem, names)), None)
        if problem:
            raise Refused(f"kdrill: the parallel clusters' names: {problem}")
        name = f"{', '.join(names)} in parallel"
    if profile is None:
        return f"kind config {config}, cluster {name}"
    return (f"kind config {config}, cluster {name}, platform profile "
            f"{profile.name}" + (f" (sha256 {profile.hash})" if profile.hash else ""))


def _check_platform_names(profile, configs) -> None:
    """Raises SystemExit when ``profile`` on one of ``configs`` would name another config's
    cluster (harness.platform.profile.check_cluster_name)."""
    from harness.platform.profile import ProfileError, check_cluster_name

    try:
        for config in configs:
            check_cluster_name(profile, config)
    except ProfileError as exc:
        raise SystemExit(f"kdrill: platform profile: {exc}") from None


def prepare_kind(build: bool = True) -> None:
    """What every kind run needs first: Docker answering and, when ``build``, the images
    (build_images). Raises SystemExit as require_docker and build_images do."""
    require_docker()
    if build:
        build_images()


def cmd_images(args: argparse.Namespace) -> int:
    from harness.kube.images import ON_REQUEST, Build, image_sizes

    if args.targets and args.action == "status":
        print(f"kdrill images status: TARGET: expected none, got {args.targets[0]}", file=sys.stderr)
        return 2
    unknown = [t for t in args.targets if t not in ON_REQUEST]
    if unknown:
        print(f"kdrill images build: TARGET: expected one of {', '.join(ON_REQUEST)}, got {unknown[0]}", file=sys.stderr)
        return 2
    require_docker()  # status reads the images' labels from Docker too
    build = Build()
    if args.action == "status":
        for s in build.status():
            print(f"{'built' if s['built'] else 'to do':6} {s['step']:16} {s['key']}  {s['image'] or ''}")
        return 0
    if args.targets:  # e.g. gatekeeper, for the example profile clusters/platforms/gatekeeper
        build_images(args.targets)
        tags = [build.step(t).image for t in args.targets if build.step(t).image]
    else:
        build_images()
        tags = [build.node_image, build.haproxy_image, build.tags["toolbox"]]
    for tag, size in image_sizes(tags).items():
        print(f"  {tag}: {size / 1e6:.0f} MB")
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    from harness.kube.health import unhealthy
    from harness.kube.providers import ProviderError
    from harness.kube.providers.kind import KindProvider

    from harness.core.session_lock import ClusterBusy, SessionLock

    # Refused before Docker or a cluster is touched; --name chooses the cluster's name instead.
    if args.name is not None:
        from harness.kube.providers.kind import cluster_name_problem

        problem = cluster_name_problem(args.name)
        if problem:
            raise Refused(f"kdrill cluster: --name: {problem}")
    profile = _platform_profile(args.platform, [] if args.name else [args.config])
    try:  # before the images are built: a bad config or offset is refused at once
        import yaml

        from harness.kube.providers.kind import config_path, offset_host_ports

        offset_host_ports(yaml.safe_load(config_path(args.config).read_text()) or {}, args.host_port_offset)
    except ProviderError as exc:
        raise Refused(f"kdrill cluster: {exc}") from None
    prepare_kind(build=args.action == "create")
    provider = KindProvider(args.config, name=args.name, platform=profile, host_port_offset=args.host_port_offset)
    if args.action in ("create", "delete"):
        try:  # never under a session that is running drills on it
            SessionLock(provider.name).acquire()
        except ClusterBusy as exc:
            raise SystemExit(f"kdrill cluster {args.action}: {exc}") from None
    if args.action == "create":
        if provider.exists():
            problem = provider.platform_problem()
            if problem:
                raise SystemExit(f"kdrill cluster create: {problem}")
            print(f"kind cluster {provider.name} exists; reusing it")
        else:
            print(f"kind cluster {provider.name} created in {provider.create():.0f} s")
            if profile is not None:
                print(f"platform profile {profile.name} (sha256 {profile.hash[:12]}) installed: "
                      + ", ".join(f"{step} {seconds:.0f} s" for step, seconds in provider.platform_install_seconds.items()))
        return 0
    if args.action == "delete":
        if provider.exists():
            provider.delete()
            print(f"kind cluster {provider.name} deleted")
        return 0
    if not provider.exists():
        print(f"kind cluster {provider.name} does not exist")
        return 1
    problems = unhealthy(provider.cluster())
    platform = provider.platform_problem()
    problems += [platform] if platform else []
    print("\n".join(problems) or f"kind cluster {provider.name}: every node Ready, every kube-system pod Running"
          + (f"; platform profile {profile.name} as recorded" if profile else ""))
    return 1 if problems else 0


def cmd_report(args: argparse.Namespace) -> int:
    """Re-render a run's report, only when the run verifies, and never into the sealed run.

    report.html is sealed evidence (rendered just before sealing), so this writes no file: it
    says whether the sealed page is exactly what the evidence renders to (exit 0) or refuses
    (exit 1: the run does not verify; the page differs, e.g. another kdrill version rendered
    it; the run was sealed without one). ``--stdout`` prints the fresh rendering instead. A RUN
    that is not a run is refused (exit 2)."""
    from datetime import datetime

    from harness.evidence.manifest import verify_run
    from harness.evidence.report import REPORT_NAME, ReportError, render_report

    with refusing():
        run_dir = _run_dir(args.reports, args.run)
    result = verify_run(run_dir)
    if not result.ok:
        print(f"kdrill report: {run_dir} does not verify; not rendering its report:", file=sys.stderr)
        for problem in result.problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    try:
        sealed_at = datetime.fromisoformat(result.sealed_at or "")
    except ValueError:
        sealed_at = None  # a page with another time simply will not match the sealed one
    seal = {"public_key": result.signer.pem if result.signer else None,
            "fingerprint_sha256": result.signer.fingerprint if result.signer else None,
            "previous": result.previous.to_dict() if result.previous else None}
    try:
        page = render_report(run_dir, seal=seal, generated_at=sealed_at)
    except ReportError as exc:  # sealed, but nothing a run leaves (no run.json, no record): not a run
        raise Refused(f"kdrill report: {exc}") from None
    if args.stdout:
        sys.stdout.write(page)
        return 0
    sealed = run_dir / REPORT_NAME
    if sealed.is_file() and sealed.read_bytes() == page.encode("utf-8"):
        print(f"{sealed}: sealed, and re-rendered from the evidence it is the same, byte for byte")
        return 0
    if not sealed.is_file():
        why = f"the run was sealed without it ({result.report_error or 'no reason recorded'})"
    elif result.signer and result.signer.fingerprint not in sealed.read_text(encoding="utf-8", errors="replace"):
        # The page shows the key that sealed it: a manifest signed by another key was re-sealed.
        why = (f"its page does not name the key that signed the manifest (sha256:{result.signer.fingerprint}): "
               "the run was re-sealed with another key after the page was rendered")
    else:
        why = "a fresh rendering differs from it (rendered by another kdrill version or commit?)"
    print(f"kdrill report: {sealed} is sealed evidence and {why}; a sealed run is never written into. "
          f"`kdrill report {args.run} --stdout` prints the fresh rendering.", file=sys.stderr)
    return 1


def _trusted_fingerprints(args: argparse.Namespace) -> list[str]:
    """The fingerprints of ``--fingerprint`` and ``--public-key``. Raises SystemExit naming a bad one."""
    from harness.evidence.manifest import ManifestError, PublicKeyInfo, normalise_fingerprint

    trusted = []
    for text in args.fingerprint:
        try:
            trusted.append(normalise_fingerprint(text))
        except ValueError as exc:
            raise SystemExit(f"kdrill verify: --fingerprint: {exc}") from None
    for name in args.public_key:
        try:
            data = Path(name).read_bytes()
        except OSError as exc:
            raise SystemExit(f"kdrill verify: --public-key {name}: {exc.strerror or exc}") from None
        if b"PRIVATE KEY" in data:
            raise SystemExit(f"kdrill verify: --public-key {name} is a private key; pass its public half "
                             f"(`openssl pkey -in {name} -pubout`)")
        try:
            trusted.append(PublicKeyInfo.from_pem(data).fingerprint)
        except ManifestError as exc:
            raise SystemExit(f"kdrill verify: --public-key {name}: {exc}") from None
    return trusted


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def cmd_verify(args: argparse.Namespace) -> int:
    """Verify one run (signature, signer, run id, every entry) or, with --history, every run and
    the chain. Prints every problem; exit 0 only when intact, 1 otherwise; 2 for bad input (a
    RUN that is not a run, a bad --fingerprint or --public-key, no such REPORTS_DIR)."""
    from harness.evidence.manifest import ManifestError, verify_history, verify_run
    from harness.evidence.manifest import escaped

    with refusing():
        trusted = _trusted_fingerprints(args)
    if args.history is not None:
        if args.output:
            raise Refused("kdrill verify: -o is for one run; --history prints its table")
        if args.run:
            raise Refused("kdrill verify: give a run or --history [REPORTS_DIR], not both")
        root = Path(args.history or args.reports)
        if _is_run(root):  # "0 runs, intact" would be true of it and say nothing
            raise Refused(f"kdrill verify --history {root}: expected a reports directory (holding runs), got a run "
                          f"directory; `kdrill verify {root}` verifies that run")
        try:
            history = verify_history(root, trusted_fingerprints=trusted)
        except ManifestError as exc:
            raise Refused(f"kdrill verify: {exc}") from None
        state = "intact" if history.ok else f"NOT INTACT ({_count(len(history.problems), 'problem')})"
        print(f"kdrill verify --history {history.root}: {_count(len(history.runs), 'run')}, {state}")
        for problem in history.problems:
            print(f"  {problem}")
        for note in history.notes:
            print(f"note: {escaped(note)}")
        signers: dict[str, int] = {}
        for r in history.runs:
            if r.signer is not None:
                signers[r.signer.fingerprint] = signers.get(r.signer.fingerprint, 0) + 1
        listed = ", ".join(f"sha256:{fp} ({_count(n, 'run')})" for fp, n in sorted(signers.items())) or "none"
        print(f"signers: {listed}" + ("" if trusted else "; no key was pinned (--public-key, --fingerprint)"))
        if history.head is not None:
            print(f"head: {history.head.run_id} (manifest sha256 {history.head.manifest_sha256}); keep this line "
                  "elsewhere: deleting the latest runs breaks no link")
        return 0 if history.ok else 1
    if not args.run:
        raise Refused("kdrill verify: give a run id or directory, or --history [REPORTS_DIR]")
    with refusing():
        run_dir = _run_dir(args.reports, args.run)
    result = verify_run(run_dir, trusted_fingerprints=trusted)
    if args.output:
        print_as(args.output, verification_data(result))
        return 0 if result.ok else 1
    if result.ok:
        print(f"kdrill verify {run_dir}: intact ({_count(result.files, 'file')}, "
              f"{_count(result.directories, 'directory', 'directories')}; run {result.run_id}, "
              f"sealed {result.sealed_at})")
    else:
        print(f"kdrill verify {run_dir}: NOT INTACT ({_count(len(result.problems), 'problem')})")
        for problem in result.problems:
            print(f"  {problem}")
    if result.sealed_at is not None:
        print(result.signer_line())
        print(f"previous run: {result.previous.run_id} (manifest sha256 {result.previous.manifest_sha256})"
              if result.previous else "previous run: none (the first sealed run in its reports directory)")
    return 0 if result.ok else 1


def verification_data(result) -> dict:
    """What ``kdrill verify RUN`` prints, as data for -o: intact or not, every problem, the signer."""
    return {"run_dir": str(result.run_dir), "intact": result.ok, "run_id": result.run_id,
            "sealed_at": result.sealed_at, "files": result.files, "directories": result.directories,
            "problems": [{"kind": p.kind, "subject": p.subject, "text": str(p)} for p in result.problems],
            "signer_sha256": result.signer.fingerprint if result.signer else None, "pinned": result.pinned,
            "previous": result.previous.to_dict() if result.previous else None,
            "manifest_sha256": result.manifest_sha256}


def path_value(value: str) -> str:
    """An option's path; refuses an empty one, which Path() would take for the current directory."""
    if not value.strip():
        raise argparse.ArgumentTypeError("expected a path, got an empty value")
    return value


def parser() -> argparse.ArgumentParser:
    # No abbreviations: `run --scenario X` must not silently mean `--scenarios-dir X`.
    p = argparse.ArgumentParser(prog="kdrill", description=__doc__.split("\n")[0], allow_abbrev=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--reports", default=os.environ.get("KDRILL_REPORTS"),
                   help="evidence root; each run writes <reports>/<run-id>/ (default: $KDRILL_REPORTS, else "
                   "reports/ in the checkout kdrill runs from, or in the current directory for an installed kdrill)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging, and the traceback of an internal error")
    p.add_argument("--version", action="version", version=f"kdrill {__version__}")
    # The global options after the subcommand too (`kdrill history --reports DIR`), as kubectl takes
    # its flags anywhere; SUPPRESS keeps a subcommand's default from overwriting the value given before.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--reports", default=argparse.SUPPRESS, help="as before the subcommand")
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="as before the subcommand")
    sub = p.add_subparsers(dest="command", required=True, parser_class=functools.partial(
        argparse.ArgumentParser, allow_abbrev=False, parents=[common]))

    run = sub.add_parser("run", help="run drills and write the evidence")
    run.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="scenario names or files (default: all)")
    run.add_argument("--run-id", help="the run's directory name under --reports (default: UTC time and a random suffix)")
    run.add_argument("--scenarios-dir", metavar="DIR", type=path_value,
                     help="read the scenarios from DIR (*.yaml) instead of the built-in ones (`kdrill list`): a "
                     "team's own, or a copy with other bounds; their `drill: drills/<file>` is one of kdrill's "
                     "built-in drills. Default: the built-in scenarios")
    run.add_argument("--cluster-name", help="kind cluster name: lowercase letters, digits, '-', '.', at most 50 characters "
                     "(default: the config's, with --platform's name after it; reused if it exists)")
    run.add_argument("--keep-cluster", action="store_true", help="keep the kind cluster this run creates")
    run.add_argument("--kubeconfig", type=path_value,
                     help="run against an existing cluster (node access only with --node-agent); "
                     "$KUBECONFIG works too with --context")
    run.add_argument("--context", action="append", default=[],
                     help="context in --kubeconfig (default: current); repeated, the contexts are drilled in "
                     "parallel, one per pytest-xdist worker")
    run.add_argument("--clusters", type=int, default=None, metavar="N",
                     help="drill N kind clusters in parallel (pytest-xdist, one worker and one cluster each: "
                     "<name>-gw0, <name>-gw1, ... with their host ports moved; harness/core/workers.py), into one run "
                     "and one report (default 1; with repeated --context, one per context)")
    run.add_argument("--allow-context", action="append", default=[],
                     help="let destructive drills run on this non-kind context")
    run.add_argument("--node-agent", action="store_true",
                     help="with --kubeconfig/--context: reach the nodes through short-lived privileged agent pods "
                     "(the toolbox image), so drills that run commands on nodes run there too; needs --allow-context")
    run.add_argument("--ticket", help="the change or incident ticket this run belongs to (in the evidence)")
    run.add_argument("--approved-by", help="who approved breaking the cluster for the drills (in the evidence)")
    run.add_argument("--baseline", metavar="RUN", help="compare with this earlier run at the end (kdrill compare); "
                     "a regression makes the exit status 1")
    run.add_argument("--any-platform", action="store_true",
                     help="with --baseline: compare even when platform or kdrill version differ")
    run.add_argument("--toolbox-image", metavar="IMAGE",
                     help="the drills' pods' image where your registry serves it (default: kdrill's, preloaded on kind)")
    run.add_argument("--toolbox-pull-policy", metavar="POLICY",
                     help="Always, IfNotPresent or Never (default: Never, the image being preloaded on kind)")
    run.add_argument("--platform", metavar="DIR",
                     help="drill the kind cluster built with this platform profile (made with it when it does not "
                     "exist; refused when it exists from another version of the profile); see kdrill cluster --help")
    run.add_argument("--plan", action="store_true",
                     help="print what would run (faults, windows, access, expected duration) and touch nothing")
    run.add_argument("-o", "--output", choices=OUTPUT_FORMATS, help="with --plan: the plan as JSON or YAML")
    run.set_defaults(func=cmd_run)

    new = sub.add_parser("new", help="write a commented data-only scenario skeleton")
    new.add_argument("name", help="the scenario's name: lowercase letters, digits and '-'")
    new.add_argument("--dir", default="scenarios", type=path_value,
                     help="where to write NAME.yaml (default: scenarios/, made if missing: a directory of "
                     "scenarios alone, as `kdrill run --scenarios-dir` reads every *.yaml in it)")
    new.set_defaults(func=cmd_new)

    val = sub.add_parser("validate", help="check scenario files (schema, fault parameters, references); no cluster")
    val.add_argument("files", nargs="+", metavar="FILE", help="scenario files (*.yaml, *.yml)")
    val.set_defaults(func=cmd_validate)

    cmp_ = sub.add_parser("compare", help="put every expectation of two runs side by side; exit 1 on a regression")
    cmp_.add_argument("base", help="the baseline run (id under --reports, or a path)")
    cmp_.add_argument("run", help="the run to judge (id under --reports, or a path)")
    cmp_.add_argument("--any-platform", action="store_true",
                      help="compare even when the platform or the kdrill version differ (said in the output)")
    cmp_.add_argument("--json", action="store_true", help="print the comparison as JSON")
    cmp_.add_argument("--public-key", action="append", default=[], metavar="PEM",
                      help="both runs must be signed by this Ed25519 public key (repeatable)")
    cmp_.add_argument("--fingerprint", action="append", default=[], metavar="HEX",
                      help="both runs must be signed by the key with this SHA-256 fingerprint (repeatable)")
    cmp_.set_defaults(func=cmd_compare)

    his = sub.add_parser("history", help="list every run with verdicts, platform and seal; write reports/index.html")
    his.add_argument("-o", "--output", choices=OUTPUT_FORMATS,
                     help="every run as JSON or YAML (index.html is not written)")
    his.set_defaults(func=cmd_history)

    ls = sub.add_parser("list", help="list scenarios, or with --claims the documented claims")
    ls.add_argument("--claims", action="store_true", help="the documented claims and which drill checks each")
    ls.add_argument("-o", "--output", choices=OUTPUT_FORMATS, help="every scenario as JSON or YAML, as loaded")
    ls.add_argument("--scenarios-dir", type=path_value,
                    help="a team's scenarios directory, as for kdrill run (default: the built-in ones)")
    ls.set_defaults(func=cmd_list)

    rec = sub.add_parser("recover", help="revert every fault still in the ledger")
    rec.add_argument("--ledger-dir", type=path_value,
                     help="the ledger to revert (default: $KDRILL_STATE_DIR/ledger, else ~/.local/state/kdrill/ledger)")
    rec.add_argument("--force", action="store_true",
                     help="also revert entries whose recording process still seems alive (its pid may be reused)")
    rec.set_defaults(func=cmd_recover)

    doc = sub.add_parser("doctor", help="check prerequisites and say how to fix them")
    doc.set_defaults(func=cmd_doctor)

    img = sub.add_parser("images", help="build the offline kind images")
    img.add_argument("action", choices=["build", "status"], help="build what is missing, or say what is built")
    from harness.kube.images import ON_REQUEST
    # No argparse choices: with nargs="*" it refuses the empty list too (checked in cmd_images).
    img.add_argument("targets", nargs="*", metavar="TARGET",
                     help=f"build only this on-request image: {', '.join(ON_REQUEST)} (for clusters/platforms/gatekeeper)")
    img.set_defaults(func=cmd_images)

    clu = sub.add_parser("cluster", help="create, delete or check a kind cluster from clusters/")
    clu.add_argument("action", choices=["create", "delete", "status"],
                     help="create (reused if it exists), delete, or say whether it exists and is healthy")
    clu.add_argument("--config", default="ha", help="clusters/<config>.yaml (default: ha)")
    clu.add_argument("--name", help="kind cluster name: lowercase letters, digits, '-', '.', at most 50 characters "
                     "(default: the config's, with --platform's name after it)")
    clu.add_argument("--host-port-offset", type=int, default=0, metavar="N",
                     help="add N to every host port the config maps (another cluster of the same config beside this "
                     "one; NodePorts inside stay as written); default 0")
    clu.add_argument("--platform", metavar="DIR",
                     help="build a team's platform profile into the cluster: kubeadm patches, files on the nodes, "
                     "manifests, a CoreDNS Corefile, image archives (harness/platform/profile.py says how DIR is laid "
                     "out; clusters/platforms/example is one)")
    clu.set_defaults(func=cmd_cluster)

    rep = sub.add_parser("report", help="check that a verified run's sealed report re-renders from its evidence")
    rep.add_argument("run", help="run id under --reports, or a path (with /) to a run directory")
    rep.add_argument("--stdout", action="store_true", help="print the fresh rendering (nothing is written)")
    rep.set_defaults(func=cmd_report)

    ver = sub.add_parser("verify", help="check a run's signature, run id and every file, or the chain of runs")
    ver.add_argument("run", nargs="?", help="run id under --reports, or a path (with /) to a run directory")
    ver.add_argument("--history", nargs="?", const="", metavar="REPORTS_DIR",
                     help="verify every run in REPORTS_DIR (default: --reports) and the links between them")
    ver.add_argument("--public-key", action="append", default=[], metavar="PEM",
                     help="require a signature by this Ed25519 public key (repeatable)")
    ver.add_argument("--fingerprint", action="append", default=[], metavar="HEX",
                     help="require a signature by the key with this SHA-256 fingerprint (repeatable)")
    ver.add_argument("-o", "--output", choices=OUTPUT_FORMATS, help="one run's verification as JSON or YAML")
    ver.set_defaults(func=cmd_verify)
    return p


REPORTS_COMMANDS = ("run", "compare", "history", "report", "verify")  # the commands that read --reports


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
        print(exc.code, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kdrill: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`kdrill compare ... | head`): no traceback, and none at exit either
        # when Python flushes stdout into the closed pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as exc:
        from harness.kube.providers import ProviderError
        from harness.spec.scenario import ScenarioError

        if isinstance(exc, (ScenarioError, ProviderError, resources.ResourcesMissing)):
            print(f"kdrill: {exc}", file=sys.stderr)
            return 2
        if isinstance(exc, OSError) and exc.filename:  # e.g. a scenario path that is a directory
            print(f"kdrill: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        return internal_error(exc, args.verbose)


INTERNAL_ERROR = 3  # distinct from 1 (a drill failed, a regression) and 2 (input refused)


def internal_error(exc: Exception, verbose: bool) -> int:
    """One line for an error of kdrill's own (the traceback only with -v); returns the exit status."""
    if verbose:
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    print(f"kdrill: internal error: {type(exc).__name__}: {exc}" + ("" if verbose else " (-v for the traceback)"),
          file=sys.stderr)
    return INTERNAL_ERROR

