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
  rootfs-*        debootstrap root filesystems (node, net, toolbox, haproxy)
  images          the component images under the exact tags kubeadm and the manifests use
  preload         containerd's ``k8s.io`` namespace holding every component image
  node            the kind node image
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import inspect
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

log = logging.getLogger("kdrill.images")

REPO_ROOT = Path(__file__).resolve().parent.parent
IMAGES_DIR = REPO_ROOT / "clusters" / "images"
LABEL = "org.kdrill.content-key"

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


class BuildError(RuntimeError):
    """A build step failed; the message names the step and where its log is."""


def cache_dir() -> Path:
    return Path(os.environ.get("KDRILL_CACHE", Path.home() / ".cache" / "kdrill"))


def read_versions() -> dict[str, str]:
    versions = {}
    for line in (IMAGES_DIR / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            versions[key] = value
    return versions


def _files_under(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file())


def content_key(name: str, inputs: list[Path], extra: list[str]) -> str:
    """SHA-256 over a step's name, input files (path and bytes) and extra strings; 16 hex digits."""
    digest = hashlib.sha256(name.encode())
    for root in inputs:
        for f in _files_under(root):
            digest.update(str(f.relative_to(REPO_ROOT)).encode() + b"\0")
            digest.update(f.read_bytes() + b"\0")
    for item in extra:
        digest.update(item.encode() + b"\0")
    return digest.hexdigest()[:16]


def run(cmd: list[str], log_file: Path, **kwargs) -> None:
    """Run a command with its output appended to ``log_file``; raise BuildError on failure."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        result = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, **kwargs)
    if result.returncode != 0:
        tail = log_file.read_text(errors="replace").splitlines()[-25:]
        raise BuildError(f"{' '.join(cmd[:3])} failed (exit {result.returncode}); log: {log_file}\n" + "\n".join(tail))


def docker_image_key(tag: str) -> str | None:
    result = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{ index .Config.Labels \"" + LABEL + "\" }}", tag],
        capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else None


@dataclass
class Step:
    name: str
    inputs: list[Path]
    build: Callable[["Step"], None]
    deps: list["Step"] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    image: str | None = None  # set for steps whose output is a Docker image

    @property
    def key(self) -> str:
        return content_key(self.name, self.inputs, self.extra + [d.key for d in self.deps])

    @property
    def out(self) -> Path:
        return cache_dir() / "steps" / f"{self.name}-{self.key}"

    @property
    def log_file(self) -> Path:
        return cache_dir() / "logs" / f"{self.name}-{self.key}.log"

    def done(self) -> bool:
        if self.image:
            return docker_image_key(self.image) == self.key
        return (self.out / ".complete").exists()

    def ensure(self) -> float:
        """Build unless cached; returns the seconds spent (0.0 when cached)."""
        if self.done():
            log.info("%-16s cached (%s)", self.name, self.key)
            return 0.0
        log.info("%-16s building (%s), log: %s", self.name, self.key, self.log_file)
        started = time.monotonic()
        if not self.image:
            shutil.rmtree(self.out, ignore_errors=True)
            self.out.mkdir(parents=True)
        self.build(self)
        if not self.image:
            (self.out / ".complete").write_text(self.key)
        spent = time.monotonic() - started
        log.info("%-16s built in %.0f s", self.name, spent)
        return spent


# --- the steps --------------------------------------------------------------------------------

def _go_kubernetes(step: Step) -> None:
    run(["bash", str(IMAGES_DIR / "go" / "build-kubernetes.sh"), str(step.out)], step.log_file)


def _go_tools(step: Step) -> None:
    run(["bash", str(IMAGES_DIR / "go" / "build-tools.sh"), str(step.out)], step.log_file)


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
    run(cmd + [str(context)], step.log_file, env={**os.environ, "DOCKER_BUILDKIT": "0"})


def _import_rootfs(step: Step, tar: Path, changes: list[str] = ()) -> None:
    cmd = ["docker", "import", "--change", f"LABEL {LABEL}={step.key}"]
    for change in changes:
        cmd += ["--change", change]
    run(cmd + [str(tar), step.image], step.log_file)


@dataclass
class Build:
    """The whole build graph, with the tags every manifest and kubeadm refers to."""

    versions: dict[str, str] = field(default_factory=read_versions)

    def __post_init__(self) -> None:
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
        self._steps = self._graph()

    # The graph: leaves first. Each lambda closes over self for tags and dependencies.
    def _graph(self) -> dict[str, Step]:
        d = IMAGES_DIR
        versions = [d / "versions.env"]
        s: dict[str, Step] = {}
        s["go-kubernetes"] = Step("go-kubernetes", versions + [d / "go" / "build-kubernetes.sh", d / "go" / "kubernetes"],
                                  _go_kubernetes)
        s["go-tools"] = Step("go-tools", versions + [d / "go" / "build-tools.sh", d / "go" / "etcd", d / "src"], _go_tools)
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
        return s

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

    # --- driving ---

    def build_all(self, targets: list[str] | None = None) -> dict[str, float]:
        """Build ``targets`` (default: node, haproxy, toolbox) and what they need.

        Go builds (CPU-bound) and debootstraps (network- and disk-bound) run side by side.
        Returns seconds spent per step (0.0 for cached ones). Raises BuildError.
        """
        targets = targets or ["node", "haproxy", "toolbox"]
        order: list[Step] = []

        def visit(st: Step) -> None:
            for dep in st.deps:
                visit(dep)
            if st not in order:
                order.append(st)

        for t in targets:
            visit(self.step(t))
        spent: dict[str, float] = {}
        # Three lanes: the two Go builds (compile is parallel, linking is not, so two builds
        # keep both cores busier) and the debootstraps (network and disk).
        lanes = [[st for st in order if st.name == "go-kubernetes"],
                 [st for st in order if st.name == "go-tools"],
                 [st for st in order if st.name.startswith("rootfs-")]]
        with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
            futures = [pool.submit(lambda lane: [(st.name, st.ensure()) for st in lane], lane) for lane in lanes]
            for f in futures:
                spent.update(dict(f.result()))
        for st in order:
            if st.name not in spent:
                spent[st.name] = st.ensure()
        return spent

    def status(self) -> list[dict]:
        return [{"step": st.name, "key": st.key, "built": st.done(), "image": st.image}
                for st in self._steps.values()]


def image_sizes(tags: list[str]) -> dict[str, int]:
    """Bytes per local image tag (as ``docker image inspect`` reports them)."""
    sizes = {}
    for tag in tags:
        out = subprocess.run(["docker", "image", "inspect", "--format", "{{.Size}}", tag],
                             capture_output=True, text=True)
        if out.returncode == 0:
            sizes[tag] = int(out.stdout.strip())
    return sizes


if __name__ == "__main__":  # pragma: no cover
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(json.dumps(Build().build_all(), indent=2))
