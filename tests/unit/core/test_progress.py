"""Progress lines (harness/core/progress.py): drill i of N, the expected duration, the time left."""

from __future__ import annotations

from harness.core.progress import RunProgress, minutes


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_each_drill_says_its_place_its_expected_duration_and_the_time_left() -> None:
    clock = Clock()
    run = RunProgress(["a", "b[x]", "c"], {"a": 60, "b[x]": 120, "c": 30}, clock=clock)
    assert run.started("a") == "drill 1 of 3: a (about 60 s expected); run: about 4 min left"
    clock.now += 45
    assert run.seconds_left() == 15 + 120 + 30  # the current drill's remainder counts
    clock.now += 35  # it ran over its figure: its remainder is 0, not negative
    assert run.seconds_left() == 150
    assert run.ended("a", "passed", 80) == "drill 1 of 3: a passed in 80 s; 2 to go, run: about 2 min left"
    assert run.started("b[x]").startswith("drill 2 of 3: b[x] (about 2 min expected)")


def test_a_drill_with_no_figure_counts_as_the_mean_of_those_finished_and_unknown_before_any() -> None:
    run = RunProgress(["a", "b", "c"], {"b": 100}, clock=Clock())
    assert run.started("a") == "drill 1 of 3: a (no expected duration); time left unknown"
    run.ended("a", "failed", 50)
    # b as expected (100 s), c as the mean of the finished ones (50 s).
    assert run.seconds_left() == 150
    assert run.started("b").endswith("run: about 2 min left")


def test_a_drill_not_in_the_plan_takes_no_planned_drills_place_and_none_counts_twice() -> None:
    run = RunProgress(["a"], {"a": 10}, clock=Clock())
    assert run.started("z").startswith("a drill not among the 1 planned: z")
    assert run.ended("z", "passed", 5).startswith("a drill not among the 1 planned: z passed in 5 s; 1 to go")
    run.ended("a", "passed", 10)
    run.ended("a", "passed", 10)
    assert run.seconds_left() == 0 and run.ended("a", "passed", 10).endswith("0 to go, run: about 0 s left")


def test_minutes() -> None:
    assert minutes(89) == "about 89 s" and minutes(90) == "about 2 min" and minutes(1500) == "about 25 min"


def test_the_session_plans_every_drill_with_the_figures_the_plan_would_give(tmp_path) -> None:
    """The plugin's RunProgress: the planned drills in order, a data-only scenario expected for
    its windows (no past run under an empty reports directory), a drill file's unknown."""
    from harness.plugin.drill_fixture import run_progress
    from harness.spec.scenario import find_scenario

    class Config:
        _kdrill_planned = [(None, "pod-delete", None), (None, "leader-failover", "scheduler")]

        def getoption(self, name):
            return str(tmp_path) if name == "--kdrill-reports" else None

    config = Config()
    config._kdrill_scenarios = {name: find_scenario(name, None) for name in ("pod-delete", "leader-failover")}
    run = run_progress(config)
    assert run_progress(config) is run  # one per session
    windows = sum(config._kdrill_scenarios["pod-delete"].runner["windows"].values())
    assert run.planned == ["pod-delete", "leader-failover[scheduler]"] and run.expected == {"pod-delete": windows}


def test_a_skipped_drill_leaves_the_time_left_and_the_count_to_go() -> None:
    """A review found a skipped drill (no node access) kept in "to go" to the end of the run."""
    run = RunProgress(["a", "b", "c"], {"a": 60, "b": 60, "c": 60}, clock=Clock())
    run.ended("a", "passed", 60)
    run.dropped("b")
    assert run.seconds_left() == 60
    assert run.ended("c", "passed", 60) == "drill 3 of 3: c passed in 60 s; 0 to go, run: about 0 s left"
