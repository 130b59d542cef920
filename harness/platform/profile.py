"""Platform profiles: a team's platform as files, built into a kind cluster, so the drills test
*its* platform (its API server flags, admission policies, CoreDNS Corefile, images), not kdrill's.

A profile is a directory (``kdrill run --platform DIR``, ``kdrill cluster create --platform DIR``)::

    platform.yaml        name (a DNS label, at most 20 characters) and description; required.
                         Optional ``prometheus: {node_port}``: the NodePort of the profile's own
                         Prometheus, where drills read detection (harness/engine/detection.py)
                         through the kind config's ``127.0.0.1`` mapping of it
                         Optional ``alertmanager: {service: <namespace>/<name>, port}``: its
                         Alertmanager's Service, watched during drills through the API server's
                         service proxy (did the alert reach it, to which receivers)
                         Optional ``webhook_tls: {service, namespace}``: a CA and a serving
                         certificate for that Service are made when the profile is installed
                         (never stored in the profile), and the manifests' ``$(tls_cert)``,
                         ``$(tls_key)`` and ``$(tls_ca_bundle)`` are replaced by them, as in a
                         scenario's ``workload.tls``: in manifests' string values only,
                         ``$(tls_key)`` only in a Secret's stringData, and the Service one the
                         manifests make
    kubeadm/*.yaml       kubeadm config patches (kind's kubeadmConfigPatches), one document each, of
                         kind ClusterConfiguration, InitConfiguration, JoinConfiguration,
                         KubeletConfiguration or KubeProxyConfiguration, of the apiVersion kind
                         writes if one is named: API server flags, admission plugins, an
                         EncryptionConfiguration or audit policy by path
    files/               mounted read-only on every node at /etc/kubernetes/kdrill-platform (the
                         patches name files there, and mount the directory into the static pod)
    manifests/*.yaml     applied in name order once the cluster is up (server-side apply, retried
                         while CRDs establish and webhooks start); their Deployments, DaemonSets
                         and StatefulSets must then be rolled out. Each file holds at least one
                         object, each object is there once (one field manager applies them all:
                         a second copy would silently replace the first), without a namespace
                         it goes to default as with kubectl
    coredns/Corefile     replaces CoreDNS's Corefile (after the manifests, retried like them while a
                         webhook of theirs refuses kube-system writes); CoreDNS is rolled out with it. Its blocks
                         are checked as CoreDNS reads them (braces in comments and strings do
                         not count)
    images/*.tar         image archives (``docker save`` or OCI layout) loaded into every node
                         before the manifests: no registry needed
    README.md            free text, not hashed

``platform.yaml`` may also say ``prepare: {command, files}``: files a command run from the checkout
writes into the profile (built here, not committed: clusters/platforms/gatekeeper's image archive
and the manifest rendered from Gatekeeper's published one). A profile with one of them missing
is refused, naming the command.

Hidden entries (names starting with ``.``: an editor's swap file, ``.gitkeep``) are ignored and
not hashed, except under ``files/``: that directory is mounted whole, so every entry there reaches
the nodes and is hashed. Nothing else may be there (a misspelt ``manifest/`` would otherwise be
silently ignored). Helm charts are not installed: render them to ``manifests/`` (``helm template``)
where Helm runs.

Symbolic links are followed where kdrill reads the file (a manifest kept elsewhere is hashed by
its content). Under ``files/`` the nodes see the links themselves, so each must be relative and
stay inside ``files/``; a link that resolves nowhere, a loop, a FIFO or device is refused.

The profile's *hash* (SHA-256 over every file's relative path and content, README.md aside; under
``files/`` also its empty directories and which files are executable, as the nodes see them) is
part of the cluster's identity: the cluster is named ``<config's name>-<profile name>`` (refused
when that is another config's cluster, e.g. a profile ``ha`` on ``single``: ``kdrill-ha``), the
profile is recorded in the ConfigMap ``kube-system/kdrill-platform`` once it is fully installed,
and a run on a cluster whose record differs from the directory is refused. Every run's evidence
carries the record (``run.json`` ``platform``), and ``kdrill compare`` compares runs of one
platform only unless asked.

The modules beside this one: reading.py (the files, their hash, ProfileError), loading.py (each
part checked), kind_config.py (the kind config a profile makes), install.py (installing it on a
cluster) and record.py (the record on the cluster, and how it is compared).

Sources: kind "Configuration" (kubeadmConfigPatches, extraMounts,
https://kind.sigs.k8s.io/docs/user/configuration/), kubeadm "Customizing components with the
kubeadm API" (https://kubernetes.io/docs/setup/production-environment/tools/kubeadm/control-plane-flags/),
Kubernetes "Customizing DNS Service" (https://kubernetes.io/docs/tasks/administer-cluster/dns-custom-nameservers/).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.platform import loading
from harness.platform.install import install, manifest_text
from harness.platform.kind_config import check_cluster_name, kind_config, write_kind_config
from harness.platform.reading import NODE_FILES_DIR, PROFILE_FILE, ProfileError, hashed_tree, profile_hash
from harness.platform.record import mismatch, recorded

# Imported from here by the cli, the plugin and the tests: the layout's reference is this module.
__all__ = ["NODE_FILES_DIR", "PROFILE_FILE", "PlatformProfile", "ProfileError", "check_cluster_name", "install",
           "kind_config", "load", "manifest_text", "mismatch", "profile_hash", "recorded", "write_kind_config"]


@dataclass(frozen=True)
class PlatformProfile:
    """A loaded, checked profile (see the module doc). ``files``: relative path -> SHA-256 of every
    hashed file (:func:`harness.platform.reading.hashed_tree` says which, and how files/ is told
    apart); ``hash``: the profile's SHA-256 (hex). What a KindProvider given it as ``platform``
    calls: :meth:`write_kind_config`, :meth:`install` and :meth:`problem`."""

    root: Path
    name: str
    description: str
    kubeadm_patches: list[str]
    manifests: list[Path]
    corefile: str | None
    images: list[Path]
    has_node_files: bool
    files: dict[str, str] = field(default_factory=dict)
    hash: str = ""
    webhook_tls: dict[str, str] | None = None  # {"service", "namespace"}: a serving certificate made at install
    prometheus_node_port: int | None = None  # the profile's own Prometheus's NodePort: where detection is read
    # The profile's own Alertmanager's Service (namespace, name, port): watched through the API server.
    alertmanager_service: tuple[str, str, int] | None = None

    def record(self) -> dict[str, Any]:
        """What the cluster and the evidence keep: name, description, hash, files."""
        return {"name": self.name, "description": self.description, "hash": self.hash, "files": dict(self.files)}

    def cluster_name(self, base_name: str) -> str:
        return f"{base_name}-{self.name}"

    def reload(self) -> PlatformProfile:
        """The profile as its directory is now (:func:`load`). Raises ProfileError."""
        return load(self.root)

    def write_kind_config(self, base_config: Path) -> Path:
        """The kind config ``base_config`` with this profile built in, written to the cache
        (harness.platform.kind_config.write_kind_config); returns its path."""
        return write_kind_config(self, base_config)

    def install(self, cluster, kind_provider) -> dict[str, float]:
        """Install this profile into the new kind cluster ``cluster`` of ``kind_provider``
        (harness.platform.install.install); returns seconds per step. Raises ProviderError."""
        return install(self, cluster, kind_provider)

    def problem(self, cluster, cluster_name: str) -> str | None:
        """Why the existing cluster ``cluster`` (named ``cluster_name``) is not this profile's as
        its directory is now (its record: harness.platform.record), or None. Raises ApiException
        when the record cannot be read."""
        return mismatch(self, recorded(cluster), cluster_name)


def load(directory: str | Path) -> PlatformProfile:
    """Read and check the profile in ``directory``, part by part (harness.platform.loading).
    Raises ProfileError (file, field, expected, got) for anything the module doc does not allow;
    reads no cluster."""
    root = loading.check_root(directory)
    meta = loading.read_meta(root)
    meta_path = root / PROFILE_FILE
    webhook_tls = meta.get("webhook_tls")
    loading.check_webhook_tls(meta_path, webhook_tls)
    name, description = meta.get("name"), meta.get("description")
    loading.check_name_and_description(meta_path, name, description)
    loading.check_prepared(root, meta_path, meta.get("prepare"))
    prometheus_node_port = loading.check_prometheus(meta_path, meta.get("prometheus"))
    alertmanager_service = loading.check_alertmanager(meta_path, meta.get("alertmanager"))
    patches = loading.kubeadm_patches(root)
    manifests, made = loading.manifests(root, webhook_tls)
    loading.check_webhook_service(meta_path, webhook_tls, made)
    corefile = loading.corefile(root)
    images = loading.image_archives(root)
    loading.check_node_files_path(root)
    files = hashed_tree(root)
    return PlatformProfile(root=root, name=name, description=description.strip(), kubeadm_patches=patches,
                           manifests=manifests, corefile=corefile, images=images,
                           has_node_files=(root / "files").is_dir(), files=files, hash=profile_hash(files),
                           webhook_tls=dict(webhook_tls) if webhook_tls else None,
                           prometheus_node_port=prometheus_node_port, alertmanager_service=alertmanager_service)
