"""Every run in a reports directory, and each expectation's value across them.

``kdrill history`` prints :func:`list_runs`; ``reports/index.html`` (:func:`write_index`, rewritten
at the end of every ``kdrill run``) lists the runs with their verdicts, platform and seal status
and draws a trend chart per expectation (inline SVG: the page loads nothing from anywhere). The
index lives outside every run directory, so it is a view, never evidence: each run's own seal is
checked (harness/evidence/verification.py) and shown, and figures of a run that does not verify
are left out of the trends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from jinja2 import Environment, PackageLoader, select_autoescape

from harness.core.files import write_text_atomic
from harness.evidence.chain import verify_history
from harness.evidence.compare import platform_of, printable
from harness.evidence.layout import RunIdError, validate_run_id
from harness.evidence.manifest import is_sealed
from harness.evidence.manifest_format import EXTERNAL_SIGNER, NOT_FOR_AUDIT, ManifestError
from harness.evidence.reading import checked_verdict, finite_number, read_json, scan_records
from harness.evidence.verification import verify_run

INDEX_NAME = "index.html"


@dataclass
class RunSummary:
    """One run: ``verdicts`` counts checked verdicts; ``seal`` is "intact", "not intact" or
    "unsealed"; ``signer`` who signed it ("" when unsealed), saying "signed by a local key: not
    for audit" for a key the runner held and "NOT a trusted key" when a trusted key was given
    and another signed; ``values`` maps ``drill[case].expectation`` to (measured, verdict,
    unit, bound)."""

    run_id: str
    started_at: float | None
    verdicts: dict[str, int]
    planned: int
    seal: str
    seal_problems: list[str]
    platform: dict[str, Any]
    git_commit: str | None
    ticket: str | None
    values: dict[str, tuple[Any, str, str, str]] = field(default_factory=dict)
    signer: str = ""

    @property
    def headline(self) -> str:
        total = max(self.planned, sum(self.verdicts.values()))
        passed = self.verdicts.get("passed", 0)
        return f"all {total} passed" if total and passed == total else f"{total - passed} of {total} not passed"


def list_runs(reports: Path, trusted_fingerprints: Sequence[str] = ()) -> list[RunSummary]:
    """Every run directory under ``reports`` (named by a valid run id), oldest first; a run not
    signed by one of ``trusted_fingerprints`` (when given) is "not intact"."""
    runs = []
    for path in sorted(Path(reports).iterdir()):
        try:
            validate_run_id(path.name)
        except RunIdError:
            continue
        # A linked run lives elsewhere and is not what verify --history checks: skipped, as there.
        if path.is_dir() and not path.is_symlink() and ((path / "run.json").is_file() or is_sealed(path)):
            try:
                runs.append(summarise(path, trusted_fingerprints))
            except Exception as exc:  # one damaged run must not hide the others
                runs.append(RunSummary(run_id=path.name, started_at=None, verdicts={"error": 1}, planned=0,
                                       seal="unreadable", seal_problems=[f"{type(exc).__name__}: {str(exc)[:200]}"],
                                       platform={}, git_commit=None, ticket=None))
    return sorted(runs, key=lambda r: (r.started_at or 0, r.run_id))


def summarise(run_dir: Path, trusted_fingerprints: Sequence[str] = ()) -> RunSummary:
    """One run's summary (its seal judged against ``trusted_fingerprints`` when given); never
    raises for a damaged run (it says so instead)."""
    run_json = run_dir / "run.json"
    try:
        # Not through a link (content from outside the run) nor from a FIFO (the read would block).
        meta = read_json(run_json) if run_json.is_file() and not run_json.is_symlink() else {}
        meta = meta if isinstance(meta, dict) else {}
    except (OSError, ValueError):
        meta = {}
    signer = ""
    if is_sealed(run_dir):
        result = verify_run(run_dir, trusted_fingerprints=trusted_fingerprints)
        seal, problems = ("intact", []) if result.ok else ("not intact", [str(p) for p in result.problems])
        signer = _signer_text(result)
    else:
        seal, problems = "unsealed", []
    records, unreadable = scan_records(run_dir)
    verdicts: dict[str, int] = {}
    values: dict[str, tuple[Any, str, str, str]] = {}
    for _, record in records:
        verdict, _ = checked_verdict(record)
        verdicts[str(verdict)] = verdicts.get(str(verdict), 0) + 1
        label = str(record.get("drill")) + (f"[{record['case']}]" if record.get("case") else "")
        for x in record.get("expectations") or []:
            if isinstance(x, dict):
                values[f"{label}.{x.get('name')}"] = (x.get("measured"), str(x.get("verdict")), str(x.get("unit") or ""),
                                                      str(x.get("bound_text") or ""))
    if unreadable:
        verdicts["error"] = verdicts.get("error", 0) + len(unreadable)
    planned = meta.get("planned") if isinstance(meta.get("planned"), list) else []
    started = _number(meta.get("started_at"))
    platform = {k: (v if v is None or isinstance(v, list) else str(v)[:80])
                for k, v in platform_of(meta, (r for _, r in records)).items()}
    return RunSummary(run_id=run_dir.name, started_at=started,
                      verdicts=verdicts, planned=len(planned), seal=seal, seal_problems=problems,
                      platform=platform, git_commit=_text(meta.get("git_commit")),
                      ticket=_text(meta.get("ticket")), values=values, signer=signer)


def _signer_text(result) -> str:
    """Who signed a verified run, in a few words: its key's fingerprint (16 hex), who held it, and
    whether it is a trusted one when a key was pinned."""
    if result.signer is None:
        return "no usable signer"
    held = "external signer" if result.custody == EXTERNAL_SIGNER else NOT_FOR_AUDIT
    trusted = ("" if not result.pinned else
               ", NOT a trusted key" if "untrusted-key" in result.kinds else ", a trusted key")
    return f"sha256:{result.signer.fingerprint[:16]}… {held}{trusted}"


def _text(value: Any) -> str | None:
    return None if value is None else str(value)[:200]


def _utc(epoch: float | None) -> str:
    try:
        return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, OverflowError, OSError):
        return "—"


def format_runs(runs: list[RunSummary]) -> str:
    """One line per run, oldest first (text from the runs with control characters escaped)."""
    lines = [f"{'run':26} {'started':24} {'seal':11} {'verdicts':26} {'platform':40} signer"]
    for r in runs:
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(r.verdicts.items())) or "no records"
        platform = f"{r.platform.get('provider')} {r.platform.get('kubernetes_version')} kdrill {r.platform.get('kdrill_version')}"
        # Each field escaped and cut on its own: the signer, last, must not be cut off by the others.
        lines.append(f"{printable(r.run_id):26} {_utc(r.started_at):24} {r.seal:11} {printable(verdicts):26} "
                     f"{printable(platform):40} {r.signer or '—'}")
    return "\n".join(lines)


@dataclass
class Trend:
    """One expectation across runs: points (x, y) in the chart's pixels, with what they show."""

    key: str
    unit: str
    bound: str
    points: list[dict[str, Any]]
    width: int = 360
    height: int = 90


def trends(runs: list[RunSummary], width: int = 360, height: int = 90) -> list[Trend]:
    """A trend per expectation with a number in at least one intact run, over the intact runs."""
    intact = [r for r in runs if r.seal == "intact"]
    keys = sorted({k for r in intact for k, v in r.values.items() if _number(v[0]) is not None})
    out = []
    for key in keys:
        series = [(i, r, r.values[key]) for i, r in enumerate(intact) if key in r.values]
        numbers = [_number(v[0]) for _, _, v in series if _number(v[0]) is not None]
        low, high = min(numbers), max(numbers)
        span = (high - low) or (abs(high) or 1.0)
        n = max(len(intact) - 1, 1)
        points = []
        for i, run, (measured, verdict, unit, bound) in series:
            y = _number(measured)
            if y is None:
                continue
            points.append({"x": round(10 + (width - 20) * i / n, 1),
                           "y": round(height - 12 - (height - 24) * (y - low) / span, 1),
                           "value": y, "verdict": verdict, "run_id": run.run_id})
        unit, bound = series[-1][2][2], series[-1][2][3]
        out.append(Trend(key, unit, bound, points, width, height))
    return out


def _number(value: Any) -> float | None:
    """A finite number small enough to draw (|x| < 1e15), else None."""
    return finite_number(value, limit=1e15)


def chain_status(reports: Path, trusted_fingerprints: Sequence[str] = ()) -> tuple[bool, str]:
    """Whether the chain of runs verifies (harness/evidence/chain.py verify_history; every run
    signed by one of ``trusted_fingerprints`` when given), and one line saying so: each run's
    seal says nothing of a run deleted or replaced before it."""
    try:
        history = verify_history(Path(reports), trusted_fingerprints=trusted_fingerprints)
    except (ManifestError, OSError) as exc:
        return False, f"chain not checked: {exc}"
    keys = (f"the trusted key{'s' if len(trusted_fingerprints) > 1 else ''}: "
            f"{', '.join('sha256:' + t[:16] + '…' for t in trusted_fingerprints)}"
            if trusted_fingerprints else "no key pinned, so a seal shows only that some key signed")
    if history.ok:
        return True, f"chain of {len(history.runs)} sealed runs intact (kdrill verify --history), {keys}"
    return False, (f"chain NOT INTACT: {len(history.problems)} problem(s), e.g. {history.problems[0]} "
                   f"(kdrill verify --history lists them); {keys}")


def render_index(reports: Path, chain: str | None = None, trusted_fingerprints: Sequence[str] = ()) -> str:
    """The index page (self-contained HTML, autoescaped); ``chain`` is :func:`chain_status`'s line
    when the caller has it already; a run not signed by one of ``trusted_fingerprints`` (when
    given) is shown "not intact"."""
    runs = list_runs(reports, trusted_fingerprints)
    env = Environment(loader=PackageLoader("harness", "templates"), autoescape=select_autoescape(["html", "j2"]))
    return env.get_template("index.html.j2").render(
        runs=list(reversed(runs)), trends=trends(runs), utc=_utc, reports=Path(reports).name,
        chain=chain if chain is not None else chain_status(reports, trusted_fingerprints)[1],
        generated=_utc(datetime.now(timezone.utc).timestamp()))


def write_index(reports: Path, chain: str | None = None, trusted_fingerprints: Sequence[str] = ()) -> Path:
    """Write ``<reports>/index.html`` (:func:`render_index`); returns its path. Raises OSError."""
    path = Path(reports) / INDEX_NAME
    write_text_atomic(path, render_index(reports, chain, trusted_fingerprints))
    return path
