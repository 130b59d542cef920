"""One kdrill session per cluster at a time (a kind cluster: a lock file on this machine; an
existing cluster: a Lease on the cluster, :class:`ContextLease`).

Two sessions on one cluster break each other's drills and evidence: the second deletes the
first's vital-signs probe pod and drill namespaces, and faults overlap. The pytest session that
drives a kind cluster holds an exclusive ``flock`` on ``<tmp>/kdrill-cluster-<name>.lock`` (the
cluster is a machine-wide resource, so the lock is too) for its whole length. A kdrill process it
starts itself (the recovery tests run ``kdrill run`` inside a session) inherits the right to the
cluster through ``$KDRILL_CLUSTER_LOCK``; anything else is refused with the holder's pid.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Callable

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.kube.providers import ProviderError

ENV = "KDRILL_CLUSTER_LOCK"

log = logging.getLogger(__name__)


class ClusterBusy(RuntimeError):
    """Another kdrill session holds the cluster; the message names its pid."""


def lock_path(cluster: str) -> Path:
    return Path(tempfile.gettempdir()) / f"kdrill-cluster-{cluster}.lock"


class SessionLock:
    """``acquire()`` the cluster for this process (or confirm an inherited hold); ``release()``.
    Raises ClusterBusy when another session holds it."""

    def __init__(self, cluster: str) -> None:
        self.cluster, self.path = cluster, lock_path(cluster)
        self._fd: int | None = None

    def acquire(self) -> "SessionLock":
        if os.environ.get(ENV) == str(self.path):
            return self  # started by the session that holds it
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ClusterBusy(f"another kdrill session (pid {holder}) is running drills on cluster {self.cluster}; "
                              f"wait for it to end, or use another cluster (--cluster-name); lock: {self.path}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd
        os.environ[ENV] = str(self.path)  # kdrill processes this session starts may use the cluster
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.environ.pop(ENV, None)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


# --- An existing cluster (a kubeconfig context) -------------------------------------------------
#
# A cluster reached through a kubeconfig may be drilled from more than one machine, so its lock is
# on the cluster itself: a coordination.k8s.io Lease, the object Kubernetes' own components use
# for the same purpose (https://kubernetes.io/docs/concepts/architecture/leases/). Whether a held
# Lease is still alive is judged as leader election judges it, by its renewTime and
# leaseDurationSeconds, and on the API server's clock (its responses' Date header), so two
# machines whose clocks differ judge it alike. A holder in this machine's pid namespace whose
# process is gone has ended, whatever the renewTime says: the next session takes the Lease over
# at once.

LEASE_NAMESPACE = "kube-system"
LEASE_NAME = "kdrill-session"
# Longer than the longest API outage a drill causes with the built-in scenarios (control-plane-
# stop: a 60 s hold, then the API back 17 to 37 s later here), during which the holder cannot
# renew; a longer one is said at the session's end (ContextLease.lost).
LEASE_SECONDS = 300
RENEW_SECONDS = 20.0
LEASE_ENV = "KDRILL_CONTEXT_LEASE"
HOST = "kdrill.io/host"
PID = "kdrill.io/pid"
PID_START = "kdrill.io/pid-start"
PID_NAMESPACE = "kdrill.io/pid-namespace"


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot, /proc/PID/stat field 22), so a
    reused pid is not taken for the holder; None when there is no such process, or it has exited
    and is a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # A zombie has ended; nobody has reaped it yet (a container's pid 1 may never do so).
    return None if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X") else start_of(stat)


def start_of(stat: str) -> str:
    """Field 22 (starttime) of a /proc/PID/stat line. Field 2 (the command, in parentheses) may
    hold spaces and parentheses itself: fields are counted from the last ")"."""
    return stat.rsplit(")", 1)[1].split()[19]


def pid_namespace() -> str | None:
    """Where this process's pids mean something: the boot (``/proc/sys/kernel/random/boot_id``)
    and the pid namespace (the inode of ``/proc/self/ns/pid``); None where either is unknown. A
    host name alone does not say it: a container on the host network shares the host's name, not
    its pids."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}/{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return None


def holder_state(lease: dict[str, Any] | None, identity: str, now: float, machine: str | None,
                 alive: Callable[[int, str | None], bool]) -> str:
    """What a session with holder identity ``identity`` in pid namespace ``machine`` (see
    :func:`pid_namespace`; None: unknown) may do with ``lease`` (the Lease as the API returns it,
    a dict; None if there is none), at ``now`` (epoch seconds, the API server's clock):
    ``"free"`` (none, released, or expired), ``"ours"``, ``"dead"`` (held from this pid namespace
    by a process that is gone: ``alive(pid, start)`` says so) or ``"held"``."""
    if lease is None:
        return "free"
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    if not holder:
        return "free"
    if holder == identity:
        return "ours"
    if machine is not None and holder_here(lease, machine) and not holder_alive(lease, alive):
        return "dead"
    renewed = micro_time(spec.get("renewTime"))
    duration = spec.get("leaseDurationSeconds")
    if renewed is None or isinstance(duration, bool) or not isinstance(duration, int) or now > renewed + duration:
        return "free"
    return "held"


def holder_here(lease: dict[str, Any], machine: str) -> bool:
    """Whether ``lease``'s holder wrote it from pid namespace ``machine``."""
    return ((lease.get("metadata") or {}).get("annotations") or {}).get(PID_NAMESPACE) == machine


def holder_alive(lease: dict[str, Any], alive: Callable[[int, str | None], bool]) -> bool:
    """Whether ``lease``'s holder process is alive (asked of ``alive``; a pid that is not a
    number proves nothing: alive)."""
    annotations = (lease.get("metadata") or {}).get("annotations") or {}
    pid = annotations.get(PID)
    return not (isinstance(pid, str) and pid.isdigit()) or alive(int(pid), annotations.get(PID_START))


def micro_time(value: Any) -> float | None:
    """A Lease's MicroTime (RFC 3339 text, or the datetime the client makes of it) in epoch seconds."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=value.tzinfo or timezone.utc).timestamp()
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def format_micro_time(epoch: float) -> str:
    """``epoch`` as a MicroTime, never on a whole second: the client library re-serialises the body
    through its models (isoformat, which drops a zero fraction), and the API server parses
    MicroTime as RFC 3339 with six fractional digits."""
    moment = datetime.fromtimestamp(epoch, timezone.utc)
    if moment.microsecond == 0:
        moment = moment.replace(microsecond=1)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _alive(pid: int, start: str | None) -> bool:
    """Whether process ``pid`` runs and, when ``start`` is known, is the one that started then."""
    now_start = process_start(pid)
    if now_start is None:
        if Path(f"/proc/{pid}").exists():
            return False  # a zombie: it has ended
        try:
            os.kill(pid, 0)  # no /proc here: whether the pid exists at all
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return not start or now_start == start


class ContextLease:
    """One kdrill session at a time on an existing cluster: ``acquire()`` takes the Lease
    ``kube-system/kdrill-session`` (or confirms the hold of the live session that started this
    process, through ``$KDRILL_CONTEXT_LEASE``) and renews it every ``renew_seconds`` seconds in
    a thread; ``release()`` stops renewing and deletes it if it is still this session's.
    ``lost`` says why, if ever, this session found the Lease another's, or went unrenewed longer
    than it lasts, while it ran.

    Raises ClusterBusy (naming the holder's host, pid, and when the Lease expires) when another
    live session holds it, and ProviderError when the API does not let the Lease be read or taken.
    """

    def __init__(self, cluster, now: Callable[[], float] = time.time, renew_seconds: float = RENEW_SECONDS) -> None:
        self.cluster, self._local_now, self.renew_seconds = cluster, now, renew_seconds
        self.host = socket.gethostname()
        self.machine = pid_namespace()
        self.identity = f"{self.host}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
        self.inherited = False
        self.lost: str | None = None
        self._offset = 0.0  # the API server's clock minus this machine's, from its last answer
        self._renewed_at: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._api = None

    def _now(self) -> float:
        """Epoch seconds on the API server's clock (as of its last answer)."""
        return self._local_now() + self._offset

    def _leases(self):
        if self._api is None:
            self._api = client.CoordinationV1Api(self.cluster.new_api())
        return self._api

    def _server_clock(self, headers) -> None:
        date = (headers or {}).get("Date") if hasattr(headers, "get") else None
        if date:
            try:
                self._offset = parsedate_to_datetime(date).timestamp() - self._local_now()
            except (TypeError, ValueError):
                pass

    def _read(self) -> dict[str, Any] | None:
        try:
            response = self._leases().read_namespaced_lease(LEASE_NAME, LEASE_NAMESPACE, _request_timeout=10,
                                                            _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                self._server_clock(exc.headers)
                return None
            raise
        self._server_clock(response.headers)
        return json.loads(response.data)

    def _body(self, current: dict[str, Any] | None) -> dict[str, Any]:
        now = format_micro_time(self._now())
        spec = (current or {}).get("spec") or {}
        ours = spec.get("holderIdentity") == self.identity
        annotations = {HOST: self.host, PID: str(os.getpid()), PID_START: process_start(os.getpid()) or ""}
        if self.machine is not None:
            annotations[PID_NAMESPACE] = self.machine
        metadata: dict[str, Any] = {"name": LEASE_NAME, "namespace": LEASE_NAMESPACE,
                                    "labels": {"app.kubernetes.io/managed-by": "kdrill"}, "annotations": annotations}
        if current is not None:
            metadata["resourceVersion"] = current["metadata"]["resourceVersion"]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata,
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": LEASE_SECONDS,
                         "acquireTime": spec.get("acquireTime") if ours else now, "renewTime": now,
                         "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if ours or current is None else 1)}}

    def _write(self, current: dict[str, Any] | None) -> None:
        """Create or replace the Lease as this session's; the replace carries ``current``'s
        resourceVersion, so it fails with 409 if anyone wrote it since. Raises ApiException."""
        if current is None:
            self._leases().create_namespaced_lease(LEASE_NAMESPACE, self._body(None), _request_timeout=10)
        else:
            self._leases().replace_namespaced_lease(LEASE_NAME, LEASE_NAMESPACE, self._body(current),
                                                    _request_timeout=10)
        self._renewed_at = time.monotonic()

    def state(self, lease: dict[str, Any] | None) -> str:
        return holder_state(lease, self.identity, self._now(), self.machine, _alive)

    def _inherits(self, current: dict[str, Any] | None) -> bool:
        """Whether ``current`` is held, unexpired, by the live session named in $KDRILL_CONTEXT_LEASE
        (it started this process): a variable left in a shell after that session ended is not."""
        inherited = os.environ.get(LEASE_ENV)
        if not inherited or current is None or (current.get("spec") or {}).get("holderIdentity") != inherited:
            return False
        if holder_state(current, "", self._now(), None, _alive) != "held":
            return False  # expired
        return self.machine is not None and holder_here(current, self.machine) and holder_alive(current, _alive)

    def acquire(self) -> "ContextLease":
        where = f"Lease {LEASE_NAMESPACE}/{LEASE_NAME} on context {self.cluster.context!r}"
        try:
            current = self._read()
            if self._inherits(current):
                self.identity, self.inherited = os.environ[LEASE_ENV], True
                return self
            if self.state(current) == "held":
                raise ClusterBusy(busy_message(current, self.cluster.context, self._now()))
            # The write carries what was read (a create, or a replace at its resourceVersion): a
            # session that took the Lease since makes it fail with 409.
            self._write(current)
        except ApiException as exc:
            if exc.status == 409:
                try:
                    taken = self._read()
                except Exception:  # noqa: BLE001 - the refusal stands without the holder's name
                    taken = None
                raise ClusterBusy(busy_message(taken, self.cluster.context, self._now())) from None
            raise ProviderError(f"kdrill could not take its session {where}: HTTP {exc.status} {exc.reason}; "
                                "one kdrill session at a time is kept by that Lease (it needs get, create, update "
                                f"and delete on leases in {LEASE_NAMESPACE})") from None
        except ClusterBusy:
            raise
        except Exception as exc:  # noqa: BLE001 - the API endpoint does not answer (urllib3's errors, OSError)
            raise ProviderError(f"kdrill could not take its session {where}: {type(exc).__name__}: {exc}"[:500]) from None
        os.environ[LEASE_ENV] = self.identity  # kdrill processes this session starts may use the cluster
        self._thread = threading.Thread(target=self._renew, name="kdrill-session-lease", daemon=True)
        self._thread.start()
        return self

    def _renew(self) -> None:
        # Renewals that fail (the API down during a control-plane drill) are retried at the next
        # tick. Only a Lease that is still this session's, or none at all (deleted by hand), is
        # written: one another session holds is never taken back, it is said (lost).
        while not self._stop.wait(self.renew_seconds):
            try:
                current = self._read()
                if current is None or self.state(current) == "ours":
                    self._write(current)
                elif not self.lost:
                    self.lost = busy_message(current, self.cluster.context, self._now())
                    log.warning("kdrill session lost its Lease: %s", self.lost)
            except Exception as exc:  # noqa: BLE001 - retried at the next tick
                log.info("session Lease not renewed (retried in %.0f s): %s", self.renew_seconds, exc)
            unrenewed = time.monotonic() - (self._renewed_at or time.monotonic())
            if unrenewed > LEASE_SECONDS and not self.lost:
                self.lost = (f"the session Lease on context {self.cluster.context!r} went unrenewed for "
                             f"{unrenewed:.0f} s, longer than it lasts ({LEASE_SECONDS} s): another session could "
                             "have taken the cluster meanwhile")
                log.warning("kdrill: %s", self.lost)

    def release(self) -> None:
        """Stop renewing; delete the Lease if it is still this session's. Never raises: a Lease
        that cannot be deleted expires LEASE_SECONDS seconds after its last renewal."""
        if self.inherited:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        os.environ.pop(LEASE_ENV, None)
        try:
            current = self._read()
            if self.state(current) == "ours":
                self._delete(current)
        except Exception as exc:  # noqa: BLE001 - said; the Lease expires on its own
            log.warning("kdrill session Lease %s/%s not deleted (%s); it expires %d s after its last renewal",
                        LEASE_NAMESPACE, LEASE_NAME, exc, LEASE_SECONDS)

    def remove_if_dead(self) -> str | None:
        """Delete the Lease if a process of this pid namespace that is gone holds it (a session
        killed before it could release it: ``kdrill recover``'s clean-up). Returns what was
        removed, or None. Raises ApiException."""
        current = self._read()
        if self.state(current) != "dead":
            return None
        self._delete(current)
        return f"the Lease {LEASE_NAMESPACE}/{LEASE_NAME} of kdrill pid {current['metadata']['annotations'].get(PID)}, gone"

    def _delete(self, current: dict[str, Any]) -> None:
        """Delete the Lease as ``current`` shows it: if anyone wrote it since, the API refuses
        (409) and it stays. Raises ApiException."""
        self._leases().delete_namespaced_lease(
            LEASE_NAME, LEASE_NAMESPACE, _request_timeout=10,
            body=client.V1DeleteOptions(preconditions=client.V1Preconditions(
                uid=current["metadata"]["uid"], resource_version=current["metadata"]["resourceVersion"])))


def busy_message(lease: dict[str, Any] | None, context: str | None, now: float) -> str:
    """Who holds the session Lease and until when, for the refusal."""
    if lease is None:
        return f"another kdrill session took the session Lease on context {context!r} at the same moment; try again"
    spec, annotations = lease.get("spec") or {}, (lease.get("metadata") or {}).get("annotations") or {}
    renewed = micro_time(spec.get("renewTime"))
    expires = (f"; if that session is gone, the Lease expires in {max(0, renewed + spec.get('leaseDurationSeconds', 0) - now):.0f} s"
               if renewed is not None else "")
    return (f"another kdrill session (host {annotations.get(HOST, '?')}, pid {annotations.get(PID, '?')}) is running drills "
            f"on context {context!r}: it holds the Lease {LEASE_NAMESPACE}/{LEASE_NAME}, renewed "
            + (f"{now - renewed:.0f} s ago" if renewed is not None else "at an unknown time")
            + f"{expires}; wait for it to end (if you know it has ended, "
            f"`kubectl -n {LEASE_NAMESPACE} delete lease {LEASE_NAME}` frees the cluster at once)")
