"""The scenario's own workload for a data-only drill: its declared objects (``workload.manifests``,
placeholders expanded, waited on until they serve), its registries (``workload.registries``) and
the references a probe or an action makes to a declared object.
"""

from __future__ import annotations

import time
from contextlib import ExitStack

from harness.components.registry import container_name, image_tag, registry_host
from harness.components.webhook import WebhookTLS
from harness.core.waiting import wait_until
from harness.faults import injected
from harness.kube import objects as kube_objects
from harness.kube.images import Build
from harness.kube.objects import Kind, Ref
from harness.kube.workloads import TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY, deploy_http_server
from harness.scaffolding.drill_registry import DrillRegistry
from harness.spec.manifests import APP
from harness.spec.scenario import registry_images

# A deadline for the declared objects to serve (replicas ready, an APIService Available), not a
# measurement: the time each took is recorded (observations.objects.serving_seconds).
OBJECTS_READY_DEADLINE_SECONDS = 180
# The NodePort every kind config of clusters/ maps to 127.0.0.1 (extraPortMappings).
HOST_NODE_PORT = 30080


def serve_web(drill, replicas: int | None = None, from_host: bool = False, deploy=deploy_http_server,
              **shaped) -> int | None:
    """The built-in HTTP server ``APP`` (a Deployment and its Service) in the drill's namespace,
    every replica available: ``replicas``, else the scenario's ``workload.replicas`` (2 when
    unset), behind a NodePort Service on ``workload.node_port`` when the scenario names one (else
    HOST_NODE_PORT when the drill calls it ``from_host``), otherwise a ClusterIP Service. What the
    runner and the Python drills make alike; ``deploy`` is harness.kube.workloads.deploy_http_server's
    shape; ``shaped`` goes to it as it is (``shape=``, ``ready_timeout_seconds=``). Returns the
    NodePort (None for ClusterIP). Raises ConditionTimeout when the replicas are not available
    within deploy's deadline."""
    node_port = drill.workload.get("node_port", HOST_NODE_PORT if from_host else None)
    replicas = int(drill.workload.get("replicas", 2)) if replicas is None else replicas
    deploy(drill.cluster, drill.namespace, APP, replicas, node_port=int(node_port) if node_port is not None else None,
           **shaped)
    return int(node_port) if node_port is not None else None


def serving_problem(cluster, ref: Ref) -> str | None:
    """Why ``ref`` does not serve yet (:func:`kube_objects.not_ready_reason`; for a webhook
    configuration, :func:`kube_objects.webhook_unreachable_reason`), or None."""
    obj = kube_objects.read(cluster, ref)
    why = kube_objects.not_ready_reason(obj)
    if why is None and ref.kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        why = kube_objects.webhook_unreachable_reason(cluster, obj)
    return why


def until_serving(cluster, ref: Ref) -> float:
    """Wait until ``ref`` serves (:func:`serving_problem`); returns how long that took (seconds).
    Raises AssertionError naming why after OBJECTS_READY_DEADLINE_SECONDS."""
    waited = wait_until(lambda: serving_problem(cluster, ref) is None,
                        OBJECTS_READY_DEADLINE_SECONDS, interval_seconds=0.5, description=f"{ref} serving")
    if not waited.ok:
        try:
            why = serving_problem(cluster, ref)
        except Exception as exc:  # the reason is for the message only
            why = f"{type(exc).__name__}: {exc}"
        raise AssertionError(f"{ref} did not serve within {OBJECTS_READY_DEADLINE_SECONDS} s: {why}")
    return round(waited.elapsed_seconds, 2)


def placeholder_values(namespace: str, tls: WebhookTLS | None = None) -> dict[str, str]:
    """What ``$(name)`` means in a scenario's manifests, probe objects and actions; the
    ``$(tls_*)`` ones only with ``tls`` (a scenario with ``workload.tls``)."""
    values = {"namespace": namespace, "toolbox_image": TOOLBOX_IMAGE, "toolbox_pull_policy": TOOLBOX_PULL_POLICY}
    if tls is not None:
        values.update(tls_cert=tls.cert_pem.decode("ascii"), tls_key=tls.key_pem.decode("ascii"),
                      tls_ca_bundle=tls.ca_bundle)
    return values


def manifest_only_values(workers: list[str], images: dict[str, str]) -> dict[str, str]:
    """The placeholders only manifests may use: ``$(worker_<n>)``, the ``n``-th worker's node
    name (``workers`` sorted, from 1), and ``$(image_<image>)``, the reference of a pushed image
    (``images``: image name -> reference)."""
    values = {f"worker_{i}": name for i, name in enumerate(sorted(workers), start=1)}
    values.update({f"image_{image}": reference for image, reference in images.items()})
    return values


def declared_manifests(manifests: list[dict], namespace: str, tls: WebhookTLS | None = None,
                       extra: dict[str, str] | None = None) -> list[dict]:
    """``workload.manifests`` ready to create: placeholders expanded (``extra``:
    :func:`manifest_only_values`), a namespaced object without ``metadata.namespace`` put in the
    drill's ``namespace``. Raises KeyError for a placeholder with no value (e.g. ``$(worker_3)``
    on a cluster with two workers)."""
    result, kinds = [], kube_objects.known_kinds(manifests)
    for manifest in kube_objects.expand(manifests, {**placeholder_values(namespace, tls), **(extra or {})}):
        if (kinds.get(manifest["kind"]) or kube_objects.kind_of(manifest["kind"])).namespaced:
            manifest["metadata"].setdefault("namespace", namespace)
        result.append(manifest)
    return result


def object_ref(spec: dict, namespace: str, kinds: dict[str, Kind] = kube_objects.KINDS) -> Ref:
    """A probe's ``object`` or an action's target as a :class:`Ref` (placeholders expanded, the
    drill's ``namespace`` by default for a namespaced kind), of a kind in ``kinds``
    (:func:`harness.kube.objects.known_kinds` for the scenario's own custom resources, addressed at
    the spec's ``apiVersion``, by default the storage version). Raises KeyError for another kind."""
    spec = kube_objects.expand(spec, placeholder_values(namespace))
    return Ref.at(spec["kind"], spec["name"], spec.get("namespace") or namespace, spec.get("apiVersion"), kinds)


# The repository under which a scenario's images are pushed: kdrill-registry-<name>:5000/kdrill-drill/<image>.
REPOSITORY = "kdrill-drill"


def set_up_registries(drill, stack: ExitStack) -> dict[str, str]:
    """``workload.registries``: each registry container and the nodes' containerd configuration
    for it, through the ledger (kind ``drill-registry``, removed when ``stack`` closes, after
    the declared objects), then its images pushed: Kubernetes' pause image (under 1 MB: a push
    takes about a second, where the toolbox's 226 MB took 20 s; an image may ask for the toolbox,
    to run kdrill-http) plus a file naming the run, so every node has to pull it. Returns image name -> reference;
    records what was pushed, with its digest and the time it took (``observations.registries``).
    Raises RegistryError."""
    cluster, images, evidence = drill.cluster, {}, {}
    nodes = cluster.nodes_by_role.get("control-plane", []) + cluster.nodes_by_role.get("worker", [])
    tag, bases = image_tag(drill.record.run_id), {"pause": Build().tags["pause"], "toolbox": TOOLBOX_IMAGE}
    for spec in drill.workload.get("registries") or []:
        host = registry_host(spec["name"])
        setup = DrillRegistry(cluster, container_name(cluster.name, spec["name"]), nodes, host)
        stack.enter_context(injected(setup, drill.ledger, drill=drill.name))
        pushed = {}
        for image, base in registry_images(spec):
            started = time.time()
            digest = setup.registry.push_unique_image(f"{REPOSITORY}/{image}", tag, base=bases[base],
                                                      marker=f"{drill.record.run_id}/{drill.name}/{image}")
            images[image] = f"{host}/{REPOSITORY}/{image}:{tag}"
            pushed[image] = {"reference": images[image], "digest": digest,
                             "push_seconds": round(time.time() - started, 1)}
        evidence[spec["name"]] = {"container": setup.registry.name, "host": host, "images": pushed}
    drill.observe("registries", evidence)
    return images
