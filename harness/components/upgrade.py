"""A kubeadm cluster upgraded one minor, node by node, and the versions its components report at
each moment, judged against the version skew policy.

The steps are the kubeadm documentation's ("Upgrading kubeadm clusters",
https://kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-upgrade/): kubeadm itself
first; on the first control-plane node ``kubeadm upgrade apply vX.Y.Z``, on the others ``kubeadm
upgrade node``; then each node drained, its kubelet and kubectl replaced, the kubelet restarted,
the node uncordoned; then the workers the same way (``kubeadm upgrade node``, drain, kubelet,
uncordon). On kind the "package upgrade" is a copy of the release's binaries into the node, and
the image "pull" an import of the release's component images into the node's containerd: nothing
comes from outside the machine.

Versions are read from the cluster, never assumed: each kube-apiserver's own ``/version`` (from
its node, at https://127.0.0.1:6443), the ``--version`` of the controller-manager, scheduler and
kube-proxy binaries running in their containers, each kubelet's ``status.nodeInfo.kubeletVersion``,
and which API server the controller-manager and scheduler call (the server of their kubeconfig).

Source: "Version Skew Policy" (https://kubernetes.io/releases/version-skew-policy/).
"""

from __future__ import annotations

import json
import re
import shlex
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.kube.providers import Cluster
from harness.spec.params import KUBERNETES_RELEASE

# kubeadm waits up to 5 minutes per static pod itself; a whole `upgrade apply` (etcd, three
# components, addons) measured 1 to 3 minutes here: this only stops one that hangs.
KUBEADM_SECONDS = 900
DRAIN_SECONDS = 300  # kubectl drain's own --timeout: evictions the PDB refuses are retried until then
ADMIN_KUBECONFIG = "/etc/kubernetes/admin.conf"
STAGING_DIR = "/var/tmp/kdrill-upgrade"  # on each node: the next release's binaries and images
COMPONENT_CONFIGS = {"kubelet": "/etc/kubernetes/kubelet.conf",
                     "kube-controller-manager": "/etc/kubernetes/controller-manager.conf",
                     "kube-scheduler": "/etc/kubernetes/scheduler.conf"}
_VERSION = re.compile(r"v(\d+)\.(\d+)\.(\d+)")


def minor(version: str) -> int:
    """The minor of a Kubernetes version ("v1.35.4", "Kubernetes v1.35.4" -> 35). Raises
    ValueError when ``version`` holds none."""
    found = _VERSION.search(version) if isinstance(version, str) else None
    if not found or found.group(1) != "1":
        raise ValueError(f"Kubernetes version: expected v1.MINOR.PATCH, got {version!r}")
    return int(found.group(2))


@dataclass
class VersionReading:
    """The versions the cluster's components reported at ``t`` (epoch seconds). Each map is
    node -> version, None where the component did not answer (e.g. its static pod restarting);
    ``talks_to``: "<component>/<node>" -> the node whose API server that component calls (the
    kubelet of every node, the controller-manager and scheduler of each control-plane node)."""

    t: float
    apiservers: dict[str, str | None]
    controller_managers: dict[str, str | None] = field(default_factory=dict)
    schedulers: dict[str, str | None] = field(default_factory=dict)
    kubelets: dict[str, str] = field(default_factory=dict)
    kube_proxies: dict[str, str | None] = field(default_factory=dict)
    talks_to: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _answering(versions: dict[str, str | None]) -> dict[str, int]:
    return {node: minor(v) for node, v in versions.items() if v}


def _older_allowed(m: int) -> int:
    """How many minors a kubelet or kube-proxy of minor ``m`` may be behind: three, two before 1.25."""
    return 2 if m < 25 else 3


_WORDS = {2: "two", 3: "three"}


def skew_violations(reading: VersionReading, strict: bool = False) -> list[str]:
    """What in ``reading`` the version skew policy does not allow, one sentence each (empty when
    nothing): kube-apiservers more than one minor apart; a kubelet or kube-proxy newer than the
    kube-apiserver it calls or more than three minors older (two, before 1.25); a kube-proxy more
    than three minors from its node's kubelet; a controller-manager or scheduler newer than the
    kube-apiserver it calls, or more than one minor older. "The kube-apiserver it calls" is the one
    ``talks_to`` names; a component whose server is not known (or every one, ``strict``: the
    policy page's own reading for HA, where any component may reach any instance) is held to every
    kube-apiserver: never newer than the oldest. Raises ValueError for a version that is not one."""
    apis = _answering(reading.apiservers)
    if not apis:
        return []
    oldest, newest = min(apis.values()), max(apis.values())
    found = []
    if newest - oldest > 1:
        found.append(f"kube-apiserver: 1.{newest} and 1.{oldest} side by side, more than one minor apart")

    def against(kind: str, node: str) -> list[int]:
        server = None if strict else reading.talks_to.get(f"{kind}/{node}")
        return [apis[server]] if server in apis else list(apis.values())

    for kind, versions in (("kubelet", reading.kubelets), ("kube-proxy", reading.kube_proxies)):
        for node, m in _answering(versions).items():
            called = against("kubelet", node)  # kube-proxy reaches the API as its node's kubelet does, or wider
            if m > min(called):
                found.append(f"{kind} on {node}: 1.{m} is newer than the kube-apiserver it calls (1.{min(called)})")
            elif m < max(called) - _older_allowed(m):
                found.append(f"{kind} on {node}: 1.{m} is more than {_WORDS[_older_allowed(m)]} minors older than "
                             f"kube-apiserver 1.{max(called)}")
    kubelets = _answering(reading.kubelets)
    for node, m in _answering(reading.kube_proxies).items():
        if node in kubelets and abs(m - kubelets[node]) > _older_allowed(m):
            found.append(f"kube-proxy on {node}: 1.{m} is more than {_WORDS[_older_allowed(m)]} minors from its "
                         f"kubelet (1.{kubelets[node]})")
    for kind, versions in (("kube-controller-manager", reading.controller_managers),
                           ("kube-scheduler", reading.schedulers)):
        for node, m in _answering(versions).items():
            called = against(kind, node)
            if m > min(called):
                found.append(f"{kind} on {node}: 1.{m} is newer than the kube-apiserver it calls (1.{min(called)})")
            elif m < max(called) - 1:
                found.append(f"{kind} on {node}: 1.{m} is more than one minor older than kube-apiserver 1.{max(called)}")
    return found


def mixed_apiserver_seconds(readings: list[VersionReading]) -> float:
    """Seconds during which kube-apiservers of two minors answered side by side: the sum of the
    intervals from one reading to the next (in time order) that begin with two minors answering."""
    readings = sorted(readings, key=lambda r: r.t)
    total = 0.0
    for here, after in zip(readings, readings[1:]):
        if len(set(_answering(here.apiservers).values())) > 1:
            total += after.t - here.t
    return round(total, 1)


# --- reading the versions -------------------------------------------------------------------

def apiserver_version(cluster: Cluster, node: str) -> str | None:
    """The gitVersion kube-apiserver on ``node`` reports at its own /version (anonymous, as
    system:public-info-viewer allows), or None when it does not answer within 3 s."""
    out = cluster.node_exec(node, ["curl", "-sk", "--max-time", "3", "https://127.0.0.1:6443/version"],
                            timeout_seconds=15, check=False, read_only=True)
    try:
        return json.loads(out.stdout).get("gitVersion") if out.returncode == 0 else None
    except (json.JSONDecodeError, AttributeError):
        return None


def binary_version(cluster: Cluster, node: str, container: str) -> str | None:
    """``<container> --version`` run in the running container of that name on ``node`` (through
    crictl): the binary that is running, not the tag it was started from. None when no such
    container runs."""
    script = (f"id=$(crictl ps -q --state running --name {shlex.quote(f'^{container}$')} | head -n1); "
              f"[ -n \"$id\" ] && crictl exec \"$id\" {shlex.quote(container)} --version")
    out = cluster.node_exec(node, ["sh", "-c", script], timeout_seconds=20, check=False, read_only=True)
    found = _VERSION.search(out.stdout or "")
    return found.group(0) if out.returncode == 0 and found else None


def calls_apiserver_of(cluster: Cluster, node: str, component: str, addresses: dict[str, str]) -> str | None:
    """The node whose kube-apiserver ``component`` on ``node`` calls: the server of its kubeconfig
    (kubeadm writes the node's own advertise address there), matched against ``addresses``
    (node -> InternalIP). None when it names another address (a load balancer: any of them)."""
    out = cluster.node_exec(node, ["cat", COMPONENT_CONFIGS[component]], timeout_seconds=10, check=False,
                            read_only=True)
    server = re.search(r"server:\s*https://\[?([^\]/:]+)", out.stdout or "")
    if not server:
        return None
    host = server.group(1)
    return node if host in ("127.0.0.1", "localhost") else next((n for n, ip in addresses.items() if ip == host), None)


def read_versions(cluster: Cluster, control_plane: list[str], nodes: list[str],
                  addresses: dict[str, str]) -> VersionReading:
    """One :class:`VersionReading` of the whole cluster (about a second per node). Raises
    ApiException when the nodes cannot be listed."""
    t = time.time()
    reading = VersionReading(t=t, apiservers={n: apiserver_version(cluster, n) for n in control_plane})
    for node in control_plane:
        reading.controller_managers[node] = binary_version(cluster, node, "kube-controller-manager")
        reading.schedulers[node] = binary_version(cluster, node, "kube-scheduler")
    for node in nodes:
        reading.kube_proxies[node] = binary_version(cluster, node, "kube-proxy")
        for component in COMPONENT_CONFIGS if node in control_plane else ["kubelet"]:
            server = calls_apiserver_of(cluster, node, component, addresses)
            if server:
                reading.talks_to[f"{component}/{node}"] = server
    listed = cluster.core.list_node(_request_timeout=10).items
    reading.kubelets = {n.metadata.name: n.status.node_info.kubelet_version for n in listed}
    return reading


# --- the steps ------------------------------------------------------------------------------

@dataclass
class StepResult:
    """One step of the upgrade: what ran where, for how long (seconds), and its output's tail."""

    name: str
    node: str
    started_at: float
    seconds: float
    ok: bool
    output: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_step(cluster: Cluster, name: str, node: str, command: str, timeout_seconds: float) -> StepResult:
    """``command`` (a shell line) on ``node``, timed; never raises for the command's failure (the
    result says so, with the last 1,500 characters of its output, standard error of every part
    of the line included)."""
    started, clock = time.time(), time.monotonic()
    out = cluster.node_exec(node, ["sh", "-c", "exec 2>&1; " + command], timeout_seconds=timeout_seconds,
                            check=False)
    return StepResult(name=name, node=node, started_at=started, seconds=round(time.monotonic() - clock, 1),
                      ok=out.returncode == 0, output=(out.stdout or "")[-1500:])


def stage(cluster: Cluster, node: str, binaries: dict[str, str], images_tar: str) -> StepResult:
    """Copy the next release's kubeadm, kubelet and kubectl (``binaries``: name -> host path) to
    :data:`STAGING_DIR` on ``node`` and import its component images (``images_tar``, a ``docker
    save`` archive on the host) into the node's containerd, as a package mirror and an image
    pull would. Nothing is put in place yet."""
    started, clock = time.time(), time.monotonic()
    cluster.node_exec(node, ["mkdir", "-p", STAGING_DIR], timeout_seconds=10)
    for name, path in binaries.items():
        cluster.copy_to_node(node, path, f"{STAGING_DIR}/{name}")
    cluster.copy_to_node(node, images_tar, f"{STAGING_DIR}/images.tar", timeout_seconds=300)
    line = f"ctr -n k8s.io images import {STAGING_DIR}/images.tar && rm -f {STAGING_DIR}/images.tar"
    result = run_step(cluster, "stage", node, line, 300)
    result.started_at, result.seconds = started, round(time.monotonic() - clock, 1)
    return result


def release(version: str) -> str:
    """``version`` when it is a Kubernetes release as kubeadm takes it ("v1.35.4"); raises
    ValueError otherwise (before it reaches a shell line or kubeadm's options)."""
    if not (isinstance(version, str) and KUBERNETES_RELEASE.fullmatch(version)):
        raise ValueError(f"Kubernetes release: expected v1.MINOR.PATCH, got {version!r}")
    return version


# kubeadm 1.35's preflight refuses a cgroup v1 host even with the kubelet's failCgroupV1: false,
# unless this check is skipped as well (KEP-5573, the message names it).
CGROUP_V1_CHECK = "SystemVerification"


def _ignoring(ignore: tuple[str, ...]) -> str:
    return f" --ignore-preflight-errors={shlex.quote(','.join(ignore))}" if ignore else ""


def failed_checks(output: str) -> set[str]:
    """The names of the preflight checks kubeadm's ``output`` reports as errors ("[ERROR Name]")."""
    return set(re.findall(r"\[ERROR ([A-Za-z0-9.\-_]+)\]", output))


def cgroup_v1_refusal(output: str) -> bool:
    """Whether kubeadm's preflight failed on :data:`CGROUP_V1_CHECK` because the host is on
    cgroup v1 (and on nothing else)."""
    return failed_checks(output) == {CGROUP_V1_CHECK} and "cgroups v1" in output


def preflight(cluster: Cluster, node: str, version: str) -> StepResult:
    """The staged kubeadm's ``kubeadm upgrade apply <version> --dry-run``, as documented (no check
    skipped): what the upgrade's own preflight says of this host, nothing changed. Raises
    ValueError as :func:`release`."""
    version = release(version)
    return run_step(cluster, "kubeadm upgrade apply (dry run, as documented)", node,
                    f"{STAGING_DIR}/kubeadm upgrade apply {shlex.quote(version)} --yes --dry-run", 300)


def kubeadm_upgrade(cluster: Cluster, node: str, first: bool, version: str, ignore: tuple[str, ...] = ()) -> StepResult:
    """The staged kubeadm put in place (the documentation upgrades kubeadm first), then ``kubeadm
    upgrade apply <version> --yes`` on the first control-plane node, ``kubeadm upgrade node`` on
    any other node; the preflight checks named in ``ignore`` skipped. Raises ValueError for a
    ``version`` that is not a release (:func:`release`)."""
    version = release(version)
    install = f"install -m 0755 {STAGING_DIR}/kubeadm /usr/bin/kubeadm && "
    if first:
        return run_step(cluster, "kubeadm upgrade apply", node, install + f"kubeadm upgrade apply "
                        f"{shlex.quote(version)} --yes{_ignoring(ignore)}", KUBEADM_SECONDS)
    return run_step(cluster, "kubeadm upgrade node", node, install + f"kubeadm upgrade node{_ignoring(ignore)}",
                    KUBEADM_SECONDS)


def skip_minor_refused(cluster: Cluster, node: str, version: str, ignore: tuple[str, ...] = ()) -> StepResult:
    """The staged (next minor's) kubeadm asked, as a dry run, to upgrade straight to ``version``,
    two minors above the cluster (the preflight checks in ``ignore`` skipped, so its version
    policy is reached): kubeadm must refuse ("can upgrade only 1 minor version at a time");
    ``ok`` says whether kubeadm accepted it. Raises ValueError as :func:`release`."""
    version = release(version)
    return run_step(cluster, "kubeadm upgrade apply, skipping a minor (dry run)", node,
                    f"{STAGING_DIR}/kubeadm upgrade apply {shlex.quote(version)} --yes --dry-run{_ignoring(ignore)}",
                    300)


def drain(cluster: Cluster, via: str, node: str, keep_selector: str) -> StepResult:
    """``kubectl drain`` of ``node`` from ``via``'s admin kubeconfig, evicting through the Eviction
    API (PodDisruptionBudgets respected, a refused eviction retried), DaemonSet pods left. Pods
    matching ``keep_selector``'s negation are left too (``--pod-selector``): the drill's probe pod,
    which must measure the whole upgrade."""
    return run_step(cluster, "drain", via,
                    f"kubectl --kubeconfig {ADMIN_KUBECONFIG} drain {shlex.quote(node)} --ignore-daemonsets "
                    f"--delete-emptydir-data --pod-selector {shlex.quote(keep_selector)} "
                    f"--timeout {DRAIN_SECONDS}s", DRAIN_SECONDS + 60)


def replace_kubelet(cluster: Cluster, node: str) -> StepResult:
    """The staged kubelet and kubectl put in place and the kubelet restarted (systemd)."""
    line = (f"install -m 0755 {STAGING_DIR}/kubelet /usr/bin/kubelet && "
            f"install -m 0755 {STAGING_DIR}/kubectl /usr/bin/kubectl && "
            "systemctl daemon-reload && systemctl restart kubelet && kubelet --version")
    return run_step(cluster, "kubelet replaced and restarted", node, line, 120)


KUBEADM_FLAGS = "/var/lib/kubelet/kubeadm-flags.env"  # the kubelet flags kubeadm writes on each node


def kubelet_state(cluster: Cluster, node: str) -> dict[str, Any]:
    """Whether ``node``'s kubelet unit is active, and the last "command failed" line it logged
    (how a kubelet that refuses its flags exits), or None."""
    active = cluster.node_exec(node, ["systemctl", "is-active", "kubelet"], timeout_seconds=10, check=False,
                               read_only=True).stdout.strip()
    journal = cluster.node_exec(node, ["journalctl", "-u", "kubelet", "--no-pager", "-n", "50"], timeout_seconds=20,
                                check=False, read_only=True).stdout
    failed = [line for line in journal.splitlines() if "command failed" in line]
    return {"active": active == "active", "unit": active, "last_failure": failed[-1][-300:] if failed else None}


def drop_kubelet_flag(cluster: Cluster, node: str, flag: str) -> StepResult:
    """``--<flag>=...`` taken out of :data:`KUBEADM_FLAGS` and the kubelet restarted: the flags a
    node made at the newer release would have (``flag``: letters, digits and '-' only)."""
    if not re.fullmatch(r"[a-z0-9-]+", flag):
        raise ValueError(f"kubelet flag: expected lowercase letters, digits and '-', got {flag!r}")
    line = f"sed -i 's/ *--{flag}=[^ \"]*//' {KUBEADM_FLAGS} && cat {KUBEADM_FLAGS} && systemctl restart kubelet"
    return run_step(cluster, f"--{flag} dropped from the kubelet's flags", node, line, 60)


def uncordon(cluster: Cluster, via: str, node: str) -> StepResult:
    return run_step(cluster, "uncordon", via,
                    f"kubectl --kubeconfig {ADMIN_KUBECONFIG} uncordon {shlex.quote(node)}", 60)


# kind's kubeadm configuration on every node. Its JoinConfiguration skips kubeadm's preflight
# (skipPhases, which even `kubeadm join phase preflight` obeys), so the drill joins with a copy
# without that entry: the checks run as documented. Any other skipped phase stops the join.
KIND_KUBEADM_CONFIG = "/kind/kubeadm.conf"
JOIN_CONFIG = f"{STAGING_DIR}/join.conf"
_WITHOUT_SKIPPED_PREFLIGHT = ('/^skipPhases:$/ {skip = 1; next} skip && /^- / {if ($0 != "- preflight") other = 1; '
                              'next} {skip = 0; print} END {exit other}')
_JOIN_CONFIG_LINE = (f"{{ awk {shlex.quote(_WITHOUT_SKIPPED_PREFLIGHT)} {KIND_KUBEADM_CONFIG} > {JOIN_CONFIG} || "
                     f"{{ echo 'kdrill: {KIND_KUBEADM_CONFIG} unreadable, or it skips a kubeadm phase other than "
                     "preflight'; exit 1; }; } && ")
KUBELET_VERSION_CHECK = "KubeletVersion"  # the preflight check that compares the kubelet with the control plane
KUBELET_VERSION_LOGGED = "validating kubelet version"  # what that check logs at --v=1 when it runs


def reset_node(cluster: Cluster, node: str) -> StepResult:
    """``kubeadm reset --force`` on ``node`` with its own kubeadm: the node's half of removing it
    from the cluster (after a drain; the Node object goes with :func:`delete_node`)."""
    return run_step(cluster, "kubeadm reset", node, "kubeadm reset --force", 300)


def delete_node(cluster: Cluster, via: str, node: str) -> StepResult:
    return run_step(cluster, "node deleted", via,
                    f"kubectl --kubeconfig {ADMIN_KUBECONFIG} delete node {shlex.quote(node)} --timeout 60s", 90)


def install_next(cluster: Cluster, node: str) -> StepResult:
    """The staged kubeadm, kubelet and kubectl put in place on ``node`` (the kubelet not started:
    ``kubeadm join`` starts it)."""
    line = " && ".join(f"install -m 0755 {STAGING_DIR}/{b} /usr/bin/{b}" for b in ("kubeadm", "kubelet", "kubectl"))
    return run_step(cluster, "next release installed", node, line + " && kubelet --version", 60)


def join_preflight(cluster: Cluster, node: str) -> StepResult:
    """``kubeadm join phase preflight --v=1`` on ``node`` with kind's join configuration, no check
    skipped: what kubeadm's own join checks say of this node and its kubelet, nothing changed. The
    output keeps only the lines that say so: each check's error, and :data:`KUBELET_VERSION_LOGGED`
    when the kubelet's version was checked at all."""
    log = f"{STAGING_DIR}/join-preflight.log"
    return run_step(cluster, "kubeadm join preflight (as documented)", node, _JOIN_CONFIG_LINE
                    + f"{{ kubeadm join phase preflight --config {JOIN_CONFIG} --v=1 > {log} 2>&1; rc=$?; "
                    f"grep -E '{KUBELET_VERSION_LOGGED}|\\[ERROR |^error' {log}; exit $rc; }}", 300)


def join(cluster: Cluster, node: str, ignore: tuple[str, ...] = ()) -> StepResult:
    """``kubeadm join`` of ``node`` with kind's join configuration, the preflight checks named in
    ``ignore`` skipped."""
    return run_step(cluster, "kubeadm join", node,
                    _JOIN_CONFIG_LINE + f"kubeadm join --config {JOIN_CONFIG}{_ignoring(ignore)}", KUBEADM_SECONDS)


def evicted_pods(drain_output: str) -> list[str]:
    """The pods a ``kubectl drain`` says it evicted ("pod/<name> evicted"), as names."""
    return sorted(set(re.findall(r"pod/([a-z0-9][-a-z0-9.]*) evicted", drain_output)))
