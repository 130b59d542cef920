#!/usr/bin/env python3
"""Benchmark cluster creation: kdrill's against plain kind, alternating, and print the figures.

  python3 clusters/benchmark_create.py [--config ha] [--rounds 2] [--kdrill-only]

Each round deletes the cluster, creates it with ``KindProvider.create`` (kind, then every node
Ready and every kube-system pod Running, then the ClusterIP guard), deletes it, and creates it
with plain ``kind create cluster`` (same config, node image and ``--wait``) followed by the same
health check at the same one-second interval. Prints each creation's seconds, kdrill's own steps,
the transient failures it retried, and the mean time kdrill adds to plain kind (seconds and %).
--kdrill-only: only kdrill's creations (for counting retries over many in a row).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.core import proc  # noqa: E402
from harness.core.waiting import wait_until  # noqa: E402
from harness.kube.health import unhealthy  # noqa: E402
from harness.kube.providers.kind import KindProvider  # noqa: E402
from harness.kube.session_lock import SessionLock  # noqa: E402

WAIT_SECONDS = 300


def plain_kind(provider: KindProvider) -> float:
    """Seconds from ``kind create cluster`` to every node Ready and every kube-system pod Running."""
    started = time.monotonic()
    proc.run([provider.kind, "create", "cluster", "--name", provider.name, "--config", str(provider.config),
              "--image", provider.image, "--wait", f"{WAIT_SECONDS}s"], timeout_seconds=WAIT_SECONDS + 600)
    cluster = provider.cluster()
    healthy = wait_until(lambda: unhealthy(cluster) == [], WAIT_SECONDS, interval_seconds=1.0)
    if not healthy.ok:
        raise SystemExit(f"plain kind: not healthy after {WAIT_SECONDS} s: {healthy.last_error}")
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="ha")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--kdrill-only", action="store_true")
    args = parser.parse_args()
    provider = KindProvider(args.config)
    SessionLock(provider.name).acquire()  # never a cluster a running session drills
    kdrill_times, plain_times, retries = [], [], 0
    for round_number in range(1, args.rounds + 1):
        if provider.exists():
            provider.delete()
        seconds = provider.create(WAIT_SECONDS)
        kdrill_times.append(seconds)
        retries += provider.create_retries
        steps = ", ".join(f"{name} {value:.1f} s" for name, value in provider.create_phases.items())
        print(f"round {round_number}: kdrill {seconds:.1f} s ({steps}; {provider.create_retries} retried)", flush=True)
        provider.delete()
        if not args.kdrill_only:
            plain_times.append(plain_kind(provider))
            print(f"round {round_number}: plain kind {plain_times[-1]:.1f} s", flush=True)
            provider.delete()
    print(f"kdrill: {len(kdrill_times)} creation(s), all passed, {retries} transient failure(s) retried; "
          f"mean {statistics.mean(kdrill_times):.1f} s (min {min(kdrill_times):.1f}, max {max(kdrill_times):.1f})")
    if plain_times:
        mean_plain = statistics.mean(plain_times)
        added = statistics.mean(kdrill_times) - mean_plain
        print(f"plain kind: mean {mean_plain:.1f} s (min {min(plain_times):.1f}, max {max(plain_times):.1f}); "
              f"kdrill adds {added:.1f} s ({100 * added / mean_plain:.1f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
