#!/usr/bin/env python3
"""Benchmark CI as CI runs it: ``bash .ci/run`` in a fresh clone of this checkout's HEAD, and print
its figures against the budgets (50 minutes cold, 35 with the images cached).

  python3 clusters/benchmark_ci.py [--cold] [--keep-clone]

The clone is made beside this checkout (``.ci/run`` finds ``../shared/`` there). --cold first moves
the image build's cache (~/.cache/kdrill) and Go's caches aside and removes the images the build
makes from Docker, as on a new machine; the caches the run builds are kept (the ones moved aside
are deleted once the run has built new ones, put back otherwise). Prints each CI step's seconds
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
BUDGET_SECONDS = {"cold": 50 * 60, "warm": 35 * 60}
# Made by `kdrill images build`, as tagged (harness/images.py); removed for a cold run.
BUILT_IMAGE_PREFIXES = ("kdrill/", "registry.k8s.io/", "kindest/", "docker.io/kdrill/", "docker.io/kindest/")


def go_env(name: str) -> Path | None:
    try:
        value = subprocess.run(["go", "env", name], capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return Path(value) if value else None


def caches() -> list[Path]:
    found = [Path.home() / ".cache" / "kdrill", go_env("GOCACHE"), go_env("GOMODCACHE")]
    return [p for p in found if p is not None and p.exists()]


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
    moved: dict[Path, Path] = {}
    if args.cold:
        moved = move_aside(caches(), CHECKOUT.parent / f"kdrill-ci-aside-{stamp}")
        print(f"cold: moved aside {', '.join(map(str, moved)) or 'nothing'}; removed {remove_built_images()} image(s)")
    log = clone.parent / f"kdrill-ci-{stamp}.log"
    env = {**os.environ, "CI": "true"}
    started = time.monotonic()
    with log.open("w") as out:
        code = subprocess.run(["bash", ".ci/run"], cwd=clone, env=env, stdin=subprocess.DEVNULL, stdout=out,
                              stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - started
    text = log.read_text(errors="replace")
    for original, target in moved.items():
        if original.exists():
            shutil.rmtree(target, ignore_errors=True)
        else:
            shutil.move(str(target), str(original))
    kind = "cold" if args.cold else "warm"
    print(f".ci/run on a fresh clone of {subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=CHECKOUT, capture_output=True, text=True).stdout.strip()} ({kind}), log {log}")
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
