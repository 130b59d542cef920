"""The image sources the cluster's workloads use, and where an outage of one would show.

A registry outage is hidden until a container has to start on a node that does not hold its image:
with ``imagePullPolicy: IfNotPresent`` the kubelet pulls only an image the node lacks, with
``Always`` it asks the registry at every container start, with ``Never`` it never pulls (Kubernetes,
"Images": "Image pull policy"). So per source (the registry host of an image reference, Docker's
rules: no host means ``docker.io``) this lists each image with the workloads that run it, their pull
policies, and the nodes (not cordoned) that do not hold it: where a replacement or a scale-out would
need that source, and stay in ``ImagePullBackOff`` while it is down. Taints, tolerations and
affinity are not evaluated: a node listed may be one the workload would never be placed on.

A node's images come from its ``status.images``, which the kubelet caps at ``nodeStatusMaxImages``
(default 50, "Kubelet Configuration (v1beta1)"): on a node that lists that many, absence cannot be
told, and the map says so instead of guessing.

Sources: https://kubernetes.io/docs/concepts/containers/images/ (Image names; Image pull policy),
https://kubernetes.io/docs/reference/config-api/kubelet-config.v1beta1/ (nodeStatusMaxImages).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from harness.kube.providers import Cluster

DOCKER_HUB = "docker.io"
NODE_STATUS_MAX_IMAGES = 50  # the kubelet's default cap on status.images


@dataclass(frozen=True)
class ContainerImage:
    """One container (or init container) of a running pod: its workload ``owner``
    (``<namespace>/<Kind>/<name>``: a Deployment for a ReplicaSet's pod, ``Pod`` for a bare pod,
    ``static pod`` for a static pod's mirror pod), the image reference
    as the pod spec gives it, the pull policy and the node the pod runs on (None: not scheduled)."""

    owner: str
    image: str
    pull_policy: str
    node: str | None


@dataclass(frozen=True)
class NodeImages:
    """A node's ``status.images`` names (every tag and digest name it lists), how many images it
    lists, and whether pods can be scheduled to it (not cordoned)."""

    names: frozenset[str]
    listed: int
    schedulable: bool


def _host_and_path(reference: str) -> tuple[str, str]:
    """(registry host, the rest) by Docker's reference rules, which containerd's CRI plugin
    follows: the first path component is a host when it has a ``.`` or a ``:`` or is
    ``localhost``; otherwise, or for Docker Hub's legacy names, the host is ``docker.io``."""
    first, slash, rest = reference.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return (DOCKER_HUB if first in ("index.docker.io", "registry-1.docker.io") else first), rest
    return DOCKER_HUB, reference


def registry_host(reference: str) -> str:
    """The registry host of an image reference. ``registry.k8s.io/pause:3.10`` ->
    ``registry.k8s.io``, ``nginx`` -> ``docker.io``, ``localhost:5000/x`` -> ``localhost:5000``."""
    return _host_and_path(reference)[0]


def normalised(reference: str) -> str:
    """``reference`` as a node lists it: host added (``docker.io``, with ``library/`` for a
    one-component Docker Hub name), ``:latest`` when it has neither tag nor digest, and
    ``name:tag@digest`` as ``name@digest`` (the digest is what runs). ``nginx`` ->
    ``docker.io/library/nginx:latest``."""
    host, path = _host_and_path(reference)
    name, at, digest = path.partition("@")
    repository, _, tag = name.partition(":")  # the host (with its port) is already off
    if host == DOCKER_HUB and "/" not in repository:
        repository = "library/" + repository
    if at:
        return f"{host}/{repository}@{digest}"
    return f"{host}/{repository}:{tag or 'latest'}"


def _risk(policy: str, without: list[str], unknown: list[str], schedulable: bool) -> str:
    if policy == "Always":
        return "every container start asks this source: a restart anywhere needs it"
    if policy == "Never":
        if without:
            return "never pulled: a pod placed on " + ", ".join(without) + " cannot start at all"
        return "never pulled: every schedulable node holds it" if schedulable else "never pulled; no node to place a pod on"
    parts = []
    if without:
        parts.append("a pod placed on " + ", ".join(without) + " pulls from this source")
    if unknown:
        parts.append("cannot tell for " + ", ".join(unknown) + f" (lists {NODE_STATUS_MAX_IMAGES} images or more)")
    if parts:
        return "; ".join(parts)
    if not schedulable:
        return "no node to place a pod on (none listed, or every one cordoned)"
    return "every schedulable node holds it: only a new node or an evicted image needs the source"


def image_sources(containers: Iterable[ContainerImage], nodes: dict[str, NodeImages]) -> list[dict[str, Any]]:
    """The map, one entry per source sorted by host: ``{"source", "images": [{"image",
    "pull_policies", "workloads", "nodes_without", "nodes_unknown", "risk"}]}``. Nodes are the
    schedulable ones; ``nodes_unknown`` those whose image list is at the kubelet's cap."""
    by_image: dict[str, list[ContainerImage]] = {}
    for c in containers:
        by_image.setdefault(c.image, []).append(c)
    schedulable = {n: i for n, i in sorted(nodes.items()) if i.schedulable}
    sources: dict[str, list[dict[str, Any]]] = {}
    for image, uses in sorted(by_image.items()):
        wanted = normalised(image)
        without, unknown = [], []
        for node, held in schedulable.items():
            if wanted in held.names:
                continue
            (unknown if held.listed >= NODE_STATUS_MAX_IMAGES else without).append(node)
        policies = sorted({c.pull_policy for c in uses})
        # The riskiest policy the image is run with is what an outage meets first.
        policy = next((p for p in ("Always", "IfNotPresent", "Never") if p in policies), policies[0])
        sources.setdefault(registry_host(image), []).append({
            "image": image,
            "pull_policies": policies,
            "workloads": sorted({c.owner for c in uses}),
            "nodes_without": without,
            "nodes_unknown": unknown,
            "risk": _risk(policy, without, unknown, bool(schedulable)),
        })
    return [{"source": host, "images": images} for host, images in sorted(sources.items())]


def discover(cluster: Cluster) -> list[dict[str, Any]]:
    """:func:`image_sources` of every pod in the cluster (through the API: pods, ReplicaSets for
    their Deployments, nodes). Raises kubernetes ApiException when a list fails."""
    apps = cluster.apps
    replica_set_owner = {}
    for rs in apps.list_replica_set_for_all_namespaces(_request_timeout=30).items:
        owner = next((o for o in rs.metadata.owner_references or [] if o.controller), None)
        if owner is not None:
            replica_set_owner[(rs.metadata.namespace, rs.metadata.name)] = f"{owner.kind}/{owner.name}"
    containers = []
    for pod in cluster.core.list_pod_for_all_namespaces(_request_timeout=30).items:
        if pod.status.phase in ("Succeeded", "Failed"):
            continue
        ns = pod.metadata.namespace
        owner = next((o for o in pod.metadata.owner_references or [] if o.controller), None)
        if owner is None:
            workload = f"{ns}/Pod/{pod.metadata.name}"
        elif owner.kind == "Node":  # the mirror pod of a static pod: the kubelet runs it, not a controller
            workload = f"{ns}/static pod/{pod.metadata.name}"
        elif owner.kind == "ReplicaSet":
            workload = f"{ns}/{replica_set_owner.get((ns, owner.name), f'ReplicaSet/{owner.name}')}"
        else:
            workload = f"{ns}/{owner.kind}/{owner.name}"
        for c in list(pod.spec.init_containers or []) + list(pod.spec.containers or []):
            containers.append(ContainerImage(workload, c.image, c.image_pull_policy or "IfNotPresent",
                                             pod.spec.node_name))
    nodes = {}
    for node in cluster.core.list_node(_request_timeout=30).items:
        listed = node.status.images or []
        nodes[node.metadata.name] = NodeImages(frozenset(n for i in listed for n in i.names or []), len(listed),
                                               not node.spec.unschedulable)
    return image_sources(containers, nodes)
