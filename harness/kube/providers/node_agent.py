"""Node agent: node access on a cluster reached only through its kubeconfig (no ``docker exec``).

On a self-managed (kubeadm-style) cluster kdrill cannot reach the node machines itself. The agent
is one short-lived privileged pod per node: pinned to the node by ``nodeName``, in the host's PID
namespace, tolerating every taint, running the toolbox image (its reference and pull policy are
kdrill's toolbox settings, ``--toolbox-image``/``--toolbox-pull-policy``). A command for the node
is run as ``nsenter --target 1 --mount --uts --ipc --net --pid -- COMMAND`` through the API
server's pod ``exec``: in the node's own namespaces, as ``docker exec`` into a kind node container
runs it, so the node's ``systemctl``, ``crictl`` and ``journalctl`` are the ones used.

The pods live in their own namespace (:data:`NAMESPACE`), recorded in the ledger before the first
one is created (fault kind ``node-agent``); deleting that namespace removes them, at the end of
the session, on Ctrl-C, and by ``kdrill recover`` after a crash. Each pod also ends on its own
after :data:`LIFETIME_SECONDS` (``activeDeadlineSeconds``): an agent outlives no session by long.

What the agent cannot do, and why (the reason the drills that need it are skipped): pod exec goes
API server -> the node's kubelet -> the container runtime. A fault that stops the kubelet, the API
server or etcd's quorum cuts the very channel its revert would come through, so such a fault needs
its revert held on the node itself, set before the stop with a due time (a dead man's switch:
:mod:`harness.components.node_units`). ``control-plane-stop`` (``stop-components``) has one and runs
through the agent; the etcd faults that stop a kubelet (member loss, space quota, restore) do not
yet, and need node access ``kubelet``. Freezing a whole node (``docker pause``) or running
containers beside the nodes needs this machine's Docker engine.

Source: Kubernetes "Pod Security Standards" (privileged: hostPID, privileged containers) and
"kubectl exec" / the pod ``exec`` subresource (https://kubernetes.io/docs/tasks/debug/debug-application/get-shell-running-container/).
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import threading
import time
from typing import Any

from harness.kube import pod_exec
from harness.kube.providers import ProviderError

NAMESPACE = "kdrill-node-agent"
LABELS = {"app.kubernetes.io/managed-by": "kdrill", "kdrill.io/node-agent": "true"}
# An agent pod ends itself after this long (activeDeadlineSeconds), whatever happens to kdrill:
# longer than the longest catalogue run on this machine (about 70 min), not a day.
LIFETIME_SECONDS = 4 * 3600
# A deadline for an agent pod to run, not a measurement: the toolbox image is on the node (kind
# preloads it; elsewhere the pull policy may pull it), and a loaded 2-core machine starts a pod in
# a few seconds.
START_DEADLINE_SECONDS = 120
NSENTER = ["nsenter", "--target", "1", "--mount", "--uts", "--ipc", "--net", "--pid", "--"]
# Files copied through exec travel base64-encoded in memory: large enough for an etcd snapshot of
# a drill cluster, small enough not to exhaust memory on a real one.
COPY_MAX_BYTES = 256 * 1024 * 1024
# After a failed exec, how long the look at the agent pod may take (one request, no retries).
STILL_RUNNING_READ_SECONDS = 3.0


def pod_name(node: str) -> str:
    """The agent pod's name for ``node``: readable, unique per node, and a valid pod name
    (DNS-1123, at most 63 characters: it is also the pod's hostname) whatever the node is called."""
    digest = hashlib.sha256(node.encode()).hexdigest()[:8]
    readable = re.sub(r"[^a-z0-9-]", "-", node.lower()).strip("-")[:30].strip("-") or "node"
    return f"kdrill-node-agent-{readable}-{digest}"


def pod_manifest(node: str, image: str, pull_policy: str) -> dict[str, Any]:
    """The agent pod for ``node`` (a Pod manifest as a dict)."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name(node), "namespace": NAMESPACE, "labels": dict(LABELS),
                     "annotations": {"kdrill.io/node": node}},
        "spec": {
            "nodeName": node,  # bypasses the scheduler: placed even on a cordoned or tainted node
            "hostPID": True,  # nsenter --target 1 reaches the node's init and its namespaces
            "tolerations": [{"operator": "Exists"}],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "activeDeadlineSeconds": LIFETIME_SECONDS,
            "automountServiceAccountToken": False,
            "priorityClassName": "system-node-critical",  # not the first to go under node pressure
            "containers": [{
                "name": "agent", "image": image, "imagePullPolicy": pull_policy,
                "command": ["sleep", str(LIFETIME_SECONDS)],
                "securityContext": {"privileged": True},
                "resources": {"requests": {"cpu": "1m", "memory": "8Mi"}},
            }],
        },
    }


class NodeAgent:
    """Runs commands on a cluster's nodes through agent pods (created on first use per node).

    ``cluster`` gives the API (a :class:`harness.kube.providers.Cluster`); ``image``/``pull_policy``
    the agent's container image. Thread-safe: probes and faults may run commands at once.
    """

    def __init__(self, cluster: Any, image: str, pull_policy: str) -> None:
        self.cluster, self.image, self.pull_policy = cluster, image, pull_policy
        self._ready: set[str] = set()
        self._lock = threading.Lock()
        self.made_namespace = False  # whether this process created NAMESPACE (kdrill recover removes it then)

    def describe(self) -> dict[str, Any]:
        return {"namespace": NAMESPACE, "image": self.image, "pull_policy": self.pull_policy,
                "nodes": sorted(self._ready)}

    def forget(self) -> None:
        """Forget which agent pods run (after their namespace was deleted): the next command on a
        node creates its pod again."""
        with self._lock:
            self._ready.clear()

    def ensure_namespace(self) -> None:
        """Create :data:`NAMESPACE` (labelled privileged for Pod Security admission) unless it is
        there. Raises ProviderError."""
        from kubernetes.client.exceptions import ApiException

        body = {"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": NAMESPACE, "labels": {**LABELS, "pod-security.kubernetes.io/enforce": "privileged"}}}
        try:
            self.cluster.core.create_namespace(body, _request_timeout=15)
            self.made_namespace = True
        except ApiException as exc:
            if exc.status != 409:
                raise ProviderError(f"node agent: namespace {NAMESPACE} not created: {exc.status} {exc.reason}") from None

    def ensure(self, node: str) -> str:
        """The running agent pod on ``node`` (created when missing); returns its name. Raises
        ProviderError when it does not run within :data:`START_DEADLINE_SECONDS`, with its state."""
        name = pod_name(node)
        with self._lock:
            if node in self._ready:
                return name
        from kubernetes.client.exceptions import ApiException

        self.ensure_namespace()
        try:
            self.cluster.core.create_namespaced_pod(NAMESPACE, pod_manifest(node, self.image, self.pull_policy),
                                                    _request_timeout=15)
        except ApiException as exc:
            if exc.status != 409:
                raise ProviderError(f"node agent for {node}: pod not created: {exc.status} {exc.reason}: "
                                    f"{(exc.body or '')[:300]}") from None
        deadline, state = time.monotonic() + START_DEADLINE_SECONDS, "not read"
        while time.monotonic() < deadline:
            try:
                pod = self.cluster.core.read_namespaced_pod(name, NAMESPACE, _request_timeout=10)
            except ApiException as exc:
                state = f"{exc.status} {exc.reason}"
            else:
                state = _pod_state(pod)
                if state == "Running":
                    with self._lock:
                        self._ready.add(node)
                    return name
                if pod.status.phase in ("Failed", "Succeeded"):
                    break  # it will not run again (restartPolicy Never): a new one is needed
            time.sleep(1.0)
        raise ProviderError(f"node agent pod {NAMESPACE}/{name} on node {node} is not running after "
                            f"{START_DEADLINE_SECONDS} s: {state}. It needs the toolbox image on the node or pullable "
                            "(--toolbox-image, --toolbox-pull-policy) and a privileged pod admitted in its namespace")

    def exec(self, node: str, command: list[str], timeout_seconds: float = 60, check: bool = True,
             stdin: str | bytes | None = None, read_only: bool = False) -> subprocess.CompletedProcess:
        """Run ``command`` on ``node`` in the node's namespaces; returns a CompletedProcess with its
        exit code, stdout and stderr (text). Raises ProviderError when the exec cannot be made or,
        with ``check``, when the command exits non-zero; subprocess.TimeoutExpired after
        ``timeout_seconds``."""

        name = self.ensure(node)
        try:
            result = pod_exec.run(self.cluster, NAMESPACE, name, [*NSENTER, *command], timeout_seconds, stdin=stdin,
                                  read_only=read_only)
        except pod_exec.PodExecError as exc:
            if not self._still_running(name):
                with self._lock:
                    self._ready.discard(node)  # gone: the next command makes it again
            raise ProviderError(f"node agent on {node}: {exc}") from None
        if check and result.returncode != 0:
            raise ProviderError(f"on node {node} (node agent): {' '.join(command)} exited {result.returncode}: "
                                f"{result.stderr.strip()[:500] or result.stdout.strip()[:500]}")
        return result

    def _still_running(self, name: str) -> bool:
        """After a failed exec: whether agent pod ``name`` is still seen running, in one request
        of at most STILL_RUNNING_READ_SECONDS seconds. An API that does not answer (the usual cause,
        a drill's control-plane outage) says nothing against it: the pod is kept, so the next exec
        does not first go through :meth:`ensure`'s namespace and pod creation, whose requests
        wait out their timeouts while the API is down (about 14 s seen)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        try:
            pod = client.CoreV1Api(self.cluster.new_api()).read_namespaced_pod(
                name, NAMESPACE, _request_timeout=STILL_RUNNING_READ_SECONDS)
        except ApiException as exc:
            return exc.status != 404
        except Exception:  # noqa: BLE001 - no answer: nothing known against the pod
            return True
        return _pod_state(pod) == "Running"

    def copy_from_node(self, node: str, node_path: str, host_path: str, timeout_seconds: float = 120) -> None:
        """Copy ``node_path`` on ``node`` to ``host_path`` (base64 through exec). Raises ProviderError."""
        import base64

        size = self.exec(node, ["stat", "-c", "%s", node_path], timeout_seconds=30).stdout.strip()
        if not size.isdigit() or int(size) > COPY_MAX_BYTES:
            raise ProviderError(f"node agent: {node}:{node_path} is {size or '?'} bytes; at most {COPY_MAX_BYTES} "
                                "are copied through exec")
        text = self.exec(node, ["base64", "-w", "0", node_path], timeout_seconds=timeout_seconds).stdout
        data = base64.b64decode(text)
        if len(data) != int(size):
            raise ProviderError(f"node agent: copied {len(data)} of {size} bytes of {node}:{node_path}")
        with open(host_path, "wb") as handle:
            handle.write(data)

    def copy_to_node(self, node: str, host_path: str, node_path: str, timeout_seconds: float = 120) -> None:
        """Copy the file ``host_path`` to ``node_path`` on ``node`` (through exec's standard input).
        Raises ProviderError."""
        import shlex

        with open(host_path, "rb") as handle:
            data = handle.read()
        if len(data) > COPY_MAX_BYTES:
            raise ProviderError(f"node agent: {host_path} is {len(data)} bytes; at most {COPY_MAX_BYTES} are copied")
        script = f"cat > {shlex.quote(node_path)} && stat -c %s {shlex.quote(node_path)}"
        size = self.exec(node, ["sh", "-c", script], timeout_seconds=timeout_seconds, stdin=data).stdout.strip()
        if size != str(len(data)):
            raise ProviderError(f"node agent: {node}:{node_path} has {size or '?'} bytes after the copy, not {len(data)}")


def nodes_by_role(cluster: Any) -> dict[str, list[str]]:
    """The cluster's nodes by role, from the API: ``control-plane`` for nodes labelled
    ``node-role.kubernetes.io/control-plane``, ``worker`` for the rest (sorted names). Raises
    ApiException."""
    roles: dict[str, list[str]] = {"control-plane": [], "worker": []}
    for node in cluster.core.list_node(_request_timeout=15).items:
        labels = node.metadata.labels or {}
        role = "control-plane" if "node-role.kubernetes.io/control-plane" in labels else "worker"
        roles[role].append(node.metadata.name)
    return {role: sorted(names) for role, names in roles.items()}


def _pod_state(pod: Any) -> str:
    """"Running", or what keeps the pod from it (a container's waiting reason, its phase)."""
    for status in (pod.status.container_statuses or []):
        if status.state and status.state.running:
            return "Running"
        if status.state and status.state.waiting:
            return f"{status.state.waiting.reason}: {(status.state.waiting.message or '')[:200]}"
        if status.state and status.state.terminated:
            return f"terminated: {status.state.terminated.reason}"
    conditions = "; ".join(f"{c.type}={c.status} {c.reason or ''}".strip() for c in (pod.status.conditions or []))
    return f"phase {pod.status.phase}" + (f" ({conditions})" if conditions else "")
