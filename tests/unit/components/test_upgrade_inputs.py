"""What harness.components.upgrade does with odd input: versions that are not strings, readings
out of order, components older than 1.25 (the version skew policy's narrower rule), and the shell
lines its steps run on nodes (recorded by a fake cluster, never run)."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from harness.components import upgrade
from harness.components.upgrade import VersionReading, minor, mixed_apiserver_seconds, skew_violations


class FakeCluster:
    """Records each node_exec; answers with ``stdout``."""

    def __init__(self, stdout: str = "", returncode: int = 0) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.stdout, self.returncode = stdout, returncode

    def node_exec(self, node, command, **kwargs):
        self.calls.append((node, command))
        return subprocess.CompletedProcess(command, self.returncode, stdout=self.stdout, stderr="")


@pytest.mark.parametrize("value", [35, b"v1.35.4", ["v1.35.4"], {"gitVersion": "v1.35.4"}])
def test_minor_refuses_what_is_not_a_string_with_a_value_error(value):
    with pytest.raises(ValueError, match="expected v1.MINOR.PATCH"):
        minor(value)


def test_a_reading_with_a_version_that_is_not_a_string_raises_value_error():
    with pytest.raises(ValueError, match="expected v1.MINOR.PATCH"):
        skew_violations(VersionReading(t=0, apiservers={"cp1": "v1.35.0"}, kubelets={"w1": 5}))


def test_a_kubelet_older_than_1_25_may_be_only_two_minors_behind():
    # "kubelet < 1.25 may only be up to two minor versions older than kube-apiserver"
    [found] = skew_violations(VersionReading(t=0, apiservers={"cp1": "v1.27.0"}, kubelets={"w1": "v1.24.0"}))
    assert found == "kubelet on w1: 1.24 is more than two minors older than kube-apiserver 1.27"
    assert skew_violations(VersionReading(t=0, apiservers={"cp1": "v1.26.0"}, kubelets={"w1": "v1.24.0"})) == []
    assert skew_violations(VersionReading(t=0, apiservers={"cp1": "v1.28.0"}, kubelets={"w1": "v1.25.0"})) == []


def test_a_kube_proxy_older_than_1_25_may_be_only_two_minors_from_its_kubelet():
    reading = VersionReading(t=0, apiservers={"cp1": "v1.27.0"}, kubelets={"w1": "v1.27.0"},
                             kube_proxies={"w1": "v1.24.0"})
    assert "kube-proxy on w1: 1.24 is more than two minors from its kubelet (1.27)" in skew_violations(reading)


def test_readings_out_of_order_are_timed_in_time_order():
    two, one = {"cp1": "v1.35.4", "cp2": "v1.34.4"}, {"cp1": "v1.35.4"}
    readings = [VersionReading(t=10, apiservers=one), VersionReading(t=0, apiservers=two)]
    assert mixed_apiserver_seconds(readings) == 10.0


def test_every_part_of_a_step_line_has_its_standard_error_in_the_output():
    cluster = FakeCluster()
    upgrade.replace_kubelet(cluster, "w1")
    [(node, command)] = cluster.calls
    assert command[:2] == ["sh", "-c"] and command[2].startswith("exec 2>&1; install ")


@pytest.mark.parametrize("version", ["v1.35.4; reboot", "$(reboot)", "--config=/tmp/x", "v1.35", "", None, "v1.35.4\n"])
def test_a_version_that_is_not_a_release_never_reaches_kubeadm(version):
    cluster = FakeCluster()
    with pytest.raises(ValueError, match="expected v1.MINOR.PATCH"):
        upgrade.kubeadm_upgrade(cluster, "cp1", True, version)
    with pytest.raises(ValueError, match="expected v1.MINOR.PATCH"):
        upgrade.skip_minor_refused(cluster, "cp1", version)
    assert cluster.calls == []


def test_a_container_name_is_quoted_in_the_crictl_line():
    cluster = FakeCluster(stdout="Kubernetes v1.35.4\n")
    assert upgrade.binary_version(cluster, "cp1", "kube-proxy") == "v1.35.4"
    odd = "x'; reboot; '"
    upgrade.binary_version(cluster, "cp1", odd)
    script = cluster.calls[-1][1][2]
    assert f"--name {shlex.quote(f'^{odd}$')} |" in script and f'"$id" {shlex.quote(odd)} --version' in script


KIND_CONFIG = """apiVersion: kubeadm.k8s.io/v1beta3
kind: InitConfiguration
skipPhases:
- preflight
---
apiVersion: kubeadm.k8s.io/v1beta3
discovery:
  bootstrapToken:
    apiServerEndpoint: lb:6443
kind: JoinConfiguration
skipPhases:
- preflight
"""


def _join_config(tmp_path, config: str) -> subprocess.CompletedProcess:
    """The join step's configuration line, run by this machine's sh and sed on a copy of ``config``."""
    (tmp_path / "kubeadm.conf").write_text(config)
    line = upgrade._JOIN_CONFIG_LINE.replace(upgrade.KIND_KUBEADM_CONFIG, str(tmp_path / "kubeadm.conf")).replace(
        upgrade.JOIN_CONFIG, str(tmp_path / "join.conf"))
    return subprocess.run(["sh", "-c", line + f"cat {tmp_path / 'join.conf'}"], capture_output=True, text=True)


def test_the_join_runs_kubeadm_preflight_kind_skips_and_refuses_a_config_it_cannot_mend(tmp_path):
    mended = _join_config(tmp_path, KIND_CONFIG)
    assert mended.returncode == 0 and "skipPhases" not in mended.stdout and "apiServerEndpoint: lb:6443" in mended.stdout
    other = _join_config(tmp_path, KIND_CONFIG.replace("- preflight\n", "- addon/kube-proxy\n", 1))
    assert other.returncode != 0


def test_a_node_name_is_quoted_in_the_delete_line_and_preflight_errors_are_read_by_name():
    cluster = FakeCluster()
    upgrade.delete_node(cluster, "cp1", "w1; reboot")
    assert shlex.quote("w1; reboot") in cluster.calls[0][1][2]
    output = "\t[ERROR SystemVerification]: cgroups v1\n\t[ERROR KubeletVersion]: the kubelet version is higher\n"
    assert upgrade.failed_checks(output) == {"SystemVerification", "KubeletVersion"}
    assert upgrade.failed_checks("[preflight] Running pre-flight checks\n") == set()
