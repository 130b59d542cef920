"""Drill: no pod receives a new ServiceAccount token while the control plane is down
(scenarios/serviceaccount-token-outage.yaml).

A pod on a worker mounts a projected ServiceAccount token of the shortest lifetime the API allows
(600 s) for an audience of its own, and logs, each second, the SHA-256 of the file and the token's
``iat``, ``exp`` and ``aud`` whenever the file changes (never the token). The kubelet starts
trying to rotate such a token once it is older than 80 % of its lifetime (480 s, less up to 10 s
of jitter), at the pod's next sync (every 60 to 90 s). The control plane is stopped
(``control-plane-stop``, ``stop-components``) for the scenario's ``hold_seconds``, timed to end
when the first token is :data:`OUTAGE_END_AGE_SECONDS` old: every pod resync in the kubelet's
refresh window falls inside the outage. The claims: the file does not change in the
outage, the kubelet's refresh attempts there fail (its own journal), the token is replaced once the
API servers are back, by a token issued after their return, and a TokenReview accepts that token
for its own audience and refuses it for another.

Why a Python drill: the outage is timed from the token the kubelet issued, and the pod's own
record, the kubelet's journal and TokenReview are read after the return, which no data-only probe
does.

Everything is made in the drill namespace; the control plane's stop is reverted by timers held on
the nodes (and by the fault's revert on Ctrl-C or failure). Evidence carries SHA-256 digests,
never a token.
"""

from __future__ import annotations

import hashlib
import json
import time

import pytest
from kubernetes import client

from harness.components.topology import clock_offset, least_offset_seconds
from harness.core.waiting import hold_until, wait_until
from harness.faults.control_plane_stop import ControlPlaneStop
from harness.kube import pod_exec
from harness.kube.workloads import TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY
from harness.probes import Probes
from harness.probes.nodes import NodeReadyProbe, node_transitions
from harness.probes.pods import kube_system_snapshot, restarts_between, restarts_outside_control_plane

POD = SERVICE_ACCOUNT = "token-holder"
MOUNT, AUDIENCE, WRONG_AUDIENCE = "/var/run/kdrill-token", "kdrill-token-drill", "kdrill-another-service"
LOG_PREFIX = "KDRILL-TOKEN "
# The kubelet's refresh rule (ServiceAccountTokenProjection.expirationSeconds): older than 80 % of
# the lifetime; the kubelet takes up to 10 s of jitter off that point.
REFRESH_SHARE, REFRESH_JITTER_SECONDS = 0.8, 10.0
# The kubelet resyncs a pod, and so remounts its projected volumes, every 60 s plus up to half of it.
POD_RESYNC_MAX_SECONDS = 90.0
# The shortest lifetime the API issues (expirationSeconds "must be at least 10 minutes").
TOKEN_EXPIRATION_SECONDS = 600
# The earliest token age at which the kubelet may refresh (seconds).
REFRESH_FROM_AGE_SECONDS = REFRESH_SHARE * TOKEN_EXPIRATION_SECONDS - REFRESH_JITTER_SECONDS
# The outage ends when the first token is this old: past the refresh window's last pod resync
# (470 + 90 s), 25 s before it expires; the outage's length (hold_seconds) sets when it starts.
OUTAGE_END_AGE_SECONDS, EXPIRY_MARGIN_SECONDS = 575.0, 10.0
# The stop comes no sooner than this after the first token is issued (the pod logs it within a
# second or two of starting; the stop is planned after that).
MIN_STOP_AGE_SECONDS = 10.0
# The stop can come this much later than planned (its commands on the nodes; through the node
# agent about 13 s), so a hold is refused unless the stop still precedes the refresh point.
STOP_LATE_MARGIN_SECONDS = 30.0
# How far ahead the stop is planned from now (ControlPlaneStop.plan_stop: 2 s plus its commands).
STOP_LEAD_SECONDS = 8.0
# How long the pod logs (seconds): longer than any run of this drill; it then exits.
POD_LOG_SECONDS = 1800
# Deadlines, not measurements: a pod of the preloaded image runs in seconds here, and a rotation
# after the return waits at most one pod resync plus the API servers' readiness.
POD_DEADLINE_SECONDS, ROTATION_DEADLINE_SECONDS = 90.0, 300.0
# After the return, node readiness is watched at least this long: the restarted
# kube-controller-manager's node-monitor-grace-period (50 s) and a margin.
WATCH_AFTER_RETURN_SECONDS = 70.0
# The first seconds of the outage are left out of the API's answered ratio (the stop takes hold).
STOP_TAKES_HOLD_SECONDS = 5.0

SCRIPT = f"""
import base64, hashlib, json, time
path, last, end = {MOUNT + '/token'!r}, None, time.time() + {POD_LOG_SECONDS}
while time.time() < end:
    try:
        raw = open(path, 'rb').read()
        digest = hashlib.sha256(raw).hexdigest()
        if digest != last:
            part = raw.split(b'.')[1]
            claims = json.loads(base64.urlsafe_b64decode(part + b'=' * (-len(part) % 4)))
            line = {{'seen_at': time.time(), 'sha256': digest, 'iat': claims.get('iat'),
                     'exp': claims.get('exp'), 'aud': claims.get('aud')}}
            print({LOG_PREFIX!r} + json.dumps(line), flush=True)
            last = digest
    except Exception as exc:
        print({LOG_PREFIX!r} + json.dumps({{'seen_at': time.time(), 'error': repr(exc)[:200]}}), flush=True)
        last = None  # a token that comes back after an error is logged again
    time.sleep(1)
"""


RUNTIME_DEFAULT = client.V1SeccompProfile(type="RuntimeDefault")


def _pod(node: str, expiration_seconds: int) -> client.V1Pod:
    """The token holder on ``node``: only the projected token, no default API access volume."""
    token = client.V1ServiceAccountTokenProjection(audience=AUDIENCE, expiration_seconds=expiration_seconds,
                                                   path="token")
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=POD, labels={"app": POD}),
        spec=client.V1PodSpec(
            service_account_name=SERVICE_ACCOUNT, automount_service_account_token=False, restart_policy="Never",
            termination_grace_period_seconds=0, node_selector={"kubernetes.io/hostname": node},
            # Within Pod Security's "restricted" level, so it also runs where a platform enforces it.
            security_context=client.V1PodSecurityContext(run_as_non_root=True, run_as_user=65534,
                                                         seccomp_profile=RUNTIME_DEFAULT),
            containers=[client.V1Container(
                name="holder", image=TOOLBOX_IMAGE, image_pull_policy=TOOLBOX_PULL_POLICY,
                command=["python3", "-c", SCRIPT],
                security_context=client.V1SecurityContext(
                    allow_privilege_escalation=False, capabilities=client.V1Capabilities(drop=["ALL"])),
                resources=client.V1ResourceRequirements(requests={"cpu": "10m", "memory": "32Mi"}),
                volume_mounts=[client.V1VolumeMount(name="token", mount_path=MOUNT, read_only=True)])],
            volumes=[client.V1Volume(name="token", projected=client.V1ProjectedVolumeSource(
                sources=[client.V1VolumeProjection(service_account_token=token)]))]))


def _tokens_seen(cluster, ns: str, offset: float = 0.0) -> list[dict]:
    """What the pod logged, in order: [{"seen_at", "sha256", "iat", "exp", "aud"} or {"seen_at",
    "error"}], ``seen_at`` put on this machine's clock (``offset``: the node's clock minus this
    machine's, seconds). Raises what the API client raises."""
    log = cluster.core.read_namespaced_pod_log(POD, ns, container="holder", _request_timeout=10)
    seen = [json.loads(line[len(LOG_PREFIX):]) for line in log.splitlines() if line.startswith(LOG_PREFIX)]
    return [{**s, "seen_at": s["seen_at"] - offset} for s in seen]


def _changes(seen: list[dict]) -> list[dict]:
    """What the pod logged after its first token that changed what it held: a token with a new
    digest, or the file unreadable (an ``error`` entry). The same token logged again after an
    error is not a change."""
    changes, held = [], None
    for entry in seen:
        if "sha256" not in entry:
            changes += [entry] if held is not None else []
            continue
        if held is not None and entry["sha256"] != held:
            changes.append(entry)
        held = entry["sha256"]
    return changes


def _replacement(changes: list[dict], since: float) -> dict | None:
    """The first new token among ``changes`` (:func:`_changes`) seen at or after ``since`` (epoch
    seconds), or None."""
    return next((c for c in changes if "sha256" in c and c["seen_at"] >= since), None)


def _refresh_failures(cluster, node: str, ns: str, window: tuple[float, float], offset: float) -> list[str]:
    """The kubelet's journal lines on ``node`` logged in ``window`` (epoch seconds on this machine's
    clock; each line's own time less ``offset``, the node's clock minus this machine's) saying it
    could not update a token of namespace ``ns``: its refresh attempts that failed."""
    start, end = window[0] + offset, window[1] + offset  # on the node's clock
    out = cluster.node_exec(node, ["journalctl", "-u", "kubelet", "--no-pager", "-o", "short-unix",
                                   "--since", f"@{start - 1:.0f}", "--until", f"@{end + 1:.0f}"],
                            timeout_seconds=60, read_only=True).stdout
    # The cache key names the namespace quoted: "\\"<name>\\"/\\"<namespace>\\"/...".
    lines = [line for line in out.splitlines() if "Couldn't update token" in line and f'\\"{ns}\\"' in line]
    return [line[:300] for line in lines if start <= float(line.split(" ", 1)[0]) < end]


def _journal_problem(cluster, node: str) -> str | None:
    """Why the kubelet's journal on ``node`` cannot be read with times (None when it can): the
    drill's refresh count would read 0 from a node that keeps no journal."""
    try:
        out = cluster.node_exec(node, ["journalctl", "-u", "kubelet", "--no-pager", "-n", "1", "-o", "short-unix"],
                                timeout_seconds=30, read_only=True).stdout
        float(out.split(" ", 1)[0])
    except Exception as exc:  # noqa: BLE001 - said, with the node, before anything is stopped
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return None


def _review(cluster, token: str, audience: str) -> client.V1TokenReviewStatus:
    """TokenReview of ``token`` for ``audience`` (the API server's answer, never the token)."""
    review = client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token, audiences=[audience]))
    return client.AuthenticationV1Api(cluster.api).create_token_review(review, _request_timeout=10).status


@pytest.mark.cluster
@pytest.mark.destructive
@pytest.mark.node_access
@pytest.mark.scenario("serviceaccount-token-outage")
def test_serviceaccount_token_outage(drill):
    cluster, hold_seconds = drill.cluster, float(drill.params["hold_seconds"])
    problem = _hold_problem(hold_seconds)
    assert problem is None, f"{drill.scenario.path}: fault.params.hold_seconds: {problem}"
    assert drill.topology.workers, f"this drill needs a worker node for its pod; {cluster.name} has none"
    node = drill.topology.workers[0]
    journal = _journal_problem(cluster, node)
    assert journal is None, f"the kubelet's journal on {node} (journalctl -u kubelet) cannot be read: {journal}"
    with drill.phase("setup"):
        ns = drill.fresh_namespace()
        # The pod and the kubelet's journal time things on the node's clock.
        offset = least_offset_seconds(clock_offset(cluster, node))
        drill.observe("node_clock_offset_seconds", {node: offset})
        cluster.core.create_namespaced_service_account(
            ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=SERVICE_ACCOUNT)), _request_timeout=10)
        cluster.core.create_namespaced_pod(ns, _pod(node, TOKEN_EXPIRATION_SECONDS), _request_timeout=10)
        first = wait_until(lambda: [s for s in _tokens_seen(cluster, ns, offset) if "sha256" in s][:1] or None,
                           POD_DEADLINE_SECONDS, interval_seconds=0.5, description=f"pod {POD}'s first token")
        assert first.ok, f"pod {POD} logged no token within {POD_DEADLINE_SECONDS:g} s ({first.last_error})"
        token0 = first.value[0]
        drill.observe("first_token", token0)
        drill.measure("token_lifetime_seconds", token0["exp"] - token0["iat"],
                      detail=f"exp - iat of the token the kubelet requested with expirationSeconds "
                             f"{TOKEN_EXPIRATION_SECONDS}")
        _check_timing(token0, hold_seconds)
        kube_system_before = kube_system_snapshot(cluster)
        # Paced so that the outage ends when the token is OUTAGE_END_AGE_SECONDS old.
        hold_until(token0["iat"] + OUTAGE_END_AGE_SECONDS - hold_seconds - STOP_LEAD_SECONDS)

    fault = ControlPlaneStop(cluster, method="stop-components", hold_seconds=hold_seconds)
    nodes = NodeReadyProbe("nodes", cluster, interval_seconds=1.0, max_seconds=hold_seconds + 900)
    try:
        with Probes(nodes):
            with drill.inject(fault):
                with drill.phase("outage", seconds=fault.hold_seconds):
                    hold_until(fault.injected_at + fault.hold_seconds)  # the outage's length, set above
            returned = min(fault.api_ready_at.values(), default=None)
            assert returned is not None, "no API server was seen ready after the revert"
            with drill.phase("return"):
                rotated = wait_until(lambda: _replacement(_changes(_tokens_seen(cluster, ns, offset)), returned),
                                     ROTATION_DEADLINE_SECONDS, interval_seconds=2.0,
                                     description=f"pod {POD}'s token replaced")
                hold_until(returned + WATCH_AFTER_RETURN_SECONDS)  # node readiness watched past the grace period
    finally:
        drill.add_timelines({nodes.name: nodes.timeline})
    window = (fault.injected_at, returned, fault.injected_at + fault.hold_seconds)
    _judge_outage(drill, ns, (node, offset), token0, window, rotated)
    _judge_review(drill, ns, _changes(_tokens_seen(cluster, ns)))
    _judge_platform(drill, nodes, window, kube_system_before)
    drill.expectations.assert_all()


def _hold_problem(hold_seconds: float) -> str | None:
    """What is wrong with an outage of ``hold_seconds`` ending at a token age of
    :data:`OUTAGE_END_AGE_SECONDS`, before anything is made: it must start before the kubelet's
    refresh point and after the pod has its token (:data:`MIN_STOP_AGE_SECONDS`)."""
    least = OUTAGE_END_AGE_SECONDS - REFRESH_FROM_AGE_SECONDS + STOP_LATE_MARGIN_SECONDS
    most = OUTAGE_END_AGE_SECONDS - MIN_STOP_AGE_SECONDS
    if least < hold_seconds <= most:
        return None
    return f"expected more than {least:g} and at most {most:g} seconds, got {hold_seconds:g}"


def _check_timing(token0: dict, hold_seconds: float) -> None:
    """The outage must hold every pod resync of the kubelet's refresh window and end before the token
    expires, or "not replaced in the outage" could not fail (or the pod would hold an expired token).
    Raises AssertionError, before anything is stopped, when it cannot."""
    stop_age = max(time.time() + STOP_LEAD_SECONDS - token0["iat"], OUTAGE_END_AGE_SECONDS - hold_seconds)
    refresh_until = REFRESH_FROM_AGE_SECONDS + POD_RESYNC_MAX_SECONDS
    assert stop_age < REFRESH_FROM_AGE_SECONDS and stop_age + hold_seconds >= refresh_until, (
        f"an outage of {hold_seconds:g} s from a token age of {stop_age:.0f} s does not hold the kubelet's refresh "
        f"window ({REFRESH_FROM_AGE_SECONDS:g} s to {refresh_until:g} s of age)")
    assert stop_age + hold_seconds <= TOKEN_EXPIRATION_SECONDS - EXPIRY_MARGIN_SECONDS, (
        f"an outage of {hold_seconds:g} s from a token age of {stop_age:.0f} s ends less than "
        f"{EXPIRY_MARGIN_SECONDS:g} s before the token expires ({TOKEN_EXPIRATION_SECONDS} s)")


OUTAGE_NAMES = ("tokens_replaced_during_outage", "kubelet_refresh_failures_during_outage")
RETURN_NAMES = ("token_replaced_after_return_seconds", "new_token_issued_after_return")
REVIEW_NAMES = ("token_review_own_audience_authenticated", "token_review_other_audience_refused")


def _coverage_problem(token0: dict, stop: float, restart: float) -> str | None:
    """Why the outage as it happened (stop and kubelet restart, epoch seconds) did not hold the
    kubelet's refresh window and a pod resync after it (None when it did)."""
    down, up = stop + STOP_TAKES_HOLD_SECONDS - token0["iat"], restart - token0["iat"]
    if down < REFRESH_FROM_AGE_SECONDS and up >= REFRESH_FROM_AGE_SECONDS + POD_RESYNC_MAX_SECONDS:
        return None
    return (f"the API was down from token age {down:.0f} s to {up:.0f} s: not the whole refresh window "
            f"({REFRESH_FROM_AGE_SECONDS:g} to {REFRESH_FROM_AGE_SECONDS + POD_RESYNC_MAX_SECONDS:g} s)")


def _judge_outage(drill, ns: str, where: tuple[str, float], token0: dict, window: tuple[float, float, float],
                  rotated) -> None:
    """The file did not change in the outage; the kubelet tried and failed to refresh; after the
    return the token was replaced by one issued after it. ``where``: the pod's node and its clock
    offset (seconds, node minus this machine); ``window``: the stop, the first API server seen
    ready, and the kubelets' start (epoch seconds)."""
    (node, offset), (stop, returned, restart) = where, window
    changes = _changes(_tokens_seen(drill.cluster, ns, offset))
    drill.observe("outage", {"stopped_at": stop, "kubelets_started_at": restart, "api_ready_at": returned,
                             "token_age_at_stop_seconds": round(stop - token0["iat"], 1),
                             "token_age_at_return_seconds": round(returned - token0["iat"], 1),
                             "refresh_due_from_age_seconds": [REFRESH_FROM_AGE_SECONDS,
                                                              REFRESH_FROM_AGE_SECONDS + REFRESH_JITTER_SECONDS],
                             "changes_before_stop": [c for c in changes if c["seen_at"] < stop]})
    problem = _coverage_problem(token0, stop, restart)
    if problem is not None:
        for name in OUTAGE_NAMES:
            drill.expectations.error(name, problem)
    else:
        inside = [c for c in changes if stop <= c["seen_at"] < returned]
        drill.measure(OUTAGE_NAMES[0], len(inside),
                      detail=f"changes of the token file pod {POD} saw between the stop and the first API server "
                             f"ready again: {[c.get('sha256', '')[:12] or c.get('error') for c in inside] or 'none'}")
        _measure_refresh_failures(drill, node, ns, (stop, returned), offset)
    new = _replacement(changes, returned)
    if not rotated.ok or new is None:
        for name in RETURN_NAMES:
            drill.expectations.error(name, f"the token was not replaced within {ROTATION_DEADLINE_SECONDS:g} s of the "
                                           f"return ({rotated.last_error or 'no new token logged'})")
        return
    drill.observe("replacement_token", new)
    drill.observe("expired_token_held_seconds", round(max(0.0, new["seen_at"] - token0["exp"]), 1))
    drill.measure(RETURN_NAMES[0], round(new["seen_at"] - returned, 1),
                  detail=f"from the first API server ready again to the pod's first sight of a new token (read every "
                         f"1 s); the old one was {new['seen_at'] - token0['iat']:.0f} s old",
                  became_true_at=new["seen_at"])
    drill.measure(RETURN_NAMES[1], new["iat"] >= int(restart),
                  detail=f"the new token's iat {new['iat']} against the kubelets' start at {restart:.1f} (iat has "
                         "whole seconds; the API servers' clocks)")


def _measure_refresh_failures(drill, node: str, ns: str, window: tuple[float, float], offset: float) -> None:
    try:
        failures = _refresh_failures(drill.cluster, node, ns, window, offset)
    except Exception as exc:  # noqa: BLE001 - the expectation says it was not measured, and why
        drill.expectations.error(OUTAGE_NAMES[1], f"{node}'s kubelet journal not read: {str(exc)[:200]}")
        return
    drill.observe("kubelet_refresh_failures", failures[:10])
    drill.measure(OUTAGE_NAMES[1], len(failures),
                  detail=f"lines of {node}'s kubelet journal in the outage saying it could not update the pod's token")


def _judge_review(drill, ns: str, changes: list[dict]) -> None:
    """TokenReview of the pod's current token (read from the pod, compared by digest with its log)
    for its own audience and for another."""
    user = f"system:serviceaccount:{ns}:{SERVICE_ACCOUNT}"
    try:
        read = pod_exec.run(drill.cluster, ns, POD, ["cat", f"{MOUNT}/token"], timeout_seconds=30)
        digest = hashlib.sha256(read.stdout.encode()).hexdigest()
        if read.returncode != 0 or digest not in {c.get("sha256") for c in changes}:
            raise ValueError(f"the token read from pod {POD} (exit {read.returncode}, sha256 {digest[:12]}) is not "
                             "one it logged after its first")
        own, other = (_review(drill.cluster, read.stdout.strip(), a) for a in (AUDIENCE, WRONG_AUDIENCE))
    except Exception as exc:  # noqa: BLE001 - never the token: exec and review errors carry no output
        for name in REVIEW_NAMES:
            drill.expectations.error(name, f"{type(exc).__name__}: {str(exc)[:200]}")
        return
    got_user = own.user.username if own.user else None
    drill.observe("token_reviews", {"sha256": digest, "own": {"authenticated": own.authenticated, "user": got_user,
                                                              "audiences": own.audiences},
                                    "other": {"authenticated": other.authenticated, "error": other.error}})
    drill.measure(REVIEW_NAMES[0], bool(own.authenticated) and AUDIENCE in (own.audiences or []) and got_user == user,
                  detail=f"audience {AUDIENCE}: user {got_user}, audiences {own.audiences} (expected {user}); "
                         f"{own.error or 'no error'}")
    drill.measure(REVIEW_NAMES[1], not other.authenticated,
                  detail=f"audience {WRONG_AUDIENCE}: {other.error or 'authenticated'}")


def _judge_platform(drill, nodes: NodeReadyProbe, window: tuple[float, float, float], kube_system_before: dict) -> None:
    """What else the outage did: the API's answers in it, node marks after it, add-on restarts.
    ``window``: the stop, the first API server seen ready, and the kubelets' start (epoch seconds)."""
    stop, returned, restart = window
    # Until the kubelets start no control-plane component can: the return is seen later than a LIST
    # answers (by its poll, slower still through the node agent), so it does not close this window.
    answered = [s.ok for s in nodes.timeline.samples() if stop + STOP_TAKES_HOLD_SECONDS <= s.t < restart]
    drill.measure("api_answered_ratio_while_stopped", sum(answered) / len(answered) if answered else None,
                  detail=f"{len(answered)} node LISTs from this machine through the load balancer, from "
                         f"{STOP_TAKES_HOLD_SECONDS:g} s after the stop to the kubelets' start")
    marks = [c for c in node_transitions(nodes.timeline, start=returned) if c.get("ready") == "Unknown"]
    drill.observe("node_transitions_after_return", node_transitions(nodes.timeline, start=returned))
    drill.measure("nodes_marked_unknown_after_return", len({c["node"] for c in marks}),
                  detail=f"nodes whose Ready turned Unknown from the return on: {[c['node'] for c in marks] or 'none'}")
    added = restarts_between(kube_system_before, kube_system_snapshot(drill.cluster))
    others = restarts_outside_control_plane(added, kube_system_before)
    drill.observe("control_plane_restarts", {p: n for p, n in added.items() if p not in others})
    drill.measure("kube_system_restarts_outside_control_plane", sum(others.values()),
                  detail=f"outside the control-plane components: {others or 'none'}")
