"""pytest-xdist workers, one cluster each (harness/core/workers.py): names, host ports, contexts, and
the merge of what the workers hand back."""

import pytest
import yaml

from harness.core.resources import clusters_dir
from harness.core.workers import (
    MAX_WORKERS,
    WorkerError,
    cluster_name,
    host_port_offset,
    merge_worker_outputs,
    worker_context,
    worker_id,
    worker_index,
)
from harness.kube.providers import Cluster, ProviderError
from harness.kube.providers.kind import host_ports, offset_host_ports, write_offset_config


def test_each_worker_gets_its_own_cluster_name_and_host_ports():
    assert cluster_name("kdrill-ha", "gw0") == "kdrill-ha-gw0"
    assert cluster_name("kdrill-ha", "gw1") == "kdrill-ha-gw1"
    offsets = [host_port_offset(f"gw{i}") for i in range(MAX_WORKERS)]
    assert offsets == [100 * (i + 1) for i in range(MAX_WORKERS)]
    # The ha config maps two NodePorts: no worker's host port is another's, or the plain cluster's.
    config = yaml.safe_load((clusters_dir() / "ha.yaml").read_text())
    seen = set(host_ports(config).values())
    for offset in offsets:
        ports = set(host_ports(offset_host_ports(config, offset)).values())
        assert not ports & seen and all(p < 65536 for p in ports)
        seen |= ports


@pytest.mark.parametrize("worker", ["gw8", "gw", "master", "", "gw-1", "gw01x"])
def test_a_worker_without_a_cluster_of_its_own_is_refused(worker):
    with pytest.raises(WorkerError):
        worker_index(worker)


def test_worker_id_is_none_outside_a_worker():
    class Config:
        pass

    assert worker_id(Config()) is None
    worker = Config()
    worker.workerinput = {"workerid": "gw1"}
    assert worker_id(worker) == "gw1"


def test_the_nodeports_stay_and_only_host_ports_move(tmp_path, monkeypatch):
    monkeypatch.setenv("KDRILL_CACHE", str(tmp_path))
    path = write_offset_config(clusters_dir() / "ha.yaml", "kdrill-ha-gw1", 200)
    written = yaml.safe_load(path.read_text())
    assert written["name"] == "kdrill-ha-gw1"
    assert host_ports(written) == {30080: 30280, 30081: 30281, 30090: 30290}
    # The original config is untouched.
    assert host_ports(yaml.safe_load((clusters_dir() / "ha.yaml").read_text())) == {30080: 30080, 30081: 30081, 30090: 30090}


def test_a_port_pushed_out_of_range_is_refused():
    config = {"nodes": [{"extraPortMappings": [{"containerPort": 30080, "hostPort": 65500,
                                                "listenAddress": "127.0.0.1"}]}]}
    with pytest.raises(ProviderError, match="outside 1..65535"):
        offset_host_ports(config, 100)


def test_only_loopback_mappings_are_host_ports():
    config = {"nodes": [{"extraPortMappings": [{"containerPort": 30080, "hostPort": 30180, "listenAddress": "127.0.0.1"},
                                               {"containerPort": 30081, "hostPort": 30181}]}]}
    assert host_ports(config) == {30080: 30180}


def test_a_cluster_maps_nodeports_to_its_host_ports():
    cluster = Cluster(name="c", provider="kind", kubeconfig=None, context=None, node_access=True,
                      host_ports={30080: 30180})
    assert cluster.host_port(30080) == 30180
    assert cluster.host_port("30080") == 30180
    assert cluster.host_port(30081) == 30081  # nothing known: the NodePort itself


def test_each_worker_takes_its_own_context():
    assert worker_context(["a", "b"], "gw0") == "a"
    assert worker_context(["a", "b"], "gw1") == "b"
    with pytest.raises(WorkerError, match="once per worker|one per worker"):
        worker_context(["a"], "gw1")
    with pytest.raises(WorkerError, match="given twice"):
        worker_context(["a", "a"], "gw0")


def test_merge_keeps_each_workers_cluster_and_every_planned_case():
    platform = {"name": "p", "hash": "h1"}
    merged = merge_worker_outputs({
        "gw1": {"planned": ["a", "b"], "ran": ["b"], "meta": {"cluster": {"name": "kdrill-ha-gw1"}, "platform": platform}},
        "gw0": {"planned": ["a", "b", "c"], "ran": ["a"], "meta": {"cluster": {"name": "kdrill-ha-gw0"},
                                                                    "platform": platform}},
    })
    assert list(merged["workers"]) == ["gw0", "gw1"]
    assert merged["workers"]["gw0"]["cluster"] == {"name": "kdrill-ha-gw0"}
    assert merged["workers"]["gw1"]["ran"] == ["b"]
    assert merged["planned"] == ["a", "b", "c"]
    assert merged["platform"] == platform


def test_merge_says_when_a_worker_handed_nothing_back_or_platforms_differ():
    merged = merge_worker_outputs({
        "gw0": {"planned": ["a"], "meta": {"platform": {"hash": "h1"}}},
        "gw2": {"planned": ["a"], "meta": {"platform": {"hash": "h2"}}},
        "gw1": None,
    })
    assert "crashed" in merged["workers"]["gw1"]["note"]
    assert merged["platform"]["hash"] is None and "different platform profiles" in merged["platform"]["note"]
    assert merge_worker_outputs({"gw0": None})["platform"]["hash"] is None


def test_host_ports_are_read_from_dockers_mappings():
    from harness.kube.providers.kind import docker_node_ports

    column = ("127.0.0.1:30180->30080/tcp, 127.0.0.1:30181->30081/tcp\n"
              "127.0.0.1:34089->6443/tcp\n\n0.0.0.0:30500->30500/tcp\n")
    assert docker_node_ports(column) == {30080: 30180, 30081: 30181}
    assert docker_node_ports("") == {}
    # How Docker prints neighbouring ports (kind's two NodePorts on a worker): a range.
    assert docker_node_ports("127.0.0.1:30180-30181->30080-30081/tcp\n127.0.0.1:34089->6443/tcp\n") == \
        {30080: 30180, 30081: 30181}


class FakeWorkerConfig:
    def __init__(self, worker, count, dist="worksteal"):
        self.workerinput = {"workerid": worker, "workercount": count}
        self.dist = dist

    def getoption(self, name, default=None):
        return self.dist if name == "dist" else default


def test_a_replacement_worker_or_dist_each_gets_no_cluster():
    from harness.plugin.workers import worker_problem

    assert worker_problem(FakeWorkerConfig("gw1", 2)) is None
    assert "replaces a crashed worker" in worker_problem(FakeWorkerConfig("gw2", 2))
    assert "--dist each" in worker_problem(FakeWorkerConfig("gw0", 2, dist="each"))


# --- a host port another container publishes: refused before kind starts --------------------------

PS = ("kdrill-ha-worker 127.0.0.1:30080-30081->30080-30081/tcp\n"
      "kdrill-ha-external-load-balancer 127.0.0.1:41223->6443/tcp\n"
      "some-registry 0.0.0.0:5000->5000/tcp, :::5000->5000/tcp\n")


def test_published_host_ports_reads_ranges_and_every_address():
    from harness.kube.providers.kind import published_host_ports

    assert published_host_ports(PS) == {30080: "kdrill-ha-worker", 30081: "kdrill-ha-worker",
                                        41223: "kdrill-ha-external-load-balancer", 5000: "some-registry"}


def test_a_cluster_whose_host_ports_are_taken_is_refused_before_kind_runs(monkeypatch, tmp_path):
    import subprocess

    from harness.kube.providers import ProviderError
    from harness.kube.providers import kind as kind_module
    from harness.kube.providers.kind import KindProvider, conflicting_host_ports

    config = yaml.safe_load((clusters_dir() / "ha.yaml").read_text())
    assert conflicting_host_ports(config, PS) == {30080: "kdrill-ha-worker", 30081: "kdrill-ha-worker"}
    assert conflicting_host_ports(offset_host_ports(config, 100), PS) == {}

    def run(cmd, **kwargs):
        if cmd[:2] == ["docker", "ps"]:
            return subprocess.CompletedProcess(cmd, 0, stdout=PS, stderr="")
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="")  # docker image inspect
    monkeypatch.setattr(kind_module.proc, "run", run)
    # A path only: on a fresh machine the kind CLI is not built yet, and kind is never run here.
    monkeypatch.setattr(kind_module, "kind_binary", lambda: "kind")
    provider = KindProvider("ha", name="kdrill-ha-gatekeeper")
    monkeypatch.setattr(provider, "_run", lambda *a, **k: pytest.fail("kind must not be asked"))
    with pytest.raises(ProviderError, match=r"hostPort 30080 is already published by container kdrill-ha-worker "
                                            r"\(2 port\(s\) taken: 30080, 30081\).*--host-port-offset 100"):
        provider.create()
