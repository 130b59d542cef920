from __future__ import annotations

import json
import os
import re
import socket
import stat

import pytest

from harness.core import ledger as ledger_mod
from harness.core.ledger import Ledger, LedgerEntry, default_ledger_dir, write_json_atomic

CLUSTER = {"provider": "kind", "name": "kdrill-ha", "kubeconfig": "/tmp/kc", "context": "kind-kdrill-ha"}


def test_default_dir_honours_state_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("KDRILL_STATE_DIR", str(tmp_path))
    assert default_ledger_dir() == tmp_path / "ledger"
    monkeypatch.delenv("KDRILL_STATE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_ledger_dir() == tmp_path / "home" / ".local" / "state" / "kdrill" / "ledger"


def test_ledger_uses_default_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("KDRILL_STATE_DIR", str(tmp_path))
    entry = Ledger().record("node-pause", CLUSTER, {"node": "n1"})
    assert (tmp_path / "ledger" / f"{entry.id}.json").is_file()


def test_record_writes_complete_entry_before_returning(tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    entry = ledger.record("control-plane-stop", CLUSTER, {"containers": ["cp1", "cp2"]},
                          drill="control-plane-stop")
    assert re.fullmatch(r"\d{8}T\d{6}Z-control-plane-stop-[0-9a-f]{8}", entry.id)
    path = tmp_path / "ledger" / f"{entry.id}.json"
    assert entry.path == path
    on_disk = json.loads(path.read_text())
    assert on_disk["kind"] == "control-plane-stop"
    assert on_disk["cluster"] == CLUSTER
    assert on_disk["target"] == {"containers": ["cp1", "cp2"]}
    assert on_disk["drill"] == "control-plane-stop"
    assert on_disk["pid"] == os.getpid() and on_disk["host"] == socket.gethostname()
    assert isinstance(on_disk["recorded_at"], float)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp files left behind


def test_record_rejects_unsafe_kind_and_unserialisable_target(tmp_path):
    ledger = Ledger(tmp_path)
    with pytest.raises(ValueError):
        ledger.record("../escape", CLUSTER, {})
    with pytest.raises(TypeError):
        ledger.record("node-pause", CLUSTER, {"obj": object()})
    assert ledger.entries() == []
    assert list(tmp_path.iterdir()) == []


def test_update_merges_into_target_atomically(tmp_path):
    ledger = Ledger(tmp_path)
    entry = ledger.record("netpol", CLUSTER, {"namespace": "demo"})
    updated = ledger.update(entry.id, original_spec={"replicas": 3}, namespace="demo2")
    assert updated.target == {"namespace": "demo2", "original_spec": {"replicas": 3}}
    assert updated.updated_at is not None and updated.updated_at >= entry.recorded_at
    reread = ledger.get(entry.id)
    assert reread.target == updated.target and reread.recorded_at == entry.recorded_at
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{entry.id}.json"]


def test_update_missing_entry(tmp_path):
    with pytest.raises(KeyError, match="nope"):
        Ledger(tmp_path).update("nope", x=1)


def test_remove_and_remove_missing(tmp_path):
    ledger = Ledger(tmp_path)
    a = ledger.record("a", CLUSTER, {})
    b = ledger.record("b", CLUSTER, {})
    ledger.remove(a.id)
    ledger.remove(a.id)  # already gone: fine
    Ledger(tmp_path / "never-created").remove("whatever")
    assert [e.id for e in ledger.entries()] == [b.id]


def test_remove_refuses_path_escape(tmp_path):
    victim = tmp_path / "victim.json"
    victim.write_text("{}")
    with pytest.raises(ValueError):
        Ledger(tmp_path / "ledger").remove("../victim")
    assert victim.exists()


def test_entries_sorted_by_recorded_at(tmp_path):
    ledger = Ledger(tmp_path)
    entries = [ledger.record(k, CLUSTER, {"i": i}) for i, k in enumerate(["x", "y", "z"])]
    for entry, recorded_at in zip(entries, [30.0, 10.0, 20.0]):
        data = json.loads(entry.path.read_text())
        data["recorded_at"] = recorded_at
        entry.path.write_text(json.dumps(data))
    assert [e.kind for e in ledger.entries()] == ["y", "z", "x"]


def test_entries_of_missing_dir_is_empty(tmp_path):
    assert Ledger(tmp_path / "absent").entries() == []


@pytest.mark.parametrize("content", ['{"id": "x"', "[1, 2]", '{"id": "x", "kind": "k"}', "\xff\xfe"])
def test_corrupt_file_is_reported_not_dropped(tmp_path, content):
    ledger = Ledger(tmp_path)
    good = ledger.record("node-pause", CLUSTER, {"node": "n1"})
    bad = tmp_path / "20200101T000000Z-broken-deadbeef.json"
    bad.write_bytes(content.encode("latin-1"))
    entries = ledger.entries()
    assert len(entries) == 2
    corrupt = [e for e in entries if e.corrupt]
    assert len(corrupt) == 1
    assert corrupt[0].path == bad and corrupt[0].id == bad.stem and corrupt[0].error
    assert corrupt[0].to_dict()["corrupt"] is True and corrupt[0].to_dict()["path"] == str(bad)
    assert [e.id for e in entries if not e.corrupt] == [good.id]
    ledger.remove(corrupt[0].id)
    assert not bad.exists()


def test_get_corrupt_raises_value_error(tmp_path):
    (tmp_path / "x.json").write_text("not json")
    with pytest.raises(ValueError, match="corrupt"):
        Ledger(tmp_path).get("x")


def test_entry_dict_round_trip():
    entry = LedgerEntry(id="i", kind="k", cluster=CLUSTER, target={"a": 1}, drill=None, recorded_at=1.5,
                        pid=7, host="h")
    data = entry.to_dict()
    assert "corrupt" not in data and "path" not in data
    assert LedgerEntry.from_dict(json.loads(json.dumps(data))) == entry
    with pytest.raises(ValueError, match="recorded_at"):
        LedgerEntry.from_dict({**data, "recorded_at": "yesterday"})


def test_atomic_write_keeps_old_file_when_replace_fails(tmp_path, monkeypatch):
    path = tmp_path / "f.json"
    write_json_atomic(path, {"v": 1})

    def boom(src, dst):
        raise OSError("disk on fire")

    monkeypatch.setattr(ledger_mod.os, "replace", boom)
    with pytest.raises(OSError, match="disk on fire"):
        write_json_atomic(path, {"v": 2})
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]  # temp file cleaned up


def test_atomic_write_fsyncs_file_and_directory(tmp_path, monkeypatch):
    synced: list[int] = []
    real_fsync = os.fsync

    def spy(fd):
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(ledger_mod.os, "fsync", spy)
    write_json_atomic(tmp_path / "f.json", {"v": 1})
    assert len(synced) == 2  # the temp file, then the directory


def test_atomic_write_rejects_nan(tmp_path):
    with pytest.raises(ValueError):
        write_json_atomic(tmp_path / "f.json", {"v": float("nan")})
    assert not (tmp_path / "f.json").exists()
