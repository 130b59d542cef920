"""Command probe: a command run at an interval in a pod or on a node; a sample succeeds when the
command exits 0 within ``timeout_seconds`` (and, with ``stdout_contains``, prints that text).

Where it runs (``where``):

- ``{pod: NAME}`` (in the drill's namespace unless ``namespace`` is given), optionally
  ``container``: through the API server's pod exec (:mod:`harness.kube.pod_exec`), so with the API
  server down every sample fails: it measures the path through the control plane, as
  ``kubectl exec`` would;
- ``{node: NAME}`` or ``{node_role: control-plane | worker}`` (the first node of that role, by
  name): on the node itself, through the cluster's node channel (``docker exec`` on kind, the node
  agent elsewhere); the scenario then needs node access (level ``exec``).

Each sample is one command, bounded by ``timeout_seconds``; its detail is the exit code and the
first line of output. Sample ``labels``: ``exit`` (the code, or ``timeout``/``error``).
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

from harness.core.timeline import Sample
from harness.kube import pod_exec
from harness.probes import Probe

_NAME_253 = {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", "maxLength": 253}
_NAME_63 = {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}
ROLES = ("control-plane", "worker")


def node_of(cluster: Any, where: dict[str, Any]) -> str:
    """The node ``where`` names: its ``node``, or the first node (by name) of its ``node_role``.
    Raises ValueError when the cluster has no node of that role."""
    if "node" in where:
        return where["node"]
    nodes = sorted((getattr(cluster, "nodes_by_role", None) or {}).get(where["node_role"]) or [])
    if not nodes:
        raise ValueError(f"cluster {cluster.name} has no {where['node_role']} node")
    return nodes[0]


class CommandProbe(Probe):
    """Run ``command`` where ``where`` says every ``interval_seconds``."""

    kind = "command"
    in_probe_pod = False
    required = ("command", "where")
    fields = {
        "command": {"type": "array", "minItems": 1, "maxItems": 64, "items": {"type": "string", "maxLength": 4096},
                    "x-expected": "the command and its arguments, a list of strings (no shell unless you run one)"},
        "where": {"anyOf": [
            {"type": "object", "additionalProperties": False, "required": ["pod"],
             "properties": {"pod": _NAME_253, "namespace": _NAME_63, "container": _NAME_63}},
            {"type": "object", "additionalProperties": False, "required": ["node"], "properties": {"node": _NAME_253}},
            {"type": "object", "additionalProperties": False, "required": ["node_role"],
             "properties": {"node_role": {"enum": list(ROLES)}}}],
            "x-expected": "{pod: NAME[, namespace: NS][, container: NAME]}, {node: NAME} or "
                          "{node_role: control-plane|worker}"},
        "stdout_contains": {"type": "string", "minLength": 1, "maxLength": 1024,
                            "x-expected": "text the command's output must hold for a sample to succeed"},
        "interval_seconds": {"type": "number", "minimum": 0.5, "maximum": 60,
                             "x-expected": "seconds between commands, 0.5 to 60"},
        "timeout_seconds": {"type": "number", "minimum": 0.5, "maximum": 60,
                            "x-expected": "seconds a command may take before its sample fails, 0.5 to 60"},
    }

    @staticmethod
    def problems(spec: dict[str, Any]) -> list[tuple[str, str, str]]:
        """What the schema cannot say of ``command``: a program to run (an empty name runs nothing,
        each sample would fail as "error"), and no NUL byte (an exec's arguments cannot hold one)."""
        found = []
        command = spec.get("command") or [""]
        if not command[0].strip():
            found.append(("command[0]", "the program to run (its name or path)", repr(command[0])))
        found += [(f"command[{i}]", "text without a NUL character", repr(arg)[:80])
                  for i, arg in enumerate(command) if "\0" in arg]
        return found

    @staticmethod
    def node_access(spec: dict[str, Any]) -> str | None:
        """What the probe does on a node (a phrase after "it"), or None when it runs in a pod."""
        where = spec.get("where") or {}
        if "node" in where or "node_role" in where:
            return f"runs the command probe {spec.get('name')!r} on a node ({' '.join(spec.get('command') or [])[:80]})"
        return None

    @classmethod
    def for_scenario(cls, spec: dict[str, Any], context) -> "CommandProbe":
        return cls(spec["name"], context.cluster, spec["command"], spec["where"], namespace=context.namespace,
                   stdout_contains=spec.get("stdout_contains"),
                   timeout_seconds=float(spec.get("timeout_seconds", 5.0)),
                   interval_seconds=float(spec.get("interval_seconds", 2.0)), max_seconds=context.max_seconds)

    def __init__(self, name: str, cluster: Any, command: list[str], where: dict[str, Any], namespace: str = "default",
                 stdout_contains: str | None = None, timeout_seconds: float = 5.0, **kwargs) -> None:
        super().__init__(name, **kwargs)
        self.cluster, self.command, self.where = cluster, list(command), dict(where)
        self.namespace = where.get("namespace", namespace)
        self.stdout_contains, self.timeout_seconds = stdout_contains, timeout_seconds
        self.node = node_of(cluster, where) if "pod" not in where else None

    def _run(self) -> subprocess.CompletedProcess:
        if self.node is not None:
            return self.cluster.node_exec(self.node, self.command, timeout_seconds=self.timeout_seconds, check=False)

        return pod_exec.run(self.cluster, self.namespace, self.where["pod"], self.command, self.timeout_seconds,
                            container=self.where.get("container"))

    def sample(self) -> Sample:
        started = time.time()
        where = {"node": self.node} if self.node else {"pod": f"{self.namespace}/{self.where['pod']}"}
        try:
            result = self._run()
        except subprocess.TimeoutExpired:
            return Sample(t=started, ok=False, latency_seconds=time.time() - started,
                          detail=f"no exit within {self.timeout_seconds:g} s", labels={**where, "exit": "timeout"})
        except Exception as exc:  # the exec could not be made: a failed sample, with why
            return Sample(t=started, ok=False, latency_seconds=time.time() - started,
                          detail=f"{type(exc).__name__}: {exc}"[:300], labels={**where, "exit": "error"})
        latency = time.time() - started
        ok = result.returncode == 0 and (self.stdout_contains is None or self.stdout_contains in result.stdout)
        first = (result.stdout.strip() or result.stderr.strip()).splitlines()[:1]
        detail = f"exit {result.returncode}" + (f": {first[0][:200]}" if first else "")
        if result.returncode == 0 and not ok:
            detail += f" (output lacks {self.stdout_contains!r})"
        return Sample(t=started, ok=ok, latency_seconds=latency, detail=detail,
                      labels={**where, "exit": str(result.returncode)})
