"""kind provider: create, reuse, delete kind clusters and export their logs.

The kind CLI is the one the offline image build made from its pinned Go module (v0.31.0); a
``kind`` on PATH is used only when no build exists. Clusters use the offline node image
``kdrill/node:<version>`` so kind never pulls anything. ``kdrill run``, ``kdrill cluster create``
and the pytest plugin build whatever is missing (``harness.kube.images.ensure_built``) before they
get here, so the errors below are for a build removed or changed meanwhile.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from harness.core import proc, resources
from harness.core.files import write_text_atomic
from harness.kube.health import wait_healthy
from harness.kube.images import Build
from harness.kube.providers import Cluster, ProviderError

log = logging.getLogger("kdrill.kind")

CLUSTERS_DIR = resources.clusters_dir()


def kind_binary() -> str:
    """Path of the kind CLI. Raises ProviderError saying how to get one."""
    built = Build().step("go-tools").out / "kind"
    if built.exists():
        return str(built)
    on_path = shutil.which("kind")
    if on_path:
        return on_path
    raise ProviderError("kind CLI not built yet: it is built offline with the kind images, which "
                        "`kdrill run` and `python3 -m pytest` build themselves (or `kdrill images build`)")


def node_image() -> str:
    return Build().node_image


def config_path(name: str) -> Path:
    """``clusters/<name>.yaml``, or ``name`` itself when it is a path. Raises ProviderError."""
    candidate = Path(name)
    if candidate.suffix in (".yaml", ".yml") and candidate.exists():
        return candidate
    path = CLUSTERS_DIR / f"{name}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in CLUSTERS_DIR.glob("*.yaml")))
        raise ProviderError(f"no kind cluster config {path} (known: {known})")
    return path


def kubeconfig_cache_path(name: str) -> Path:
    """Where kdrill keeps the kubeconfig of kind cluster ``name``:
    ``$KDRILL_CACHE/kubeconfig/<name>`` (default ``~/.cache/kdrill``)."""
    cache = Path(os.environ.get("KDRILL_CACHE", Path.home() / ".cache" / "kdrill"))
    return cache / "kubeconfig" / name


# kind's own rule for a cluster name (its create refuses others), and the length past which kind
# warns it may not work: the node containers and their hostnames are <name>-control-plane2,
# <name>-worker3, ..., which must stay within a 63-character DNS label.
CLUSTER_NAME = re.compile(r"[a-z0-9][a-z0-9.-]*")
MAX_CLUSTER_NAME_LENGTH = 50


def cluster_name_problem(name: object) -> str | None:
    """What is wrong with ``name`` as a kind cluster name, as "expected ..., got ...", or None."""
    if isinstance(name, str) and CLUSTER_NAME.fullmatch(name) and len(name) <= MAX_CLUSTER_NAME_LENGTH:
        return None
    return (f"expected a kind cluster name: lowercase letters, digits, '-' and '.', starting with a letter or "
            f"digit, at most {MAX_CLUSTER_NAME_LENGTH} characters; got {name!r}")


def cluster_name_of(config: Path) -> str:
    return yaml.safe_load(config.read_text()).get("name") or "kind"


def host_ports(config: dict) -> dict[int, int]:
    """The kind config's ``127.0.0.1`` mappings: {container (NodePort) port: host port}. A mapping
    on another address is left out: the host reaches a cluster through ``127.0.0.1`` only."""
    ports = {}
    for node in config.get("nodes") or []:
        for mapping in (node or {}).get("extraPortMappings") or []:
            if mapping.get("listenAddress", "0.0.0.0") == "127.0.0.1" and mapping.get("hostPort"):
                ports[int(mapping["containerPort"])] = int(mapping["hostPort"])
    return ports


# One mapping in `docker ps`'s Ports column: "127.0.0.1:30180->30080/tcp", a range
# "127.0.0.1:30180-30181->30080-30081/tcp" (how Docker prints neighbouring ports), ":::5000->5000/tcp".
PUBLISHED = re.compile(r"(\d{1,3}(?:\.\d{1,3}){3}|\[[0-9a-fA-F:]*\]|::):(\d+)(?:-(\d+))?->(\d+)(?:-\d+)?/(\w+)")


def published_ports(ports_column: str) -> list[tuple[str, int, int, str]]:
    """(host address, host port, container port, protocol) for every mapping in ``docker ps``
    Ports text, a range expanded port by port."""
    found = []
    for address, first, last, inner, protocol in PUBLISHED.findall(ports_column):
        for i in range(int(last or first) - int(first) + 1):
            found.append((address, int(first) + i, int(inner) + i, protocol))
    return found


def published_host_ports(ps_lines: str) -> dict[int, str]:
    """{host port: container name} from ``docker ps --format '{{.Names}} {{.Ports}}'`` lines:
    every host port a running container publishes, on any address."""
    owners: dict[int, str] = {}
    for line in ps_lines.splitlines():
        name, _, ports = line.partition(" ")
        for _, host, _, _ in published_ports(ports):
            owners.setdefault(host, name)
    return owners


def conflicting_host_ports(config: dict, ps_lines: str) -> dict[int, str]:
    """{host port: container publishing it} for the ``hostPort``s of kind ``config`` that a
    running container already publishes (kind would fail half-way, with a node container made)."""
    wanted = {int(m["hostPort"]) for node in config.get("nodes") or []
              for m in (node or {}).get("extraPortMappings") or [] if m.get("hostPort")}
    owners = published_host_ports(ps_lines)
    return {port: owners[port] for port in sorted(wanted) if port in owners}


def docker_node_ports(ports_column: str) -> dict[int, int]:
    """{NodePort: host port} from ``docker ps --format {{.Ports}}`` lines of a cluster's node
    containers (``127.0.0.1:30180->30080/tcp, ...``): loopback mappings to the NodePort range
    (30000-32767) only, so the API server's load-balancer port is left out."""
    return {inner: host for address, host, inner, protocol in published_ports(ports_column)
            if address == "127.0.0.1" and protocol == "tcp" and 30000 <= inner <= 32767}


def offset_host_ports(config: dict, offset: int) -> dict:
    """``config`` (a kind config) with ``offset`` added to every ``hostPort``; a new dict.
    Raises ProviderError when a port would leave 1..65535."""
    config = copy.deepcopy(config)
    for node in config.get("nodes") or []:
        for mapping in (node or {}).get("extraPortMappings") or []:
            if mapping.get("hostPort"):
                port = int(mapping["hostPort"]) + offset
                if not 0 < port < 65536:
                    raise ProviderError(f"host port offset {offset}: hostPort {mapping['hostPort']} would become "
                                        f"{port}, outside 1..65535")
                mapping["hostPort"] = port
    return config


def write_offset_config(config: Path, name: str, offset: int) -> Path:
    """Write ``config`` with :func:`offset_host_ports` and the cluster name ``name`` under
    ``$KDRILL_CACHE/kind-configs/`` (default ``~/.cache/kdrill``); returns its path."""
    data = offset_host_ports(yaml.safe_load(config.read_text()) or {}, offset)
    data["name"] = name
    cache = Path(os.environ.get("KDRILL_CACHE", Path.home() / ".cache" / "kdrill"))
    out = cache / "kind-configs" / f"{name}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    # Atomic: two workers write their configs at once, and a reader must never see half of one.
    write_text_atomic(out, f"# kind config {config} with host ports moved by {offset}, for cluster {name};\n"
                      "# written by kdrill (harness/kube/providers/kind.py); not to be edited.\n"
                      + yaml.safe_dump(data, sort_keys=False))
    return out


PAUSE_ATTEMPTS = 3
PAUSE_RETRY_SECONDS = 1.0


def pause_container(name: str, attempts: int = PAUSE_ATTEMPTS) -> int:
    """``docker pause name``, again up to ``attempts`` times in all when runc answers "unable to
    freeze": on a cgroup v1 host the freezer gives up when a task does not stop in time (a busy
    node), and runc thaws the container again. Returns the attempts it took. Raises
    proc.CommandFailed for any other error, or the last one."""
    for attempt in range(1, attempts + 1):
        result = proc.run(["docker", "pause", name], timeout_seconds=60, check=False)
        if result.returncode == 0:
            return attempt
        if "unable to freeze" not in result.stderr or attempt == attempts:
            raise proc.CommandFailed(result.returncode, result.args, result.stdout, result.stderr)
        log.warning("docker pause %s: runc could not freeze it (attempt %d of %d); trying again", name, attempt,
                    attempts)
        threading.Event().wait(PAUSE_RETRY_SECONDS)  # a pause between attempts, not a wait for a state
    raise AssertionError("unreachable")


# kind asks the kernel for a free host port for each node's API server, closes it, and lets Docker
# bind it while the other nodes are created in parallel: another node, a just-deleted cluster's
# proxy or any process can take it in between. Docker says one of these; nothing else is retried.
TRANSIENT_CREATE_ERRORS = (
    re.compile(r"Bind for [0-9.:\[\]a-f]+:\d+ failed: port is already allocated"),
    re.compile(r"listen tcp[46]? [0-9.:\[\]a-f]+:\d+: bind: address already in use"),
)
CREATE_ATTEMPTS = 3


def transient_create_error(output: str) -> str | None:
    """The part of a failed ``kind create cluster``'s output that marks it as transient (a host
    port taken between kind's choice and Docker's bind), or None for any other failure."""
    for pattern in TRANSIENT_CREATE_ERRORS:
        found = pattern.search(output or "")
        if found:
            return found.group(0)
    return None


DEFAULT_SERVICE_SUBNET = "10.96.0.0/16"  # kind's serviceSubnet when the config sets none
GUARD_COMMENT = "kdrill: no untranslated ClusterIP traffic leaves the node"


class KindProvider:
    """One kind cluster, by name; ``config`` is the kind config used when creating it.

    ``platform``: a profile built into the cluster (a
    :class:`harness.platform.profile.PlatformProfile`: the cluster's name becomes ``<config's
    name>-<profile name>``, see that module). This class asks it for
    ``write_kind_config(base_config) -> Path``, ``install(cluster, provider) -> {step: seconds}``
    and ``problem(cluster, cluster_name) -> str | None``, and reads its ``name`` and ``root``.

    ``host_port_offset``: added to every ``hostPort`` the config maps, so that clusters made from
    one config run side by side (pytest-xdist workers, :mod:`harness.core.workers`); the
    NodePorts inside stay as written.

    Raises ProviderError for an unknown config or an offset that leaves the port range."""

    def __init__(self, config: str | Path = "ha", name: str | None = None, image: str | None = None,
                 platform=None, host_port_offset: int = 0):
        self.config = self.base_config = config_path(str(config))
        self.platform = platform
        if platform is not None:
            self.config = platform.write_kind_config(self.config)
        self.name = name or cluster_name_of(self.config)
        self.host_port_offset = host_port_offset
        if host_port_offset:
            self.config = write_offset_config(self.config, self.name, host_port_offset)
        self.image = image or node_image()
        self.kind = kind_binary()
        self.platform_install_seconds: dict[str, float] = {}
        self.create_phases: dict[str, float] = {}  # seconds of each step of the last create()
        self.create_retries = 0  # transient failures the last create() retried

    def _run(self, *args: str, timeout_seconds: float = 600, check: bool = True) -> subprocess.CompletedProcess:
        result = proc.run([self.kind, *args], timeout_seconds=timeout_seconds, check=False)
        if check and result.returncode != 0:
            raise ProviderError(f"kind {' '.join(args)} failed: {result.stderr.strip()[-2000:]}")
        return result

    def exists(self) -> bool:
        return self.name in self._run("get", "clusters").stdout.split()

    def nodes(self) -> list[str]:
        return sorted(self._run("get", "nodes", "--name", self.name).stdout.split())

    def create(self, wait_seconds: int = 300, kubeconfig: Path | None = None) -> float:
        """Create the cluster and wait until every node is Ready and every kube-system pod runs;
        returns the seconds it took. ``kubeconfig``: the file kind writes the cluster's context to
        (default: kind's, ``$KUBECONFIG`` or ``~/.kube/config``, made the current context).

        Raises ProviderError when the node image is missing (saying how it gets built) or kind
        fails.
        """
        inspect = proc.run(["docker", "image", "inspect", self.image], timeout_seconds=60, check=False)
        if inspect.returncode != 0:
            raise ProviderError(f"node image {self.image} is not in the local Docker engine (removed since "
                                "the build?): `kdrill run` and `python3 -m pytest` rebuild it themselves "
                                "(or `kdrill images build`)")
        # Another cluster (of the same config, or a profile's) publishing a host port this one maps:
        # kind would stop half-way through with "port is already allocated" and a node left behind.
        ps = proc.run(["docker", "ps", "--format", "{{.Names}} {{.Ports}}"], timeout_seconds=60, check=False)
        taken = conflicting_host_ports(yaml.safe_load(self.config.read_text()) or {}, ps.stdout or "")
        if taken:
            port, owner = next(iter(taken.items()))
            raise ProviderError(f"kind config {self.config}: hostPort {port} is already published by container "
                                f"{owner} ({len(taken)} port(s) taken: {', '.join(map(str, taken))}); delete that "
                                "cluster first, or make this one with other host ports: `kdrill cluster create "
                                "--host-port-offset 100` (with the same --config and --platform)")
        started = time.monotonic()
        log.info("creating kind cluster %s from %s", self.name, self.config)
        self.create_retries = self._create_retrying(wait_seconds, kubeconfig)
        self.create_phases = {"kind create cluster": time.monotonic() - started}
        # kind waits for the control plane only; drills need every node and system pod too.
        healthy = wait_healthy(self.cluster(), wait_seconds)
        if not healthy.ok:
            raise ProviderError(f"kind cluster {self.name} not healthy {wait_seconds} s after creation: "
                                f"{healthy.last_error or 'see kdrill cluster status'}")
        self.create_phases["every node Ready, every kube-system pod Running"] = \
            time.monotonic() - started - sum(self.create_phases.values())
        self.guard_service_subnet()
        self.create_phases["ClusterIP guard on every node"] = \
            time.monotonic() - started - sum(self.create_phases.values())
        if self.platform is not None:
            self.platform_install_seconds = self.platform.install(self.cluster(), self)
            log.info("platform profile %s installed: %s", self.platform.name, self.platform_install_seconds)
        return time.monotonic() - started

    def _create_retrying(self, wait_seconds: int, kubeconfig: Path | None) -> int:
        """``kind create cluster``, tried again (at most :data:`CREATE_ATTEMPTS` times in all) when
        it fails with a transient error (:func:`transient_create_error`), after deleting what it
        made; one line on stderr says so each time. Raises ProviderError with kind's output for any
        other failure, or when the last attempt failed too. Returns how many times it retried."""
        for attempt in range(1, CREATE_ATTEMPTS + 1):
            result = self._run("create", "cluster", "--name", self.name, "--config", str(self.config),
                               "--image", self.image, "--wait", f"{wait_seconds}s", "--retain",
                               *(["--kubeconfig", str(kubeconfig)] if kubeconfig else []),
                               timeout_seconds=wait_seconds + 600, check=False)
            if result.returncode == 0:
                return attempt - 1
            output = (result.stderr or "") + (result.stdout or "")
            why = transient_create_error(output)
            if why is None or attempt == CREATE_ATTEMPTS:
                tries = (f" (attempt {attempt} of {CREATE_ATTEMPTS}, each failing with {why!r}: a host port "
                         "held for good by another process? `ss -ltnp` names it)") if why else ""
                raise ProviderError(f"kind create cluster {self.name} failed{tries}: {output.strip()[-2000:]}")
            print(f"kdrill: kind create cluster {self.name} failed transiently ({why}); deleting what it made "
                  f"and trying again (attempt {attempt + 1} of {CREATE_ATTEMPTS})", file=sys.stderr, flush=True)
            self.remove_half_made()

    def remove_half_made(self) -> None:
        """Delete what a failed creation left (:meth:`delete`: kind's nodes, which ``--retain``
        keeps, and what kdrill ran beside them). Raises ProviderError when a container labelled with
        this cluster's name remains."""
        self.delete()
        label = f"label=io.x-k8s.kind.cluster={self.name}"
        if proc.run(["docker", "ps", "-aq", "--filter", label], timeout_seconds=60, check=False).stdout.split():
            raise ProviderError(f"kind cluster {self.name}: containers of the failed creation could not be removed "
                                f"(docker ps -a --filter {label})")

    def create_in_background(self) -> "BackgroundCreation":
        """Start the cluster's creation in a child process (so that work needing no cluster, e.g.
        the unit tests, runs meanwhile); the returned handle's ``result()`` waits for it."""
        return BackgroundCreation(self)

    def platform_problem(self) -> str | None:
        """For an existing cluster made with ``platform``: why it is not that profile's as the
        directory is now (its ``problem``), or None. None without a profile."""
        if self.platform is None:
            return None
        return self.platform.problem(self.cluster(), self.name)

    def load_image_archive(self, archive: Path) -> None:
        """``kind load image-archive`` of ``archive`` (``docker save`` or OCI layout) into every
        node, for at most 600 seconds. Raises ProviderError with kind's message."""
        self._run("load", "image-archive", str(archive), "--name", self.name, timeout_seconds=600)

    def service_subnet(self) -> str:
        """The cluster's Service CIDR: the kind config's ``networking.serviceSubnet``, or kind's
        default ``10.96.0.0/16``."""
        data = yaml.safe_load(self.config.read_text()) if self.config.exists() else {}
        return ((data or {}).get("networking") or {}).get("serviceSubnet") or DEFAULT_SERVICE_SUBNET

    def guard_service_subnet(self) -> list[str]:
        """On every node, reject traffic to the Service CIDR that kube-proxy did not translate
        (a ClusterIP not, or not yet, programmed on that node). Without it such a connection
        follows the node's default route off the cluster: on this machine something outside
        answered it (HTTP 404 over TLS), and an API server kept the connection alive, so an
        APIService stayed unavailable for minutes after its backend was back. kube-proxy's
        nftables mode rejects these by itself; its iptables mode, kind's default, does not.

        Translated traffic never matches: in the filter table the destination is already the
        pod's. Idempotent (``iptables -C`` first). Returns the nodes where a rule was added.
        Raises ProviderError when a node refuses it."""
        cluster = self.cluster()
        nodes = cluster.nodes_by_role["control-plane"] + cluster.nodes_by_role["worker"]
        # One exec per node, the nodes at once: part of every creation's time.
        with ThreadPoolExecutor(max_workers=max(len(nodes), 1)) as pool:
            chains = list(pool.map(lambda node: self._guard_node(cluster, node), nodes))
        return [f"{node} {chain}" for node, added in zip(nodes, chains) for chain in added]

    def _guard_node(self, cluster: Cluster, node: str) -> list[str]:
        """The guard's two rules on one node (see :meth:`guard_service_subnet`); returns the chains
        where one was added. Raises ProviderError (through node_exec) when the node refuses it."""
        script = []
        rule = shlex.join(["-d", self.service_subnet(), "-m", "comment", "--comment", GUARD_COMMENT, "-j", "REJECT"])
        for chain in ("OUTPUT", "FORWARD"):
            script.append(f"iptables -w 5 -C {chain} {rule} 2>/dev/null || "
                          f"{{ iptables -w 5 -I {chain} 1 {rule} && echo {chain}; }} || exit 1")
        return cluster.node_exec(node, ["sh", "-c", "\n".join(script)]).stdout.split()

    def delete(self) -> None:
        """Delete the cluster and the containers kdrill ran beside it (e.g. a drill's registry)."""
        self._run("delete", "cluster", "--name", self.name, timeout_seconds=300)
        beside = proc.run(["docker", "ps", "-aq", "--filter", f"label=kdrill.io/registry-for={self.name}"],
                          timeout_seconds=60, check=False).stdout.split()
        if beside:
            proc.run(["docker", "rm", "-f", *beside], timeout_seconds=120, check=False)

    def host_mounts(self) -> set[str]:
        """The host paths mounted into the cluster's node containers (kind's ``extraMounts``);
        empty when there is no node container."""
        sources: set[str] = set()
        for node in self._run("get", "nodes", "--name", self.name, check=False).stdout.split():
            inspect = proc.run(["docker", "inspect", "--format", "{{json .Mounts}}", node], timeout_seconds=30,
                               check=False)
            if inspect.returncode == 0:
                sources |= {m.get("Source") for m in json.loads(inspect.stdout or "[]") or []}
        return sources

    def export_logs(self, directory: Path) -> Path:
        """``kind export logs`` into ``directory`` (evidence of a failed run); returns it."""
        directory.mkdir(parents=True, exist_ok=True)
        self._run("export", "logs", str(directory), "--name", self.name, timeout_seconds=600, check=False)
        replace_links(directory)
        return directory

    def kubeconfig_path(self) -> Path:
        """Write this cluster's kubeconfig (API server on 127.0.0.1) and return its path."""
        path = kubeconfig_cache_path(self.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = self._run("get", "kubeconfig", "--name", self.name).stdout
        path.write_text(text)
        path.chmod(0o600)
        return path

    def cluster(self, kubeconfig: Path | None = None) -> Cluster:
        """The Cluster handle. ``kubeconfig``: an already written kubeconfig to use as is; kind
        reads a fresh one from a control-plane node, which fails while that node is paused
        (exactly when ``kdrill recover`` needs it)."""
        nodes = self.nodes()
        roles: dict[str, list[str]] = {"control-plane": [], "worker": [], "load-balancer": []}
        for node in nodes:
            # kind names nodes <cluster>-control-plane[N], <cluster>-worker[N] and
            # <cluster>-external-load-balancer (providers/common/namer.go): the role is what
            # follows the cluster's name, which may hold "control-plane" itself (a platform
            # profile of that name made every worker a control-plane node here).
            role = node.removeprefix(f"{self.name}-")
            if role == "external-load-balancer":
                roles["load-balancer"].append(node)
            elif role.startswith("control-plane"):
                roles["control-plane"].append(node)
            else:
                roles["worker"].append(node)
        if kubeconfig is None or not Path(kubeconfig).exists():
            kubeconfig = self.kubeconfig_path()
        return Cluster(name=self.name, provider="kind", kubeconfig=Path(kubeconfig),
                       context=f"kind-{self.name}", node_access=True, nodes_by_role=roles,
                       host_ports=self.host_ports())

    def host_ports(self) -> dict[int, int]:
        """{NodePort: 127.0.0.1 host port} as Docker maps them for this cluster's node containers
        (a reused cluster may have been made with other ports than the config says now); the
        config's (:func:`host_ports`) only when Docker cannot be asked; empty without either."""
        try:
            listed = proc.run(["docker", "ps", "--filter", f"label=io.x-k8s.kind.cluster={self.name}",
                               "--format", "{{.Ports}}"], timeout_seconds=30, check=False)
            if listed.returncode == 0 and listed.stdout.strip():
                return docker_node_ports(listed.stdout)
        except (OSError, subprocess.TimeoutExpired):  # no Docker to ask: the config says it
            pass
        config = getattr(self, "config", None)
        return host_ports(yaml.safe_load(config.read_text()) or {}) if config and config.exists() else {}


class BackgroundCreation:
    """``kdrill cluster create`` for ``provider`` (its config, name and platform profile) in a
    child process, output to a log file: a process, not a thread, so that nothing this process
    does meanwhile (a unit test replacing ``subprocess.run`` with a fake, say) reaches the creation.
    ``result()`` waits for it and returns the seconds it took, or raises ProviderError with the
    end of its output; a second call gives the same. ``output()`` is everything it printed."""

    def __init__(self, provider: KindProvider, command: list[str] | None = None):
        """``command``: what to run instead of ``kdrill cluster create`` (the unit tests' stand-in)."""
        self.provider = provider
        fd, name = tempfile.mkstemp(prefix=f"kdrill-create-{provider.name}-", suffix=".log")
        self.log_path = Path(name)
        cmd = command or [sys.executable, "-m", "harness.cli", "cluster", "create",
                          "--config", str(provider.base_config), "--name", provider.name,
                          "--host-port-offset", str(provider.host_port_offset)]
        if command is None and provider.platform is not None:
            cmd += ["--platform", str(provider.platform.root)]
        self._started = time.monotonic()
        with os.fdopen(fd, "w") as out:  # the child keeps its own copy of the descriptor
            self._child = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._seconds: float | None = None
        self._ended = threading.Event()
        # Only waits on the child, to note when it ended (the creation's own time, not when asked).
        threading.Thread(target=self._note_end, name=f"wait for {provider.name}", daemon=True).start()

    def _note_end(self) -> None:
        self._child.wait()
        self._seconds = time.monotonic() - self._started
        self._ended.set()

    @property
    def done(self) -> bool:
        return self._ended.is_set()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, wait_seconds: float = 60) -> None:
        """End a creation still running (SIGTERM, then SIGKILL after ``wait_seconds``); what kind
        made so far is the caller's to delete."""
        if self._ended.is_set():
            return
        self._child.terminate()
        if not self._ended.wait(wait_seconds):
            self._child.kill()
            self._ended.wait(wait_seconds)

    def close(self) -> None:
        """Remove the log file (its output is no longer needed)."""
        self.log_path.unlink(missing_ok=True)

    def result(self) -> float:
        # The child bounds itself (kind's wait plus 600 s, then the health wait), so no timeout here.
        self._ended.wait()
        code = self._child.returncode
        if code != 0:
            tail = "\n".join(self.output().splitlines()[-15:])
            raise ProviderError(f"kdrill cluster create {self.provider.name} (in the background) exited {code}; "
                                f"its output ({self.log_path}) ends:\n{tail}")
        return self._seconds


def replace_links(directory: Path) -> list[Path]:
    """Replace every symbolic link under ``directory`` with a small text file saying where it
    pointed; returns the paths replaced. A run holding a link is not sealed (its target's content
    would not be; harness/evidence/manifest.py), and a node's links point at the node's paths, not ours."""
    replaced = []
    for path in sorted(Path(directory).rglob("*")):
        if path.is_symlink():
            target = os.readlink(path)
            path.unlink()
            path.write_text(f"a symbolic link to {target} on the node (replaced by kdrill: links are not sealed)\n")
            replaced.append(path)
    return replaced
