"""Existing-cluster provider: a cluster reached through a kubeconfig and context.

kdrill has no node access there, so faults that act on node containers are skipped. Destructive
drills refuse any context that is not a kind cluster (``kind-*``) unless it is named in the
allow-list (``--kdrill-allow-context``): a drill must never break a cluster by accident.
"""

from __future__ import annotations

from pathlib import Path

from kubernetes import config

from harness.providers import Cluster, ProviderError


class ContextNotAllowed(ProviderError):
    """A destructive drill was pointed at a context outside the allow-list."""


def current_context(kubeconfig: Path) -> str:
    _, active = config.list_kube_config_contexts(config_file=str(kubeconfig))
    return active["name"]


def check_destructive_allowed(context: str, allow: list[str]) -> None:
    """Raise ContextNotAllowed unless ``context`` is a kind context or in ``allow``."""
    if context.startswith("kind-") or context in allow:
        return
    raise ContextNotAllowed(
        f"context {context!r} is not a kind cluster; destructive drills run on it only when named "
        f"explicitly: --kdrill-allow-context {context}")


def existing_cluster(kubeconfig: str | Path | None, context: str | None) -> Cluster:
    """A Cluster for ``kubeconfig`` (default ``~/.kube/config``) and ``context`` (default: current).

    Raises ProviderError when the file or context does not exist.
    """
    path = Path(kubeconfig or Path.home() / ".kube" / "config").expanduser()
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
