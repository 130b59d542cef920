"""Ledger kind ``drill-cluster``: not a failure, but a kind cluster a drill creates for itself.

A claim that holds only on another cluster configuration (Secrets with an EncryptionConfiguration)
is checked on a cluster made for it: one node, created from ``clusters/encryption-at-rest.yaml.j2``
beside the session's cluster, and deleted by the revert. It is in the ledger before ``kind create
cluster`` starts, so ``kdrill recover`` deletes it after a crash or ``kill -9`` like a drill's
namespace; the entry names the new cluster itself, so recover reaches it even when the session's
cluster is gone.

Its kube-apiserver is given ``--encryption-provider-config`` through the kind config's kubeadm
patches. The EncryptionConfiguration encrypts ``secrets`` with one provider (``secretbox`` or
``aescbc``) and a 32-byte key made for this cluster only (:mod:`secrets`), then ``identity`` so
what was stored before stays readable. The key lives in a 0700 directory under kdrill's state
directory (``$KDRILL_STATE_DIR/clusters/<name>``), bind-mounted read-only into the node, and is
deleted with the cluster; it never enters evidence.

A rehearsal of an upgrade runs on a cluster made for it too: ``kubernetes`` names an older release
built on request (``kdrill images build kubernetes-v1.34.4``, harness.kube.images.releases); the
cluster is HA, made from ``clusters/upgrade-rehearsal.yaml.j2`` as ``<session cluster>-upg``, every
node mounting the drill's directory (how the revert knows it is the drill's), and deleted by the
revert whatever state the upgrade left it in: an upgraded cluster is never the user's.

Source: "Encrypting Confidential Data at Rest"
(https://kubernetes.io/docs/tasks/administer-cluster/encrypt-data/); "Upgrading kubeadm clusters"
(https://kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-upgrade/).
"""

from __future__ import annotations

import base64
import logging
import re
import secrets
import shutil
from pathlib import Path
from typing import Any

import yaml

from harness.components.upgrade import minor
from harness.core import resources
from harness.core.ledger import state_dir
from harness.faults import Fault, FaultError, FaultNotReverted
from harness.kube.images import Build, read_versions, releases
from harness.kube.providers import Cluster
from harness.kube.providers.kind import KindProvider, kubeconfig_cache_path
from harness.spec.params import Param

log = logging.getLogger("kdrill.faults.drill_cluster")

TEMPLATE = resources.clusters_dir() / "encryption-at-rest.yaml.j2"
UPGRADE_TEMPLATE = resources.clusters_dir() / "upgrade-rehearsal.yaml.j2"
NODE_DIR = "/etc/kubernetes/kdrill-encryption"  # where the node and kube-apiserver see the directory
UPGRADE_NODE_DIR = "/etc/kdrill-drill"  # where an upgrade cluster's nodes see the drill's directory
CONFIG_FILE = "encryption-config.yaml"
PROVIDERS = ("secretbox", "aescbc")  # both take a 32-byte key ("Encrypting Confidential Data at Rest")
KEY_NAME = "kdrill-key1"
# `kind create cluster` of one node took 26 s here, with kdrill-ha running beside it; the health
# wait is the provider's (every node Ready, every kube-system pod running).
CREATE_WAIT_SECONDS = 300


NAME_SUFFIX = "-enc"  # every encrypted cluster is called <session cluster>-enc: nothing else is deleted
UPGRADE_SUFFIX = "-upg"  # and every upgrade rehearsal's <session cluster>-upg


def check_name(name: str, suffix: str = NAME_SUFFIX) -> None:
    """Raise ValueError unless ``name`` is a kind cluster name this kind may create and delete:
    lowercase letters, digits and '-', ending in ``suffix`` (:data:`NAME_SUFFIX` or
    :data:`UPGRADE_SUFFIX`)."""
    if not (isinstance(name, str) and re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,40})" + re.escape(suffix), name)):
        raise ValueError(f"drill cluster name {name!r}: expected lowercase letters, digits and '-' ending in "
                         f"{suffix!r}")


def check_kubernetes(version: str, built_before: bool = False) -> str:
    """``version`` when it is a release kdrill builds (the default one or one of
    harness.kube.images.releases()) or, ``built_before`` (a ledger entry's: the checkout may have
    moved on since), any v1.MINOR.PATCH; raises ValueError otherwise."""
    known = releases() + [read_versions()["KUBERNETES_VERSION"]]
    if built_before and isinstance(version, str) and re.fullmatch(r"v1\.[0-9]{1,3}\.[0-9]{1,3}", version):
        return version
    if version not in known:
        raise ValueError(f"Kubernetes {version!r}: expected one of {', '.join(known)} (clusters/images/releases)")
    return version


def directory_of(name: str) -> Path:
    """The cluster's key directory, always derived from its name (never read from a ledger):
    ``<state dir>/clusters/<name>``, absolute."""
    return (state_dir() / "clusters" / name).absolute()


def encryption_configuration(provider: str, key: bytes) -> dict[str, Any]:
    """The EncryptionConfiguration (apiserver.config.k8s.io/v1) that encrypts Secrets with
    ``provider`` and ``key`` (32 bytes), falling back to ``identity`` for reads of what was stored
    in plain text. Raises ValueError for another provider or key length."""
    if provider not in PROVIDERS:
        raise ValueError(f"encryption provider {provider!r}: expected one of {', '.join(PROVIDERS)}")
    if len(key) != 32:
        raise ValueError(f"{provider} needs a 32-byte key, got {len(key)} bytes")
    return {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration",
            "resources": [{"resources": ["secrets"],
                           "providers": [{provider: {"keys": [{"name": KEY_NAME,
                                                               "secret": base64.b64encode(key).decode()}]}},
                                         {"identity": {}}]}]}


def render_kind_config(encryption_dir: Path) -> str:
    """The kind config of the cluster, reading its EncryptionConfiguration from ``encryption_dir``
    (an absolute host path). Raises ValueError for a relative path (kind would resolve it
    against its own working directory)."""
    from jinja2 import Environment, StrictUndefined

    if not encryption_dir.is_absolute():
        raise ValueError(f"encryption directory {encryption_dir} is not an absolute path")
    if ":" in str(encryption_dir) or not str(encryption_dir).isprintable():
        # Docker's volume syntax splits at ':'; a control character has no business in a path.
        raise ValueError(f"encryption directory {str(encryption_dir)!r}: a path without ':' or control characters "
                         "(set KDRILL_STATE_DIR to one)")
    env = Environment(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False)
    return env.from_string(TEMPLATE.read_text()).render(encryption_dir=str(encryption_dir), node_dir=NODE_DIR,
                                                        config_file=CONFIG_FILE)


def render_upgrade_config(drill_dir: Path) -> str:
    """The HA kind config of an upgrade rehearsal's cluster, every node mounting ``drill_dir`` (an
    absolute host path without ':'). Raises ValueError otherwise."""
    from jinja2 import Environment, StrictUndefined

    if not drill_dir.is_absolute() or ":" in str(drill_dir) or not str(drill_dir).isprintable():
        raise ValueError(f"drill directory {str(drill_dir)!r}: an absolute path without ':' or control characters "
                         "(set KDRILL_STATE_DIR to one)")
    env = Environment(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False)
    return env.from_string(UPGRADE_TEMPLATE.read_text()).render(drill_dir=str(drill_dir), node_dir=UPGRADE_NODE_DIR)


def expected_prefix(provider: str) -> bytes:
    """What kube-apiserver writes ahead of a value this configuration encrypted:
    ``k8s:enc:<provider>:v1:<key name>:``."""
    return f"k8s:enc:{provider}:v1:{KEY_NAME}:".encode()


class DrillCluster(Fault):
    """The kind cluster ``name`` with Secrets encrypted at rest by ``provider`` or, given
    ``kubernetes`` (a version, see :func:`check_kubernetes`), an HA cluster at that release for an
    upgrade rehearsal: :meth:`inject` creates it (:attr:`created` is its :class:`Cluster`
    afterwards), :meth:`revert` deletes it and its directory. ``cluster`` (the session's) is only
    where the drill runs from: the ledger entry names the new cluster. Raises ValueError for a
    name, provider or version it may not use."""

    kind = "drill-cluster"
    needs_node_access = True
    node_access_level = "container"
    node_capability = "creates and deletes a kind cluster of its own beside the session's (docker)"
    # What an upgrade rehearsal (drills/test_control_plane_upgrade.py) is given; the encrypted
    # cluster of secrets-at-rest takes its provider from planted-secret's params.
    params = {
        "from_version": Param("choice", "the release the cluster is created at (built on request: kdrill images "
                              "build kubernetes-<version>)", choices=tuple(releases())),
        "skip_to_version": Param("version", "a release two minors above from_version, which kubeadm must refuse"),
        "order": Param("choice", "documented: kubeadm's order; kubelet-first: one worker's kubelet before the "
                       "control plane (against the skew policy); newer-kubelet-joins: one worker removed and joined "
                       "again with the next minor's kubeadm and kubelet (against it too)",
                       choices=("documented", "kubelet-first", "newer-kubelet-joins")),
        "removed_kubelet_flag": Param("name", "a kubelet flag the older kubeadm writes and the newer kubelet no "
                                      "longer takes (case kubelet-first)", required=False),
        "replicas": Param("integer", "pods of the workload, spread over the two workers", minimum=2, maximum=8),
        "min_available": Param("integer", "the workload's PodDisruptionBudget minAvailable", minimum=1, maximum=7),
        "probe_seconds": Param("seconds", "how long the probe pod calls the workload (outlasting the upgrade)",
                               minimum=600, maximum=3600),
    }

    @classmethod
    def params_problem(cls, params: dict[str, Any], manifests: list[dict[str, Any]]) -> tuple[str, str, str] | None:
        """An upgrade rehearsal's skip_to_version two minors above from_version (one minor above is
        the upgrade kubeadm allows), and a PodDisruptionBudget a drain can get through:
        min_available below replicas (else no eviction is ever allowed and each drain times out)."""
        if "from_version" in params and "skip_to_version" in params:
            two_above = minor(params["from_version"]) + 2
            if minor(params["skip_to_version"]) != two_above:
                return ("skip_to_version", f"a release of 1.{two_above}, two minors above from_version "
                        f"{params['from_version']}", repr(params["skip_to_version"]))
        if "replicas" in params and "min_available" in params and params["min_available"] >= params["replicas"]:
            return ("min_available", f"fewer than replicas ({params['replicas']}): a drain evicts a pod only while "
                    "more than minAvailable are ready", repr(params["min_available"]))
        return None

    def __init__(self, cluster: Cluster, name: str, provider: str = "secretbox", kubernetes: str | None = None,
                 built_before: bool = False) -> None:
        """``built_before``: ``kubernetes`` is a ledger entry's, only reverted (:func:`check_kubernetes`)."""
        if provider not in PROVIDERS:
            raise ValueError(f"encryption provider {provider!r}: expected one of {', '.join(PROVIDERS)}")
        check_name(name, UPGRADE_SUFFIX if kubernetes else NAME_SUFFIX)
        self.kubernetes = check_kubernetes(kubernetes, built_before) if kubernetes else None
        self.name, self.provider = name, provider
        self.directory = directory_of(name)
        # The ledger records the new cluster: recover deletes it whatever became of the session's.
        super().__init__(Cluster(name=name, provider="kind", kubeconfig=kubeconfig_cache_path(name),
                                 context=f"kind-{name}", node_access=True))
        self.host = cluster
        self.created: Cluster | None = None
        self.create_seconds: float | None = None

    def target(self) -> dict[str, Any]:
        if self.kubernetes:
            return {"name": self.name, "kubernetes": self.kubernetes, "directory": str(self.directory)}
        return {"name": self.name, "provider": self.provider, "directory": str(self.directory)}

    def where(self) -> list[Any]:
        if self.kubernetes:
            return [f"kind cluster {self.name} (HA, Kubernetes {self.kubernetes}, for an upgrade rehearsal)"]
        return [f"kind cluster {self.name} (EncryptionConfiguration: {self.provider})"]

    def evidence(self) -> dict[str, Any]:
        made = {"cluster": self.name, "create_seconds": None if self.create_seconds is None
                else round(self.create_seconds, 1)}
        if self.kubernetes:
            return {**made, "kubernetes": self.kubernetes}
        return {**made, "encryption_provider": self.provider, "key_name": KEY_NAME}

    def _ours(self) -> bool:
        """Whether kind cluster :attr:`name` is the one this fault made: its node mounts
        :attr:`directory` (a cluster of that name made otherwise is never deleted here)."""

        return bool({str(self.directory), str(self.directory.resolve())} & KindProvider(name=self.name).host_mounts())

    def inject(self) -> None:

        if self.kubernetes:  # a ledger entry's release is only reverted, never created again
            check_kubernetes(self.kubernetes)
        if KindProvider(name=self.name).exists():
            # Before anything is touched: a leftover of a crashed run is `kdrill recover`'s to
            # delete, and a cluster of that name made otherwise is not kdrill's to delete at all.
            raise FaultError(f"kind cluster {self.name} already exists; `kdrill recover` deletes one a crashed "
                             f"drill left, otherwise delete it yourself (kind delete cluster --name {self.name})")
        if self.directory.exists():  # an earlier run's, whose cluster recover found gone
            shutil.rmtree(self.directory)
        self.directory.mkdir(parents=True, mode=0o700)
        kind_config = self.directory / "kind.yaml"
        if self.kubernetes:
            kind_config.write_text(render_upgrade_config(self.directory))
        else:
            config = encryption_configuration(self.provider, secrets.token_bytes(32))
            key_file = self.directory / CONFIG_FILE
            key_file.touch(mode=0o600)
            key_file.write_text(yaml.safe_dump(config, sort_keys=False))
            kind_config.write_text(render_kind_config(self.directory))
        # Before kind runs, so `kdrill recover` finds a kubeconfig path even mid-creation (the
        # revert needs only `kind delete cluster`); creation writes the real one over it.
        kubeconfig = self.cluster.kubeconfig
        kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        if not kubeconfig.exists():
            kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
            kubeconfig.chmod(0o600)
        image = Build(release=self.kubernetes if self.kubernetes in releases() else None).node_image
        provider = KindProvider(kind_config, name=self.name, image=image)
        # Its own kubeconfig file: the user's current context is left alone.
        self.create_seconds = provider.create(wait_seconds=CREATE_WAIT_SECONDS, kubeconfig=kubeconfig)
        self.created = provider.cluster()

    def revert(self) -> None:

        provider = KindProvider(name=self.name)
        if provider.exists():
            if not self._ours():
                # e.g. inject refused because the name was taken: that cluster is left alone.
                log.warning("kind cluster %s does not mount %s: not made by this drill, left alone",
                            self.name, self.directory)
                return
            provider.delete()
        shutil.rmtree(self.directory, ignore_errors=True)
        self.cluster.kubeconfig.unlink(missing_ok=True)

    def verify_reverted(self) -> None:

        left = []
        if KindProvider(name=self.name).exists() and self._ours():
            left.append(f"kind cluster {self.name} still exists")
        if self.directory.exists():
            left.append(f"{self.directory} (its encryption key) still exists")
        if left:
            raise FaultNotReverted("; ".join(left))

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "DrillCluster":
        # The name is checked and the directory derived from it, not taken from the entry: a
        # forged or corrupt entry can name only a *-enc or *-upg cluster this kind made (see
        # _ours). The release only describes it: one no longer in the checkout is still reverted.
        if not isinstance(target, dict):
            raise ValueError(f"drill-cluster ledger target: expected a mapping, got {target!r}")
        provider = target.get("provider", "secretbox")
        return cls(cluster, target.get("name"), provider if provider in PROVIDERS else "secretbox",
                   kubernetes=target.get("kubernetes"), built_before=True)
