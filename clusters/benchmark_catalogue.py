#!/usr/bin/env python3
"""Benchmark the catalogue: one `kdrill run` from nothing, on one kind cluster or several in
parallel, and print its figures.

  python3 clusters/benchmark_catalogue.py [--clusters N] [--reports DIR] [SCENARIO ...]

Deletes the run's kind clusters first when they exist (kdrill-ha, or kdrill-ha-gw0 ... with
--clusters N), so their creation is in the wall time, then runs `kdrill run` (every scenario, or
those named) into DIR (default: a new temporary directory) and prints: the wall time, each
cluster's creation, each drill case's duration, verdict and cluster, the sum of the cases'
durations, and the machine's peak memory in use (MemTotal - MemAvailable, sampled every 5 s).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.providers.kind import KindProvider  # noqa: E402
from harness.report import scan_records  # noqa: E402
from harness.workers import cluster_name  # noqa: E402


def memory_in_use_mib() -> float:
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    kib = int(fields["MemTotal"].split()[0]) - int(fields["MemAvailable"].split()[0])
    return kib / 1024


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clusters", type=int, default=1)
    parser.add_argument("--reports", type=Path)
    parser.add_argument("scenarios", nargs="*")
    args = parser.parse_args()
    reports = args.reports or Path(tempfile.mkdtemp(prefix="kdrill-benchmark-"))

    base = KindProvider("ha")
    providers = [base] if args.clusters == 1 else [KindProvider("ha", name=cluster_name(base.name, f"gw{i}"))
                                                   for i in range(args.clusters)]
    for provider in providers:
        if provider.exists():
            print(f"deleting kind cluster {provider.name} first, so that its creation is measured")
            provider.delete()

    peak = [memory_in_use_mib()]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(5):  # bounded by the run: it stops when the run ends
            peak[0] = max(peak[0], memory_in_use_mib())

    threading.Thread(target=sample, daemon=True).start()
    cmd = [sys.executable, "-m", "harness.cli", "--reports", str(reports), "run", *args.scenarios]
    if args.clusters > 1:
        cmd += ["--clusters", str(args.clusters)]
    started = time.monotonic()
    status = subprocess.run(cmd).returncode
    wall = time.monotonic() - started
    done.set()

    runs = sorted(p for p in reports.iterdir() if (p / "run.json").is_file())
    if not runs:
        print(f"kdrill run wrote no run into {reports} (exit {status})")
        return 1
    run = runs[-1]
    meta = json.loads((run / "run.json").read_text())
    print(f"\ncatalogue benchmark, run {run.name} in {reports} (kdrill run exit {status})")
    print(f"  wall time, cluster creation included: {wall:.0f} s ({wall / 60:.1f} min) on {args.clusters} cluster(s)")
    for worker, seen in sorted((meta.get("workers") or {}).items()):
        print(f"  {worker}: cluster {(seen.get('cluster') or {}).get('name')}, created in "
              f"{seen.get('cluster_create_seconds')} s, ran {len(seen.get('ran') or [])} case(s)")
    total = 0.0
    records, unreadable = scan_records(run)
    for path, reason in unreadable:
        print(f"  {path.name}: not a readable record ({reason})")
    for path, record in sorted(records, key=lambda pr: pr[0].name):
        seconds = (record.get("finished_at") or 0) - (record.get("started_at") or 0)
        total += max(seconds, 0)
        print(f"  {path.stem:42} {record.get('verdict', '?'):8} {seconds:6.0f} s  on "
              f"{(record.get('cluster') or {}).get('name', '?')}")
    print(f"  sum of the cases' durations: {total:.0f} s ({total / 60:.1f} min)")
    print(f"  peak memory in use on this machine: {peak[0]:.0f} MiB")
    return status


if __name__ == "__main__":
    sys.exit(main())
