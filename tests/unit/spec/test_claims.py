"""Unit tests for harness.spec.claims: the catalogue behind ``kdrill list --claims``."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from harness.spec.claims import Claim, ClaimSource, format_claims, list_claims

SCENARIO = textwrap.dedent(
    """\
    name: {name}
    title: "{title}"
    drill: drills/test_{module}.py
    claim: >
      {claim}
    source:
      - title: "Kubernetes Components"
        url: https://kubernetes.io/docs/concepts/overview/components/
        section: "Node components"
      - title: "Kubelet"
        url: https://kubernetes.io/docs/reference/command-line-tools-reference/kubelet/
    cluster:
      config: ha
    fault:
      kind: control-plane-stop
      method: pause-node-containers
    expectations:
      - name: workload_http_success_ratio
        description: "HTTP probes succeed"
        bound: {{op: ">=", value: 0.99}}
        unit: ratio
      - name: api_recovery_seconds
        description: "API answers again"
        bound: {{op: "<=", value: 30}}
        unit: seconds
    """
)
LONG_CLAIM = (
    "Existing pods keep running and keep serving traffic while the control plane is unavailable; only "
    "changes to the cluster stop, and the kubelet keeps restarting failed containers from its local state "
    "until the API server answers again."
)


def write_scenario(directory: Path, name: str, claim: str = LONG_CLAIM, title: str = "A title") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(SCENARIO.format(name=name, title=title, module=name.replace("-", "_"), claim=claim))
    return path


@pytest.fixture
def scenarios(tmp_path: Path) -> Path:
    directory = tmp_path / "scenarios"
    write_scenario(directory, "control-plane-stop", title="Workload survives a stopped control plane")
    write_scenario(directory, "coredns-outage", claim="DNS lookups fail while CoreDNS is down.")
    (directory / "README.md").write_text("not a scenario")
    return directory


def test_lists_one_claim_per_scenario(scenarios: Path) -> None:
    claims = list_claims(scenarios)
    assert [c.drill for c in claims] == ["control-plane-stop", "coredns-outage"]
    first = claims[0]
    assert isinstance(first, Claim)
    assert first.text == LONG_CLAIM  # folded YAML joined into one paragraph
    assert first.title == "Workload survives a stopped control plane"
    assert first.drill_file == "drills/test_control_plane_stop.py"
    assert first.scenario_path == scenarios / "control-plane-stop.yaml"
    assert first.expectations == ("workload_http_success_ratio", "api_recovery_seconds")
    assert first.sources == (
        ClaimSource("Kubernetes Components", "https://kubernetes.io/docs/concepts/overview/components/", "Node components"),
        ClaimSource("Kubelet", "https://kubernetes.io/docs/reference/command-line-tools-reference/kubelet/", None),
    )


def test_claim_is_a_tuple_of_the_documented_fields(scenarios: Path) -> None:
    text, sources, drill, drill_file, scenario_path, expectations, _title = list_claims(scenarios)[1]
    assert text == "DNS lookups fail while CoreDNS is down."
    assert drill == "coredns-outage" and drill_file == "drills/test_coredns_outage.py"
    assert len(sources) == 2 and scenario_path.name == "coredns-outage.yaml" and len(expectations) == 2


def test_format_claims_blocks(scenarios: Path) -> None:
    text = format_claims(list_claims(scenarios))
    blocks = text.split("\n\n")
    assert len(blocks) == 2
    first = blocks[0].splitlines()
    assert first[0] == "control-plane-stop: Workload survives a stopped control plane"
    assert all(len(line) <= 100 for line in text.splitlines())
    source_at = next(i for i, line in enumerate(first) if line.startswith("  Source: "))
    claim_lines = first[1:source_at]
    assert len(claim_lines) >= 2 and all(line.startswith("  ") for line in claim_lines)
    assert " ".join(line.strip() for line in claim_lines) == LONG_CLAIM
    assert first[source_at].startswith("  Source: Kubernetes Components <https://kubernetes.io/")
    assert (
        "Source: Kubernetes Components <https://kubernetes.io/docs/concepts/overview/components/>, "
        "section 'Node components'"
    ) in " ".join(text.split())  # the line may wrap; the URL never breaks
    checked = " ".join(blocks[0].split("Checked by: ")[1].split())
    assert checked == (
        "control-plane-stop (drills/test_control_plane_stop.py), "
        "expectations: workload_http_success_ratio, api_recovery_seconds"
    )


def test_format_without_sources_or_drill_file() -> None:
    claim = Claim("Something holds.", (), "d", None, Path("s.yaml"), ())
    text = format_claims([claim])
    assert "Source: (no source recorded)" in text
    assert "Checked by: d (no drill file named), expectations: none" in text


def test_no_claims() -> None:
    assert format_claims([]) == "No claims found."


def test_empty_directory(tmp_path: Path) -> None:
    assert list_claims(tmp_path) == []


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="absent"):
        list_claims(tmp_path / "absent")


def test_scenario_module_errors_propagate(tmp_path: Path) -> None:
    from harness.spec import scenario
    (tmp_path / "bad.yaml").write_text("name: x\nclaim: y\n")  # valid YAML, invalid scenario
    with pytest.raises(scenario.ScenarioError, match="bad.yaml"):
        list_claims(tmp_path)


def test_repo_scenarios_all_have_claims_and_sources() -> None:
    directory = Path(__file__).resolve().parents[3] / "scenarios"
    claims = list_claims(directory)
    for claim in claims:
        assert claim.text and claim.sources and claim.expectations, claim.scenario_path
