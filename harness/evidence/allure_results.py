"""What Allure needs besides allure-pytest's result files: environment, categories, history.

Written into the run's ``allure-results/`` at the end of a run, before it is sealed:

- ``environment.properties``: kdrill version, run id, cluster, Kubernetes version, git commit;
- ``categories.json``: failures sorted into *platform behaviour changed* (an expectation failed:
  allure-pytest reports an AssertionError as "failed"), *infrastructure* (the cluster, Docker or
  kind went away: "broken" with one of :data:`INFRASTRUCTURE_ERRORS` in its message) and *drill
  error* (any other "broken": the drill itself broke);
- ``history/``: the trend files ``allure generate`` reads from a results directory
  (``history.json``, ``history-trend.json``, ``duration-trend.json``), built from the previous
  run's results and history in the same reports directory, so the trend widgets work without
  copying a generated report's ``history/`` by hand. Format: Allure 2's report history
  (allure2 ``HistoryPlugin``/``HistoryTrendPlugin``), newest first, at most :data:`HISTORY_LIMIT`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HISTORY_LIMIT = 20
STATUSES = ("failed", "broken", "skipped", "passed", "unknown")
# Messages that mean the machinery under the drill went away, not the drill or the platform.
INFRASTRUCTURE_ERRORS = ("ProviderError", "ClusterGone", "ClusterBusy", "Cannot connect to the Docker daemon",
                         "MaxRetryError", "Connection refused", "kind ")

CATEGORIES = [
    {"name": "Platform behaviour changed", "matchedStatuses": ["failed"],
     "description": "a documented expectation did not hold: the platform failed differently from its documents"},
    {"name": "Infrastructure", "matchedStatuses": ["broken"],
     "messageRegex": "(?s).*(" + "|".join(INFRASTRUCTURE_ERRORS) + ").*",
     "description": "the cluster, Docker or kind was not there to drill"},
    {"name": "Drill error", "matchedStatuses": ["broken"],
     "description": "the drill itself broke before it could judge the platform"},
]


def write_environment(results: Path, meta: dict[str, Any]) -> Path:
    """``environment.properties`` from the run's metadata (run.json). Raises OSError."""
    cluster = meta.get("cluster") if isinstance(meta.get("cluster"), dict) else {}
    pairs = {
        "kdrill.version": meta.get("kdrill_version"), "run.id": meta.get("run_id"),
        "git.commit": meta.get("git_commit"), "cluster.name": cluster.get("name"),
        "cluster.provider": cluster.get("provider"), "cluster.server": cluster.get("server"),
        "cluster.kube_system_uid": cluster.get("kube_system_uid"),
        "kubernetes.version": cluster.get("kubernetes_version"), "ticket": meta.get("ticket"),
        "approved.by": meta.get("approved_by"),
    }
    text = "".join(f"{k}={_property(v)}\n" for k, v in pairs.items() if v not in (None, ""))
    path = Path(results) / "environment.properties"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _property(value: Any) -> str:
    # java.util.Properties: one logical line; backslash escapes for the separators and line ends
    text = str(value)[:500].replace("\\", "\\\\")
    for char, escaped in (("\n", "\\n"), ("\r", "\\r"), ("=", "\\="), (":", "\\:"), ("#", "\\#"), ("!", "\\!")):
        text = text.replace(char, escaped)
    return "".join(c if c.isprintable() or c == " " else f"\\u{ord(c):04x}" for c in text)


def write_categories(results: Path) -> Path:
    path = Path(results) / "categories.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(CATEGORIES, indent=2), encoding="utf-8")
    return path


def read_results(results: Path) -> list[dict[str, Any]]:
    """allure-pytest's ``*-result.json`` files (unreadable ones are skipped: they are not ours)."""
    found = []
    for path in sorted(Path(results).glob("*-result.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("historyId"):
            found.append(data)
    return found


def _read_json(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return default


def _statistic(statuses: list[str]) -> dict[str, int]:
    counts = {s: statuses.count(s) for s in STATUSES}
    counts["total"] = len(statuses)
    return counts


def _millis(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 10**15 else None


def _status(value: Any) -> str:
    return value if value in STATUSES else "unknown"


def _trend(entries: Any) -> list[dict[str, Any]]:
    """Earlier trend entries worth carrying on: objects with a whole-number buildOrder."""
    if not isinstance(entries, list):
        return []
    return [e for e in entries if isinstance(e, dict) and _millis(e.get("buildOrder")) is not None
            and isinstance(e.get("data"), dict)]


def build_history(previous_results: Path, previous_name: str, build_order: int) -> dict[str, Any]:
    """The ``history/`` files for the run after the one whose results are ``previous_results``:
    that run's own history extended with its results (what ``allure generate`` would have put in
    its report's ``history/``). Returns {file name: JSON data}."""
    previous_results = Path(previous_results)
    results = read_results(previous_results)
    old = previous_results / "history"
    history = _read_json(old / "history.json", {})
    history = history if isinstance(history, dict) else {}
    history = {k: v for k, v in history.items() if isinstance(k, str) and isinstance(v, dict)}
    for r in results:
        details = r.get("statusDetails") if isinstance(r.get("statusDetails"), dict) else {}
        start, stop = _millis(r.get("start")), _millis(r.get("stop"))
        item = {"uid": str(r.get("uuid")), "reportUrl": "", "status": _status(r.get("status")),
                "statusDetails": str(details.get("message") or "")[:200],
                "time": {"start": start, "stop": stop, "duration": (stop - start) if start and stop else 0}}
        entry = history.setdefault(str(r["historyId"]), {"statistic": _statistic([]), "items": []})
        items = [i for i in entry.get("items") or [] if isinstance(i, dict)]
        entry["items"] = ([item] + items)[:HISTORY_LIMIT]
        entry["statistic"] = _statistic([_status(i.get("status")) for i in entry["items"]])
    statuses = [_status(r.get("status")) for r in results]
    trend = _trend(_read_json(old / "history-trend.json", []))
    trend = [{"buildOrder": build_order, "reportName": previous_name, "reportUrl": "",
              "data": _statistic(statuses)}] + trend
    starts = [s for s in (_millis(r.get("start")) for r in results) if s]
    stops = [s for s in (_millis(r.get("stop")) for r in results) if s]
    duration = [{"buildOrder": build_order, "reportName": previous_name, "reportUrl": "",
                 "data": {"duration": (max(stops) - min(starts)) if starts and stops else 0}}] + \
        _trend(_read_json(old / "duration-trend.json", []))
    return {"history.json": history, "history-trend.json": trend[:HISTORY_LIMIT],
            "duration-trend.json": duration[:HISTORY_LIMIT]}


def write_history(results: Path, previous_run: Path | None) -> list[Path]:
    """Write ``history/`` into ``results`` from ``previous_run`` (a run directory with
    ``allure-results/``, which the caller has verified); nothing when there is none. Malformed
    entries in it are skipped. Raises OSError."""
    if previous_run is None or not (Path(previous_run) / "allure-results").is_dir():
        return []
    previous_results = Path(previous_run) / "allure-results"
    trend = _trend(_read_json(previous_results / "history" / "history-trend.json", []))
    order = 1 + max([t["buildOrder"] for t in trend] or [0])
    files = build_history(previous_results, Path(previous_run).name, order)
    directory = Path(results) / "history"
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in files.items():
        (directory / name).write_text(json.dumps(data, indent=2, allow_nan=False), encoding="utf-8")
        written.append(directory / name)
    return written


def finish(results: Path, meta: dict[str, Any], previous_run: Path | None) -> None:
    """Environment, categories and history for the run's ``allure-results``. Raises OSError."""
    write_environment(results, meta)
    write_categories(results)
    write_history(results, previous_run)
