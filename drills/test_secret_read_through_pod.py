"""Drill: whoever can create pods in a namespace can read its Secrets (scenarios/secret-read-through-pod.yaml)

A Secret with a random value is planted in the drill namespace. A ServiceAccount ``pod-creator``
is given a Role with ``create`` and ``get`` on pods and ``get`` on pods/log, and nothing on
Secrets. With that ServiceAccount's own token (a TokenRequest, ten minutes), from this machine:
its GET of the Secret is refused with 403; it creates a pod that mounts the Secret as a volume and
prints the SHA-256 of what it finds there; it reads that line from the pod's log. The digest is
the planted value's. A second ServiceAccount with no Role is refused the same pod (403): the grant
to create pods, not the token, is what opened the way.

The second test (scenarios/secret-read-through-deployment.yaml) takes the same way through a
controller: ServiceAccount ``workload-creator`` may create Deployments and read pods and their
logs, but may neither create pods nor read Secrets. It is refused the reader pod itself (403),
yet the Deployment it creates gets one: the ReplicaSet controller creates the pod under its own
identity, and the kubelet hands it the Secret all the same.

Why a Python drill: the requests are made as another identity, one after the other, which no
data-only probe does.

Everything is made in the drill namespace (deleted with it); the Secret is the planted-secret
fault (ledger first, deleted and verified on revert). Evidence has the value's SHA-256, never the
value; the pod prints only the digest.
"""

from __future__ import annotations

import time
from http import HTTPStatus

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.core.waiting import wait_until
from harness.faults.planted_secret import DATA_KEY, PlantedSecret
from harness.kube.workloads import TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY

CREATOR, OUTSIDER, WORKLOAD_CREATOR = "pod-creator", "no-grant", "workload-creator"
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
            status, reason = _status_of(lambda: creator.read_namespaced_secret_with_http_info(
                secret.name, ns, _request_timeout=10))
            drill.measure("direct_get_refused", status == 403,
                          detail=f"GET secret {secret.name} as serviceaccount {CREATOR}: {reason}")
        with drill.phase("through-pod"):
            status, reason = _status_of(lambda: outsider.create_namespaced_pod_with_http_info(
                ns, _reader_pod(secret.name), _request_timeout=10))
            drill.measure("pod_refused_without_grant", status == 403,
                          detail=f"create pod {POD} as serviceaccount {OUTSIDER} (no Role): {reason}")
            _create_and_read(drill, creator, ns, secret, CREATOR, "pod", lambda: POD,
                             lambda: creator.create_namespaced_pod_with_http_info(
                                 ns, _reader_pod(secret.name), _request_timeout=10))
    drill.expectations.assert_all()


@pytest.mark.cluster
@pytest.mark.scenario("secret-read-through-deployment")
def test_secret_read_through_deployment(drill):
    with drill.phase("setup"):
        drill.fresh_namespace()
        ns = drill.namespace
        _service_account(drill.cluster, ns, WORKLOAD_CREATOR, grant=True, through="deployments")
        api = drill.cluster.api_as(_token(drill.cluster, ns, WORKLOAD_CREATOR))
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)

    secret = PlantedSecret(drill.cluster, ns, drill.params.get("secret_name", "kdrill-planted"))
    with drill.inject(secret):
        with drill.phase("direct-read"):
            status, reason = _status_of(lambda: core.read_namespaced_secret_with_http_info(
                secret.name, ns, _request_timeout=10))
            drill.measure("direct_get_refused", status == 403,
                          detail=f"GET secret {secret.name} as serviceaccount {WORKLOAD_CREATOR}: {reason}")
            status, reason = _status_of(lambda: core.create_namespaced_pod_with_http_info(
                ns, _reader_pod(secret.name), _request_timeout=10))
            drill.measure("pod_refused_to_creator", status == 403,
                          detail=f"create pod {POD} as serviceaccount {WORKLOAD_CREATOR} (no rule on pods' "
                                 f"create): {reason}")
        with drill.phase("through-deployment"):
            _create_and_read(drill, core, ns, secret, WORKLOAD_CREATOR, "deployment", lambda: _pod_of(core, ns),
                             lambda: apps.create_namespaced_deployment_with_http_info(
                                 ns, _reader_deployment(secret.name), _request_timeout=10))
    drill.expectations.assert_all()


def _create_and_read(drill, reader: client.CoreV1Api, ns: str, secret: PlantedSecret, identity: str, kind: str,
                     pod_name, create) -> None:
    """Create the ``kind`` ("pod" or "deployment") that mounts ``secret`` with ``create`` (a
    ``*_with_http_info`` request), wait for the log line of the pod ``pod_name()`` names, read as
    ``identity`` (through ``reader``), and measure ``<kind>_created_by_creator``,
    ``secret_read_through_<kind>`` and ``secret_read_seconds``."""
    created_at = time.time()
    status, reason = _status_of(create)
    drill.measure(f"{kind}_created_by_creator", status == 201,
                  detail=f"create {kind} {POD} (mounting secret {secret.name}) as serviceaccount {identity}: {reason}")
    names = (f"secret_read_through_{kind}", "secret_read_seconds")
    if status != 201:
        for name in names:
            drill.expectations.error(name, f"the {kind} was not created: {reason}")
        return
    read = wait_until(lambda: _digest_logged(reader, ns, pod_name()), POD_DEADLINE_SECONDS,
                      interval_seconds=0.5, description=f"{kind} {POD}'s pod's log line, read as {identity}")
    if not read.ok:
        for name in names:
            drill.expectations.error(name, f"no digest in {kind} {POD}'s pod's log within {POD_DEADLINE_SECONDS} s "
                                           f"({read.last_error or 'no line yet'})")
        return
    pod = drill.cluster.core.read_namespaced_pod(pod_name(), ns, _request_timeout=10)
    drill.observe(f"read_through_{kind}", {
        "pod": pod.metadata.name, "owner": [f"{o.kind}/{o.name}" for o in pod.metadata.owner_references or []],
        "written_by": sorted({f.manager for f in pod.metadata.managed_fields or [] if not f.subresource}),
        "by": f"system:serviceaccount:{ns}:{identity}", "logged_digest": read.value, "planted_digest": secret.digest})
    drill.measure(names[0], read.value == secret.digest,
                  detail=f"pod {pod.metadata.name}'s log, read as {identity}: {read.value} (planted {secret.digest})")
    drill.measure(names[1], round(read.became_true_at - created_at, 2),
                  detail=f"from the {kind}'s creation to its pod's log line with the digest, read as the same identity")


def _service_account(cluster, ns: str, name: str, grant: bool, through: str = "pods") -> None:
    """ServiceAccount ``name``; with ``grant``, a Role of the same name bound to it: create and get
    pods, get pods/log (``through`` "pods"), or create and get Deployments, get and list pods, get
    pods/log (``through`` "deployments"): never anything on Secrets."""
    cluster.core.create_namespaced_service_account(
        ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)), _request_timeout=10)
    if not grant:
        return
    if through == "deployments":
        rules = [client.V1PolicyRule(api_groups=["apps"], resources=["deployments"], verbs=["create", "get"]),
                 client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get", "list"])]
    else:
        rules = [client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["create", "get"])]
    rules.append(client.V1PolicyRule(api_groups=[""], resources=["pods/log"], verbs=["get"]))
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    rbac.create_namespaced_role(ns, client.V1Role(metadata=client.V1ObjectMeta(name=name), rules=rules),
                                _request_timeout=10)
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


def _reader_pod(secret: str, keep_running: bool = False) -> client.V1Pod:
    """A pod that mounts ``secret`` and prints only the SHA-256 of its value, once; with
    ``keep_running`` (a Deployment's pod, restarted if it exits) it then sleeps for an hour."""
    script = (f"import hashlib; print({LOG_PREFIX!r} + 'sha256:' + "
              f"hashlib.sha256(open('{MOUNT}/{DATA_KEY}', 'rb').read()).hexdigest(), flush=True)")
    if keep_running:
        script += "; import time; time.sleep(3600)"
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=POD, labels={"app": POD}),
        spec=client.V1PodSpec(
            restart_policy="Always" if keep_running else "Never", termination_grace_period_seconds=0,
            automount_service_account_token=False,
            containers=[client.V1Container(
                name="reader", image=TOOLBOX_IMAGE, image_pull_policy=TOOLBOX_PULL_POLICY,
                command=["python3", "-c", script],
                volume_mounts=[client.V1VolumeMount(name="secret", mount_path=MOUNT, read_only=True)])],
            volumes=[client.V1Volume(name="secret", secret=client.V1SecretVolumeSource(secret_name=secret))]))


def _reader_deployment(secret: str) -> client.V1Deployment:
    """Deployment ``reads-secret``: one replica of the reader pod, kept running."""
    pod = _reader_pod(secret, keep_running=True)
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=POD),
        spec=client.V1DeploymentSpec(replicas=1, selector=client.V1LabelSelector(match_labels={"app": POD}),
                                     template=client.V1PodTemplateSpec(
                                         metadata=client.V1ObjectMeta(labels={"app": POD}), spec=pod.spec)))


def _pod_of(api: client.CoreV1Api, ns: str) -> str | None:
    """The name of a reader pod (``app=reads-secret``: the pod itself or the Deployment's), or None
    before there is one."""
    pods = api.list_namespaced_pod(ns, label_selector=f"app={POD}", _request_timeout=10).items
    return pods[0].metadata.name if pods else None


def _digest_logged(api: client.CoreV1Api, ns: str, pod: str | None) -> str | None:
    """The digest pod ``pod`` printed, or None before it has (or while there is no pod)."""
    if pod is None:
        return None
    log = api.read_namespaced_pod_log(pod, ns, _request_timeout=10)
    for line in log.splitlines():
        if line.startswith(LOG_PREFIX):
            return line[len(LOG_PREFIX):].strip()
    return None


def _status_of(call) -> tuple[int, str]:
    """The HTTP status of ``call`` (a ``*_with_http_info`` request: data, status, headers), or of its
    refusal, and a line saying it."""
    try:
        status = call()[1]
    except ApiException as exc:
        return exc.status, f"{exc.status} {exc.reason}"
    return status, f"{status} {HTTPStatus(status).phrase}"
