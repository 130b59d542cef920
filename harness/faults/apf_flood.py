"""Fault ``apf-flood``: a bounded flood of LIST requests from one ServiceAccount, inside the cluster.

A pod running as ServiceAccount ``flood`` (allowed to list ConfigMaps in its namespace) sends
LISTs of the namespace's ConfigMaps from ``workers`` threads to the API server's ClusterIP, for
at most ``flood_seconds`` and ``flood_max_requests`` requests, and prints what it got: status
codes, latencies and the API Priority and Fairness headers naming the FlowSchema and priority
level each request was classified into. With ``confine``, the fault first installs a FlowSchema
that sends this ServiceAccount's requests to a priority level of its own with one concurrency
share, no lending or borrowing and a queue of two (what a platform does to fence in a noisy client).

Everything it makes is in the ledger before it is made (pod, ServiceAccount and Role by
namespace, FlowSchema and PriorityLevelConfiguration by name); the revert deletes the pod at
once (grace 0: the flood stops) and the cluster-scoped objects, and verifies all are gone.

Source: "API Priority and Fairness" (https://kubernetes.io/docs/concepts/cluster-administration/flow-control/).
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.core.waiting import wait_until
from harness.faults import Fault, FaultNotReverted
from harness.kube.providers import Cluster
from harness.kube.workloads import TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY
from harness.spec.params import Param

NAME = "kdrill-flood"  # FlowSchema and PriorityLevelConfiguration (cluster-scoped)
POD = SERVICE_ACCOUNT = "flood"
# A deadline for the verification, not a measurement: deleting a pod with grace 0 and two objects.
GONE_DEADLINE_SECONDS = 90

# Runs in the toolbox image (python3 only, no client library). Bounded in requests and seconds.
FLOOD_SCRIPT = r"""
import collections, json, os, ssl, threading, time, urllib.error, urllib.request
workers, seconds, most = int(os.environ["WORKERS"]), float(os.environ["SECONDS"]), int(os.environ["MAX_REQUESTS"])
sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
token = open(sa + "token").read()
ctx = ssl.create_default_context(cafile=sa + "ca.crt")
url = "https://%s:%s/api/v1/namespaces/%s/configmaps" % (
    os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"], os.environ["NAMESPACE"])
lock, codes, levels, schemas, latencies, sent = threading.Lock(), collections.Counter(), collections.Counter(), collections.Counter(), [], [0]
started = time.time()
end = started + seconds
def work():
    while time.time() < end:
        with lock:
            if sent[0] >= most:
                return
            sent[0] += 1
        t = time.time()
        request = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
        headers = {}
        try:
            with urllib.request.urlopen(request, context=ctx, timeout=10) as answer:
                answer.read()
                code, headers = str(answer.status), answer.headers
        except urllib.error.HTTPError as exc:
            code, headers = str(exc.code), exc.headers
        except Exception as exc:
            code = type(exc).__name__
        with lock:
            codes[code] += 1
            levels[headers.get("X-Kubernetes-PF-PriorityLevel-UID", "") if headers else ""] += 1
            schemas[headers.get("X-Kubernetes-PF-FlowSchema-UID", "") if headers else ""] += 1
            latencies.append(round(time.time() - t, 4))
threads = [threading.Thread(target=work) for _ in range(workers)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("KDRILL-FLOOD " + json.dumps({"started_at": started, "ended_at": time.time(), "codes": codes,
      "priority_level_uids": levels, "flow_schema_uids": schemas, "latencies_seconds": latencies}))
"""


class ApfFlood(Fault):
    """The flood pod in ``namespace`` (and, with ``confine``, its FlowSchema and priority level)."""

    kind = "apf-flood"
    params = {
        "workers": Param("integer", "concurrent LIST loops in the flood pod", minimum=1, maximum=64),
        "flood_seconds": Param("seconds", "the flood stops after this long", minimum=1, maximum=120),
        "flood_max_requests": Param("integer", "and after this many requests", minimum=1, maximum=20000),
        "configmaps": Param("integer", "ConfigMaps in the namespace, so each LIST returns that many", minimum=0,
                            maximum=2000),
        "confine": Param("bool", "install a FlowSchema sending the flood to a priority level of its own"),
        "baseline_seconds": Param("seconds", "probes before the flood", minimum=1, maximum=120),
        "after_seconds": Param("seconds", "probes after it", minimum=1, maximum=120),
    }

    def __init__(self, cluster: Cluster, namespace: str, confine: bool = False, workers: int = 8,
                 flood_seconds: float = 20, flood_max_requests: int = 2000) -> None:
        super().__init__(cluster)
        self.namespace, self.confine = namespace, bool(confine)
        self.workers, self.flood_seconds, self.flood_max_requests = int(workers), float(flood_seconds), int(flood_max_requests)
        self.flowcontrol = client.FlowcontrolApiserverV1Api(cluster.api)
        self.rbac = client.RbacAuthorizationV1Api(cluster.api)

    def target(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "pod": POD, "confine": self.confine,
                "cluster_scoped": [f"flowschema/{NAME}", f"prioritylevelconfiguration/{NAME}"] if self.confine else []}

    def where(self) -> list[Any]:
        return [f"pod {self.namespace}/{POD} as serviceaccount {SERVICE_ACCOUNT}"
                + (f"; flowschema and priority level {NAME}" if self.confine else "")]

    def inject(self) -> None:
        core, ns = self.cluster.core, self.namespace
        core.create_namespaced_service_account(ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=SERVICE_ACCOUNT)),
                                               _request_timeout=10)
        self.rbac.create_namespaced_role(ns, client.V1Role(metadata=client.V1ObjectMeta(name=SERVICE_ACCOUNT), rules=[
            client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["list"])]), _request_timeout=10)
        self.rbac.create_namespaced_role_binding(ns, client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name=SERVICE_ACCOUNT),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=SERVICE_ACCOUNT),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name=SERVICE_ACCOUNT, namespace=ns)]),
            _request_timeout=10)
        if self.confine:
            self._confine()
        env = {"WORKERS": self.workers, "SECONDS": self.flood_seconds, "MAX_REQUESTS": self.flood_max_requests,
               "NAMESPACE": ns}
        core.create_namespaced_pod(ns, client.V1Pod(
            metadata=client.V1ObjectMeta(name=POD, labels={"app": POD}),
            spec=client.V1PodSpec(
                service_account_name=SERVICE_ACCOUNT, restart_policy="Never", termination_grace_period_seconds=0,
                containers=[client.V1Container(
                    name="flood", image=TOOLBOX_IMAGE, image_pull_policy=TOOLBOX_PULL_POLICY,
                    command=["python3", "-c", FLOOD_SCRIPT],
                    env=[client.V1EnvVar(name=k, value=str(v)) for k, v in env.items()],
                    # The flood's client side stays small on a 2-core machine: the load is the API server's.
                    resources=client.V1ResourceRequirements(limits={"cpu": "500m", "memory": "256Mi"}))])),
            _request_timeout=10)

    def _confine(self) -> None:
        level = {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
                 "metadata": {"name": NAME, "labels": {"kdrill": "apf-flood"}},
                 "spec": {"type": "Limited", "limited": {
                     # No lending and, above all, no borrowing: by default a level borrows the seats
                     # others lend (workload-low lends 90 %), and the flood would never be held.
                     "nominalConcurrencyShares": 1, "lendablePercent": 0, "borrowingLimitPercent": 0,
                     "limitResponse": {"type": "Queue", "queuing": {"queues": 1, "handSize": 1, "queueLengthLimit": 2}}}}}
        schema = {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
                  "metadata": {"name": NAME, "labels": {"kdrill": "apf-flood"}},
                  "spec": {"priorityLevelConfiguration": {"name": NAME}, "matchingPrecedence": 500,
                           "distinguisherMethod": {"type": "ByUser"},
                           "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {
                               "name": SERVICE_ACCOUNT, "namespace": self.namespace}}],
                               "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                                  "namespaces": ["*"], "clusterScope": True}]}]}}
        self.flowcontrol.create_priority_level_configuration(level, _request_timeout=10)
        self.flowcontrol.create_flow_schema(schema, _request_timeout=10)

    def result(self) -> dict[str, Any] | None:
        """What the flood pod printed when it finished (see FLOOD_SCRIPT), or None before that."""
        try:
            log = self.cluster.core.read_namespaced_pod_log(POD, self.namespace, _request_timeout=10)
        except ApiException:
            return None
        line = next((line for line in log.splitlines() if line.startswith("KDRILL-FLOOD ")), None)
        return json.loads(line.split(" ", 1)[1]) if line else None

    def revert(self) -> None:
        for delete in (lambda: self.cluster.core.delete_namespaced_pod(POD, self.namespace, grace_period_seconds=0,
                                                                      _request_timeout=10),
                       lambda: self.flowcontrol.delete_flow_schema(NAME, _request_timeout=10),
                       lambda: self.flowcontrol.delete_priority_level_configuration(NAME, _request_timeout=10)):
            try:
                delete()
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def verify_reverted(self) -> None:

        def absent(read) -> bool:
            try:
                read()
            except ApiException as exc:
                if exc.status == 404:
                    return True
                raise
            return False

        def all_gone() -> bool:
            return (absent(lambda: self.cluster.core.read_namespaced_pod(POD, self.namespace, _request_timeout=10))
                    and absent(lambda: self.flowcontrol.read_flow_schema(NAME, _request_timeout=10))
                    and absent(lambda: self.flowcontrol.read_priority_level_configuration(NAME, _request_timeout=10)))

        if not wait_until(all_gone, GONE_DEADLINE_SECONDS, interval_seconds=1.0).ok:
            raise FaultNotReverted(f"flood pod {self.namespace}/{POD} or flowschema/prioritylevel {NAME} "
                                   f"still exists {GONE_DEADLINE_SECONDS} s after the revert")

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "ApfFlood":
        return cls(cluster, target["namespace"], confine=target.get("confine", False))
