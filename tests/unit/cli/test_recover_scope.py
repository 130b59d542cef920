"""``kdrill recover --context`` reverts only the entries recorded for that context and leaves the
others in the ledger; ``--kubeconfig`` reaches an existing cluster's entries through another file
(the recorded one moved), and a missing one is refused before anything is reverted."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from stand_ins import Nothing

import harness.faults as faults
import harness.kube.providers.existing as existing
from harness.cli.recover import cmd_recover, entry_context
from harness.core.ledger import Ledger
from harness.kube.providers import Cluster


@pytest.fixture
def reached(monkeypatch) -> list[tuple[str, str]]:
    """(kubeconfig, context) of each existing cluster recover reached; every entry's fault is a stand-in."""
    seen: list[tuple[str, str]] = []

    def existing_cluster(kubeconfig, context):
        seen.append((str(kubeconfig), context))
        return Cluster(name=context, provider="existing", kubeconfig=Path(str(kubeconfig)), context=context,
                       node_access=False)

    monkeypatch.setattr(existing, "existing_cluster", existing_cluster)
    monkeypatch.setattr(faults, "api_silence", lambda c, seconds=None: None)
    monkeypatch.setattr(faults, "fault_class", lambda kind: Nothing)
    return seen


def recover(tmp_path, **options) -> int:
    return cmd_recover(argparse.Namespace(ledger_dir=str(tmp_path / "ledger"), force=False,
                                          **{"context": None, "kubeconfig": None, **options}))


def two_contexts(tmp_path) -> tuple[Ledger, dict[str, str]]:
    ledger = Ledger(tmp_path / "ledger")
    ids = {context: ledger.record("nothing", cluster={"provider": "existing", "kubeconfig": "/recorded/kc",
                                                      "context": context}, target={}).id
           for context in ("staging", "prod")}
    return ledger, ids


def test_only_the_named_contexts_entries_are_reverted(tmp_path, reached, capsys):
    ledger, ids = two_contexts(tmp_path)
    assert recover(tmp_path, context="staging") == 0
    assert reached == [("/recorded/kc", "staging")]
    assert [e.id for e in ledger.entries()] == [ids["prod"]]
    assert "1 of other contexts left as they are" in capsys.readouterr().out


def test_kubeconfig_replaces_the_recorded_one_and_the_context_stays_recorded(tmp_path, reached):
    _, _ = two_contexts(tmp_path)
    moved = tmp_path / "moved-kubeconfig"
    moved.write_text(KUBECONFIG)
    assert recover(tmp_path, kubeconfig=str(moved)) == 0
    assert sorted(reached) == sorted([(str(moved), "prod"), (str(moved), "staging")])


KUBECONFIG = ("apiVersion: v1\nkind: Config\ncontexts:\n- {name: staging, context: {cluster: s, user: u}}\n"
              "- {name: prod, context: {cluster: p, user: u}}\n")


@pytest.mark.parametrize("options, says", [
    ({"context": ""}, "--context: expected a context name, got an empty value"),
    ({"context": "stagign"}, "--context: expected a context the ledger holds entries for (prod, staging), got 'stagign'"),
    ({"kubeconfig": "/etc/hostname"}, "--kubeconfig: expected a kubeconfig (a mapping with contexts)"),
    ({"kubeconfig": "KUBECONFIG-WITHOUT-PROD"}, "expected the contexts its entries were recorded for, got none of prod"),
])
def test_a_scope_that_cannot_be_meant_is_refused_before_anything_is_reverted(tmp_path, reached, capsys, options, says):
    ledger, ids = two_contexts(tmp_path)
    if options.get("kubeconfig") == "KUBECONFIG-WITHOUT-PROD":
        options["kubeconfig"] = str(tmp_path / "kc")
        (tmp_path / "kc").write_text(KUBECONFIG.split("- {name: prod")[0])
    assert recover(tmp_path, **options) == 2
    assert says in capsys.readouterr().err
    assert reached == [] and sorted(e.id for e in ledger.entries()) == sorted(ids.values())


def test_a_corrupt_entry_is_reported_under_any_context(tmp_path, reached, capsys):
    ledger, ids = two_contexts(tmp_path)
    (tmp_path / "ledger" / "zz-corrupt.json").write_text("{not json")
    assert recover(tmp_path, context="prod") == 1  # the corrupt entry is not reverted, and says so
    out = capsys.readouterr().out
    assert "NOT REVERTED" in out and "1 of other contexts left" in out


def test_a_missing_kubeconfig_is_refused_before_anything_is_reverted(tmp_path, reached, capsys):
    ledger, ids = two_contexts(tmp_path)
    assert recover(tmp_path, kubeconfig=str(tmp_path / "nope")) == 2
    assert reached == [] and sorted(e.id for e in ledger.entries()) == sorted(ids.values())
    assert "--kubeconfig: expected a kubeconfig file" in capsys.readouterr().err  # (FileNotFoundError)


def test_a_kind_entrys_context_is_kind_and_its_name():
    assert entry_context({"provider": "kind", "name": "kdrill-ha"}) == "kind-kdrill-ha"
    assert entry_context({"provider": "kind", "name": "kdrill-ha", "context": "kind-kdrill-ha"}) == "kind-kdrill-ha"
    assert entry_context({"provider": "existing", "context": 3}) is None and entry_context("junk") is None
