"""What the session reads of its cluster once, for every drill: its topology, its identity (kept in
run.json with the platform profile that built it and the image sources its workloads use), and the
vital-sign fixtures each drill watches."""

from __future__ import annotations

import time

import pytest

from harness.components.image_sources import discover as image_sources
from harness.components.topology import cluster_identity, discover
from harness.core.ledger import Ledger
from harness.engine.vitals import VitalSigns
from harness.platform.profile import recorded
from harness.plugin.detection import monitoring_for


@pytest.fixture(scope="session")
def kdrill_topology(kdrill_cluster):
    """The cluster's topology (harness.components.topology.discover), read once for the session."""
    return discover(kdrill_cluster)


@pytest.fixture(scope="session")
def kdrill_identity(kdrill_cluster, kdrill_topology, kdrill_run):
    """The cluster's identity and clock offsets (harness.components.topology.cluster_identity), read once and
    kept in run.json (written again at the end of the run)."""
    identity = cluster_identity(kdrill_cluster, kdrill_topology)
    meta = kdrill_run["meta"]
    meta["cluster"] = identity
    # Which platform profile built this cluster (harness/platform/profile.py), so a run says what
    # it drilled and kdrill compare keeps platforms apart; read from the cluster, not from the
    # option, so a run through a kubeconfig on such a cluster says it too.
    try:
        record = recorded(kdrill_cluster)
        meta["platform"] = record or {"hash": None, "note": "no platform profile recorded on this cluster"}
        # The record is the cluster's word. With --kdrill-platform the directory was read too and
        # hashed the same (kdrill_cluster refuses a cluster whose record differs): say which.
        profile = getattr(getattr(kdrill_cluster, "kind_provider", None), "platform", None)
        if profile is not None and record and record.get("hash") == profile.hash:
            meta["platform_checked_against"] = str(profile.root)
    except Exception as exc:  # evidence, not a reason to stop
        meta["platform"] = {"hash": None, "note": f"not read: {type(exc).__name__}"}
    # The image sources the platform's workloads use, and the nodes where an outage of each would
    # show (harness/components/image_sources.py): what a registry outage would hit, read at the start.
    try:
        meta["image_sources"] = {"read_at": time.time(), "sources": image_sources(kdrill_cluster)}
    except Exception as exc:  # evidence, not a reason to stop
        meta["image_sources"] = {"note": f"not read: {type(exc).__name__}: {exc}"[:300]}
    return identity


@pytest.fixture(scope="session")
def kdrill_vitals(kdrill_cluster, kdrill_topology):
    """The session's vital-sign fixtures (harness/engine/vitals.py), set up by the first drill."""
    vitals = VitalSigns(kdrill_cluster, (kdrill_topology.workers or [None])[-1], ledger=Ledger())
    yield vitals
    vitals.delete()


@pytest.fixture(scope="session")
def kdrill_monitoring(request: pytest.FixtureRequest, kdrill_cluster, kdrill_run):
    """Where the session reads detection (harness/plugin/detection.py), or None; named in run.json."""
    monitoring = monitoring_for(request.config, kdrill_cluster)
    kdrill_run["meta"]["detection_source"] = monitoring.source if monitoring else None
    return monitoring
