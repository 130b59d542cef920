"""The drills' workloads: namespaces, the test HTTP server Deployment and its Service.

Every pod a drill runs uses kdrill's toolbox image. On kind it is preloaded into the node image
and never pulled (the default pull policy ``Never``); on another cluster set
``KDRILL_TOOLBOX_IMAGE`` to where the platform's registry serves it and
``KDRILL_TOOLBOX_PULL_POLICY`` to ``IfNotPresent`` or ``Always`` (``kdrill run --toolbox-image
--toolbox-pull-policy`` set both). :func:`toolbox_problem` checks them before anything runs.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.core.waiting import wait_until_or_raise
from harness.kube.providers import Cluster

log = logging.getLogger("kdrill.workloads")

DEFAULT_TOOLBOX_IMAGE = "docker.io/kdrill/toolbox:v0.1.0"
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
# An image reference: [registry/]path[:tag][@sha256:digest]. The first component is a registry only
# when it has a '.' or a port, or is localhost (as Docker reads it); path components are lowercase;
# ASCII only; a name of at most 255 characters.
_HOST = r"(?:localhost|[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)+)"
_IMAGE = re.compile(rf"(?P<name>(?:{_HOST}(?::[0-9]{{1,5}})?/|[a-zA-Z0-9]+:[0-9]{{1,5}}/)?"
                    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
                    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?", re.ASCII)
TOOLBOX_IMAGE = os.environ.get("KDRILL_TOOLBOX_IMAGE") or DEFAULT_TOOLBOX_IMAGE
TOOLBOX_PULL_POLICY = os.environ.get("KDRILL_TOOLBOX_PULL_POLICY") or "Never"


def toolbox_problem(image: str | None, pull_policy: str | None) -> str | None:
    """What is wrong with a toolbox image setting and pull policy (either None: not given), as
    "setting: expected ..., got ...", or None when both are fine."""
    matched = _IMAGE.fullmatch(image) if image is not None else None
    port = re.search(r":([0-9]{1,5})/", image.split("/", 1)[0] + "/") if matched else None
    if image is not None and (not matched or len(matched.group("name")) > 255
                              or (port is not None and not 1 <= int(port.group(1)) <= 65535)):
        return (f"KDRILL_TOOLBOX_IMAGE / --toolbox-image: expected an image reference such as "
                f"registry.example.com/kdrill/toolbox:v0.1.0, got {image!r}")
    if pull_policy is not None and pull_policy not in PULL_POLICIES:
        return (f"KDRILL_TOOLBOX_PULL_POLICY / --toolbox-pull-policy: expected one of {', '.join(PULL_POLICIES)}, "
                f"got {pull_policy!r}")
    return None
DRILL_LABEL = "kdrill.io/drill"


def ensure_namespace(cluster: Cluster, name: str, labels: dict[str, str] | None = None) -> None:
    body = client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={DRILL_LABEL: "true", **(labels or {})}))
    try:
        cluster.core.create_namespace(body, _request_timeout=10)
    except ApiException as exc:
        if exc.status != 409:
            raise


def delete_namespace(cluster: Cluster, name: str, wait_seconds: float = 120) -> None:
    """Delete ``name`` and wait until it is gone (ConditionTimeout after ``wait_seconds``)."""
    try:
        cluster.core.delete_namespace(name, grace_period_seconds=0, _request_timeout=10)
    except ApiException as exc:
        if exc.status == 404:
            return
        raise

    def gone():
        try:
            cluster.core.read_namespace(name, _request_timeout=5)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_until_or_raise(gone, wait_seconds, interval_seconds=1.0, description=f"namespace {name} deleted")


def http_server_deployment(name: str, replicas: int, node_selector: dict[str, str] | None = None,
                           image: str = TOOLBOX_IMAGE, pull_policy: str = TOOLBOX_PULL_POLICY,
                           spread: bool = True) -> client.V1Deployment:
    """A Deployment of ``kdrill-http`` (port 8080) labelled ``app=<name>``."""
    labels = {"app": name}
    env = [client.V1EnvVar(name="POD_NAME", value_from=client.V1EnvVarSource(
               field_ref=client.V1ObjectFieldSelector(field_path="metadata.name"))),
           client.V1EnvVar(name="NODE_NAME", value_from=client.V1EnvVarSource(
               field_ref=client.V1ObjectFieldSelector(field_path="spec.nodeName")))]
    container = client.V1Container(
        name="http", image=image, image_pull_policy=pull_policy, command=["kdrill-http"], env=env,
        ports=[client.V1ContainerPort(container_port=8080)],
        readiness_probe=client.V1Probe(http_get=client.V1HTTPGetAction(path="/healthz", port=8080),
                                       period_seconds=1, failure_threshold=2),
        resources=client.V1ResourceRequirements(requests={"cpu": "10m", "memory": "20Mi"}))
    spec = client.V1PodSpec(containers=[container], node_selector=node_selector,
                            termination_grace_period_seconds=2)
    if spread:
        spec.topology_spread_constraints = [client.V1TopologySpreadConstraint(
            max_skew=1, topology_key="kubernetes.io/hostname", when_unsatisfiable="ScheduleAnyway",
            label_selector=client.V1LabelSelector(match_labels=labels))]
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1DeploymentSpec(
            replicas=replicas, selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels=labels), spec=spec)))


def http_service(name: str, node_port: int | None = None) -> client.V1Service:
    """A Service for ``app=<name>`` on port 80; NodePort ``node_port`` when given, else ClusterIP."""
    port = client.V1ServicePort(port=80, target_port=8080, node_port=node_port)
    return client.V1Service(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1ServiceSpec(selector={"app": name}, ports=[port],
                                  type="NodePort" if node_port else "ClusterIP"))


def deploy_http_server(cluster: Cluster, namespace: str, name: str, replicas: int,
                       node_port: int | None = None, node_selector: dict[str, str] | None = None,
                       ready_timeout_seconds: float = 180,
                       shape: Callable[[client.V1Deployment], None] | None = None) -> None:
    """Create the Deployment (:func:`http_server_deployment`, then ``shape`` applied to it: a drill's
    affinity or tolerations) and its Service, and wait ``ready_timeout_seconds`` until every
    replica is available. Raises ConditionTimeout."""
    deployment = http_server_deployment(name, replicas, node_selector)
    if shape is not None:
        shape(deployment)
    cluster.apps.create_namespaced_deployment(namespace, deployment)
    cluster.core.create_namespaced_service(namespace, http_service(name, node_port))
    wait_deployment_available(cluster, namespace, name, replicas, ready_timeout_seconds)


def wait_deployment_available(cluster: Cluster, namespace: str, name: str, replicas: int,
                              timeout_seconds: float = 180) -> float:
    """Wait until ``replicas`` are available; returns the seconds waited. Raises ConditionTimeout."""
    def available():
        d = cluster.apps.read_namespaced_deployment(name, namespace, _request_timeout=5)
        return (d.status.available_replicas or 0) >= replicas and d.status.observed_generation >= d.metadata.generation

    result = wait_until_or_raise(available, timeout_seconds, description=f"deployment {namespace}/{name} available")
    return result.elapsed_seconds or 0.0


def _endpoints(cluster: Cluster, namespace: str, service: str, timeout_seconds: float) -> list:
    """Every endpoint the EndpointSlices of ``namespace/service`` list. Raises ApiException."""
    slices = client.DiscoveryV1Api(cluster.api).list_namespaced_endpoint_slice(
        namespace, label_selector=f"kubernetes.io/service-name={service}", _request_timeout=timeout_seconds)
    return [e for s in slices.items for e in (s.endpoints or [])]


def ready_endpoints(cluster: Cluster, namespace: str, service: str, timeout_seconds: float = 5) -> int:
    """How many ready endpoints the EndpointSlices of ``namespace/service`` list. Raises ApiException."""
    return sum(1 for e in _endpoints(cluster, namespace, service, timeout_seconds) if e.conditions and e.conditions.ready)


def endpoint_addresses(cluster: Cluster, namespace: str, service: str, timeout_seconds: float = 10) -> set[str]:
    """Every address (ready or not) the EndpointSlices of ``namespace/service`` list. Raises ApiException."""
    return {a for e in _endpoints(cluster, namespace, service, timeout_seconds) for a in (e.addresses or [])}


def wait_endpoints(cluster: Cluster, namespace: str, service: str, count: int, timeout_seconds: float = 60) -> None:
    """Wait until the Service has ``count`` ready endpoints (EndpointSlices)."""
    wait_until_or_raise(lambda: ready_endpoints(cluster, namespace, service) >= count, timeout_seconds,
                        description=f"{count} ready endpoints for {namespace}/{service}")


FILL_OBJECT_KIB = 900  # under the API's 1 MiB ConfigMap limit


def fill_configmaps(cluster: Cluster, namespace: str, megabytes: int, labels: dict[str, str] | None = None,
                    stop_on_refusal: bool = False) -> tuple[int, str | None]:
    """Write ceil(megabytes MiB / 900 KiB) ConfigMaps ``fill-NNNN`` of random (incompressible)
    data, a bounded load that grows etcd's database. Returns (objects created, the refusal's
    text or None). ``stop_on_refusal``: the first refusal by the API ends the fill and is
    returned; otherwise it is raised (ApiException)."""
    import base64
    import math
    import os

    for i in range(math.ceil(megabytes * 1024 / FILL_OBJECT_KIB)):
        data = base64.b64encode(os.urandom(FILL_OBJECT_KIB * 1024 * 3 // 4)).decode()
        try:
            cluster.core.create_namespaced_config_map(namespace, client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=f"fill-{i:04d}", labels=dict(labels or {})), data={"fill": data}),
                _request_timeout=30)
        except ApiException as exc:
            if not stop_on_refusal:
                raise
            return i, f"HTTP {exc.status}: {str(exc.body)[:300]}"
    return math.ceil(megabytes * 1024 / FILL_OBJECT_KIB), None
