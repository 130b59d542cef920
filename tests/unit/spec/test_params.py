"""Fault parameters are checked against what the fault declares, before anything is touched."""

import pytest
from scenario_copies import load_edited

from harness.faults import check_params
from harness.spec.scenario import ScenarioError


def scenario_with(tmp_path, edit):
    return load_edited(tmp_path, "control-plane-stop", edit)


def error_for(tmp_path, edit) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        check_params(scenario_with(tmp_path, edit))
    return info.value


def test_the_shipped_scenario_passes(tmp_path):
    check_params(scenario_with(tmp_path, lambda d: None))


def test_a_misspelt_name_is_refused_with_the_nearest_known_one(tmp_path):
    err = error_for(tmp_path, lambda d: d["fault"]["params"].update(hold_secnds=60))
    assert err.field == "fault.params.hold_secnds" and "did you mean 'hold_seconds'" in err.expected


@pytest.mark.parametrize("value", ["sixty", "1:30", -5, 0, True, 10 ** 9, [1], 1e9])
def test_bad_durations_are_refused(tmp_path, value):
    err = error_for(tmp_path, lambda d: d["fault"]["params"].update(hold_seconds=value))
    assert err.field == "fault.params.hold_seconds"
    assert "seconds from 10 to 600" in err.expected and err.got == repr(value)


def test_a_case_is_checked_too(tmp_path):
    err = error_for(tmp_path, lambda d: d["cases"][1]["params"].update(method="reboot"))
    assert err.field == "cases[1].params.method" and "'pause-node-containers'" in err.expected


def test_a_required_parameter_missing_everywhere_is_refused(tmp_path):
    def drop(d):
        del d["fault"]["params"]["hold_seconds"]
    err = error_for(tmp_path, drop)
    assert err.field == "fault.params.hold_seconds" and "required" in err.expected


def test_local_kind_means_listed_by_kind_and_served_on_loopback():
    from harness.kube.providers.existing import ContextNotAllowed, check_destructive_allowed, local_kind_cluster

    assert local_kind_cluster("kind-a", "https://127.0.0.1:39000", ["a"])
    assert not local_kind_cluster("kind-prod", "https://127.0.0.1:6443", ["a"])  # not a kind cluster here
    assert not local_kind_cluster("kind-a", "https://10.0.0.5:6443", ["a"])  # not this machine
    assert not local_kind_cluster("a", "https://127.0.0.1:6443", ["a"])
    with pytest.raises(ContextNotAllowed, match="--allow-context kind-prod"):
        check_destructive_allowed("kind-prod", "https://prod.example:6443", [], ["a"])
    check_destructive_allowed("kind-prod", "https://prod.example:6443", ["kind-prod"], ["a"])


def test_a_renamed_copy_is_refused_because_no_drill_test_is_marked_with_it(tmp_path):
    from harness.cli.scenarios import check_references


    scenario = load_edited(tmp_path, "leader-failover", lambda d: d.update(name="leader-failover-short"))
    with pytest.raises(ScenarioError) as info:
        check_references(scenario)
    assert info.value.field == "name" and "needs a test of its own" in info.value.expected
    check_references(load_edited(tmp_path, "leader-failover", lambda d: None))


def test_a_renamed_copy_of_a_data_only_scenario_is_a_drill_of_its_own(tmp_path):
    """control-plane-stop is data only: a team's copy under another name, with a longer hold, needs
    no Python (the runner runs it)."""
    from harness.cli.scenarios import check_references

    def longer(d):
        d.update(name="control-plane-stop-short")
        d["fault"]["params"]["hold_seconds"] = 70
        d["runner"]["windows"]["hold_seconds"] = 70
    check_references(scenario_with(tmp_path, longer))


@pytest.mark.parametrize("edit, field, expected", [
    (lambda d: d["fault"]["params"].update(from_version="v1.20.0"), "fault.params.from_version", "one of 'v1.34.4'"),
    (lambda d: d["fault"]["params"].update(skip_to_version="1.36"), "fault.params.skip_to_version",
     "a Kubernetes release such as 'v1.36.3'"),
    (lambda d: d["fault"]["params"].update(skip_to_version="v1.36.3\n"), "fault.params.skip_to_version",
     "a Kubernetes release such as 'v1.36.3'"),
    (lambda d: d["cases"][0]["params"].update(order="skip-workers"), "cases[0].params.order",
     "'documented', 'kubelet-first', 'newer-kubelet-joins'"),
])
def test_an_upgrade_rehearsal_takes_only_releases_it_can_build(tmp_path, edit, field, expected):
    with pytest.raises(ScenarioError) as info:
        check_params(load_edited(tmp_path, "control-plane-upgrade", edit))
    assert info.value.field == field and expected in info.value.expected
