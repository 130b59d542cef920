"""The ``kdrill`` command.

  kdrill run [SCENARIO...] [-- PYTEST-ARGS]   run drills (all by default) on a kind cluster,
                               write reports/<run-id>/
  kdrill list [--claims]       the scenarios, or the documented claims and which drill checks each
  kdrill recover               revert every fault the ledger still holds (after a crash)
  kdrill doctor                check Docker, kind, images, memory, inotify limits; say how to fix
  kdrill images build|status   build the offline kind images (cached by content)
  kdrill cluster create|delete|status   a kind cluster from clusters/ (default: ha)
  kdrill report RUN            (re)write reports/RUN/report.html and its manifest
  kdrill verify RUN            check reports/RUN against its manifest (exit 1 when anything changed)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SCENARIOS_DIR = REPO_ROOT / "scenarios"


def _run_dir(reports: str, run: str) -> Path:
    path = Path(run)
    if path.is_dir():
        return path
    path = Path(reports) / run
    if not path.is_dir():
        raise SystemExit(f"kdrill: no run directory {path}")
    return path


def cmd_run(args: argparse.Namespace) -> int:
    from harness.evidence import new_run_id
    from harness.scenario import find_scenario, load_scenarios

    scenarios_dir = Path(args.scenarios_dir)
    as_files = [a for a in args.scenarios if a.endswith((".yaml", ".yml"))]
    if as_files:
        # The drill reads its scenario by name from one directory: that file's, so its edits count.
        directories = {Path(a).resolve().parent for a in as_files}
        if len(directories) > 1 or len(as_files) != len(args.scenarios):
            raise SystemExit("kdrill: give scenario names, or scenario files from one directory, not a mix")
        missing = [a for a in as_files if not Path(a).is_file()]
        if missing:
            raise SystemExit(f"kdrill: no scenario file {', '.join(missing)} (names: `kdrill list`)")
        scenarios_dir = directories.pop()
    scenarios = [find_scenario(name, scenarios_dir) for name in args.scenarios] if args.scenarios \
        else load_scenarios(scenarios_dir)
    for s in scenarios:
        check_references(s)
    run_id = args.run_id or new_run_id()
    run_dir = Path(args.reports) / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    configs = sorted({s.cluster_config for s in scenarios})
    if len(configs) > 1 and not args.kubeconfig:
        raise SystemExit(f"kdrill: the chosen scenarios need different cluster configs ({', '.join(configs)}); "
                         "run them separately")
    print(f"kdrill run {run_id}: {len(scenarios)} drill(s) on "
          f"{'context ' + (args.context or 'current') if args.kubeconfig else 'kind config ' + configs[0]}")
    files = sorted({str(REPO_ROOT / s.drill) for s in scenarios})
    cmd = [sys.executable, "-m", "pytest", *files, "-p", "no:cacheprovider", "-o", "addopts=",
           "--rootdir", str(REPO_ROOT), "-q", "-s", "--no-header", "-r", "fEs",
           f"--junitxml={run_dir / 'junit.xml'}", f"--alluredir={run_dir / 'allure-results'}",
           f"--kdrill-reports={args.reports}", f"--kdrill-run-id={run_id}",
           f"--kdrill-scenarios-dir={scenarios_dir}"]
    for s in scenarios:
        cmd.append(f"--kdrill-scenario={s.name}")
    if args.kubeconfig:
        cmd += [f"--kdrill-kubeconfig={args.kubeconfig}"]
        if args.context:
            cmd.append(f"--kdrill-context={args.context}")
        for ctx in args.allow_context:
            cmd.append(f"--kdrill-allow-context={ctx}")
    else:
        cmd.append(f"--kdrill-cluster-config={configs[0]}")
        if args.cluster_name:
            cmd.append(f"--kdrill-cluster-name={args.cluster_name}")
        if args.keep_cluster:
            cmd.append("--kdrill-keep-cluster")
    cmd += args.pytest_args
    status = run_until_reverted(cmd)
    print(summary(run_dir))
    report_and_manifest(run_dir)
    print(f"evidence: {run_dir}  (report: {run_dir / 'report.html'}; check with `kdrill verify {run_id}`)")
    return 0 if status == 0 else 1


def check_references(scenario) -> None:
    """What a scenario names must exist: its drill file, cluster config and fault module.
    Raises ScenarioError naming the file and field."""
    from harness.faults import FaultError, fault_class
    from harness.scenario import ScenarioError

    if not (REPO_ROOT / scenario.drill).is_file():
        raise ScenarioError(scenario.path, "drill", f"an existing test file under {REPO_ROOT}", scenario.drill)
    if not (REPO_ROOT / "clusters" / f"{scenario.cluster_config}.yaml").is_file():
        known = ", ".join(sorted(p.stem for p in (REPO_ROOT / "clusters").glob("*.yaml")))
        raise ScenarioError(scenario.path, "cluster.config", f"one of {known}", scenario.cluster_config)
    try:
        fault_class(scenario.fault_kind)
    except FaultError as exc:
        raise ScenarioError(scenario.path, "fault.kind", f"a fault kind with a module in harness/faults ({exc})",
                            scenario.fault_kind) from None


def run_until_reverted(cmd: list[str]) -> int:
    """Run pytest and wait for it, however often Ctrl-C is pressed.

    Ctrl-C reaches pytest too (same process group); it reverts the fault in its ``finally``. The
    parent must not kill it meanwhile (``subprocess.call`` would, 0.25 s after an interrupt), so
    it only says what is happening and keeps waiting. SIGTERM is passed on as SIGTERM.
    """
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: proc.send_signal(signal.SIGTERM))
    try:
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:
                print("kdrill: interrupted; waiting for the drill to revert its fault", file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous)


def summary(run_dir: Path) -> str:
    """One line per drill record: verdict, drill, failed expectations."""
    lines = [f"\n{'verdict':8} {'drill':40} {'duration':>9}  failed expectations"]
    for path in sorted(run_dir.glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except json.JSONDecodeError:
            continue
        if not isinstance(record, dict) or "drill" not in record or "verdict" not in record:
            continue
        name = record["drill"] + (f"[{record['case']}]" if record.get("case") else "")
        failed = [f"{e['name']}={e['measured']}" for e in record.get("expectations", []) if e["verdict"] != "passed"]
        duration = f"{record.get('duration_seconds') or 0:.0f} s"
        lines.append(f"{record['verdict']:8} {name:40} {duration:>9}  {', '.join(failed) or '-'}")
    return "\n".join(lines)


def report_and_manifest(run_dir: Path) -> bool:
    """Write report.html and then the manifest; returns whether the report was written.

    Evidence that no longer matches an existing manifest is never sealed again: that would
    launder an edit. Raises SystemExit naming the changed files."""
    from harness.manifest import ManifestError, verify_manifest, write_manifest
    from harness.report import build_report

    if (run_dir / "manifest.json").exists():
        try:
            result = verify_manifest(run_dir)
        except ManifestError:
            result = None
        if result is not None and (result.changed or result.missing):
            raise SystemExit(f"kdrill: {run_dir} no longer matches its manifest; not sealing it again:\n"
                             + result.summary())
    written = True
    try:
        build_report(run_dir)
    except Exception as exc:  # the manifest must still be written for what is there
        print(f"kdrill: report not written: {exc}", file=sys.stderr)
        written = False
    write_manifest(run_dir)
    return written


def cmd_list(args: argparse.Namespace) -> int:
    if args.claims:
        from harness.claims import format_claims, list_claims

        print(format_claims(list_claims(SCENARIOS_DIR)))
        return 0
    from harness.scenario import load_scenarios

    for s in load_scenarios(SCENARIOS_DIR):
        node = " (needs node access)" if s.needs_node_access else ""
        print(f"{s.name:28} {s.title}{node}\n{'':28} fault {s.fault_kind}; cluster {s.cluster_config}; {s.drill}")
    return 0


def cluster_for_entry(entry_cluster: dict):
    from harness.providers import ClusterGone
    from harness.providers.existing import existing_cluster
    from harness.providers.kind import KindProvider

    if entry_cluster.get("provider") == "kind":
        provider = KindProvider(name=entry_cluster["name"])
        if not provider.exists():
            raise ClusterGone(f"kind cluster {entry_cluster['name']} no longer exists")
        return provider.cluster(kubeconfig=entry_cluster.get("kubeconfig"))
    return existing_cluster(entry_cluster.get("kubeconfig"), entry_cluster.get("context"))


def cmd_recover(args: argparse.Namespace) -> int:
    from harness.faults import recover
    from harness.ledger import Ledger

    ledger = Ledger(Path(args.ledger_dir) if args.ledger_dir else None)
    entries = ledger.entries()
    if not entries:
        print(f"kdrill recover: the ledger ({ledger.directory}) holds no fault; nothing to revert")
        return 0
    print(f"kdrill recover: {len(entries)} fault(s) in {ledger.directory}")
    results = recover(ledger, cluster_for_entry)
    for r in results:
        print(f"  {'reverted' if r['reverted'] else 'NOT REVERTED'}  {r['kind']}  {r['id']}"
              + (f"  ({r['error']})" if r["error"] else ""))
    return 0 if all(r["reverted"] for r in results) else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    from harness.doctor import checks

    problems = 0
    for check in checks():
        mark = "ok  " if check.ok else "FAIL"
        print(f"{mark} {check.name}: {check.detail}")
        if not check.ok:
            problems += 1
            print(textwrap.indent(f"fix: {check.fix}", "       "))
    return 1 if problems else 0


def cmd_images(args: argparse.Namespace) -> int:
    from harness.images import Build, BuildError, image_sizes

    build = Build()
    if args.action == "status":
        for s in build.status():
            print(f"{'built' if s['built'] else 'to do':6} {s['step']:16} {s['key']}  {s['image'] or ''}")
        return 0
    try:
        spent = build.build_all()
    except BuildError as exc:
        print(f"kdrill images build: {exc}", file=sys.stderr)
        return 1
    total = sum(spent.values())
    print(f"kdrill images build: done in {total:.0f} s of build steps "
          f"({sum(1 for v in spent.values() if v == 0)} of {len(spent)} steps cached)")
    for tag, size in image_sizes([build.node_image, build.haproxy_image, build.tags["toolbox"]]).items():
        print(f"  {tag}: {size / 1e6:.0f} MB")
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    from harness.health import unhealthy
    from harness.providers.kind import KindProvider

    provider = KindProvider(args.config, name=args.name)
    if args.action == "create":
        if provider.exists():
            print(f"kind cluster {provider.name} exists; reusing it")
        else:
            print(f"kind cluster {provider.name} created in {provider.create():.0f} s")
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
    print("\n".join(problems) or f"kind cluster {provider.name}: every node Ready, every kube-system pod Running")
    return 1 if problems else 0


def cmd_report(args: argparse.Namespace) -> int:
    run_dir = _run_dir(args.reports, args.run)
    if not report_and_manifest(run_dir):
        return 1
    print(f"{run_dir / 'report.html'}\n{run_dir / 'manifest.json'}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from harness.manifest import ManifestError, verify_manifest

    run_dir = _run_dir(args.reports, args.run)
    try:
        result = verify_manifest(run_dir)
    except ManifestError as exc:
        print(f"kdrill verify: {exc}", file=sys.stderr)
        return 2
    print(f"kdrill verify {run_dir}: {'intact' if result.ok else 'CHANGED'}")
    if not result.ok:
        print(result.summary())
    return 0 if result.ok else 1


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kdrill", description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--reports", default=os.environ.get("KDRILL_REPORTS", str(REPO_ROOT / "reports")),
                   help="evidence root; each run writes <reports>/<run-id>/ (default: reports/)")
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run drills and write the evidence")
    run.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="scenario names or files (default: all)")
    run.add_argument("--run-id")
    run.add_argument("--scenarios-dir", default=str(SCENARIOS_DIR),
                     help="read scenarios from here (e.g. a copy with other bounds); default: scenarios/")
    run.add_argument("--cluster-name", help="kind cluster name (default: the config's; reused if it exists)")
    run.add_argument("--keep-cluster", action="store_true", help="keep the kind cluster this run creates")
    run.add_argument("--kubeconfig", help="run against an existing cluster (no node access)")
    run.add_argument("--context", help="context in --kubeconfig (default: current)")
    run.add_argument("--allow-context", action="append", default=[],
                     help="let destructive drills run on this non-kind context")
    run.set_defaults(func=cmd_run)

    ls = sub.add_parser("list", help="list scenarios, or with --claims the documented claims")
    ls.add_argument("--claims", action="store_true")
    ls.set_defaults(func=cmd_list)

    rec = sub.add_parser("recover", help="revert every fault still in the ledger")
    rec.add_argument("--ledger-dir")
    rec.set_defaults(func=cmd_recover)

    doc = sub.add_parser("doctor", help="check prerequisites and say how to fix them")
    doc.set_defaults(func=cmd_doctor)

    img = sub.add_parser("images", help="build the offline kind images")
    img.add_argument("action", choices=["build", "status"])
    img.set_defaults(func=cmd_images)

    clu = sub.add_parser("cluster", help="create, delete or check a kind cluster from clusters/")
    clu.add_argument("action", choices=["create", "delete", "status"])
    clu.add_argument("--config", default="ha", help="clusters/<config>.yaml (default: ha)")
    clu.add_argument("--name", help="cluster name (default: the config's)")
    clu.set_defaults(func=cmd_cluster)

    rep = sub.add_parser("report", help="write the HTML report and manifest of a run")
    rep.add_argument("run", help="run id or directory")
    rep.set_defaults(func=cmd_report)

    ver = sub.add_parser("verify", help="check a run's evidence against its manifest")
    ver.add_argument("run", help="run id or directory")
    ver.set_defaults(func=cmd_verify)
    return p


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
        return args.func(args)
    except KeyboardInterrupt:
        print("kdrill: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        from harness.providers import ProviderError
        from harness.scenario import ScenarioError

        if isinstance(exc, (ScenarioError, ProviderError)):
            print(f"kdrill: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
