"""A real OCI image registry beside a kind cluster, and the nodes' containerd pointed at it.

The registry is Debian's ``docker-registry`` (distribution 2.8) from kdrill's toolbox image, run
in a container ``kdrill-registry-<cluster>`` on kind's Docker network (``kind``) with storage
inside the container, so stopping and starting it keeps the pushed images. The container's main
process is ``sleep infinity`` (under Docker's ``--init``) and the registry server is started in
it with ``docker exec``: the server can then be stopped (connections refused) while the
container, and so its name in Docker's embedded DNS, stays. A registry container that is stopped
outright would make the nodes' lookups of its name fall through to the host's resolvers.

Nodes reach it by name (a kind node's resolver forwards to Docker's embedded DNS). Pods refer to
images as ``kdrill-registry:5000/<repo>:<tag>`` (:data:`REGISTRY_HOST`); each node's containerd
maps that host to the container through ``/etc/containerd/certs.d/kdrill-registry:5000/hosts.toml``
(the node image sets ``config_path``, which containerd reads at every pull, so no restart). The
host pushes through the container's ``127.0.0.1:<port>`` mapping (Docker allows plain HTTP to
127.0.0.0/8 registries).

Sources: "Images" (https://kubernetes.io/docs/concepts/containers/images/) for how the kubelet
pulls; containerd's "Registry Configuration" (docs/hosts.md in containerd 1.6) for hosts.toml.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from harness.core import proc
from harness.core.waiting import wait_until_or_raise
from harness.kube.providers import Cluster
from harness.kube.workloads import TOOLBOX_IMAGE

log = logging.getLogger("kdrill.registry")

REGISTRY_HOST = "kdrill-registry:5000"  # the registry host name pods use in image references
REGISTRY_PORT = 5000  # the port docker-registry listens on inside its container
DOCKER_NETWORK = "kind"
CERTS_DIR = "/etc/containerd/certs.d"  # containerd's config_path in the kdrill node image
CONFIG_PATH = "/etc/kdrill-registry.yml"  # where the registry's config is copied in the container
LOG_PATH = "/var/log/kdrill-registry.log"
SERVER_PROCESS = "docker-registry"
REGISTRY_LABEL = "kdrill.io/registry-for"  # on the container: the cluster it serves

# No auth, plain HTTP on :5000, storage in the container's own filesystem (kept across
# stop/start and pause, removed with the container). One instance, so a fixed upload secret.
REGISTRY_CONFIG = """\
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: /var/lib/kdrill-registry
  delete:
    enabled: true
http:
  addr: :5000
  secret: kdrill-single-instance
"""

MANIFEST_TYPES = ", ".join([
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
])


class RegistryError(RuntimeError):
    """The registry container or its node configuration could not be set up, changed or read."""


# --- pure logic ------------------------------------------------------------------------------

def container_name(cluster_name: str, instance: str | None = None) -> str:
    """``kdrill-registry-<cluster>``, or ``kdrill-registry-<cluster>-<instance>`` for one of a
    data-only scenario's registries (``workload.registries``): a valid Docker container name and
    DNS label. Raises ValueError when the names cannot make one."""
    name = f"kdrill-registry-{cluster_name}" + (f"-{instance}" if instance else "")
    if not re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", name):
        raise ValueError(f"cluster name {cluster_name!r} and registry {instance!r} do not make a DNS-label "
                         f"container name: {name!r}")
    return name


def registry_host(instance: str | None = None) -> str:
    """The registry host pods name in image references: :data:`REGISTRY_HOST`, or
    ``kdrill-registry-<instance>:5000`` for a scenario's registry ``instance``. Raises ValueError
    for an instance that is not a DNS label."""
    if instance is None:
        return REGISTRY_HOST
    if not re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?", instance):
        raise ValueError(f"registry name {instance!r} is not a DNS label of at most 32 characters")
    return f"kdrill-registry-{instance}:{REGISTRY_PORT}"


def hosts_toml(server_host: str, port: int = REGISTRY_PORT) -> str:
    """containerd hosts.toml text sending pulls for a registry host to ``http://<server_host>:<port>``
    (plain HTTP; pull and resolve only)."""
    if not re.fullmatch(r"[A-Za-z0-9.-]+", server_host):
        raise ValueError(f"not a host name: {server_host!r}")
    url = f"http://{server_host}:{port}"
    return (f'server = "{url}"\n'
            f"\n"
            f'[host."{url}"]\n'
            f'  capabilities = ["pull", "resolve"]\n')


def hosts_dir(registry_host: str = REGISTRY_HOST) -> str:
    """The node directory whose hosts.toml applies to ``registry_host`` (``host[:port]``)."""
    if not re.fullmatch(r"[A-Za-z0-9.-]+(:[0-9]{1,5})?", registry_host):
        raise ValueError(f"not a registry host[:port]: {registry_host!r}")
    return f"{CERTS_DIR}/{registry_host}"


def image_tag(*parts: str) -> str:
    """A valid image tag (``[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}``) from ``parts`` joined by ``-``;
    other characters become ``-``. Raises ValueError when nothing is left."""
    text = re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(p for p in parts if p)).strip("-.")
    if not text:
        raise ValueError(f"no tag can be made from {parts!r}")
    return text[:128]


def parse_host_port(docker_port_output: str) -> int:
    """The 127.0.0.1 host port from ``docker port <container> 5000/tcp`` output
    (e.g. ``127.0.0.1:32768``). Raises RegistryError when there is none."""
    for line in docker_port_output.splitlines():
        host, _, port = line.strip().rpartition(":")
        if host == "127.0.0.1" and port.isdigit():
            return int(port)
    raise RegistryError(f"no 127.0.0.1 port mapping in {docker_port_output!r}")


def parse_push_digest(push_output: str) -> str | None:
    """The manifest digest (``sha256:<hex>``) from ``docker push`` output, or None."""
    match = re.search(r"digest: (sha256:[0-9a-f]{64})", push_output)
    return match.group(1) if match else None


# --- the registry container ------------------------------------------------------------------

def docker(*args: str, check: bool = True, timeout_seconds: float = 120,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``docker ARGS`` with ``env`` added to the environment, for at most ``timeout_seconds``
    seconds. Raises RegistryError (the command, its exit code, the tail of its stderr) when
    ``check`` and it fails, subprocess.TimeoutExpired when it runs longer."""
    try:
        return proc.run(["docker", *args], timeout_seconds=timeout_seconds, check=check, extra_env=env)
    except proc.CommandFailed as exc:
        raise RegistryError(str(exc)) from None


@dataclass(frozen=True)
class ContainerState:
    running: bool
    paused: bool


@dataclass
class LocalRegistry:
    """The registry container ``name`` (see the module docstring). Every method talks to the
    local Docker engine; HTTP checks go through the container's 127.0.0.1 port mapping."""

    name: str
    network: str = DOCKER_NETWORK
    image: str = TOOLBOX_IMAGE

    # state

    def state(self) -> ContainerState | None:
        """Running/paused state of the container, or None when it does not exist."""
        result = docker("inspect", "--format", "{{.State.Running}} {{.State.Paused}}", self.name, check=False)
        if result.returncode != 0:
            return None
        running, paused = result.stdout.split()
        return ContainerState(running == "true", paused == "true")

    def host_port(self) -> int:
        """The host port mapped to the registry (on 127.0.0.1). Raises RegistryError."""
        return parse_host_port(docker("port", self.name, f"{REGISTRY_PORT}/tcp").stdout)

    def server_running(self) -> bool:
        """Whether the registry server process runs (False when the container does not run)."""
        state = self.state()
        if state is None or not state.running or state.paused:
            return False
        return docker("exec", self.name, "pidof", SERVER_PROCESS, check=False).returncode == 0

    def answers(self, timeout_seconds: float = 2.0) -> bool:
        """True when ``GET /v2/`` answers 200 through the host port mapping, within the timeout."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.host_port()}/v2/", timeout=timeout_seconds) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError, RegistryError):
            return False

    def has_manifest(self, repository: str, tag: str, timeout_seconds: float = 5.0) -> bool:
        """True when the registry serves a manifest for ``repository:tag`` (HEAD, HTTP 200), False
        on HTTP 404. Raises RegistryError when it cannot tell (no answer, another status)."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.host_port()}/v2/{repository}/manifests/{tag}",
                                         method="HEAD", headers={"Accept": MANIFEST_TYPES})
        try:
            with urllib.request.urlopen(request, timeout=timeout_seconds) as r:
                return r.status == 200
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return False
            raise RegistryError(f"HEAD manifest {repository}:{tag}: HTTP {exc.code}") from exc
        except OSError as exc:  # refused, reset, timed out
            raise RegistryError(f"HEAD manifest {repository}:{tag}: {exc}") from exc

    # lifecycle

    def ensure(self, cluster_name: str, ready_seconds: float = 60) -> bool:
        """Create and start the container and its server, or bring an existing one back (after an
        interrupted run: its content is kept). Returns True when it was created. Raises
        RegistryError or ConditionTimeout."""
        created = False
        if self.state() is None:
            docker("create", "--init", "--name", self.name, "--network", self.network,
                   "--label", f"{REGISTRY_LABEL}={cluster_name}",
                   "--publish", f"127.0.0.1::{REGISTRY_PORT}", "--entrypoint", "sleep", self.image, "infinity")
            with tempfile.TemporaryDirectory(prefix="kdrill-registry-") as tmp:
                config = Path(tmp) / "config.yml"
                config.write_text(REGISTRY_CONFIG)
                docker("cp", str(config), f"{self.name}:{CONFIG_PATH}")
            created = True
        self.restore(ready_seconds)
        return created

    def start_server(self) -> None:
        """Start the registry server in the running container (a no-op when it runs)."""
        if self.server_running():
            return
        docker("exec", "--detach", self.name, "sh", "-c",
               f"exec {SERVER_PROCESS} serve {CONFIG_PATH} >>{LOG_PATH} 2>&1")

    def stop_server(self, timeout_seconds: float = 30) -> None:
        """Stop the registry server; the container (and its name, address, storage) stays.
        Raises ConditionTimeout when it is still running after ``timeout_seconds``."""
        docker("exec", self.name, "pkill", "-x", SERVER_PROCESS, check=False)
        wait_until_or_raise(lambda: not self.server_running(), timeout_seconds,
                            description=f"registry server in {self.name} stopped")

    def pause(self) -> None:
        """Freeze every process of the container (``docker pause``): the kernel still accepts TCP
        connections to it, nothing answers them."""
        docker("pause", self.name)

    def restore(self, ready_seconds: float = 60) -> None:
        """Bring the registry back as it was: unpause, or start the container, then start the
        server, and wait until ``/v2/`` answers. Idempotent. Raises RegistryError when the
        container is gone (its content cannot be restored), ConditionTimeout when it never answers."""
        state = self.state()
        if state is None:
            raise RegistryError(f"registry container {self.name} does not exist: its images are gone")
        if state.paused:
            docker("unpause", self.name)
        elif not state.running:
            docker("start", self.name)
        self.start_server()
        wait_until_or_raise(self.answers, ready_seconds, description=f"registry {self.name} answers /v2/")

    def remove(self) -> None:
        """Remove the container and its storage (a no-op when it is gone)."""
        if self.state() is not None:
            docker("rm", "--force", "--volumes", self.name)

    # images

    def push_unique_image(self, repository: str, tag: str, marker: str, base: str = TOOLBOX_IMAGE) -> str:
        """Build ``base`` plus a label and a file holding ``marker`` (so its manifest and config
        are new to every node), push it as ``repository:tag`` through the host port mapping, and
        drop the host's tag. Returns the manifest digest. Raises RegistryError."""
        local = f"127.0.0.1:{self.host_port()}/{repository}:{tag}"
        with tempfile.TemporaryDirectory(prefix="kdrill-image-") as tmp:
            Path(tmp, "kdrill-image-id").write_text(marker + "\n")
            Path(tmp, "Dockerfile").write_text(
                f"FROM {base}\n"
                f"LABEL io.kdrill.image-id={json.dumps(marker)}\n"
                f"COPY kdrill-image-id /etc/kdrill-image-id\n")
            # The classic builder with --pull=false uses the local base image: nothing is fetched.
            docker("build", "--pull=false", "--quiet", "--tag", local, tmp, env={"DOCKER_BUILDKIT": "0"},
                   timeout_seconds=300)
        try:
            pushed = docker("push", local, timeout_seconds=600)
        finally:
            docker("rmi", local, check=False)
        digest = parse_push_digest(pushed.stdout)
        if digest is None:
            raise RegistryError(f"docker push {local} printed no digest: {pushed.stdout[-500:]}")
        return digest


# --- the nodes' containerd -------------------------------------------------------------------

def configure_nodes(cluster: Cluster, nodes: list[str], registry: LocalRegistry,
                    registry_host: str = REGISTRY_HOST) -> None:
    """Write ``hosts.toml`` for ``registry_host`` on every node, pointing at the registry
    container by name. Raises ProviderError when a node cannot be written."""
    directory, text = hosts_dir(registry_host), hosts_toml(registry.name)
    for node in nodes:
        cluster.node_exec(node, ["sh", "-c", 'mkdir -p "$1" && cat > "$1/hosts.toml"', "sh", directory],
                          stdin=text, timeout_seconds=20)


def unconfigure_nodes(cluster: Cluster, nodes: list[str], registry_host: str = REGISTRY_HOST) -> None:
    """Remove the ``registry_host`` directory from every node's ``certs.d``."""
    directory = hosts_dir(registry_host)
    for node in nodes:
        cluster.node_exec(node, ["rm", "-rf", directory], timeout_seconds=20, check=False)


def registry_images(crictl_images_json: str, registry_host: str = REGISTRY_HOST) -> list[str]:
    """The tags under ``registry_host`` in ``crictl images -o json`` output."""
    prefix = registry_host + "/"
    return sorted(tag for image in json.loads(crictl_images_json).get("images", [])
                  for tag in image.get("repoTags") or [] if tag.startswith(prefix))


def remove_registry_images(cluster: Cluster, nodes: list[str], registry_host: str = REGISTRY_HOST) -> list[str]:
    """Remove from every node each image pulled from ``registry_host`` (by this or an interrupted
    earlier run); returns the ``node: reference`` pairs removed."""
    removed = []
    for node in nodes:
        listing = cluster.node_exec(node, ["crictl", "images", "-o", "json"], timeout_seconds=30, check=False)
        if listing.returncode != 0:
            continue
        for reference in registry_images(listing.stdout, registry_host):
            if cluster.node_exec(node, ["crictl", "rmi", reference], timeout_seconds=60, check=False).returncode == 0:
                removed.append(f"{node}: {reference}")
    return removed


# --- the kubelet's image pull back-off -------------------------------------------------------

# "Images" (kubernetes.io): after a failed pull the kubelet keeps retrying with an increasing
# back-off delay, capped at 300 s. The kubelet (pkg/kubelet: imageBackOffPeriod, MaxImageBackOff)
# starts it at 10 s and doubles it per failure; a pod whose sync failed is synced again after
# 10 s plus up to 50 % jitter (pod workers' backOffPeriod), so a retry lands up to 15 s after its
# back-off expired.
IMAGE_PULL_BACKOFF_INITIAL_SECONDS = 10.0
IMAGE_PULL_BACKOFF_MAX_SECONDS = 300.0
POD_SYNC_RETRY_MAX_SECONDS = 15.0


def pull_backoff_seconds(failures: int) -> float:
    """The back-off after ``failures`` consecutive failed pulls (>= 1): 10, 20, 40, ... 300 s.
    Raises ValueError for fewer than one failure."""
    if failures < 1:
        raise ValueError(f"failures must be >= 1, got {failures}")
    return min(IMAGE_PULL_BACKOFF_INITIAL_SECONDS * 2 ** (failures - 1), IMAGE_PULL_BACKOFF_MAX_SECONDS)


def max_retry_wait_after_restore(failing_seconds: float) -> float:
    """Upper bound (seconds) on the wait from a registry's restore to the kubelet's next pull
    attempt, when pulls have been failing for ``failing_seconds`` (first failure to restore).

    Failure k can happen no earlier than the sum of the back-offs before it, so the last failure
    before the restore is at most the k-th with that sum <= ``failing_seconds``; the next attempt
    comes at most its back-off plus one pod re-sync after it."""
    if failing_seconds < 0:
        raise ValueError(f"failing_seconds must be >= 0, got {failing_seconds}")
    failures, earliest = 1, 0.0
    while earliest + pull_backoff_seconds(failures) <= failing_seconds:
        earliest += pull_backoff_seconds(failures)
        failures += 1
    return pull_backoff_seconds(failures) + POD_SYNC_RETRY_MAX_SECONDS
