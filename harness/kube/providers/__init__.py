"""Cluster providers: where a drill's cluster comes from and what the harness may do to it.

A provider hands the harness a :class:`Cluster`: how to reach the API server (a kubeconfig and
context), and how, if at all, to reach the nodes: for kind, ``docker exec`` into the node
containers; for a cluster reached only through its kubeconfig, optionally the node agent
(:mod:`harness.kube.providers.node_agent`: privileged pods and pod exec). What each channel can do is
:data:`NODE_ACCESS_LEVELS`; faults that need more than a cluster's channel gives are skipped, with
the reason.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from kubernetes import client, config

from harness.core import proc
from harness.spec.plugins import NODE_ACCESS_LEVELS


class ProviderError(RuntimeError):
    """The cluster could not be created, found or reached; the message says how to fix it."""


class ClusterGone(ProviderError):
    """The cluster a ledger entry names no longer exists: there is nothing left to revert."""


class NoNodeAccess(ProviderError):
    """The fault needs node access this cluster's provider does not give."""


# Each channel gives a prefix of NODE_ACCESS_LEVELS (what each level means: harness.spec.plugins).
NODE_CHANNEL_GIVES = {"docker": NODE_ACCESS_LEVELS, "agent": ("exec",), "": ()}
NODE_CHANNEL_SAYS = {
    "docker": "docker exec into kind node containers",
    "agent": "the node agent (privileged pods, commands through the API server's pod exec)",
    "": "none",
}


@dataclass
class Cluster:
    """A reachable cluster.

    ``name``: kind cluster name or the kubeconfig context; ``provider``: ``"kind"`` or
    ``"existing"``; ``kubeconfig``/``context``: how the API server is reached (always through
    ``127.0.0.1`` for kind); ``node_access``: whether ``node_exec`` works; ``node_agent``: the
    :class:`harness.kube.providers.node_agent.NodeAgent` that runs it when the nodes are not kind
    containers on this machine; ``host_ports``: {NodePort: its ``127.0.0.1`` port on this machine}.
    """

    name: str
    provider: str
    kubeconfig: Path
    context: str | None
    node_access: bool
    nodes_by_role: dict[str, list[str]] = field(default_factory=dict)
    node_agent: Any = None
    host_ports: dict[int, int] = field(default_factory=dict)

    def host_port(self, node_port: int) -> int:
        """The ``127.0.0.1`` port on this machine that reaches NodePort ``node_port`` (kind's
        ``extraPortMappings``; another cluster beside this one maps the same NodePort elsewhere).
        ``node_port`` itself when no mapping is known (a cluster reached through a kubeconfig)."""
        return self.host_ports.get(int(node_port), int(node_port))

    @property
    def node_channel(self) -> str:
        """How the nodes are reached: ``"docker"``, ``"agent"`` or ``""`` (not at all)."""
        if not self.node_access:
            return ""
        return "agent" if self.node_agent is not None else "docker"

    def node_access_gives(self, level: str) -> bool:
        """Whether this cluster's node channel gives ``level`` (one of :data:`NODE_ACCESS_LEVELS`)."""
        return level in NODE_CHANNEL_GIVES[self.node_channel]

    @cached_property
    def api(self) -> client.ApiClient:
        """An API client with the cluster's kubeconfig. Callers set per-request timeouts."""
        return config.new_client_from_config(config_file=str(self.kubeconfig), context=self.context)

    def _configuration(self) -> client.Configuration:
        """The kubeconfig's client configuration, with no retries."""
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(self.kubeconfig), context=self.context,
                                client_configuration=configuration)
        configuration.retries = False
        return configuration

    def new_api(self) -> client.ApiClient:
        """A fresh API client for a probe: its own connection pool, and no retries, so one
        sample is one request and its latency is that request's."""
        return client.ApiClient(self._configuration())

    def api_as(self, token: str) -> client.ApiClient:
        """An API client that is someone else: the kubeconfig's server and CA, but ``token`` (for
        example a ServiceAccount's, from a TokenRequest) as its only credential: no client
        certificate and no exec plugin of the kubeconfig's user, so the API server authorizes
        exactly that identity. The configuration is settled before the client is made: its
        connection pool takes the client certificate when it is built."""
        configuration = self._configuration()
        configuration.cert_file = configuration.key_file = None
        configuration.refresh_api_key_hook = None
        configuration.api_key = {"authorization": f"Bearer {token}"}
        configuration.api_key_prefix = {}
        return client.ApiClient(configuration)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api)

    def describe(self) -> dict:
        described = {"name": self.name, "provider": self.provider, "context": self.context,
                     "kubeconfig": str(self.kubeconfig), "node_access": self.node_access}
        if self.node_agent is not None:
            described["node_channel"] = "agent"
        return described

    # Node access: on kind the node is a container on this machine's Docker engine; elsewhere,
    # with the node agent, a privileged pod on the node.

    def require_node_access(self, why: str, level: str = "exec") -> None:
        """Raise NoNodeAccess unless this cluster's node channel gives ``level``."""
        if self.node_access_gives(level):
            return
        if not self.node_access:
            raise NoNodeAccess(f"{why} needs node access (docker exec into kind node containers, or the node "
                               f"agent: --node-agent); cluster {self.name!r} is an existing cluster reached "
                               "through a kubeconfig")
        raise NoNodeAccess(f"{why} needs node access of level {level!r}, which {NODE_CHANNEL_SAYS[self.node_channel]} "
                           f"does not give on cluster {self.name!r} (see harness.kube.providers.NODE_ACCESS_LEVELS)")

    def node_exec(self, node: str, command: list[str], timeout_seconds: float = 60,
                  check: bool = True, stdin: str | None = None, read_only: bool = False) -> subprocess.CompletedProcess:
        """Run ``command`` in the node container ``node``; returns the completed process.
        ``read_only``: it changes nothing, so through the node agent an exec that is not set up
        at once is given up (harness.kube.pod_exec.READ_ONLY_CONNECT_SECONDS) rather than waited for.

        Raises NoNodeAccess on a cluster without node access, ProviderError when ``check`` and the
        command fails (or, ``read_only``, its exec is given up), subprocess.TimeoutExpired after
        ``timeout_seconds``.
        """
        self.require_node_access(f"running {command[0]!r} on node {node!r}")
        if self.node_agent is not None:
            return self.node_agent.exec(node, command, timeout_seconds=timeout_seconds, check=check, stdin=stdin,
                                        read_only=read_only)
        result = proc.run(["docker", "exec", "-i", node, *command], input=stdin, timeout_seconds=timeout_seconds,
                          check=False)
        if check and result.returncode != 0:
            raise ProviderError(f"on node {node}: {' '.join(command)} exited {result.returncode}: "
                                f"{result.stderr.strip() or result.stdout.strip()}")
        return result

    def copy_to_node(self, node: str, host_path: str, node_path: str, timeout_seconds: float = 120) -> None:
        """Copy a file from this machine to ``node_path`` on ``node`` (bytes as they are). Raises
        NoNodeAccess, ProviderError."""
        self.require_node_access(f"copying {host_path} to node {node!r}")
        if self.node_agent is not None:
            return self.node_agent.copy_to_node(node, host_path, node_path, timeout_seconds)
        self._docker_cp(host_path, f"{node}:{node_path}", timeout_seconds)

    def copy_from_node(self, node: str, node_path: str, host_path: str, timeout_seconds: float = 120) -> None:
        """Copy ``node_path`` on ``node`` to a file on this machine. Raises NoNodeAccess, ProviderError."""
        self.require_node_access(f"copying {node_path} from node {node!r}")
        if self.node_agent is not None:
            return self.node_agent.copy_from_node(node, node_path, host_path, timeout_seconds)
        self._docker_cp(f"{node}:{node_path}", host_path, timeout_seconds)

    @staticmethod
    def _docker_cp(source: str, destination: str, timeout_seconds: float) -> None:
        try:
            proc.run(["docker", "cp", source, destination], timeout_seconds=timeout_seconds)
        except proc.CommandFailed as exc:
            raise ProviderError(str(exc)) from None
