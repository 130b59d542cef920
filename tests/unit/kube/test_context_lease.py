"""One session at a time on an existing cluster: the decision on a Lease as the API returns it
(harness.kube.session_lock.holder_state), its times, and the refusal's words. The Lease itself is
taken, refused and released on a real cluster in tests/cluster/test_context_lease_cluster.py."""

import os
import subprocess
import sys

from harness.core.waiting import wait_until
from harness.kube.session_lock import (
    HOST,
    PID,
    PID_NAMESPACE,
    PID_START,
    busy_message,
    format_micro_time,
    holder_state,
    micro_time,
    process_start,
    start_of,
)

NOW = 1_800_000_000.0


def lease(holder="other-host/1/abc", renewed=NOW - 10, duration=300, host="other-host", pid="1", start="5",
          machine="boot-b/4026531836"):
    return {"metadata": {"annotations": {HOST: host, PID: pid, PID_START: start, PID_NAMESPACE: machine},
                         "resourceVersion": "7"},
            "spec": {"holderIdentity": holder, "renewTime": format_micro_time(renewed) if renewed else None,
                     "leaseDurationSeconds": duration}}


def never_alive(pid, start):
    return False


def always_alive(pid, start):
    return True


HERE = "boot-a/4026531836"


def state(current, alive=always_alive, identity="me-host/2/def", machine=HERE):
    return holder_state(current, identity, NOW, machine, alive)


def test_no_lease_or_no_holder_is_free():
    assert state(None) == "free"
    assert state(lease(holder="")) == "free"


def test_a_live_holder_elsewhere_within_its_duration_is_held_and_after_it_free():
    assert state(lease(renewed=NOW - 299)) == "held"
    assert state(lease(renewed=NOW - 301)) == "free"
    # No renewal time or duration: nothing says it is alive.
    assert state(lease(renewed=None)) == "free"
    assert state(lease(duration=None)) == "free"
    assert state(lease(duration=True)) == "free"


def test_a_holder_in_another_pid_namespace_is_judged_by_time_alone_even_if_its_pid_is_free_here():
    assert state(lease(machine="boot-b/4026531836"), alive=never_alive) == "held"
    # The same host name is not the same pids (a container on the host network shares the name).
    assert state(lease(host="me-host", machine="boot-a/4026532999"), alive=never_alive) == "held"
    # Where this session cannot tell its own pid namespace (no /proc), nobody is judged dead.
    assert state(lease(machine=HERE), alive=never_alive, machine=None) == "held"


def test_a_holder_in_this_pid_namespace_whose_process_is_gone_has_ended_whatever_its_renewal_says():
    assert state(lease(machine=HERE, renewed=NOW - 1), alive=never_alive) == "dead"
    assert state(lease(machine=HERE, renewed=NOW - 1), alive=always_alive) == "held"
    # A pid that is not a number proves nothing: judged by time.
    assert state(lease(machine=HERE, pid="x"), alive=never_alive) == "held"


def test_our_own_identity_is_ours():
    assert state(lease(holder="me-host/2/def")) == "ours"


def test_micro_time_is_never_on_a_whole_second_and_reads_back():
    # The client re-serialises the body with isoformat, which drops a zero fraction, and the API
    # server then refuses the MicroTime: a whole second is moved by 1 microsecond.
    text = format_micro_time(NOW)
    assert text.endswith(".000001Z")
    assert abs(micro_time(text) - NOW) < 1e-5
    assert micro_time(format_micro_time(NOW + 0.25)) == NOW + 0.25
    assert micro_time("not a time") is None and micro_time(None) is None


def test_the_refusal_names_the_holder_and_when_the_lease_expires():
    message = busy_message(lease(renewed=NOW - 100, host="laptop-7", pid="4242"), "prod", NOW)
    assert "host laptop-7, pid 4242" in message and "'prod'" in message
    assert "renewed 100 s ago" in message and "expires in 200 s" in message
    assert "try again" in busy_message(None, "prod", NOW)


def test_start_of_counts_fields_from_the_last_parenthesis():
    fields = " ".join(str(n) for n in range(3, 53))  # field n holds n, from the state (3) on
    assert start_of(f"1 (init) {fields}") == "22"
    assert start_of(f"123 (a) b) (c) {fields}") == "22"


def test_a_process_start_tells_a_live_pid_from_a_gone_one_and_a_zombie_is_gone():
    assert process_start(os.getpid()) is not None
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    # Exited, not yet reaped: a zombie, which is what a killed session's process can stay as.
    assert wait_until(lambda: process_start(child.pid) is None, 30, interval_seconds=0.05).ok
    child.wait()
    assert process_start(child.pid) is None


def test_alive_treats_an_unknown_start_as_unknown_and_a_zombie_as_gone():
    from harness.kube.session_lock import _alive

    me = os.getpid()
    assert _alive(me, process_start(me)) and _alive(me, "") and _alive(me, None)
    assert not _alive(me, "1")  # a pid reused by another process since
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    start = None
    while child.poll() is None and start is None:
        start = process_start(child.pid)
    assert wait_until(lambda: process_start(child.pid) is None, 30, interval_seconds=0.05).ok
    assert not _alive(child.pid, start or "1")  # a zombie, not yet reaped
    child.wait()
    assert not _alive(child.pid, "") and not _alive(child.pid, None)


def test_this_machines_pid_namespace_is_known_here():
    from harness.kube.session_lock import pid_namespace

    machine = pid_namespace()
    assert machine is not None and machine.count("/") == 1 and machine.split("/")[1].isdigit()
