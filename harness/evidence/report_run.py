"""The run-wide sections of the report (harness/templates/report.html.j2): the headline and the Run
section from ``run.json``, the cluster, the verdicts summary and the seal. Plain values for the
templates, which escape them.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.evidence.manifest_format import EXTERNAL_SIGNER, NOT_FOR_AUDIT
from harness.evidence.reading import RunEvidence, as_float
from harness.evidence.report_format import (
    FAILING_VERDICTS,
    as_text,
    capped_rows,
    cell_text,
    drill_label,
    record_anchor,
    seconds_text,
    tally_text,
    utc_text,
)
from harness.evidence.report_vitals import vital_signs_state


def run_view(run: RunEvidence) -> dict[str, Any]:
    """The page header's headline and the Run section: run metadata as shown."""
    meta = run.meta
    started = as_float(meta.get("started_at"))
    finished = as_float(meta.get("finished_at"))
    command = meta.get("command")
    if isinstance(command, list):
        command = shlex.join(str(c) for c in command)
    return {
        "dir_name": run.run_dir.name,
        "headline": _headline(run),
        "problems": run.problems,
        "user": as_text(meta.get("user") or "unknown"),
        "host": as_text(meta.get("host") or "unknown host"),
        "started": utc_text(started),
        "finished": utc_text(finished) if finished is not None else None,
        "duration": seconds_text(finished - started) if started is not None and finished is not None else "—",
        "commit": as_text(meta.get("git_commit") or "unknown"),
        "dirty": meta.get("git_dirty") if isinstance(meta.get("git_dirty"), bool) else None,
        "kdrill_version": as_text(meta.get("kdrill_version") or "unknown"),
        "python": as_text(meta.get("python") or "unknown"),
        "command": as_text(command or "unknown"),
        "ticket": as_text(meta.get("ticket") or "none given"),
        "approved_by": as_text(meta.get("approved_by") or "nobody named"),
        "cluster": _run_cluster(meta),
        "platform": _platform_text(meta),
        "image_sources": _image_sources_view(meta.get("image_sources")),
        "workers": _workers_view(meta.get("workers")),
    }


def _headline(run: RunEvidence) -> list[dict[str, str]]:
    """The page's headline badges ({"cls", "text"}): how many drills did not pass of how many, and
    how many had flagged vital signs."""
    records = [r for _, r in run.records]
    # A drill that was planned (run.json) and left no record at all counts as not passed too.
    stems = {str(r.get("drill")) + (f"--{r['case']}" if r.get("case") else "") for r in records}
    planned = [str(p) for p in run.meta.get("planned") or [] if isinstance(p, str)]
    missing = [p for p in planned if p not in stems]
    # An unreadable record counts as a drill that did not pass: its verdict is unknown.
    total = len(records) + len(run.unreadable) + len(missing)
    failing = sum(1 for r in records if r.get("verdict") != "passed") + len(run.unreadable) + len(missing)
    unreadable = f" ({len(run.unreadable)} unreadable)" if run.unreadable else ""
    if missing:
        unreadable += f" ({len(missing)} planned, no record: {', '.join(missing)})"
    # A verdict says nothing about what the drill did not assert: drills whose vital signs were
    # flagged are named in the headline too, so a green verdict cannot hide them.
    flagged = sum(1 for r in records if vital_signs_state(r)[1])
    passed_flagged = sum(1 for r in records if r.get("verdict") == "passed" and vital_signs_state(r)[1])
    with_flagged = f"{flagged} with flagged vital signs"
    if not total:
        return [{"cls": "badge-unknown", "text": "no drill records"}]
    if failing:
        headline = [{"cls": "badge-fail", "text": f"{failing} of {total} not passed{unreadable}"}]
        if flagged:
            headline.append({"cls": "badge-flagged headline-flagged", "text": with_flagged})
        return headline
    if passed_flagged:
        return [{"cls": "badge-flagged headline-flagged",
                 "text": f"{total} drill{'s' if total != 1 else ''} passed, {with_flagged}"}]
    return [{"cls": "badge-pass", "text": f"all {total} passed"}]


def _platform_text(meta: Mapping[str, Any]) -> str | None:
    """run.json's ``platform`` (the platform profile the cluster records) as one line; None when
    the run has none."""
    platform = meta.get("platform") if isinstance(meta.get("platform"), dict) else {}
    if not platform:
        return None
    if not platform.get("hash"):
        return as_text(platform.get("note") or "none recorded")
    # The record is what the cluster says; only a run given the profile's directory checked it.
    checked = meta.get("platform_checked_against")
    return (f"{as_text(platform.get('name'))}, sha256 {as_text(platform.get('hash'))} "
            f"({len(platform.get('files') or {})} files) as the cluster records it, "
            + (f"matching {as_text(checked)}" if checked else "not checked against a profile directory"))


def _run_cluster(meta: Mapping[str, Any]) -> dict[str, str] | None:
    """run.json's ``cluster``: name, provider, API server, kube-system UID and how far the nodes'
    clocks are from the host's; None when the run has none."""
    cluster = meta.get("cluster") if isinstance(meta.get("cluster"), dict) else {}
    if not cluster:
        return None
    offsets = cluster.get("clock_offsets") if isinstance(cluster.get("clock_offsets"), dict) else {}
    worst = [abs(v["offset_seconds"]) for v in offsets.values()
             if isinstance(v, dict) and isinstance(v.get("offset_seconds"), (int, float))]
    return {
        "name": as_text(cluster.get("name")),
        "provider": as_text(cluster.get("provider")),
        "server": as_text(cluster.get("server")),
        "kube_system_uid": as_text(cluster.get("kube_system_uid")),
        "clocks": (f"largest offset from the host {max(worst):.3f} s over {len(worst)} nodes" if worst
                   else as_text(offsets.get("note") or "not compared")),
    }


def _workers_view(workers: Any) -> list[dict[str, str]] | None:
    """run.json's ``workers`` (a run across parallel clusters, harness/core/workers.py): a row per
    worker with its cluster, server, kube-system UID, creation time and the cases it ran; None
    when the run had no workers."""
    if not isinstance(workers, dict) or not workers:
        return None
    rows = []
    for worker, seen in sorted(workers.items()):
        seen = seen if isinstance(seen, dict) else {"note": f"malformed: {cell_text(seen)}"}
        cluster = seen.get("cluster") if isinstance(seen.get("cluster"), dict) else {}
        created = seen.get("cluster_create_seconds")
        ran = seen.get("ran") if isinstance(seen.get("ran"), list) else []
        rows.append({"worker": as_text(worker), "cluster": as_text(cluster.get("name") or "—"),
                     "server": as_text(cluster.get("server") or "—"),
                     "uid": as_text(cluster.get("kube_system_uid") or "—"),
                     "created": seconds_text(created) if isinstance(created, (int, float)) else "reused or not made here",
                     "ran": cell_text(ran) if ran else "none", "note": as_text(seen.get("note") or "")})
    return rows


def _node_list(value: Any) -> list[str] | None:
    """A list of node names as recorded, or None when it is not one."""
    if isinstance(value, list) and all(isinstance(n, str) and n for n in value):
        return value
    return None


def _image_sources_view(recorded: Any) -> dict[str, Any] | None:
    """run.json's ``image_sources`` (harness/components/image_sources.py): a row per image with
    its source, workloads, pull policies, the nodes without it (and those it cannot tell for) and
    what an outage would do, or the note saying why it was not read. None when the run has none;
    malformed parts are shown as such, cells cut at :data:`CELL_CHARS` characters,
    at most :data:`TABLE_MAX_ROWS` rows."""
    if not isinstance(recorded, dict):
        return None

    sources = recorded.get("sources")
    note = cell_text(recorded["note"]) if recorded.get("note") else None
    if not isinstance(sources, list):
        return {"note": note or "malformed: no list of sources", "rows": []}
    rows = []
    for source in sources:
        images = source.get("images") if isinstance(source, dict) else None
        if not isinstance(images, list):
            rows.append({"source": cell_text(source), "image": "", "malformed": True})
            continue
        for image in images:
            if not isinstance(image, dict) or not isinstance(image.get("image"), str):
                rows.append({"source": cell_text(source.get("source")) + ": " + cell_text(image), "image": "", "malformed": True})
                continue
            without, unknown = _node_list(image.get("nodes_without")), _node_list(image.get("nodes_unknown", []))
            if without is None or unknown is None:
                nodes = "malformed: " + cell_text(image.get("nodes_without")) + "; " + cell_text(image.get("nodes_unknown"))
            else:
                nodes = "; ".join(filter(None, [cell_text(without) if without else "",
                                                ("cannot tell for " + cell_text(unknown)) if unknown else ""])) or "none"
            rows.append({"source": cell_text(source.get("source")), "image": cell_text(image["image"]),
                         "workloads": cell_text(image.get("workloads") or []),
                         "policies": cell_text(image.get("pull_policies") or []),
                         "without": nodes, "risk": cell_text(image.get("risk"))})
    return {"note": note, "rows": capped_rows(rows, "images"), "read_at": utc_text(recorded.get("read_at")),
            "empty": not rows}


def run_id_of(run: RunEvidence) -> str:
    """The run id: run.json's, else the first record's, else the directory's name."""
    records = [r for _, r in run.records]
    return str(run.meta.get("run_id") or (records[0].get("run_id") if records else None) or run.run_dir.name)


def cluster_view(records: list[tuple[Path, dict[str, Any]]]) -> dict[str, Any] | None:
    """The cluster as the first drill that recorded one saw it (None: none did)."""
    cluster = next((r.get("cluster") for _, r in records if isinstance(r.get("cluster"), dict)), None)
    if not cluster:
        return None
    nodes = []
    for node in cluster.get("nodes") or []:
        if not isinstance(node, dict):
            continue
        roles = node.get("roles") or []
        roles_text = ", ".join(str(r) for r in roles) if isinstance(roles, list) else str(roles)
        nodes.append({"name": as_text(node.get("name")), "roles": roles_text or "—",
                      "kubelet_version": as_text(node.get("kubelet_version") or "—")})
    return {
        "name": as_text(cluster.get("name") or "unknown"),
        "provider": as_text(cluster.get("provider") or "unknown"),
        "kubernetes_version": as_text(cluster.get("kubernetes_version") or "unknown"),
        "context": as_text(cluster.get("context") or "—"),
        "nodes": nodes,
    }


def summary_view(records: list[tuple[Path, dict[str, Any]]],
                  unreadable: Sequence[tuple[Path, str]] = ()) -> dict[str, Any]:
    """The Verdicts section: a row per drill record and per unreadable record, the tally of
    verdicts, the drills with flagged vital signs and how the others' vital signs went."""
    counts: dict[str, int] = {}
    vitals: dict[str, int] = {}
    flagged_drills: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    for path, r in records:
        verdict = r.get("verdict")
        counts[str(verdict)] = counts.get(str(verdict), 0) + 1
        state, flagged = vital_signs_state(r)
        vitals[state if not flagged else "flagged"] = vitals.get(state if not flagged else "flagged", 0) + 1
        if flagged:
            flagged_drills.append({"anchor": record_anchor(path), "label": drill_label(r), "signs": flagged})
        case = r.get("case")
        rows.append({
            "unreadable": False,
            "cls": "row-fail" if verdict in FAILING_VERDICTS else "row-flagged" if flagged else "",
            "anchor": record_anchor(path),
            "drill": as_text(r.get("drill")),
            "case": None if case in (None, "") else str(case),
            "title": as_text(r.get("title") or ""),
            "verdict": verdict,
            "tally": tally_text(r.get("expectations")),
            "vitals": state,
            "flagged": flagged,
            "duration": seconds_text(r.get("duration_seconds")),
        })
    for path, reason in unreadable:
        counts["error"] = counts.get("error", 0) + 1
        rows.append({"unreadable": True, "anchor": record_anchor(path), "name": path.name, "reason": reason})
    others = [f"{vitals[k]} {label}" for k, label in (("recorded", "with nothing flagged"),
                                                       ("error", "not watched"), ("not recorded", "not recorded"))
              if vitals.get(k)]
    return {
        "rows": rows,
        "tally": ", ".join(f"{n} {v}" for v, n in sorted(counts.items())),
        "flagged": flagged_drills,
        "vitals_line": others if records else [],
    }


def seal_view(seal: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The Seal section: who held the key (``custody``: manifest_format.CUSTODIES; absent is the
    local key), signer key, fingerprint, previous run (see render_report); None: unsealed."""
    if not seal:
        return None
    previous = seal.get("previous")
    return {
        # Who held the key: a seal made with a key the runner could read proves nothing to an auditor.
        "held": ("through an external signer: the runner did not hold the key" if seal.get("custody") == EXTERNAL_SIGNER
                 else NOT_FOR_AUDIT),
        "for_audit": seal.get("custody") == EXTERNAL_SIGNER,
        "fingerprint": str(seal.get("fingerprint_sha256") or "unknown"),
        "public_key": as_text(seal.get("public_key") or ""),
        "previous": ({"run_id": as_text(previous.get("run_id")), "manifest_sha256": as_text(previous.get("manifest_sha256"))}
                     if isinstance(previous, Mapping) else None),
    }
