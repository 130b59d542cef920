#!/usr/bin/env python3
"""Fill the example profile clusters/platforms/gatekeeper with OPA Gatekeeper, offline.

  python3 clusters/platforms/gatekeeper.py

Builds Gatekeeper from its Go module (`kdrill images build gatekeeper`: the Go module proxy is
the only source; 142 to 169 s here with Go's caches warm from the kind images), then
writes into the profile the two files it does not commit:

  manifests/10-gatekeeper.yaml   the manifest Gatekeeper's module publishes
                                 (manifest_staging/deploy/gatekeeper.yaml), with a header
                                 saying so and two changes, both to its image: the one
                                 built here, and IfNotPresent instead of Always (no registry
                                 to pull from: the image is loaded on every node from images/)
  images/gatekeeper.tar          that image (`docker save`)

Then `kdrill cluster create --platform clusters/platforms/gatekeeper` and
`kdrill run webhook-blast-radius --platform clusters/platforms/gatekeeper`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from harness.core.files import write_text_atomic  # noqa: E402
from harness.kube.images import GATEKEEPER_VERSION, Build, BuildError, ensure_built, save_image  # noqa: E402

PROFILE = Path(__file__).resolve().parent / "gatekeeper"
PUBLISHED_IMAGE = f"openpolicyagent/gatekeeper:{GATEKEEPER_VERSION}"
# The published manifest runs the image in two Deployments (controller-manager and audit).
CONTAINERS = 2


def localise(published: str, image: str) -> str:
    """The published manifest with its containers' ``image:`` line replaced by ``image`` and their
    ``imagePullPolicy: Always`` by ``IfNotPresent``, nothing else changed (whole lines only).
    Raises ValueError when the manifest does not hold those lines exactly CONTAINERS times each
    (another version's layout: look before installing it)."""
    lines = {"image": re.compile(rf"^(\s+(?:- )?)image: {re.escape(PUBLISHED_IMAGE)}$", re.MULTILINE),
             "pull policy": re.compile(r"^(\s+(?:- )?)imagePullPolicy: Always$", re.MULTILINE)}
    for what, line in lines.items():
        found = len(line.findall(published))
        if found != CONTAINERS:
            raise ValueError(f"expected {CONTAINERS} container {what} lines ({line.pattern}) in the published "
                             f"manifest, found {found}: not the layout this script knows")
    header = (f"# OPA Gatekeeper {GATEKEEPER_VERSION}: manifest_staging/deploy/gatekeeper.yaml from its Go module,\n"
              f"# written by clusters/platforms/gatekeeper.py; changed: image {PUBLISHED_IMAGE} -> {image}\n"
              "# (built here from the module) and imagePullPolicy Always -> IfNotPresent (no registry).\n")
    text = lines["image"].sub(lambda m: f"{m.group(1)}image: {image}", published)
    return header + lines["pull policy"].sub(lambda m: f"{m.group(1)}imagePullPolicy: IfNotPresent", text)


def main() -> int:
    try:
        ensure_built(progress=lambda line: print(line, flush=True), targets=["gatekeeper"])
    except BuildError as exc:
        print(f"gatekeeper: {exc}", file=sys.stderr)
        return 1
    build = Build()
    published = (build.step("go-gatekeeper").out / "gatekeeper.yaml").read_text()
    manifest = PROFILE / "manifests" / "10-gatekeeper.yaml"
    write_text_atomic(manifest, localise(published, build.gatekeeper_image))
    archive = save_image(build.gatekeeper_image, PROFILE / "images" / "gatekeeper.tar")
    print(f"wrote {manifest} and {archive} ({archive.stat().st_size / 1e6:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
