"""A drill that finds nothing to drill (pytest.skip in its body, e.g. no webhook installed) leaves a
record whose verdict is "skipped" with the reason, not a pass and not an error; and every record
carries this machine's CPU pressure per phase when the machine reports it. The Drill runs with
fakes for the cluster (no API call is made) and a real evidence writer."""

from __future__ import annotations

import json
import types

import pytest

from harness.components.topology import Topology
from harness.core.ledger import Ledger
from harness.evidence.records import EvidenceWriter
from harness.plugin.drill import Drill
from harness.probes.host_pressure import HostCpuPressure
from harness.spec.scenario import find_scenario


def _drill(tmp_path) -> Drill:
    scenario = find_scenario("webhook-blast-radius", None)
    cluster = types.SimpleNamespace(name="c", provider="kind", context="kind-c")
    topology = Topology(kubernetes_version="v1.35.4", control_plane=["c-control-plane"], workers=[],
                        kubelet_versions={})
    writer = EvidenceWriter.for_new_run(tmp_path / "reports", "r1")
    return Drill(scenario, "refused", cluster, topology, Ledger(tmp_path / "ledger"), writer, "r1")


def test_a_skip_in_the_drill_is_recorded_as_skipped_with_its_reason(tmp_path):
    drill = _drill(tmp_path)
    with drill.phase("setup"):
        pass
    with pytest.raises(pytest.skip.Exception) as skipped:
        pytest.skip("no admission webhook is installed: nothing to take down")
    record = json.loads(drill.finish(skipped.value).read_text())
    assert record["verdict"] == "skipped"
    assert record["errors"] == ["skipped: no admission webhook is installed: nothing to take down"]


def test_an_error_is_still_an_error(tmp_path):
    drill = _drill(tmp_path)
    record = json.loads(drill.finish(RuntimeError("boom")).read_text())
    assert record["verdict"] == "error" and record["errors"] == ["RuntimeError: boom"]


@pytest.mark.skipif(not HostCpuPressure.available(), reason="this machine has no /proc/pressure/cpu")
def test_the_record_carries_host_cpu_pressure_per_phase(tmp_path):
    drill = _drill(tmp_path)
    with drill.phase("setup"):
        pass
    record = json.loads(drill.finish(RuntimeError("boom")).read_text())
    assert set(record["observations"]["host_cpu_pressure"]["by_phase"]) == {"setup"}
    assert "host/cpu-pressure" in record["probes"]
