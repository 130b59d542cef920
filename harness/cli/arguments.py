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
  kdrill images build|status   build the offline kind images (cached by content); `build gatekeeper` or `build observability`: that one only
  kdrill cluster create|delete|status   a kind cluster from clusters/ (default: ha)
  kdrill report RUN [--stdout] check that a verified run's sealed report.html re-renders from its
                               evidence (never writes into a sealed run)
  kdrill matrix RUN [-o csv]   the run's failure matrix: per drill its impact, whether the platform's
                               monitoring noticed (detection), the way out it exercised and recovery
  kdrill verify RUN            check reports/RUN's signature, run id and every file (exit 1 on any problem)
  kdrill verify --history [DIR] [--head HEAD]   verify every run in DIR (default: reports/), the chain
                               linking them, and that chain against the head kept elsewhere

Exit status: 0 success; 1 a drill failed, a regression, or (verify, history, report) evidence that
is not intact; 2 bad input refused before anything is touched (a run id or directory that is not a
run, a bad --fingerprint, --public-key, --head or $KDRILL_TRUSTED_FINGERPRINTS, an empty or wrong
--reports, a bad `new` name or --dir);
3 an internal error of kdrill's (one line; the traceback with -v); 130 interrupted.
"""

from __future__ import annotations

import argparse
import functools
import os
from typing import Callable, Mapping

from harness import __version__
from harness.cli.output import OUTPUT_FORMATS
from harness.core.text import escaped
from harness.kube.images import ON_REQUEST

Command = Callable[[argparse.Namespace], int]  # a command's function: its arguments -> the exit status


def path_value(value: str) -> str:
    """An option's path; refuses an empty one, which Path() would take for the current directory."""
    if not value.strip():
        raise argparse.ArgumentTypeError("expected a path, got an empty value")
    return value


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors print what was given escaped for the terminal."""

    def error(self, message: str):
        super().error(escaped(message))


def parser(commands: Mapping[str, Command]) -> argparse.ArgumentParser:
    """kdrill's command line (this module's text is its help), each subcommand bound to its
    function in ``commands`` (subcommand name -> function, as ``args.func``)."""
    # No abbreviations: `run --scenario X` must not silently mean `--scenarios-dir X`.
    p = Parser(prog="kdrill", description=__doc__.split("\n")[0], allow_abbrev=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--reports", default=os.environ.get("KDRILL_REPORTS"),
                   help="evidence root; each run writes <reports>/<run-id>/ (default: $KDRILL_REPORTS, else "
                   "reports/ in the checkout kdrill runs from, or in the current directory for an installed kdrill)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging, and the traceback of an internal error")
    p.add_argument("--version", action="version", version=f"kdrill {__version__}")
    # The global options after the subcommand too (`kdrill history --reports DIR`), as kubectl takes
    # its flags anywhere; SUPPRESS keeps a subcommand's default from overwriting the value given before.
    common = Parser(add_help=False)
    common.add_argument("--reports", default=argparse.SUPPRESS, help="as before the subcommand")
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="as before the subcommand")
    sub = p.add_subparsers(dest="command", required=True, parser_class=functools.partial(
        Parser, allow_abbrev=False, parents=[common]))
    for add in (_add_run, _add_new, _add_validate, _add_schema, _add_compare, _add_history, _add_list, _add_recover,
                _add_doctor, _add_images, _add_cluster, _add_report, _add_matrix, _add_verify):  # in the order `kdrill --help` lists them
        add(sub, commands)
    return p


def _add_run(sub, commands: Mapping[str, Command]) -> None:
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
    run.add_argument("--prometheus", metavar="URL",
                     help="read each drill's detection (which alerts fired, when) from this Prometheus, read only "
                     "(default: the platform profile's own, when it names one)")
    run.add_argument("--prometheus-token-file", metavar="FILE", type=path_value,
                     help="a file holding the bearer token --prometheus wants (or $KDRILL_PROMETHEUS_TOKEN); "
                     "never on the command line")
    run.add_argument("--alertmanager", metavar="URL",
                     help="watch this Alertmanager during each drill, read only: did each expected alert reach it, "
                     "to which receivers, or was it silenced (default: the platform profile's own, when it names one)")
    run.add_argument("--alertmanager-token-file", metavar="FILE", type=path_value,
                     help="a file holding the bearer token --alertmanager wants (or $KDRILL_ALERTMANAGER_TOKEN); "
                     "never on the command line")
    run.add_argument("--plan", action="store_true",
                     help="print what would run (faults, windows, access, expected duration) and touch nothing")
    run.add_argument("-o", "--output", choices=OUTPUT_FORMATS, help="with --plan: the plan as JSON or YAML")
    run.set_defaults(func=commands["run"])


def _add_new(sub, commands: Mapping[str, Command]) -> None:
    new = sub.add_parser("new", help="write a commented data-only scenario skeleton")
    new.add_argument("name", help="the scenario's name: lowercase letters, digits and '-'")
    new.add_argument("--dir", default="scenarios", type=path_value,
                     help="where to write NAME.yaml (default: scenarios/; made if missing, in an existing directory: a directory of "
                     "scenarios alone, as `kdrill run --scenarios-dir` reads every *.yaml in it)")
    new.set_defaults(func=commands["new"])


def _add_validate(sub, commands: Mapping[str, Command]) -> None:
    val = sub.add_parser("validate", help="check scenario files (schema, fault parameters, references); no cluster")
    val.add_argument("files", nargs="+", metavar="FILE", help="scenario files (*.yaml, *.yml)")
    val.set_defaults(func=commands["validate"])


def _add_compare(sub, commands: Mapping[str, Command]) -> None:
    cmp_ = sub.add_parser("compare", help="put every expectation of two runs side by side; exit 1 on a regression")
    cmp_.add_argument("base", help="the baseline run (id under --reports, or a path)")
    cmp_.add_argument("run", help="the run to judge (id under --reports, or a path)")
    cmp_.add_argument("--any-platform", action="store_true",
                      help="compare even when the platform or the kdrill version differ (said in the output)")
    cmp_.add_argument("--json", action="store_true", help="print the comparison as JSON")
    _add_trust(cmp_, "both runs")
    cmp_.set_defaults(func=commands["compare"])


def _add_trust(parser: argparse.ArgumentParser, what: str) -> None:
    """--public-key and --fingerprint: the keys ``what`` must be signed by (else
    $KDRILL_TRUSTED_FINGERPRINTS; harness/cli/verify.py trusted_fingerprints)."""
    parser.add_argument("--public-key", action="append", default=[], metavar="PEM",
                        help=f"{what} must be signed by this Ed25519 public key (repeatable; default: "
                        "$KDRILL_TRUSTED_FINGERPRINTS). Take it from outside the evidence")
    parser.add_argument("--fingerprint", action="append", default=[], metavar="HEX",
                        help=f"{what} must be signed by the key with this SHA-256 fingerprint (repeatable; default: "
                        "$KDRILL_TRUSTED_FINGERPRINTS, comma-separated). Take it from outside the evidence")


def _add_history(sub, commands: Mapping[str, Command]) -> None:
    his = sub.add_parser("history", help="list every run with verdicts, platform and seal; write reports/index.html")
    his.add_argument("-o", "--output", choices=OUTPUT_FORMATS,
                     help="every run as JSON or YAML (index.html is not written)")
    _add_trust(his, "every run")
    his.set_defaults(func=commands["history"])


def _add_schema(sub, commands: Mapping[str, Command]) -> None:
    sch = sub.add_parser("schema", help="print the scenario format as a JSON Schema, for editors (kdrill validate "
                         "stays the authority)")
    sch.add_argument("--markdown", action="store_true",
                     help="the fault, probe and measure reference as Markdown instead (docs/reference.md)")
    sch.set_defaults(func=commands["schema"])


def _add_list(sub, commands: Mapping[str, Command]) -> None:
    ls = sub.add_parser("list", help="list scenarios, or with --claims the documented claims")
    ls.add_argument("--claims", action="store_true", help="the documented claims and which drill checks each")
    ls.add_argument("--run", metavar="RUN", type=path_value, help="with --claims: beside each claim, whether run RUN (an id under "
                    "--reports, or a path to a run directory) confirmed or contradicted it, with what broke it")
    ls.add_argument("-o", "--output", choices=OUTPUT_FORMATS, help="every scenario as JSON or YAML, as loaded")
    ls.add_argument("--scenarios-dir", type=path_value,
                    help="a team's scenarios directory, as for kdrill run (default: the built-in ones)")
    ls.set_defaults(func=commands["list"])


def _add_recover(sub, commands: Mapping[str, Command]) -> None:
    rec = sub.add_parser("recover", help="revert every fault still in the ledger")
    rec.add_argument("--ledger-dir", type=path_value,
                     help="the ledger to revert (default: $KDRILL_STATE_DIR/ledger, else ~/.local/state/kdrill/ledger)")
    rec.add_argument("--force", action="store_true",
                     help="also revert entries whose recording process still seems alive (its pid may be reused)")
    rec.add_argument("--context", help="revert only the entries recorded for this context (a kind cluster's is "
                     "kind-NAME); the others stay in the ledger. Default: every entry, each on the cluster it names")
    rec.add_argument("--kubeconfig", type=path_value,
                     help="reach each existing (non-kind) cluster's entries through this kubeconfig instead of the "
                     "one recorded (moved since); their recorded context must be in it")
    rec.set_defaults(func=commands["recover"])


def _add_doctor(sub, commands: Mapping[str, Command]) -> None:
    doc = sub.add_parser("doctor", help="check prerequisites and say how to fix them")
    doc.set_defaults(func=commands["doctor"])


def _add_images(sub, commands: Mapping[str, Command]) -> None:
    img = sub.add_parser("images", help="build the offline kind images")
    img.add_argument("action", choices=["build", "status"], help="build what is missing, or say what is built")
    # No argparse choices: with nargs="*" it refuses the empty list too (checked in cmd_images).
    img.add_argument("targets", nargs="*", metavar="TARGET",
                     help=f"build only this on-request image: {', '.join(ON_REQUEST)} "
                          "(gatekeeper, observability: for the profiles of those names under clusters/platforms/; "
                          "kubernetes-<version>: another release's node image, for upgrade rehearsals)")
    img.set_defaults(func=commands["images"])


def _add_cluster(sub, commands: Mapping[str, Command]) -> None:
    clu = sub.add_parser("cluster", help="create, delete or check a kind cluster from clusters/")
    clu.add_argument("action", choices=["create", "delete", "status"],
                     help="create (reused if it exists), delete, or say whether it exists and is healthy")
    clu.add_argument("--config", default="ha", help="clusters/<config>.yaml (default: ha)")
    clu.add_argument("--name", help="kind cluster name: lowercase letters, digits, '-', '.', at most 50 characters "
                     "(default: the config's, with --platform's name after it)")
    clu.add_argument("--host-port-offset", type=int, default=0, metavar="N",
                     help="add N to every host port the config maps (another cluster of the same config beside this "
                     "one; NodePorts inside stay as written); default 0")
    clu.add_argument("--kubernetes", metavar="VERSION",
                     help="create the cluster at another release built on request (kdrill images build "
                     "kubernetes-VERSION), e.g. v1.34.4; default: the default build's")
    clu.add_argument("--platform", metavar="DIR",
                     help="build a team's platform profile into the cluster: kubeadm patches, files on the nodes, "
                     "manifests, a CoreDNS Corefile, image archives (harness/platform/profile.py says how DIR is laid "
                     "out; clusters/platforms/example is one)")
    clu.set_defaults(func=commands["cluster"])


def _add_report(sub, commands: Mapping[str, Command]) -> None:
    rep = sub.add_parser("report", help="check that a verified run's sealed report re-renders from its evidence")
    rep.add_argument("run", help="run id under --reports, or a path (with /) to a run directory")
    rep.add_argument("--stdout", action="store_true", help="print the fresh rendering (nothing is written)")
    _add_trust(rep, "the run")
    rep.set_defaults(func=commands["report"])


def _add_matrix(sub, commands: Mapping[str, Command]) -> None:
    mat = sub.add_parser("matrix", help="a run's failure matrix: impact, detection, mitigation, recovery per drill")
    mat.add_argument("run", help="run id under --reports, or a path (with /) to a run directory")
    mat.add_argument("-o", "--output", choices=("csv",) + OUTPUT_FORMATS, help="the matrix as CSV, JSON or YAML")
    mat.set_defaults(func=commands["matrix"])


def _add_verify(sub, commands: Mapping[str, Command]) -> None:
    ver = sub.add_parser("verify", help="check a run's signature, run id and every file, or the chain of runs")
    ver.add_argument("run", nargs="?", help="run id under --reports, or a path (with /) to a run directory")
    ver.add_argument("--history", nargs="?", const="", metavar="REPORTS_DIR",
                     help="verify every run in REPORTS_DIR (default: --reports) and the links between them")
    _add_trust(ver, "the run (every run, with --history)")
    ver.add_argument("--head", metavar="HEAD",
                     help="with --history: the head kept outside the reports directory, a head log file "
                     "($KDRILL_HEAD_LOG's) or RUN_ID:MANIFEST_SHA256; runs deleted after it, or another chain, fail")
    ver.add_argument("-o", "--output", choices=OUTPUT_FORMATS, help="one run's verification as JSON or YAML")
    ver.set_defaults(func=commands["verify"])
