"""The ``drill`` fixture: a :class:`harness.plugin.drill.Drill` for the test's scenario and case,
watched by the platform's vital signs, with the run's progress lines; its evidence is written after
the test body whatever happened (and a record says why when it does not run)."""

from __future__ import annotations

import logging

import allure
import pytest

from harness.cli.plan import expected_seconds, past_durations
from harness.core.ledger import Ledger
from harness.core.progress import RunProgress
from harness.evidence.failure_matrix import delivery_words
from harness.kube.providers import NODE_CHANNEL_SAYS, Cluster
from harness.kube.workloads import TOOLBOX_IMAGE, TOOLBOX_PULL_POLICY
from harness.plugin.cluster import settle_namespaces
from harness.plugin.detection import await_quiet, read_detection
from harness.plugin.drill import Drill
from harness.plugin.records import record_not_run
from harness.plugin.session import reports_dir, scenario_of, session_scenario
from harness.spec.scenario import Scenario

log = logging.getLogger("kdrill.plugin")


@pytest.fixture
def drill(request: pytest.FixtureRequest, drill_case, kdrill_run, kdrill_cluster, kdrill_topology, kdrill_identity,
          kdrill_vitals, kdrill_monitoring):
    """A :class:`harness.plugin.drill.Drill` for the test's scenario and case; its evidence is written
    after the test body whatever happened (and a record says why when it does not run)."""
    config = request.config
    scenario = session_scenario(config, scenario_of(request.node))
    label = scenario.name + (f"[{drill_case}]" if drill_case else "")  # as --plan and the progress lines name it
    _skip_without_node_access(config, kdrill_run["writer"], kdrill_cluster, scenario, drill_case, label)
    reporter = config.pluginmanager.get_plugin("terminalreporter")

    def progress(line: str) -> None:
        if reporter is not None:
            reporter.write_line(line)

    settle_namespaces(config, 0)
    session_progress = run_progress(config)
    progress(f"kdrill: {session_progress.started(label)}")
    d = Drill(scenario, drill_case, kdrill_cluster, kdrill_topology, Ledger(), kdrill_run["writer"],
              kdrill_run["run_id"], progress=progress)
    _label_for_allure(scenario, drill_case)
    d.record.cluster.update({k: kdrill_identity[k] for k in ("server", "kube_system_uid", "clock_offsets",
                                                               "node_channel") if k in kdrill_identity})
    d.observe("toolbox", {"image": TOOLBOX_IMAGE, "pull_policy": TOOLBOX_PULL_POLICY})
    # The platform's vital signs, whatever the drill's own claim looks at.
    try:
        vitals = d.vitals = kdrill_vitals.watch()
    except Exception as exc:  # recorded: a cluster that cannot run them is itself a finding
        vitals = None
        d.record.vital_signs = {"error": f"vital signs not watched: {type(exc).__name__}: {exc}"[:500]}
    expected = scenario.detection_for(drill_case)
    quiet = await_quiet(kdrill_monitoring, expected)
    if quiet is not None:
        d.observe("detection_quiet_before_fault", quiet)
    # Alertmanager keeps no history: whether an alert reached it is watched while the drill runs.
    watch = kdrill_monitoring.watch_alertmanager() if kdrill_monitoring and expected else None
    yield d
    error = _call_error(request.node)
    if vitals is not None:
        _finish_vitals(d, vitals, scenario, error)
    _finish_detection(d, kdrill_monitoring, scenario, error, watch)
    d.finish(error)
    _add_junit_properties(request.node, d, label)
    progress(f"kdrill: {session_progress.ended(label, d.record.verdict, d.record.duration_seconds or 0.0)}")
    # Whatever the drill left in its namespace goes, so the next drill starts clean. Its Services
    # (fixed NodePorts) go now; the namespace finalises while the next drill sets up (about 6 to
    # 12 s each here), and its ledger entry leaves only once it is gone (cluster.settle_namespaces).
    try:
        d.start_namespace_removal(config._kdrill_pending_namespaces)
    except Exception as exc:  # cleanup must not mask the drill's own outcome
        log.warning("could not delete namespace %s: %s", d.namespace, exc)


def _skip_without_node_access(config: pytest.Config, writer, cluster: Cluster, scenario: Scenario,
                              case: str | None, label: str) -> None:
    """Skip the case, with a "skipped" record saying why, when it needs node access the cluster
    does not give (which capability, in the drill's own terms: Scenario.node_access_levels)."""
    missing = scenario.node_access_missing(cluster, case) if scenario.needs_node_access else []
    if not missing:
        return
    reason = (f"{scenario.name} needs node access that {cluster.name} (an existing cluster reached "
              f"through a kubeconfig; node access: {NODE_CHANNEL_SAYS[cluster.node_channel]}) does not "
              f"give: it {'; it '.join(missing)}")
    record_not_run(config, writer, scenario.name, case, "skipped", reason)
    run_progress(config).dropped(label)
    pytest.skip(reason)


def _call_error(item: pytest.Item) -> BaseException | None:
    """What the test body raised (harness.plugin.records keeps it on the item), or a failure of its
    call as a RuntimeError with the report's text; None when it passed."""
    call = getattr(item, "_kdrill_call_report", None)
    error = getattr(item, "_kdrill_call_excinfo", None)
    if call is not None and call.failed and error is None:
        error = RuntimeError(call.longreprtext[-2000:])
    return error


def _finish_vitals(d: Drill, vitals, scenario: Scenario, error: BaseException | None) -> None:
    """The vital signs' verdicts into the drill's record and timelines; each flagged one said."""
    injections = d.record.observations.get("injections", [])
    if error is None:  # a failed drill ends at once; its unmeasured window is flagged, not waited for
        vitals.await_after(injections)
    covered = {sign: next(name for name in names if name in d.expectations)
               for sign, names in scenario.vital_signs.items() if any(name in d.expectations for name in names)}
    d.record.vital_signs = vitals.finish(injections, covered)
    d.add_timelines(vitals.timelines)
    for sign in d.record.vital_signs["flagged"]:
        vital = d.record.vital_signs["signs"][sign]
        d.say(f"FLAGGED vital sign {sign}: {vital['reason']}: "
              f"{ {k: v for k, v in vital.items() if k in ('baseline', 'fault', 'after', 'added')} }")


def _finish_detection(d: Drill, monitoring, scenario: Scenario, error: BaseException | None, watch=None) -> None:
    """Whether the platform's monitoring noticed (harness/plugin/detection.py), into the record;
    each expected alert said, with its delivery when ``watch`` (the Alertmanager's) ran. A drill
    that failed before its fault, or without a Prometheus to read and nothing expected, records none."""
    expected = scenario.detection_for(d.case)
    injections = d.record.observations.get("injections", [])
    try:
        if (not expected and monitoring is None) or (error is not None and not injections):
            return
        d.record.detection = read_detection(monitoring, expected, injections, watch)
    except Exception as exc:  # recorded: the drill's own outcome stands, its detection is an error
        d.record.detection = {"verdict": "error", "why": f"detection not read: {type(exc).__name__}: {exc}"[:500]}
    finally:
        if watch is not None:
            watch.stop()
    for alert in d.record.detection.get("alerts", []):
        resolved = alert["resolved_after_seconds"]
        d.say(f"detection {alert['alert']}: {alert['outcome']}" + (f" ({alert['why']})" if alert["why"] else
              f" (fired after {alert['fired_after_seconds']:.0f} s, resolved {abs(resolved):.0f} s "
              f"{'after' if resolved >= 0 else 'before'} the revert)") + delivery_words(alert.get("delivery")))
    if d.record.detection.get("verdict") in ("error", "not checked"):
        d.say(f"detection {d.record.detection['verdict']}: {d.record.detection.get('why')}")


def _add_junit_properties(item: pytest.Item, d: Drill, label: str) -> None:
    """JUnit XML: each expectation's measured value and bound as properties of the test case
    (pytest writes the teardown report's user_properties), and the drill's verdict and duration."""
    for x in d.record.expectations:
        item.user_properties += [(f"{x['name']}.measured", x["measured"]),
                                 (f"{x['name']}.bound", x["bound_text"]),
                                 (f"{x['name']}.unit", x["unit"]), (f"{x['name']}.verdict", x["verdict"])]
    item.user_properties += [("kdrill.verdict", d.record.verdict), ("kdrill.drill", label),
                             ("kdrill.duration_seconds", d.record.duration_seconds)]


def run_progress(config: pytest.Config) -> RunProgress:
    """The session's :class:`harness.core.progress.RunProgress`, made by its first drill: the planned
    drills, with the durations ``kdrill run --plan`` would expect."""
    progress = getattr(config, "_kdrill_progress", None)
    if progress is None:
        try:
            durations = past_durations(reports_dir(config))
        except Exception as exc:  # an estimate, not a reason to stop a drill
            log.warning("no past durations for the progress lines: %s", exc)
            durations = {}
        planned, expected = [], {}
        for _, name, case in getattr(config, "_kdrill_planned", []):
            label = name + (f"[{case}]" if case else "")
            planned.append(label)
            try:
                guess = expected_seconds(session_scenario(config, name), case, durations)
            except Exception:  # an unreadable scenario is refused where its drill runs
                guess = None
            if guess is not None:
                expected[label] = guess[0]
        progress = config._kdrill_progress = RunProgress(planned, expected)
    return progress


def _label_for_allure(scenario: Scenario, case: str | None) -> None:
    """Title, severity, the fault as a tag, and a link to each source document."""
    allure.dynamic.title(scenario.title + (f" [{case}]" if case else ""))
    allure.dynamic.severity(allure.severity_level(scenario.severity))
    allure.dynamic.tag(scenario.fault_kind)
    allure.dynamic.label("scenario", scenario.name)
    for source in scenario.sources:
        allure.dynamic.link(source.url, name=source.title + (f": {source.section}" if source.section else ""))
