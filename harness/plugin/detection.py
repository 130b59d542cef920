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
from typing import Any, Callable

import pytest

from harness.core.waiting import wait_until
from harness.engine.detection import detection_window, judge_delivery, judge_detection, reading_deadline
from harness.probes.alertmanager import AlertmanagerWatch, proxy_reader, url_reader
from harness.probes.alerts import (
    ALERTMANAGER_TOKEN_ENVIRONMENT,
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
# How long a drill waits before its fault for its expected alerts to stop firing: the longest
# resolution bound of the catalogue (80 s) and its slack, with room.
QUIET_DEADLINE_SECONDS = 180.0


@dataclass(frozen=True)
class Monitoring:
    """Where detection is read: ``prometheus``, and ``source`` as the evidence names it
    (``{"prometheus": url, "named_by": "--prometheus" | "platform profile <name>"}``, with
    ``alertmanager`` when one is watched); ``alertmanager``: a reader of its ``/api/v2/alerts``
    (harness/probes/alertmanager.py), or None."""

    prometheus: Prometheus
    source: dict[str, str]
    alertmanager: Callable[[], Any] | None = None

    def watch_alertmanager(self) -> AlertmanagerWatch | None:
        """A started watch of the Alertmanager, or None without one."""
        return AlertmanagerWatch(self.alertmanager).start() if self.alertmanager is not None else None


def token(config: pytest.Config, of: str = "prometheus") -> str | None:
    """The bearer token for ``of`` (prometheus or alertmanager): the file
    ``--kdrill-<of>-token-file`` names (its ends stripped), else $KDRILL_<OF>_TOKEN, else None.
    Raises pytest.UsageError for a file that cannot be read or a token that is not one line of
    printable text."""
    path = config.getoption(f"--kdrill-{of}-token-file")
    environment = TOKEN_ENVIRONMENT if of == "prometheus" else ALERTMANAGER_TOKEN_ENVIRONMENT
    try:
        value = read_token_file(path) if path else os.environ.get(environment)
    except OSError as exc:
        raise pytest.UsageError(f"kdrill: --{of}-token-file: cannot read {str(path)[:200]}: "
                                f"{exc.strerror or exc}") from None
    if value is not None and token_problem(value):
        raise pytest.UsageError(f"kdrill: the {of.capitalize()} token ({'the file ' + str(path)[:200] if path else environment})"
                                f": expected {token_problem(value)}")
    return value


def _alertmanager(config: pytest.Config, cluster: Any, profile: Any) -> tuple[Callable[[], Any], str] | None:
    """A reader of the Alertmanager to watch and how the evidence names it: ``--kdrill-alertmanager``'s
    URL, else the profile's Service through the API server; None without either."""
    url = config.getoption("--kdrill-alertmanager")
    if url:
        problem = source_problem(url)
        if problem:
            raise pytest.UsageError(f"kdrill: --alertmanager: expected {problem}, got {url[:200]!r}")
        return url_reader(url, token(config, "alertmanager")), url
    service = getattr(profile, "alertmanager_service", None)
    if service is None:
        return None
    namespace, name, port = service
    return proxy_reader(cluster, namespace, name, port), f"service {namespace}/{name}:{port} through the API server"


def monitoring_for(config: pytest.Config, cluster: Any) -> Monitoring | None:
    """The session's :class:`Monitoring`, or None when nothing names a Prometheus. Raises
    pytest.UsageError for a ``--kdrill-prometheus`` that is not a URL to read."""
    url = config.getoption("--kdrill-prometheus")
    if url:
        problem = source_problem(url)
        if problem:
            raise pytest.UsageError(f"kdrill: --prometheus: expected {problem}, got {url[:200]!r}")
        return _with_alertmanager(config, cluster, Monitoring(Prometheus(url, token(config)),
                                                              {"prometheus": url, "named_by": "--prometheus"}))
    profile = getattr(getattr(cluster, "kind_provider", None), "platform", None)
    port = getattr(profile, "prometheus_node_port", None)
    if port is None:
        if config.getoption("--kdrill-alertmanager"):
            raise pytest.UsageError("kdrill: --alertmanager is watched for the alerts a Prometheus says fired: name "
                                    "that Prometheus too (--prometheus URL, or a platform profile with its own)")
        return None
    if port not in getattr(cluster, "host_ports", {}):  # the host reaches a cluster only through its 127.0.0.1 mappings
        raise pytest.UsageError(f"kdrill: platform profile {profile.name}: its Prometheus's NodePort {port} is not mapped "
                                f"to 127.0.0.1 by the kind config ({sorted(cluster.host_ports)} are): read it with "
                                "--prometheus URL")
    url = f"http://127.0.0.1:{cluster.host_port(port)}"
    return _with_alertmanager(config, cluster, Monitoring(Prometheus(url), {"prometheus": url,
                                                                            "named_by": f"platform profile {profile.name}"}))


def _with_alertmanager(config: pytest.Config, cluster: Any, monitoring: Monitoring) -> Monitoring:
    """``monitoring`` with the Alertmanager to watch, when one is named (the option, else the profile's)."""
    profile = getattr(getattr(cluster, "kind_provider", None), "platform", None)
    found = _alertmanager(config, cluster, profile)
    if found is None:
        return monitoring
    reader, named = found
    return Monitoring(monitoring.prometheus, {**monitoring.source, "alertmanager": named}, reader)


def await_quiet(monitoring: Monitoring | None, expected: list[DetectionSpec]) -> dict[str, Any] | None:
    """Before the fault: wait (polling, at most QUIET_DEADLINE_SECONDS) until none of the
    ``expected`` alerts fires, since one still firing from an earlier failure (the drill before,
    say) could not tell this one. ``{"waited_seconds", "still_firing"}``, or None with nothing to
    wait for or no Prometheus answering (then the reading says what was already firing)."""
    if monitoring is None or not expected:
        return None
    names = {d.alert for d in expected}
    started = time.monotonic()
    try:
        firing = monitoring.prometheus.firing() & names
    except PrometheusError:
        return None
    if firing:
        waited = wait_until(lambda: not (monitoring.prometheus.firing() & names), QUIET_DEADLINE_SECONDS,
                            interval_seconds=POLL_SECONDS, description=f"{', '.join(sorted(firing))} no longer firing")
        firing = set() if waited.ok else firing
    return {"waited_seconds": round(time.monotonic() - started, 1), "still_firing": sorted(firing)}


def read_detection(monitoring: Monitoring | None, expected: list[DetectionSpec],
                   injections: list[dict[str, Any]], watch: AlertmanagerWatch | None = None) -> dict[str, Any]:
    """The drill's ``detection`` record: :func:`harness.engine.detection.judge_detection`'s, with
    ``source`` and ``expected`` (and, with the Alertmanager ``watch`` started before the fault,
    each fired alert's ``delivery``: :func:`harness.engine.detection.judge_delivery`); or
    ``{"verdict": "not checked", "why"}`` without a Prometheus or an injection, or ``{"verdict":
    "error", "why"}`` when Prometheus could not be read. Waits (polling, bounded by the alerts'
    own bounds) until every expected alert has fired and resolved or can no longer do so in time."""
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
    if watch is not None:
        watch.stop()
        judge_delivery(result, watch.sightings, injected_at, reverted_at, watch.failed_at)
        result["alertmanager_watch"] = {"polls": watch.polls, "failed": len(watch.failed_at), "errors": watch.errors[:5]}
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
