"""Unit tests for harness.manifest: sealing a run's evidence and verifying it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from harness import manifest as manifest_mod
from harness.manifest import MANIFEST_NAME, ManifestError, file_digest, verify_manifest, write_manifest
from harness.report import build_report

T0 = 1_700_000_000.0


def write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")


def make_run(run_dir: Path) -> Path:
    """A run as the plugin leaves it: records, timeline, junit, allure, logs, report."""
    write(run_dir / "run.json", {"run_id": "20250101T000000Z-abc123", "started_at": T0, "user": "u"})
    write(
        run_dir / "control-plane-stop.json",
        {
            "run_id": "20250101T000000Z-abc123", "drill": "control-plane-stop", "case": None,
            "title": "Control plane stop", "claim": "Pods keep serving.", "verdict": "passed",
            "started_at": T0, "finished_at": T0 + 30, "duration_seconds": 30.0,
            "probes": {"http": {"samples": 3}},
            "evidence_files": {"timeline": "control-plane-stop.timeline.json"},
        },
    )
    write(
        run_dir / "control-plane-stop.timeline.json",
        {"http": [{"t": T0 + i, "ok": True, "latency_seconds": 0.01} for i in range(3)]},
    )
    write(run_dir / "junit.xml", '<?xml version="1.0"?><testsuites tests="1"/>\n')
    for i in range(5):
        write(run_dir / "allure-results" / f"{i:04d}-result.json", {"name": f"test {i}", "status": "passed"})
    write(run_dir / "allure-results" / "attachment-1.txt", "probe log\n" * 50)
    write(run_dir / "logs" / "kind" / "kdrill-worker" / "kubelet.log", "I0101 kubelet started\n" * 100)
    write(run_dir / "logs" / "manifest.json", {"not": "the run manifest"})  # nested name clash
    build_report(run_dir)
    write_manifest(run_dir)
    return run_dir


def flip_one_byte(path: Path, offset: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return make_run(tmp_path / "20250101T000000Z-abc123")


def test_manifest_lists_every_file_but_itself(run_dir: Path) -> None:
    data = json.loads((run_dir / MANIFEST_NAME).read_text())
    assert data["run_id"] == "20250101T000000Z-abc123"
    assert data["algorithm"] == "sha256"
    assert data["created_at"].endswith("Z")
    on_disk = sorted(
        p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file() and p.name != MANIFEST_NAME
    ) + ["logs/manifest.json"]
    assert sorted(data["files"]) == sorted(on_disk)
    assert list(data["files"]) == sorted(data["files"])
    assert MANIFEST_NAME not in data["files"]
    assert "report.html" in data["files"]
    assert "allure-results/0003-result.json" in data["files"]
    for rel, entry in data["files"].items():
        content = (run_dir / rel).read_bytes()
        assert entry == {"sha256": hashlib.sha256(content).hexdigest(), "bytes": len(content)}


def test_untouched_run_verifies(run_dir: Path) -> None:
    result = verify_manifest(run_dir)
    assert result.ok
    assert (result.changed, result.missing, result.added) == ([], [], [])
    assert result.checked == 13
    assert result.summary().startswith("OK: 13 files")
    assert not list(run_dir.glob(".manifest.*")), "temporary file left behind"


@pytest.mark.parametrize(
    "rel",
    [
        "control-plane-stop.json",
        "control-plane-stop.timeline.json",
        "run.json",
        "report.html",
        "junit.xml",
        "allure-results/0003-result.json",
        "allure-results/attachment-1.txt",
        "logs/kind/kdrill-worker/kubelet.log",
        "logs/manifest.json",
    ],
)
def test_one_changed_byte_is_named(run_dir: Path, rel: str) -> None:
    path = run_dir / rel
    flip_one_byte(path, offset=path.stat().st_size // 2)
    result = verify_manifest(run_dir)
    assert not result.ok
    assert result.changed == [rel]
    assert result.missing == [] and result.added == []
    assert result.summary() == f"changed: {rel}"


def test_changed_size_is_named(run_dir: Path) -> None:
    with (run_dir / "junit.xml").open("a") as fh:
        fh.write(" ")
    assert verify_manifest(run_dir).changed == ["junit.xml"]


def test_deleted_file_is_missing(run_dir: Path) -> None:
    (run_dir / "allure-results" / "0001-result.json").unlink()
    result = verify_manifest(run_dir)
    assert not result.ok
    assert result.missing == ["allure-results/0001-result.json"]
    assert result.changed == [] and result.added == []
    assert result.summary() == "missing: allure-results/0001-result.json"


def test_added_file_is_reported(run_dir: Path) -> None:
    write(run_dir / "logs" / "extra.log", "later\n")
    write(run_dir / "sneaky.json", {"drill": "x", "verdict": "passed"})
    result = verify_manifest(run_dir)
    assert not result.ok
    assert result.added == ["logs/extra.log", "sneaky.json"]
    assert result.changed == [] and result.missing == []


def test_several_problems_one_line_each(run_dir: Path) -> None:
    flip_one_byte(run_dir / "report.html")
    (run_dir / "junit.xml").unlink()
    write(run_dir / "new.txt", "x")
    result = verify_manifest(run_dir)
    assert result.summary().splitlines() == ["changed: report.html", "missing: junit.xml", "added: new.txt"]


def test_rewriting_the_manifest_reseals(run_dir: Path) -> None:
    write(run_dir / "late.txt", "x")
    assert not verify_manifest(run_dir).ok
    write_manifest(run_dir)
    assert verify_manifest(run_dir).ok


def test_missing_manifest_raises(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    with pytest.raises(ManifestError, match=r"no manifest\.json in .*run"):
        verify_manifest(tmp_path / "run")


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "cannot be read as JSON"),
        (json.dumps({"algorithm": "sha256"}), "no 'files'"),
        (json.dumps({"algorithm": "md5", "files": {}}), "only 'sha256'"),
        (json.dumps({"algorithm": "sha256", "files": {"../x": {"sha256": "00", "bytes": 1}}}), "unsafe path"),
    ],
)
def test_malformed_manifest_raises(tmp_path: Path, content: str, message: str) -> None:
    write(tmp_path / MANIFEST_NAME, content)
    with pytest.raises(ManifestError, match=message):
        verify_manifest(tmp_path)


def test_write_manifest_needs_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="not a directory"):
        write_manifest(tmp_path / "absent")


def test_run_id_falls_back_to_directory_name(tmp_path: Path) -> None:
    write(tmp_path / "r7" / "a.txt", "a")
    data = json.loads(write_manifest(tmp_path / "r7").read_text())
    assert data["run_id"] == "r7"
    assert data["files"] == {"a.txt": {"sha256": hashlib.sha256(b"a").hexdigest(), "bytes": 1}}


def test_digest_streams_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blob = bytes(range(256)) * 4099  # not a multiple of the chunk size
    write(tmp_path / "big.bin", blob)
    reads: list[int] = []
    real_open = Path.open

    class CountingReader:
        def __init__(self, fh):
            self.fh = fh

        def read(self, n=-1):
            assert n > 0, "must not read the whole file at once"
            reads.append(n)
            return self.fh.read(n)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    monkeypatch.setattr(manifest_mod, "_CHUNK_BYTES", 64 * 1024)
    monkeypatch.setattr(Path, "open", lambda self, *a, **k: CountingReader(real_open(self, *a, **k)))
    assert file_digest(tmp_path / "big.bin") == (hashlib.sha256(blob).hexdigest(), len(blob))
    assert len(reads) == len(blob) // (64 * 1024) + 2  # full chunks, the tail, the empty read
