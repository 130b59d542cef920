"""Drill: native sidecars start before the app, stop after it, and do not hold a Job open
(scenarios/native-sidecars.yaml)

A StatefulSet's pod ``ordered-0`` has a sidecar (an init container with ``restartPolicy: Always``)
whose startup probe succeeds only once it has run ``STARTUP_SECONDS``, and an app that, on
SIGTERM, keeps serving for ``APP_STOP_SECONDS`` before it exits (an app draining its
connections). Both write, on SIGTERM, when it came (epoch seconds; kind's nodes share this
machine's clock) to their termination message, and the sidecar also whether the app still
accepted a connection on ``127.0.0.1`` then (the pod's containers share one network namespace).

- start: the app's container starts only after the sidecar's startup probe has succeeded, read
  from the pod's container statuses (``startedAt``, whole seconds), for the first pod and for its
  replacement;
- stop: the pod is deleted (fault ``pod-delete``, with the scenario's grace period, which is the
  pods' own too), its status watched until the API removes it: the sidecar is sent SIGTERM only
  after the app has exited, so it finds nothing listening;
- Job: a Job whose pod has the same kind of sidecar (running until it is stopped) completes when
  its main container exits; the kubelet then stops the sidecar.

Why a Python drill: the order of two containers' starts and stops, read from the pod's statuses
and termination messages, is not a probe's success or failure.

Source: "Sidecar Containers",
https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/ (and "Pod Lifecycle",
"Jobs"). Everything is made in the drill namespace (deleted with it).
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client, watch

from harness.core.waiting import wait_until
from harness.faults.pod_delete import PodDelete
from harness.kube.workloads import TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY

STARTUP_SECONDS = 5   # the sidecar's startup probe succeeds this long after it started
APP_STOP_SECONDS = 3  # the app serves this long after its SIGTERM before it exits
JOB_MAIN_SECONDS = 2  # the Job's main container runs this long, then exits 0
# Deadlines, not measurements: a pod of the preloaded toolbox image starts in seconds here.
READY_DEADLINE_SECONDS = 90
GONE_AFTER_GRACE_SECONDS = 45  # past the grace period, for the kubelet's last status and the removal

# The sidecar: its startup probe reads /tmp/started, made $STARTUP_SECONDS after it started; on
# SIGTERM it tries the app's port, writes what it found and when, and exits.
SIDECAR = """
import os, signal, socket, sys, time
def stop(*_):
    at = time.time()
    try:
        socket.create_connection(("127.0.0.1", 8080), timeout=0.5).close()
        answered = "true"
    except OSError:
        answered = "false"
    open("/dev/termination-log", "w").write(f"term_at={at:.3f} app_answered={answered}")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
time.sleep(int(os.environ["STARTUP_SECONDS"]))
open("/tmp/started", "w").close()
while True:
    time.sleep(3600)
"""
# The app: the built-in HTTP server, kept serving for APP_STOP_SECONDS after SIGTERM.
APP = f"""
import signal, subprocess, sys, time
server = subprocess.Popen(["kdrill-http"])
def stop(*_):
    at = time.time()
    time.sleep({APP_STOP_SECONDS})
    open("/dev/termination-log", "w").write(f"term_at={{at:.3f}}")
    server.terminate()
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
server.wait()
"""


@pytest.mark.cluster
@pytest.mark.scenario("native-sidecars")
def test_native_sidecars(drill):
    with drill.phase("start"):
        drill.fresh_namespace()
        ns = drill.namespace
        apps = client.AppsV1Api(drill.cluster.api)
        grace = drill.params["grace_period_seconds"]  # the pods' own too: longer than both stops together
        apps.create_namespaced_stateful_set(ns, _ordered_statefulset(grace), _request_timeout=10)
        first = _running_pod(drill, ns)
        _measure_start(drill, "app_start_after_sidecar_seconds", first)

    with drill.phase("stop"):
        with drill.inject(PodDelete.for_scenario(drill.cluster, ns, drill.params)) as fault:
            stopped = _last_status_before_removal(drill, ns, first.metadata.uid, grace + GONE_AFTER_GRACE_SECONDS)
            deleted_at = fault.deleted_at
        _measure_stop(drill, stopped, deleted_at, grace)
        _measure_start(drill, "replacement_app_start_after_sidecar_seconds", _running_pod(drill, ns))

    with drill.phase("job"):
        _job_completes(drill, ns, grace)
    drill.expectations.assert_all()


def _running_pod(drill, ns: str) -> client.V1Pod:
    """Pod ordered-0 once Ready (a replacement: once a new UID is Ready). Raises AssertionError
    past READY_DEADLINE_SECONDS."""
    def ready():
        pod = drill.cluster.core.read_namespaced_pod("ordered-0", ns, _request_timeout=5)
        conditions = {c.type: c.status for c in pod.status.conditions or []}
        return pod if pod.metadata.deletion_timestamp is None and conditions.get("Ready") == "True" else None
    found = wait_until(ready, READY_DEADLINE_SECONDS, description="pod ordered-0 Ready")
    assert found.ok, f"pod ordered-0 not Ready within {READY_DEADLINE_SECONDS} s ({found.last_error or 'not yet'})"
    return found.value


def _measure_start(drill, name: str, pod: client.V1Pod) -> None:
    """How long after the sidecar's container started the app's did (seconds, from the kubelet's
    ``startedAt``, whole seconds each)."""
    sidecar = _started_at(pod.status.init_container_statuses, "sidecar")
    app = _started_at(pod.status.container_statuses, "app")
    drill.observe(name.replace("_seconds", ""), {"pod_uid": pod.metadata.uid, "sidecar_started_at": sidecar,
                                                 "app_started_at": app})
    if sidecar is None or app is None:
        drill.expectations.error(name, f"no startedAt for the sidecar ({sidecar}) or the app ({app})")
        return
    drill.measure(name, app - sidecar, detail=f"pod uid {pod.metadata.uid}: sidecar started at {sidecar:.0f}, "
                                              f"app at {app:.0f} (the sidecar's startup probe needs {STARTUP_SECONDS} s)")


def _started_at(statuses, name: str) -> float | None:
    """The epoch seconds container ``name`` is running since, or None."""
    for status in statuses or []:
        if status.name == name and status.state and status.state.running:
            return status.state.running.started_at.timestamp()
    return None


def _last_status_before_removal(drill, ns: str, uid: str, within_seconds: float) -> dict:
    """Watch pod ordered-0 of ``uid`` until the API removes it, for at most ``within_seconds``.
    Returns {container name: its terminated state as a dict} from the last status seen, and
    ``removed_at`` (epoch seconds, this machine's clock) once removed."""
    last: dict = {}
    deadline = time.time() + within_seconds
    stream = watch.Watch()
    while time.time() < deadline and "removed_at" not in last:
        for event in stream.stream(drill.cluster.core.list_namespaced_pod, ns, field_selector="metadata.name=ordered-0",
                                   timeout_seconds=max(1, int(deadline - time.time()))):
            pod = event["object"]
            if pod.metadata.uid != uid:
                continue
            for status in (pod.status.init_container_statuses or []) + (pod.status.container_statuses or []):
                if status.state and status.state.terminated:
                    last[status.name] = status.state.terminated.to_dict()
            if event["type"] == "DELETED":
                last["removed_at"] = time.time()
                stream.stop()
                break
    return last


def _message_times(terminated: dict | None) -> dict[str, str]:
    """The key=value pairs a container wrote to its termination message."""
    message = (terminated or {}).get("message") or ""
    return dict(part.split("=", 1) for part in message.split() if "=" in part)


def _measure_stop(drill, stopped: dict, deleted_at: float | None, grace: int) -> None:
    """The stop order, from the containers' termination messages (``grace``: the deletion's grace
    period, seconds)."""
    app, sidecar = _message_times(stopped.get("app")), _message_times(stopped.get("sidecar"))
    drill.observe("stop", {"deleted_at": deleted_at, "removed_at": stopped.get("removed_at"),
                           "app": stopped.get("app"), "sidecar": stopped.get("sidecar")})
    names = ("app_answered_when_sidecar_stopped", "sidecar_term_after_app_term_seconds", "pod_removed_seconds")
    if "term_at" not in app or "term_at" not in sidecar or deleted_at is None:
        for name in names:
            drill.expectations.error(name, f"no termination message seen before the pod was removed "
                                           f"(app: {stopped.get('app')}, sidecar: {stopped.get('sidecar')})")
        return
    drill.measure(names[0], sidecar.get("app_answered") == "true",
                  detail=f"when the sidecar was sent SIGTERM, a connection to the app's port was "
                         f"{'accepted' if sidecar.get('app_answered') == 'true' else 'refused'}")
    gap = float(sidecar["term_at"]) - float(app["term_at"])
    drill.observe("delete_to_app_sigterm_seconds", round(float(app["term_at"]) - deleted_at, 2))
    drill.measure(names[1], round(gap, 2), detail=f"app SIGTERM at {app['term_at']}, sidecar SIGTERM at "
                                                   f"{sidecar['term_at']} (the app serves {APP_STOP_SECONDS} s after "
                                                   f"its SIGTERM); deleted at {deleted_at:.3f}")
    if stopped.get("removed_at") is not None:
        drill.measure(names[2], round(stopped["removed_at"] - deleted_at, 2),
                      detail=f"from the DELETE (grace period {grace} s) to the pod's removal from the API")
    else:
        drill.expectations.error(names[2], f"the pod was not removed within {grace + GONE_AFTER_GRACE_SECONDS} s")


def _job_completes(drill, ns: str, grace: int) -> None:
    """Create Job ``with-sidecar`` and measure when it completes, and how its sidecar ended."""
    batch = client.BatchV1Api(drill.cluster.api)
    created_at = time.time()
    batch.create_namespaced_job(ns, _job(grace), _request_timeout=10)

    def complete():
        job = batch.read_namespaced_job("with-sidecar", ns, _request_timeout=5)
        done = {c.type: c.status for c in job.status.conditions or []}
        return done if done.get("Complete") == "True" or done.get("Failed") == "True" else None
    found = wait_until(complete, READY_DEADLINE_SECONDS, description="Job with-sidecar finished")
    drill.measure("job_complete", bool(found.ok and found.value.get("Complete") == "True"),
                  detail=f"Job with-sidecar's conditions: {found.value or found.last_error or 'none within the deadline'}")
    if found.ok:
        drill.measure("job_complete_seconds", round(found.became_true_at - created_at, 2),
                      detail=f"from the Job's creation to its Complete condition (main container runs {JOB_MAIN_SECONDS} s)")
    else:
        drill.expectations.error("job_complete_seconds", f"not finished within {READY_DEADLINE_SECONDS} s")
    pods = drill.cluster.core.list_namespaced_pod(ns, label_selector="job-name=with-sidecar", _request_timeout=10).items
    ended = [s.state.terminated for p in pods for s in p.status.init_container_statuses or []
             if s.name == "sidecar" and s.state and s.state.terminated]
    drill.observe("job_pods", [{"name": p.metadata.name, "phase": p.status.phase} for p in pods])
    drill.measure("job_sidecar_stopped", bool(pods) and len(ended) == len(pods),
                  detail=f"the sidecar of each of the Job's {len(pods)} pod(s) terminated: "
                         f"{[(t.reason, t.exit_code) for t in ended]}")


def _sidecar(startup_seconds: int) -> dict:
    """The sidecar container (an init container that restarts: a native sidecar)."""
    return {"name": "sidecar", "image": TOOLBOX_IMAGE, "imagePullPolicy": TOOLBOX_PULL_POLICY,
            "restartPolicy": "Always", "command": ["python3", "-c", SIDECAR],
            "env": [{"name": "STARTUP_SECONDS", "value": str(startup_seconds)}],
            "startupProbe": {"exec": {"command": ["test", "-f", "/tmp/started"]},
                             "periodSeconds": 1, "failureThreshold": 60}}


def _ordered_statefulset(grace: int) -> dict:
    """StatefulSet ``ordered``: one pod, the slow-starting sidecar and the slow-stopping app."""
    app = {"name": "app", "image": TOOLBOX_IMAGE, "imagePullPolicy": TOOLBOX_PULL_POLICY,
           "command": ["python3", "-c", APP], "ports": [{"containerPort": 8080}],
           "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1}}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "ordered"},
            "spec": {"replicas": 1, "serviceName": "ordered", "selector": {"matchLabels": {"app": "ordered"}},
                     "template": {"metadata": {"labels": {"app": "ordered"}},
                                  "spec": {"terminationGracePeriodSeconds": grace,
                                           "initContainers": [_sidecar(STARTUP_SECONDS)], "containers": [app]}}}}


def _job(grace: int) -> dict:
    """Job ``with-sidecar``: a main container that exits 0 after JOB_MAIN_SECONDS, beside a sidecar
    that runs until it is stopped."""
    main = {"name": "main", "image": TOOLBOX_IMAGE, "imagePullPolicy": TOOLBOX_PULL_POLICY,
            "command": ["python3", "-c", f"import time; time.sleep({JOB_MAIN_SECONDS})"]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "with-sidecar"},
            "spec": {"backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never", "terminationGracePeriodSeconds": grace,
                "initContainers": [_sidecar(0)], "containers": [main]}}}}
