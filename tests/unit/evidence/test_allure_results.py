"""harness/evidence/allure_results.py: environment, categories and the history Allure's trend widgets read."""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness.evidence import allure_results


def result(results: Path, name: str, status: str, start: int, message: str = "") -> None:
    results.mkdir(parents=True, exist_ok=True)
    data = {"uuid": f"uuid-{name}-{start}", "historyId": f"hid-{name}", "name": name, "status": status,
            "statusDetails": {"message": message}, "start": start, "stop": start + 1000}
    (results / f"uuid-{name}-{start}-result.json").write_text(json.dumps(data))


def test_environment_names_the_run_cluster_and_versions(tmp_path: Path) -> None:
    meta = {"run_id": "r1", "kdrill_version": "0.1.0", "git_commit": "abc",
            "cluster": {"name": "kdrill-ha", "provider": "kind", "server": "https://127.0.0.1:4000",
                        "kubernetes_version": "v1.35.4", "kube_system_uid": "u-1"}}
    text = allure_results.write_environment(tmp_path, meta).read_text()
    assert "kubernetes.version=v1.35.4\n" in text and "run.id=r1\n" in text
    assert "cluster.server=https\\://127.0.0.1\\:4000\n" in text  # java.util.Properties escapes
    assert "ticket" not in text  # nothing given, nothing written


def test_categories_sort_failures_from_breakage_and_infrastructure(tmp_path: Path) -> None:
    categories = json.loads(allure_results.write_categories(tmp_path).read_text())
    assert [c["name"] for c in categories] == ["Platform behaviour changed", "Infrastructure", "Drill error"]
    infra = re.compile(categories[1]["messageRegex"])
    assert infra.fullmatch("ProviderError: kind create cluster failed\nmore")
    assert not infra.fullmatch("ApiException: (422) Unprocessable Entity")


def test_history_carries_the_previous_runs_results_and_trend(tmp_path: Path) -> None:
    first, second, third = (tmp_path / n / "allure-results" for n in ("run-1", "run-2", "run-3"))
    result(first, "etcd", "passed", 1000)
    result(first, "dns", "failed", 3000, "expectation failed")
    allure_results.write_history(second, None)
    assert not (second / "history").exists()
    result(second, "etcd", "broken", 5000)
    result(second, "dns", "passed", 6000)
    allure_results.write_history(second, first.parent)
    allure_results.write_history(third, second.parent)
    history = json.loads((third / "history" / "history.json").read_text())
    # newest first, one item per earlier run
    assert [i["status"] for i in history["hid-etcd"]["items"]] == ["broken", "passed"]
    assert history["hid-dns"]["statistic"] == {"failed": 1, "broken": 0, "skipped": 0, "passed": 1, "unknown": 0,
                                               "total": 2}
    trend = json.loads((third / "history" / "history-trend.json").read_text())
    assert [(t["buildOrder"], t["reportName"], t["data"]["passed"]) for t in trend] == [(2, "run-2", 1), (1, "run-1", 1)]
    duration = json.loads((third / "history" / "duration-trend.json").read_text())
    assert duration[0]["data"]["duration"] == 7000 - 5000


def test_malformed_earlier_results_are_skipped_not_fatal(tmp_path: Path) -> None:
    first, second = (tmp_path / n / "allure-results" for n in ("run-1", "run-2"))
    result(first, "etcd", "passed", 1000)
    junk = [{"uuid": 1, "historyId": "hid-x", "status": "weird", "statusDetails": "text", "start": "soon"},
            {"uuid": 2, "historyId": "hid-y", "statusDetails": {"message": 5}, "start": 1, "stop": None}]
    for i, data in enumerate(junk):
        (first / f"junk-{i}-result.json").write_text(json.dumps(data))
    (first / "history").mkdir()
    (first / "history" / "history-trend.json").write_text('[{"buildOrder": "x"}, 5, {"buildOrder": 3, "data": {}}]')
    (first / "history" / "history.json").write_text('{"a": 5, "b": {"items": [7]}}')
    allure_results.write_history(second, first.parent)
    history = json.loads((second / "history" / "history.json").read_text())
    assert history["hid-x"]["items"][0]["status"] == "unknown" and "a" not in history
    trend = json.loads((second / "history" / "history-trend.json").read_text())
    assert [t["buildOrder"] for t in trend] == [4, 3]


def test_a_property_value_cannot_add_a_line(tmp_path: Path) -> None:
    text = allure_results.write_environment(tmp_path, {"run_id": "r", "ticket": "T-1\rgit.commit FORGED\nx=y"}).read_text()
    assert text.count("\n") == 2 and "ticket=T-1\\rgit.commit FORGED\\nx\\=y\n" in text
