"""Fixtures for rendering the HTML report in a real headless Chromium.

The run directory is synthetic (hand-written records shaped like the drills'
evidence): the report is a pure function of those files, so no cluster is
needed to check that it renders.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path
from typing import Callable

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_MISSING = "install Debian's chromium: apt-get install -y chromium"
T0 = 1_732_900_000.0  # epoch seconds; an arbitrary fixed start


def _write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def _samples(
    start: float, end: float, every: float, fault: tuple[float, float], base_latency: float, timeout: float | None = None
) -> list[dict]:
    out = []
    n = int((end - start) / every)
    for i in range(n):
        t = start + i * every
        in_fault = fault[0] + 2 <= t <= fault[1] + 1
        ok = not in_fault or i % 7 == 0
        latency = timeout if not ok else base_latency * (1 + 0.3 * math.sin(i / 9)) * (3 if in_fault else 1)
        out.append({"t": t, "ok": ok, "latency_seconds": latency, "detail": "" if ok else "connection refused", "labels": {}})
    return out


def make_run(run_dir: Path) -> Path:
    """Writes a two-drill run (one passed, one failed) to ``run_dir``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    run_id = run_dir.name
    _write(
        run_dir / "run.json",
        {
            "run_id": run_id,
            "started_at": T0 - 5,
            "finished_at": T0 + 260,
            "user": "auditor",
            "host": "ci-runner-3",
            "git_commit": "3f2a9c1d0e7b",
            "git_dirty": False,
            "kdrill_version": "0.1.0",
            "python": "3.11.7",
            "command": ["kdrill", "run", "--all"],
        },
    )
    cluster = {
        "name": "kdrill",
        "provider": "kind",
        "kubernetes_version": "v1.31.2",
        "context": "kind-kdrill",
        "nodes": [
            {"name": "kdrill-control-plane", "roles": ["control-plane"], "kubelet_version": "v1.31.2"},
            {"name": "kdrill-worker", "roles": ["worker"], "kubelet_version": "v1.31.2"},
            {"name": "kdrill-worker2", "roles": ["worker"], "kubelet_version": "v1.31.2"},
        ],
    }
    drills = [
        ("node-kubelet-stop", None, "passed", 0.0, 120.0, (30.0, 75.0)),
        ("coredns-outage", "all-replicas", "failed", 125.0, 120.0, (20.0, 60.0)),
    ]
    for drill, case, verdict, offset, length, (f_in, f_out) in drills:
        start = T0 + offset
        stem = drill if case is None else f"{drill}--{case}"
        failed = verdict == "failed"
        timeline = {
            "service-http": _samples(start, start + length, 0.05, (start + f_in, start + f_out), 0.004),
            "dns-lookup": _samples(start, start + length, 0.5, (start + f_in, start + f_out), 0.002, timeout=0.01),
            "idle-probe": [],
        }
        _write(run_dir / f"{stem}.timeline.json", timeline)
        probes = {}
        for name, samples in timeline.items():
            ok = sum(1 for s in samples if s["ok"])
            probes[name] = {
                "samples": len(samples),
                "successes": ok,
                "failures": len(samples) - ok,
                "success_ratio": (ok / len(samples)) if samples else None,
                "longest_gap_seconds": (f_out - f_in) if samples else None,
                "first_sample_at": samples[0]["t"] if samples else None,
                "last_sample_at": samples[-1]["t"] if samples else None,
                "latency_p50_seconds": 0.004 if samples else None,
                "latency_p99_seconds": 0.011 if samples else None,
            }
        _write(
            run_dir / f"{stem}.json",
            {
                "run_id": run_id,
                "drill": drill,
                "case": case,
                "title": f"{drill.replace('-', ' ').capitalize()} <drill>",
                "claim": "When a node's kubelet stops, the node becomes NotReady after the node monitor grace "
                "period & pods are evicted; Services keep answering from the remaining endpoints.",
                "verdict": verdict,
                "started_at": start,
                "finished_at": start + length,
                "duration_seconds": length,
                "cluster": cluster,
                "fault": {
                    "kind": "kubelet-stop",
                    "method": "systemctl stop kubelet (docker exec)",
                    "params": {"node": "kdrill-worker", "signal": "SIGTERM"},
                    "where": ["kdrill-worker", {"node": "kdrill-worker", "unit": "kubelet.service"}],
                    "injected_at": start + f_in,
                    "reverted_at": start + f_out,
                    "revert_verified": not failed,
                },
                "phases": [
                    {"name": "baseline", "started_at": start, "ended_at": start + f_in},
                    {"name": "fault", "started_at": start + f_in, "ended_at": start + f_out},
                    {"name": "recovery", "started_at": start + f_out, "ended_at": start + length},
                ],
                "expectations": [
                    {
                        "name": "node_not_ready_within",
                        "description": "Node is reported NotReady within the grace period",
                        "bound": {"op": "<=", "value": 50},
                        "bound_text": "<= 50",
                        "unit": "s",
                        "measured": 41.2,
                        "verdict": "passed",
                        "became_true_at": start + f_in + 41.2,
                        "detail": "Ready=Unknown at +71.2 s",
                        "phase": "fault",
                    },
                    {
                        "name": "service_availability",
                        "description": "Service success ratio during the fault",
                        "bound": {"op": ">=", "value": 0.99},
                        "bound_text": ">= 0.99",
                        "unit": "",
                        "measured": 0.71 if failed else 0.995,
                        "verdict": verdict,
                        "became_true_at": None,
                        "detail": "endpoints not removed <script>alert(1)</script>" if failed else "",
                        "phase": "fault",
                    },
                    {
                        "name": "recovered_after_revert",
                        "description": "Node Ready again after revert",
                        "bound": {"op": "<=", "value": 60},
                        "bound_text": "<= 60",
                        "unit": "s",
                        "measured": None if failed else 12.0,
                        "verdict": "error" if failed else "passed",
                        "became_true_at": None if failed else start + f_out + 12,
                        "detail": "",
                        "phase": "recovery",
                    },
                ],
                "probes": probes,
                "observations": {"node_condition_transitions": 3, "evicted_pods": ["web-1", "web-2"]},
                "source": [
                    {
                        "title": "Kubernetes docs: Node status",
                        "url": "https://kubernetes.io/docs/reference/node/node-status/",
                        "section": "Heartbeats",
                    }
                ],
                "scenario": {"name": drill, "nodes": ["kdrill-worker"]},
                "errors": ["revert of kubelet-stop could not be verified: timed out after 60 s"] if failed else [],
                "evidence_files": {"timeline": f"{stem}.timeline.json"},
                "kdrill_version": "0.1.0",
            },
        )
    (run_dir / "junit.xml").write_text('<?xml version="1.0"?><testsuites/>\n', encoding="utf-8")
    return run_dir


@pytest.fixture
def chromium() -> Path:
    if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
        pytest.skip(CHROMIUM_MISSING)
    return CHROMIUM


@pytest.fixture
def synthetic_run(tmp_path: Path) -> Path:
    return make_run(tmp_path / "20241129T170000Z-browser")


def _run_chromium(chromium: Path, profile: Path, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Runs headless Chromium offline (file:// only) with ``args`` appended.

    Raises ``subprocess.TimeoutExpired`` after ``timeout`` seconds.
    """
    cmd = [
        str(chromium),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--hide-scrollbars",
        # Any host lookup fails: the report may only use its own file:// URL.
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL)


@pytest.fixture
def run_chromium(chromium: Path, tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run_chromium(*args)``: headless Chromium with a fresh profile per call."""
    calls = 0

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        nonlocal calls
        calls += 1
        return _run_chromium(chromium, tmp_path / f"chromium-profile-{calls}", *args)

    return run
