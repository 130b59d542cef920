"""Detection in every drill: whether the platform's own monitoring noticed the failure
(harness/engine/detection.py judges it), read from a Prometheus named by ``--kdrill-prometheus``
(``kdrill run --prometheus URL``) or, on a kind cluster built with a profile that names one
(``prometheus: {node_port}`` in its platform.yaml), from that profile's own through its
``127.0.0.1`` mapping. Without either, a drill with a ``detection`` section records it as not
checked, and its verdict does not depend on it.

The bearer token, when the Prometheus wants one, comes from ``--kdrill-prometheus-token-file`` or
the environment variable ``KDRILL_PROMETHEUS_TOKEN``, never from the command line.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import pytest

from harness.core.waiting import wait_until
from harness.engine.detection import detection_window, judge_detection, reading_deadline
from harness.probes.alerts import (
    TOKEN_ENVIRONMENT,
    Prometheus,
    PrometheusError,
    read_token_file,
    source_problem,
    token_problem,
)
from harness.spec.model import DetectionSpec

log = logging.getLogger("kdrill.detection")

# Added to an alert's bounds while reading: one scrape and one evaluation on the profile (5 s
# each) and the reading's own polling.
READING_SLACK_SECONDS = 15.0
# Alerts read from this long before the fault, so one already firing is seen as such.
LOOKBACK_SECONDS = 120.0
POLL_SECONDS = 2.0


@dataclass(frozen=True)
class Monitoring:
    """Where detection is read: ``prometheus``, and ``source`` as the evidence names it
    (``{"prometheus": url, "named_by": "--prometheus" | "platform profile <name>"}``)."""

    prometheus: Prometheus
    source: dict[str, str]


def token(config: pytest.Config) -> str | None:
    """The bearer token: the file ``--kdrill-prometheus-token-file`` names (its ends stripped), else
    $KDRILL_PROMETHEUS_TOKEN, else None. Raises pytest.UsageError for a file that cannot be read
    or a token that is not one line of printable text."""
    path = config.getoption("--kdrill-prometheus-token-file")
    try:
        value = read_token_file(path) if path else os.environ.get(TOKEN_ENVIRONMENT)
    except OSError as exc:
        raise pytest.UsageError(f"kdrill: --prometheus-token-file: cannot read {str(path)[:200]}: "
                                f"{exc.strerror or exc}") from None
    if value is not None and token_problem(value):
        raise pytest.UsageError(f"kdrill: the Prometheus token ({'the file ' + str(path)[:200] if path else TOKEN_ENVIRONMENT})"
                                f": expected {token_problem(value)}")
    return value


def monitoring_for(config: pytest.Config, cluster: Any) -> Monitoring | None:
    """The session's :class:`Monitoring`, or None when nothing names a Prometheus. Raises
    pytest.UsageError for a ``--kdrill-prometheus`` that is not a URL to read."""
    url = config.getoption("--kdrill-prometheus")
    if url:
        problem = source_problem(url)
        if problem:
            raise pytest.UsageError(f"kdrill: --prometheus: expected {problem}, got {url[:200]!r}")
        return Monitoring(Prometheus(url, token(config)), {"prometheus": url, "named_by": "--prometheus"})
    profile = getattr(getattr(cluster, "kind_provider", None), "platform", None)
    port = getattr(profile, "prometheus_node_port", None)
    if port is None:
        return None
    if port not in getattr(cluster, "host_ports", {}):  # the host reaches a cluster only through its 127.0.0.1 mappings
        raise pytest.UsageError(f"kdrill: platform profile {profile.name}: its Prometheus's NodePort {port} is not mapped "
                                f"to 127.0.0.1 by the kind config ({sorted(cluster.host_ports)} are): read it with "
                                "--prometheus URL")
    url = f"http://127.0.0.1:{cluster.host_port(port)}"
    return Monitoring(Prometheus(url), {"prometheus": url, "named_by": f"platform profile {profile.name}"})


def read_detection(monitoring: Monitoring | None, expected: list[DetectionSpec],
                   injections: list[dict[str, Any]]) -> dict[str, Any]:
    """The drill's ``detection`` record: :func:`harness.engine.detection.judge_detection`'s, with
    ``source`` and ``expected``; or ``{"verdict": "not checked", "why"}`` without a Prometheus or
    an injection, or ``{"verdict": "error", "why"}`` when Prometheus could not be read. Waits
    (polling, bounded by the alerts' own bounds) until every expected alert has fired and
    resolved or can no longer do so in time."""
    base = {"expected": [d.to_dict() for d in expected]}
    if monitoring is None:
        return {**base, "verdict": "not checked",
                "why": "no Prometheus to read (kdrill run --prometheus URL, or a profile's prometheus)"}
    base["source"] = dict(monitoring.source)
    window = detection_window(injections)
    if window is None:
        return {**base, "verdict": "not checked", "why": "the fault never took effect"}
    injected_at, reverted_at = window
    deadline = reading_deadline(expected, injected_at, reverted_at, READING_SLACK_SECONDS) if expected else time.time()

    def settled() -> dict[str, Any] | None:
        result = _judge(monitoring.prometheus, expected, injected_at, reverted_at)
        return result if all(a["outcome"] not in ("undetected", "not resolved") or a["for_seconds"] is None
                             for a in result["alerts"]) else None

    result = None
    if expected:
        waited = wait_until(settled, max(0.0, deadline - time.time()), interval_seconds=POLL_SECONDS,
                            description="the expected alerts fired and resolved (or can no longer in time)")
        result = waited.value if waited.ok else None
    if result is None:
        try:
            result = _judge(monitoring.prometheus, expected, injected_at, reverted_at)
        except PrometheusError as exc:
            return {**base, "verdict": "error", "why": f"Prometheus could not be read: {exc}"[:500]}
    if not expected:
        result["verdict"] = "none expected"
    try:  # the way to the team: what Prometheus handed its Alertmanagers meanwhile (counts, not per alert)
        result["notifications"] = monitoring.prometheus.notifications(injected_at, time.time())
    except PrometheusError as exc:
        result["notifications"] = {"error": str(exc)[:300]}
    return {**base, **result, "read_at": time.time()}


def _judge(prometheus: Prometheus, expected: list[DetectionSpec], injected_at: float,
           reverted_at: float | None) -> dict[str, Any]:
    """Prometheus's rules and alerts read now, judged. Raises PrometheusError."""
    rules = prometheus.alert_rules()
    intervals = prometheus.alert_intervals(injected_at - LOOKBACK_SECONDS, time.time())
    return judge_detection(expected, intervals, rules, injected_at, reverted_at)
