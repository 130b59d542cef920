#!/usr/bin/env python3
"""Benchmark the offline kind clusters and print the figures.

  python3 clusters/benchmark.py [--config ha] [--name NAME] [--idle-seconds 60] [--keep]

Prints: a warm `kdrill images build` (seconds), image sizes (MB), `kind create cluster` to
control plane ready and to every node Ready (seconds), and the idle cluster's CPU (% of one core)
and memory (MiB) per node container, sampled with `docker stats` over --idle-seconds.
A cluster that already exists under that name is deleted first, so the creation is measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.core import proc  # noqa: E402
from harness.core.waiting import wait_until  # noqa: E402
from harness.kube.health import unhealthy  # noqa: E402
from harness.kube.images import Build, image_sizes  # noqa: E402
from harness.kube.providers.kind import KindProvider  # noqa: E402


def mib(text: str) -> float:
    value = text.split("/")[0].strip()
    units = {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024, "B": 1 / 2**20}
    for unit, factor in units.items():
        if value.endswith(unit):
            return float(value[: -len(unit)]) * factor
    return float(value)


def docker_stats(containers: list[str]) -> dict[str, tuple[float, float]]:
    out = proc.run(["docker", "stats", "--no-stream", "--format", "{{json .}}", *containers],
                   timeout_seconds=120).stdout
    stats = {}
    for line in out.splitlines():
        row = json.loads(line)
        stats[row["Name"]] = (float(row["CPUPerc"].rstrip("%")), mib(row["MemUsage"]))
    return stats


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="ha")
    parser.add_argument("--name")
    parser.add_argument("--idle-seconds", type=float, default=60)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()

    build = Build()
    started = time.monotonic()
    build.build_all()
    print(f"warm kdrill images build: {time.monotonic() - started:.1f} s")
    for tag, size in image_sizes([build.node_image, build.haproxy_image, *build.tags.values()]).items():
        print(f"image {tag}: {size / 1e6:.0f} MB")

    provider = KindProvider(args.config, name=args.name)
    if provider.exists():
        provider.delete()
    started = time.monotonic()
    create_seconds = provider.create()
    cluster = provider.cluster()
    ready = wait_until(lambda: unhealthy(cluster) == [], 600, interval_seconds=1.0)
    total = time.monotonic() - started
    print(f"kind create cluster ({args.config}): control plane ready after {create_seconds:.1f} s; "
          f"every node Ready and every kube-system pod Running after {total:.1f} s" + ("" if ready.ok else " (NOT healthy)"))

    containers = provider.nodes()
    samples: dict[str, list[tuple[float, float]]] = {c: [] for c in containers}
    deadline = time.monotonic() + args.idle_seconds
    while time.monotonic() < deadline:  # bounded: one docker stats call (about 2 s) per round
        for name, value in docker_stats(containers).items():
            samples[name].append(value)
    print(f"idle over {args.idle_seconds:.0f} s ({len(next(iter(samples.values())))} samples per container):")
    cpu_total = mem_total = 0.0
    for name, values in sorted(samples.items()):
        cpu = statistics.mean(v[0] for v in values)
        mem = statistics.mean(v[1] for v in values)
        cpu_total, mem_total = cpu_total + cpu, mem_total + mem
        print(f"  {name}: CPU {cpu:.1f} % of a core, memory {mem:.0f} MiB")
    print(f"  cluster: CPU {cpu_total:.1f} % of a core, memory {mem_total:.0f} MiB")
    if not args.keep:
        provider.delete()
    return 0


if __name__ == "__main__":
    sys.exit(main())
