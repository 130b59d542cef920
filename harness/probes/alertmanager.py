"""Whether an alert reached the team's Alertmanager, and how it stood there: watched during the
drill, because Alertmanager keeps no history (an alert resolved is gone from its API). Read only:
GETs of ``/api/v2/alerts`` (https://prometheus.io/docs/alerting/latest/clients/ and Alertmanager's
OpenAPI ``api/v2/openapi.yaml``: each alert's labels, ``startsAt``, ``receivers`` and ``status``
with ``state`` unprocessed, active or suppressed, ``silencedBy``, ``inhibitedBy`` and ``mutedBy``).

Two ways in: an Alertmanager URL (``kdrill run --alertmanager URL``, the team's own), or a
Service in the cluster read through the API server's service proxy
(``/api/v1/namespaces/<ns>/services/<name>:<port>/proxy/...``: the host reaches a cluster only
through its API server's ``127.0.0.1`` mapping), as a platform profile names it.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.kube.objects import get_path

ALERTS_PATH = "/api/v2/alerts"
# Polls of a watch: every POLL_SECONDS for at most MAX_WATCH_SECONDS, whatever the drill does.
POLL_SECONDS = 2.0
MAX_WATCH_SECONDS = 3600.0


class AlertmanagerError(RuntimeError):
    """Alertmanager could not be read: unreachable, refused, or an answer that is not its API's."""


def url_reader(url: str, token: str | None = None, timeout_seconds: float = 10.0) -> Callable[[], Any]:
    """A reader of ``url``'s ``/api/v2/alerts`` (the decoded JSON), with a bearer ``token`` when
    given. Raises AlertmanagerError when called and not answered."""

    def read() -> Any:
        request = urllib.request.Request(url.rstrip("/") + ALERTS_PATH, headers={"Accept": "application/json"})
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=timeout_seconds) as response:  # noqa: S310 (http(s): source_problem)
                return json.loads(response.read(20_000_000))
        except urllib.error.HTTPError as exc:
            raise AlertmanagerError(f"{url}{ALERTS_PATH}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:  # never echoed whole: it may hold the token
            raise AlertmanagerError(f"{url}{ALERTS_PATH}: {type(exc).__name__}") from None

    return read


def proxy_reader(cluster: Any, namespace: str, service: str, port: int) -> Callable[[], Any]:
    """A reader of the Service's ``/api/v2/alerts`` through the API server's service proxy, on a
    client of its own (``cluster``: a :class:`harness.kube.providers.Cluster`). Raises
    AlertmanagerError when called and not answered."""
    api, path = cluster.new_api(), service_proxy_path(namespace, service, port)

    def read() -> Any:
        try:
            return get_path(cluster, path, api=api)
        except Exception as exc:  # noqa: BLE001 - any failure to read is one failed poll
            status = getattr(exc, "status", None)
            raise AlertmanagerError(f"{path}: " + (f"HTTP {status}" if status else type(exc).__name__)) from None

    return read


def service_proxy_path(namespace: str, service: str, port: int) -> str:
    """The API server's proxy path to the Service's ``/api/v2/alerts``."""
    return f"/api/v1/namespaces/{namespace}/services/{service}:{port}/proxy{ALERTS_PATH}"


_FRACTION = re.compile(r"\.(\d{6})\d+")


def epoch(timestamp: Any) -> float | None:
    """An RFC 3339 time as Alertmanager writes it (nanoseconds, ``Z``) in epoch seconds; None
    when it is not one."""
    if not isinstance(timestamp, str):
        return None
    try:
        return dt.datetime.fromisoformat(_FRACTION.sub(r".\1", timestamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def sightings_of(answer: Any, seen_at: float) -> list[dict[str, Any]]:
    """One sighting per alert in an ``/api/v2/alerts`` answer: {alert, fingerprint, starts_at,
    seen_at (epoch seconds), state, silenced_by, inhibited_by, receivers}. Raises
    AlertmanagerError when the answer is not a list of alerts. ``muted_by``: the time intervals
    muting it (``mutedBy``, in Alertmanager's newer API; [] where absent)."""
    if not isinstance(answer, list):
        raise AlertmanagerError(f"not a list of alerts: {type(answer).__name__}")
    found = []
    for alert in answer:
        labels = alert.get("labels") if isinstance(alert, dict) else None
        status = alert.get("status") if isinstance(alert, dict) else None
        if not isinstance(labels, dict) or not isinstance(status, dict):
            raise AlertmanagerError("an alert without labels or status")
        found.append({"alert": str(labels.get("alertname", ""))[:200], "fingerprint": str(alert.get("fingerprint", ""))[:64],
                      "starts_at": epoch(alert.get("startsAt")), "seen_at": seen_at,
                      "state": str(status.get("state", ""))[:20],
                      "silenced_by": [str(s)[:64] for s in status.get("silencedBy") or []],
                      "inhibited_by": [str(s)[:64] for s in status.get("inhibitedBy") or []],
                      "muted_by": [str(s)[:64] for s in status.get("mutedBy") or []],
                      "receivers": sorted({str(r.get("name", ""))[:100] for r in alert.get("receivers") or []
                                           if isinstance(r, dict)})})
    return found


@dataclass
class AlertmanagerWatch:
    """Polls ``read`` (a reader of ``/api/v2/alerts``) every POLL_SECONDS in a thread, from
    :meth:`start` until :meth:`stop` or MAX_WATCH_SECONDS, keeping each alert's first sighting in
    each state (``sightings``), the polls that failed (``errors``, at most 20 kept) and when
    (``failed_at``, epoch seconds)."""

    read: Callable[[], Any]
    sightings: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    failed_at: list[float] = field(default_factory=list)
    polls: int = 0
    started_at: float | None = None
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def start(self) -> "AlertmanagerWatch":
        self.started_at = time.time()
        self._thread = threading.Thread(target=self._run, name="kdrill-alertmanager-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def poll(self) -> None:
        """One reading, its new sightings kept. Raises AlertmanagerError."""
        known = {(s["fingerprint"], s["state"]) for s in self.sightings}
        for sighting in sightings_of(self.read(), time.time()):
            if (sighting["fingerprint"], sighting["state"]) not in known:
                self.sightings.append(sighting)

    def _run(self) -> None:
        deadline = time.monotonic() + MAX_WATCH_SECONDS
        while not self._stop.is_set() and time.monotonic() < deadline:
            self.polls += 1
            try:
                self.poll()
            except Exception as exc:  # noqa: BLE001 - a failed poll is recorded, the watch goes on
                self.failed_at.append(time.time())
                if len(self.errors) < 20:
                    self.errors.append(f"{type(exc).__name__}: {exc}"[:300])
            self._stop.wait(POLL_SECONDS)
