"""The example platform profile's one-node kind cluster that test_platform_cluster.py checks: the
example profile (clusters/platforms/example) plus a careless webhook and an image archive.

Its creation (`kdrill cluster create --platform`, 1 to 3 minutes) runs in a child process while
the SIGKILL recovery tests run (test_recovery.py), which are not timed: they assert what `kdrill
recover` leaves, not how fast anything happens; so CI does not wait for it in line."""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from pathlib import Path

from harness.core import resources
from harness.kube.providers.kind import BackgroundCreation, KindProvider
from harness.platform.profile import load

log = logging.getLogger(__name__)

ARCHIVE_IMAGE = "kdrill.example/platform-pause:v1"
# One node and no host port mappings, so it runs beside the session's cluster.
BASE_CONFIG = """kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
name: kdrill-pp
nodes:
  - role: control-plane
kubeadmConfigPatches:
  - |
    kind: KubeletConfiguration
    failCgroupV1: false
"""

# A second configuration on the example's webhook backend, as a team might add for auditing, that
# takes in kube-system's ConfigMaps with failurePolicy Fail: the namespace the Kubernetes
# documentation says webhooks should leave out ("Admission Webhook Good Practices: avoid operating
# on kube-system"), so its backend's outage blocks a system write. It matches nothing the example's
# own webhook matches (the example leaves kube-system out), so each rejected write has one author.
CARELESS_WEBHOOK = """apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: careless-audit
webhooks:
  - name: audit.careless.example
    clientConfig:
      service: {name: policy-webhook, namespace: platform-policy, path: /validate, port: 443}
      caBundle: "$(tls_ca_bundle)"
    rules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps], scope: Namespaced}
    namespaceSelector:
      matchExpressions:
        - {key: kubernetes.io/metadata.name, operator: In, values: [kube-system]}
    failurePolicy: Fail
    sideEffects: None
    timeoutSeconds: 5
    admissionReviewVersions: [v1]
"""

class PlatformClusterBuild:
    """The profile's cluster, made once per session: :meth:`start` begins its creation in the
    background (idempotent), :meth:`wait` returns ``(provider, profile directory)`` once it is up
    (raising what the creation raised), :meth:`delete` removes it (idempotent; a creation still
    running is stopped first)."""

    def __init__(self, work: Path):
        self.work = work
        self.profile_dir = work / "example"
        self.provider: KindProvider | None = None
        self._creation: BackgroundCreation | None = None
        self._start_error: Exception | None = None

    def start(self) -> None:
        """Begin the creation; never raises: an error here is raised by :meth:`wait`, in the
        platform tests, not in the test that started it."""
        if self._creation is not None or self._start_error is not None:
            return
        try:
            shutil.copytree(resources.clusters_dir() / "platforms" / "example", self.profile_dir)
            (self.profile_dir / "manifests" / "careless-audit.yaml").write_text(CARELESS_WEBHOOK)
            (self.profile_dir / "images").mkdir()
            # The pause image the offline build made, under a name no node has: present after the
            # install only if the archive was loaded.
            subprocess.run(["docker", "tag", "registry.k8s.io/pause:3.10.1", ARCHIVE_IMAGE], check=True, timeout=60)
            subprocess.run(["docker", "save", "-o", str(self.profile_dir / "images" / "pause.tar"), ARCHIVE_IMAGE],
                           check=True, timeout=120)
            config = self.work / "base.yaml"
            config.write_text(BASE_CONFIG)
            self.provider = KindProvider(config, platform=load(self.profile_dir))
            if self.provider.exists():  # left by an interrupted earlier session
                self.provider.delete()
            self._started = time.monotonic()
            self._creation = self.provider.create_in_background()
        except Exception as exc:
            self._start_error = exc

    def wait(self) -> tuple[KindProvider, Path]:
        """Raises what the creation, or the preparation before it, raised (ProviderError,
        subprocess errors, OSError)."""
        self.start()
        if self._start_error is not None:
            raise self._start_error
        waiting = time.monotonic()
        seconds = self._creation.result()
        log.info("platform cluster %s: created in %.0f s, started %.0f s before it was needed, waited %.0f s",
                 self.provider.name, seconds, waiting - self._started, time.monotonic() - waiting)
        return self.provider, self.profile_dir

    def output(self) -> str:
        """What the creation (``kdrill cluster create --platform``) printed."""
        return self._creation.output() if self._creation is not None else ""

    def delete(self) -> None:
        if self._creation is None:
            return
        self._creation.stop()  # ended already when the platform tests ran; else no need to finish it
        if self.provider.exists():
            self.provider.delete()
        subprocess.run(["docker", "rmi", ARCHIVE_IMAGE], check=False, timeout=60, capture_output=True)
        self._creation.close()
        self._creation = None
