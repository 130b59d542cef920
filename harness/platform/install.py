"""Installing a platform profile into a new kind cluster: its image archives loaded into every
node, its manifests applied (their TLS placeholders filled) and rolled out, its Corefile given to
CoreDNS, then the record written (harness/platform/record.py). Each step raises ProviderError
naming the file and the API server's or kubectl's message."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import yaml

from harness.components.webhook import generate_webhook_tls
from harness.core.waiting import wait_until
from harness.kube.objects import expand
from harness.kube.providers import ProviderError
from harness.platform.reading import ProfileError, read_text, tls_placeholders, yaml_documents
from harness.platform.record import write_record

# Deadlines, not measurements: manifests accepted (CRDs established, a profile's own webhooks up)
# and each rollout, on a loaded 2-core machine.
APPLY_DEADLINE_SECONDS = 180
ROLLOUT_DEADLINE_SECONDS = 180
ADMIN_KUBECONFIG = "/etc/kubernetes/admin.conf"
# A profile's webhook certificate outlives any kind cluster made for drills.
WEBHOOK_TLS_VALID_SECONDS = 365 * 86400
ROLLED_OUT_KINDS = ("Deployment", "DaemonSet", "StatefulSet")


def manifest_text(profile, path: Path, tls=None) -> str:
    """What ``kubectl apply`` gets for ``path``: the file as written, or, when it uses the TLS
    placeholders, its documents with ``$(tls_cert)``, ``$(tls_key)`` and ``$(tls_ca_bundle)``
    replaced from ``tls`` (a :class:`harness.components.webhook.WebhookTLS`). Raises ProfileError
    for an unreadable file."""
    text = read_text(path)
    docs = [d for d in yaml_documents(path) if d is not None]
    if tls is None or not any(tls_placeholders(d) for d in docs):
        return text
    values = {"tls_cert": tls.cert_pem.decode("ascii"), "tls_key": tls.key_pem.decode("ascii"),
              "tls_ca_bundle": tls.ca_bundle}
    return yaml.safe_dump_all([expand(d, values, leave_unknown=True) for d in docs], sort_keys=False)


def _kubectl(cluster, node: str, args: list[str], stdin: str | None = None, timeout_seconds: float = 60):
    # The node's own kubectl: the same version as the cluster (the host's may be far older).
    return cluster.node_exec(node, ["kubectl", f"--kubeconfig={ADMIN_KUBECONFIG}", *args], stdin=stdin,
                             timeout_seconds=timeout_seconds, check=False)


def install(profile, cluster, kind_provider) -> dict[str, float]:
    """Install ``profile`` (a :class:`harness.platform.profile.PlatformProfile`) into the new kind
    cluster ``cluster`` made by ``kind_provider``: load its images into every node, apply its
    manifests (retried until accepted) and wait for their rollouts, replace CoreDNS's Corefile
    and roll CoreDNS out, then record the profile. Returns seconds per step ("images",
    "manifests", "coredns" with a Corefile). Raises ProviderError naming the file and the API
    server's or kubectl's message."""
    node = cluster.nodes_by_role["control-plane"][0]
    steps: dict[str, float] = {}
    started = time.monotonic()
    for archive in profile.images:
        kind_provider.load_image_archive(archive)
    steps["images"] = time.monotonic() - started

    started = time.monotonic()
    workloads = apply_manifests(profile, cluster, node)
    wait_rolled_out(profile, cluster, node, workloads)
    steps["manifests"] = time.monotonic() - started

    if profile.corefile is not None:
        started = time.monotonic()
        replace_corefile(profile, cluster, node)
        steps["coredns"] = time.monotonic() - started

    refuse_changed(profile)
    write_record(profile, cluster)
    return {k: round(v, 2) for k, v in steps.items()}


def apply_manifests(profile, cluster, node: str) -> list[str]:
    """Apply each of the profile's manifests in turn through ``node``'s kubectl (server-side,
    retried until accepted, for at most APPLY_DEADLINE_SECONDS seconds each), with a serving
    certificate made for its ``webhook_tls``. Returns the workloads they make that roll out, as
    ``namespace/kind/name``. Raises ProviderError."""
    workloads: list[str] = []
    tls = None
    if profile.webhook_tls:
        # Made here, for this cluster, never stored in the profile: like cert-manager would.
        tls = generate_webhook_tls(profile.webhook_tls["service"], profile.webhook_tls["namespace"],
                                   valid_seconds=WEBHOOK_TLS_VALID_SECONDS)
    for path in profile.manifests:
        try:
            text = manifest_text(profile, path, tls)
        except ProfileError as exc:  # gone or changed since it was loaded
            raise ProviderError(f"platform profile {profile.name}: {exc}") from None
        _apply_until_accepted(profile, cluster, node, path, text)
        for doc in yaml_documents(path):
            if doc["kind"] in ROLLED_OUT_KINDS:
                ns = doc["metadata"].get("namespace") or "default"
                workloads.append(f"{ns}/{doc['kind'].lower()}/{doc['metadata']['name']}")
    return workloads


def _apply_until_accepted(profile, cluster, node: str, path: Path, text: str) -> None:
    """``kubectl apply --server-side`` of ``text`` (manifest ``path``), again every 2 s while
    refused, for at most APPLY_DEADLINE_SECONDS seconds. Raises ProviderError with kubectl's last
    answer."""
    last: dict[str, Any] = {}

    def accepted() -> bool:  # a CRD establishing or a webhook starting: asked again
        last["result"] = _kubectl(cluster, node, ["apply", "--server-side", "--force-conflicts",
                                                  "--field-manager=kdrill-platform", "-f", "-"], stdin=text)
        return last["result"].returncode == 0

    if not wait_until(accepted, APPLY_DEADLINE_SECONDS, interval_seconds=2.0,
                      description=f"platform manifest {path.name} accepted").ok:
        result = last.get("result")
        said = (result.stderr or result.stdout).strip()[-1500:] if result is not None else "no answer"
        raise ProviderError(f"platform profile {profile.name}: {path} not accepted within "
                            f"{APPLY_DEADLINE_SECONDS} s: {said}")


def wait_rolled_out(profile, cluster, node: str, workloads: list[str]) -> None:
    """``kubectl rollout status`` of each of ``workloads`` (``namespace/kind/name``), for at most
    ROLLOUT_DEADLINE_SECONDS seconds each. Raises ProviderError with kubectl's message."""
    for ref in workloads:
        ns, rest = ref.split("/", 1)
        result = _kubectl(cluster, node, ["-n", ns, "rollout", "status", rest,
                                          f"--timeout={ROLLOUT_DEADLINE_SECONDS}s"],
                          timeout_seconds=ROLLOUT_DEADLINE_SECONDS + 30)
        if result.returncode != 0:
            raise ProviderError(f"platform profile {profile.name}: {ref} not rolled out within "
                                f"{ROLLOUT_DEADLINE_SECONDS} s: {(result.stderr or result.stdout).strip()[-800:]}")


def replace_corefile(profile, cluster, node: str) -> None:
    """Put the profile's Corefile into the ``kube-system/coredns`` ConfigMap (retried for at most
    APPLY_DEADLINE_SECONDS seconds) and roll CoreDNS out with it. Raises ProviderError with the
    API server's last error, or kubectl's message and CoreDNS's log."""
    # Retried like the manifests (an error is "not yet"): a profile's webhook that takes in
    # kube-system ConfigMaps refuses this write until the node's kube-proxy has its backend's
    # endpoint, a moment after the rollout above says Ready (measured: connection refused).
    def corefile_written() -> bool:
        cluster.core.patch_namespaced_config_map("coredns", "kube-system", {"data": {"Corefile": profile.corefile}},
                                                 _request_timeout=10)
        return True

    waited = wait_until(corefile_written, APPLY_DEADLINE_SECONDS, interval_seconds=2.0,
                        description="the coredns ConfigMap updated with the profile's Corefile")
    if not waited.ok:
        raise ProviderError(f"platform profile {profile.name}: the API server did not accept the coredns "
                            f"ConfigMap with {profile.root / 'coredns' / 'Corefile'} within "
                            f"{APPLY_DEADLINE_SECONDS} s: {(waited.last_error or 'no answer')[-800:]}")
    # The reload plugin would pick it up within about 30 s, on each replica on its own: a
    # rollout makes every replica run it, and fails loudly when CoreDNS refuses it.
    annotation = {"kdrill.io/platform-corefile": hashlib.sha256(profile.corefile.encode()).hexdigest()[:16]}
    cluster.apps.patch_namespaced_deployment("coredns", "kube-system", {"spec": {"template": {"metadata": {
        "annotations": annotation}}}}, _request_timeout=10)
    result = _kubectl(cluster, node, ["-n", "kube-system", "rollout", "status", "deployment/coredns",
                                      f"--timeout={ROLLOUT_DEADLINE_SECONDS}s"],
                      timeout_seconds=ROLLOUT_DEADLINE_SECONDS + 30)
    if result.returncode != 0:
        logs = _kubectl(cluster, node, ["-n", "kube-system", "logs", "-l", "k8s-app=kube-dns", "--tail=5"]).stdout
        raise ProviderError(f"platform profile {profile.name}: CoreDNS did not roll out with "
                            f"{profile.root / 'coredns' / 'Corefile'}: {result.stderr.strip()[-500:]}; "
                            f"its log: {logs.strip()[-1000:]}")


def refuse_changed(profile) -> None:
    """The record says what the cluster got: raises ProviderError when the profile's directory
    no longer loads to the hash it had when read (files/ is mounted live, manifests and images
    were read from it during the installation)."""
    try:
        now = profile.reload().hash[:12]
    except ProfileError as exc:
        now = f"not loadable: {exc}"
    if now != profile.hash[:12]:
        raise ProviderError(f"platform profile {profile.name}: {profile.root} changed during the installation "
                            f"(sha256 {profile.hash[:12]} when read, {now} now), so what the cluster got is not "
                            f"known; not recorded: delete the cluster and create it again")
