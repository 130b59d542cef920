"""Verifying a reports directory: every run (harness/evidence/verification.py verify_run), the
chain that links them, and that chain against the head kept elsewhere (harness/evidence/heads.py).

Each sealed run names the run sealed before it in the same reports directory (its run id and its
manifest's SHA-256). What the chain shows: an earlier run deleted, renamed or replaced
(``broken-link``); a run signed by another key than the run before it (``signer-changed``, when
no key is pinned); a second run naming no previous one (``chain-start``: sealed in another reports
directory and copied in). What it cannot show alone: its latest runs deleted, or a whole other
chain offered in its place; the head kept outside the reports directory shows those (``head``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from harness.evidence.heads import Head
from harness.evidence.layout import MANIFEST_NAME, is_run_id
from harness.evidence.manifest_format import ChainLink, ManifestError
from harness.evidence.signing_keys import normalise_fingerprint
from harness.evidence.verification import Problem, VerifyResult, verify_run


@dataclass(frozen=True)
class HistoryResult:
    """What :func:`verify_history` found in a reports directory.

    ``runs``: one VerifyResult per run directory, oldest seal first (unsealed ones last);
    ``problems``: every run's problems (``run`` set), every broken link, every second chain start
    and every disagreement with the heads kept elsewhere; ``notes``: facts that are not problems
    (forks from concurrent runs, skipped directories); ``head``: the most recently sealed run,
    the link a later run would name; ``heads_checked``: how many heads kept elsewhere were
    compared (0: none was given, and deleting the latest runs would not show).
    """

    root: Path
    runs: list[VerifyResult]
    problems: list[Problem]
    notes: list[str]
    head: ChainLink | None
    heads_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems



def verify_history(reports_root: Path, *, trusted_fingerprints: Iterable[str] = (),
                   heads: Sequence[Head] = ()) -> HistoryResult:
    """Verifies every run under ``reports_root`` and the chain that links them.

    Each run directory is checked with :func:`verify_run` (an unsealed one is a ``not-sealed``
    problem). Each sealed run's ``previous`` link must name a run that is still there with a
    manifest whose SHA-256 is the recorded one: otherwise a ``broken-link`` problem names the
    deleted, renamed or replaced run. With no trusted fingerprint given, a sealed run signed by
    another key than its previous run is a ``signer-changed`` problem (with them given, every
    signer must be one of them instead). A sealed run naming no previous run while an earlier
    one is sealed here is a ``chain-start`` problem. A deleted latest run breaks no link:
    ``heads`` (harness/evidence/heads.py read_heads, oldest first) are the heads kept elsewhere,
    and each must be here with its manifest unchanged, the newest run must descend from the last
    one, and every sealed run must be on the chain through them (``head`` problems).

    Raises ManifestError when ``reports_root`` is not a directory, ValueError for a malformed
    trusted fingerprint.
    """
    root = Path(reports_root)
    if not root.is_dir():
        raise ManifestError(f"{root} is not a directory")
    trusted = [normalise_fingerprint(f) for f in trusted_fingerprints]
    results, notes = _verify_runs(root, trusted)
    problems = [Problem(p.kind, p.subject, p.detail, run=r.run_dir.name) for r in results for p in r.problems]
    link_problems, link_notes = _chain_links(root, results, pinned=bool(trusted))
    problems += link_problems
    if not trusted:
        problems += _signers_unlike_the_oldest(results, {p.run for p in problems if p.kind == "signer-changed"})
    notes += link_notes
    sealed = [r for r in results if r.sealed_at is not None and r.manifest_sha256 is not None]
    problems += _head_problems(sealed, list(heads))
    head = ChainLink(sealed[-1].run_dir.name, sealed[-1].manifest_sha256) if sealed else None
    return HistoryResult(root=root, runs=results, problems=problems, notes=notes, head=head,
                         heads_checked=len(heads))


def _verify_runs(root: Path, trusted: list[str]) -> tuple[list[VerifyResult], list[str]]:
    """:func:`verify_run` of each run directory in ``root``, oldest seal first (unsealed last), and
    a note for each directory skipped (a symbolic link, or not named by a run id)."""
    results: list[VerifyResult] = []
    notes: list[str] = []
    for child in sorted(root.iterdir()):
        if not child.is_dir():
            continue
        if child.is_symlink() or not is_run_id(child.name):
            notes.append(f"skipped {child.name}: {'a symbolic link' if child.is_symlink() else 'not a run id'}")
            continue
        results.append(verify_run(child, trusted_fingerprints=trusted))
    results.sort(key=lambda r: (r.sealed_at is None, r.sealed_at or "", r.run_dir.name))
    return results, notes


def _chain_links(root: Path, results: list[VerifyResult], pinned: bool) -> tuple[list[Problem], list[str]]:
    """The problems of each sealed run's link to its previous run and of every chain start after
    the first, and notes on forks (runs that follow one run)."""
    by_name = {r.run_dir.name: r for r in results}
    problems: list[Problem] = []
    followers: dict[str, list[str]] = {}
    starts: list[str] = []
    for r in results:
        if r.sealed_at is None or r.manifest_sha256 is None:
            continue  # not a readable seal: already a problem of its own
        name = r.run_dir.name
        if r.previous is None:
            starts.append(name)
            continue
        if not is_run_id(r.previous.run_id):
            problems.append(Problem("manifest", MANIFEST_NAME,
                                    f"names an invalid previous run id {r.previous.run_id!r}", run=name))
            continue
        followers.setdefault(r.previous.run_id, []).append(name)
        problem = _link_problem(root, r, by_name.get(r.previous.run_id), pinned)
        if problem is not None:
            problems.append(problem)
    notes = [f"runs {', '.join(names)} all follow {prev} (sealed concurrently?)"
             for prev, names in sorted(followers.items()) if len(names) > 1]
    # A run sealed here names the run sealed before it: one naming none after the first was
    # sealed where no run of this directory was (another reports directory), and copied in.
    problems += [Problem("chain-start", name, f"names no previous run, though {starts[0]} was sealed here before "
                         "it: sealed in another reports directory and copied in (or sealed into an empty "
                         "directory at the same time as it)", run=name) for name in starts[1:]]
    return problems, notes


def _link_problem(root: Path, r: VerifyResult, target: VerifyResult | None, pinned: bool) -> Problem | None:
    """Why the run ``r``'s link to its previous run ``target`` (None: not a run here) does not hold,
    or None when it holds."""
    name, prev = r.run_dir.name, r.previous
    named = f"named by {name} as its previous run with manifest sha256 {prev.manifest_sha256}"
    if target is None:
        why = "missing: deleted or renamed" if not (root / prev.run_id).exists() else "no longer a run directory"
        return Problem("broken-link", prev.run_id, f"{named}; it is {why}", run=name)
    if target.manifest_sha256 is None:
        return Problem("broken-link", prev.run_id, f"{named}; its manifest is gone", run=name)
    if target.manifest_sha256 != prev.manifest_sha256:
        return Problem("broken-link", prev.run_id, f"{named}; its manifest now has sha256 "
                       f"{target.manifest_sha256}: replaced or re-sealed", run=name)
    if not pinned and r.signer and target.signer and r.signer.fingerprint != target.signer.fingerprint:
        # Unpinned, each run's signature proves only that *some* key sealed it: a run re-sealed
        # by another key keeps its link intact. Pinning every key (a rotation) accepts this.
        return Problem("signer-changed", name, f"signed by sha256:{r.signer.fingerprint}, its previous "
                       f"run {prev.run_id} by sha256:{target.signer.fingerprint}: a run re-sealed with "
                       "another key looks like this; pin both keys (--fingerprint) to accept a key "
                       "rotation", run=name)
    return None


def _signers_unlike_the_oldest(results: list[VerifyResult], flagged: set[str | None]) -> list[Problem]:
    """A ``signer-changed`` problem for each sealed run (not in ``flagged`` already) signed by
    another key than the oldest sealed run here."""
    # Unpinned, each signature proves only that *some* key sealed the run: a run sealed
    # elsewhere with another key and dropped in here names no previous run, so no link
    # catches it. Every run here is expected to be signed by the key of the oldest.
    signed = [r for r in results if r.sealed_at is not None and r.signer is not None]
    first = signed[0] if signed else None
    return [Problem("signer-changed", r.run_dir.name,
                    f"signed by sha256:{r.signer.fingerprint}, the oldest run here ({first.run_dir.name}) by "
                    f"sha256:{first.signer.fingerprint}: a run sealed with another key looks like this; pin "
                    "every key (--fingerprint) to accept a key rotation", run=r.run_dir.name)
            for r in signed[1:]
            if r.signer.fingerprint != first.signer.fingerprint and r.run_dir.name not in flagged]


def _ancestry(name: str, by_name: dict[str, VerifyResult]) -> list[str]:
    """``name`` and every run it descends from through links that hold, newest first."""
    chain = [name]
    while True:
        previous = by_name[chain[-1]].previous
        target = by_name.get(previous.run_id) if previous else None
        if target is None or target.manifest_sha256 != previous.manifest_sha256 or previous.run_id in chain:
            return chain
        chain.append(previous.run_id)


def _head_problems(sealed: list[VerifyResult], heads: list[Head]) -> list[Problem]:
    """Where the sealed runs (oldest first) disagree with the heads kept elsewhere (oldest first):
    a head run missing or with another manifest, named twice with two manifests, the newest run
    not descending from the last head, a run on no chain through the heads."""
    if not heads:
        return []
    by_name = {r.run_dir.name: r for r in sealed}
    problems: list[Problem] = []
    first: dict[str, Head] = {}
    for head in heads:
        earlier = first.setdefault(head.run_id, head)
        if earlier.manifest_sha256 != head.manifest_sha256:
            problems.append(Problem("head", head.run_id, f"the heads kept elsewhere name it twice, with manifest "
                                    f"sha256 {earlier.manifest_sha256} ({earlier.where}) and {head.manifest_sha256} "
                                    f"({head.where}): sealed again after its head was exported"))
        run = by_name.get(head.run_id)
        if run is None:
            problems.append(Problem("head", head.run_id, f"kept elsewhere ({head.where}) with manifest sha256 "
                                    f"{head.manifest_sha256}, but not a sealed run here: deleted, or another chain "
                                    "was offered"))
        elif run.manifest_sha256 != head.manifest_sha256:
            problems.append(Problem("head", head.run_id, f"kept elsewhere ({head.where}) with manifest sha256 "
                                    f"{head.manifest_sha256}; here it has {run.manifest_sha256}: replaced or "
                                    "re-sealed"))
    # Only a head that is here unchanged anchors the chain: a run after an impostor is on none.
    held = [h for h in heads if h.run_id in by_name and by_name[h.run_id].manifest_sha256 == h.manifest_sha256]
    through = {name for h in held for name in _ancestry(h.run_id, by_name)}
    last = heads[-1]
    for run in sealed:
        name = run.run_dir.name
        if name not in through and not (last in held and last.run_id in _ancestry(name, by_name)):
            problems.append(Problem("head", name, f"is on no chain through the heads kept elsewhere (the last: "
                                    f"{last.run_id}, {last.where}): sealed in another reports directory, or "
                                    "its head was never exported", run=name))
    return problems
