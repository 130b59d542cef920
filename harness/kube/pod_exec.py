"""A command in a pod's container through the API server's ``exec`` subresource, with its exit
code: what ``kubectl exec`` does, without needing kubectl on this machine.

Used by the node agent (:mod:`harness.kube.providers.node_agent`) and the ``command`` probe. Each call
gets an API client of its own: the client library's ``stream()`` swaps the request method of the
ApiClient it is given while it connects, and a probe sharing that client at the moment would send
its plain request as a websocket handshake (seen here: "Handshake status 200 OK").
"""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Any

import websocket
import yaml

_STDIN, _STDOUT, _STDERR = 0, 1, 2
# How long a read-only command's exec may take to be set up (its websocket handshake): the client
# library sets no timeout on it, and an API server whose etcd member is down holds it until the
# member returns (19.3 s seen, through kind's load balancer, which had sent the connection there
# before its health check took that API server out). A deadline, not a measurement: a read-only
# exec of `true` through the node agent takes 0.06 to 0.13 s on an idle cluster, handshake
# included; 3 s is over 20 times that, and short enough that two such waits leave room in
# etcd-member-loss's 20 s health window (the callers ask again, through another API server).
# Only for commands that change nothing: an abandoned handshake may still start its command later.
READ_ONLY_CONNECT_SECONDS = 3.0
V5_PROTOCOL = "v5.channel.k8s.io"  # the exec protocol that can end a command's standard input


class PodExecError(RuntimeError):
    """The exec could not be made (no such pod or container, forbidden, the API did not answer),
    or its stream was cut."""


def run(cluster: Any, namespace: str, pod: str, command: list[str], timeout_seconds: float = 60,
        stdin: str | bytes | None = None, container: str | None = None,
        read_only: bool = False) -> subprocess.CompletedProcess:
    """Run ``command`` in ``namespace/pod`` (its ``container``, default the first); returns a
    CompletedProcess with the exit code (-1: the stream closed with no exit status), stdout and
    stderr (text). ``read_only``: the command changes nothing, so its exec is given up when it is
    not set up within :data:`READ_ONLY_CONNECT_SECONDS`. Raises PodExecError when the exec cannot
    be made (or, ``read_only``, not in time) or its stream is cut, subprocess.TimeoutExpired after
    ``timeout_seconds`` (the command may still run in the container)."""
    from kubernetes import client
    from kubernetes.stream import stream

    core = client.CoreV1Api(cluster.new_api())
    extra = {"container": container} if container else {}
    def connect():
        return stream(core.connect_get_namespaced_pod_exec, pod, namespace, command=command, stdin=stdin is not None,
                      stdout=True, stderr=True, tty=False, _preload_content=False, _request_timeout=timeout_seconds,
                      **extra)

    try:
        ws = _within(connect, min(timeout_seconds, READ_ONLY_CONNECT_SECONDS)) if read_only else connect()
    except PodExecError as exc:
        raise PodExecError(f"exec in {namespace}/{pod} not possible: {exc}") from None
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
            try:
                ws.update(timeout=min(left, 1.0))
            except (OSError, websocket.WebSocketException) as exc:
                raise PodExecError(f"exec in {namespace}/{pod} cut: {type(exc).__name__}: {str(exc)[:300]}") from None
            out.append(ws.read_channel(_STDOUT))
            err.append(ws.read_channel(_STDERR))
        out.append(ws.read_channel(_STDOUT))
        err.append(ws.read_channel(_STDERR))
        try:
            code = ws.returncode
        except (TypeError, KeyError, IndexError, ValueError, yaml.YAMLError):
            # The client reads the exit status from the stream's error channel: a stream cut
            # before the command ended (its node's kubelet stopped) leaves none there, or an error.
            code = None
    finally:
        ws.close()
    return subprocess.CompletedProcess(command, code if code is not None else -1, "".join(out), "".join(err))


def _within(connect: Any, seconds: float) -> Any:
    """``connect()``, given up after ``seconds``: it runs in a thread of its own, which is left to
    end when the server answers (its stream is then closed at once). Raises PodExecError on
    giving up, else what ``connect`` raises."""
    done: dict[str, Any] = {}
    lock = threading.Lock()

    def attempt() -> None:
        try:
            ws = connect()
        except Exception as exc:  # noqa: BLE001 - handed to the caller
            ws, done["error"] = None, exc
        with lock:
            if done.get("abandoned") and ws is not None:
                ws.close()
            done["ws"] = ws

    worker = threading.Thread(target=attempt, name="pod-exec-connect", daemon=True)
    worker.start()
    worker.join(seconds)
    with lock:
        if "ws" not in done:
            done["abandoned"] = True
            raise PodExecError(f"not set up within {seconds:g} s (a read-only command: given up)")
    if "error" in done:
        raise done["error"]
    return done["ws"]
