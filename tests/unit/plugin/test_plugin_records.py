"""Every planned drill case leaves a record, whatever happened: here the cluster cannot be
reached, so setup fails before the drill, and the record says "error" with the reason; the run is
sealed all the same. Runs a real pytest session (pytester) with kdrill's plugin; no cluster."""

import json

pytest_plugins = ["pytester"]

SCENARIO = """
name: unreachable
title: "A drill whose cluster cannot be reached"
drill: drills/test_unreachable.py
claim: "nothing"
source: [{title: "Kubernetes Components", url: "https://kubernetes.io/docs/concepts/overview/components/"}]
cluster: {config: ha}
fault: {kind: registry-outage, method: m, params: {mode: refused, hold_seconds: 60}}
expectations:
  - {name: x, description: d, bound: {op: "==", value: 0}, unit: count}
cases:
  - {name: one}
  - {name: two}
"""

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: kind-unreachable, context: {cluster: c, user: u}}]
current-context: kind-unreachable
"""

DRILL = """
import pytest

@pytest.mark.scenario("unreachable")
def test_unreachable(drill):
    raise AssertionError("never reached: the cluster cannot be reached")
"""


def start_session(pytester, tmp_path, monkeypatch, kubeconfig_text, *args):
    """A pytest session of the unreachable drill; returns (result, the reports directory)."""
    monkeypatch.setenv("KDRILL_STATE_DIR", str(tmp_path / "state"))
    scenarios = pytester.mkdir("scenarios")
    (scenarios / "unreachable.yaml").write_text(SCENARIO)
    kubeconfig = pytester.makefile(".yaml", kubeconfig=kubeconfig_text)
    pytester.makepyfile(test_unreachable=DRILL)
    reports = tmp_path / "reports"
    result = pytester.runpytest_subprocess(
        f"--kdrill-scenarios-dir={scenarios}", f"--kdrill-kubeconfig={kubeconfig}",
        f"--kdrill-reports={reports}", "--kdrill-run-id=r1", "-p", "no:cacheprovider", *args)
    return result, reports


def run_session(pytester, tmp_path, monkeypatch, *args):
    result, reports = start_session(pytester, tmp_path, monkeypatch, KUBECONFIG, *args)
    run = reports / "r1"
    records = {p.name: json.loads(p.read_text()) for p in run.glob("unreachable--*.json") if "timeline" not in p.name}
    assert sorted(records) == ["unreachable--one.json", "unreachable--two.json"]
    assert (run / "manifest.json").is_file()
    return result, records


def test_each_planned_case_gets_a_record_when_setup_fails(pytester, tmp_path, monkeypatch):
    # Consent given, so the session gets as far as asking the (unreachable) API server.
    result, records = run_session(pytester, tmp_path, monkeypatch, "--kdrill-allow-context=kind-unreachable")
    assert result.ret != 0
    for record in records.values():
        assert record["verdict"] == "error"
        assert record["errors"] and record["errors"][0].startswith("setup failed:")


def test_a_context_named_kind_is_refused_unless_kind_lists_it(pytester, tmp_path, monkeypatch):
    # "kind-unreachable" is a name, not a kind cluster of this machine: refused before any request.
    result, records = run_session(pytester, tmp_path, monkeypatch)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*refused*kind-unreachable*not one of this machine's kind clusters*"])
    for record in records.values():
        assert record["verdict"] == "refused" and "--allow-context kind-unreachable" in record["errors"][0]


TWO_CONTEXTS = KUBECONFIG.replace(
    "contexts: [{name: kind-unreachable, context: {cluster: c, user: u}}]",
    "contexts: [{name: kind-unreachable, context: {cluster: c, user: u}},\n"
    "           {name: kind-unreachable-2, context: {cluster: c, user: u}}]")


def run_parallel(pytester, tmp_path, monkeypatch, *args):
    """Two pytest-xdist workers (harness/core/workers.py)."""
    return start_session(pytester, tmp_path, monkeypatch, TWO_CONTEXTS, "-p", "xdist", "-n", "2", *args)


def test_parallel_workers_write_one_run_with_one_seal(pytester, tmp_path, monkeypatch):
    from harness.evidence.manifest import verify_run

    result, reports = run_parallel(pytester, tmp_path, monkeypatch, "--kdrill-context=kind-unreachable",
                                   "--kdrill-context=kind-unreachable-2", "--kdrill-allow-context=kind-unreachable",
                                   "--kdrill-allow-context=kind-unreachable-2")
    assert result.ret != 0
    assert [p.name for p in reports.iterdir()] == ["r1"]  # one run, not one per worker
    run = reports / "r1"
    meta = json.loads((run / "run.json").read_text())
    assert sorted(meta["workers"]) == ["gw0", "gw1"]
    assert meta["planned"] == ["unreachable--one", "unreachable--two"]
    # Each case ran on one worker, and its record says why it failed there.
    ran = [stem for w in meta["workers"].values() for stem in w["ran"]]
    assert sorted(ran) == ["unreachable--one", "unreachable--two"]
    for stem in ran:
        record = json.loads((run / f"{stem}.json").read_text())
        assert record["verdict"] == "error" and record["errors"][0].startswith("setup failed:")
    assert verify_run(run).ok


def test_parallel_workers_each_need_a_context_of_their_own(pytester, tmp_path, monkeypatch):
    result, reports = run_parallel(pytester, tmp_path, monkeypatch, "--kdrill-context=kind-unreachable",
                                   "--kdrill-allow-context=kind-unreachable")
    assert result.ret != 0
    run = reports / "r1"
    records = [json.loads(p.read_text()) for p in run.glob("unreachable--*.json")]
    # Neither case ran on a cluster another worker also drilled: each has a record saying why.
    assert len(records) == 2 and all(r["verdict"] in ("refused", "not-run", "error") for r in records)
    assert any("once per worker" in r["errors"][0] or "one per worker" in r["errors"][0] for r in records), records
    assert (run / "manifest.json").is_file()
