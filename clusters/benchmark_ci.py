#!/usr/bin/env python3
"""Benchmark CI as CI runs it: ``bash .ci/run`` in a fresh clone of this checkout's HEAD, and print
its figures against the budgets (50 minutes cold, 35 with the images cached).

  python3 clusters/benchmark_ci.py [--cold] [--keep-clone]

The clone is made beside this checkout (``.ci/run`` finds ``../shared/`` there). --cold first moves
the image build's cache (~/.cache/kdrill) and Go's caches aside and removes the images the build
makes from Docker, as on a new machine; the caches the run builds are kept (the ones moved aside
are deleted when the run passed, put back otherwise). kind clusters must not exist (CI starts with
none); afterwards this checkout is installed again in editable mode (.ci/run installs the clone). Prints each CI step's seconds
(from its ``ci: [N s]`` lines), the tests' time by tier part (from its ``ci-times:`` lines), the
total, and whether it is within budget. Exits with .ci/run's code.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(CHECKOUT))

from harness.kube.images import cache_dir  # noqa: E402

BUDGET_SECONDS = {"cold": 50 * 60, "warm": 35 * 60}
# Made by `kdrill images build`, as tagged (harness/kube/images.py); removed for a cold run.
BUILT_IMAGE_PREFIXES = ("kdrill/", "registry.k8s.io/", "kindest/", "docker.io/kdrill/", "docker.io/kindest/")


def go_env(name: str) -> Path | None:
    try:
        value = subprocess.run(["go", "env", name], capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return Path(value) if value else None


def caches() -> list[Path]:
    found = [cache_dir(), go_env("GOCACHE"), go_env("GOMODCACHE")]
    return [p for p in found if p is not None and p.exists()]


def remove_tree(path: Path) -> None:
    """Delete a tree, Go's read-only module cache included."""
    subprocess.run(["chmod", "-R", "u+w", str(path)], capture_output=True, timeout=600)
    shutil.rmtree(path)


def put_back(moved: dict[Path, Path], keep_new: bool) -> None:
    """After a cold run: keep the caches it built and drop the old ones when it passed; otherwise
    drop what it built and put the old ones back."""
    for original, aside in moved.items():
        if keep_new and original.exists():
            remove_tree(aside)
            continue
        if original.exists():
            remove_tree(original)
        shutil.move(str(aside), str(original))
    for parent in {aside.parent for aside in moved.values()}:
        parent.rmdir()  # empty by now


def move_aside(paths: list[Path], aside: Path) -> dict[Path, Path]:
    moved = {}
    for n, path in enumerate(paths):
        target = aside / f"{n}-{path.name}"
        aside.mkdir(parents=True, exist_ok=True)
        shutil.move(str(path), str(target))
        moved[path] = target
    return moved


def remove_built_images() -> int:
    listed = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True,
                            text=True, timeout=120).stdout.split()
    images = [i for i in listed if i.startswith(BUILT_IMAGE_PREFIXES)]
    if images:
        subprocess.run(["docker", "rmi", "-f", *images], capture_output=True, text=True, timeout=600)
    return len(images)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cold", action="store_true", help="no image build cache, no Go caches, no images")
    parser.add_argument("--keep-clone", action="store_true")
    args = parser.parse_args()
    stamp = time.strftime("%Y%m%dT%H%M%S")
    clone = CHECKOUT.parent / f"kdrill-ci-{stamp}"
    subprocess.run(["git", "clone", "--quiet", str(CHECKOUT), str(clone)], check=True, timeout=600)
    nodes = subprocess.run(["docker", "ps", "-aq", "--filter", "label=io.x-k8s.kind.cluster"], capture_output=True,
                           text=True, timeout=60).stdout.split()
    if nodes:
        raise SystemExit(f"benchmark_ci: {len(nodes)} kind node container(s) exist: CI starts on a machine with no "
                         "cluster; delete them first (kdrill cluster delete, kind delete clusters --all)")
    moved: dict[Path, Path] = {}
    log = clone.parent / f"kdrill-ci-{stamp}.log"
    code = 1
    try:
        if args.cold:
            moved = move_aside(caches(), CHECKOUT.parent / f"kdrill-ci-aside-{stamp}")
            print(f"cold: moved aside {', '.join(map(str, moved)) or 'nothing'}; removed {remove_built_images()} "
                  "image(s)", flush=True)
        env = {**os.environ, "CI": "true"}
        started = time.monotonic()
        with log.open("w") as out:
            code = subprocess.run(["bash", ".ci/run"], cwd=clone, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                  stderr=subprocess.STDOUT).returncode
        wall = time.monotonic() - started
    finally:
        put_back(moved, keep_new=code == 0)
        # .ci/run installed the clone in editable mode: this checkout again.
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", str(CHECKOUT)], capture_output=True,
                       timeout=600)
    text = log.read_text(errors="replace")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True,
                            text=True).stdout.strip()
    kind = "cold" if args.cold else "warm"
    print(f".ci/run on a fresh clone of {commit} ({kind}), log {log}")
    steps = [(int(s), name) for s, name in re.findall(r"^ci: \[(\d+) s\] (.*)$", text, re.M)]
    for (at, name), (following, _) in zip(steps, steps[1:] + [(int(wall), "end")]):
        print(f"  {following - at:6d} s  {name}")
    for line in re.findall(r"^ci-times: (.*)$", text, re.M):
        print(f"  tests: {line}")
    closing = [line for line in text.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    if closing:
        print(f"  pytest: {closing[-1].strip('= ')}")
    budget = BUDGET_SECONDS[kind]
    print(f"  total {wall:.0f} s ({wall / 60:.1f} min) against a {kind} budget of {budget / 60:.0f} min: "
          f"{'within' if wall <= budget else 'OVER'}; exit {code}")
    if not args.keep_clone:
        shutil.rmtree(clone, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
