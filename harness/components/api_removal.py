"""An API version a cluster stops serving on upgrade, and where the documentation says a team sees
it coming: the API server's ``Warning`` header on each request and its
``apiserver_requested_deprecated_apis`` metric, labelled with ``removed_release``.

Between two minors kdrill builds (v1.34 and v1.35) no group version served by default is removed:
the removals the 1.34 code announces fall in 1.37 (``networking.k8s.io/v1beta1``,
``storage.k8s.io/v1beta1``) and every beta version is off by default. So the rehearsal serves one
the way a platform that enabled it would (kube-apiserver ``--runtime-config
networking.k8s.io/v1beta1=true``), and the upgrade's configuration no longer enables it: what the
1.37 removal will do to the same clients, one upgrade early. The drill's claim says so.

Sources: "Deprecated API Migration Guide"
(https://kubernetes.io/docs/reference/using-api/deprecation-guide/); "Kubernetes Deprecation
Policy" (https://kubernetes.io/docs/reference/using-api/deprecation-policy/); "API Overview:
enabling or disabling API groups" (--runtime-config,
https://kubernetes.io/docs/reference/using-api/#enabling-or-disabling); "Reconfiguring a kubeadm
cluster" (the kubeadm-config ConfigMap,
https://kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-reconfigure/).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from harness.kube.providers import Cluster

METRIC = "apiserver_requested_deprecated_apis"
RUNTIME_CONFIG = "runtime-config"
# A sample: the name, its labels (a quoted value may hold '}'), the value, an optional timestamp.
_SAMPLE = re.compile(r"^" + METRIC + r'\{((?:[^"}]|"(?:[^"\\]|\\.)*")*)\}\s+(\S+)(?:\s+-?\d+)?$')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def deprecated_requests(metrics_text: str, group: str, version: str, resource: str) -> list[dict[str, str]]:
    """The :data:`METRIC` series of a kube-apiserver's /metrics text that name ``group``,
    ``version`` and ``resource``: each one's labels (``removed_release`` among them) and value."""
    found = []
    for line in metrics_text.splitlines():
        sample = _SAMPLE.match(line.strip())
        if not sample:
            continue
        labels = dict(_LABEL.findall(sample.group(1)))
        if (labels.get("group"), labels.get("version"), labels.get("resource")) == (group, version, resource):
            found.append({**labels, "value": sample.group(2)})
    return found


def _without(entries: str, group_version: str) -> str:
    if not isinstance(entries, str):
        raise ValueError(f"ClusterConfiguration apiServer.extraArgs {RUNTIME_CONFIG}: expected a string such as "
                         f"'{group_version}=true', got {entries!r}")
    kept = [e for e in entries.split(",") if e.strip() and e.split("=")[0].strip() != group_version]
    return ",".join(kept)


def _extra_args(cluster_configuration: Any) -> dict[str, Any] | list[dict[str, Any]]:
    """The ClusterConfiguration's kube-apiserver extraArgs ([] when none). Raises ValueError for a
    shape kubeadm does not write."""
    if not isinstance(cluster_configuration, dict):
        raise ValueError(f"ClusterConfiguration: expected a mapping, got {cluster_configuration!r}")
    api_server = cluster_configuration.get("apiServer") or {}
    if not isinstance(api_server, dict):
        raise ValueError(f"ClusterConfiguration apiServer: expected a mapping, got {api_server!r}")
    args = api_server.get("extraArgs") or []
    if isinstance(args, dict) or isinstance(args, list) and all(isinstance(a, dict) for a in args):
        return args
    raise ValueError(f"ClusterConfiguration apiServer.extraArgs: expected a list of name/value (v1beta4) or a "
                     f"map (v1beta3), got {args!r}")


def drop_runtime_config(cluster_configuration: dict[str, Any], group_version: str) -> bool:
    """Remove ``group_version`` from the ClusterConfiguration's kube-apiserver ``runtime-config``
    (kubeadm v1beta4's list of name/value, or v1beta3's map), in place, dropping the argument when
    nothing is left. Returns whether it was there. Raises ValueError for a shape kubeadm does not
    write (field, expected, got)."""
    args = _extra_args(cluster_configuration)
    if isinstance(args, dict):  # v1beta3
        before = args.get(RUNTIME_CONFIG) or ""
        after = _without(before, group_version)
        args.pop(RUNTIME_CONFIG, None) if not after else args.__setitem__(RUNTIME_CONFIG, after)
        return after != before
    changed = False
    for arg in list(args):
        if arg.get("name") == RUNTIME_CONFIG:
            after = _without(arg.get("value") or "", group_version)
            changed |= after != (arg.get("value") or "")
            args.remove(arg) if not after else arg.__setitem__("value", after)
    return changed


def stop_enabling(cluster: Cluster, group_version: str) -> bool:
    """The kubeadm-config ConfigMap's ClusterConfiguration without ``group_version`` in
    kube-apiserver's runtime-config, written back: what every later ``kubeadm upgrade`` renders
    into the static pod manifests. Returns whether it was there. Raises ApiException, or ValueError
    for a ClusterConfiguration of another shape (drop_runtime_config)."""
    config_map = cluster.core.read_namespaced_config_map("kubeadm-config", "kube-system", _request_timeout=10)
    configuration = yaml.safe_load(config_map.data["ClusterConfiguration"])
    changed = drop_runtime_config(configuration, group_version)
    if changed:
        config_map.data["ClusterConfiguration"] = yaml.safe_dump(configuration, sort_keys=False)
        cluster.core.replace_namespaced_config_map("kubeadm-config", "kube-system", config_map, _request_timeout=10)
    return changed


def apiserver_metrics(cluster: Cluster, node: str, address: str) -> str:
    """The /metrics text of the kube-apiserver on ``node`` itself (at its advertise ``address``,
    which its serving certificate names), read with the node's admin kubeconfig. Raises
    ProviderError when it does not answer."""
    return cluster.node_exec(node, ["kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", "--server",
                                    f"https://{address}:6443", "get", "--raw", "/metrics"],
                             timeout_seconds=30, read_only=True).stdout
