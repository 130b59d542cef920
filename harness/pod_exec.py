"""A command in a pod's container through the API server's ``exec`` subresource, with its exit
code: what ``kubectl exec`` does, without needing kubectl on this machine.

Used by the node agent (:mod:`harness.providers.node_agent`) and the ``command`` probe. Each call
gets an API client of its own: the client library's ``stream()`` swaps the request method of the
ApiClient it is given while it connects, and a probe sharing that client at the moment would send
its plain request as a websocket handshake (seen here: "Handshake status 200 OK").
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

_STDIN, _STDOUT, _STDERR = 0, 1, 2
V5_PROTOCOL = "v5.channel.k8s.io"  # the exec protocol that can end a command's standard input


class PodExecError(RuntimeError):
    """The exec could not be made (no such pod or container, forbidden, the API did not answer)."""


def run(cluster: Any, namespace: str, pod: str, command: list[str], timeout_seconds: float = 60,
        stdin: str | bytes | None = None, container: str | None = None) -> subprocess.CompletedProcess:
    """Run ``command`` in ``namespace/pod`` (its ``container``, default the first); returns a
    CompletedProcess with the exit code, stdout and stderr (text). Raises PodExecError when the exec
    cannot be made, subprocess.TimeoutExpired after ``timeout_seconds`` (the command may still run
    in the container)."""
    from kubernetes import client
    from kubernetes.stream import stream

    core = client.CoreV1Api(cluster.new_api())
    extra = {"container": container} if container else {}
    try:
        ws = stream(core.connect_get_namespaced_pod_exec, pod, namespace, command=command, stdin=stdin is not None,
                    stdout=True, stderr=True, tty=False, _preload_content=False, _request_timeout=timeout_seconds,
                    **extra)
    except Exception as exc:  # ApiException, and the websocket library's own types
        raise PodExecError(f"exec in {namespace}/{pod} not possible: {type(exc).__name__}: {str(exc)[:300]}") from None
    out, err = [], []
    try:
        if stdin is not None:
            if getattr(ws, "subprotocol", None) != V5_PROTOCOL:
                raise PodExecError(f"exec in {namespace}/{pod}: the API server did not agree to exec protocol "
                                   f"{V5_PROTOCOL}, which ends a command's standard input (Kubernetes 1.30+)")
            data = stdin.encode() if isinstance(stdin, str) else stdin
            for start in range(0, len(data), 64 * 1024):
                ws.write_channel(_STDIN, data[start:start + 64 * 1024])
            ws.close_channel(_STDIN)
        deadline = time.monotonic() + timeout_seconds
        while ws.is_open():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(command, timeout_seconds)
            ws.update(timeout=min(left, 1.0))
            out.append(ws.read_channel(_STDOUT))
            err.append(ws.read_channel(_STDERR))
        out.append(ws.read_channel(_STDOUT))
        err.append(ws.read_channel(_STDERR))
        code = ws.returncode
    finally:
        ws.close()
    return subprocess.CompletedProcess(command, code if code is not None else -1, "".join(out), "".join(err))
