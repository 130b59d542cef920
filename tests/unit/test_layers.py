"""The house in layers: harness/ imports only downward ([tool.importlinter] in pyproject.toml),
and no import, at a module's top or inside a function, closes a cycle."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command as c; "
                "sys.exit(c())", "--no-cache"]


def test_harness_keeps_its_layers():
    result = subprocess.run(LINT_IMPORTS, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "1 kept, 0 broken" in result.stdout


def test_an_upward_import_breaks_the_layers(tmp_path):
    """The contract can fail: a copy of harness/ whose core imports the CLI is refused, naming it."""
    shutil.copytree(REPO / "harness", tmp_path / "harness", ignore=shutil.ignore_patterns("__pycache__", "_data"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    files = tmp_path / "harness" / "core" / "files.py"
    files.write_text(files.read_text() + "\n\ndef _upward():\n    from harness.cli import main\n    return main\n")
    result = subprocess.run(LINT_IMPORTS, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path), "HOME": str(tmp_path)})
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]
    assert "harness.core is not allowed to import harness.cli" in result.stdout
    assert "harness.core.files -> harness.cli" in result.stdout


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_closes_a_cycle():
    """grimp reads every import statement, those inside functions too: none may hide a cycle."""
    graph = grimp.build_graph("harness", cache_dir=None)
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    assert _cycles(edges) == []


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
