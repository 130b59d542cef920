"""What the offline image build needs on this machine: Go (the Kubernetes and tool builds) and
debootstrap (the root filesystems); ``kdrill doctor`` and ``ensure_built`` both ask."""

from __future__ import annotations

import shutil

from harness.core import proc

VERSION_QUERY_SECONDS = 60  # `kind version`, `go env GOVERSION` answer at once; a hung one must not hang kdrill


def missing_build_tools(go: bool = True, debootstrap: bool = True) -> list[str]:
    """What the offline image build needs and this machine lacks, each with how to get it:
    Go 1.24 or later (the Kubernetes and tool builds) when ``go``, ``debootstrap`` (the root
    filesystems) when ``debootstrap``. Empty when nothing is missing."""
    missing = []
    found = shutil.which("go")
    if go and not found:
        missing.append("go 1.24 or later (https://go.dev/doc/install)")
    elif go:
        version = proc.run([found, "env", "GOVERSION"], timeout_seconds=VERSION_QUERY_SECONDS,
                           check=False).stdout.strip()
        parts = version.removeprefix("go").split(".")
        try:
            too_old = (int(parts[0]), int(parts[1].split("rc")[0])) < (1, 24)
        except (IndexError, ValueError):
            too_old = True
        if too_old:
            missing.append(f"go 1.24 or later, found {version or 'none'} (https://go.dev/doc/install)")
    if debootstrap and not shutil.which("debootstrap"):
        missing.append("debootstrap (apt-get install -y debootstrap)")
    return missing
