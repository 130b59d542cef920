"""A drill's section of the report (harness/templates/report_drill.html.j2): everything one drill
record shows, from its verdict and one-line summary to its charts, tables and evidence files;
and the section of a record slot that holds no readable record.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.evidence.reading import as_float, injection_windows, load_timeline
from harness.evidence.reference_bounds import check_bounds
from harness.evidence.report_chart import timeline_svg
from harness.evidence.report_detection import detection_view
from harness.evidence.report_format import (
    as_text,
    drill_label,
    record_anchor,
    safe_href,
    seconds_text,
    tally_text,
    utc_text,
)
from harness.evidence.report_tables import (
    blast_radius_rows,
    expectation_rows,
    fault_view,
    injection_rows,
    observation_rows,
    probe_rows,
    waits_view,
)
from harness.evidence.report_vitals import sign_reason, vital_signs_state, vitals_view


def _drill_t0(record: Mapping[str, Any], timeline: Mapping[str, list[dict[str, Any]]] | None) -> float | None:
    """The drill's start (epoch seconds): its ``started_at``, else the earliest time it recorded
    (a phase, the injection, a sample); None when it recorded none."""
    t0 = as_float(record.get("started_at"))
    if t0 is not None:
        return t0
    candidates = [as_float(p.get("started_at")) for p in record.get("phases") or [] if isinstance(p, dict)]
    fault = record.get("fault")
    if isinstance(fault, dict):
        candidates.append(as_float(fault.get("injected_at")))
    for samples in (timeline or {}).values():
        candidates += [as_float(s.get("t")) for s in samples]
    found = [c for c in candidates if c is not None]
    return min(found) if found else None


def claim_sources(source: Any) -> list[dict[str, str | None]]:
    """The claim's sources: title, a link only for an http(s) URL, the URL as text, the section."""
    items = source if isinstance(source, list) else [source] if source else []
    out = []
    for s in items:
        if isinstance(s, str):
            s = {"title": s, "url": s if safe_href(s) else None}
        if not isinstance(s, dict):
            continue
        out.append({
            "title": as_text(s.get("title") or s.get("url") or "source"),
            "href": safe_href(s.get("url")),
            "url": as_text(s.get("url")) if s.get("url") else None,
            "section": as_text(s.get("section")) if s.get("section") else None,
        })
    return out


def _evidence_files(run_dir: Path, record_path: Path, record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The record and the files it names, each with whether it is in the run directory."""
    files = record.get("evidence_files")
    entries = [("record", record_path.name)]
    if isinstance(files, dict):
        entries += [(str(k), str(v)) for k, v in files.items() if isinstance(v, str)]
    return [{"label": label, "name": name,
             "exists": (run_dir / name).is_file() and not name.startswith(("/", ".."))}
            for label, name in entries]


def _charts_view(record: Mapping[str, Any], timeline: dict[str, list[dict[str, Any]]],
                 t0: float) -> list[dict[str, Any]]:
    """A figure per probe (the record's probes, then any other in its timeline): name, sample
    counts and its chart."""
    probes = record.get("probes") if isinstance(record.get("probes"), dict) else {}
    names = list(probes) + [n for n in timeline if n not in probes]
    fault = record.get("fault") if isinstance(record.get("fault"), dict) else {}
    injected = as_float(fault.get("injected_at"))
    window = (injected, as_float(fault.get("reverted_at"))) if injected is not None else None
    observations = record.get("observations") if isinstance(record.get("observations"), dict) else {}
    injections = observations.get("injections") if isinstance(observations.get("injections"), list) else []
    earlier = [(a, b) for i in injections if isinstance(i, dict)
               and (a := as_float(i.get("injected_at"))) is not None and (b := as_float(i.get("reverted_at"))) is not None
               and a != injected]
    raw_phases = record.get("phases")
    phase_list = [p for p in raw_phases if isinstance(p, dict)] if isinstance(raw_phases, list) else []
    phases = [(str(p.get("name")), t) for p in phase_list if (t := as_float(p.get("started_at"))) is not None]
    ends = [as_float(record.get("finished_at"))] + [as_float(p.get("ended_at")) for p in phase_list]
    t_end = max([t0 + 1.0] + [t for t in ends if t is not None])
    figures = []
    for name in names:
        samples = timeline.get(name, [])
        failed = sum(1 for smp in samples if smp.get("ok") is not True)
        figures.append({
            "probe": str(name),
            "counts": f"{len(samples)} samples, {failed} failed" if samples else "no samples",
            # The one piece of markup the templates insert as is: Markup built by timeline_svg
            # (its _el escapes every text and attribute value; the rest are numbers it computed).
            "svg": timeline_svg(name, samples, t0=t0, t_end=t_end, fault_window=window, phases=phases,
                                earlier_windows=earlier),
        })
    return figures


def _glance(record: Mapping[str, Any], windows: Sequence[Mapping[str, Any]], vitals_state: str,
            flagged: Sequence[str]) -> list[tuple[str, str]]:
    """The drill's one-line summary: (style, text) items; style "" (plain), "fail", "flag" or "muted"."""
    glance = [("", f"Expectations: {tally_text(record.get('expectations'))}")]
    if any(w.get("injected_at") is not None for w in windows):
        bad = sum(1 for w in windows if w.get("reverted_at") is None or w.get("revert_verified") is not True)
        if len(windows) == 1:
            glance.append(("fail", "fault revert not verified") if bad else ("", "fault reverted and verified"))
        else:
            glance.append(("fail", f"{bad} of {len(windows)} injections: revert not verified") if bad
                          else ("", f"all {len(windows)} injections reverted and verified"))
    if flagged:
        glance.append(("flag", f"{len(flagged)} flagged vital sign{'s' if len(flagged) != 1 else ''}"))
    elif vitals_state == "recorded":
        glance.append(("", "vital signs: nothing flagged"))
    else:
        glance.append(("muted", f"vital signs {'not recorded' if vitals_state == 'not recorded' else 'not watched'}"))
    errors = record.get("errors")
    if isinstance(errors, list) and errors:
        glance.append(("fail", f"{len(errors)} error{'s' if len(errors) != 1 else ''}"))
    return glance


def drill_view(run_dir: Path, record_path: Path, record: dict[str, Any], git_commit: Any = None) -> dict[str, Any]:
    """Everything a drill's section shows (report_drill.html.j2 drill_section); ``git_commit``
    is the run's (run.json), whose scenario the record's bounds are checked against
    (harness/evidence/reference_bounds.py)."""
    timeline, _, timeline_problem = load_timeline(run_dir, record_path, record)
    bounds = check_bounds(record, git_commit)
    t0 = _drill_t0(record, timeline)
    observations = record.get("observations") if isinstance(record.get("observations"), dict) else {}
    fault = record.get("fault") if isinstance(record.get("fault"), dict) else {}
    windows = injection_windows(fault, observations.get("injections"))
    vitals_state, flagged = vital_signs_state(record)
    case = record.get("case")
    claim = record.get("claim")
    errors = record.get("errors")
    scenario = record.get("scenario")
    replaced = record.get("replaced_measurements")
    return {
        "anchor": record_anchor(record_path),
        "drill": None if record.get("drill") is None else str(record.get("drill")),
        "case": "" if case is None else str(case),
        "verdict": record.get("verdict"),
        "vitals_state": vitals_state,
        "flagged": flagged,
        "flag_reasons": [(n, sign_reason(record, n)) for n in flagged],
        "heading": as_text(record.get("title") or drill_label(record)),
        "label": drill_label(record),
        "started": utc_text(record.get("started_at")),
        "finished": utc_text(record.get("finished_at")),
        # Which cluster ran it: in a run across parallel clusters (harness/core/workers.py) each record names its own.
        "cluster_name": as_text((record.get("cluster") or {}).get("name")) if isinstance(record.get("cluster"), dict)
        and (record.get("cluster") or {}).get("name") else None,
        "duration": seconds_text(record.get("duration_seconds")),
        "kdrill_version": as_text(record.get("kdrill_version") or "—"),
        "glance": _glance(record, windows, vitals_state, flagged)
        + ([("flag", f"{len(bounds.differences)} bound difference{'s' if len(bounds.differences) != 1 else ''} "
                     "from its reference scenario")] if bounds.differences else []),
        "bounds": {"reference": as_text(bounds.reference) if bounds.reference else None,
                   "differences": [as_text(d) for d in bounds.differences]},
        "claim": {"text": str(claim), "sources": claim_sources(record.get("source"))} if claim else None,
        "fault": fault_view(record.get("fault"), t0, len(windows)),
        "timeline_problem": timeline_problem,
        "no_start": t0 is None,
        "figures": _charts_view(record, timeline or {}, t0) if t0 is not None and not timeline_problem else [],
        "expectations": expectation_rows(record.get("expectations"), t0),
        "vitals": vitals_view(record, t0),
        "detection": detection_view(record),
        "probes": probe_rows(record.get("probes"), t0),
        "observations": observation_rows(record.get("observations")),
        "blast_radius": blast_radius_rows(record.get("observations")),
        "replaced": expectation_rows(replaced, t0) if isinstance(replaced, list) and replaced else None,
        "waits": waits_view(record, t0),
        "errors": [as_text(e) for e in errors] if isinstance(errors, list) else [],
        "injections": injection_rows(windows, t0),
        "evidence": _evidence_files(run_dir, record_path, record),
        "scenario": json.dumps(scenario, indent=2, sort_keys=True, default=str) if scenario else None,
    }


def unreadable_view(path: Path, reason: str) -> dict[str, Any]:
    """A record slot that does not hold a readable record: its file, why, its size."""
    return {"anchor": record_anchor(path), "name": path.name, "reason": reason,
            "size": path.stat().st_size if path.is_file() else None}
