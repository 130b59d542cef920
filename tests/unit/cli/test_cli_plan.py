"""``kdrill validate`` and ``kdrill run --plan``: both work with no cluster and touch nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from harness import cli
from harness.cli import main

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def nothing_may_be_touched(monkeypatch: pytest.MonkeyPatch) -> None:
    def touched(*args, **kwargs):
        raise AssertionError("the plan touched kind, Docker or pytest")

    monkeypatch.setattr(cli, "prepare_kind", touched)
    monkeypatch.setattr(cli, "run_until_reverted", touched)
    monkeypatch.setattr(subprocess, "run", touched)
    monkeypatch.setattr(subprocess, "Popen", touched)


TWO_CONTEXTS = ("apiVersion: v1\nkind: Config\ncurrent-context: a\n"
                "clusters: [{name: s, cluster: {server: 'https://10.0.0.1:6443'}}]\n"
                "users: [{name: u, user: {}}]\n"
                "contexts: [{name: a, context: {cluster: s, user: u}}, {name: b, context: {cluster: s, user: u}}]\n")


@pytest.fixture(autouse=True)
def kubeconfig_of_this_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$KUBECONFIG: a file with contexts a and b (never the machine's own ~/.kube/config)."""
    path = tmp_path / "kubeconfig-ab"
    path.write_text(TWO_CONTEXTS)
    monkeypatch.setenv("KUBECONFIG", str(path))
    return path


def test_validate_accepts_the_shipped_scenarios(capsys, tree_entry_points) -> None:
    files = sorted(str(p) for p in (REPO / "scenarios").glob("*.yaml"))
    assert main(["validate", *files]) == 0
    assert capsys.readouterr().out.count("ok: ") == len(files)


def test_the_generic_fault_scenarios_validate_and_plan(tmp_path: Path, capsys, tree_entry_points) -> None:
    """pod-delete and service-blackhole, data only, with the faults this tree registers."""
    files = [str(REPO / "scenarios" / f"{name}.yaml") for name in ("pod-delete", "service-blackhole")]
    assert main(["validate", *files]) == 0
    assert main(["--reports", str(tmp_path / "reports"), "run", "--plan", "pod-delete", "service-blackhole"]) == 0
    out = capsys.readouterr().out
    assert "pod-delete: selector=app=web, count=1, grace_period_seconds=0" in out
    assert "service-blackhole: service_name=web" in out and "the API only" in out


def test_the_plan_says_what_a_fault_does_on_the_nodes_when_it_may(tmp_path: Path, capsys, tree_entry_points) -> None:
    """webhook-blast-radius needs only the API, and with node access also cuts kube-apiserver's
    connections: the plan says both; service-blackhole, which does nothing on nodes, says the API only."""
    assert main(["--reports", str(tmp_path / "reports"), "run", "--plan", "webhook-blast-radius",
                 "service-blackhole"]) == 0
    access = [line.strip() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("access")]
    assert access[0].startswith("access     the API only; with node access (exec) it also cuts kube-apiserver's open "
                                "connections to the backend's old pods"), access
    assert access[-1] == "access     the API only; cluster config ha", access


def test_validate_names_file_field_expected_and_got(tmp_path: Path, capsys) -> None:
    data = yaml.safe_load((REPO / "scenarios" / "etcd-member-loss.yaml").read_text())
    data["fault"]["params"]["one_down_hold_secnds"] = data["fault"]["params"].pop("one_down_hold_seconds")
    bad = tmp_path / "etcd-member-loss.yaml"
    bad.write_text(yaml.safe_dump(data))
    good = REPO / "scenarios" / "dns-saturation.yaml"
    assert main(["validate", str(good), str(bad)]) == 2
    out = capsys.readouterr().out
    assert f"ok: {good}" in out
    refusal = next(line for line in out.splitlines() if line.startswith("refused"))
    assert str(bad) in refusal and "one_down_hold_secnds" in refusal and "one_down_hold_seconds" in refusal


def test_validate_names_every_fault_a_data_only_scenario_can_use(tmp_path: Path, capsys, tree_entry_points) -> None:
    data = yaml.safe_load((REPO / "scenarios" / "service-without-endpoints.yaml").read_text())
    data["fault"]["kind"] = "apf-flood"  # a fault only a drill file drives
    bad = tmp_path / "service-without-endpoints.yaml"
    bad.write_text(yaml.safe_dump(data))
    assert main(["validate", str(bad)]) == 2
    refusal = capsys.readouterr().out
    assert "'fault.kind'" in refusal and "got apf-flood" in refusal
    for usable in ("pod-delete", "registry-outage", "scale-to-zero", "service-blackhole"):
        assert usable in refusal
    # A subclass of a data fault that only a drill file drives (it discovers its targets).
    assert "webhook-backend-down" not in refusal.split("can use (")[1].split(")")[0]
    data["fault"]["kind"] = "webhook-backend-down"
    data["fault"]["params"] = {"mode": "refused"}
    bad.write_text(yaml.safe_dump(data))
    assert main(["validate", str(bad)]) == 2
    assert "got webhook-backend-down" in capsys.readouterr().out
    # A fault no data-only scenario can use is named first, before what that fault would need.
    data["fault"]["kind"] = "node-freeze"
    data["fault"]["params"] = {}
    data["cluster"]["needs_node_access"] = False
    bad.write_text(yaml.safe_dump(data))
    assert main(["validate", str(bad)]) == 2
    refusal = capsys.readouterr().out
    assert "'fault.kind'" in refusal and "got node-freeze" in refusal and "needs_node_access" not in refusal


def test_plan_prints_faults_windows_and_expected_time_without_a_cluster(tmp_path: Path, capsys) -> None:
    reports = tmp_path / "reports"
    assert main(["--reports", str(reports), "run", "--plan", "etcd-member-loss", "control-plane-stop"]) == 0
    out = capsys.readouterr().out
    assert "nothing is touched" in out
    assert "control-plane-stop[components]" in out and "control-plane-stop[node-loss]" in out
    assert "one_down_hold_seconds 20" in out and "unknown (no intact past run)" in out
    assert not reports.exists()  # no run directory, no index


def test_plan_on_an_existing_cluster_says_what_its_node_channel_gives_and_creates_nothing(tmp_path: Path,
                                                                                        capsys) -> None:
    reports = str(tmp_path / "reports")
    assert main(["--reports", reports, "run", "--plan", "--context", "a", "--node-agent", "worker-node-loss",
                 "etcd-backup-restore"]) == 0
    out = capsys.readouterr().out
    worker = out.split("worker-node-loss:")[1].split("\n\n")[0]
    restore = out.split("etcd-backup-restore:")[1].split("\n\n")[0]
    assert "container (the node agent gives exec only: skipped there)" in worker, worker
    assert "exec (the node agent gives exec only)" in restore, restore
    assert "cluster config" not in out and "cluster's creation" not in out
    assert "refused without --allow-context" in out
    assert main(["--reports", reports, "run", "--plan", "--context", "a", "worker-node-loss"]) == 0
    assert "only a kind cluster on this machine's Docker gives node access" in capsys.readouterr().out


def test_new_writes_a_skeleton_that_validates_and_never_overwrites(tmp_path: Path, capsys) -> None:
    assert main(["new", "my-team-drill", "--dir", str(tmp_path)]) == 0
    path = tmp_path / "my-team-drill.yaml"
    assert "TODO" in path.read_text()
    # Every data fault's params are named there, so a newcomer need not read the faults' Python.
    assert "#   network-policy: pod_labels*, policy_types, policy_name, target_namespace" in path.read_text()
    assert main(["validate", str(path)]) == 2  # not a drill until its TODOs are filled in
    assert "'title'" in capsys.readouterr().out
    path.write_text(path.read_text().replace("TODO", "Done"))
    assert main(["validate", str(path)]) == 0
    capsys.readouterr()
    assert main(["new", "my-team-drill", "--dir", str(tmp_path)]) == 2  # refused, not overwritten
    assert "exists" in capsys.readouterr().err
    assert main(["new", "../Evil", "--dir", str(tmp_path)]) == 2
    assert "lowercase letters" in capsys.readouterr().err


def test_a_short_expected_time_is_given_in_seconds_not_as_0_min(tmp_path: Path, capsys) -> None:
    # service-without-endpoints has no past run here, so its windows (45 s) are the estimate.
    assert main(["--reports", str(tmp_path / "reports"), "run", "--plan", "service-without-endpoints"]) == 0
    out = capsys.readouterr().out
    assert "expected drill time: about 45 s" in out and "about 0 min" not in out


def test_plan_names_a_data_only_scenarios_registries_and_probes(tmp_path: Path, capsys) -> None:
    assert main(["--reports", str(tmp_path / "reports"), "run", "--plan", "serial-image-pull"]) == 0
    out = capsys.readouterr().out
    assert "container kdrill-registry-<cluster>-stuck" in out and "images pushed: app" in out
    assert "queued-pulls (image-pulls)" in out and "by-name (incluster-http)" in out


def test_run_with_the_node_agent_and_no_consent_is_refused_before_a_run_directory_is_made(tmp_path: Path, capsys) -> None:
    reports, kubeconfig = tmp_path / "reports", tmp_path / "kubeconfig"
    kubeconfig.write_text("")
    assert main(["--reports", str(reports), "run", "--node-agent", "--kubeconfig", str(kubeconfig), "pod-delete"]) == 2
    assert "--allow-context" in capsys.readouterr().err
    assert not reports.exists()
    # and on kind, none is needed
    assert main(["--reports", str(reports), "run", "--node-agent", "--allow-context", "c", "pod-delete"]) == 2
    assert "reached through its kubeconfig" in capsys.readouterr().err


def test_run_on_a_cluster_without_consent_is_refused_before_a_run_directory_is_made(tmp_path: Path, capsys,
                                                                                    monkeypatch) -> None:
    import harness.kube.providers.existing as existing

    monkeypatch.setattr(existing, "kind_clusters", lambda: [])  # no kind cluster on this "machine"
    reports, kubeconfig = tmp_path / "reports", tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: staging\n"
        "clusters: [{name: s, cluster: {server: 'https://10.0.0.1:6443'}}]\n"
        "users: [{name: u, user: {}}]\n"
        "contexts: [{name: staging, context: {cluster: s, user: u}}]\n")
    assert main(["--reports", str(reports), "run", "--kubeconfig", str(kubeconfig), "pod-delete"]) == 2
    err = capsys.readouterr().err
    assert "'staging'" in err and "--allow-context staging" in err
    assert not reports.exists()
    assert main(["--reports", str(reports), "run", "--context", "prod", "--kubeconfig", str(kubeconfig),
                 "pod-delete"]) == 2
    assert "context 'prod' is not in" in capsys.readouterr().err
    assert not reports.exists()
    # --plan touches nothing, so it needs no consent
    assert main(["--reports", str(reports), "run", "--plan", "--kubeconfig", str(kubeconfig), "pod-delete"]) == 0


def test_every_refusal_of_run_and_run_plan_exits_2_as_a_refused_scenario_does(tmp_path: Path, capsys) -> None:
    reports = str(tmp_path / "reports")
    assert main(["--reports", reports, "run", "--plan", "no-such-scenario"]) == 2  # a ScenarioError
    assert "a known scenario name" in capsys.readouterr().err
    assert main(["--reports", reports, "run", "--plan", str(tmp_path / "missing.yaml")]) == 2
    assert "no scenario file" in capsys.readouterr().err
    assert main(["--reports", reports, "run", "--plan", "--baseline", "no-such-run", "pod-delete"]) == 2
    assert "no run directory" in capsys.readouterr().err


def test_a_refused_run_in_the_unit_tests_keeps_its_signing_key_out_of_the_users_state(tmp_path: Path,
                                                                                      private_state_dir: Path) -> None:
    from harness.evidence.manifest import default_key_path

    # The key is loaded before the refusal (bad input is refused before anything is touched, the
    # key included), so it is made where this test's state is, not in ~/.local/state/kdrill.
    assert main(["--reports", str(tmp_path / "reports"), "run", "--node-agent", "pod-delete"]) == 2
    assert default_key_path() == private_state_dir / "signing-key.pem" and default_key_path().is_file()


def test_list_reads_a_teams_scenarios_directory(tmp_path: Path, capsys) -> None:
    data = yaml.safe_load((REPO / "scenarios" / "pod-delete.yaml").read_text())
    data["name"], data["title"] = "our-pod-delete", "Our own pod-delete"
    (tmp_path / "our-pod-delete.yaml").write_text(yaml.safe_dump(data))
    assert main(["list", "--scenarios-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "our-pod-delete" in out and "Our own pod-delete" in out and "control-plane-stop" not in out
    assert main(["list", "--scenarios-dir", str(tmp_path / "none")]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_validate_counts_each_cases_expectations_as_the_plan_does(capsys) -> None:
    assert main(["validate", str(REPO / "scenarios" / "control-plane-stop.yaml")]) == 0
    validated = capsys.readouterr().out
    assert main(["run", "--plan", "control-plane-stop"]) == 0
    planned = capsys.readouterr().out
    for case in ("components", "node-loss"):
        count = planned.split(f"control-plane-stop[{case}]")[1].split("  checks     ")[1].split(" ")[0]
        assert f"case {case}: {count}" in validated


def _scenario_dir(directory: Path, files: dict[str, str], edit=None) -> Path:
    """``directory`` holding ``files``: file name -> shipped scenario name, each a copy (``edit``
    changes the data of each before it is written)."""
    directory.mkdir(parents=True, exist_ok=True)
    for file, name in files.items():
        data = yaml.safe_load((REPO / "scenarios" / f"{name}.yaml").read_text())
        if edit:
            edit(data)
        (directory / file).write_text(yaml.safe_dump(data, sort_keys=False))
    return directory


def test_a_scenario_file_is_planned_and_run_with_its_whole_directory_as_the_drills_load_it(tmp_path: Path,
                                                                                           capsys) -> None:
    """The run's pytest reads the file's directory whole (harness/plugin.py): two files named
    pod-delete there are refused by the plan as by the run, before any run directory."""
    dup = _scenario_dir(tmp_path / "dup", {"copy.yaml": "pod-delete", "pod-delete.yaml": "pod-delete"})
    reports = tmp_path / "reports"
    for plan in (["--plan"], []):
        assert main(["--reports", str(reports), "run", *plan, str(dup / "copy.yaml")]) == 2
        assert "a name unique across scenarios" in capsys.readouterr().err
        assert main(["--reports", str(reports), "run", *plan, "--scenarios-dir", str(dup), "pod-delete"]) == 2
        assert "a name unique across scenarios" in capsys.readouterr().err
        assert not reports.exists()


def test_a_scenario_file_beside_an_invalid_one_is_refused_as_the_run_would(tmp_path: Path, capsys) -> None:
    directory = _scenario_dir(tmp_path / "s", {"pod-delete.yaml": "pod-delete"})
    (directory / "broken.yaml").write_text("name: broken\n")
    assert main(["--reports", str(tmp_path / "reports"), "run", "--plan", str(directory / "pod-delete.yaml")]) == 2
    assert "broken.yaml" in capsys.readouterr().err


def test_a_scenario_file_beside_other_valid_ones_is_planned_alone(tmp_path: Path, capsys) -> None:
    directory = _scenario_dir(tmp_path / "s", {"pod-delete.yaml": "pod-delete",
                                               "service-blackhole.yaml": "service-blackhole"})
    assert main(["--reports", str(tmp_path / "reports"), "run", "--plan", str(directory / "pod-delete.yaml")]) == 0
    out = capsys.readouterr().out
    assert "1 scenario(s)" in out and "pod-delete: " in out and "service-blackhole" not in out
    assert str((directory / "pod-delete.yaml").resolve()) in out


def test_plan_refuses_a_platform_profile_that_would_name_another_configs_cluster(tmp_path: Path, capsys) -> None:
    """A profile "ha" on the single config would make kdrill-ha, ha.yaml's cluster: the run
    refuses it (_check_platform_names), so the plan does too."""
    profile = tmp_path / "profile"
    profile.mkdir()
    (profile / "platform.yaml").write_text("name: ha\ndescription: makes kdrill-ha of the single config\n")

    def single(data):
        data["cluster"]["config"] = "single"

    directory = _scenario_dir(tmp_path / "s", {"pod-delete.yaml": "pod-delete"}, single)
    reports = tmp_path / "reports"
    for plan in (["--plan"], []):
        assert main(["--reports", str(reports), "run", *plan, "--platform", str(profile),
                     str(directory / "pod-delete.yaml")]) == 2
        assert "the cluster would be kdrill-ha" in capsys.readouterr().err
        assert not reports.exists()


def test_plan_names_the_platform_profile_its_hash_and_the_cluster(tmp_path: Path, capsys) -> None:
    from harness.platform.profile import load

    example = REPO / "clusters" / "platforms" / "example"
    reports = str(tmp_path / "reports")
    assert main(["--reports", reports, "run", "--plan", "--platform", str(example), "pod-delete"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "kind config ha, cluster kdrill-ha-example, platform profile example" in header
    assert f"sha256 {load(example).hash}" in header
    assert main(["--reports", reports, "run", "--plan", "--platform", str(example), "--cluster-name", "mine",
                 "pod-delete"]) == 0
    assert "cluster mine, platform profile example" in capsys.readouterr().out.splitlines()[0]
    assert main(["--reports", reports, "run", "--plan", "pod-delete"]) == 0
    assert "on kind config ha, cluster kdrill-ha;" in capsys.readouterr().out.splitlines()[0]


@pytest.mark.parametrize("name", ["Bad Name!", "UPPER", "-lead", "a_b", "", "x" * 51, "a/b"])
def test_a_cluster_name_kind_would_refuse_is_refused_with_and_without_plan(tmp_path: Path, capsys, name) -> None:
    reports = tmp_path / "reports"
    for plan in (["--plan"], []):
        assert main(["--reports", str(reports), "run", *plan, f"--cluster-name={name}", "pod-delete"]) == 2
        err = capsys.readouterr().err
        assert "--cluster-name" in err and "expected a kind cluster name" in err and repr(name) in err
        assert not reports.exists()
    assert main(["cluster", "create", f"--name={name}"]) == 2
    assert "--name" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["kdrill-ha", "my.cluster-2", "0a", "x" * 50])
def test_a_kind_cluster_name_is_accepted(tmp_path: Path, capsys, name) -> None:
    from harness.kube.providers.kind import cluster_name_problem

    assert cluster_name_problem(name) is None
    assert main(["--reports", str(tmp_path / "reports"), "run", "--plan", "--cluster-name", name, "pod-delete"]) == 0
    assert f"cluster {name};" in capsys.readouterr().out.splitlines()[0]


def test_plan_on_parallel_clusters_names_each_and_shares_the_time(tmp_path: Path, capsys, tree_entry_points) -> None:
    reports = str(tmp_path / "reports")
    assert main(["--reports", reports, "run", "--plan", "--clusters", "2", "pod-delete", "service-blackhole"]) == 0
    out = capsys.readouterr().out
    assert "cluster kdrill-ha-gw0, kdrill-ha-gw1 in parallel;" in out.splitlines()[0]
    assert "on 2 clusters in parallel: at least" in out


@pytest.mark.parametrize("args, says", [
    (["--clusters", "0"], "expected 1 to 8, got 0"),
    (["--clusters", "9"], "expected 1 to 8, got 9"),
    (["--clusters", "3", "--context", "a", "--context", "b"], "one --context per cluster"),
    (["--clusters", "2", "--context", "a"], "one --context per cluster"),
    (["--clusters", "2", "--kubeconfig", "k"], "one --context per cluster"),
    (["--context", "a", "--context", "a"], "given twice"),
    (["--clusters", "2", "--cluster-name", "x" * 48], "parallel clusters' names"),
])
def test_parallel_clusters_that_cannot_be_kept_apart_are_refused(tmp_path: Path, capsys, args, says) -> None:
    reports = tmp_path / "reports"
    for plan in (["--plan"], []):
        assert main(["--reports", str(reports), "run", *plan, *args, "pod-delete"]) == 2
        assert says in capsys.readouterr().err
        assert not reports.exists()


def test_list_names_what_runs_a_scenario_without_a_checkout_path(capsys) -> None:
    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    assert "drills/" not in listed
    assert "fault pod-delete; cluster ha; data, on the runner" in listed
    assert "fault drill-cluster; cluster ha; Python drill test_control_plane_upgrade.py" in listed
