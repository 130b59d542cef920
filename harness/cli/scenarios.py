"""The scenario commands: ``kdrill validate``, ``kdrill new``, ``kdrill list`` and ``kdrill schema``, and the check that
what a scenario names exists (``kdrill run`` makes it too)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from jinja2 import Environment, PackageLoader

from harness import faults, probes
from harness.cli.claims_measured import measured_lines
from harness.cli.output import print_as
from harness.cli.reference import reference_markdown
from harness.cli.refusals import Refused, named_run_dir
from harness.core import resources
from harness.engine.measures import measure_kinds
from harness.spec.claims import format_claims, list_claims
from harness.spec.editor_schema import scenario_json_schema
from harness.spec.scenario import (
    MAX_NAME_LENGTH,
    Scenario,
    ScenarioError,
    check_data_fault,
    load_scenario,
    load_scenarios,
)
from harness.spec.schema import RUNNER_DRILL


def check_references(scenario: Scenario) -> None:
    """What a scenario names must exist: its drill file (among kdrill's own drills, wherever the
    scenario file is), cluster config and fault module. Raises ScenarioError naming the file and
    field."""
    drills = resources.drills_dir()
    drill_file = resources.drill_file(scenario.drill).resolve()
    if not drill_file.is_file() or drills.resolve() not in drill_file.parents:
        raise ScenarioError(scenario.path, "drill", f"an existing test file in {drills}", scenario.drill)
    if not (resources.clusters_dir() / f"{scenario.cluster_config}.yaml").is_file():
        known = ", ".join(sorted(p.stem for p in resources.clusters_dir().glob("*.yaml")))
        raise ScenarioError(scenario.path, "cluster.config", f"one of {known}", scenario.cluster_config)
    if scenario.runner is not None:  # data-only: the runner's test runs it, its fault builds from data
        check_data_fault(scenario)
        faults.check_params(scenario)
        return
    # A drill runs for the scenarios its tests are marked with: a new name needs a test of its own.
    marked = set(re.findall(r"""mark\.scenario\(\s*["']([a-z0-9-]+)["']""", drill_file.read_text(encoding="utf-8")))
    if scenario.name not in marked:
        raise ScenarioError(scenario.path, "name", f"a scenario that a test in {scenario.drill} is marked with "
                            f"(@pytest.mark.scenario: {', '.join(sorted(marked)) or 'none'}); a copy with other "
                            "bounds keeps its name, a new name needs a test of its own", repr(scenario.name))
    try:
        faults.fault_class(scenario.fault_kind)
    except faults.FaultError as exc:
        raise ScenarioError(scenario.path, "fault.kind", f"a fault kind with a module in harness/faults ({exc})",
                            scenario.fault_kind) from None
    faults.check_params(scenario)


def cmd_validate(args: argparse.Namespace) -> int:
    """Check each scenario file as ``kdrill run`` would before touching anything; exit 2 if any
    is refused (each refusal names file, field, expected and got)."""
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
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", args.name) or len(args.name) > MAX_NAME_LENGTH:
        raise Refused(f"kdrill new: name {args.name!r}: expected lowercase letters and digits in words joined "
                      f"by single '-', at most {MAX_NAME_LENGTH} characters")
    directory = Path(args.dir)
    # The nearest part of --dir that exists must be a directory; only --dir itself may be made (a
    # mistyped parent would otherwise be made silently, as a whole new tree).
    existing = next((p for p in (directory, *directory.parents) if p.exists() or p.is_symlink()), None)
    if existing is not None and not existing.is_dir():
        got = "a broken symbolic link" if not existing.exists() else "a file"
        raise Refused(f"kdrill new: --dir {args.dir}: expected a directory, got {got}"
                      + ("" if existing == directory else f" ({existing})"))
    if existing not in (directory, directory.parent):
        raise Refused(f"kdrill new: --dir {args.dir}: expected an existing directory, or a new one in an existing "
                      f"directory, got one whose parent {directory.parent} does not exist")
    path = directory / f"{args.name}.yaml"
    if path.exists() or path.is_symlink():
        raise Refused(f"kdrill new: {path} exists; choose another name or --dir")
    kinds = [k for k in faults.fault_kinds() if faults.data_usable(faults.fault_class(k))]
    text = Environment(loader=PackageLoader("harness", "templates"), keep_trailing_newline=True).get_template(
        "scenario.yaml.j2").render(name=args.name, path=path, kinds=", ".join(kinds),
                                   fault_params=[_fault_params_line(k) for k in kinds],
                                   measures=", ".join(measure_kinds()),
                                   probe_kinds=", ".join(sorted(probes.probe_types())))
    path.parent.mkdir(exist_ok=True)
    with path.open("x", encoding="utf-8") as out:
        out.write(text)
    print(f"wrote {path}: fill in the TODOs, then `kdrill validate {path}` and "
          f"`kdrill run --plan --scenarios-dir {directory} {args.name}`")
    return 0


def _fault_params_line(kind: str) -> str:
    """One line of the skeleton's comment on a fault kind: its parameters (required ones starred),
    the marks it offers and the facts it reads, each with its unit."""
    fault = faults.fault_class(kind)
    return (f"{kind}: " + ", ".join(f"{name}{'*' if param.required else ''}" for name, param in fault.params.items())
            + (f"; marks: {', '.join(sorted(fault.marks_offered))}" if fault.marks_offered else "")
            + (f"; facts: {', '.join(f'{n} ({unit})' for n, (unit, _) in sorted(fault.facts_offered.items()))}"
               if fault.facts_offered else ""))


def cmd_list(args: argparse.Namespace) -> int:
    """The scenarios (or their claims) in ``--scenarios-dir``, as ``kdrill run`` would find them."""
    directory = Path(args.scenarios_dir) if args.scenarios_dir else resources.scenarios_dir()
    if not directory.is_dir():
        raise Refused(f"kdrill list: --scenarios-dir {directory} is not a directory")
    if not any(directory.glob("*.yaml")) and not any(directory.glob("*.yml")):
        raise Refused(f"kdrill list: --scenarios-dir {directory}: expected scenario files (*.yaml), got none")
    if args.claims and args.output:
        raise Refused("kdrill list: --claims is a table for people; -o gives the scenarios, claims included")
    if args.run is not None and not args.claims:
        raise Refused("kdrill list: --run goes with --claims (what that run measured, beside each claim)")
    if args.claims:
        measured, run, unread = None, "", []
        if args.run is not None:
            try:
                run_dir = named_run_dir(args.reports, args.run)
            except SystemExit as exc:  # a run id or directory that is not a run: refused input
                raise Refused(f"kdrill list: --run: {exc.code}") from None
            (measured, unread), run = measured_lines(run_dir), run_dir.name
        print(format_claims(list_claims(directory), measured, run))
        for line in unread:
            print(f"kdrill list: run {run}: record not read: {line}", file=sys.stderr)
        return 0
    if args.output:
        print_as(args.output, [{"path": str(s.path), **s.to_dict()} for s in load_scenarios(directory)])
        return 0
    for s in load_scenarios(directory):
        node = (" (needs node access)" if s.needs_node_access else "") + (" (runs only when named)" if s.on_request else "")
        print(f"{s.name:28} {s.title}{node}\n{'':28} fault {s.fault_kind}; cluster {s.cluster_config}; "
              f"{drill_kind(s.drill)}")
    return 0


def drill_kind(drill: str) -> str:
    """How ``kdrill list`` names what runs a scenario: the runner for a data-only scenario, else the
    Python drill's file name (kdrill's own, installed with it: not a path the reader has)."""
    return "data, on the runner" if drill == RUNNER_DRILL else f"Python drill {Path(drill).name}"


def cmd_schema(args: argparse.Namespace) -> int:
    """The scenario format as a JSON Schema on stdout (harness/spec/editor_schema.py), or with
    ``--markdown`` the fault, probe and measure reference (harness/cli/reference.py)."""
    if args.markdown:
        print(reference_markdown(), end="")
        return 0
    print(json.dumps(scenario_json_schema(), indent=2, sort_keys=True))
    return 0
