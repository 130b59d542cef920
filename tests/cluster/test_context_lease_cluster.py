"""One kdrill session at a time on a cluster reached through its kubeconfig
(harness.kube.session_lock.ContextLease): the Lease kube-system/kdrill-session on the real cluster.

The session's kind cluster is addressed by its context, as an existing cluster is. While this
test holds the Lease, the real ``kdrill run`` on that context is refused before it makes
anything, naming this process as the holder; a process the holder starts itself may go on; a
holder from this machine whose process is gone is taken over at once; and the Lease is gone once
released.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.core.waiting import wait_until
from harness.kube.session_lock import (
    HOST,
    LEASE_ENV,
    LEASE_NAME,
    LEASE_NAMESPACE,
    PID,
    PID_NAMESPACE,
    PID_START,
    ContextLease,
    format_micro_time,
    pid_namespace,
)

pytestmark = [pytest.mark.cluster]

REPO_ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import sys
from harness.kube.providers.existing import existing_cluster
from harness.core.waiting import wait_until
from harness.kube.session_lock import ClusterBusy, ContextLease
try:
    lease = ContextLease(existing_cluster(sys.argv[1], sys.argv[2])).acquire()
    print("inherited" if lease.inherited else "acquired")
    lease.release()
except ClusterBusy as exc:
    print("busy:", exc)
"""


def read_lease(cluster) -> client.V1Lease | None:
    try:
        return client.CoordinationV1Api(cluster.api).read_namespaced_lease(LEASE_NAME, LEASE_NAMESPACE,
                                                                           _request_timeout=10)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def child(cluster, env) -> str:
    return subprocess.run([sys.executable, "-c", CHILD, str(cluster.kubeconfig), cluster.context], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=120).stdout.strip()


def test_a_second_session_on_a_context_is_refused_before_it_makes_anything(kdrill_cluster, tmp_path, monkeypatch):
    monkeypatch.delenv(LEASE_ENV, raising=False)
    assert read_lease(kdrill_cluster) is None, "a session Lease is left on the cluster from before this test"
    lease = ContextLease(kdrill_cluster, renew_seconds=2.0).acquire()
    try:
        held = read_lease(kdrill_cluster)
        assert held.spec.holder_identity == lease.identity and held.spec.lease_duration_seconds == 300
        assert held.metadata.annotations[PID] == str(os.getpid())
        namespaces = {ns.metadata.name for ns in kdrill_cluster.core.list_namespace(_request_timeout=10).items}
        others = {k: v for k, v in os.environ.items() if k != LEASE_ENV}
        context = kdrill_cluster.context
        run = subprocess.run(
            [sys.executable, "-m", "harness.cli", "--reports", str(tmp_path / "reports"), "run", "pod-delete",
             "--run-id", "refused", "--kubeconfig", str(kdrill_cluster.kubeconfig), "--context", context,
             "--allow-context", context],
            cwd=REPO_ROOT, env={**others, "KDRILL_STATE_DIR": str(tmp_path / "state")}, capture_output=True,
            text=True, timeout=600)
        out = run.stdout + run.stderr
        assert run.returncode != 0, out[-3000:]
        assert f"pid {os.getpid()}" in out and "refused: another kdrill session" in out, out[-3000:]
        # Refused before anything was made: no namespace, no node agent; the drill has a record saying why.
        after = {ns.metadata.name for ns in kdrill_cluster.core.list_namespace(_request_timeout=10).items}
        assert after == namespaces, after ^ namespaces
        record = json.loads((tmp_path / "reports" / "refused" / "pod-delete.json").read_text())
        assert record["verdict"] != "passed" and "another kdrill session" in json.dumps(record), record["verdict"]
        # A process this session starts itself carries the holder's identity and may go on.
        assert child(kdrill_cluster, {**others, LEASE_ENV: lease.identity}) == "inherited"
        assert child(kdrill_cluster, others).startswith("busy:")
        # The holder renews it: renewTime moves while the Lease is held.
        renewed = wait_until(lambda: read_lease(kdrill_cluster).spec.renew_time > held.spec.renew_time, 30)
        assert renewed.ok and read_lease(kdrill_cluster).spec.holder_identity == lease.identity
    finally:
        lease.release()
    assert read_lease(kdrill_cluster) is None
    assert child(kdrill_cluster, {k: v for k, v in os.environ.items() if k != LEASE_ENV}) == "acquired"
    assert read_lease(kdrill_cluster) is None


def test_a_lease_left_by_a_dead_process_on_this_machine_is_taken_over_at_once(kdrill_cluster, monkeypatch):
    import socket
    import time

    monkeypatch.delenv(LEASE_ENV, raising=False)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    now = format_micro_time(time.time())
    leases = client.CoordinationV1Api(kdrill_cluster.api)
    leases.create_namespaced_lease(LEASE_NAMESPACE, {
        "metadata": {"name": LEASE_NAME, "annotations": {HOST: socket.gethostname(), PID: str(gone.pid),
                                                        PID_START: "1", PID_NAMESPACE: pid_namespace()}},
        "spec": {"holderIdentity": f"{socket.gethostname()}/{gone.pid}/killed", "leaseDurationSeconds": 300,
                 "acquireTime": now, "renewTime": now}}, _request_timeout=10)
    try:
        lease = ContextLease(kdrill_cluster).acquire()
        assert read_lease(kdrill_cluster).spec.holder_identity == lease.identity
        assert read_lease(kdrill_cluster).spec.lease_transitions == 1
        lease.release()
        assert read_lease(kdrill_cluster) is None
    finally:
        if read_lease(kdrill_cluster) is not None:
            leases.delete_namespaced_lease(LEASE_NAME, LEASE_NAMESPACE, _request_timeout=10)


def test_a_lease_another_session_took_is_never_taken_back_and_the_holder_says_it_lost_it(kdrill_cluster, monkeypatch):
    import time

    monkeypatch.delenv(LEASE_ENV, raising=False)
    lease = ContextLease(kdrill_cluster, renew_seconds=1.0).acquire()
    leases = client.CoordinationV1Api(kdrill_cluster.api)
    try:
        held = leases.read_namespaced_lease(LEASE_NAME, LEASE_NAMESPACE, _request_timeout=10)
        # Another session (elsewhere: its own pid namespace) holds it now, renewed just now.
        held.spec.holder_identity = "elsewhere/77/other"
        held.spec.renew_time = None
        body = client.ApiClient().sanitize_for_serialization(held)
        body["spec"]["renewTime"] = format_micro_time(time.time())
        body["metadata"]["annotations"] = {HOST: "elsewhere", PID: "77", PID_START: "1", PID_NAMESPACE: "other/1"}
        leases.replace_namespaced_lease(LEASE_NAME, LEASE_NAMESPACE, body, _request_timeout=10)
        said = wait_until(lambda: lease.lost is not None, 30, interval_seconds=0.5)
        assert said.ok and "host elsewhere, pid 77" in lease.lost, lease.lost
        assert read_lease(kdrill_cluster).spec.holder_identity == "elsewhere/77/other"
    finally:
        lease.release()
        # Not ours: the release left it; this test removes what it made.
        assert read_lease(kdrill_cluster).spec.holder_identity == "elsewhere/77/other"
        leases.delete_namespaced_lease(LEASE_NAME, LEASE_NAMESPACE, _request_timeout=10)
