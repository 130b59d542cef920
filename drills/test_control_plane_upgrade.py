"""Drill: an HA control plane upgraded one minor, as kubeadm's documentation says, with workloads
serving (scenarios/control-plane-upgrade.yaml).

The drill makes its own HA cluster at the older release (``drill-cluster``: 3 control-plane nodes,
2 workers; ``kdrill images build kubernetes-v1.34.4`` builds that release) and deletes it at the
end: an upgraded cluster is never the user's. A Deployment of 4 pods on the two workers serves
behind a Service, with a PodDisruptionBudget of minAvailable 3. Then, node by node
(harness.components.upgrade): the next release staged; kubeadm upgrade apply on the first
control-plane node, kubeadm upgrade node on the others and on the workers; each node drained,
its kubelet and kubectl replaced and restarted, uncordoned.

Measured throughout: LISTs through kind's load balancer from this machine, calls from a probe pod
by Service name, ClusterIP and each first pod's IP, the Service's ready endpoints, and the
versions every component reports (harness.components.upgrade.read_versions) after every step,
with each API server's own /version every 2 s in between. The workload's pods are followed: each
one that went away must have been evicted by a drain.

Case ``kubelet-first`` breaks the policy on purpose: one worker's kubelet is upgraded before the
control plane. The skew expectation must then fail to hold (the drill expects violations), which
shows the check reads the cluster rather than the plan. Case ``newer-kubelet-joins`` breaks it at
join: one worker removed (drain, kubeadm reset, Node deleted) and joined again with the next
minor's kubeadm and kubelet, kubeadm's join preflight run first with no check skipped.

Why a Python drill: the steps run on each node in an order read from the cluster, and what is
judged (versions, evictions) is found at run time.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kubernetes import client

from harness.components import api_removal, upgrade
from harness.components.topology import discover
from harness.core import proc
from harness.core.timeline import Sample, Timeline, success_ratio
from harness.core.waiting import wait_until
from harness.engine.measures import longest_failure_seconds
from harness.kube import objects
from harness.kube.health import wait_healthy
from harness.kube.images import Build
from harness.kube.workloads import ensure_namespace, http_server_deployment, http_service, wait_deployment_available
from harness.probes import Probe, Probes
from harness.probes.api import ApiReadProbe
from harness.probes.endpoints import EndpointReadyProbe
from harness.probes.incluster import InClusterProbe, service_targets
from harness.scaffolding.drill_cluster import DrillCluster

APP = "web"
PROBE_LABEL = "kdrill.io/role"
KEEP_PROBE = f"{PROBE_LABEL}!=probe"  # drains leave the probe pod: it measures the whole upgrade
NEXT_IMAGES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "etcd", "coredns", "pause")
HEALTHY_SECONDS = 300  # every node Ready and kube-system running after the last step: a deadline
JOINED_READY_SECONDS = 180  # a joined node's first Ready (its CNI and kube-proxy pods started): a deadline
# The API the upgrade stops serving (harness/components/api_removal.py says why this one).
REMOVED_GROUP, REMOVED_VERSION, REMOVED_RESOURCE = "networking.k8s.io", "v1beta1", "servicecidrs"
REMOVED_PATH = f"/apis/{REMOVED_GROUP}/{REMOVED_VERSION}/{REMOVED_RESOURCE}"
REPLACEMENT_PATH = f"/apis/{REMOVED_GROUP}/v1/{REMOVED_RESOURCE}"


def service_cidr(name: str) -> dict:
    """A ServiceCIDR written at the version the upgrade removes (an extra, unused Service range)."""
    return {"apiVersion": f"{REMOVED_GROUP}/{REMOVED_VERSION}", "kind": "ServiceCIDR", "metadata": {"name": name},
            "spec": {"cidrs": ["10.250.0.0/24"]}}


class RemovedApiAnswers(Probe):
    """A dry-run CREATE at the removed version through the load balancer, every ``interval_seconds``:
    ok when the API server that answered still serves it; ``labels["status"]`` its HTTP status."""

    def __init__(self, name: str, cluster, **kwargs) -> None:
        super().__init__(name, **kwargs)
        self.cluster = cluster

    def sample(self) -> Sample:
        started = time.time()
        try:
            objects.post_path(self.cluster, REMOVED_PATH, service_cidr("kdrill-dry-run"), dry_run=True,
                              timeout_seconds=3)
            status, detail = "201", "served"
        except client.exceptions.ApiException as exc:
            status, detail = str(exc.status), objects.api_message(exc)[:200]
        return Sample(t=started, ok=status.startswith("2"), latency_seconds=time.time() - started, detail=detail,
                      labels={"status": status})


class ApiserverVersions(Probe):
    """Each control-plane node's kube-apiserver /version, every ``interval_seconds``; a sample's
    ``labels["versions"]`` is JSON node -> gitVersion or null. ok when every one answered."""

    def __init__(self, name: str, cluster, nodes: list[str], **kwargs) -> None:
        super().__init__(name, **kwargs)
        self.cluster, self.nodes = cluster, nodes

    def sample(self) -> Sample:
        started = time.time()
        versions = {n: upgrade.apiserver_version(self.cluster, n) for n in self.nodes}
        return Sample(t=started, ok=all(versions.values()), latency_seconds=time.time() - started,
                      detail=", ".join(f"{n}: {v or 'no answer'}" for n, v in versions.items()),
                      labels={"versions": json.dumps(versions)})


def _addresses(cluster) -> dict[str, str]:
    return {n.metadata.name: next(a.address for a in n.status.addresses if a.type == "InternalIP")
            for n in cluster.core.list_node(_request_timeout=10).items}


def _pods(cluster, ns: str) -> dict[str, dict]:
    """The workload's pods: name -> node, uid and container restarts."""
    return {p.metadata.name: {"node": p.spec.node_name, "uid": p.metadata.uid,
                              "restarts": sum(c.restart_count for c in p.status.container_statuses or [])}
            for p in cluster.core.list_namespaced_pod(ns, label_selector=f"app={APP}", _request_timeout=10).items}


def _workload(drill, cluster, ns: str, workers: list[str]) -> dict[str, dict]:
    """The Deployment on both workers, its Service and PodDisruptionBudget; returns its pods."""
    replicas, min_available = int(drill.params["replicas"]), int(drill.params["min_available"])
    ensure_namespace(cluster, ns)
    # Spread over the workers (ScheduleAnyway: a drained worker's pods go to the other one).
    cluster.apps.create_namespaced_deployment(ns, http_server_deployment(APP, replicas), _request_timeout=10)
    cluster.core.create_namespaced_service(ns, http_service(APP), _request_timeout=10)
    pdb = client.V1PodDisruptionBudget(metadata=client.V1ObjectMeta(name=APP), spec=client.V1PodDisruptionBudgetSpec(
        min_available=min_available, selector=client.V1LabelSelector(match_labels={"app": APP})))
    client.PolicyV1Api(cluster.api).create_namespaced_pod_disruption_budget(ns, pdb, _request_timeout=10)
    wait_deployment_available(cluster, ns, APP, replicas, 240)
    pods = _pods(cluster, ns)
    assert {p["node"] for p in pods.values()} == set(workers), f"pods must run on both workers, got {pods}"
    return pods


def _next_release(tmp: Path) -> tuple[dict[str, str], str, str]:
    """The default build's release (the upgrade's target): its kubeadm, kubelet and kubectl, and
    its component images saved to one archive. Returns (binaries, archive, version)."""
    build = Build()
    out = build.step("go-kubernetes").out
    binaries = {b: str(out / b) for b in ("kubeadm", "kubelet", "kubectl")}
    archive = tmp / "images.tar"
    proc.run(["docker", "save", "-o", str(archive), *[build.tags[i] for i in NEXT_IMAGES]], timeout_seconds=300)
    return binaries, str(archive), build.versions["KUBERNETES_VERSION"]


@dataclass
class Rehearsal:
    """The drill's cluster as the upgrade goes: its nodes, their addresses and every version reading."""

    cluster: object
    control_plane: list[str]
    workers: list[str]
    addresses: dict[str, str] = field(default_factory=dict)
    readings: list[dict] = field(default_factory=list)
    window: tuple[float, float] | None = None  # the upgrade's start and end (epoch seconds)

    @property
    def nodes(self) -> list[str]:
        return self.control_plane + self.workers

    def read(self, after: str) -> upgrade.VersionReading:
        """Read every component's version (after the step named ``after``) and keep it, with what
        the skew policy says of it."""
        reading = upgrade.read_versions(self.cluster, self.control_plane, self.nodes, self.addresses)
        self.readings.append({"after": after, **reading.to_dict(), "violations": upgrade.skew_violations(reading),
                              "violations_strict": upgrade.skew_violations(reading, strict=True)})
        return reading


@pytest.mark.cluster
@pytest.mark.destructive
@pytest.mark.node_access
@pytest.mark.scenario("control-plane-upgrade")
def test_control_plane_upgrade(drill):
    with drill.phase("setup"):
        drill.fresh_namespace()
    made = DrillCluster(drill.cluster, f"{drill.cluster.name}-upg", kubernetes=drill.params["from_version"])
    with drill.inject(made), tempfile.TemporaryDirectory(prefix="kdrill-upgrade-", dir="/var/tmp") as tmp:
        topology = discover(made.created)
        drill.observe("upgrade_cluster", {"name": made.created.name, "nodes": topology.nodes(),
                                          "create_seconds": round(made.create_seconds or 0, 1)})
        rehearsal = Rehearsal(made.created, topology.control_plane, topology.workers, _addresses(made.created))
        _rehearse(drill, rehearsal, Path(tmp))
    drill.expectations.assert_all()


def _rehearse(drill, r: Rehearsal, tmp: Path) -> None:
    """Everything on the drill's cluster, with its vital signs watched throughout."""
    from harness.engine.vitals import VitalSigns

    # The vital signs' probe pod on the worker no case removes (drains leave it, as they leave the drill's own).
    vitals = VitalSigns(r.cluster, r.workers[-1]).watch()
    try:
        vitals.await_baseline()
        with drill.phase("workload"):
            pods_before = _workload(drill, r.cluster, drill.namespace, r.workers)
            targets = service_targets(r.cluster, drill.namespace, APP, f"app={APP}")
            incluster = InClusterProbe(r.cluster, drill.namespace, "upgrade-probe", targets, interval_seconds=1.0,
                                       duration_seconds=float(drill.params["probe_seconds"]),
                                       node=r.workers[-1]).start()
        try:
            with drill.phase("stage"):
                binaries, archive, target = _next_release(tmp)
                staged = [upgrade.stage(r.cluster, node, binaries, archive).to_dict() for node in r.nodes]
            _upgrade_and_judge(drill, r, target, staged, pods_before, incluster)
        finally:
            incluster.delete()
    finally:
        # The upgrade is that cluster's fault window: its vital signs before, during and after it.
        windows = [{"kind": "kubeadm-upgrade", "injected_at": r.window[0], "reverted_at": r.window[1]}] if r.window else []
        vitals.await_after(windows)
        summary = vitals.finish(windows, covered={})
        drill.add_timelines({f"upgraded/{name}": tl for name, tl in vitals.timelines.items()})
        drill.observe("upgrade_cluster_vital_signs", summary)


def _upgrade_and_judge(drill, r: Rehearsal, target: str, steps: list[dict], pods_before, incluster) -> None:
    r.read("before")
    api = ApiReadProbe("api-through-load-balancer", r.cluster, drill.namespace, interval_seconds=0.5, max_seconds=3600)
    endpoints = EndpointReadyProbe("ready-endpoints", r.cluster, drill.namespace, APP, interval_seconds=1.0,
                                   max_seconds=3600)
    apis = ApiserverVersions("apiserver-versions", r.cluster, r.control_plane, interval_seconds=2.0, max_seconds=3600)
    removed = RemovedApiAnswers("removed-api-dry-run", r.cluster, interval_seconds=2.0, max_seconds=3600)
    order = drill.params.get("order")
    documented = order == "documented"
    with Probes(api, endpoints, apis, *([removed] if documented else [])):
        ignore = _preflight(drill, r, target)
        _skip_a_minor(drill, r, target, ignore)
        if documented:
            _removed_api_before(drill, r)
        started = time.time()
        if documented:
            done = _documented_order(drill, r, target, ignore)
        elif order == "kubelet-first":
            done = _kubelet_first(drill, r)
        elif order == "newer-kubelet-joins":
            done = _newer_kubelet_joins(drill, r, ignore)
        else:
            raise ValueError(f"order: expected documented, kubelet-first or newer-kubelet-joins, got {order!r}")
        steps += done
        stopped = not done[-1]["ok"]
        if documented:
            drill.measure("upgrade_seconds", None if stopped else round(time.time() - started, 1),
                          detail=f"{len(done)} steps on {len(r.nodes)} nodes, staging not counted"
                                 + (f"; stopped at {done[-1]['name']} on {done[-1]['target']}" if stopped else ""))
        healthy = wait_healthy(r.cluster, HEALTHY_SECONDS)
        drill.observe("healthy_after_upgrade", {"ok": healthy.ok, "last_error": healthy.last_error})
        r.window = (started, time.time())
        final = r.read("end")
    timelines = {**incluster.timelines("incluster-"), api.name: api.timeline, endpoints.name: endpoints.timeline,
                 apis.name: apis.timeline, **({removed.name: removed.timeline} if documented else {})}
    drill.add_timelines(timelines)
    drill.observe("upgrade_steps", _with_ratios(steps, timelines))
    drill.observe("version_readings", r.readings)
    _judge_skew(drill, r)
    if documented:  # the other orders judge only the skew and their own steps: they break the policy on purpose
        _judge_versions(drill, final, target, apis.timeline)
        _removed_api_after(drill, r, removed.timeline, steps)
        _judge_service(drill, r, timelines, r.window, pods_before, steps)


def _preflight(drill, r: Rehearsal, target: str) -> tuple[str, ...]:
    """kubeadm's own preflight for the upgrade, as documented (a dry run). Returns the checks the
    upgrade must skip: only kubeadm's cgroup v1 refusal, which KEP-5573 says to skip on such a
    host (this machine's kernel gives kubelet cgroup v1); recorded either way."""
    checked = upgrade.preflight(r.cluster, r.control_plane[0], target)
    cgroup_v1 = not checked.ok and upgrade.cgroup_v1_refusal(checked.output)
    drill.observe("preflight_as_documented", {**checked.to_dict(), "refused_for_cgroup_v1": cgroup_v1,
                                              "skipped_from_now_on": [upgrade.CGROUP_V1_CHECK] if cgroup_v1 else []})
    return (upgrade.CGROUP_V1_CHECK,) if cgroup_v1 else ()


def _skip_a_minor(drill, r: Rehearsal, target: str, ignore: tuple[str, ...]) -> None:
    skip_to = drill.params["skip_to_version"]
    skip = upgrade.skip_minor_refused(r.cluster, r.control_plane[0], skip_to, ignore)
    drill.observe("skip_minor_attempt", skip.to_dict())
    drill.measure("skip_minor_refused", not skip.ok and "can upgrade only 1 minor version at a time" in skip.output,
                  detail=f"kubeadm {target} asked for {skip_to} on a {drill.params['from_version']} cluster "
                         f"(dry run): {'accepted' if skip.ok else 'refused'}: "
                         + next((line for line in skip.output.splitlines() if "minor version" in line), "")[:300])


def _removed_api_before(drill, r: Rehearsal) -> None:
    """A ServiceCIDR created at the version the upgrade removes, and where its removal shows before
    the upgrade: the answer's Warning header, and the deprecated-API metric of each API server."""
    warnings: list[str] = []
    objects.post_path(r.cluster, REMOVED_PATH, service_cidr("kdrill-before-upgrade"), warnings=warnings)
    drill.measure("removed_api_warned", any("unavailable in v1.37" in w for w in warnings),
                  detail=f"Warning header of the CREATE at {REMOVED_GROUP}/{REMOVED_VERSION}: {warnings or 'none'}")
    series = {node: api_removal.deprecated_requests(api_removal.apiserver_metrics(r.cluster, node, r.addresses[node]),
                                                    REMOVED_GROUP, REMOVED_VERSION, REMOVED_RESOURCE)
              for node in r.control_plane}
    drill.observe("deprecated_api_metric_before", series)
    releases = sorted({s.get("removed_release") for found in series.values() for s in found})
    drill.measure("removed_api_in_metric", releases == ["1.37"],
                  detail=f"{api_removal.METRIC} for {REMOVED_RESOURCE}.{REMOVED_VERSION}.{REMOVED_GROUP} on "
                         f"{sum(bool(f) for f in series.values())} of {len(series)} API servers, "
                         f"removed_release {releases or 'none'}")


def _removed_api_after(drill, r: Rehearsal, answers, steps: list[dict]) -> None:
    """The same manifest after the upgrade (refused, with the message a client sees), the object
    stored before read at the version that replaced it, and when the answers changed."""
    try:
        objects.post_path(r.cluster, REMOVED_PATH, service_cidr("kdrill-after-upgrade"))
        refused, said = False, "created"
    except client.exceptions.ApiException as exc:
        refused, said = exc.status == 404, f"HTTP {exc.status}: {objects.api_message(exc)}"
    drill.measure("removed_api_refused_after", refused, detail=f"CREATE at {REMOVED_PATH} after the upgrade: {said}")
    try:
        stored = objects.get_path(r.cluster, f"{REPLACEMENT_PATH}/kdrill-before-upgrade")
        readable, said = stored.get("spec", {}).get("cidrs") == ["10.250.0.0/24"], f"cidrs {stored.get('spec')}"
    except client.exceptions.ApiException as exc:
        readable, said = False, f"HTTP {exc.status}: {objects.api_message(exc)}"
    drill.measure("stored_object_readable_at_replacement", readable,
                  detail=f"GET {REPLACEMENT_PATH}/kdrill-before-upgrade: {said}")
    answered = [s for s in answers.samples() if "status" in s.labels]
    apply = next((s["started_at"] for s in steps if s["name"] == "kubeadm upgrade apply"), None)
    served = [s.t for s in answered if s.ok]
    refusals = [s.t for s in answered if not s.ok]
    drill.observe("removed_api_answers", {
        "dry_runs": len(answered), "served": len(served), "refused": len(refusals),
        "first_refused_after_apply_seconds": round(min(refusals) - apply, 1) if refusals and apply else None,
        "last_served_after_apply_seconds": round(max(served) - apply, 1) if served and apply else None,
        "statuses": sorted({s.labels["status"] for s in answered})})


def _documented_order(drill, r: Rehearsal, target: str, ignore: tuple[str, ...]) -> list[dict]:
    """kubeadm's order: the first control-plane node (apply), the others (node), then the workers;
    each upgraded, drained, its kubelet replaced, uncordoned. Stops at the first failed step."""
    cp, via = r.control_plane, r.control_plane[0]
    # The upgrade's configuration no longer enables the removed version (see api_removal).
    drill.observe("runtime_config_dropped", api_removal.stop_enabling(r.cluster, f"{REMOVED_GROUP}/{REMOVED_VERSION}"))
    steps = []
    for i, node in enumerate(cp + r.workers):
        actions = (lambda: upgrade.kubeadm_upgrade(r.cluster, node, i == 0, target, ignore),
                   lambda: upgrade.drain(r.cluster, via, node, KEEP_PROBE),
                   lambda: upgrade.replace_kubelet(r.cluster, node),
                   lambda: upgrade.uncordon(r.cluster, via, node))
        for action in actions:
            with drill.phase(f"upgrade {node}"):
                result = action()
            steps.append({**result.to_dict(), "target": node})
            r.read(f"{result.name} {node}")
            if not result.ok:
                drill.observe("upgrade_stopped_at", {"step": result.name, "node": node, "output": result.output})
                return steps
    return steps


def _kubelet_first(drill, r: Rehearsal) -> list[dict]:
    """Against the documented order and the policy: the first worker's kubelet replaced by the next
    minor's while the control plane is still the older one (no drain, no kubeadm upgrade node).
    What the kubelet does with the flags the older kubeadm wrote is recorded; then the flags are
    made those of a node built at the newer release, so that a newer kubelet registers."""
    node = r.workers[0]
    with drill.phase(f"kubelet first on {node}"):
        result = upgrade.replace_kubelet(r.cluster, node)
        # A kubelet that refuses its flags exits at once and systemd restarts it: a deadline.
        refused = wait_until(lambda: upgrade.kubelet_state(r.cluster, node)["last_failure"] is not None, 20,
                             interval_seconds=1.0, description=f"{node}'s kubelet exiting")
        state = upgrade.kubelet_state(r.cluster, node)
        flag = drill.params["removed_kubelet_flag"]
        drill.measure("kubelet_refused_older_flags", refused.ok and f"--{flag}" in (state["last_failure"] or ""),
                      detail=f"kubelet unit {state['unit']}; last failure: {state['last_failure'] or 'none'}")
        steps = [{**result.to_dict(), "target": node}]
        if refused.ok:
            fixed = upgrade.drop_kubelet_flag(r.cluster, node, drill.params["removed_kubelet_flag"])
            steps.append({**fixed.to_dict(), "target": node})

        def reported_newer() -> bool:
            kubelet = r.cluster.core.read_node(node, _request_timeout=5).status.node_info.kubelet_version
            return upgrade.minor(kubelet) > upgrade.minor(drill.params["from_version"])

        # The kubelet posts its version with its next status update: a deadline, not a sleep.
        seen = wait_until(reported_newer, 120, interval_seconds=1.0, description=f"{node} reporting its new kubelet")
    drill.observe("newer_kubelet_reported_seconds",
                  round(seen.became_true_at - result.started_at, 1) if seen.ok else None)
    r.read(f"{steps[-1]['name']} {node}")
    return steps


def _newer_kubelet_joins(drill, r: Rehearsal, ignore: tuple[str, ...]) -> list[dict]:
    """Against the policy, at join: the first worker removed as kubeadm documents it (drain,
    kubeadm reset, Node deleted), then joined again to the older control plane with the next
    minor's kubeadm and kubelet. kubeadm's join preflight runs first with no check skipped; the
    join then skips only what the upgrade skips (``ignore``). Stops at the first failed removal
    step (its expectations then say "not measured")."""
    node, via = r.workers[0], r.control_plane[0]
    removal = (lambda: upgrade.drain(r.cluster, via, node, KEEP_PROBE), lambda: upgrade.reset_node(r.cluster, node),
               lambda: upgrade.delete_node(r.cluster, via, node), lambda: upgrade.install_next(r.cluster, node))
    steps: list[dict] = []
    with drill.phase(f"newer kubelet joins as {node}"):
        for action in removal:
            steps.append({**(result := action()).to_dict(), "target": node})
            if not result.ok:
                drill.observe("upgrade_stopped_at", {"step": result.name, "node": node, "output": result.output})
                return steps
        checked = upgrade.join_preflight(r.cluster, node)
        joined = upgrade.join(r.cluster, node, ignore)
        steps += [{**checked.to_dict(), "target": node}, {**joined.to_dict(), "target": node}]
        _judge_join(drill, r, node, checked, joined, ignore)
    r.read(f"kubeadm join {node}")
    return steps


def _judge_join(drill, r: Rehearsal, node: str, checked, joined, ignore: tuple[str, ...]) -> None:
    """Whether kubeadm refused the newer kubelet (its KubeletVersion check, in the preflight or the
    join; not measured when the preflight never reached that check), and whether the node then
    registered and went Ready with it (not measured when the join failed for another reason)."""
    drill.observe("join_preflight_as_documented", checked.to_dict())
    preflight = upgrade.failed_checks(checked.output)
    refused = upgrade.KUBELET_VERSION_CHECK in preflight | upgrade.failed_checks(joined.output)
    said = f"errors {', '.join(sorted(preflight))}" if preflight else "passed" if checked.ok else checked.output[-300:]
    version_checked = upgrade.KUBELET_VERSION_LOGGED in checked.output
    drill.measure("join_refused_for_kubelet_version", refused if version_checked else None,
                  detail=f"kubeadm join's preflight, nothing skipped, kubelet version "
                         f"{'checked' if version_checked else 'never checked'}: "
                         f"{said}; kubeadm join skipping {list(ignore) or 'nothing'}: "
                         f"{'joined' if joined.ok else joined.output[-300:]}")
    apis = [upgrade.minor(v) for v in r.readings[0]["apiservers"].values() if v]
    if not joined.ok or not apis:
        drill.measure("newer_kubelet_node_ready", False if refused else None,
                      detail=f"kubeadm join of {node} failed" if not joined.ok else "no API server's version read")
        return
    newest = max(apis)

    def ready_and_newer() -> bool:
        got = r.cluster.core.read_node(node, _request_timeout=5).status
        return upgrade.minor(got.node_info.kubelet_version) > newest and any(
            c.type == "Ready" and c.status == "True" for c in got.conditions or [])

    ready = wait_until(ready_and_newer, JOINED_READY_SECONDS, interval_seconds=1.0,
                       description=f"{node} Ready with a kubelet newer than 1.{newest}")
    returned = joined.started_at + joined.seconds
    drill.measure("newer_kubelet_node_ready", ready.ok,
                  detail=f"{node} Ready with a kubelet newer than every kube-apiserver (1.{newest}): "
                         + (f"{ready.became_true_at - returned:.1f} s after kubeadm join returned" if ready.ok
                            else f"not within {JOINED_READY_SECONDS} s ({ready.last_error or 'not Ready'})"))


def _with_ratios(steps: list[dict], timelines: dict) -> list[dict]:
    """Each step with the success ratio of every probe during it (None: no call in the step)."""
    out = []
    for step in steps:
        start, end = step["started_at"], step["started_at"] + step["seconds"]
        ratios = {name: success_ratio(tl.samples(), start, end) for name, tl in timelines.items()
                  if name != "apiserver-versions"}
        out.append({k: v for k, v in step.items() if k != "output"} | {"success_ratios": {
            k: None if v is None else round(v, 3) for k, v in ratios.items()}})
    return out


def _judge_skew(drill, r: Rehearsal) -> None:
    """Violations judged against the API server each component calls (its kubeconfig's server),
    and, as an observation, the policy page's strict HA reading (any instance)."""
    violations = [f"after {x['after']}: {v}" for x in r.readings for v in x["violations"]]
    drill.measure("skew_violations", len(violations), detail="; ".join(violations[:6]) or
                  f"none in {len(r.readings)} readings of every component, each judged against the "
                  "kube-apiserver its kubeconfig names")
    strict = [f"after {x['after']}: {v}" for x in r.readings for v in x["violations_strict"]]
    drill.observe("skew_violations_against_every_api_server", {"count": len(strict), "first": strict[:6]})


def _judge_versions(drill, final: upgrade.VersionReading, target: str, apis) -> None:
    every = {**final.apiservers, **{f"kcm/{k}": v for k, v in final.controller_managers.items()},
             **{f"scheduler/{k}": v for k, v in final.schedulers.items()},
             **{f"kubelet/{k}": v for k, v in final.kubelets.items()},
             **{f"kube-proxy/{k}": v for k, v in final.kube_proxies.items()}}
    behind = {k: v for k, v in every.items() if v != target}
    drill.measure("components_at_target", not behind,
                  detail=f"{len(every)} components read; not at {target}: {behind or 'none'}")
    readings = [upgrade.VersionReading(t=s.t, apiservers=json.loads(s.labels["versions"])) for s in apis.samples()]
    drill.measure("apiservers_of_two_minors_seconds", upgrade.mixed_apiserver_seconds(readings),
                  detail=f"from {len(readings)} reads of every API server's /version, 2 s apart")


def _judge_service(drill, r: Rehearsal, timelines: dict, window: tuple[float, float], pods_before: dict,
                   steps: list[dict]) -> None:
    start, end = window
    for name, measure in (("api-through-load-balancer", "api_success_ratio"),
                          ("incluster-name", "service_name_success_ratio"),
                          ("incluster-clusterip", "clusterip_success_ratio")):
        samples = [s for s in timelines[name].samples() if start <= s.t < end]
        failed = [f"{s.t - start:.0f} s" for s in samples if not s.ok]
        drill.measure(measure, success_ratio(samples), detail=f"{len(samples)} calls during the upgrade; failed at "
                      f"{', '.join(failed[:12]) or 'none'}{' ...' if len(failed) > 12 else ''}")
    drained_at = {s["target"]: s["started_at"] for s in steps if s["name"] == "drain"}
    pod_ip = {}
    for pod, info in pods_before.items():
        until = drained_at.get(info["node"], end)
        pod_ip[pod] = success_ratio([s for s in timelines.get(f"incluster-pod-{pod}", Timeline("none")).samples()
                                     if start <= s.t < until])
    known = [v for v in pod_ip.values() if v is not None]
    drill.measure("pod_ip_success_ratio_until_drained", min(known) if known else None,
                  detail=f"per first pod, calls to its IP until its node's drain began: {pod_ip}")
    names = [s for s in timelines["incluster-name"].samples() if start <= s.t < end]
    drill.observe("service_name_longest_failure_seconds", longest_failure_seconds(names, start, end))
    drains = [(s["started_at"], s["started_at"] + s["seconds"]) for s in steps if s["name"] == "drain"]
    reads = [s for s in timelines["ready-endpoints"].samples() if start <= s.t < end and s.ok and "ready" in s.labels]
    during = [int(s.labels["ready"]) for s in reads if any(a <= s.t < b for a, b in drains)]
    drill.measure("ready_endpoints_min_while_draining", min(during) if during else None,
                  detail=f"{len(during)} reads of the Service's ready endpoints during {len(drains)} drains; "
                         f"PodDisruptionBudget minAvailable {drill.params['min_available']}")
    replicas = int(drill.params["replicas"])
    dips = [{"after_start_seconds": round(s.t - start, 1), "ready": int(s.labels["ready"])} for s in reads
            if int(s.labels["ready"]) < replicas and not any(a <= s.t < b for a, b in drains)]
    drill.observe("ready_endpoints_below_replicas_outside_drains", dips)
    evicted = {pod for s in steps if s["name"] == "drain" for pod in upgrade.evicted_pods(s.get("output", ""))}
    after = _pods(r.cluster, drill.namespace)
    lost = sorted(pod for pod in pods_before if pod not in after and pod not in evicted)
    drill.measure("workload_pods_gone_without_eviction", len(lost),
                  detail=f"first pods {sorted(pods_before)}; evicted by drains {sorted(evicted & set(pods_before))}; "
                         f"gone otherwise {lost or 'none'}")
    restarts = {pod: info["restarts"] for pod, info in after.items() if info["restarts"]}
    drill.measure("workload_container_restarts", sum(restarts.values()),
                  detail=f"{len(after)} pods at the end; restarted: {restarts or 'none'}")
