"""Existing-cluster provider: a cluster reached through a kubeconfig and context.

kdrill has no node access there, so faults that act on node containers are skipped. Destructive
drills refuse any cluster that is not one of this machine's kind clusters unless its context is
named in the allow-list (``--allow-context``): a drill must never break a cluster by accident.
A context's name proves nothing (anyone can call a production context ``kind-prod``): a cluster
counts as kind only when ``kind get clusters`` on this machine lists it and its API server is a
loopback address. The check reads the kubeconfig and asks kind; it sends nothing to the cluster.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from urllib.parse import urlsplit

from kubernetes import config

from harness.core import proc
from harness.kube.providers import Cluster, ProviderError
from harness.kube.providers.kind import kind_binary


class ContextNotAllowed(ProviderError):
    """A destructive drill was pointed at a context outside the allow-list."""


def current_context(kubeconfig: Path) -> str:
    _, active = config.list_kube_config_contexts(config_file=str(kubeconfig))
    return active["name"]


def server_of(kubeconfig: Path, context: str) -> str:
    """The API server URL ``context`` points at in ``kubeconfig`` ("" when it names none)."""
    contexts, _ = config.list_kube_config_contexts(config_file=str(kubeconfig))
    cluster_name = next((c["context"].get("cluster") for c in contexts if c["name"] == context), None)
    import yaml

    data = yaml.safe_load(Path(kubeconfig).read_text()) or {}
    for entry in data.get("clusters") or []:
        if entry.get("name") == cluster_name:
            return str((entry.get("cluster") or {}).get("server") or "")
    return ""


def local_kind_cluster(context: str, server: str, kind_clusters: list[str]) -> bool:
    """Whether ``context`` is one of this machine's kind clusters: named ``kind-<name>`` with
    ``<name>`` among ``kind_clusters`` (``kind get clusters``) and served on a loopback address."""
    host = urlsplit(server).hostname or ""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    return context.startswith("kind-") and context[len("kind-"):] in kind_clusters and loopback


def check_destructive_allowed(context: str, server: str, allow: list[str], kind_clusters: list[str]) -> None:
    """Raise ContextNotAllowed unless ``context`` is a local kind cluster or named in ``allow``."""
    if context in allow or local_kind_cluster(context, server, kind_clusters):
        return
    raise ContextNotAllowed(
        f"context {context!r} (server {server or 'unknown'}) is not one of this machine's kind clusters; "
        f"destructive drills run on it only with your consent: kdrill run --allow-context {context}")


def kind_clusters() -> list[str]:
    """``kind get clusters`` on this machine ([] when kind is not there: nothing is local kind)."""
    try:

        done = proc.run([kind_binary(), "get", "clusters"], timeout_seconds=30, check=False)
    except Exception:  # no kind, no Docker: then no cluster is a local kind cluster
        return []
    return done.stdout.split() if done.returncode == 0 else []


def default_kubeconfig() -> Path:
    """As kubectl finds it: the first file in ``$KUBECONFIG``, else ``~/.kube/config``."""
    first = next((p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p), None)
    return Path(first or Path.home() / ".kube" / "config").expanduser()


def existing_cluster(kubeconfig: str | Path | None, context: str | None) -> Cluster:
    """A Cluster for ``kubeconfig`` (default: :func:`default_kubeconfig`) and ``context``
    (default: current).

    Raises ProviderError when the file or context does not exist.
    """
    path = Path(kubeconfig).expanduser() if kubeconfig else default_kubeconfig()
    if not path.exists():
        raise ProviderError(f"kubeconfig {path} does not exist")
    try:
        contexts, _ = config.list_kube_config_contexts(config_file=str(path))
    except Exception as exc:  # the client raises ConfigException and others
        raise ProviderError(f"kubeconfig {path} cannot be read: {exc}") from exc
    names = [c["name"] for c in contexts]
    chosen = context or current_context(path)
    if chosen not in names:
        raise ProviderError(f"context {chosen!r} is not in {path} (contexts: {', '.join(names)})")
    return Cluster(name=chosen, provider="existing", kubeconfig=path, context=chosen, node_access=False)


def consented_cluster(kubeconfig: str | Path | None, context: str | None, allow: list[str]) -> Cluster:
    """The :func:`existing_cluster` for ``kubeconfig`` and ``context``, once destructive drills
    may run on it (:func:`check_destructive_allowed` against this machine's kind clusters). Reads
    the kubeconfig and asks kind; sends nothing to the cluster.

    Raises ProviderError (ContextNotAllowed without consent)."""
    cluster = existing_cluster(kubeconfig, context)
    check_destructive_allowed(cluster.context or "", server_of(cluster.kubeconfig, cluster.context or ""),
                              allow, kind_clusters())
    return cluster

