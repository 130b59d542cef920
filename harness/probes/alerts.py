"""The platform's alerts as its own Prometheus recorded them: which alerting rules it has, and when
each alert was pending and firing, read after the fact from the ``ALERTS`` series Prometheus
writes at every rule evaluation (stale when the alert resolves). Read only: GETs of the HTTP API
(https://prometheus.io/docs/prometheus/latest/querying/api/), never a write, so reading detection
never changes the platform. Alerting rules and ``ALERTS``:
https://prometheus.io/docs/prometheus/latest/configuration/alerting_rules/.

Reading after the fact means a drill whose fault takes the API server or a node away still gets
its detection read, once Prometheus answers again.
"""

from __future__ import annotations

import http.client
import json
import math
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from harness.core.files import read_regular_file

MAX_POINTS = 10_000  # Prometheus refuses a range query of more than 11,000 points per series


class PrometheusError(RuntimeError):
    """Prometheus could not be read: unreachable, refused, or an answer that is not its API's."""


@dataclass(frozen=True)
class AlertInterval:
    """One alert (``labels``, with ``alertname``) in one state (``pending`` or ``firing``) from
    ``start`` to ``end`` (epoch seconds; ``end`` is the first sampled time it was gone, None when
    it still was at the end of the range read)."""

    alert: str
    state: str
    start: float
    end: float | None
    labels: dict[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Prometheus:
    """A Prometheus server's HTTP API at ``url`` (e.g. ``http://127.0.0.1:30090``), with a bearer
    ``token`` when it wants one. ``timeout_seconds`` bounds each request."""

    url: str
    token: str | None = field(default=None, repr=False)
    timeout_seconds: float = 10.0

    def get(self, path: str, params: dict[str, str] | None = None) -> Any:
        """The ``data`` of a GET of ``path`` (``/api/v1/...``). Raises PrometheusError."""
        query = "?" + urllib.parse.urlencode(params) if params else ""
        request = urllib.request.Request(self.url.rstrip("/") + path + query, headers={"Accept": "application/json"})
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_seconds) as response:  # noqa: S310 (http(s) only: checked by source_problem)
                body = json.loads(response.read(20_000_000))
        except urllib.error.HTTPError as exc:
            raise PrometheusError(f"{self.url}{path}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise PrometheusError(f"{self.url}{path}: {getattr(exc, 'reason', exc)}") from None
        except json.JSONDecodeError as exc:
            raise PrometheusError(f"{self.url}{path}: not JSON ({exc})") from None
        except (ValueError, http.client.HTTPException) as exc:  # never echoed: the message may hold the token
            raise PrometheusError(f"{self.url}{path}: the request could not be sent ({type(exc).__name__})") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else None
            raise PrometheusError(f"{self.url}{path}: not a successful Prometheus answer ({str(error)[:200]})")
        return body.get("data")

    def alert_rules(self) -> dict[str, float]:
        """Every alerting rule loaded: alert name -> its ``for:`` in seconds (the longest when two
        rules share a name). Raises PrometheusError."""
        data = self.get("/api/v1/rules", {"type": "alert"})
        rules: dict[str, float] = {}
        for group in (data or {}).get("groups") or []:
            for rule in group.get("rules") or []:
                if rule.get("type") == "alerting" and isinstance(rule.get("name"), str):
                    duration = float(rule.get("duration") or 0.0)
                    rules[rule["name"]] = max(duration, rules.get(rule["name"], 0.0))
        return rules

    def firing(self) -> set[str]:
        """The names of the alerts firing now. Raises PrometheusError."""
        data = self.get("/api/v1/query", {"query": 'ALERTS{alertstate="firing"}'})
        return {r["metric"].get("alertname", "") for r in (data or {}).get("result") or []}

    def notifications(self, start: float, end: float) -> dict[str, float | None]:
        """How many alert notifications Prometheus sent to its Alertmanagers between ``start`` and
        ``end`` (epoch seconds), and how many failed or were dropped: {"sent", "errors",
        "dropped"}, each None when Prometheus has no such series. Raises PrometheusError."""
        window = max(1, round(end - start))
        counts: dict[str, float | None] = {}
        for what in ("sent", "errors", "dropped"):
            query = f"sum(increase(prometheus_notifications_{what}_total[{window}s]))"
            result = (self.get("/api/v1/query", {"query": query, "time": f"{end:.3f}"}) or {}).get("result") or []
            counts[what] = round(float(result[0]["value"][1]), 1) if result else None
        return counts

    def alert_intervals(self, start: float, end: float) -> list[AlertInterval]:
        """Every alert's pending and firing intervals between ``start`` and ``end`` (epoch seconds),
        sampled every second (coarser when that would exceed MAX_POINTS). Raises PrometheusError."""
        step = max(1.0, math.ceil((end - start) / MAX_POINTS))
        data = self.get("/api/v1/query_range", {"query": "ALERTS", "start": f"{start:.3f}", "end": f"{end:.3f}",
                                                 "step": f"{step:g}"})
        intervals = []
        for series in (data or {}).get("result") or []:
            labels = {k: v for k, v in series.get("metric", {}).items() if k not in ("__name__", "alertstate")}
            times = [float(t) for t, _ in series.get("values") or []]
            for first, last in _runs(times, step):
                intervals.append(AlertInterval(labels.get("alertname", ""), series["metric"].get("alertstate", ""),
                                               first, None if last + step > end else last + step, labels))
        return sorted(intervals, key=lambda i: (i.start, i.alert))


def _runs(times: list[float], step: float) -> list[tuple[float, float]]:
    """Consecutive sampled times (``step`` apart, give or take half a step) as (first, last) runs."""
    runs: list[tuple[float, float]] = []
    for t in sorted(times):
        if runs and t - runs[-1][1] <= step * 1.5:
            runs[-1] = (runs[-1][0], t)
        else:
            runs.append((t, t))
    return runs


MAX_URL_LENGTH = 2048
TOKEN_ENVIRONMENT = "KDRILL_PROMETHEUS_TOKEN"
ALERTMANAGER_TOKEN_ENVIRONMENT = "KDRILL_ALERTMANAGER_TOKEN"
MAX_TOKEN_BYTES = 64 * 1024


def read_token_file(path: str) -> str:
    """The token a file holds, its ends stripped. Raises OSError for a file that is not a regular
    one (a FIFO would block) or holds more than MAX_TOKEN_BYTES."""
    return read_regular_file(path, MAX_TOKEN_BYTES).decode("utf-8", errors="replace").strip()


def source_problem(url: str) -> str | None:
    """Why ``url`` cannot be a Prometheus to read (None when it can): an http(s) URL of at most
    MAX_URL_LENGTH characters with a host and a valid port, no space or control character, no
    credentials (a token comes from a file or the environment), no query or fragment."""
    if len(url) > MAX_URL_LENGTH or any(not c.isprintable() or c.isspace() for c in url):
        return f"an http:// or https:// URL of at most {MAX_URL_LENGTH} characters, without spaces or control characters"
    try:
        parsed = urllib.parse.urlparse(url)
        parsed.port  # noqa: B018 - raises ValueError for a port that is not one
    except ValueError:
        return "an http:// or https:// URL with a host and a port from 1 to 65535"
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return "an http:// or https:// URL with a host"
    if parsed.port == 0 or (parsed.netloc.endswith(":") and parsed.port is None):
        return "an http:// or https:// URL with a host and a port from 1 to 65535"
    if parsed.username or parsed.password:
        return "a URL without credentials (give a token in a file, --prometheus-token-file or --alertmanager-token-file, or the environment)"
    if parsed.query or parsed.fragment:
        return "a URL without a query or fragment (the API's paths are added to it)"
    return None


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be a bearer token (None when it can): one line of printable text."""
    if not token or any(not c.isprintable() or c.isspace() for c in token):
        return "one non-empty line of printable text without spaces"
    return None
