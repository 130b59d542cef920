"""Work held on a node itself: transient systemd units that run a shell script at a set moment,
whether or not kdrill can still reach the node then.

Why: through the node agent a command reaches a node as API server -> kubelet -> container
runtime. A fault that stops the kubelet or the API server cuts that channel for its whole window,
so its revert (and anything the drill must do on a node meanwhile) cannot be sent then. It is
sent before, as a timer on the node (``systemd-run --on-active``): a dead man's switch that fires
at its due time even if kdrill is killed, the agent pod deleted or the API never answers. kdrill
stops the timer when it can do the work sooner (and, when it can reach the node, does it itself).

Every unit is named ``kdrill-...``, ends on its own (``RuntimeMaxSec``), is garbage-collected when
done (``--collect``), and records when its script started in ``/run/kdrill-units/UNIT.at`` (epoch
seconds, the node's clock); a sampler writes one JSON line per sample to ``/run/kdrill-units/UNIT.jsonl``.
``/run`` is a tmpfs: nothing is left on the node's disk.

Source: systemd "systemd-run" (transient timer and service units,
https://www.freedesktop.org/software/systemd/man/latest/systemd-run.html).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
from typing import Any, Callable

from harness.core.waiting import wait_until
from harness.kube.providers import Cluster, NoNodeAccess, ProviderError

STATE_DIR = "/run/kdrill-units"
PREFIX = "kdrill-"
# A unit scheduled closer than this to its due time may fire late: the exec that sets it up takes
# about 0.3 s through the node agent on this machine (0.05 s through docker exec).
MIN_LEAD_SECONDS = 0.2
_NAME = re.compile(r"kdrill-[a-z0-9-]{1,80}")


class UnitError(ProviderError):
    """A unit could not be scheduled, or its record not read."""


def check_name(unit: str) -> str:
    """``unit`` when it is a kdrill unit name (``kdrill-`` and lower-case letters, digits, dashes);
    raises UnitError otherwise."""
    if not _NAME.fullmatch(unit):
        raise UnitError(f"unit name must be all of {_NAME.pattern}, got {unit!r}")
    return unit


def _recorded(unit: str, script: str) -> str:
    """``script`` preceded by writing its start time to ``STATE_DIR/UNIT.at``."""
    return f"mkdir -p {STATE_DIR} && date +%s.%N > {STATE_DIR}/{unit}.at; {script}"


def schedule(cluster: Cluster, node: str, unit: str, script: str, at: float, runtime_max_seconds: float,
             stop_post: str | None = None, record_exit: bool = False) -> float:
    """Run ``script`` (``/bin/sh -c``) on ``node`` at epoch ``at`` (seconds, this machine's clock;
    the node's timer counts the remaining seconds, so a node's clock offset does not matter), as
    the transient service ``unit`` with a timer, killed after ``runtime_max_seconds``.
    ``stop_post``: a command systemd runs after the script however it ended. With it or with
    ``record_exit`` the script's exit status is recorded, read with :func:`exit_status` (as for
    :func:`run_now`). Returns the seconds the timer was set to. Raises UnitError when ``at`` is
    less than MIN_LEAD_SECONDS away or the unit cannot be made, ProviderError/NoNodeAccess from
    the node channel."""
    check_name(unit)
    _unexpanded(script)
    lead = at - time.time()
    if lead < MIN_LEAD_SECONDS:
        raise UnitError(f"unit {unit} on {node}: due in {lead:.3f} s, less than {MIN_LEAD_SECONDS} s ahead")
    recorded = bool(stop_post) or record_exit
    after = [_after_property(unit, stop_post)] if recorded else []
    body = _exit_recorded(unit, script) if recorded else script
    command = ["systemd-run", f"--unit={unit}", "--collect", "--quiet",
               f"--description=kdrill: {unit}", f"--property=RuntimeMaxSec={max(1, int(runtime_max_seconds))}",
               *after, f"--on-active={lead:.3f}s", "--timer-property=AccuracySec=10ms",
               "/bin/sh", "-c", _recorded(unit, body)]
    result = cluster.node_exec(node, command, timeout_seconds=30, check=False)
    if result.returncode != 0:
        raise UnitError(f"on node {node}: systemd-run of {unit} exited {result.returncode}: "
                        f"{(result.stderr or result.stdout).strip()[:300]}")
    return lead


def _exit_recorded(unit: str, script: str) -> str:
    """``script`` followed by writing its exit status to ``STATE_DIR/UNIT.rc``."""
    return f"( {_unexpanded(script)} ); rc=$?; echo $rc > {STATE_DIR}/{unit}.rc; exit $rc"


def _after_property(unit: str, stop_post: str | None) -> str:
    """The ExecStopPost property: ``stop_post``, then, if the script could not record its exit
    status (systemd ended it), how systemd ended it (SERVICE_RESULT, set for ExecStopPost)."""
    rc = f"{STATE_DIR}/{unit}.rc"
    after = (f"{stop_post}; " if stop_post else "") + f'[ -s {rc} ] || echo "ended by systemd: $SERVICE_RESULT" > {rc}'
    return f"--property=ExecStopPost=/bin/sh -c {shlex.quote(_unexpanded(after))}"


def run_now(cluster: Cluster, node: str, unit: str, script: str, runtime_max_seconds: float,
            stop_post: str | None = None) -> str | None:
    """Start ``script`` (``/bin/sh -c``) on ``node`` now, as the transient service ``unit``, and
    return without waiting for it: the node's systemd runs it to its end whatever becomes of the
    command that started it (through the node agent that command is cut as soon as the script
    stops the kubelet). Its exit status is then read with :func:`exit_status`. ``stop_post``, a
    command systemd runs after the script however it ended (killed after
    ``runtime_max_seconds`` included): what must never be left undone.

    Returns None when systemd-run said it started the unit, or why the command that started it
    gave no exit status (cut, timed out after 30 seconds, the node channel failed): the unit may
    run all the same, the script itself can cut that command, so only :func:`exit_status` tells.
    Raises UnitError when systemd refuses the unit (nothing runs), NoNodeAccess."""
    check_name(unit)
    command = ["systemd-run", f"--unit={unit}", "--collect", "--quiet", f"--description=kdrill: {unit}",
               f"--property=RuntimeMaxSec={max(1, int(runtime_max_seconds))}", _after_property(unit, stop_post),
               "/bin/sh", "-c", _recorded(unit, _exit_recorded(unit, script))]
    try:
        result = cluster.node_exec(node, command, timeout_seconds=30, check=False)
    except NoNodeAccess:
        raise
    except (ProviderError, subprocess.TimeoutExpired) as exc:
        return f"on node {node}: systemd-run of {unit} did not return: {exc}"
    if result.returncode < 0:  # the node agent's exec stream closed without an exit status
        return f"on node {node}: systemd-run of {unit} ended with no exit status (cut)"
    if result.returncode != 0:
        raise UnitError(f"on node {node}: systemd-run of {unit} exited {result.returncode}: "
                        f"{(result.stderr or result.stdout).strip()[:300]}")
    return None


def exit_status(cluster: Cluster, node: str, unit: str) -> int | str | None:
    """How a unit started by :func:`run_now` (or scheduled with ``stop_post`` or ``record_exit``)
    ended: its script's exit status, or, when systemd ended it first (``RuntimeMaxSec``),
    ``"ended by systemd: RESULT"``; None while it runs (or if it never started). Raises
    ProviderError/NoNodeAccess when the node cannot be reached."""
    out = cluster.node_exec(node, ["sh", "-c", f"cat {STATE_DIR}/{check_name(unit)}.rc 2>/dev/null; true"],
                            timeout_seconds=30).stdout.strip()
    return int(out) if out.isdigit() else (out or None)


def ended(cluster: Cluster, node: str, unit: str) -> tuple[int | str] | None:
    """:func:`exit_status` as a one-tuple once the unit has ended (exit status 0 is an answer),
    else None: a condition for :func:`harness.core.waiting.wait_until`. Raises as exit_status."""
    status = exit_status(cluster, node, unit)
    return None if status is None else (status,)


def _unexpanded(script: str) -> str:
    """``script`` when systemd passes it to the shell as written; raises UnitError otherwise. The
    service manager expands ``${NAME}`` and ``$$`` anywhere in a command's arguments (systemd.service,
    "Command lines"); kdrill's scripts use neither."""
    if "${" in script or "$$" in script:
        raise UnitError(f"a unit's script must not hold '${{' or '$$' (systemd would expand them): {script[:200]}")
    return script


def sampler_script(unit: str, command: str, interval_seconds: float, count: int) -> str:
    """A script that runs ``command`` (its stdout must be one JSON document) ``count`` times,
    ``interval_seconds`` apart, appending ``{"t": epoch seconds, "ok": bool, "out": ...}`` lines to
    ``STATE_DIR/UNIT.jsonl``. Bounded in count (and, as a unit, in time)."""
    out = f"{STATE_DIR}/{unit}.jsonl"
    return (f": > {out}; i=0; while [ $i -lt {int(count)} ]; do i=$((i+1)); t=$(date +%s.%N); "
            f"o=$({command} 2>/dev/null | tr -d '\\n'); "
            f"if [ -n \"$o\" ]; then printf '{{\"t\":%s,\"ok\":true,\"out\":%s}}\\n' \"$t\" \"$o\" >> {out}; "
            f"else printf '{{\"t\":%s,\"ok\":false,\"out\":null}}\\n' \"$t\" >> {out}; fi; "
            f"sleep {interval_seconds:g}; done")


def cancel(cluster: Cluster, node: str, units: list[str]) -> None:
    """Stop ``units`` (their timers and services) on ``node``: a timer that has not fired never
    will. A unit already gone is fine. Raises ProviderError/NoNodeAccess when the node cannot be
    reached, subprocess.TimeoutExpired."""
    names = [f"{check_name(u)}.{suffix}" for u in units for suffix in ("timer", "service")]
    cluster.node_exec(node, ["sh", "-c", f"systemctl stop {' '.join(names)} 2>/dev/null; "
                                         f"systemctl reset-failed {' '.join(names)} 2>/dev/null; true"],
                      timeout_seconds=30)


def start_then_cancel(cluster: Cluster, node: str, first: list[str], script: str, then: list[str]) -> None:
    """In one command on ``node``: stop the units ``first``, run ``script`` and, only if it
    succeeded, stop the units ``then`` (e.g. a fault's stop timer, the revert itself, the revert's
    timer: a command cut short never removes a revert that has not happened). Raises
    ProviderError/NoNodeAccess, subprocess.TimeoutExpired."""
    def names(units: list[str]) -> str:
        return " ".join(f"{check_name(u)}.{suffix}" for u in units for suffix in ("timer", "service"))

    cluster.node_exec(node, ["sh", "-c", f"systemctl stop {names(first)} 2>/dev/null; "
                                         f"systemctl reset-failed {names(first)} 2>/dev/null; {script} && "
                                         f"{{ systemctl stop {names(then)} 2>/dev/null; "
                                         f"systemctl reset-failed {names(then)} 2>/dev/null; true; }}"],
                      timeout_seconds=60)


def once_reachable(action: Callable[[], Any], due: float, deadline_seconds: float) -> Exception | None:
    """Call ``action`` (a command for a node whose kubelet a timer held there starts at epoch
    ``due``) every second until it goes through, at most ``deadline_seconds`` after ``due``: through
    the node agent the node cannot be reached before. Returns None once it went through, else
    the last error."""

    last: list[Exception | None] = [None]

    def went_through() -> bool:
        try:
            action()
            return True
        except Exception as exc:  # noqa: BLE001 - not reachable yet
            last[0] = exc
            return False

    done = wait_until(went_through, max(1.0, due + deadline_seconds - time.time()), interval_seconds=1.0)
    return None if done.ok else last[0]


def pending(cluster: Cluster, node: str) -> list[str]:
    """kdrill timers on ``node`` that have not fired yet (unit names, without ``.timer``)."""
    out = cluster.node_exec(node, ["systemctl", "list-timers", f"{PREFIX}*", "--no-legend", "--plain",
                                   "--all"], timeout_seconds=30).stdout
    names = set()
    for line in out.splitlines():
        for word in line.split():
            if word.startswith(PREFIX) and word.endswith(".timer"):
                names.add(word[: -len(".timer")])
    return sorted(names)


def started_at(cluster: Cluster, node: str, unit: str, clock_offset_seconds: float = 0.0) -> float | None:
    """When ``unit``'s script started on ``node``, or None if it has not: epoch seconds on the
    host's clock, the node's record minus ``clock_offset_seconds`` (the node's clock minus the
    host's, :func:`harness.components.topology.clock_offset`; 0 leaves the node's clock). Raises
    ProviderError/NoNodeAccess when the node cannot be reached."""
    out = cluster.node_exec(node, ["sh", "-c", f"cat {STATE_DIR}/{check_name(unit)}.at 2>/dev/null; true"],
                            timeout_seconds=30).stdout.strip()
    try:
        return float(out) - clock_offset_seconds if out else None
    except ValueError:
        return None


def samples(cluster: Cluster, node: str, unit: str) -> list[dict]:
    """The lines a sampler unit wrote (see :func:`sampler_script`), in order; a line cut short by
    the unit's end is dropped. Raises ProviderError/NoNodeAccess when the node cannot be reached."""
    out = cluster.node_exec(node, ["sh", "-c", f"cat {STATE_DIR}/{check_name(unit)}.jsonl 2>/dev/null; true"],
                            timeout_seconds=60).stdout
    lines = []
    for line in out.splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            continue
    return lines


def forget(cluster: Cluster, node: str, units: list[str]) -> None:
    """Remove ``units``' records from ``node`` (after they were read). Raises ProviderError."""
    files = " ".join(shlex.quote(f"{STATE_DIR}/{check_name(u)}{ext}") for u in units
                     for ext in (".at", ".jsonl", ".rc", ".lock"))
    cluster.node_exec(node, ["sh", "-c", f"rm -f {files}"], timeout_seconds=30)


def remove_units(cluster: Cluster, units: dict[str, list[str]]) -> list[str]:
    """Stop and remove ``units`` (node -> unit names) on every node, each node on its own: one that
    does not answer does not keep the others' from going. Returns what failed, per node."""
    errors = []
    for node, names in units.items():
        try:
            cancel(cluster, node, names)
            forget(cluster, node, names)
        except Exception as exc:
            errors.append(f"{node}: {', '.join(names)} not removed: {type(exc).__name__}: {exc}"[:300])
    return errors
