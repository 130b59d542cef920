"""Which drills a change affects, from the imports: ``python3 -m harness.cli.affected [--base REV]``.

A scenario depends on its file, its drill file (the runner's test for a data-only scenario), the
pytest plugin, its kind config, the report's templates, its fault kind's module and its probe kinds'
modules, and on every module of ``harness`` those import, directly or through others (imports
inside functions and relative imports count). A changed file among them affects it.
Prints the affected scenarios, one a line, and the ``kdrill run`` that runs them; nothing when none.
"""

from __future__ import annotations

import argparse
import ast
import functools
import subprocess
import sys
from pathlib import Path

from harness.core import resources
from harness.core.entry_points import installed
from harness.spec.scenario import load_scenarios

PACKAGE = "harness"


def module_path(module: str, root: Path) -> Path | None:
    """The file of a ``harness`` module under ``root`` (the checkout), or None."""
    base = root / Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.lru_cache(maxsize=None)
def imported_modules(path: Path, root: Path) -> frozenset[Path]:
    """The files of the ``harness`` modules ``path`` imports (anywhere in it, packages' too)."""
    found: set[Path] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, path, root)
            names = [module] + [f"{module}.{a.name}" for a in node.names] if module else []
        for name in names:
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                parts = name.split(".")
                for end in range(1, len(parts) + 1):  # a package's __init__ runs too
                    file = module_path(".".join(parts[:end]), root)
                    if file is not None:
                        found.add(file.resolve())
    return frozenset(found)


def _absolute(node: ast.ImportFrom, path: Path, root: Path) -> str | None:
    """The absolute module name of a ``from ... import``, relative ones resolved against ``path``."""
    if node.level == 0:
        return node.module
    package = path.resolve().relative_to(root.resolve()).parent.parts
    if node.level > 1:
        package = package[: len(package) - (node.level - 1)]
    return ".".join([*package, *([node.module] if node.module else [])]) or None


def closure(start: set[Path], root: Path) -> set[Path]:
    seen, todo = set(), list(start)
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        if path.suffix == ".py":
            todo += imported_modules(path, root) - seen
    return seen


def _entry_file(group: str, kind: str, root: Path) -> set[Path]:
    for ep in installed(group):
        if ep.name == kind:
            file = module_path(ep.value.split(":")[0], root)
            return {file.resolve()} if file else set()
    return set()


def depends_on(scenario, root: Path) -> set[Path]:
    """Every file the scenario's drill runs from (see the module)."""
    # Every drill runs through the pytest plugin (an entry point no drill file imports), on a
    # cluster made from its kind config, and ends in the evidence its templates render.
    start = {scenario.path.resolve(), (root / scenario.drill).resolve(), (root / PACKAGE / "plugin.py").resolve(),
             (root / "clusters" / f"{scenario.cluster_config}.yaml").resolve(),
             *(t.resolve() for t in (root / PACKAGE / "templates").glob("*"))}
    start |= _entry_file("kdrill.faults", scenario.fault_kind, root)
    for probe in (scenario.runner or {}).get("probes") or []:
        start |= _entry_file("kdrill.probes", probe["kind"], root)
    if scenario.runner:
        start |= _entry_file("kdrill.measures", "success_ratio", root)
    return closure(start, root)


def affected(scenarios, changed: list[Path], root: Path) -> list[str]:
    """The names of the scenarios a change to ``changed`` (paths) reaches, in catalogue order."""
    changed_set = {(root / p).resolve() for p in changed}
    return [s.name for s in scenarios if depends_on(s, root) & changed_set]


def changed_files(base: str, root: Path) -> list[Path]:
    """Files changed since ``base`` (committed or not) and files git does not track yet."""
    diff = subprocess.run(["git", "diff", "--name-only", base], cwd=root, capture_output=True, text=True, check=True)
    new = subprocess.run(["git", "ls-files", "--others", "--exclude-standard"], cwd=root, capture_output=True,
                         text=True, check=True)
    return [Path(line) for line in (diff.stdout + new.stdout).splitlines() if line]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m harness.cli.affected", description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD", help="compare the work tree with this git revision (default HEAD)")
    args = parser.parse_args(argv)
    root = resources.checkout()
    if root is None:
        print("harness.cli.affected: needs kdrill's git checkout (it reads the change with git)", file=sys.stderr)
        return 2

    names = affected(load_scenarios(resources.scenarios_dir()), changed_files(args.base, root), root)
    for name in names:
        print(name)
    if names:
        print(f"# run each three times: kdrill run {' '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
