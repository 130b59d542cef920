"""The tables of a drill's section in the report (harness/templates/report_drill.html.j2): fault,
injections and reverts, expectations, waits, probes, observations and the webhook blast radius,
each as rows of plain values. Times are shown as seconds since the drill's start (``t0``, epoch
seconds); every value from a record is text the templates escape.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from harness.evidence.reading import as_float
from harness.evidence.report_format import (
    FAILING_VERDICTS,
    as_text,
    capped_rows,
    cell_text,
    compact_json,
    number_text,
    relative_text,
    seconds_text,
    utc_text,
)

# Keys of an injection window that have their own column; any other key is the fault's own
# evidence (``Fault.evidence()``, e.g. ``restore_seconds``) and is shown in the last column.
_INJECTION_COLUMNS = ("kind", "method", "where", "injected_at", "revert_started_at", "reverted_at",
                      "revert_verified")


def value_cell(value: Any, unit: Any = None) -> dict[str, str]:
    """A measured/observed value for the ``value`` macro: numbers with their unit, structures as
    JSON (kind "json"), None as not measured (kind "missing")."""
    if value is None:
        return {"kind": "missing", "text": ""}
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, float)):
        text = number_text(value)
    elif isinstance(value, (dict, list)):
        return {"kind": "json", "text": compact_json(value)}
    else:
        text = str(value)
    if unit and not isinstance(value, bool):
        text = f"{text} {unit}"
    return {"kind": "text", "text": text}


def time_cell(epoch: Any, t0: float | None) -> dict[str, str] | None:
    """A time since the drill start and its UTC time (the ``time_cell`` macro); None: no time."""
    if as_float(epoch) is None:
        return None
    return {"rel": relative_text(epoch, t0), "utc": utc_text(epoch)}


def where_items(where: Any) -> list[str]:
    """Where a fault acted (a name, or a list of names or objects), as one text per item."""
    items = where if isinstance(where, list) else [where] if where not in (None, "", []) else []
    return [as_text(compact_json(w) if isinstance(w, (dict, list)) else w) for w in items]


def fault_view(fault: Any, t0: float | None, windows: int) -> dict[str, Any] | None:
    """The Fault table (None: no fault recorded); ``windows`` is how many injection windows there were."""
    if not isinstance(fault, dict):
        return None
    params = fault.get("params")
    injected = as_float(fault.get("injected_at"))
    reverted = as_float(fault.get("reverted_at"))
    if injected is not None and reverted is not None:
        window = {"state": "reverted", "injected": utc_text(injected), "reverted": utc_text(reverted),
                  "injected_rel": relative_text(injected, t0), "reverted_rel": relative_text(reverted, t0),
                  "length": number_text(reverted - injected)}
    elif injected is not None:
        window = {"state": "not reverted", "injected": utc_text(injected), "injected_rel": relative_text(injected, t0)}
    else:
        window = {"state": "not injected"}
    return {
        "kind": as_text(fault.get("kind") or "unknown"),
        "method": as_text(fault.get("method") or "—"),
        "params": [(str(k), value_cell(v)) for k, v in params.items()] if isinstance(params, dict) else [],
        "where": where_items(fault.get("where")) if fault.get("where") else [],
        "window": window,
        "verified": fault.get("revert_verified") is True,
        "windows": windows,
    }


def _extra(key: str, value: Any) -> dict[str, Any]:
    """One extra key of an injection window (the fault's own evidence), for the ``extra`` macro:
    ``{node: seconds}`` as ``node 0.26 s`` (kind "kv"), ``{node: [log lines]}`` (e.g.
    ``restore_journal``, kind "journal") and anything long collapsed (``collapsed``)."""
    unit = " s" if key.endswith("_seconds") else ""
    if isinstance(value, dict) and value and all(isinstance(v, list) for v in value.values()):
        entries = [{"name": str(k), "lines": len(v), "text": "\n".join(str(line) for line in v)}
                   for k, v in value.items()]
        return {"kind": "journal", "key": key, "collapsed": True, "entries": entries,
                "lines": sum(len(v) for v in value.values())}
    if isinstance(value, dict) and value and all(
        v is None or isinstance(v, (str, int, float, bool)) for v in value.values()
    ):
        items = [(str(k), f"{number_text(v)}{unit}" if as_float(v) is not None else "—" if v is None else str(v))
                 for k, v in value.items()]
        return {"kind": "kv", "key": key, "collapsed": False, "pairs": items}
    if isinstance(value, list) and value and all(isinstance(v, (str, int, float)) for v in value):
        text = ", ".join(str(v) for v in value)
        if len(text) > 160:
            return {"kind": "list", "key": key, "collapsed": True, "count": len(value),
                    "text": "\n".join(str(v) for v in value)}
        return {"kind": "text", "key": key, "collapsed": False, "text": text}
    if isinstance(value, (dict, list)):
        text = compact_json(value)
        if len(text) > 160:
            return {"kind": "json", "key": key, "collapsed": True,
                    "text": json.dumps(value, indent=2, sort_keys=True, default=str)}
        return {"kind": "code", "key": key, "collapsed": False, "text": text}
    shown = number_text(value) + unit if as_float(value) is not None else value
    return {"kind": "text", "key": key, "collapsed": False, "text": as_text("—" if shown is None else shown)}


def injection_rows(windows: Sequence[Mapping[str, Any]], t0: float | None) -> list[dict[str, Any]]:
    """One row per injection window (see :func:`injection_windows`); times since the drill start."""
    rows = []
    for n, w in enumerate(windows, 1):
        injected, reverted = as_float(w.get("injected_at")), as_float(w.get("reverted_at"))
        verified = w.get("revert_verified") is True
        extras = sorted(
            (_extra(str(k), v) for k, v in w.items() if k not in _INJECTION_COLUMNS and v not in (None, [], {}, "")),
            key=lambda x: x["collapsed"],  # the collapsed (long) ones last
        )
        rows.append({
            "n": n,
            "ok": reverted is not None and verified,
            "kind": as_text(w.get("kind") or "unknown"),
            "method": as_text(w.get("method") or "—"),
            "where": where_items(w.get("where")),
            "injected": time_cell(injected, t0),
            "revert_started": time_cell(w.get("revert_started_at"), t0),
            "reverted": time_cell(reverted, t0),
            "length": number_text(reverted - injected) if injected is not None and reverted is not None else None,
            "verified": verified,
            "extras": extras,
        })
    return rows


def expectation_rows(expectations: Any, t0: float | None) -> list[dict[str, Any]] | None:
    """A row per expectation entry (None: no expectations recorded)."""
    if not isinstance(expectations, list) or not expectations:
        return None
    rows = []
    for x in expectations:
        if not isinstance(x, dict):
            continue
        verdict = x.get("verdict")
        bound = x.get("bound_text")
        if not bound and isinstance(x.get("bound"), dict):
            b = x["bound"]
            bound = f"{b.get('op', '')} {b.get('value', '')} {x.get('unit') or ''}".strip()
        rows.append({
            "cls": "row-fail" if verdict in FAILING_VERDICTS else "row-pass" if verdict == "passed" else "row-other",
            "verdict": verdict,
            "name": as_text(x.get("name")),
            "phase": as_text(x.get("phase")) if x.get("phase") else None,
            "description": as_text(x.get("description") or ""),
            "measured": value_cell(x.get("measured"), x.get("unit")),
            "bound": as_text(bound or "—"),
            "became_true": relative_text(x.get("became_true_at"), t0),
            "detail": as_text(x.get("detail") or ""),
        })
    return rows


def waits_view(record: Mapping[str, Any], t0: float | None) -> dict[str, Any] | None:
    """The drill's waits that did not hold or met errors on the way, with the last error (None: no
    waits recorded, a record from before kdrill recorded them)."""
    waits = record.get("waits")
    if not isinstance(waits, list):
        return None
    shown = [w for w in waits if isinstance(w, dict) and (w.get("ok") is not True or w.get("errors"))]
    return {
        "count": len(waits),
        "dropped": as_text(record.get("waits_dropped") or "") or None,
        "rows": [{
            "held": w.get("ok") is True,
            "what": as_text(w.get("what") or "—"),
            "where": as_text(w.get("where")),
            "started": relative_text(w.get("started_at"), t0),
            "took": seconds_text(w.get("elapsed_seconds")),
            "timeout": seconds_text(w.get("timeout_seconds")),
            "attempts": as_text(w.get("attempts")),
            "errors": as_text(w.get("errors")),
            "last_error": as_text(w.get("last_error") or ""),
        } for w in shown],
    }


def probe_rows(probes: Any, t0: float | None) -> list[dict[str, Any]] | None:
    """A row per probe summary (None: no probe summaries recorded)."""
    if not isinstance(probes, dict) or not probes:
        return None
    rows = []
    for name, p in probes.items():
        if not isinstance(p, dict):
            continue
        samples = p.get("samples")
        failures = p.get("failures")
        ratio = as_float(p.get("success_ratio"))
        rows.append({
            "name": as_text(name),
            "warn": not samples,
            "samples": as_text(samples if samples is not None else "—"),
            "successes": as_text(p.get("successes", "—")),
            "failures": as_text(failures if failures is not None else "—"),
            "failed": isinstance(failures, int) and failures > 0,
            "ratio": "—" if ratio is None else f"{ratio * 100:.2f} %",
            "longest_gap": seconds_text(p.get("longest_gap_seconds")),
            "p50": seconds_text(p.get("latency_p50_seconds")),
            "p99": seconds_text(p.get("latency_p99_seconds")),
            "sampled": (relative_text(p.get("first_sample_at"), t0), relative_text(p.get("last_sample_at"), t0)) if samples else None,
        })
    return rows


def observation_rows(observations: Any) -> list[dict[str, Any]] | None:
    """A row per observation (None: none recorded); injection windows are only counted here."""
    if not isinstance(observations, dict) or not observations:
        return None
    rows = []
    for k, v in observations.items():
        if k == "injections" and isinstance(v, list) and v:
            rows.append({"key": str(k), "kind": "injections", "count": len(v)})
        elif k == "blast_radius" and isinstance(v, dict) and v:
            # Shown once, in its table (cut and counted there); the record file holds it whole.
            rows.append({"key": str(k), "kind": "value", "value": value_cell("in the Blast radius table above; the record holds it whole")})
        elif isinstance(v, (dict, list)):
            rows.append({"key": str(k), "kind": "json", "text": json.dumps(v, indent=2, sort_keys=True, default=str)})
        else:
            rows.append({"key": str(k), "kind": "value", "value": value_cell(v)})
    return rows


def blast_radius_rows(observations: Any) -> list[dict[str, Any]] | None:
    """The webhook blast-radius map (observation ``blast_radius``: backend -> its writes), a row
    per backend and write: outcome with its latency and the webhook the rejection named, beside
    what the configuration predicted and why; a backend not taken down is one row saying why.
    None when the record has no map; anything malformed is shown as text, said to be malformed,
    never trusted; every cell at most :data:`CELL_CHARS` characters, at most
    :data:`TABLE_MAX_ROWS` rows."""
    blast = observations.get("blast_radius") if isinstance(observations, dict) else None
    if not isinstance(blast, dict) or not blast:
        return None

    rows = []
    for backend, entry in blast.items():
        if not isinstance(entry, dict):
            rows.append({"backend": cell_text(backend), "write": "", "malformed": cell_text(entry)})
            continue
        writes = entry.get("writes")
        if entry.get("not_drilled"):
            rows.append({"backend": cell_text(backend), "write": "", "not_drilled": cell_text(entry["not_drilled"])})
            if not writes:
                continue
            # Not taken down, yet answers recorded: shown, never hidden behind the "not taken down".
            rows.append({"backend": cell_text(backend), "write": "", "malformed": "writes recorded for a backend "
                         "said not to be taken down"})
        if not isinstance(writes, dict) or not writes:
            rows.append({"backend": cell_text(backend), "write": "", "malformed": "no writes: " + cell_text(writes)})
            continue
        for name, w in writes.items():
            if not isinstance(w, dict) or not isinstance(w.get("outcome"), str):
                rows.append({"backend": cell_text(backend), "write": cell_text(name), "malformed": cell_text(w)})
                continue
            outcome, predicted = w["outcome"], w.get("predicted")
            if predicted is not None and not isinstance(predicted, str):
                rows.append({"backend": cell_text(backend), "write": cell_text(name), "malformed": "prediction "
                             + cell_text(predicted) + " is not text"})
                continue
            seconds = as_float(w.get("seconds"))
            rows.append({"backend": cell_text(backend), "write": cell_text(name), "outcome": cell_text(outcome),
                         "seconds": seconds_text(seconds) if seconds is not None and 0 <= seconds < 1e6 else
                                    ("—" if w.get("seconds") is None else "not a duration: " + cell_text(w.get("seconds"))),
                         "webhook": cell_text(w.get("webhook") or ""),
                         "predicted": cell_text(predicted if predicted is not None else "cannot tell"),
                         "differs": predicted is not None and outcome != predicted,
                         "kind": ", ".join(k for k, flag in (("platform's own", w.get("system")),
                                                             ("webhook's repair", w.get("repair"))) if flag is True),
                         "why": cell_text(w.get("why") or "")})
    return capped_rows(rows, "writes")
