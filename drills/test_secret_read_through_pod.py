"""Drill: whoever can create pods in a namespace can read its Secrets (scenarios/secret-read-through-pod.yaml)

A Secret with a random value is planted in the drill namespace. A ServiceAccount ``pod-creator``
is given a Role with ``create`` and ``get`` on pods and ``get`` on pods/log, and nothing on
Secrets. With that ServiceAccount's own token (a TokenRequest, ten minutes), from this machine:
its GET of the Secret is refused with 403; it creates a pod that mounts the Secret as a volume and
prints the SHA-256 of what it finds there; it reads that line from the pod's log. The digest is
the planted value's. A second ServiceAccount with no Role is refused the same pod (403): the grant
to create pods, not the token, is what opened the way.

Why a Python drill: the requests are made as another identity, one after the other, which no
data-only probe does.

Everything is made in the drill namespace (deleted with it); the Secret is the planted-secret
fault (ledger first, deleted and verified on revert). Evidence has the value's SHA-256, never the
value; the pod prints only the digest.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.core.waiting import wait_until
from harness.faults.planted_secret import DATA_KEY, PlantedSecret
from harness.kube.workloads import TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY

CREATOR, OUTSIDER = "pod-creator", "no-grant"
POD = "reads-secret"
MOUNT = "/var/run/kdrill-secret"
LOG_PREFIX = "KDRILL-SECRET-DIGEST "
TOKEN_SECONDS = 600  # the TokenRequest's lifetime: longer than the drill, shorter than a shift
# A deadline, not a measurement: a pod of the preloaded toolbox image runs in seconds here.
POD_DEADLINE_SECONDS = 90


@pytest.mark.cluster
@pytest.mark.scenario("secret-read-through-pod")
def test_secret_read_through_pod(drill):
    with drill.phase("setup"):
        drill.fresh_namespace()
        ns = drill.namespace
        _service_account(drill.cluster, ns, CREATOR, grant=True)
        _service_account(drill.cluster, ns, OUTSIDER, grant=False)
        creator = client.CoreV1Api(drill.cluster.api_as(_token(drill.cluster, ns, CREATOR)))
        outsider = client.CoreV1Api(drill.cluster.api_as(_token(drill.cluster, ns, OUTSIDER)))

    secret = PlantedSecret(drill.cluster, ns, drill.params.get("secret_name", "kdrill-planted"))
    with drill.inject(secret):
        with drill.phase("direct-read"):
            status, reason = _status_of(lambda: creator.read_namespaced_secret(secret.name, ns, _request_timeout=10))
            drill.measure("direct_get_refused", status == 403,
                          detail=f"GET secret {secret.name} as serviceaccount {CREATOR}: {reason}")
        with drill.phase("through-pod"):
            status, reason = _status_of(lambda: outsider.create_namespaced_pod(
                ns, _reader_pod(secret.name), _request_timeout=10))
            drill.measure("pod_refused_without_grant", status == 403,
                          detail=f"create pod {POD} as serviceaccount {OUTSIDER} (no Role): {reason}")
            _read_through_pod(drill, creator, ns, secret)
    drill.expectations.assert_all()


def _read_through_pod(drill, creator: client.CoreV1Api, ns: str, secret: PlantedSecret) -> None:
    """As ``creator``: create the reader pod, wait for its log line, compare the digests."""
    created_at = time.time()
    status, reason = _status_of(lambda: creator.create_namespaced_pod(ns, _reader_pod(secret.name), _request_timeout=10))
    drill.measure("pod_created_by_creator", status == 201,
                  detail=f"create pod {POD} mounting secret {secret.name} as serviceaccount {CREATOR}: {reason}")
    if status != 201:
        for name in ("secret_read_through_pod", "secret_read_seconds"):
            drill.expectations.error(name, f"the pod was not created: {reason}")
        return
    read = wait_until(lambda: _digest_logged(creator, ns), POD_DEADLINE_SECONDS, interval_seconds=0.5,
                      description=f"pod {POD}'s log line, read as {CREATOR}")
    if not read.ok:
        for name in ("secret_read_through_pod", "secret_read_seconds"):
            drill.expectations.error(name, f"no digest in pod {POD}'s log within {POD_DEADLINE_SECONDS} s "
                                           f"({read.last_error or 'no line yet'})")
        return
    drill.observe("read_through_pod", {"pod": POD, "by": f"system:serviceaccount:{ns}:{CREATOR}",
                                       "logged_digest": read.value, "planted_digest": secret.digest})
    drill.measure("secret_read_through_pod", read.value == secret.digest,
                  detail=f"pod {POD}'s log, read as {CREATOR}: {read.value} (planted {secret.digest})")
    drill.measure("secret_read_seconds", round(read.became_true_at - created_at, 2),
                  detail="from the pod's creation to its log line with the digest, read as the same identity")


def _service_account(cluster, ns: str, name: str, grant: bool) -> None:
    """ServiceAccount ``name``; with ``grant``, a Role of the same name (create and get pods, get
    pods/log: nothing on Secrets) bound to it."""
    cluster.core.create_namespaced_service_account(
        ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)), _request_timeout=10)
    if not grant:
        return
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    rbac.create_namespaced_role(ns, client.V1Role(metadata=client.V1ObjectMeta(name=name), rules=[
        client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["create", "get"]),
        client.V1PolicyRule(api_groups=[""], resources=["pods/log"], verbs=["get"])]), _request_timeout=10)
    rbac.create_namespaced_role_binding(ns, client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name=name),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=name),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name=name, namespace=ns)]), _request_timeout=10)


def _token(cluster, ns: str, service_account: str) -> str:
    """A token for ``service_account`` from the TokenRequest API, for the API server's own audience."""
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
        audiences=[], expiration_seconds=TOKEN_SECONDS))
    return cluster.core.create_namespaced_service_account_token(
        service_account, ns, request, _request_timeout=10).status.token


def _reader_pod(secret: str) -> client.V1Pod:
    """A pod that mounts ``secret`` and prints only the SHA-256 of its value, once."""
    script = (f"import hashlib; print({LOG_PREFIX!r} + 'sha256:' + "
              f"hashlib.sha256(open('{MOUNT}/{DATA_KEY}', 'rb').read()).hexdigest(), flush=True)")
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=POD, labels={"app": POD}),
        spec=client.V1PodSpec(
            restart_policy="Never", termination_grace_period_seconds=0, automount_service_account_token=False,
            containers=[client.V1Container(
                name="reader", image=TOOLBOX_IMAGE, image_pull_policy=TOOLBOX_PULL_POLICY,
                command=["python3", "-c", script],
                volume_mounts=[client.V1VolumeMount(name="secret", mount_path=MOUNT, read_only=True)])],
            volumes=[client.V1Volume(name="secret", secret=client.V1SecretVolumeSource(secret_name=secret))]))


def _digest_logged(api: client.CoreV1Api, ns: str) -> str | None:
    """The digest the reader pod printed, or None before it has."""
    log = api.read_namespaced_pod_log(POD, ns, _request_timeout=10)
    for line in log.splitlines():
        if line.startswith(LOG_PREFIX):
            return line[len(LOG_PREFIX):].strip()
    return None


def _status_of(call) -> tuple[int, str]:
    """The HTTP status of ``call`` (201 for a create, 200 otherwise, or the refusal's) and a line saying it."""
    try:
        answer = call()
    except ApiException as exc:
        return exc.status, f"{exc.status} {exc.reason}"
    created = isinstance(answer, client.V1Pod)
    return (201 if created else 200), ("201 Created" if created else "200 OK")
