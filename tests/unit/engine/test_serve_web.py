"""The built-in HTTP server as the runner and the Python drills make it (harness/engine/workload.py
serve_web): how many replicas and which Service, from the scenario's workload and the caller.
Pure choice; a stand-in records the deployment asked for (the real one runs in every drill)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.engine.workload import HOST_NODE_PORT, serve_web
from harness.kube.workloads import http_server_deployment
from harness.spec.manifests import APP


@pytest.mark.parametrize(("workload", "replicas", "from_host", "asked", "returned"), [
    ({}, None, False, (2, None), None),  # the runner's default: two replicas behind a ClusterIP
    ({"replicas": 4}, None, False, (4, None), None),
    ({"replicas": 4, "node_port": 30081}, None, False, (4, 30081), 30081),
    ({"replicas": 4}, 1, False, (1, None), None),  # the caller's count wins (leader-failover's one)
    ({}, None, True, (2, HOST_NODE_PORT), HOST_NODE_PORT),  # a drill calling it from the host
    ({"node_port": 30081}, None, True, (2, 30081), 30081),  # the scenario's port wins
])
def test_replicas_and_service_follow_the_scenario_then_the_caller(workload, replicas, from_host, asked, returned):
    calls = []
    drill = SimpleNamespace(workload=workload, cluster="c", namespace="ns")
    got = serve_web(drill, replicas, from_host=from_host,
                    deploy=lambda cluster, ns, app, n, node_port=None: calls.append((cluster, ns, app, n, node_port)))
    assert calls == [("c", "ns", APP, *asked)]
    assert got == returned


def test_a_drills_shape_and_deadline_reach_the_deployment_it_asks_for():
    """worker-node-loss pins its pods to two workers through ``shape``: serve_web must pass it on."""
    calls = []

    def shape(deployment):
        deployment.spec.template.spec.node_name = "pinned"

    def deploy(cluster, ns, app, n, node_port=None, shape=None, ready_timeout_seconds=180):
        deployment = http_server_deployment(app, n)
        shape(deployment)
        calls.append((deployment.spec.template.spec.node_name, ready_timeout_seconds))

    serve_web(SimpleNamespace(workload={}, cluster="c", namespace="ns"), 4, deploy=deploy, shape=shape,
              ready_timeout_seconds=240)
    assert calls == [("pinned", 240)]
