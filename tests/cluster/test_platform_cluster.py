"""A platform profile built into a real kind cluster (harness/platform/profile.py): the example
profile, plus an image archive, on a one-node cluster beside the session's. Each part of the
profile is checked where the platform shows it: the API server's audit log (kubeadm patch and
files/), a write refused by the profile's policy (manifests/), a name answered by the profile's
Corefile from inside a pod (coredns/), the image in the node's container runtime (images/), the
record on the cluster and in a run's evidence, and a changed profile refused."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from platform_example import ARCHIVE_IMAGE, BASE_CONFIG

from harness.core.waiting import wait_until
from harness.kube.workloads import TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY
from harness.platform.profile import load, recorded

pytestmark = [pytest.mark.cluster, pytest.mark.node_access]

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def platform_cluster(platform_cluster_build):
    """The example profile with an image archive added, built into a one-node kind cluster
    (platform_example.py; its creation may have started in the background during the recovery
    tests); deleted after this module. Yields (provider, profile directory)."""
    yield platform_cluster_build.wait()
    platform_cluster_build.delete()


def test_the_cluster_is_named_and_recorded_by_its_profile(platform_cluster, platform_cluster_build):
    provider, profile_dir = platform_cluster
    profile = load(profile_dir)
    assert provider.name == "kdrill-pp-example"
    assert recorded(provider.cluster()) == profile.record()
    assert provider.platform_problem() is None
    installed = re.search(r"platform profile example \(sha256 \w+\) installed: (.*)", platform_cluster_build.output())
    assert installed, platform_cluster_build.output()
    assert {step.split()[0] for step in installed.group(1).split(", ")} == {"images", "manifests", "coredns"}


def test_the_kubeadm_patch_and_files_give_the_api_server_its_audit_policy(platform_cluster):
    provider, _ = platform_cluster
    cluster = provider.cluster()
    node = cluster.nodes_by_role["control-plane"][0]
    cluster.core.create_namespaced_secret("default", client.V1Secret(
        metadata=client.V1ObjectMeta(name="audited"), string_data={"k": "v"}), _request_timeout=10)
    try:
        def audited() -> bool:
            log = cluster.node_exec(node, ["cat", "/var/log/kubernetes/audit/audit.log"], check=False).stdout
            return any('"resource":"secrets"' in line and '"name":"audited"' in line and '"verb":"create"' in line
                       for line in log.splitlines())
        assert wait_until(audited, 30, interval_seconds=1.0).ok, "no audit event for the Secret's creation"
        # Level None for reads: the policy from files/ is the one in force, not a default.
        log = cluster.node_exec(node, ["cat", "/var/log/kubernetes/audit/audit.log"]).stdout
        assert not any('"verb":"list"' in line for line in log.splitlines())
    finally:
        cluster.core.delete_namespaced_secret("audited", "default", _request_timeout=10)


def test_the_manifests_policy_refuses_what_it_says(platform_cluster):
    provider, _ = platform_cluster
    cluster = provider.cluster()
    denied = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="denied", labels={"kdrill.io/platform-denied": "x"}))
    with pytest.raises(ApiException) as refused:
        cluster.core.create_namespaced_config_map("default", denied, dry_run="All", _request_timeout=10)
    assert refused.value.status in (403, 422) and "kdrill.io/platform-denied" in refused.value.body
    allowed = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="allowed"))
    cluster.core.create_namespaced_config_map("default", allowed, dry_run="All", _request_timeout=10)


def test_the_corefile_answers_its_name_inside_the_cluster(platform_cluster):
    provider, _ = platform_cluster
    cluster = provider.cluster()
    script = ("import socket\nfor name in ('platform-check.kdrill.internal', 'kubernetes.default.svc.cluster.local'):\n"
              "    print(name, socket.gethostbyname(name))\n")
    pod = client.V1Pod(metadata=client.V1ObjectMeta(name="lookup"), spec=client.V1PodSpec(
        restart_policy="Never", termination_grace_period_seconds=1, containers=[client.V1Container(
            name="lookup", image=TOOLBOX_IMAGE, image_pull_policy=TOOLBOX_PULL_POLICY,
            command=["python3", "-c", script])]))
    cluster.core.create_namespaced_pod("default", pod, _request_timeout=10)
    try:
        done = wait_until(lambda: cluster.core.read_namespaced_pod("lookup", "default", _request_timeout=10)
                          .status.phase in ("Succeeded", "Failed"), 120, interval_seconds=1.0)
        logs = cluster.core.read_namespaced_pod_log("lookup", "default", _request_timeout=10)
        assert done.ok, logs
        assert "platform-check.kdrill.internal 10.96.0.1" in logs, logs
        assert "kubernetes.default.svc.cluster.local 10.96.0.1" in logs, logs  # the cluster's names still work
    finally:
        cluster.core.delete_namespaced_pod("lookup", "default", grace_period_seconds=0, _request_timeout=10)


def test_the_image_archive_is_on_the_node(platform_cluster):
    provider, _ = platform_cluster
    cluster = provider.cluster()
    node = cluster.nodes_by_role["control-plane"][0]
    images = cluster.node_exec(node, ["crictl", "images", "-o", "json"]).stdout
    tags = {t for i in json.loads(images)["images"] for t in i.get("repoTags") or []}
    assert ARCHIVE_IMAGE in tags, sorted(tags)


def test_a_changed_profile_is_refused_on_the_cluster_built_from_the_old_one(platform_cluster, tmp_path):
    provider, profile_dir = platform_cluster
    changed = tmp_path / "example"
    shutil.copytree(profile_dir, changed)
    (changed / "coredns" / "Corefile").write_text((changed / "coredns" / "Corefile").read_text()
                                                  .replace("cache 30", "cache 5"))
    base = tmp_path / "base.yaml"
    base.write_text(BASE_CONFIG)
    result = subprocess.run([sys.executable, "-m", "harness.cli", "cluster", "create", "--config", str(base),
                             "--platform", str(changed)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0, result.stdout
    assert "changed: coredns/Corefile" in result.stderr and "kdrill cluster delete --platform" in result.stderr, \
        result.stderr


def test_a_run_on_the_cluster_names_its_profile_in_the_evidence(platform_cluster, tmp_path):
    """A drill that needs nothing but the API (webhook-blast-radius, both cases) on the profile's
    cluster, reached only through its kubeconfig: it finds the profile's webhooks and maps what
    their backend's outage blocks against what their configurations say, and run.json and the
    report carry the profile. The example's webhook blocks only the application writes it takes
    in; the careless one blocks a kube-system write, which fails the drill's
    system_writes_blocked expectation and nothing else: the map is what fails the verdict, not a
    broken drill. A drill that needs node access (worker-node-loss) is skipped there, its record
    saying what it would have done on the nodes."""
    provider, profile_dir = platform_cluster
    started = time.time()
    result = subprocess.run([sys.executable, "-m", "harness.cli", "--reports", str(tmp_path / "reports"), "run",
                             "worker-node-loss", "webhook-blast-radius", "--run-id", "platform-run",
                             "--kubeconfig", str(provider.kubeconfig_path()),
                             "--context", f"kind-{provider.name}", "--allow-context", f"kind-{provider.name}"],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode != 0, "a drill failed, so kdrill run must say so: " + result.stdout[-2000:]
    run_dir = tmp_path / "reports" / "platform-run"
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["platform"] == load(profile_dir).record(), (meta.get("platform"), result.stdout[-2000:])
    assert f"example, sha256 {load(profile_dir).hash}" in (run_dir / "report.html").read_text()
    # The run says where the platform's images come from: the profile's webhook runs kdrill's
    # toolbox, never pulled (the node holds it); CoreDNS comes from registry.k8s.io.
    images = {i["image"]: {**i, "source": s["source"]} for s in meta["image_sources"]["sources"] for i in s["images"]}
    toolbox = images["docker.io/kdrill/toolbox:v0.1.0"]
    assert "platform-policy/Deployment/policy-webhook" in toolbox["workloads"], toolbox
    assert "Never" in toolbox["pull_policies"] and toolbox["nodes_without"] == [], toolbox
    coredns = [i for name, i in images.items() if name.startswith("registry.k8s.io/coredns/")]
    assert coredns and coredns[0]["workloads"] == ["kube-system/Deployment/coredns"], coredns
    skipped = json.loads((run_dir / "worker-node-loss.json").read_text())
    assert skipped["verdict"] == "skipped", skipped["verdict"]
    assert any("does not give: it freezes a worker's node container whole" in e for e in skipped["errors"]), \
        skipped["errors"]
    cluster = provider.cluster()
    for case in ("refused", "blackhole"):
        record = json.loads((run_dir / f"webhook-blast-radius--{case}.json").read_text())
        backend = record["observations"]["blast_radius"]["platform-policy/policy-webhook"]
        # Reached through its kubeconfig alone: no node to cut kube-apiserver's connections on, and
        # the record says so (kdrill-webhook closes each connection, so the outage shows anyway).
        assert backend["connections_cut"]["cut"] is None, backend["connections_cut"]
        assert backend["connections_cut"]["why"].startswith("no node access"), backend["connections_cut"]
        assert backend["baseline_not_admitted"] == {}
        assert backend["webhooks"] == ["validating/careless-audit/audit.careless.example",
                                      "validating/platform-policy/policy.platform.example"], backend["webhooks"]
        failed = {x["name"]: x["measured"] for x in record["expectations"] if x["verdict"] != "passed"}
        assert record["verdict"] == "failed" and list(failed) == ["system_writes_blocked"], \
            (case, record["verdict"], record["errors"], failed)
        assert failed["system_writes_blocked"] == 1, failed
        writes = backend["writes"]
        # The example's webhook blocks application writes its rules and selectors take in...
        assert writes["configmap-create@drill"]["outcome"] == "rejected", writes["configmap-create@drill"]
        assert writes["configmap-create@drill"]["webhook"] == "policy.platform.example"
        assert writes["deployment-create@drill"]["outcome"] == "rejected"
        # ...and not what its namespaceSelector, objectSelector or rules leave out; the careless
        # one takes in kube-system's ConfigMaps, and the map names it as their blocker.
        assert writes["configmap-create@kube-system"]["outcome"] == "rejected", writes["configmap-create@kube-system"]
        assert writes["configmap-create@kube-system"]["webhook"] == "audit.careless.example"
        for name in ("configmap-create-opted-out@drill", "pod-create@drill", "lease-update@kube-node-lease",
                     "service-update@platform-policy"):
            assert writes[name]["outcome"] == "admitted", (name, writes[name])
        rejected = [w["seconds"] for w in writes.values() if w["outcome"] == "rejected"]
        # Refused fails at once; a black hole holds each write for the webhook's timeoutSeconds (5 s).
        assert (max(rejected) < 2.5) if case == "refused" else (min(rejected) >= 4.5), (case, rejected)
    # A failed verdict still reverts: the backend serves again, and the careless webhook admits
    # the kube-system write it blocked during the outage.
    ready = cluster.apps.read_namespaced_deployment("policy-webhook", "platform-policy", _request_timeout=10)
    assert (ready.status.ready_replicas or 0) == ready.spec.replicas, ready.status
    cluster.core.create_namespaced_config_map("kube-system", client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="after-the-drill")), dry_run="All", _request_timeout=10)
    assert time.time() - started < 900
