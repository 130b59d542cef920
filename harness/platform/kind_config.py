"""A platform profile built into a kind config: the cluster name it makes (refused when another
config's cluster has it), the profile's kubeadm patches after the config's own, and files/
mounted on every node; written under ``$KDRILL_CACHE/platforms/`` for kind to read."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from harness.core.files import write_text_atomic
from harness.kube.providers import ProviderError
from harness.kube.providers.kind import CLUSTERS_DIR, cluster_name_of, config_path
from harness.platform.reading import NODE_FILES_DIR, PROFILE_FILE, ProfileError


def check_cluster_name(profile, config: str | Path) -> str | None:
    """The name of the cluster ``profile`` (a :class:`harness.platform.profile.PlatformProfile`)
    makes from kind config ``config`` (a name in clusters/ or a path), or None when there is no
    such config (KindProvider says so). Raises ProfileError when another config in clusters/ names
    its own cluster so: the profile's cluster and that plain one would be one cluster, the plain
    one taken for a failed installation (and its delete command offered), or the profile's
    drilled as that config's."""
    try:
        base = config_path(str(config))
        name = profile.cluster_name(cluster_name_of(base))
    except (ProviderError, OSError, yaml.YAMLError, AttributeError):
        return None
    for other in sorted(CLUSTERS_DIR.glob("*.yaml")):
        try:
            taken = other.resolve() != base.resolve() and cluster_name_of(other) == name
        except (OSError, yaml.YAMLError, AttributeError):
            continue
        if taken:
            raise ProfileError(profile.root / PROFILE_FILE, "name", f"a name that, after {base.name}'s cluster "
                               "name, names no other kind config's cluster",
                               f"{profile.name!r}: the cluster would be {name}, the cluster of {other}")
    return name


def kind_config(profile, base: dict[str, Any]) -> dict[str, Any]:
    """The kind config ``base`` (a parsed kind config) with ``profile`` built in: its cluster name
    ``<base name>-<profile name>``, the profile's kubeadm patches after the base's own, and
    ``files/`` mounted read-only on every node at :data:`NODE_FILES_DIR`. ``base`` is not changed."""
    config = json.loads(json.dumps(base))
    config["name"] = profile.cluster_name(base.get("name") or "kind")
    config["kubeadmConfigPatches"] = list(config.get("kubeadmConfigPatches") or []) + list(profile.kubeadm_patches)
    if profile.has_node_files:
        # kind makes one control-plane node of a config that lists none (v1alpha4 defaults): it
        # needs the mount too, so it is listed here.
        config["nodes"] = config.get("nodes") or [{"role": "control-plane"}]
        for node in config["nodes"]:
            node.setdefault("extraMounts", []).append(
                {"hostPath": str(profile.root / "files"), "containerPath": NODE_FILES_DIR, "readOnly": True})
    return config


def write_kind_config(profile, base_config: Path) -> Path:
    """Write :func:`kind_config` of ``base_config`` under ``$KDRILL_CACHE/platforms/`` (default
    ``~/.cache/kdrill``), named by the profile's hash; returns its path."""
    cache = Path(os.environ.get("KDRILL_CACHE", Path.home() / ".cache" / "kdrill"))
    out = cache / "platforms" / f"{profile.name}-{profile.hash[:12]}" / f"{base_config.stem}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    config = kind_config(profile, yaml.safe_load(base_config.read_text()) or {})
    # Atomic: pytest-xdist workers write it at the same moment (harness/core/workers.py).
    write_text_atomic(out, f"# kind config {base_config.name} with platform profile {profile.root} (sha256 "
                      f"{profile.hash}),\n# written by kdrill (harness/platform/kind_config.py); not to be edited.\n"
                      + yaml.safe_dump(config, sort_keys=False))
    return out
