"""The offline kind cluster itself, on a real cluster made from the images `kdrill images build`
makes: nodes, control-plane pods, etcd members, versions, networking and no image pulls.

These run on the session's cluster (clusters/ha.yaml by default: 3 control-plane nodes with
stacked etcd, 2 workers).
"""

from __future__ import annotations

import http.client
import json

import pytest
from kubernetes import client

from harness.components.etcd import etcd_members
from harness.core.waiting import wait_until_or_raise
from harness.kube.images import Build
from harness.kube.workloads import delete_namespace, deploy_http_server, ensure_namespace
from harness.probes.incluster import InClusterProbe

pytestmark = [pytest.mark.cluster]

BUILD = Build()


def expected_shape(cluster) -> tuple[int, int]:
    roles = cluster.nodes_by_role
    return len(roles.get("control-plane", [])), len(roles.get("worker", []))


def test_every_node_is_ready(kdrill_cluster):
    control_planes, workers = expected_shape(kdrill_cluster)
    nodes = kdrill_cluster.core.list_node().items
    assert len(nodes) == control_planes + workers
    not_ready = [n.metadata.name for n in nodes
                 if not any(c.type == "Ready" and c.status == "True" for c in n.status.conditions)]
    assert not_ready == []
    cp = [n for n in nodes if "node-role.kubernetes.io/control-plane" in n.metadata.labels]
    assert len(cp) == control_planes


def test_every_kube_system_pod_is_running(kdrill_cluster):
    control_planes, workers = expected_shape(kdrill_cluster)
    pods = kdrill_cluster.core.list_namespaced_pod("kube-system").items
    not_running = [f"{p.metadata.name}={p.status.phase}" for p in pods if p.status.phase != "Running"]
    assert not_running == []

    def count(prefix):
        return sum(1 for p in pods if p.metadata.name.startswith(prefix))

    for component in ("etcd-", "kube-apiserver-", "kube-controller-manager-", "kube-scheduler-"):
        assert count(component) == control_planes, component
    assert count("kube-proxy-") == control_planes + workers
    assert count("kdrill-netd-") == control_planes + workers
    assert count("coredns-") >= 1


def test_etcd_has_one_started_member_per_control_plane_node(kdrill_cluster):
    control_planes, _ = expected_shape(kdrill_cluster)
    members = etcd_members(kdrill_cluster, kdrill_cluster.nodes_by_role["control-plane"][0])
    assert len(members) == control_planes
    assert all(m.started for m in members), members
    assert sorted(m.name for m in members) == sorted(kdrill_cluster.nodes_by_role["control-plane"])


def test_versions_are_stamped(kdrill_cluster):
    version = BUILD.versions["KUBERNETES_VERSION"]
    assert client.VersionApi(kdrill_cluster.api).get_code().git_version == version
    node = kdrill_cluster.nodes_by_role["control-plane"][0]
    out = kdrill_cluster.node_exec(node, ["kubectl", "version", "--client", "-o", "json"]).stdout
    assert json.loads(out)["clientVersion"]["gitVersion"] == version
    kubelets = {n.status.node_info.kubelet_version for n in kdrill_cluster.core.list_node().items}
    assert kubelets == {version}


def test_http_service_answers_by_dns_name_in_cluster_and_on_127_0_0_1_from_host(kdrill_cluster):
    ns = "kdrill-smoke"
    delete_namespace(kdrill_cluster, ns)
    ensure_namespace(kdrill_cluster, ns)
    try:
        deploy_http_server(kdrill_cluster, ns, "web", replicas=2, node_port=30081)
        probe = InClusterProbe(kdrill_cluster, ns, "dns-client",
                               {"by-name": f"http://web.{ns}.svc.cluster.local/"},
                               interval_seconds=0.5, duration_seconds=8, max_requests=16).start()

        def finished():
            lines = probe.results()
            return lines if any(r.get("done") for r in lines) else None

        lines = wait_until_or_raise(finished, 60, description="in-cluster probe done").value
        calls = sorted((r for r in lines if not r.get("done")), key=lambda r: r["t"])
        # A new Service takes a moment to be served (EndpointSlice, kube-proxy, CoreDNS); from
        # the first answer on, every call by name must succeed.
        first_ok = next((i for i, r in enumerate(calls) if r["ok"]), None)
        assert first_ok is not None, calls
        assert all(r["ok"] for r in calls[first_ok:]), calls[first_ok:]
        # The host reaches the Service only through the 127.0.0.1 mapping to the NodePort.
        conn = http.client.HTTPConnection("127.0.0.1", kdrill_cluster.host_port(30081), timeout=5)
        conn.request("GET", "/")
        response = conn.getresponse()
        body = json.loads(response.read())
        assert response.status == 200 and body["pod"].startswith("web-")
    finally:
        delete_namespace(kdrill_cluster, ns)


def full_reference(image: str) -> str:
    """``kdrill/x:1`` -> ``docker.io/kdrill/x:1``, as containerd names it; registry refs unchanged."""
    first = image.split("/")[0]
    if "/" in image and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"docker.io/{image}" if "/" in image else f"docker.io/library/{image}"


def test_no_node_ever_pulls_an_image(kdrill_cluster):
    preloaded = set(BUILD.tags.values())
    running = {full_reference(c.image) for p in kdrill_cluster.core.list_pod_for_all_namespaces().items
               for c in p.spec.containers}
    assert running <= preloaded, running - preloaded
    nodes = kdrill_cluster.nodes_by_role["control-plane"] + kdrill_cluster.nodes_by_role["worker"]
    for node in nodes:
        log = kdrill_cluster.node_exec(node, ["journalctl", "-u", "containerd", "--no-pager", "-o", "cat"],
                                       timeout_seconds=60).stdout
        pulls = [line for line in log.splitlines() if "PullImage" in line]
        assert pulls == [], f"{node}: {pulls[:3]}"


def test_the_pause_image_answers_minus_v_and_exits_as_upstreams_does(kdrill_cluster):
    # kubeadm's upgrade health check runs the pause image with -v as a Job and waits for it to
    # complete: a pause that ignored -v stopped `kubeadm upgrade apply` (control-plane-upgrade).
    from harness.core import proc

    out = proc.run(["docker", "run", "--rm", "--network", "none", BUILD.tags["pause"], "-v"], timeout_seconds=60,
                   check=False)
    assert out.returncode == 0 and "pause" in out.stdout, (out.returncode, out.stdout, out.stderr)


def unallocated_cluster_ip(cluster, subnet: str) -> str:
    """An address of the Service CIDR that no Service has (from the top of the range down)."""
    import ipaddress

    taken = {s.spec.cluster_ip for s in cluster.core.list_service_for_all_namespaces().items}
    network = ipaddress.ip_network(subnet)
    return next(str(a) for a in reversed(list(network.hosts())[-256:]) if str(a) not in taken)


def test_untranslated_cluster_ip_traffic_is_refused_on_the_node_not_answered_from_outside(kdrill_cluster):
    """A ClusterIP kube-proxy has not programmed on a node must not leave the node: without the
    provider's guard (KindProvider.guard_service_subnet) it followed the default route and
    something outside the cluster answered it (HTTP 404 over TLS, kept alive by the API servers)."""
    provider = kdrill_cluster.kind_provider
    address = unallocated_cluster_ip(kdrill_cluster, provider.service_subnet())
    roles = kdrill_cluster.nodes_by_role
    for node in roles["control-plane"] + roles["worker"]:
        # From the node's own network (how an API server calls an APIService's Service).
        result = kdrill_cluster.node_exec(node, ["curl", "-sk", "-m", "3", "-o", "/dev/null", "-w", "%{http_code}",
                                                 f"https://{address}/"], check=False)
        assert (result.returncode, result.stdout) == (7, "000"), \
            f"{node}: {address} was not refused (curl exit {result.returncode}, HTTP {result.stdout})"
    # From a pod (forwarded traffic), on a worker.
    ns = "kdrill-guard"
    delete_namespace(kdrill_cluster, ns)
    ensure_namespace(kdrill_cluster, ns)
    try:
        probe = InClusterProbe(kdrill_cluster, ns, "leak-client", {"unallocated": f"http://{address}/"},
                               interval_seconds=0.5, duration_seconds=3, max_requests=4,
                               node=roles["worker"][-1]).start()
        lines = wait_until_or_raise(lambda: (r := probe.results()) and any(x.get("done") for x in r) and r, 60,
                                    description="in-cluster probe done").value
        calls = [r for r in lines if not r.get("done")]
        assert calls and all(not r["ok"] and r["status"] is None and "refused" in (r["error"] or "").lower()
                             for r in calls), calls
    finally:
        delete_namespace(kdrill_cluster, ns)
