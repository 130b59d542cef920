#!/usr/bin/env python3
"""Fill the profile clusters/platforms/observability with its monitoring stack's image, offline.

  python3 clusters/platforms/observability.py

Builds Prometheus, Alertmanager and kube-state-metrics from their Go modules (`kdrill images
build observability`: the Go module proxy is the only source), then writes into the profile the
one file it does not commit:

  images/observability.tar   that image (`docker save`), loaded on every node at install

Then `kdrill cluster create --platform clusters/platforms/observability` and
`kdrill run etcd-member-loss --platform clusters/platforms/observability`.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from harness.kube.images import Build, BuildError, ensure_built, save_image  # noqa: E402

PROFILE = Path(__file__).resolve().parent / "observability"


def main() -> int:
    try:
        ensure_built(progress=lambda line: print(line, flush=True), targets=["observability"])
    except BuildError as exc:
        print(f"observability: {exc}", file=sys.stderr)
        return 1
    archive = save_image(Build().observability_image, PROFILE / "images" / "observability.tar")
    print(f"wrote {archive} ({archive.stat().st_size / 1e6:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
