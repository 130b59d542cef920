"""Unit tests for harness.evidence.report on a hand-written run directory.

The report is a pure function of the evidence files, so synthetic records are
enough here; tests/browser renders the same kind of report in Chromium.
"""

from __future__ import annotations

import html
import json
import re
from datetime import datetime, timezone
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness.evidence.reading import load_drill_records, scan_records
from harness.evidence.report import REPORT_NAME, ReportError, build_report, render_report
from harness.evidence.report_chart import MAX_MARKS, timeline_svg

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z


# --------------------------------------------------------------------------- #
# Synthetic evidence
# --------------------------------------------------------------------------- #


def write_json(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def samples(start: float, n: int, every: float, fail_from: float, fail_to: float) -> list[dict]:
    out = []
    for i in range(n):
        t = start + i * every
        ok = not (fail_from <= t < fail_to)
        out.append({"t": t, "ok": ok, "latency_seconds": 0.01 if ok else None, "detail": "", "labels": {}})
    return out


def record(drill: str, case: str | None, verdict: str, start: float, **overrides: object) -> dict:
    stem = drill if case is None else f"{drill}--{case}"
    data = {
        "run_id": "run-1",
        "drill": drill,
        "case": case,
        "title": f"Title of {drill}",
        "claim": f"Claim of {drill}: pods keep serving.",
        "verdict": verdict,
        "started_at": start,
        "finished_at": start + 60,
        "duration_seconds": 60.0,
        "cluster": {
            "name": "kdrill",
            "provider": "kind",
            "kubernetes_version": "v1.31.2",
            "context": "kind-kdrill",
            "nodes": [
                {"name": "kdrill-control-plane", "roles": ["control-plane"], "kubelet_version": "v1.31.2"},
                {"name": "kdrill-worker", "roles": ["worker"], "kubelet_version": "v1.31.1"},
            ],
        },
        "fault": {
            "kind": "control-plane-stop",
            "method": "pause-node-containers",
            "params": {"hold_seconds": 20},
            "where": ["kdrill-control-plane", {"node": "kdrill-control-plane"}],
            "injected_at": start + 10,
            "reverted_at": start + 30,
            "revert_verified": True,
        },
        "phases": [
            {"name": "baseline", "started_at": start, "ended_at": start + 10},
            {"name": "control-plane-down", "started_at": start + 10, "ended_at": start + 30},
        ],
        "expectations": [
            {
                "name": "api_recovery_seconds",
                "description": "API answers again soon",
                "bound": {"op": "<=", "value": 30},
                "bound_text": "<= 30",
                "unit": "seconds",
                "measured": 12.5,
                "verdict": "passed",
                "became_true_at": start + 42.5,
                "detail": "",
                "phase": None,
            },
            {
                "name": "workload_http_success_ratio",
                "description": "HTTP keeps working",
                "bound": {"op": ">=", "value": 0.99},
                "bound_text": ">= 0.99",
                "unit": "ratio",
                "measured": 1.0 if verdict == "passed" else None,
                "verdict": verdict,
                "became_true_at": None,
                "detail": "" if verdict == "passed" else "not measured",
                "phase": "control-plane-down",
            },
        ],
        "probes": {
            "workload-http": {
                "samples": 120, "successes": 100, "failures": 20, "success_ratio": 100 / 120,
                "longest_gap_seconds": 10.0, "first_sample_at": start, "last_sample_at": start + 59.5,
                "latency_p50_seconds": 0.01, "latency_p99_seconds": 0.01,
            },
            "api-health": {
                "samples": 0, "successes": 0, "failures": 0, "success_ratio": None,
                "longest_gap_seconds": None, "first_sample_at": None, "last_sample_at": None,
                "latency_p50_seconds": None, "latency_p99_seconds": None,
            },
        },
        "observations": {"restarts": 0, "nodes": ["a", "b"]},
        "source": [{"title": "Kubernetes Components", "url": "https://kubernetes.io/docs/concepts/", "section": "Node"}],
        "scenario": {"name": drill},
        "errors": [],
        "evidence_files": {"timeline": f"{stem}.timeline.json"},
        "kdrill_version": "0.1.0",
    }
    data.update(overrides)
    return data


def make_run(run_dir: Path, *, with_timelines: bool = True) -> Path:
    write_json(
        run_dir / "run.json",
        {
            "run_id": "run-1", "started_at": T0, "finished_at": T0 + 200, "user": "alice", "host": "box",
            "git_commit": "abc123def", "git_dirty": True, "kdrill_version": "0.1.0", "python": "3.11.7",
            "command": "kdrill run --all",
        },
    )
    drills = [("control-plane-stop", "paused", "passed", T0), ("dns-outage", None, "failed", T0 + 100)]
    for drill, case, verdict, start in drills:
        stem = drill if case is None else f"{drill}--{case}"
        write_json(run_dir / f"{stem}.json", record(drill, case, verdict, start))
        if with_timelines:
            write_json(
                run_dir / f"{stem}.timeline.json",
                {"workload-http": samples(start, 120, 0.5, start + 12, start + 22), "api-health": []},
            )
    write_json(run_dir / "manifest.json", {"files": {}})  # not a drill record
    return run_dir


# --------------------------------------------------------------------------- #
# A tiny DOM for assertions
# --------------------------------------------------------------------------- #


class Element:
    def __init__(self, tag: str, attrs: dict[str, str], parent: Element | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Element] = []
        self.text: list[str] = []
        self.content: list[Element | str] = []  # children and text, in document order

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def iter(self):
        yield self
        for child in self.children:
            yield from child.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Element]:
        return [
            e
            for e in self.iter()
            if (tag is None or e.tag == tag)
            and (cls is None or cls in e.classes)
            and all(e.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())
        ]

    def all_text(self) -> str:
        return " ".join("".join(e.text) for e in self.iter())

    def flat_text(self) -> str:
        """The text as a reader sees it: in document order, whitespace collapsed."""
        block = {"div", "p", "li", "ul", "tr", "td", "th", "summary", "pre", "br", "h2", "h3", "h4", "details"}
        parts = [c if isinstance(c, str) else f" {c.flat_text()} " if c.tag in block else c.flat_text()
                 for c in self.content]
        return " ".join("".join(parts).split())


class TreeBuilder(HTMLParser):
    VOID = {"meta", "br", "img", "input", "link", "hr", "col", "area", "base", "source", "wbr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#root", {}, None)
        self.current = self.root

    def handle_starttag(self, tag, attrs):
        el = Element(tag, {k: v or "" for k, v in attrs}, self.current)
        self.current.children.append(el)
        self.current.content.append(el)
        if tag not in self.VOID:
            self.current = el

    def handle_startendtag(self, tag, attrs):
        el = Element(tag, {k: v or "" for k, v in attrs}, self.current)
        self.current.children.append(el)
        self.current.content.append(el)

    def handle_endtag(self, tag):
        node = self.current
        while node is not self.root and node.tag != tag:
            node = node.parent
        if node is not self.root:
            self.current = node.parent

    def handle_data(self, data):
        self.current.text.append(data)
        self.current.content.append(data)


def parse(html_text: str) -> Element:
    builder = TreeBuilder()
    builder.feed(html_text)
    builder.close()
    return builder.root


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return make_run(tmp_path / "run-1")


@pytest.fixture
def report(run_dir: Path) -> tuple[str, Element]:
    text = build_report(run_dir).read_text(encoding="utf-8")
    return text, parse(text)


# --------------------------------------------------------------------------- #
# Tests
# --------------------------------------------------------------------------- #


def test_report_written_into_run_dir(run_dir: Path) -> None:
    path = build_report(run_dir)
    assert path == run_dir / REPORT_NAME
    assert path.is_file()
    assert not list(run_dir.glob(".report.*")), "temporary file left behind"


def test_only_drill_records_are_loaded(run_dir: Path) -> None:
    names = [p.name for p, _ in load_drill_records(run_dir)]
    assert names == ["control-plane-stop--paused.json", "dns-outage.json"]


def test_each_drill_has_a_section_with_hooks(report) -> None:
    _, dom = report
    sections = dom.find_all("section", cls="drill")
    assert [(s.attrs["data-drill"], s.attrs["data-verdict"]) for s in sections] == [
        ("control-plane-stop", "passed"),
        ("dns-outage", "failed"),
    ]
    assert sections[0].attrs["data-case"] == "paused"


def test_header_has_run_metadata_in_utc(report) -> None:
    text, dom = report
    assert "alice" in text and "box" in text
    assert "2023-11-14T22:13:20.000Z" in text  # run started_at, UTC
    assert "abc123def" in text and "dirty" in text
    assert "kdrill run --all" in text


def test_cluster_and_nodes_from_first_record(report) -> None:
    _, dom = report
    nodes = dom.find_all("table", cls="nodes")
    assert len(nodes) == 1
    rows = nodes[0].find_all("tr")[1:]
    assert [r.all_text().split()[:3] for r in rows] == [
        ["kdrill-control-plane", "control-plane", "v1.31.2"],
        ["kdrill-worker", "worker", "v1.31.1"],
    ]
    assert "v1.31.2" in dom.find_all("section", cls="cluster")[0].all_text()


def test_summary_table_lists_every_drill(report) -> None:
    _, dom = report
    table = dom.find_all("table", cls="verdicts")[0]
    rows = table.find_all("tr")[1:]
    assert len(rows) == 2
    assert "control-plane-stop" in rows[0].all_text() and "paused" in rows[0].all_text()
    assert "row-fail" in rows[1].classes and "failed" in rows[1].all_text()


def test_one_timeline_svg_per_probe_with_fault_window_and_phases(report) -> None:
    _, dom = report
    for section in dom.find_all("section", cls="drill"):
        svgs = section.find_all("svg", cls="timeline")
        assert sorted(s.attrs["data-probe"] for s in svgs) == ["api-health", "workload-http"]
        for svg in svgs:
            assert len(svg.find_all("rect", cls="fault-window")) == 1
            labels = [e.all_text() for e in svg.find_all("text", cls="phase-label")]
            assert any("baseline" in label for label in labels)
            assert len(svg.find_all("line", cls="phase-marker")) == 2
        http = next(s for s in svgs if s.attrs["data-probe"] == "workload-http")
        assert http.find_all("g", cls="marks-ok")[0].find_all("rect")
        assert http.find_all("g", cls="marks-fail")[0].find_all("rect")
        assert http.find_all("path", cls="latency")


def test_probe_with_zero_samples_is_drawn_empty_and_flagged(report) -> None:
    _, dom = report
    svg = dom.find_all("svg", cls="timeline", data_probe="api-health")[0]
    assert "no samples recorded" in svg.all_text()
    assert not svg.find_all("g", cls="marks-ok")
    probe_rows = dom.find_all("table", cls="probes")[0].find_all("tr", cls="row-warn")
    assert "api-health" in probe_rows[0].all_text()


def test_expectations_rows_show_verdicts_and_mark_failures(report) -> None:
    _, dom = report
    failed = dom.find_all("section", cls="drill", data_drill="dns-outage")[0]
    table = failed.find_all("table", cls="expectations")[0]
    rows = table.find_all("tr")[1:]
    assert [r.attrs["data-verdict"] for r in rows] == ["passed", "failed"]
    assert "row-fail" in rows[1].classes and "row-fail" not in rows[0].classes
    first = rows[0].all_text()
    assert "12.5 seconds" in first and "<= 30" in first and "+42.5 s" in first
    assert "not measured" in rows[1].all_text()  # measured is null


def test_claim_source_fault_and_reverts(report) -> None:
    text, dom = report
    section = dom.find_all("section", cls="drill")[0]
    quote = section.find_all("blockquote", cls="claim")[0]
    assert "pods keep serving" in quote.all_text()
    link = quote.find_all("a")[0]
    assert link.attrs["href"] == "https://kubernetes.io/docs/concepts/"
    assert "Node" in quote.all_text()
    fault = section.find_all("table", cls="fault")[0].all_text()
    assert "control-plane-stop" in fault and "pause-node-containers" in fault and "hold_seconds" in fault
    assert "window 20 s" in fault and "2023-11-14T22:13:30.000Z" in fault
    reverts = section.find_all("table", cls="reverts")[0].all_text()
    assert "2023-11-14T22:13:50.000Z" in reverts and "yes" in reverts


def test_everything_from_records_is_escaped(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    evil = '<script>alert("x")</script>'
    rec = record(
        "evil",
        None,
        "failed",
        T0,
        title=evil,
        claim=evil,
        observations={evil: evil},
        errors=[evil],
        source=[{"title": evil, "url": "javascript:alert(1)", "section": evil}],
        probes={evil: {"samples": 0}},
    )
    write_json(run_dir / "evil.json", rec)
    write_json(run_dir / "evil.timeline.json", {evil: []})
    text = build_report(run_dir).read_text(encoding="utf-8")
    assert "<script" not in text.lower()
    assert "&lt;script&gt;" in text
    assert 'href="javascript:' not in text
    assert 'data-probe="&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;"' in text  # markupsafe's entity for "


def test_report_is_self_contained(report) -> None:
    text, dom = report
    assert not dom.find_all("script") and not dom.find_all("link") and not dom.find_all("img")
    assert not re.search(r"""\bsrc\s*=|@import|url\(""", text)
    assert "Content-Security-Policy" in text


def test_footer_points_at_verify(report) -> None:
    _, dom = report
    assert "kdrill verify run-1" in dom.find_all("footer")[0].all_text()


def test_missing_timeline_is_reported(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", with_timelines=False)
    text = build_report(run_dir).read_text(encoding="utf-8")
    dom = parse(text)
    notices = dom.find_all("p", cls="missing-timeline")
    assert len(notices) == 2
    assert "dns-outage.timeline.json is missing" in notices[1].all_text()
    assert not dom.find_all("svg", cls="timeline")


def test_timeline_path_outside_run_dir_is_not_read(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_json(tmp_path / "outside.json", {"p": []})
    write_json(run_dir / "d.json", record("d", None, "passed", T0, evidence_files={"timeline": "../outside.json"}))
    text = build_report(run_dir).read_text(encoding="utf-8")
    assert "outside the run directory" in text


def test_empty_dir_raises_report_error_naming_it(tmp_path: Path) -> None:
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    with pytest.raises(ReportError, match="nothing-here"):
        build_report(empty)
    assert not (empty / REPORT_NAME).exists()


def test_missing_dir_raises_report_error(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="not a directory"):
        build_report(tmp_path / "absent")


def test_run_json_only_and_records_only(tmp_path: Path) -> None:
    only_meta = tmp_path / "meta"
    write_json(only_meta / "run.json", {"run_id": "m", "started_at": T0})
    assert "no drill records" in build_report(only_meta).read_text(encoding="utf-8")

    only_records = tmp_path / "records"
    write_json(only_records / "d.json", record("d", None, "error", T0, cluster={}, fault={}, phases=[]))
    text = build_report(only_records).read_text(encoding="utf-8")
    assert 'data-verdict="error"' in text and "No cluster recorded" in text


def test_long_timeline_is_downsampled_without_hiding_failures() -> None:
    n = 50_000
    raw = [{"t": T0 + i * 0.01, "ok": i != 31_337, "latency_seconds": 0.002} for i in range(n)]
    svg = timeline_svg("p", raw, t0=T0, t_end=T0 + n * 0.01)
    dom = parse(svg)
    root = dom.find_all("svg", cls="timeline")[0]
    assert root.attrs["data-samples"] == str(n)
    assert int(root.attrs["data-drawn"]) <= MAX_MARKS
    assert "time buckets" in root.attrs["data-note"]
    assert "time buckets" in root.find_all("text", cls="chart-note")[0].all_text()  # visible, not only an attribute
    marks = [r for g in root.find_all("g", cls="marks") for r in g.find_all("rect")]
    assert 0 < len(marks) <= MAX_MARKS
    assert len(root.find_all("g", cls="marks-fail")[0].find_all("rect")) == 1  # the single failure survives
    assert len(root.find_all("path", cls="latency")) == 1
    assert len(svg) < 1_000_000


def test_unreverted_fault_is_shaded_to_the_end_and_flagged(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    rec = record("d", None, "error", T0)
    rec["fault"].update(reverted_at=None, revert_verified=False)
    write_json(run_dir / "d.json", rec)
    write_json(run_dir / "d.timeline.json", {"workload-http": samples(T0, 10, 1, 0, 0)})
    dom = parse(build_report(run_dir).read_text(encoding="utf-8"))
    assert "not reverted" in dom.find_all("rect", cls="fault-window")[0].all_text()
    reverts = dom.find_all("table", cls="reverts")[0]
    assert "row-fail" in reverts.find_all("tr")[1].classes
    assert "not reverted" in reverts.all_text()


def test_errors_are_listed(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_json(run_dir / "d.json", record("d", None, "error", T0, errors=["probe crashed: boom"]))
    dom = parse(build_report(run_dir).read_text(encoding="utf-8"))
    assert "probe crashed: boom" in dom.find_all("ul", cls="errors")[0].all_text()


def test_odd_records_do_not_break_the_report(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_json(
        run_dir / "odd.json",
        {
            "drill": "odd", "verdict": "error", "started_at": None, "phases": {"not": "a list"}, "fault": None,
            "expectations": [{"name": "x", "measured": "nan", "unit": "seconds", "verdict": "error"}, "junk"],
            "probes": {"p": "junk"}, "observations": [], "source": "https://example.org/doc", "errors": "not a list",
        },
    )
    write_json(run_dir / "odd.timeline.json", {"p": [{"t": "soon", "ok": True}, {"t": T0, "ok": False}]})
    dom = parse(build_report(run_dir).read_text(encoding="utf-8"))
    section = dom.find_all("section", cls="drill")[0]
    assert section.attrs["data-verdict"] == "error"
    svg = section.find_all("svg", cls="timeline")[0]
    assert svg.attrs["data-samples"] == "1"
    assert "without a numeric time" in svg.attrs["data-note"]
    assert "nan seconds" in section.find_all("table", cls="expectations")[0].all_text()
    assert section.find_all("blockquote") == [] and "No documented claim" in section.all_text()


# --------------------------------------------------------------------------- #
# Records that do not parse, and the seal
# --------------------------------------------------------------------------- #


def truncate(path: Path, keep: int = 40) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def test_truncated_failing_record_is_an_error_and_counted(tmp_path: Path) -> None:
    run_dir = tmp_path / "run-1"
    write_json(run_dir / "run.json", {"run_id": "run-1", "started_at": T0})
    write_json(run_dir / "a.json", record("a", None, "passed", T0))
    write_json(run_dir / "b.json", record("b", None, "failed", T0 + 100))
    truncate(run_dir / "b.json")
    text = build_report(run_dir).read_text(encoding="utf-8")
    dom = parse(text)
    header = dom.find_all("header")[0].all_text()
    assert "all 1 passed" not in text and "passed" not in header.replace("not passed", "")
    assert "1 of 2 not passed (1 unreadable)" in header
    section = dom.find_all("section", cls="unreadable")[0]
    assert section.attrs["data-verdict"] == "error" and section.attrs["data-file"] == "b.json"
    assert "does not parse as JSON" in section.all_text() and "truncated" in section.all_text()
    rows = dom.find_all("table", cls="verdicts")[0].find_all("tr")[1:]
    assert len(rows) == 2 and "row-fail" in rows[1].classes and "error" in rows[1].all_text()
    assert "2 drill cases: 1 error, 1 passed." in dom.find_all("section", cls="summary")[0].all_text()


def test_only_unreadable_records_still_render_as_errors(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir).mkdir()
    (run_dir / "x.json").write_text("{", encoding="utf-8")
    header = parse(build_report(run_dir).read_text(encoding="utf-8")).find_all("header")[0].all_text()
    assert "1 of 1 not passed (1 unreadable)" in header


@pytest.mark.parametrize(
    "content, reason",
    [
        (json.dumps({"drill": "x"}), "no 'verdict' key"),
        (json.dumps({"verdict": "passed"}), "no 'drill' key"),
        (json.dumps(["drill", "verdict"]), "not an object"),
        ("", "does not parse as JSON"),
        ("\xff\xfe", "does not parse as JSON"),
    ],
)
def test_json_that_is_not_a_record_is_never_dropped(run_dir: Path, content: str, reason: str) -> None:
    (run_dir / "x.json").write_bytes(content.encode("latin-1"))
    records, unreadable = scan_records(run_dir)
    assert [p.name for p, _ in records] == ["control-plane-stop--paused.json", "dns-outage.json"]
    assert [(p.name, reason in why) for p, why in unreadable] == [("x.json", True)]
    assert [p.name for p, _ in load_drill_records(run_dir)] == [p.name for p, _ in records]
    dom = parse(build_report(run_dir).read_text(encoding="utf-8"))
    assert "2 of 3 not passed (1 unreadable)" in dom.find_all("header")[0].all_text()


def test_seal_section_shows_the_signer_and_previous_run(run_dir: Path) -> None:
    seal = {"public_key": "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
            "fingerprint_sha256": "ab" * 32, "previous": {"run_id": "run-0", "manifest_sha256": "cd" * 32}}
    dom = parse(build_report(run_dir, seal=seal).read_text(encoding="utf-8"))
    section = dom.find_all("section", cls="seal")[0]
    assert "ab" * 32 in section.all_text() and "BEGIN PUBLIC KEY" in section.all_text()
    assert "run-0" in section.all_text() and "cd" * 32 in section.all_text()
    # The page never offers its own fingerprint as the one to pin: a page sealed again would offer its forger's.
    assert f"--fingerprint {'ab' * 32}" not in section.all_text()
    assert "kdrill verify run-1 --fingerprint FINGERPRINT" in section.all_text()
    assert "outside this evidence, never the one above" in " ".join(section.all_text().split())
    assert "signed by a local key: not for audit" in section.all_text()  # a seal that does not say who held the key
    external = parse(build_report(run_dir, seal={**seal, "custody": "external-signer"}).read_text(encoding="utf-8"))
    held = external.find_all("section", cls="seal")[0].all_text()
    assert "through an external signer" in held and "not for audit" not in held
    unsealed = parse(build_report(run_dir).read_text(encoding="utf-8")).find_all("section", cls="seal")[0]
    assert "without a seal" in unsealed.all_text()


def test_rendering_is_reproducible(run_dir: Path) -> None:
    when = datetime(2025, 1, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
    seal = {"public_key": "PEM", "fingerprint_sha256": "ab" * 32, "previous": None}
    first = render_report(run_dir, seal=seal, generated_at=when)
    assert render_report(run_dir, seal=seal, generated_at=when) == first
    assert "2025-01-01T12:00:00.123Z" in first


# --------------------------------------------------------------------------- #
# Vital signs ("What else broke") and every injection window
# --------------------------------------------------------------------------- #


def vital_signs(start: float, **signs: dict) -> dict:
    """A ``record["vital_signs"]`` as harness/engine/vitals.py writes it; ``signs`` override the healthy defaults."""
    healthy = {"baseline": 1.0, "fault": 1.0, "after": 1.0, "degraded": False, "flagged": False, "covered_by": None}
    all_signs = {
        "api_read": dict(healthy),
        "api_write": dict(healthy),
        "service_name": dict(healthy),
        "service_clusterip": dict(healthy),
        "nodes_ready": dict(healthy, transitions=[]),
        "kube_system_restarts": {"added": {}, "by_design": {}, "degraded": False, "flagged": False,
                                 "covered_by": None},
    }
    for name, sign in signs.items():
        all_signs[name] = {**all_signs.get(name, healthy), **sign}
    return {
        "windows": {"baseline": [[start, start + 10]], "fault": [[start + 10, start + 30]],
                    "after": [[start + 30, start + 60]]},
        "signs": all_signs,
        "flagged": sorted(n for n, s in all_signs.items() if s.get("flagged")),
    }


def render_one(tmp_path: Path, rec: dict, name: str = "d") -> tuple[str, Element]:
    run_dir = tmp_path / "run"
    write_json(run_dir / f"{name}.json", rec)
    text = build_report(run_dir).read_text(encoding="utf-8")
    return text, parse(text)


def vital_row(dom: Element, sign: str) -> Element:
    rows = dom.find_all("tr", cls="vital", data_sign=sign)
    assert len(rows) == 1, f"one row for {sign}"
    return rows[0]


def test_flagged_vital_sign_is_flagged_in_its_row_its_section_and_the_headline(tmp_path: Path) -> None:
    # A drill that passed while the Service's ClusterIP failed and nothing asserted on it.
    vs = vital_signs(T0, service_clusterip={"fault": 0.4, "after": 0.9014, "degraded": True, "flagged": True})
    text, dom = render_one(tmp_path, record("d", None, "passed", T0, vital_signs=vs))
    row = vital_row(dom, "service_clusterip")
    assert row.attrs["data-flagged"] == "true" and "row-flagged" in row.classes
    assert "FLAGGED" in row.all_text()
    assert "40 %" in row.all_text() and "90.1 %" in row.all_text() and "100 %" in row.all_text()
    assert vital_row(dom, "api_read").attrs["data-flagged"] == "false"
    assert "ok" in vital_row(dom, "api_read").all_text()
    # At the top of the drill's section, before any of its content ...
    section = dom.find_all("section", cls="drill")[0]
    assert section.attrs["data-flagged-vitals"] == "service_clusterip"
    banner = section.find_all("div", cls="flagged-banner")[0]
    assert "FLAGGED" in banner.all_text() and "service_clusterip" in banner.all_text()
    assert text.index("flagged-banner", text.index("<section class=\"drill")) < text.index("Documented claim")
    assert "1 flagged vital sign" in section.find_all("div", cls="drill-head")[0].all_text()
    # ... and in the headline and the summary: a green verdict does not hide it.
    header = dom.find_all("header")[0].all_text()
    assert "1 drill passed, 1 with flagged vital signs" in header
    assert "all 1 passed" not in text
    summary = dom.find_all("section", cls="summary")[0]
    assert "1 drill case with flagged vital signs" in summary.all_text()
    verdict_row = summary.find_all("table", cls="verdicts")[0].find_all("tr")[1]
    assert "FLAGGED" in verdict_row.all_text() and "service_clusterip" in verdict_row.all_text()


def test_flagged_vital_signs_are_counted_next_to_failures_in_the_headline(run_dir: Path) -> None:
    rec = json.loads((run_dir / "dns-outage.json").read_text())
    rec["vital_signs"] = vital_signs(T0, nodes_ready={"after": 0.5, "degraded": True, "flagged": True})
    write_json(run_dir / "dns-outage.json", rec)
    header = parse(build_report(run_dir).read_text(encoding="utf-8")).find_all("header")[0].all_text()
    assert "1 of 2 not passed" in header and "1 with flagged vital signs" in header


def test_degraded_sign_covered_by_an_expectation_is_not_flagged(tmp_path: Path) -> None:
    vs = vital_signs(T0, api_read={"fault": 0.0, "degraded": True, "flagged": False,
                                   "covered_by": "api_success_ratio_while_stopped"})
    text, dom = render_one(tmp_path, record("d", None, "passed", T0, vital_signs=vs))
    row = vital_row(dom, "api_read")
    assert row.attrs["data-flagged"] == "false" and "row-flagged" not in row.classes
    assert "degraded (covered by api_success_ratio_while_stopped)" in row.flat_text()
    assert "FLAGGED" not in text and not dom.find_all(cls="flagged-banner")
    assert "data-flagged-vitals" not in text
    assert "all 1 passed" in dom.find_all("header")[0].all_text()
    assert "nothing flagged" in dom.find_all("table", cls="verdicts")[0].all_text()


def test_a_degraded_ratio_is_never_rounded_up_to_100_percent(tmp_path: Path) -> None:
    vs = vital_signs(T0, api_write={"after": 0.9999, "fault": None, "degraded": False})
    _, dom = render_one(tmp_path, record("d", None, "passed", T0, vital_signs=vs))
    cells = [c.all_text().strip() for c in vital_row(dom, "api_write").find_all("td", cls="ratio")]
    assert cells == ["100 %", "—", "99.9 %"]


def test_report_threshold_matches_the_vital_signs_threshold() -> None:
    from harness.engine.vitals import HEALTHY_RATIO
    from harness.evidence import report_vitals

    assert report_vitals.HEALTHY_RATIO is HEALTHY_RATIO == 0.99


def test_kube_system_restarts_show_unexpected_and_by_design(tmp_path: Path) -> None:
    vs = vital_signs(T0, kube_system_restarts={
        "added": {"coredns-abc": 2}, "by_design": {"etcd-cp1": 1, "kube-apiserver-cp1": 1},
        "degraded": True, "flagged": True})
    _, dom = render_one(tmp_path, record("d", None, "passed", T0, vital_signs=vs))
    row = vital_row(dom, "kube_system_restarts")
    assert "FLAGGED" in row.all_text()
    assert "2 restarts in 1 pod not caused by the fault" in row.all_text()
    assert "2 restarts in 2 pods by design" in row.all_text()
    added = dom.find_all("ul", cls="restarts-added")[0].all_text()
    assert "coredns-abc" in added and "+2" in added and "etcd-cp1" not in added
    by_design = dom.find_all("details", cls="restarts-by-design")[0]
    assert "etcd-cp1" in by_design.all_text() and "kube-apiserver-cp1" in by_design.all_text()


def test_node_transitions_are_listed_relative_to_the_first_injection(tmp_path: Path) -> None:
    transitions = [
        {"t": T0 + 1, "node": "cp1", "ready": "True", "taints": []},  # first sight: not a transition
        {"t": T0 + 1, "node": "w1", "ready": "True", "taints": []},
        {"t": T0 + 25.5, "node": "cp1", "ready": "Unknown", "taints": ["node.kubernetes.io/unreachable:NoSchedule"]},
        {"t": T0 + 40, "node": "cp1", "ready": "True", "taints": []},
    ]
    vs = vital_signs(T0, nodes_ready={"after": 0.8, "degraded": True, "flagged": True, "transitions": transitions})
    rec = record("d", None, "passed", T0, vital_signs=vs)  # first (only) injection at T0 + 10
    _, dom = render_one(tmp_path, rec)
    table = dom.find_all("table", cls="node-transitions")[0]
    assert "Since first injection" in table.all_text()
    rows = table.find_all("tr")[1:]
    assert [r.all_text().split()[:2] for r in rows] == [["cp1", "Unknown"], ["cp1", "True"]]
    assert "node.kubernetes.io/unreachable:NoSchedule" in rows[0].all_text() and "+15.5 s" in rows[0].all_text()
    assert "+30 s" in rows[1].all_text() and "Ready again" in rows[1].all_text()
    assert "w1" not in table.all_text()


def test_a_node_transition_says_who_set_the_node_not_ready(tmp_path: Path) -> None:
    transitions = [
        {"t": T0 + 1, "node": "cp2", "ready": "True", "reason": "KubeletReady", "taints": []},
        {"t": T0 + 30, "node": "cp2", "ready": "False", "reason": "KubeletNotReady",
         "message": "container runtime status check may not have completed yet", "taints": []},
        {"t": T0 + 32, "node": "cp2", "ready": "Unknown", "reason": "NodeStatusUnknown",
         "message": "Kubelet stopped posting node status.", "taints": []},
        {"t": T0 + 40, "node": "cp2", "ready": "True", "reason": "KubeletReady", "taints": []},
    ]
    vs = vital_signs(T0, nodes_ready={"after": 0.8, "degraded": True, "flagged": True, "transitions": transitions})
    _, dom = render_one(tmp_path, record("d", None, "passed", T0, vital_signs=vs))
    rows = dom.find_all("table", cls="node-transitions")[0].find_all("tr")[1:]
    assert "False (KubeletNotReady: container runtime status check may not have completed yet)" in rows[0].all_text()
    assert "Unknown (NodeStatusUnknown: Kubelet stopped posting node status.)" in rows[1].all_text()
    assert "KubeletReady" not in rows[2].all_text()  # Ready again needs no author


def test_record_without_vital_signs_says_not_recorded(tmp_path: Path) -> None:
    rec = record("d", None, "passed", T0)
    assert "vital_signs" not in rec
    text, dom = render_one(tmp_path, rec)
    section = dom.find_all("section", cls="drill")[0]
    assert section.attrs["data-vitals"] == "not recorded"
    assert "Vital signs not recorded" in section.find_all("div", cls="vitals-missing")[0].all_text()
    assert "not recorded" in dom.find_all("table", cls="verdicts")[0].all_text()
    assert not dom.find_all("table", cls="vitals-table")
    assert "all 1 passed" in dom.find_all("header")[0].all_text()


def test_vital_signs_that_could_not_be_watched_show_the_error(tmp_path: Path) -> None:
    rec = record("d", None, "passed", T0, vital_signs={"error": "vital signs not watched: ApiException: 503"})
    _, dom = render_one(tmp_path, rec)
    section = dom.find_all("section", cls="drill")[0]
    assert section.attrs["data-vitals"] == "error"
    assert "ApiException: 503" in section.find_all("div", cls="vitals-error")[0].all_text()
    assert "not watched" in dom.find_all("table", cls="verdicts")[0].all_text()


def injection(start: float, n: int, **extra: object) -> dict:
    return {"kind": "etcd-member-loss", "method": "stop-member", "where": [f"cp{n}"],
            "injected_at": start + 10 * n, "revert_started_at": start + 10 * n + 4,
            "reverted_at": start + 10 * n + 5, "revert_verified": True, "restarts_by_design": [f"etcd-cp{n}"],
            **extra}


def test_every_injection_window_is_a_row(tmp_path: Path) -> None:
    injections = [
        injection(T0, 1, restore_seconds={"cp1": 0.2611885}),
        injection(T0, 2, restore_seconds={"cp1": 1.5, "cp2": 2.25},
                  restore_journal={"cp1": ["kubelet started", "mirror pod created"], "cp2": ["kubelet started"]}),
        injection(T0, 3, reverted_at=None, revert_verified=False),
    ]
    rec = record("d", None, "failed", T0, observations={"injections": injections, "restarts": 0})
    _, dom = render_one(tmp_path, rec)
    table = dom.find_all("table", cls="reverts")[0]
    rows = table.find_all("tr", cls="injection")
    assert len(rows) == 3
    assert [r.find_all("td")[0].all_text() for r in rows] == ["1", "2", "3"]
    assert ["cp1" in rows[0].all_text(), "cp2" in rows[1].all_text(), "cp3" in rows[2].all_text()] == [True] * 3
    second = rows[1].all_text()
    assert "stop-member" in second and "+20 s" in second and "+24 s" in second and "+25 s" in second
    assert "window 5 s" in second and "yes" in second
    assert "restore_seconds: cp1 1.5 s cp2 2.25 s" in rows[1].flat_text()
    assert "0.261 s" in rows[0].all_text()
    journal = rows[1].find_all("details", cls="restore_journal")
    assert len(journal) == 1 and "open" not in journal[0].attrs  # collapsed
    assert "restore_journal: 2 entries, 3 lines" in journal[0].find_all("summary")[0].flat_text()
    assert "mirror pod created" in journal[0].all_text() and "cp2 (1 line)" in journal[0].flat_text()
    assert "row-fail" in rows[2].classes and "not reverted" in rows[2].all_text()
    assert "row-fail" not in rows[0].classes
    # The glance line looks at every window, not only the last one recorded in "fault".
    assert "revert not verified" in dom.find_all("p", cls="glance")[0].all_text()
    # The windows are not repeated as a JSON blob among the observations.
    observations = dom.find_all("table", cls="observations")[0].all_text()
    assert "3 windows" in observations and "mirror pod created" not in observations


def test_hostile_names_are_escaped_in_vital_signs_and_injections(tmp_path: Path) -> None:
    evil = '<img src=x onerror="alert(1)">'
    transitions = [{"t": T0 + 20, "node": evil, "ready": evil, "taints": [evil]}]
    vs = vital_signs(T0, nodes_ready={"degraded": True, "flagged": True, "transitions": transitions,
                                      "error": evil},
                     api_read={"degraded": True, "covered_by": evil},
                     kube_system_restarts={"added": {evil: 1}, "by_design": {evil: 1}, "degraded": True,
                                           "flagged": True})
    vs["signs"][evil] = {"baseline": evil, "degraded": True, "flagged": True}
    vs["flagged"].append(evil)
    injections = [injection(T0, 1, where=[evil], kind=evil, method=evil, restore_seconds={evil: 1.0},
                            restore_journal={evil: [evil]}, **{evil: evil})]
    rec = record("d", None, "passed", T0, vital_signs=vs, observations={"injections": injections})
    text, dom = render_one(tmp_path, rec)
    assert "<img" not in text and "onerror=\"" not in text
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in text  # markupsafe's entity for "
    assert not dom.find_all("img")
    assert evil in dom.find_all("table", cls="node-transitions")[0].all_text()
    assert evil in dom.find_all("table", cls="reverts")[0].all_text()
    assert evil in dom.find_all("div", cls="flagged-banner")[0].all_text()


@pytest.mark.parametrize("vs", [
    "junk", [], {"signs": "junk"}, {"signs": {"api_read": "junk"}, "flagged": "api_read"},
    {"signs": {"nodes_ready": {"transitions": "junk", "baseline": "x"}, "kube_system_restarts": {"added": [1]}},
     "windows": {"fault": [[1]]}},
])
def test_odd_vital_signs_do_not_break_the_report(tmp_path: Path, vs: object) -> None:
    _, dom = render_one(tmp_path, record("d", None, "passed", T0, vital_signs=vs))
    section = dom.find_all("section", cls="drill")[0]
    assert section.attrs["data-vitals"] in ("recorded", "not recorded", "error")
    assert section.find_all("div", cls="vitals")


def test_a_planned_drill_without_a_record_is_not_passed(tmp_path):
    import json as _json

    from harness.evidence.report import render_report

    run = tmp_path / "r1"
    run.mkdir()
    (run / "run.json").write_text(_json.dumps({"run_id": "r1", "planned": ["a", "b--x"]}))
    passing = {"name": "x", "bound": {"op": ">=", "value": 1}, "measured": 1, "verdict": "passed"}
    (run / "a.json").write_text(_json.dumps({"run_id": "r1", "drill": "a", "case": None, "verdict": "passed",
                                             "expectations": [passing]}))
    page = render_report(run)
    assert "1 of 2 not passed" in page
    assert "planned, no record: b--x" in page


def test_waits_that_did_not_hold_and_replaced_measurements_are_shown(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    waits = [
        {"what": "API answers", "where": "drills.x:run:12", "ok": False, "timeout_seconds": 60,
         "elapsed_seconds": 60.0, "attempts": 31, "errors": 31, "last_error": "SSLEOFError: <eof>",
         "started_at": T0 + 5},
        {"what": "pods ready", "where": "drills.x:run:20", "ok": True, "timeout_seconds": 60,
         "elapsed_seconds": 2.0, "attempts": 3, "errors": 0, "last_error": None, "started_at": T0 + 70},
    ]
    replaced = [{"name": "gap_seconds", "measured": 3.0, "verdict": "passed", "detail": "first try"}]
    write_json(run_dir / "x.json", record("x", None, "passed", T0, waits=waits, waits_dropped=4,
                                          replaced_measurements=replaced))
    write_json(run_dir / "x.timeline.json", {})
    root = parse(build_report(run_dir).read_text(encoding="utf-8"))
    (table,) = root.find_all("table", cls="waits")
    text = table.all_text()
    assert "API answers" in text and "SSLEOFError: <eof>" in text
    assert "pods ready" not in text  # a clean wait is counted, not listed
    page = root.all_text()
    assert "2 waits recorded (4 clean ones not kept); 1 did not hold or met errors." in page
    assert "Replaced measurements" in page and "first try" in page


@pytest.mark.parametrize("edit, why", [
    (lambda r: r["expectations"][0].update(measured=45.0), "measured 45.0 does not satisfy <= 30"),
    (lambda r: r["expectations"][1].update(verdict="failed"), "expectation workload_http_success_ratio is failed"),
    (lambda r: r.update(expectations=[]), "it has no expectations"),
    (lambda r: r.update(errors=["TimeoutError: x"]), "it records errors"),
    (lambda r: r["expectations"][0].update(measured=500.0, bound={"op": "<=", "value": float("inf")}),
     "is not a bound"),
    (lambda r: r["expectations"][0].update(measured=50.0, bound={"op": "<=", "value": 60}), "its text says <= 30"),
    (lambda r: r.update(scenario={"expectations": [{"name": "api_recovery_seconds", "bound": {"op": "<=", "value": 30}},
                                                   {"name": "gone_one", "bound": {"op": "==", "value": 0}}]}),
     "expectation gone_one of its scenario is missing"),
])
def test_a_passed_verdict_its_own_expectations_do_not_support_is_an_error(tmp_path: Path, edit, why) -> None:
    """A hand-edited verdict (or values edited under it) does not turn the report green."""
    run_dir = tmp_path / "run"
    rec = record("x", None, "passed", T0)
    edit(rec)
    write_json(run_dir / "x.json", rec)
    write_json(run_dir / "x.timeline.json", {})
    page = build_report(run_dir).read_text(encoding="utf-8")
    assert "1 of 1 not passed" in page and "all 1 passed" not in page
    assert "the record says passed, but" in page and html.escape(why) in page


def test_a_verdict_kdrill_never_writes_is_an_error(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_json(run_dir / "x.json", record("x", None, "PASSED", T0))
    write_json(run_dir / "x.timeline.json", {})
    page = build_report(run_dir).read_text(encoding="utf-8")
    assert "1 of 1 not passed" in page and "is none of passed" in page


# --------------------------------------------------------------------------- #
# The templates: escaping and reproducibility
# --------------------------------------------------------------------------- #

HOSTILE = '<script>alert(1)</script> "onmouseover="alert(1)'
HOSTILE_ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt; &#34;onmouseover=&#34;alert(1)"


def test_html_in_the_evidence_is_shown_as_text_never_as_markup(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    bad = HOSTILE
    write_json(run_dir / "run.json", {"run_id": "run-1", "user": bad, "host": bad, "ticket": bad, "command": [bad],
                                      "git_commit": bad, "cluster": {"name": bad, "server": bad}})
    expectation = {"name": bad, "description": bad, "measured": bad, "unit": bad, "bound_text": bad, "verdict": "failed",
                   "detail": bad, "phase": bad}
    vs = vital_signs(T0, api_read={"fault": 0.5, "degraded": True, "flagged": True, "reason": bad},
                     nodes_ready={"transitions": [{"t": T0 + 20, "node": bad, "ready": bad, "taints": [bad]}]})
    rec = record(
        bad, bad, "failed", T0, title=bad, claim=bad, errors=[f"RuntimeError: {bad}"], expectations=[expectation],
        source=[{"title": bad, "url": bad, "section": bad}], vital_signs=vs, scenario={"name": bad},
        observations={"note": bad, bad: [bad], "injections": [injection(T0, 1, kind=bad, method=bad, notes=bad)]},
        waits=[{"what": bad, "where": bad, "ok": False, "last_error": bad, "attempts": bad}],
        probes={bad: {"samples": 1, "successes": bad}},
        evidence_files={"timeline": "d.timeline.json", bad: bad},
    )
    rec["fault"].update(kind=bad, method=bad, params={bad: bad}, where=[bad])
    rec["cluster"]["nodes"][0].update(name=bad, roles=[bad])
    write_json(run_dir / "d.json", rec)
    write_json(run_dir / "d.timeline.json", {bad: [{"t": T0 + 1, "ok": True, "latency_seconds": 0.1}]})
    (run_dir / '"onmouseover="alert(1).json').write_text("{", encoding="utf-8")  # an unreadable record
    seal = {"public_key": bad, "fingerprint_sha256": bad, "previous": {"run_id": bad, "manifest_sha256": bad}}
    text = render_report(run_dir, seal=seal)
    dom = parse(text)
    assert "<script" not in text and '"onmouseover=' not in text
    assert not dom.find_all("script")
    assert not [e.tag for e in dom.iter() if any(name.startswith("on") for name in e.attrs)]
    assert text.count(HOSTILE_ESCAPED) > 30  # every place above shows it, escaped by the templates
    # Shown as written, where a reader looks for it.
    section = dom.find_all("section", cls="drill", data_drill=bad, data_case=bad)[0]
    assert section.find_all("h2")[0].all_text() == bad
    assert bad in section.find_all("table", cls="observations")[0].all_text()
    assert f"RuntimeError: {bad}" in section.find_all("ul", cls="errors")[0].all_text()
    assert bad in section.find_all("table", cls="expectations")[0].all_text()
    assert bad in section.find_all("table", cls="reverts")[0].all_text()
    assert bad in section.find_all("table", cls="node-transitions")[0].all_text()
    assert bad in section.find_all("div", cls="flagged-banner")[0].all_text()
    assert section.find_all("svg", cls="timeline")[0].attrs["data-probe"] == bad
    assert not section.find_all("blockquote")[0].find_all("a")  # not an http(s) URL: no link
    assert bad in dom.find_all("section", cls="seal")[0].all_text()
    unreadable = dom.find_all("section", cls="unreadable")[0]
    assert unreadable.attrs["data-file"] == '"onmouseover="alert(1).json'
    assert unreadable.find_all("a")[0].attrs["href"] == '"onmouseover="alert(1).json'


def test_report_templates_are_autoescaped_and_mark_nothing_safe() -> None:
    from harness.evidence.report import _environment

    env = _environment()
    names = [n for n in env.list_templates() if n.startswith("report")]
    assert {"report.html.j2", "report_drill.html.j2", "report_vitals.html.j2", "report_macros.html.j2"} <= set(names)
    for name in names:
        assert env.autoescape(name) is True, name
        source = env.loader.get_source(env, name)[0]
        # The only markup a template inserts as is comes from Python as Markup (the charts' SVG).
        assert "|safe" not in source.replace(" ", "") and not re.search(r"\{%-?\s*autoescape", source), name


def test_rendering_is_the_same_bytes_in_fresh_interpreters(tmp_path: Path) -> None:
    """``kdrill report`` re-renders a sealed page in another process, maybe years later: nothing
    in the page may depend on hash seeds, object ids or the clock."""
    import os
    import subprocess
    import sys

    run_dir = make_run(tmp_path / "run-1")
    rec = json.loads((run_dir / "dns-outage.json").read_text())
    rec["vital_signs"] = vital_signs(T0 + 100, api_read={"fault": 0.5, "degraded": True, "flagged": True},
                                     kube_system_restarts={"added": {"b": 1, "a": 2}, "by_design": {"z": 1, "y": 1},
                                                           "degraded": True, "flagged": True})
    rec["observations"] = {"injections": [injection(T0 + 100, 1, extra={"b": 1, "a": [1, 2]}),
                                          injection(T0 + 100, 2)], "set_like": {"y": 1, "x": 2}}
    write_json(run_dir / "dns-outage.json", rec)
    (run_dir / "broken.json").write_text("{", encoding="utf-8")
    seal = {"public_key": "PEM", "fingerprint_sha256": "ab" * 32, "previous": {"run_id": "run-0", "manifest_sha256": "cd"}}
    code = ("import json, sys\nfrom datetime import datetime, timezone\nfrom harness.evidence.report import render_report\n"
            "page = render_report(sys.argv[1], seal=json.loads(sys.argv[2]),"
            " generated_at=datetime(2025, 1, 1, 12, tzinfo=timezone.utc))\nsys.stdout.buffer.write(page.encode())\n")
    repo = Path(__file__).resolve().parents[3]  # the harness under test, whatever is installed
    pages = set()
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed,
                   PYTHONPATH=os.pathsep.join([str(repo)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
        done = subprocess.run([sys.executable, "-c", code, str(run_dir), json.dumps(seal)], env=env, cwd=repo,
                              capture_output=True, check=False, timeout=120)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        pages.add(done.stdout)
    here = render_report(run_dir, seal=seal, generated_at=datetime(2025, 1, 1, 12, tzinfo=timezone.utc))
    assert pages == {here.encode()}


def test_the_blast_radius_map_is_a_table_and_malformed_entries_do_not_break_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    evil = '<script>alert("x")</script>'
    blast = {
        "platform-policy/policy-webhook": {"writes": {
            "configmap-create@drill": {"outcome": "rejected", "seconds": 0.012, "webhook": "policy.platform.example",
                                       "predicted": "rejected", "why": "rule 0 matches", "system": False},
            "lease-update@kube-node-lease": {"outcome": "rejected", "seconds": 0.02, "webhook": evil,
                                             "predicted": "admitted", "why": evil, "system": True},
            "odd": "junk"}},
        "team/gate": {"not_drilled": "its revert would be sent to it"},
        evil: ["not", "a", "mapping"],
        "team/huge": {"writes": {"w" * 5000: {"outcome": "admitted", "why": "y" * 100_000}}},
        "team/nowrites": {"writes": "junk"},
    }
    write_json(run_dir / "br.json", record("webhook-blast-radius", "refused", "failed", T0,
                                           observations={"blast_radius": blast}))
    text = build_report(run_dir).read_text(encoding="utf-8")
    assert "<script" not in text.lower()
    table = parse(text).find_all("table", cls="blast-radius")[0]
    rows = table.find_all("tr")[1:]
    assert len(rows) == 7
    cells = [r.all_text() for r in rows]
    assert "configmap-create@drill" in cells[0] and "0.012 s" in cells[0] and "(differs)" not in cells[0]
    assert "lease-update@kube-node-lease" in cells[1] and "(differs)" in cells[1] and "platform's own" in cells[1]
    # What is not a write's answer says it is malformed, never "not taken down" nor an outcome.
    assert "malformed entry" in cells[2] and "junk" in cells[2] and "not taken down" not in cells[2]
    assert "not taken down: its revert would be sent to it" in cells[3]
    assert "malformed entry" in cells[4] and "not taken down" not in cells[4]
    # A forged record's huge strings are cut, not copied whole into the page.
    assert "… (cut)" in cells[5] and len(cells[5]) < 1000, len(cells[5])
    assert "malformed entry" in cells[6] and "no writes: junk" in cells[6]


def test_the_runs_image_sources_are_a_table_and_malformed_parts_do_not_break_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    evil = '<script>alert("x")</script>'
    sources = [
        {"source": "registry.k8s.io", "images": [{
            "image": "registry.k8s.io/coredns/coredns:v1.13.1", "pull_policies": ["IfNotPresent"],
            "workloads": ["kube-system/Deployment/coredns"], "nodes_without": ["kdrill-ha-worker2"],
            "nodes_unknown": [], "risk": "a pod placed on kdrill-ha-worker2 pulls from this source"}]},
        {"source": evil, "images": [{"image": "x" * 5000, "risk": evil}]},
        "junk",
    ]
    write_json(run_dir / "run.json", {"run_id": "r", "started_at": T0,
                                      "image_sources": {"read_at": T0, "sources": sources}})
    write_json(run_dir / "a.json", record("a", None, "passed", T0))
    text = build_report(run_dir).read_text(encoding="utf-8")
    assert "<script" not in text.lower()
    rows = parse(text).find_all("table", cls="image-sources")[0].find_all("tr")[1:]
    cells = [r.all_text() for r in rows]
    assert len(cells) == 3
    assert "registry.k8s.io/coredns/coredns:v1.13.1" in cells[0] and "kdrill-ha-worker2" in cells[0]
    assert "kube-system/Deployment/coredns" in cells[0] and "IfNotPresent" in cells[0]
    assert "… (cut)" in cells[1] and len(cells[1]) < 1500
    assert "malformed entry" in cells[2]
    # Not read: the note says why, and there is no table.
    write_json(run_dir / "run.json", {"run_id": "r", "started_at": T0,
                                      "image_sources": {"note": "not read: ApiException: (403)"}})
    text = build_report(run_dir).read_text(encoding="utf-8")
    assert "Not recorded: not read: ApiException: (403)" in text
    assert not parse(text).find_all("table", cls="image-sources")


def test_forged_numbers_sizes_and_node_lists_in_the_new_tables(tmp_path: Path) -> None:
    """What a forger (or a bug) can put in run.json's image_sources and a record's blast_radius:
    an integer past float's range is no crash, a huge map is not copied whole into the page, a
    table shows at most TABLE_MAX_ROWS rows and counts the rest, "none" is said only of an empty
    node list, and writes recorded for a backend 'not taken down' are shown, not hidden."""
    from harness.evidence.report_format import TABLE_MAX_ROWS

    run_dir = tmp_path / "run"
    images = [{"image": f"registry.example/app-{i}:1", "pull_policies": ["IfNotPresent"], "workloads": ["a/Pod/p"],
               "nodes_without": [], "nodes_unknown": ["n2"], "risk": "r"} for i in range(TABLE_MAX_ROWS + 20)]
    images[1]["nodes_unknown"] = []
    images[2].pop("nodes_without")
    write_json(run_dir / "run.json", {"run_id": "r", "started_at": 10 ** 400,
                                      "image_sources": {"read_at": 10 ** 400, "sources": [
                                          {"source": "registry.example", "images": images}]}})
    writes = {f"w{i}": {"outcome": "admitted", "predicted": "admitted", "seconds": 10 ** 400, "why": "Y" * 100_000}
              for i in range(TABLE_MAX_ROWS + 5)}
    blast = {"team/gate": {"writes": writes},
             "team/skipped": {"not_drilled": "its revert would be sent to it",
                              "writes": {"cm": {"outcome": "admitted", "predicted": "rejected"}}}}
    write_json(run_dir / "br.json", record("webhook-blast-radius", "refused", "failed", T0,
                                           observations={"blast_radius": blast}))
    text = build_report(run_dir).read_text(encoding="utf-8")
    assert "Y" * 1000 not in text and len(text) < 1_500_000, len(text)
    image_rows = [r.all_text() for r in parse(text).find_all("table", cls="image-sources")[0].find_all("tr")[1:]]
    assert len(image_rows) == TABLE_MAX_ROWS + 1 and "20 more images not shown" in image_rows[-1]
    assert "cannot tell for n2" in image_rows[0] and "none" not in image_rows[0]
    assert "none" in image_rows[1]
    assert "malformed" in image_rows[2]
    assert "Z UTC" not in text
    blast_rows = [r.all_text() for r in parse(text).find_all("table", cls="blast-radius")[0].find_all("tr")[1:]]
    assert len(blast_rows) == TABLE_MAX_ROWS + 1 and "more writes not shown" in blast_rows[-1]
    assert "not a duration" in blast_rows[0]
    # Answers recorded for a backend said not to be taken down are shown, flagged, not hidden.
    other = tmp_path / "other"
    write_json(other / "br.json", record("webhook-blast-radius", "refused", "failed", T0,
                                         observations={"blast_radius": {"team/skipped": blast["team/skipped"]}}))
    rows = [r.all_text() for r in parse(build_report(other).read_text(encoding="utf-8"))
            .find_all("table", cls="blast-radius")[0].find_all("tr")[1:]]
    assert "not taken down" in rows[0] and "malformed" in rows[1] and "(differs)" in rows[2], rows


def test_claims_section_says_confirmed_or_contradicted_with_what_broke_it(report) -> None:
    _, dom = report
    table = dom.find_all("table", cls="claims")[0]
    rows = [r.flat_text() for r in table.find_all("tr")[1:]]
    assert len(rows) == 2
    assert "control-plane-stop" in rows[0] and "pods keep serving" in rows[0] and "confirmed" in rows[0]
    assert "contradicted" not in rows[0]
    # the failed drill: contradicted, with the expectation that did not hold, its value and bound
    assert "dns-outage" in rows[1] and "contradicted" in rows[1], rows[1]
    failed = table.find_all("tr")[2].find_all("span", cls="fail-text")
    assert failed and failed[0].all_text() == "contradicted"


def test_claims_section_never_confirms_a_record_whose_expectations_disagree(tmp_path: Path) -> None:
    # a forged record: verdict passed, one expectation failed
    run = make_run(tmp_path / "run-1")
    path = run / "control-plane-stop--paused.json"
    data = json.loads(path.read_text())
    data["expectations"][0]["verdict"] = "failed"
    path.write_text(json.dumps(data))
    dom = parse(build_report(run).read_text(encoding="utf-8"))
    first = dom.find_all("table", cls="claims")[0].find_all("tr")[1].flat_text()
    # the report reads a passed verdict its expectations do not support as an error: not measured
    assert "not measured" in first and "confirmed" not in first and "api_recovery_seconds" in first, first
