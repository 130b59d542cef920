"""kind's host-port race, reproduced: a one-node cluster whose config maps a host port that another
process holds when kind's ``docker run`` binds it. ``kdrill cluster create`` must see Docker's
transient error, delete the half-made node, say so in one line and try again; the holder lets go
of the port once that line is printed, so the second try succeeds."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from harness.kube.providers.kind import KindProvider

pytestmark = [pytest.mark.cluster, pytest.mark.full]

REPO_ROOT = Path(__file__).resolve().parents[2]
NAME = "kdrill-race"


def config(host_port: int) -> str:
    return f"""kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
    extraPortMappings:
      - {{containerPort: 30999, hostPort: {host_port}, listenAddress: 127.0.0.1}}
kubeadmConfigPatches:
  - |
    kind: KubeletConfiguration
    failCgroupV1: false
"""


def test_a_host_port_taken_during_creation_is_retried_after_the_half_made_node_is_deleted(tmp_path):
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    path = tmp_path / "race.yaml"
    path.write_text(config(port))
    provider = KindProvider(path, name=NAME)
    if provider.exists():
        provider.delete()
    create = subprocess.Popen([sys.executable, "-m", "harness.cli", "cluster", "create", "--config", str(path),
                               "--name", NAME], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    lines: list[str] = []

    def read() -> None:  # releases the port as soon as the retry is announced
        for line in create.stdout:
            lines.append(line.rstrip())
            if "failed transiently" in line:
                holder.close()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = create.wait(timeout=900)
        reader.join(timeout=30)
        retries = [line for line in lines if "failed transiently" in line]
        assert code == 0, "\n".join(lines[-30:])
        assert len(retries) == 1, lines
        assert f"127.0.0.1:{port}" in retries[0] and "attempt 2 of" in retries[0], retries
        assert provider.nodes() == [f"{NAME}-control-plane"]
    finally:
        holder.close()
        if create.poll() is None:
            create.kill()
        provider.delete()
