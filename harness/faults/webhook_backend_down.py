"""Fault ``webhook-backend-down``: the Service behind an installed admission webhook is made to
select no pod (``refused``) or a black-hole pod (``blackhole``), keeping the webhook's own pods,
Deployment and configuration as the platform installed them.

For a webhook kdrill did not install (a policy engine's, a team's own), found by
:func:`harness.components.admission.discover`: the generic ``service-blackhole`` fault on its
Service, under a kind of its own so the scenario's parameters are the drill's, not a Service's
name. ``refused``: the Service's selector gets a label no pod has, its EndpointSlices list no
endpoint, and kube-proxy rejects new connections to its ClusterIP at once. ``blackhole``: the
selector is replaced by a black-hole pod's labels (``kdrill-webhook --mode blackhole`` in the
webhook's namespace, made by the drill and removed after it), which accepts connections and never
answers, so each call waits for the webhook's ``timeoutSeconds``. The revert puts the recorded
selector back and waits for a ready endpoint (see :mod:`harness.faults.service_blackhole`).

The revert is a Service UPDATE in the webhook's namespace: a webhook whose own rules would send
that write to itself with ``failurePolicy: Fail`` would block its own repair (the deadlock the
documentation warns about), so the drill refuses to take such a backend down and reports why.

Source: "Dynamic Admission Control"
(https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/:
failure policy, timeouts, avoiding deadlocks in self-hosted webhooks).
"""

from __future__ import annotations

from typing import Any

from harness.faults.service_blackhole import ServiceBlackhole
from harness.params import Param
from harness.providers import Cluster

MODES = ("refused", "blackhole")


class WebhookBackendDown(ServiceBlackhole):
    """Take the webhook backend Service ``namespace/name`` down; ``reroute_to`` (the black-hole
    pod's labels) for ``blackhole``, none for ``refused``."""

    kind = "webhook-backend-down"
    params = {
        "mode": Param("choice", "how each discovered webhook's backend fails", choices=MODES),
        "onset_deadline_seconds": Param("seconds", "how long a write the configuration says is rejected may "
                                        "still be admitted after the fault, before the outage counts as not shown",
                                        minimum=5, maximum=120),
        "recovery_deadline_seconds": Param("seconds", "how long after the revert every write may take to be "
                                           "admitted again", minimum=5, maximum=120),
    }

    def __init__(self, cluster: Cluster, namespace: str, name: str, original_selector: dict[str, str] | None = None,
                 blackhole_selector: dict[str, str] | None = None, reroute_to: dict[str, str] | None = None) -> None:
        super().__init__(cluster, namespace, name, original_selector, blackhole_selector, reroute_to)
        self.method = "blackhole-pod-selector" if reroute_to else "selector-to-no-pod"

    @classmethod
    def acts_on(cls, params: dict[str, Any]) -> list[tuple[str, str, str, str | None]]:
        return []  # discovered in the cluster when the drill runs

    @classmethod
    def selects_pods(cls, params: dict[str, Any]) -> list[tuple[str, str, str | None]]:
        return []
