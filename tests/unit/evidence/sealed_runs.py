"""Runs written as the plugin writes them and sealed by the real sealing function, and an
external signer that keeps its key from the runner: what the evidence tests forge."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from harness.evidence.signers import SIGNER_ENV, SIGNER_PUBLIC_KEY_ENV
from harness.spec.scenario import find_scenario

NOBODY = 65534  # the signer's user when the tests run as root
RUNNER = 65533  # another unprivileged user: what a runner that is not root can read

# A signer that keeps its key in DIR (readable by its own user alone) and signs each run id once:
# the run id is read from the manifest it signs (kdrill writes its top-level keys two spaces in).
SIGNER_SCRIPT = r"""set -eu
dir=$1
msg=$(mktemp "$dir/manifest.XXXXXX")
sig=$(mktemp "$dir/signature.XXXXXX")
trap 'rm -f "$msg" "$sig"' EXIT
cat > "$msg"
run_id=$(sed -n 's/^  "run_id": "\(.*\)",$/\1/p' "$msg")
if [ -z "$run_id" ]; then echo "signer: no run id in what I was given" >&2; exit 3; fi
if grep -qxF "$run_id" "$dir/signed-runs" 2>/dev/null; then
  echo "signer: run $run_id was signed before; a run is sealed once" >&2; exit 3
fi
openssl pkeyutl -sign -inkey "$dir/key.pem" -rawin -in "$msg" -out "$sig"
base64 -w0 < "$sig"
echo "$run_id" >> "$dir/signed-runs"
"""


@dataclass
class ExternalSigner:
    """The signer's directory (its key and its log of signed runs), its public key (PEM file),
    the command line given as $KDRILL_SIGNER, the prefix that runs a command as its user, and
    whether that user is another one than this process's."""

    directory: Path
    public_key: Path
    command: str
    as_signer: list[str]
    other_user: bool

    def enable(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv(SIGNER_ENV, self.command)
        monkeypatch.setenv(SIGNER_PUBLIC_KEY_ENV, str(self.public_key))

    @property
    def fingerprint(self) -> str:
        from harness.evidence.signing_keys import read_public_key

        return read_public_key(self.public_key).fingerprint


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)


def make_external_signer() -> Iterator[ExternalSigner]:
    """An external signer for $KDRILL_SIGNER: SIGNER_SCRIPT with an Ed25519 key made by openssl in
    a directory of mode 0700. As root it is uid 65534's (run through setpriv), so this process
    never reads the key; otherwise it is this user's (the other-user tests skip). Skips when
    openssl or base64 is missing."""
    for tool in ("openssl", "base64", "sh"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed: the external signer of these tests is a shell script using it")
    other_user = os.geteuid() == 0 and shutil.which("setpriv") is not None
    as_signer = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] if other_user else []
    # Under /tmp, not pytest's tmp_path: the signer's user must reach its directory through it.
    base = Path(tempfile.mkdtemp(prefix="kdrill-signer-"))
    try:
        base.chmod(0o711)
        directory = base / "signer"
        directory.mkdir(mode=0o700)
        if other_user:
            os.chown(directory, NOBODY, NOBODY)
        script = base / "sign.sh"
        script.write_text(SIGNER_SCRIPT)
        script.chmod(0o755)
        key = directory / "key.pem"
        _run(as_signer + ["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(key)])
        _run(as_signer + ["chmod", "600", str(key)])
        public = base / "signer.pub.pem"
        public.write_text(_run(as_signer + ["openssl", "pkey", "-in", str(key), "-pubout"]).stdout)
        command = shlex.join(as_signer + ["/bin/sh", str(script), str(directory)])
        yield ExternalSigner(directory, public, command, as_signer, other_user)
    finally:
        shutil.rmtree(base, ignore_errors=True)


# --------------------------------------------------------------------------- #
# Runs
# --------------------------------------------------------------------------- #

DRILL = "worker-node-loss"  # a built-in scenario: its bounds have a reference outside the record


def _passing(op: str, value):
    """A measured value that satisfies ``op value``."""
    if isinstance(value, bool) or op in ("==", "<=", ">="):
        return value
    return value - 1 if op == "<" else value + 1


def write_run(run_dir: Path, *, ticket: str = "CHG-1", cluster: str = "kind-kdrill", git_commit: str | None = None,
              finished_at: float | None = None, failing: str | None = None) -> Path:
    """A finished, unsealed run of DRILL as the plugin leaves it: run.json, the record (every
    expectation of the shipped scenario measured within its bound, eviction 29.74 s after the
    taint; ``failing`` names one measured 25 % beyond its bound, failing the drill) and its
    timeline. ``finished_at`` defaults to now (the seal follows the run's end)."""
    scenario = find_scenario(DRILL)
    end = time.time() if finished_at is None else finished_at
    start = end - 300
    expectations = []
    for spec in scenario.expectations:
        measured = 29.74 if spec.name == "eviction_seconds_after_taint" else _passing(spec.bound.op, spec.bound.value)
        verdict = "passed"
        if spec.name == failing:
            measured, verdict = spec.bound.value * 1.25, "failed"
        expectations.append({"name": spec.name, "measured": measured, "bound": spec.bound.to_dict(),
                             "bound_text": spec.bound.describe(), "unit": spec.unit, "verdict": verdict})
    run_dir.mkdir(parents=True)
    run_id = run_dir.name
    meta = {"run_id": run_id, "started_at": start, "finished_at": end, "user": "runner", "ticket": ticket,
            "git_commit": git_commit, "planned": [DRILL], "kdrill_version": "0.1.0"}
    (run_dir / "run.json").write_text(json.dumps(meta, indent=2))
    record = {"run_id": run_id, "drill": DRILL, "case": None, "title": scenario.title, "claim": scenario.claim,
              "verdict": "failed" if failing else "passed", "started_at": start + 10, "finished_at": end - 5, "errors": [],
              "cluster": {"name": cluster, "provider": "kind", "kubernetes_version": "v1.35.4",
                          "nodes": [{"name": "cp", "roles": ["control-plane"]}]},
              "expectations": expectations, "scenario": scenario.to_dict(),
              # as kdrill writes it for a scenario that expects alerts, with no Prometheus to read
              "detection": {"verdict": "not checked", "why": "no Prometheus to read",
                            "expected": [d.to_dict() for d in scenario.detection]},
              "evidence_files": {"timeline": f"{DRILL}.timeline.json"}}
    (run_dir / f"{DRILL}.json").write_text(json.dumps(record, indent=2))
    (run_dir / f"{DRILL}.timeline.json").write_text(json.dumps(
        {"http": [{"t": start + i, "ok": True, "latency_seconds": 0.01} for i in range(3)]}))
    return run_dir


def sealed(run_dir: Path, **kwargs) -> Path:
    """:func:`write_run`, sealed by the real sealing function with the signer the environment names."""
    from harness.evidence.sealing import report_and_manifest

    write_run(run_dir, **kwargs)
    assert report_and_manifest(run_dir) is True
    return run_dir
