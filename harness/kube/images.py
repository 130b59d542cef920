"""Build every image a kind cluster needs, offline, from Go modules and Debian packages.

``kdrill images build`` runs the steps below. Each step's output is cached under
``$KDRILL_CACHE`` (default ``~/.cache/kdrill``), outside the checkout, keyed by the SHA-256 of
everything that goes into it (its scripts, files, pinned versions and the keys of the steps it
builds on); a Docker image carries that key in the label ``org.kdrill.content-key``. A step
whose key is already there is not run again, so a second build with nothing changed takes
seconds.

Steps (``clusters/images/``):
  go-kubernetes   kube-apiserver, -controller-manager, -scheduler, -proxy, kubelet, kubeadm, kubectl
  go-tools        kind, etcd, etcdctl, CoreDNS, crictl, local-path-provisioner, pause, netd
  go-etcdutl      etcdutl (not in the etcd image): the etcd-restore drill copies it onto nodes
  go-gatekeeper   OPA Gatekeeper's manager and the manifest its module publishes (only for the
                  example profile clusters/platforms/gatekeeper: ``kdrill images build gatekeeper``)
  gatekeeper      its image, FROM scratch
  rootfs-*        debootstrap root filesystems (node, net, toolbox, haproxy)
  images          the component images under the exact tags kubeadm and the manifests use
  preload         containerd's ``k8s.io`` namespace holding every component image
  node            the kind node image

``ensure_built()`` is what ``kdrill run`` and the pytest plugin call before a kind cluster is
created: nothing when every step is built (a fraction of a second), otherwise the missing steps
with progress lines and an estimate of the time left.

A step's machinery (its content key, its place in the cache, the command runner) is
harness.kube.build_steps; the estimates and progress lines harness.kube.build_progress; what the
machine must have to build, harness.kube.build_tools.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import inspect
import json
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness.core import proc, resources
from harness.kube.build_progress import Progress, expected_seconds, format_seconds, lane_of, seconds_left
from harness.kube.build_steps import DOCKER_QUERY_SECONDS, LABEL, BuildError, Step, cache_dir, recorded_seconds, run
from harness.kube.build_tools import missing_build_tools
from harness.spec.params import KUBERNETES_RELEASE

log = logging.getLogger("kdrill.images")

IMAGES_DIR = resources.clusters_dir() / "images"

# Debian packages per root filesystem. The node's list is what a kind node runs on.
ROOTFS_PACKAGES = {
    "node": "systemd,systemd-sysv,dbus,containerd,runc,containernetworking-plugins,iptables,nftables,"
    "conntrack,iproute2,ethtool,util-linux,mount,kmod,ca-certificates,bash,procps,socat,"
    "libseccomp2,iputils-ping,curl,less",
    # kube-proxy, netd and the local-path helper: packet filtering tools and a shell.
    "net": "iptables,nftables,conntrack,ipset,iproute2",
    # The drills' workloads and probes (python3), DNS load (dnsperf), registry (docker-registry).
    "toolbox": "python3,dnsperf,dnsutils,curl,docker-registry,ca-certificates,iproute2,procps",
    "haproxy": "haproxy,procps",
}


# What a kind cluster needs: the node image (with every component preloaded), kind's HA load
# balancer and the drills' toolbox; everything else is built on the way.
TARGETS = ["node", "haproxy", "toolbox", "go-etcdutl"]
# Built only when asked for (`kdrill images build gatekeeper`): a real policy engine for the
# example profile clusters/platforms/gatekeeper, kept out of a cold machine's default build.
IMAGES_ON_REQUEST = ["gatekeeper", "observability"]
# Other Kubernetes releases, for upgrade rehearsals (`kdrill images build kubernetes-v1.34.4`): each
# is a directory under clusters/images/releases/ with its versions.env and wrapper modules.
RELEASES_DIR = IMAGES_DIR / "releases"


def releases() -> list[str]:
    """The versions buildable on request, e.g. ["v1.34.4"], oldest first: the directories named
    v1.MINOR.PATCH holding a versions.env (any other name is not a release)."""
    found = [p.name for p in RELEASES_DIR.glob("v*")
             if KUBERNETES_RELEASE.fullmatch(p.name) and (p / "versions.env").is_file()]
    return sorted(found, key=lambda v: tuple(int(x) for x in v.lstrip("v").split(".")))


def release_target(version: str) -> str:
    """The build target (and node image step) of a release: ``kubernetes-v1.34.4``."""
    return f"kubernetes-{version}"


ON_REQUEST = IMAGES_ON_REQUEST + [release_target(v) for v in releases()]
GATEKEEPER_VERSION = "v3.23.1"
# The monitoring stack of clusters/platforms/observability (`kdrill images build observability`),
# from their Go modules: the module versions, not the products' release numbers.
OBSERVABILITY_VERSIONS = {"prometheus": "v0.316.0", "alertmanager": "v0.35.0", "kube-state-metrics": "v2.20.0"}


def read_versions(path: Path = IMAGES_DIR / "versions.env") -> dict[str, str]:
    versions = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            versions[key] = value
    return versions


def release_versions(version: str) -> dict[str, str]:
    """The versions.env of release ``version`` (one of releases()). Raises BuildError when its
    KUBERNETES_VERSION is not ``version``: its images would take another release's tags."""
    path = RELEASES_DIR / version / "versions.env"
    found = read_versions(path)
    if found.get("KUBERNETES_VERSION") != version:
        raise BuildError(f"{path}: KUBERNETES_VERSION: expected {version} (the directory's name), "
                         f"got {found.get('KUBERNETES_VERSION') or 'nothing'}")
    return found


# --- the steps --------------------------------------------------------------------------------

def _go_kubernetes(step: Step) -> None:
    run(["bash", str(IMAGES_DIR / "go" / "build-kubernetes.sh"), str(step.out)], step.log_file)


def _go_tools(step: Step) -> None:
    run(["bash", str(IMAGES_DIR / "go" / "build-tools.sh"), str(step.out)], step.log_file)


def _go_etcdutl(step: Step) -> None:
    run(["bash", str(IMAGES_DIR / "go" / "build-etcdutl.sh"), str(step.out)], step.log_file)


def _go_gatekeeper(step: Step) -> None:
    run(["bash", str(IMAGES_DIR / "go" / "build-gatekeeper.sh"), str(step.out), GATEKEEPER_VERSION], step.log_file)


def _go_observability(step: Step) -> None:
    v = OBSERVABILITY_VERSIONS
    run(["bash", str(IMAGES_DIR / "go" / "build-observability.sh"), str(step.out), v["prometheus"],
         v["alertmanager"], v["kube-state-metrics"]], step.log_file)


def _go_release(version: str) -> Callable[[Step], None]:
    def build(step: Step) -> None:
        run(["bash", str(IMAGES_DIR / "go" / "build-release.sh"), str(step.out), str(RELEASES_DIR / version)],
            step.log_file)
        # The release's components and node take the version-free tools from the default build.
        for tool in ("pause", "netd", "local-path-provisioner", "crictl"):
            shutil.copy(step.deps[0].out / tool, step.out / tool)
    return build


def _rootfs(flavour: str) -> Callable[[Step], None]:
    def build(step: Step) -> None:
        run(["bash", str(IMAGES_DIR / "rootfs.sh"), str(step.out / "rootfs.tar"),
             ROOTFS_PACKAGES[flavour]], step.log_file)
    return build


def _docker_build(step: Step, dockerfile: str, context: Path, image: str | None = None) -> None:
    """``docker build`` from a Dockerfile text, labelled with the step's key; never pulls
    (every FROM is a local image or scratch)."""
    (context / "Dockerfile").write_text(dockerfile)
    cmd = ["docker", "build", "--pull=false", "--label", f"{LABEL}={step.key}", "-t", image or step.image]
    run(cmd + [str(context)], step.log_file, extra_env={"DOCKER_BUILDKIT": "0"})


def _import_rootfs(step: Step, tar: Path, changes: list[str] = ()) -> None:
    cmd = ["docker", "import", "--change", f"LABEL {LABEL}={step.key}"]
    for change in changes:
        cmd += ["--change", change]
    run(cmd + [str(tar), step.image], step.log_file)


@dataclass
class Build:
    """The whole build graph, with the tags every manifest and kubeadm refers to."""

    versions: dict[str, str] = field(default_factory=read_versions)
    # Another Kubernetes release (one of releases()): its own binaries, component images, preload
    # and node image; every other step is the default build's, with the same keys.
    release: str | None = None

    def __post_init__(self) -> None:
        if self.release is not None:
            if self.release not in releases():
                raise BuildError(f"Kubernetes {self.release}: expected one of {', '.join(releases()) or 'none'} "
                                 f"(directories under {RELEASES_DIR})")
            self.versions = {**self.versions, **release_versions(self.release)}
        v = self.versions
        self.k8s_tag = v["KUBERNETES_VERSION"].replace("+", "_")
        self.tags = {
            "kube-apiserver": f"registry.k8s.io/kube-apiserver:{self.k8s_tag}",
            "kube-controller-manager": f"registry.k8s.io/kube-controller-manager:{self.k8s_tag}",
            "kube-scheduler": f"registry.k8s.io/kube-scheduler:{self.k8s_tag}",
            "kube-proxy": f"registry.k8s.io/kube-proxy:{self.k8s_tag}",
            "etcd": f"registry.k8s.io/etcd:{v['ETCD_IMAGE_TAG']}",
            "coredns": f"registry.k8s.io/coredns/coredns:{v['COREDNS_VERSION']}",
            "pause": f"registry.k8s.io/pause:{v['PAUSE_IMAGE_TAG']}",
            "netd": "docker.io/kdrill/netd:v0.1.0",
            "local-path-provisioner": f"docker.io/kdrill/local-path-provisioner:{v['LOCAL_PATH_PROVISIONER_VERSION']}",
            "local-path-helper": "docker.io/kdrill/local-path-helper:bookworm",
            "toolbox": "docker.io/kdrill/toolbox:v0.1.0",
        }
        self.node_image = f"kdrill/node:{v['KUBERNETES_VERSION']}"
        # kind v0.31.0 runs its HA load balancer from exactly this tag.
        self.haproxy_image = "docker.io/kindest/haproxy:v20251211-v0.29.0-alpha-100-g82a92c5d"
        # Not in self.tags (those are preloaded into every node): a profile's images/ carries it.
        self.gatekeeper_image = f"docker.io/kdrill/gatekeeper:{GATEKEEPER_VERSION}"
        self.observability_image = f"docker.io/kdrill/observability:{OBSERVABILITY_VERSIONS['prometheus']}"
        self._steps = self._graph()

    # The graph: leaves first. Each lambda closes over self for tags and dependencies.
    def _graph(self) -> dict[str, Step]:
        d = IMAGES_DIR
        versions = [d / "versions.env"]
        s: dict[str, Step] = {}
        s["go-kubernetes"] = Step("go-kubernetes",
                                  versions + [d / "go" / "build-kubernetes.sh", d / "go" / "kubernetes"], _go_kubernetes)
        s["go-tools"] = Step("go-tools", versions + [d / "go" / "build-tools.sh", d / "go" / "etcd", d / "src"],
                             _go_tools)
        s["go-etcdutl"] = Step("go-etcdutl", [d / "go" / "build-etcdutl.sh", d / "go" / "etcdutl"], _go_etcdutl)
        for flavour, packages in ROOTFS_PACKAGES.items():
            s[f"rootfs-{flavour}"] = Step(f"rootfs-{flavour}", versions + [d / "rootfs.sh"], _rootfs(flavour),
                                          extra=[packages])
        s["base-net"] = Step("base-net", [], lambda st: _import_rootfs(st, s["rootfs-net"].out / "rootfs.tar"),
                             deps=[s["rootfs-net"]], image="kdrill/base-net:bookworm")
        s["toolbox"] = Step("toolbox", [d / "toolbox"], self._toolbox, deps=[s["rootfs-toolbox"]],
                            image=self.tags["toolbox"])
        # The component recipe lives in _components itself: its source is part of the key.
        s["components"] = Step("components", [], self._components,
                               deps=[s["go-kubernetes"], s["go-tools"], s["base-net"]],
                               extra=sorted(self.tags.values()) + [inspect.getsource(Build._components)],
                               image=self.tags["kube-apiserver"])
        s["preload"] = Step("preload", [d / "preload.sh"], self._preload, deps=[s["components"], s["toolbox"]],
                            extra=sorted(self.tags.values()))
        s["node-base"] = Step("node-base", [d / "node"], self._node_base,
                              deps=[s["rootfs-node"], s["go-tools"]], image="kdrill/node-base:bookworm")
        s["node"] = Step("node", [d / "manifests"], self._node, extra=[inspect.getsource(Build._node)],
                         deps=[s["node-base"], s["go-kubernetes"], s["preload"]], image=self.node_image)
        s["haproxy"] = Step("haproxy", [d / "haproxy"], self._haproxy, deps=[s["rootfs-haproxy"]],
                            image=self.haproxy_image)
        s["go-gatekeeper"] = Step("go-gatekeeper", [d / "go" / "build-gatekeeper.sh"], _go_gatekeeper,
                                  extra=[GATEKEEPER_VERSION])
        s["gatekeeper"] = Step("gatekeeper", [], self._gatekeeper, deps=[s["go-gatekeeper"]],
                               extra=[inspect.getsource(Build._gatekeeper)], image=self.gatekeeper_image)
        s["go-observability"] = Step("go-observability", [d / "go" / "build-observability.sh"], _go_observability,
                                     extra=[f"{k}={v}" for k, v in sorted(OBSERVABILITY_VERSIONS.items())])
        s["observability"] = Step("observability", [], self._observability, deps=[s["go-observability"]],
                                  extra=[inspect.getsource(Build._observability)], image=self.observability_image)
        if self.release:
            s.update(self._release_graph(s))
        return s

    def _release_graph(self, s: dict[str, Step]) -> dict[str, Step]:
        """The release's own steps, under the names the default recipes look up ("go-kubernetes",
        "go-tools", "components", "preload", "node"), so _components and _node build it unchanged."""
        v, d = self.release, IMAGES_DIR
        scripts = [d / "go" / "build-release.sh", d / "go" / "build-kubernetes.sh"]
        go = Step(f"go-kubernetes-{v}", [RELEASES_DIR / v, *scripts], _go_release(v), deps=[s["go-tools"]])
        components = Step(f"components-{v}", [], self._components, deps=[go, s["base-net"]],
                          extra=sorted(self.tags.values()) + [inspect.getsource(Build._components)],
                          image=self.tags["kube-apiserver"])
        preload = Step(f"preload-{v}", [d / "preload.sh"], self._preload, deps=[components, s["toolbox"]],
                       extra=sorted(self.tags.values()))
        node = Step(release_target(v), [d / "manifests"], self._node, extra=[inspect.getsource(Build._node)],
                    deps=[s["node-base"], go, preload], image=self.node_image)
        return {"go-kubernetes": go, "go-tools": go, "components": components, "preload": preload, "node": node,
                node.name: node}

    def step(self, name: str) -> Step:
        return self._steps[name]

    # --- image builders ---

    def _toolbox(self, step: Step) -> None:
        self._image_from_rootfs(step, "toolbox")

    def _image_from_rootfs(self, step: Step, flavour: str) -> None:
        """``docker build`` of clusters/images/<flavour>/Dockerfile.in over rootfs-<flavour>."""
        with tempfile.TemporaryDirectory(prefix=f"kdrill-{flavour}-") as ctx:
            shutil.copytree(IMAGES_DIR / flavour, ctx, dirs_exist_ok=True)
            shutil.copy(self.step(f"rootfs-{flavour}").out / "rootfs.tar", Path(ctx) / "rootfs.tar")
            _docker_build(step, (IMAGES_DIR / flavour / "Dockerfile.in").read_text(), Path(ctx))

    def _components(self, step: Step) -> None:
        """One small image per component, FROM scratch unless it needs packet filtering tools."""
        kube = self.step("go-kubernetes").out
        tools = self.step("go-tools").out
        plain = {  # image -> (binary dir, binary, entrypoint or None when kubeadm gives the command)
            "kube-apiserver": (kube, ["kube-apiserver"], None),
            "kube-controller-manager": (kube, ["kube-controller-manager"], None),
            "kube-scheduler": (kube, ["kube-scheduler"], None),
            "etcd": (tools, ["etcd", "etcdctl"], None),
            "coredns": (tools, ["coredns"], "/usr/local/bin/coredns"),
            "pause": (tools, ["pause"], "/usr/local/bin/pause"),
            "local-path-provisioner": (tools, ["local-path-provisioner"], "/usr/local/bin/local-path-provisioner"),
        }
        on_net = {"kube-proxy": (kube, ["kube-proxy"], None), "netd": (tools, ["netd"], "/usr/local/bin/netd")}
        # kube-apiserver goes last: its label marks the whole group as built.
        ordered = sorted({**plain, **on_net}.items(), key=lambda item: item[0] == "kube-apiserver")
        for name, (bindir, binaries, entrypoint) in ordered:
            base = "kdrill/base-net:bookworm" if name in on_net else "scratch"
            lines = [f"FROM {base}"] + [f"COPY {b} /usr/local/bin/{b}" for b in binaries]
            lines.append("ENV PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
            if entrypoint:
                lines.append(f'ENTRYPOINT ["{entrypoint}"]')
            with tempfile.TemporaryDirectory(prefix=f"kdrill-{name}-") as ctx:
                for b in binaries:
                    shutil.copy(bindir / b, Path(ctx) / b)
                # kube-apiserver is the step's own image: built here, it marks the group as done.
                _docker_build(step, "\n".join(lines) + "\n", Path(ctx), image=self.tags[name])
        # The local-path helper needs only sh, mkdir and rm: the net base has them.
        run(["docker", "tag", "kdrill/base-net:bookworm", self.tags["local-path-helper"]], step.log_file)

    def _preload(self, step: Step) -> None:
        images = sorted(self.tags.values())
        run(["bash", str(IMAGES_DIR / "preload.sh"), str(step.out)] + images, step.log_file)

    def _node_base(self, step: Step) -> None:
        rootfs = self.step("rootfs-node").out / "rootfs.tar"
        tools = self.step("go-tools").out
        run(["bash", str(IMAGES_DIR / "node" / "build-base.sh"), str(rootfs), str(tools / "crictl"),
             step.image, f"{LABEL}={step.key}"], step.log_file)

    def _node(self, step: Step) -> None:
        kube = self.step("go-kubernetes").out
        preload = self.step("preload").out
        with tempfile.TemporaryDirectory(prefix="kdrill-node-", dir="/var/tmp") as tmp:
            ctx = Path(tmp)
            for b in ("kubeadm", "kubelet", "kubectl"):
                shutil.copy(kube / b, ctx / b)
            manifests = ctx / "manifests"
            manifests.mkdir()
            for src in sorted((IMAGES_DIR / "manifests").glob("*.yaml")):
                text = src.read_text()
                for name, tag in self.tags.items():
                    text = text.replace("@IMAGE_" + name.upper().replace("-", "_") + "@", tag)
                (manifests / src.name).write_text(text)
            (ctx / "version").write_text(self.versions["KUBERNETES_VERSION"] + "\n")
            shutil.copy(preload / "containerd.tar", ctx / "containerd.tar")
            dockerfile = "\n".join([
                "FROM kdrill/node-base:bookworm",
                "COPY kubeadm kubelet kubectl /usr/bin/",
                "COPY version /kind/version",
                "COPY manifests/ /kind/manifests/",
                # containerd's state with every image imported (not unpacked: it unpacks on first use).
                "ADD containerd.tar /var/lib/containerd/",
                "STOPSIGNAL SIGRTMIN+3",
                "ENV container=docker",
                'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]',
            ]) + "\n"
            _docker_build(step, dockerfile, ctx)

    def _haproxy(self, step: Step) -> None:
        self._image_from_rootfs(step, "haproxy")

    def _gatekeeper(self, step: Step) -> None:
        """The manager alone, as upstream's image has it (/manager), FROM scratch: the published
        manifest runs it as a non-root user with a read-only root filesystem and needs nothing else."""
        with tempfile.TemporaryDirectory(prefix="kdrill-gatekeeper-") as ctx:
            shutil.copy(self.step("go-gatekeeper").out / "manager", Path(ctx) / "manager")
            _docker_build(step, 'FROM scratch\nCOPY manager /manager\nUSER 65532:65532\nENTRYPOINT ["/manager"]\n',
                          Path(ctx))

    def _observability(self, step: Step) -> None:
        """Prometheus, Alertmanager and kube-state-metrics in one image FROM scratch (all static);
        each container of the profile names its binary as its command."""
        binaries = ["prometheus", "alertmanager", "kube-state-metrics"]
        with tempfile.TemporaryDirectory(prefix="kdrill-observability-") as ctx:
            for b in binaries:
                shutil.copy(self.step("go-observability").out / b, Path(ctx) / b)
            lines = ["FROM scratch", f"COPY {' '.join(binaries)} /bin/", "USER 65534:65534"]
            _docker_build(step, "\n".join(lines) + "\n", Path(ctx))

    # --- driving ---

    def order(self, targets: list[str] | None = None) -> list[Step]:
        """``targets`` (default: TARGETS) and every step they build on, dependencies first."""
        order: list[Step] = []

        def visit(st: Step) -> None:
            for dep in st.deps:
                visit(dep)
            if st not in order:
                order.append(st)

        for t in targets or TARGETS:
            visit(self.step(t))
        return order

    def missing(self, targets: list[str] | None = None) -> list[str]:
        """Names of the steps ``targets`` need that are not built (or out of date), in build order."""
        return [st.name for st in self.order(targets) if not st.done()]

    def build_all(self, targets: list[str] | None = None, progress: Progress | None = None) -> dict[str, float]:
        """Build ``targets`` (default: node, haproxy, toolbox) and what they need.

        Go builds (CPU-bound) and debootstraps (network- and disk-bound) run side by side.
        One build at a time per cache: a second one waits for the first (a lock file).
        Returns seconds spent per step (0.0 for cached ones). Raises BuildError.
        """
        order = self.order(targets)
        spent: dict[str, float] = {}
        cache_dir().mkdir(parents=True, exist_ok=True)
        with (cache_dir() / "build.lock").open("w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                (progress.say if progress else log.info)(
                    f"another kdrill image build is running (lock {cache_dir() / 'build.lock'}); waiting for it")
                fcntl.flock(lock, fcntl.LOCK_EX)
            # Three lanes: the two Go builds (compile is parallel, linking is not, so two builds
            # keep both cores busier) and the debootstraps (network and disk).
            lanes: dict[str, list[Step]] = {}
            for st in order:
                if lane_of(st.name):
                    lanes.setdefault(lane_of(st.name), []).append(st)
            with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
                futures = [pool.submit(lambda lane: [(st.name, st.ensure(progress)) for st in lane], lane)
                           for lane in lanes.values()]
                for f in futures:
                    spent.update(dict(f.result()))
            for st in order:
                if st.name not in spent:
                    spent[st.name] = st.ensure(progress)
        return spent

    def status(self) -> list[dict]:
        """Each step once (a release's steps stand under two names), as step, key, built, image."""
        steps = list({id(st): st for st in self._steps.values()}.values())
        return [{"step": st.name, "key": st.key, "built": st.done(), "image": st.image} for st in steps]


def ensure_built(progress: Callable[[str], None] = print, targets: list[str] | None = None) -> dict[str, float]:
    """Build whatever a kind cluster needs that is not built yet; what ``kdrill run`` and the
    pytest plugin do before creating a kind cluster (Docker must be up: see
    harness.cli.doctor.docker_problem).

    ``progress`` receives one line when everything is built already (a fraction of a second),
    otherwise a line per step started and built, with the steps left and the estimated time
    left, and a heartbeat line every build_progress.HEARTBEAT_SECONDS. Returns seconds spent per
    step built (empty when nothing was missing). Raises BuildError naming the failed step and its
    log file, or, before building anything, what is missing to build (Go, debootstrap) and how to
    get it.
    """
    build = build_for(targets)
    todo = build.missing(targets)
    if not todo:
        progress(f"kdrill: {', '.join(targets)} built and current" if targets and set(targets) <= set(ON_REQUEST)
                 else f"kdrill: kind images built and current (node image {build.node_image})")
        return {}
    lacking = missing_build_tools(go=any((lane_of(n) or "").startswith("go-") for n in todo),
                                  debootstrap=any(lane_of(n) == "rootfs" for n in todo))
    if lacking:
        raise BuildError(f"the kind images are not built ({', '.join(todo)}) and cannot be built here: "
                         f"missing {'; '.join(lacking)}")
    recorded = recorded_seconds()
    expected = expected_seconds(todo, recorded)
    source = "the last build's step times" if any(n in recorded for n in todo) else "cold-build figures"
    progress(f"kdrill: building {len(todo)} kind image step(s) not built yet: {', '.join(todo)}; "
             f"about {format_seconds(seconds_left(todo, expected))} (estimate from {source}); "
             f"cached in {cache_dir()} afterwards")
    started = time.monotonic()
    with Progress(todo, expected, progress) as lines:
        spent = build.build_all(targets, progress=lines)
    progress(f"kdrill: kind images built in {format_seconds(time.monotonic() - started)}")
    return {name: seconds for name, seconds in spent.items() if seconds}


def build_for(targets: list[str] | None) -> Build:
    """The build graph holding ``targets``: a release's graph for ``kubernetes-vX.Y.Z`` (one release
    at a time), else the default one. Raises BuildError for two releases at once."""
    asked = [t.removeprefix("kubernetes-") for t in targets or [] if t.startswith("kubernetes-v")]
    versions = list(dict.fromkeys(asked))  # the same one named twice is one
    if len(versions) > 1:
        raise BuildError(f"one Kubernetes release per build: expected one of {', '.join(versions)}, got all of them")
    return Build(release=versions[0]) if versions else Build()


def save_image(image: str, archive: Path) -> Path:
    """``docker save`` of ``image`` to ``archive`` (a profile's images/), through a hidden partial
    file a profile ignores, so a crash never leaves half an archive. Returns ``archive``."""
    archive.parent.mkdir(exist_ok=True)
    partial = archive.with_name(f".{archive.name}.partial")
    proc.run(["docker", "save", "-o", str(partial), image], timeout_seconds=300)
    partial.replace(archive)
    return archive


def image_sizes(tags: list[str]) -> dict[str, int]:
    """Bytes per local image tag (as ``docker image inspect`` reports them)."""
    sizes = {}
    for tag in tags:
        out = proc.run(["docker", "image", "inspect", "--format", "{{.Size}}", tag],
                       timeout_seconds=DOCKER_QUERY_SECONDS, check=False)
        if out.returncode == 0:
            sizes[tag] = int(out.stdout.strip())
    return sizes


if __name__ == "__main__":  # pragma: no cover
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(json.dumps(Build().build_all(), indent=2))
