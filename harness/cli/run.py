"""The steps of ``kdrill run``: every refusal before anything is touched (the plan is what they
leave), the plan printed with ``--plan``, the drills' pytest command, and what the run's records
say at its end. harness.cli.cmd_run runs them in order."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.cli.cluster import check_platform_names, kind_target, platform_profile
from harness.cli.output import print_as
from harness.cli.plan import EXISTING_NO_AGENT, EXISTING_NODE_AGENT, plan, plan_data
from harness.cli.refusals import Refused, check_reports_not_a_run, named_run_dir, refusing
from harness.cli.scenarios import check_references
from harness.core import resources
from harness.core.workers import MAX_WORKERS
from harness.engine.detection import TOLD_NO_ONE
from harness.evidence import manifest
from harness.evidence.manifest import SigningKeyError
from harness.evidence.records import RunIdError, create_run_dir, new_run_id, validate_run_id
from harness.evidence.report import checked_verdict, expectation_problem, scan_records
from harness.kube.providers import ProviderError, existing
from harness.kube.providers.kind import cluster_name_problem
from harness.kube.workloads import toolbox_problem
from harness.platform.profile import PlatformProfile
from harness.probes.alerts import (
    ALERTMANAGER_TOKEN_ENVIRONMENT,
    TOKEN_ENVIRONMENT,
    read_token_file,
    source_problem,
    token_problem,
)
from harness.spec.scenario import Scenario, ScenarioError, find_scenario, load_scenarios


@dataclass
class PlannedRun:
    """What ``kdrill run`` will do, once every refusal has passed: the run id, the baseline run to
    compare with (or None), the platform profile (or None), how many clusters in parallel, the
    scenarios and the directory the drills read them from, their kind configs (sorted) and the
    target as the run's header names it."""

    run_id: str
    baseline: Path | None
    profile: PlatformProfile | None
    clusters: int
    scenarios_dir: Path
    scenarios: list[Scenario]
    configs: list[str]
    target: str


def planned_run(args: argparse.Namespace) -> PlannedRun:
    """Every check of ``kdrill run``, the same with --plan as without, in the order a person meets
    them: the reports directory, run id and signing key; the options; the scenarios; the cluster.
    Makes ``args.reports`` absolute and sets the toolbox variables the drills' pytest inherits.
    Raises Refused, ScenarioError or ProviderError; touches nothing."""
    run_id, baseline = _refuse_run_identity(args)
    profile = _refuse_run_options(args)
    clusters = cluster_count(args)
    # The drills run in a pytest process that inherits these (harness/kube/workloads.py reads them).
    if args.toolbox_image:
        os.environ["KDRILL_TOOLBOX_IMAGE"] = args.toolbox_image
    if args.toolbox_pull_policy:
        os.environ["KDRILL_TOOLBOX_PULL_POLICY"] = args.toolbox_pull_policy
    # Absolute: the drills' pytest runs in kdrill's own directory (resources.data_root()), not here.
    args.reports = str(Path(args.reports).absolute())
    scenarios_dir, scenarios = _chosen_scenarios(args)
    configs = sorted({s.cluster_config for s in scenarios})
    if len(configs) > 1 and not (args.kubeconfig or args.context):
        raise Refused(f"kdrill: the chosen scenarios need different cluster configs ({', '.join(configs)}); "
                      "run them separately")
    if profile is not None and not args.cluster_name:  # the kind config is the scenarios' one
        with refusing():
            check_platform_names(profile, configs)
    target = (f"context {', '.join(contexts_read(args.kubeconfig, args.context))}" if args.kubeconfig or args.context
              else kind_target(configs[0], profile, args.cluster_name, clusters))
    return PlannedRun(run_id, baseline, profile, clusters, scenarios_dir, scenarios, configs, target)


def _refuse_run_identity(args: argparse.Namespace) -> tuple[str, Path | None]:
    """The run's id (given, else a new one) and its baseline run: the reports directory, the run
    id and the signing key are refused first. Raises Refused."""
    check_reports_not_a_run(args.reports, "run")
    with refusing():
        baseline = named_run_dir(args.reports, args.baseline) if args.baseline else None
    try:
        run_id = validate_run_id(args.run_id) if args.run_id is not None else new_run_id()
        if (Path(args.reports) / run_id).exists():
            raise RunIdError(f"run id {run_id!r} names an existing run in {args.reports}; choose another")
        if not args.plan:
            manifest.load_signer()
    except (RunIdError, SigningKeyError) as exc:
        raise Refused(f"kdrill: {exc}") from None
    return run_id, baseline


def _refuse_run_options(args: argparse.Namespace) -> PlatformProfile | None:
    """The options that disagree with themselves or with the cluster drilled, refused; returns the
    checked platform profile (None without --platform). Raises Refused."""
    # The options, or else the environment the drills would read: refused here, before anything runs.
    problem = toolbox_problem(args.toolbox_image if args.toolbox_image is not None else os.environ.get("KDRILL_TOOLBOX_IMAGE"),
                              args.toolbox_pull_policy if args.toolbox_pull_policy is not None
                              else os.environ.get("KDRILL_TOOLBOX_PULL_POLICY"))
    if problem:
        raise Refused(f"kdrill: {problem}")
    with refusing():
        profile = platform_profile(args.platform)
    if args.cluster_name is not None:  # kind would refuse it only after the images and Docker
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
    _refuse_prometheus_options(args)
    watched = args.alertmanager if args.alertmanager is not None else os.environ.get("KDRILL_ALERTMANAGER")
    read = args.prometheus if args.prometheus is not None else os.environ.get("KDRILL_PROMETHEUS")
    if watched and not read and getattr(profile, "prometheus_node_port", None) is None:
        raise Refused("kdrill: --alertmanager is watched for the alerts a Prometheus says fired: name that Prometheus "
                      "too (--prometheus URL, or a --platform profile with its own)")
    if profile is not None and (args.kubeconfig or args.context):
        raise Refused("kdrill: --platform builds a kind cluster; an existing cluster (--kubeconfig, --context) is "
                      "drilled as it is (its record, if any, is in the evidence)")
    return profile


def _refuse_prometheus_options(args: argparse.Namespace) -> None:
    """--prometheus, --alertmanager, their token files and their environment variables, as the
    drills would read them, refused before anything is touched. Raises Refused."""
    for of, environment in (("prometheus", TOKEN_ENVIRONMENT), ("alertmanager", ALERTMANAGER_TOKEN_ENVIRONMENT)):
        given = getattr(args, of)
        url = given if given is not None else os.environ.get(f"KDRILL_{of.upper()}")
        name = f"--{of}" if given is not None else f"KDRILL_{of.upper()}"
        if url is not None and source_problem(url):
            raise Refused(f"kdrill: {name}: expected {source_problem(url)}, got {url[:200]!r}")
        token_file = getattr(args, f"{of}_token_file")
        token_file = token_file if token_file is not None else os.environ.get(f"KDRILL_{of.upper()}_TOKEN_FILE")
        if token_file is not None:
            if url is None:
                raise Refused(f"kdrill: --{of}-token-file is the token for --{of} URL; give the URL too")
            try:
                problem = token_problem(read_token_file(token_file))
            except OSError as exc:
                problem = f"a readable file ({exc.strerror or exc})"
            if problem:
                raise Refused(f"kdrill: --{of}-token-file {str(token_file)[:200]!r}: expected {problem}")
        if os.environ.get(environment) is not None and token_problem(os.environ[environment]):
            raise Refused(f"kdrill: {environment}: expected {token_problem(os.environ[environment])}")


def _detection_outcome(alert: dict) -> str:
    """An alert's outcome in the run summary: Prometheus's, or, when it fired, how Alertmanager held it."""
    delivery = alert.get("delivery") if isinstance(alert.get("delivery"), dict) else {}
    if alert.get("outcome") == "detected" and delivery.get("outcome") in TOLD_NO_ONE:
        return f"{delivery.get('outcome')} in Alertmanager"
    return str(alert.get("outcome"))


def cluster_count(args: argparse.Namespace) -> int:
    """How many clusters ``kdrill run`` drills in parallel: ``--clusters``, or one per repeated
    ``--context``. Raises Refused for a count out of range or one that disagrees with the contexts."""
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


def _chosen_scenarios(args: argparse.Namespace) -> tuple[Path, list[Scenario]]:
    """The scenarios directory the drills read and the scenarios run: those named (names, or files
    of one directory), else every scenario but those that run only when named (each said). Each
    one's references checked. Raises Refused or ScenarioError."""
    scenarios_dir = Path(args.scenarios_dir).absolute() if args.scenarios_dir else resources.scenarios_dir()
    as_files = [a for a in args.scenarios if a.endswith((".yaml", ".yml"))]
    if as_files:
        scenarios_dir, scenarios = _scenario_files(as_files, len(args.scenarios))
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
        raise ScenarioError(scenarios_dir, "(directory)", "at least one scenario file (*.yaml)", "none")
    for s in scenarios:
        check_references(s)
    return scenarios_dir, scenarios


def _scenario_files(as_files: list[str], given: int) -> tuple[Path, list[Scenario]]:
    """The scenarios of files named on the command line, and their one directory (``given``: how
    many scenarios were named in all). Raises Refused or ScenarioError."""
    # The drill reads its scenario by name from one directory: that file's, so its edits count.
    directories = {Path(a).resolve().parent for a in as_files}
    if len(directories) > 1 or len(as_files) != given:
        raise Refused("kdrill: give scenario names, or scenario files from one directory, not a mix")
    missing = [a for a in as_files if not Path(a).is_file()]
    if missing:
        raise Refused(f"kdrill: no scenario file {', '.join(missing)} (names: `kdrill list`)")
    scenarios_dir = directories.pop()
    # The drills' pytest loads that whole directory (harness/plugin, load_scenarios): so here too,
    # for a file it would refuse (another file of the same name, an invalid one) is refused now,
    # before the run directory and kind, and the plan agrees with the run.
    by_path = {s.path.resolve(): s for s in load_scenarios(scenarios_dir)}
    # (find_scenario: a file load_scenarios would not list, if any, is read alone as before)
    return scenarios_dir, [by_path.get(Path(a).resolve()) or find_scenario(a) for a in as_files]


def contexts_read(kubeconfig: str | None, contexts: list[str]) -> list[str]:
    """The contexts drilled (the current one when none is given), each read from ``kubeconfig``
    (default: $KUBECONFIG, else ~/.kube/config); nothing is sent to a cluster. Raises Refused for a
    file that is missing or not a kubeconfig, or a context it does not have: the plan would
    otherwise name a cluster the run cannot reach."""
    try:
        return [existing.existing_cluster(kubeconfig, context).context for context in contexts or [None]]
    except ProviderError as exc:
        raise Refused(f"kdrill: {'--kubeconfig' if kubeconfig else 'kubeconfig'}: {exc}") from None


def print_plan(args: argparse.Namespace, planned: PlannedRun) -> int:
    """``kdrill run --plan``: what the run would do and how long it would take (as JSON or YAML
    with -o); returns the exit status, 0."""
    access = None
    if args.kubeconfig or args.context:
        access = EXISTING_NODE_AGENT if args.node_agent else EXISTING_NO_AGENT
    if args.output:
        print_as(args.output, plan_data(planned.scenarios, Path(args.reports), planned.target, access))
        return 0
    print(plan(planned.scenarios, Path(args.reports), planned.target, planned.clusters, access)[0])
    if args.node_agent and not args.allow_context:
        print("note: the run itself is refused without --allow-context CONTEXT: --node-agent runs privileged "
              "pods on every node")
    return 0


def check_consent(args: argparse.Namespace) -> None:
    """Consent for each existing cluster drilled (--allow-context), checked before the run's
    directory is made (the drills' session checks it too, but only after). Raises Refused."""
    try:
        for context in args.context or [None]:
            existing.consented_cluster(args.kubeconfig, context, args.allow_context)
    except ProviderError as exc:
        raise Refused(f"kdrill: refused: {exc}") from None


def new_run_dir(reports: str, run_id: str) -> Path:
    """The run's new, empty directory under ``reports``. Raises Refused when it cannot be made."""
    try:
        return create_run_dir(Path(reports), run_id)
    except RunIdError as exc:
        raise Refused(f"kdrill: {exc}") from None


def pytest_command(args: argparse.Namespace, planned: PlannedRun, run_dir: Path) -> list[str]:
    """The drills' pytest command line: kdrill's own drill files, the plugin's options for this run
    (its cluster, evidence and scenarios), pytest-xdist for parallel clusters, then the arguments
    given after ``--``."""
    files = sorted({str(resources.drill_file(s.drill)) for s in planned.scenarios})
    cmd = [sys.executable, "-m", "pytest", *files, "-p", "no:cacheprovider", "-o", "addopts=",
           "--rootdir", str(resources.data_root()), "-qq", "-s", "--no-header", "-r", "fEs", "--tb=short",
           f"--junitxml={run_dir / 'junit.xml'}", f"--alluredir={run_dir / 'allure-results'}",
           f"--kdrill-reports={args.reports}", f"--kdrill-run-id={planned.run_id}",
           f"--kdrill-scenarios-dir={planned.scenarios_dir}"]
    cmd += [f"--kdrill-scenario={s.name}" for s in planned.scenarios]
    if args.kubeconfig or args.context:  # $KUBECONFIG and --context alone work as with kubectl
        cmd += [f"--kdrill-kubeconfig={args.kubeconfig}"] if args.kubeconfig else []
        cmd += [f"--kdrill-context={context}" for context in args.context]
        cmd += [f"--kdrill-allow-context={ctx}" for ctx in args.allow_context]
        cmd += ["--kdrill-node-agent"] if args.node_agent else []
    else:
        cmd.append(f"--kdrill-cluster-config={planned.configs[0]}")
        cmd += [f"--kdrill-cluster-name={args.cluster_name}"] if args.cluster_name else []
        cmd += [f"--kdrill-platform={planned.profile.root}"] if planned.profile is not None else []
        cmd += ["--kdrill-keep-cluster"] if args.keep_cluster else []
    if planned.clusters > 1:  # pytest-xdist: one worker, one cluster each
        # worksteal: a worker that runs out of cases takes the other's waiting ones (the cases' times
        # differ tenfold, so an even split up front leaves one cluster idle).
        # No replacement for a crashed worker: it would make a new cluster beside the crashed one's.
        cmd += ["-p", "xdist", f"--numprocesses={planned.clusters}", "--dist=worksteal", "--max-worker-restart=0"]
    cmd += [f"--kdrill-prometheus={args.prometheus}"] if args.prometheus else []
    cmd += [f"--kdrill-prometheus-token-file={args.prometheus_token_file}"] if args.prometheus_token_file else []
    cmd += [f"--kdrill-alertmanager={args.alertmanager}"] if args.alertmanager else []
    cmd += [f"--kdrill-alertmanager-token-file={args.alertmanager_token_file}"] if args.alertmanager_token_file else []
    cmd += [f"--kdrill-ticket={args.ticket}"] if args.ticket else []
    cmd += [f"--kdrill-approved-by={args.approved_by}"] if args.approved_by else []
    return cmd + args.pytest_args


def summary(run_dir: Path) -> str:
    """One line per drill record: verdict, drill, failed expectations."""
    lines = [f"\n{'verdict':8} {'drill':40} {'duration':>9}  failed expectations"]
    records, unreadable = scan_records(run_dir)
    for path, reason in unreadable:  # never dropped silently: it counts as an error
        lines.append(f"{'error':8} {path.name:40} {'':>9}  unreadable record: {reason}")
    for path, record in records:
        name = str(record["drill"]) + (f"[{record['case']}]" if record.get("case") else "")
        verdict, _ = checked_verdict(record)  # as the report judges it, not as the record says
        failed = [f"{e.get('name')}={e.get('measured')}" for e in record.get("expectations") or []
                  if not isinstance(e, dict) or expectation_problem(e) is not None]
        detection = record.get("detection") if isinstance(record.get("detection"), dict) else {}
        failed += [f"detection {a.get('alert')} {_detection_outcome(a)}" for a in detection.get("alerts") or []
                   if isinstance(a, dict) and a.get("verdict") != "passed"]
        duration = record.get("duration_seconds")
        duration = f"{duration:.0f} s" if isinstance(duration, (int, float)) else "-"
        lines.append(f"{str(verdict):8} {name:40} {duration:>9}  {', '.join(failed) or '-'}")
    return "\n".join(lines)


def every_record_passed(run_dir: Path) -> bool:
    """Whether the run left records, each readable and passed as the report judges it: a skipped,
    refused or unrun drill that was asked for is not a success."""
    records, unreadable = scan_records(run_dir)
    return bool(records) and not unreadable and all(checked_verdict(r)[0] == "passed" for _, r in records)
