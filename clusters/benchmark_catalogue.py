#!/usr/bin/env python3
"""Benchmark the catalogue: one `kdrill run` from nothing, on one kind cluster or several in
parallel, and print its figures.

  python3 clusters/benchmark_catalogue.py [--clusters N] [--reports DIR] [--write-times PATH] [SCENARIO ...]

Deletes the run's kind clusters first when they exist (kdrill-ha, or kdrill-ha-gw0 ... with
--clusters N), so their creation is in the wall time, then runs `kdrill run` (every scenario, or
those named) into DIR (default: a new temporary directory) and prints: the wall time, each
cluster's creation, each drill case's duration, verdict, the seconds inside its phases (what it
measures) and beyond them (setup, revert, teardown, waits), and cluster, the sums, and the
machine's peak memory in use (MemTotal - MemAvailable, sampled every 5 s). --write-times merges
the passed cases' durations into the file harness/plugin/tiers.py chooses the presubmit tier by.
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

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.core.workers import cluster_name  # noqa: E402
from harness.evidence.report import scan_records  # noqa: E402
from harness.kube.providers.kind import KindProvider  # noqa: E402
from harness.plugin.tiers import case_id, load_times  # noqa: E402


def memory_in_use_mib() -> float:
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    kib = int(fields["MemTotal"].split()[0]) - int(fields["MemAvailable"].split()[0])
    return kib / 1024


OVERHEAD_PHASES = ("setup",)  # a drill's own preparation: not what it measures


def phase_seconds(record: dict) -> float:
    """Seconds inside the record's measuring phases (its windows and named steps, not setup),
    overlaps counted once."""
    spans = sorted((p["started_at"], p["ended_at"]) for p in record.get("phases") or []
                   if isinstance(p, dict) and p.get("name") not in OVERHEAD_PHASES
                   and isinstance(p.get("started_at"), (int, float))
                   and isinstance(p.get("ended_at"), (int, float)) and p["ended_at"] > p["started_at"])
    covered, reach = 0.0, float("-inf")
    for start, end in spans:
        if end > reach:
            covered += end - max(start, reach)
            reach = end
    return covered


def write_times(path: Path, times: dict[str, float], run_id: str) -> None:
    """Merge the passed cases' seconds into the times file harness/plugin/tiers.py chooses presubmit by."""
    known = load_times(path)
    known.update(times)
    path.write_text(f"# Each catalogue case's duration (seconds) in its last passing benchmark run (run {run_id}),\n"
                    "# written by clusters/benchmark_catalogue.py --write-times: what harness/plugin/tiers.py weighs.\n"
                    + yaml.safe_dump({"seconds": dict(sorted(known.items()))}, sort_keys=False))
    print(f"  times of {len(times)} passed case(s) written to {path}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clusters", type=int, default=1)
    parser.add_argument("--reports", type=Path)
    parser.add_argument("--write-times", type=Path, metavar="PATH",
                        help="merge the passed cases' durations into PATH (clusters/times/catalogue.yaml)")
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
    total = measured_total = 0.0
    times: dict[str, float] = {}
    records, unreadable = scan_records(run)
    for path, reason in unreadable:
        print(f"  {path.name}: not a readable record ({reason})")
    print(f"  {'case':42} {'verdict':8} {'duration':>9} {'phases':>8} {'beyond':>8}")
    for path, record in sorted(records, key=lambda pr: pr[0].name):
        seconds = max((record.get("finished_at") or 0) - (record.get("started_at") or 0), 0)
        measured = phase_seconds(record)
        total, measured_total = total + seconds, measured_total + measured
        if record.get("verdict") == "passed" and seconds > 0:
            times[case_id(str(record["drill"]), record.get("case"))] = round(seconds, 1)
        print(f"  {path.stem:42} {record.get('verdict', '?'):8} {seconds:7.0f} s {measured:6.0f} s "
              f"{seconds - measured:6.0f} s  on {(record.get('cluster') or {}).get('name', '?')}")
    print(f"  sum of the cases' durations: {total:.0f} s ({total / 60:.1f} min)")
    if measured_total:
        print(f"  of which the drills' phases (what they measure): {measured_total:.0f} s; beyond them (setup, "
              f"revert, teardown, waits): {total - measured_total:.0f} s, "
              f"{100 * (total - measured_total) / measured_total:.0f} % of the phases")
    if args.write_times and times:
        write_times(args.write_times, times, run.name)
    print(f"  peak memory in use on this machine: {peak[0]:.0f} MiB")
    return status


if __name__ == "__main__":
    sys.exit(main())
