"""Control-plane static pods on a node: stop them and keep them stopped, start them again, and
read the kubelet's own account of what it did.

A kubeadm control plane (kube-apiserver, etcd, kube-controller-manager, kube-scheduler) runs as
kubelet static pods. The kubelet restarts a killed static-pod container at once, so "this
component is down for N seconds" needs the kubelet to stand aside. Two ways exist:

* take the manifest out of ``/etc/kubernetes/manifests`` (the kubelet removes the pod). Putting
  it back makes the kubelet first delete the old *mirror pod* through the API, synchronously,
  before it starts the container (kubernetes/kubernetes#139502). On a kubeadm 1.35 control-plane
  node the kubelet talks to its own kube-apiserver, which in stacked etcd talks only to its own
  member: restoring an etcd member that way waits on an API server that cannot work without it
  (seen on a fresh CI machine: ``Failed deleting a mirror pod ... Timeout`` every ~34 s, the
  member back only after 168 s, when the node's kube-apiserver restarted).
* stop the node's kubelet, then kill the containers through the container runtime (``crictl
  stop --timeout 0``: a crash, not a graceful stop). The manifest, the pod and its mirror pod
  stay as they are; starting the kubelet again makes it restart the exited containers of the
  same pod. This is the method kdrill uses. Its side effect, recorded in the evidence: the
  node's kubelet is not running for the window (its node lease is not renewed; its pods keep
  running, but a crashed one is not restarted until the kubelet returns).

  The same trap waits at the restart when only the member was killed: a starting kubelet first
  registers its node and syncs it through its own kube-apiserver, which is running but hangs on
  every request without its member (each request times out after ~34 s); measured here, the
  kubelet started the member 122.3 to 123.2 s after it was started (four restores), after two
  waits of 60 s in its journal. A kube-apiserver that cannot reach its member serves
  nothing, so the restore stops it too (:func:`restart_kubelet`): the kubelet's requests are then
  refused at once, it starts the static pods from their manifests as at bootstrap, and the member
  and its kube-apiserver come back together.

Source: Kubernetes "Create static Pods"
(https://kubernetes.io/docs/tasks/configure-pod-container/static-pod/) and "Operating etcd
clusters for Kubernetes" (https://kubernetes.io/docs/tasks/administer-cluster/configure-upgrade-etcd/).
"""

from __future__ import annotations

import shlex

from harness.components import node_units
from harness.core.waiting import wait_until
from harness.kube.providers import Cluster, ProviderError

# Container names of the kubeadm control-plane static pods, as the container runtime shows them.
CONTROL_PLANE_COMPONENTS = ("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler")

# A container kill through the runtime: SIGKILL at once (stop's own --timeout 0). crictl's global
# --timeout bounds each call to the runtime, 2 s by default: on a node whose CPU was busy (a second
# cluster being created beside it) containerd answered a kill later than that, and the fault failed
# with "StopContainer ... DeadlineExceeded" though the container was being killed.
CRICTL_KILL = "crictl --timeout 30s stop --timeout 0"
# A deadline, not a measurement: a manifest edit with its kubelet stop, two kills and the kubelet's
# start take seconds; systemd ends the unit after this, and starts the kubelet after it.
RERUN_DEADLINE_SECONDS = 120


def stop_kubelet_and_kill(cluster: Cluster, node: str, components: list[str] | tuple[str, ...]) -> None:
    """Stop the kubelet on ``node``, then kill every running container named in ``components``.

    One ``docker exec``, so the kill follows the stop at once. Raises ProviderError when a step
    fails (the fault's revert starts the kubelet again whatever happened).
    """
    cluster.node_exec(node, ["sh", "-c", stop_kubelet_and_kill_script(components)], timeout_seconds=60)


def stop_kubelet_and_kill_script(components: list[str] | tuple[str, ...]) -> str:
    """The shell script :func:`stop_kubelet_and_kill` runs on the node (also run by a unit held on
    the node, see :mod:`harness.components.node_units`)."""
    names = "|".join(components)
    return ("systemctl stop kubelet && "
            f"for c in $(crictl ps --state Running -q --name {shlex.quote('^(' + names + ')$')}); do "
            f"{CRICTL_KILL} $c >/dev/null; done")


def start_kubelet(cluster: Cluster, node: str) -> None:
    """Start the kubelet on ``node`` (a no-op when it runs). Raises ProviderError."""
    cluster.node_exec(node, ["systemctl", "start", "kubelet"], timeout_seconds=60)


def restart_kubelet(cluster: Cluster, node: str) -> bool:
    """Bring a node whose etcd member was killed back: when the kubelet is stopped and etcd does
    not run, first kill the node's kube-apiserver (it hangs without its member, and a starting
    kubelet would wait on it; see the module doc), then start the kubelet. Returns whether the
    kube-apiserver was killed. Idempotent. Raises ProviderError."""
    out = cluster.node_exec(node, ["sh", "-c", restart_kubelet_script()], timeout_seconds=60).stdout
    return "killed" in out


def restart_kubelet_script() -> str:
    """The shell script :func:`restart_kubelet` runs on the node (also held on the node as a
    timer, see :mod:`harness.components.node_units`); it prints ``killed`` when it killed the
    node's kube-apiserver."""
    return ("if ! systemctl is-active -q kubelet && [ -z \"$(crictl ps -q --state Running --name '^etcd$')\" ]; then "
            "for c in $(crictl ps -q --state Running --name '^kube-apiserver$'); do "
            f"{CRICTL_KILL} $c >/dev/null; echo killed; done; fi; systemctl start kubelet")


def rerun_with_edit(cluster: Cluster, node: str, edit: str, component: str) -> None:
    """Apply the shell command ``edit`` to ``node``'s static pod manifests and have the kubelet run
    ``component`` from its edited manifest at once: stop the kubelet, run ``edit``, kill
    ``component``'s container and the node's kube-apiserver, start the kubelet.

    Why not only edit the manifest: the kubelet then deletes the old mirror pod through the node's
    own kube-apiserver before it starts the new pod, and for etcd that API server waits on the very
    member being replaced (kubernetes/kubernetes#139502; measured 46 to 51 s per member here). With
    the node's kube-apiserver down too the kubelet's requests are refused at once and it starts
    both from their manifests, as at bootstrap (see the module doc).

    The script runs on the node as a unit of its own (:func:`harness.components.node_units.run_now`),
    and the kubelet is started again after it however it ended: through the node agent the
    command is sent through this very kubelet, so it could not be sent to the node again while
    the kubelet is stopped. Returns once the script has ended (the node then answers again).
    Raises ProviderError when ``edit`` fails (nothing is killed then) or the script has not ended
    within :data:`RERUN_DEADLINE_SECONDS`.
    """
    import uuid

    names = shlex.quote(f"^({component}|kube-apiserver)$")
    script = (f"systemctl stop kubelet; ( {edit} ); rc=$?; "
              f"if [ $rc -eq 0 ]; then for c in $(crictl ps --state Running -q --name {names}); do "
              f"{CRICTL_KILL} $c >/dev/null; done; fi; "
              "systemctl start kubelet; exit $rc")
    unit = f"kdrill-rerun-{component}-{uuid.uuid4().hex[:8]}"
    # Its own kubelet stop may cut the command that starts it: the unit's record says.
    cut = node_units.run_now(cluster, node, unit, script, RERUN_DEADLINE_SECONDS, stop_post="systemctl start kubelet")
    ended = wait_until(lambda: node_units.ended(cluster, node, unit), RERUN_DEADLINE_SECONDS, interval_seconds=0.5,
                       description=f"{unit} ended on {node}")
    if not ended.ok:
        raise ProviderError(f"on node {node}: the manifest edit and restart ({unit}) did not end within "
                            f"{RERUN_DEADLINE_SECONDS} s" + (f"; starting it: {cut}" if cut else "")
                            + (f"; last: {ended.last_error}" if ended.last_error else ""))
    node_units.forget(cluster, node, [unit])
    (outcome,) = ended.value
    if isinstance(outcome, str):  # systemd ended it (the kubelet was started after it all the same)
        raise ProviderError(f"on node {node}: the manifest edit and restart ({unit}) {outcome}")
    if outcome != 0:
        raise ProviderError(f"on node {node}: the manifest edit exited {outcome}: {edit[:200]}")


def apiserver_ready(cluster: Cluster, node: str) -> bool:
    """Whether the kube-apiserver on ``node`` answers ``/readyz`` with ok (asked on the node)."""
    check = ["sh", "-c", "curl -sk --max-time 2 https://127.0.0.1:6443/readyz"]
    return cluster.node_exec(node, check, check=False, timeout_seconds=15, read_only=True).stdout.strip() == "ok"


def kubelet_active(cluster: Cluster, node: str) -> bool:
    return cluster.node_exec(node, ["systemctl", "is-active", "kubelet"], check=False, timeout_seconds=15,
                             read_only=True).stdout.strip() == "active"


def running(cluster: Cluster, node: str, component: str) -> bool:
    """Whether ``component``'s container runs on ``node`` (as the container runtime reports it)."""
    out = cluster.node_exec(node, ["crictl", "ps", "--name", f"^{component}$", "--state", "Running", "-q"],
                            timeout_seconds=15).stdout.split()
    return bool(out)


def kubelet_journal(cluster: Cluster, node: str, since: float, pattern: str, max_lines: int = 40) -> list[str]:
    """The kubelet's journal lines on ``node`` since ``since`` (epoch seconds) that match the
    extended regular expression ``pattern``; the last ``max_lines`` of them. Never raises: a
    journal that cannot be read gives one line saying why."""
    command = ["sh", "-c", f"journalctl -u kubelet --no-pager -o short-precise --since @{since:.0f} "
                           f"| grep -E {shlex.quote(pattern)} | tail -n {int(max_lines)}"]
    try:
        result = cluster.node_exec(node, command, check=False, timeout_seconds=30)
    except Exception as exc:  # evidence gathering must not mask the drill's outcome
        return [f"journal not read: {type(exc).__name__}: {exc}"]
    return [line[:400] for line in result.stdout.splitlines()]
