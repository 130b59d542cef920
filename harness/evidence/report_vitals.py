"""The report's "What else broke" panel: a drill's vital signs (``record["vital_signs"]``, written by
harness/engine/vitals.py) per window, which are flagged and why, and the restarts and node
transitions behind them. Plain values for harness/templates/report_vitals.html.j2.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from harness.evidence.reading import as_float, first_injection
from harness.evidence.report_format import as_text, cell_text, number_text, relative_text
from harness.spec.schema import HEALTHY_RATIO

_VITAL_WINDOWS = (("baseline", "Baseline"), ("fault", "During fault"), ("after", "After"))
_VITAL_SIGNS = {
    "api_read": "LIST through the API server, from the host",
    "api_write": "UPDATE through the API server, from the host",
    "service_name": "HTTP to a Service by its DNS name, from a pod (CoreDNS)",
    "service_clusterip": "HTTP to the same Service by ClusterIP, from a pod",
    "nodes_ready": "share of samples with every node Ready",
    "kube_system_restarts": "container restarts added in kube-system",
}


def vital_signs_state(record: Mapping[str, Any]) -> tuple[str, list[str]]:
    """(state, flagged sign names) of a record's vital signs; state is ``"recorded"``,
    ``"not recorded"`` (no or empty ``vital_signs``: older records) or ``"error"``."""
    vs = record.get("vital_signs")
    if not isinstance(vs, dict) or not vs:
        return "not recorded", []
    signs = vs.get("signs")
    if not isinstance(signs, dict):
        return "error", []
    listed = vs.get("flagged") if isinstance(vs.get("flagged"), list) else []
    flagged = [str(n) for n in listed]
    flagged += [str(n) for n, v in signs.items() if isinstance(v, dict) and v.get("flagged") is True
                and str(n) not in flagged]
    order = list(_VITAL_SIGNS)
    flagged.sort(key=lambda n: (order.index(n) if n in order else len(order), n))
    return "recorded", flagged


def sign_reason(record: dict[str, Any], sign: str) -> str:
    """Why a vital sign is flagged, as the record says (older records: degraded, not covered)."""
    vitals = record.get("vital_signs") if isinstance(record.get("vital_signs"), dict) else {}
    signs = vitals.get("signs") if isinstance(vitals.get("signs"), dict) else {}
    entry = signs.get(sign) if isinstance(signs.get(sign), dict) else {}
    return str(entry.get("reason") or "degraded, and no expectation is about it")


def _ratio(value: Any) -> dict[str, Any] | None:
    """A window's ratio as a percentage for its cell; None: no sample in that window."""
    r = as_float(value)
    if r is None:
        return None
    # Never round a degraded ratio up to 100 %: truncate to one decimal below 1.
    text = "100" if r >= 1 else f"{math.floor(r * 100 * 10) / 10:.1f}".removesuffix(".0")
    return {"text": text, "low": r < HEALTHY_RATIO}


def _sign_order(signs: Mapping[str, Any]) -> list[str]:
    """The known vital signs in their fixed order, then any other by name."""
    known = [n for n in _VITAL_SIGNS if n in signs]
    return known + sorted(str(n) for n in signs if n not in _VITAL_SIGNS)


def _restart_counts(value: Any) -> dict[str, Any]:
    """{pod: restarts} as recorded ({} when it is not a mapping)."""
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}


def _restarts_text(counts: Mapping[str, Any]) -> str:
    """E.g. ``"3 restarts in 2 pods"``."""
    total = sum(int(v) for v in counts.values() if isinstance(v, (int, float)) and not isinstance(v, bool))
    pods = len(counts)
    return f"{total} restart{'' if total == 1 else 's'} in {pods} pod{'' if pods == 1 else 's'}"


def _sign_status(sign: Mapping[str, Any], flagged: bool) -> tuple[str, str]:
    """(status, row class) of one vital sign: "flagged", "covered", "degraded", "not read",
    "ok" or "not assessed"."""
    degraded = sign.get("degraded") is True
    if flagged:
        return "flagged", "row-flagged"
    if degraded and sign.get("covered_by"):
        return "covered", "row-covered"
    if degraded:
        return "degraded", "row-covered"
    if sign.get("error"):
        return "not read", "row-warn"
    if "degraded" in sign:
        return "ok", "row-ok"
    return "not assessed", "row-other"


def vitals_view(record: Mapping[str, Any], t0: float | None) -> dict[str, Any]:
    """The "What else broke" panel (report_vitals.html.j2): every vital sign of
    ``record["vital_signs"]`` (harness/engine/vitals.py) per window, its status, and the details of
    restarts and nodes. ``state`` is that of :func:`vital_signs_state`."""
    vs = record.get("vital_signs")
    state, flagged_signs = vital_signs_state(record)
    if state == "not recorded":
        return {"state": state}
    if state == "error":
        reason = vs.get("error") if isinstance(vs, dict) else None
        return {"state": state, "reason": as_text(reason or "no signs recorded")}
    signs = vs["signs"]
    rows = []
    details: list[dict[str, Any]] = []
    first = first_injection(record)
    for name in _sign_order(signs):
        sign = signs[name] if isinstance(signs[name], dict) else {}
        flagged = name in flagged_signs
        status, cls = _sign_status(sign, flagged)
        row = {
            "name": name, "description": _VITAL_SIGNS.get(name), "flagged": flagged, "cls": cls,
            "status": status, "reason": as_text(sign.get("reason") or "degraded, and no expectation is about it"),
            "covered_by": as_text(sign.get("covered_by")), "error": as_text(sign.get("error")) if sign.get("error") else None,
            "restarts": None, "ratios": [],
        }
        if name == "kube_system_restarts" or "added" in sign:
            added, by_design = _restart_counts(sign.get("added")), _restart_counts(sign.get("by_design"))
            row["restarts"] = {"added": _restarts_text(added) if added else None,
                               "by_design": _restarts_text(by_design) if by_design else None}
            if added or by_design:
                details.append({
                    "kind": "restarts",
                    "added": _restarts_text(added) if added else None,
                    "added_pods": [(pod, as_text(n)) for pod, n in sorted(added.items())],
                    "by_design": _restarts_text(by_design) if by_design else None,
                    "by_design_pods": [(pod, as_text(n)) for pod, n in sorted(by_design.items())],
                })
        else:
            row["ratios"] = [_ratio(sign.get(w)) for w, _ in _VITAL_WINDOWS]
        if name == "nodes_ready" or isinstance(sign.get("transitions"), list):
            nodes = _node_transitions(sign.get("transitions"), first, t0)
            if nodes is not None:
                details.append(nodes)
        rows.append(row)
    windows = vs.get("windows") if isinstance(vs.get("windows"), dict) else {}
    spans = []
    for key, label in _VITAL_WINDOWS:
        parts = [f"{relative_text(a, t0)} → {relative_text(b, t0)}" for span in windows.get(key) or []
                 if isinstance(span, (list, tuple)) and len(span) == 2 for a, b in [span]]
        spans.append(f"{label.lower()} {', '.join(parts) if parts else 'none'}")
    return {"state": state, "threshold": number_text(HEALTHY_RATIO * 100), "windows": "; ".join(spans),
            "rows": rows, "details": details}


def _node_transitions(transitions: Any, first: float | None, t0: float | None) -> dict[str, Any] | None:
    """The not-Ready transitions of ``nodes_ready`` (and each node's return to Ready), with
    times since the first injection (since the drill start when nothing was injected); None
    when none was recorded."""
    items = [t for t in transitions if isinstance(t, dict)] if isinstance(transitions, list) else []
    if not items:
        return None
    origin, origin_label = (first, "first injection") if first is not None else (t0, "drill start")
    rows = []
    seen_bad: set[str] = set()
    nodes = []
    for t in items:
        node = str(t.get("node"))
        if node not in nodes:
            nodes.append(node)
        taints = t.get("taints") if isinstance(t.get("taints"), list) else []
        bad = t.get("ready") != "True" or bool(taints)
        if not bad and node not in seen_bad:
            continue  # first sight of a healthy node, or no change worth listing
        if bad:
            seen_bad.add(node)
        else:
            seen_bad.discard(node)
        ready = str(t.get("ready") or "no Ready condition")
        if t.get("ready") != "True" and t.get("reason"):  # who said so: the kubelet or the node lifecycle controller
            ready += f" ({t.get('reason')}{': ' + str(t.get('message')) if t.get('message') else ''})"
        rows.append({"node": node, "bad": bad, "ready": cell_text(ready),
                     "taints": [as_text(x) for x in taints], "since": relative_text(t.get("t"), origin)})
    return {"kind": "nodes", "rows": rows, "since": origin_label, "seen": len(nodes),
            # The record keeps the first 50 changes.
            "capped": len(items) >= 50}
