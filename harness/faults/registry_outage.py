"""Fault ``registry-outage``: the image registry the nodes pull from stops serving.

The registry is kdrill's local registry container (:mod:`harness.components.registry`).
Methods (``mode``):

- ``refused`` (``registry-server-stopped``): the registry server process in the container is
  stopped. The container keeps its name, address and storage, so the nodes still resolve it and
  their connections are refused at once.
- ``unresponsive`` (``registry-container-paused``): ``docker pause`` freezes the container. The
  kernel still completes TCP handshakes to it, so connections are accepted and nothing ever
  answers them.

Revert (:meth:`harness.components.registry.LocalRegistry.restore`): unpause, or start the container,
then start the server, and wait until it answers. The storage is the container's own, never removed,
so the registry comes back with the same content; :meth:`RegistryOutage.verify_reverted` checks that
it serves ``verify_image`` again. Everything needed is the container name, so ``kdrill recover``
reverts from another process (``from_target``).

Source for the behaviour exercised: "Images", https://kubernetes.io/docs/concepts/containers/images/
(image pull policy; ImagePullBackOff and its back-off).
"""

from __future__ import annotations

from typing import Any

from harness.components.registry import LocalRegistry, RegistryError, container_name
from harness.faults import Fault, FaultError, FaultNotReverted
from harness.kube.providers import Cluster
from harness.spec.params import Param

MODES = {"refused": "registry-server-stopped", "unresponsive": "registry-container-paused"}


class RegistryOutage(Fault):
    """Make the registry container ``container`` stop serving by ``mode`` (``refused`` or
    ``unresponsive``). ``verify_image`` (``repository:tag``) is an image the registry held before
    the fault and must serve again after the revert. Raises FaultError for an unknown mode or a
    malformed ``verify_image``."""

    kind = "registry-outage"
    params = {
        "mode": Param("choice", "how the registry stops serving", choices=tuple(MODES)),
        # Read by the registry drill file; a data-only scenario holds for runner.windows.hold_seconds.
        "hold_seconds": Param("seconds", "how long the registry stays down (drill file only)", minimum=10,
                              maximum=600, required=False),
        "registry": Param("name", "which of workload.registries goes down (data-only scenarios)", required=False),
    }
    # Acts on a container of the host's Docker engine beside the kind nodes: a kind-only fault.
    needs_node_access = True
    node_access_level = "container"
    node_capability = "stops or pauses a registry container beside the kind nodes (docker)"

    def __init__(self, cluster: Cluster, container: str, mode: str, verify_image: str | None = None) -> None:
        super().__init__(cluster)
        if mode not in MODES:
            raise FaultError(f"registry-outage mode must be one of {', '.join(MODES)}, got {mode!r}")
        if verify_image is not None and ":" not in verify_image.rsplit("/", 1)[-1]:
            raise FaultError(f"verify_image must be repository:tag, got {verify_image!r}")
        self.container, self.mode, self.verify_image = container, mode, verify_image
        self.registry = LocalRegistry(container)

    def target(self) -> dict[str, Any]:
        return {"method": MODES[self.mode], "mode": self.mode, "container": self.container,
                "verify_image": self.verify_image, "where": [self.container]}

    def inject(self) -> None:
        if self.registry.state() is None:
            raise FaultError(f"registry container {self.container} does not exist")
        try:
            if self.mode == "refused":
                self.registry.stop_server()
            else:
                self.registry.pause()
        except RegistryError as exc:
            raise FaultError(str(exc)) from exc

    def revert(self) -> None:
        if self.registry.state() is None:
            # Nothing paused or stopped is left to undo (e.g. inject found no such container; or
            # the drill-registry entry already removed it): its images, if any, went with it.
            return
        try:
            self.registry.restore()
        except RegistryError as exc:
            raise FaultError(str(exc)) from exc

    def verify_reverted(self) -> None:
        state = self.registry.state()
        if state is None:
            return  # no container, no outage of it (see revert)
        if not state.running or state.paused:
            raise FaultNotReverted(f"registry container {self.container}: running={state.running} "
                                   f"paused={state.paused}")
        if not self.registry.server_running() or not self.registry.answers(timeout_seconds=5):
            raise FaultNotReverted(f"registry in {self.container} does not answer /v2/")
        if self.verify_image:
            repository, tag = self.verify_image.rsplit(":", 1)
            try:
                present = self.registry.has_manifest(repository, tag)
            except RegistryError as exc:
                raise FaultNotReverted(str(exc)) from exc
            if not present:
                raise FaultNotReverted(f"registry {self.container} no longer serves {self.verify_image}")

    @classmethod
    def for_scenario(cls, cluster: Cluster, namespace: str, params: dict[str, Any]) -> "RegistryOutage":
        """The outage of the data-only scenario's registry ``params["registry"]`` (one of its
        ``workload.registries``, container ``kdrill-registry-<cluster>-<registry>``). Raises
        FaultError when ``registry`` is not given."""
        if not params.get("registry"):
            raise FaultError("registry-outage in a data-only scenario needs params.registry: "
                             "the name of one of workload.registries")
        return cls(cluster, container=container_name(cluster.name, params["registry"]), mode=params["mode"])

    @classmethod
    def from_target(cls, cluster: Cluster, target: dict[str, Any]) -> "RegistryOutage":
        return cls(cluster, container=target["container"], mode=target["mode"],
                   verify_image=target.get("verify_image"))
