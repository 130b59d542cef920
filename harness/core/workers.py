"""More than one cluster at once: pytest-xdist workers, one cluster each.

``python3 -m pytest -n 2 drills`` (or ``kdrill run --clusters 2``) starts two pytest-xdist workers;
each drives a cluster of its own and xdist hands each worker whole drill cases. Kubernetes does
the work in parallel; kdrill only keeps the clusters apart and merges the evidence:

- kind: worker ``gwN`` makes (or reuses) cluster ``<name>-gwN`` from the same config, with every
  ``127.0.0.1`` host port moved by ``100 * (N + 1)`` (``30080`` becomes ``30180`` on gw0,
  ``30280`` on gw1); the NodePorts inside the clusters stay as the scenarios say.
- existing clusters: ``--kdrill-context`` given once per worker; worker ``gwN`` takes the N-th.
- evidence: the controller (the pytest process that starts the workers) makes the run's directory
  before they start; each worker writes the records of the cases it ran into it, and hands its
  cluster's identity and the cases it planned back at its end (xdist's ``workeroutput``). The
  controller writes ``run.json`` with one entry per worker, a record for every planned case that
  left none, the report, and the one seal.
"""

from __future__ import annotations

import re
from typing import Any

HOST_PORT_STEP = 100  # host ports of worker N move by HOST_PORT_STEP * (N + 1)
MAX_WORKERS = 8  # 30081 + 800 stays clear of 30080's next step and of the port range's end

WORKER_ID = re.compile(r"gw(\d+)")


class WorkerError(ValueError):
    """The workers asked for cannot be given their own clusters; the message says why."""


def worker_id(config: Any) -> str | None:
    """``"gw0"``, ``"gw1"``, ... in a pytest-xdist worker; None in any other pytest process."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput.get("workerid") if isinstance(workerinput, dict) else None


def worker_index(worker: str) -> int:
    """``"gw3"`` -> 3. Raises WorkerError for anything else, or an index of MAX_WORKERS or more."""
    match = WORKER_ID.fullmatch(worker or "")
    if not match:
        raise WorkerError(f"expected a pytest-xdist worker id gw0, gw1, ...; got {worker!r}")
    index = int(match.group(1))
    if index >= MAX_WORKERS:
        raise WorkerError(f"at most {MAX_WORKERS} workers, one kind cluster each (this machine's Docker engine runs "
                          f"them all); worker {worker} is one too many")
    return index


def cluster_name(base: str, worker: str) -> str:
    """The kind cluster of ``worker``: ``<base>-<worker>`` (``kdrill-ha-gw0``)."""
    worker_index(worker)
    return f"{base}-{worker}"


def host_port_offset(worker: str) -> int:
    """How far ``worker``'s kind cluster moves its host ports: ``HOST_PORT_STEP * (N + 1)``."""
    return HOST_PORT_STEP * (worker_index(worker) + 1)


def worker_context(contexts: list[str], worker: str) -> str:
    """The kubeconfig context of ``worker``: the N-th of ``contexts``. Raises WorkerError when
    there are fewer contexts than workers, or the same context twice (two workers would drill one
    cluster at once and break each other's drills)."""
    index = worker_index(worker)
    twice = sorted({c for c in contexts if contexts.count(c) > 1})
    if twice:
        raise WorkerError(f"--kdrill-context {twice[0]} is given twice: each worker drills a cluster of its own")
    if index >= len(contexts):
        raise WorkerError(f"worker {worker} has no cluster: {len(contexts)} --kdrill-context given for more workers; "
                          f"give one per worker (-n {len(contexts)})")
    return contexts[index]


def merge_worker_outputs(outputs: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    """What the workers handed back (worker id -> its ``workeroutput["kdrill"]``, None for a
    worker that ended without one, e.g. it crashed), as run.json's ``workers``, ``planned`` and
    ``platform``:

    - ``workers``: worker id -> {"cluster", "platform", "image_sources", "cluster_create_seconds",
      "ran"} as that worker saw them, or {"note"} saying it handed nothing back;
    - ``planned``: every case any worker planned (each plans the whole collection), in order;
    - ``platform``: the platform profile record when every worker that handed one back names the
      same hash; otherwise {"hash": None, "note"} saying they differ.
    """
    workers: dict[str, Any] = {}
    planned: list[str] = []
    hashes: dict[str, Any] = {}
    for worker in sorted(outputs, key=lambda w: (len(w), w)):
        out = outputs[worker]
        if not isinstance(out, dict):
            workers[worker] = {"note": "the worker ended without handing back its cluster's identity (it crashed or "
                                       "was stopped); its cases' records say what they saw"}
            continue
        meta = out.get("meta") if isinstance(out.get("meta"), dict) else {}
        workers[worker] = {key: meta.get(key) for key in ("cluster", "platform", "platform_checked_against",
                                                          "image_sources", "cluster_create_seconds")
                           if key in meta}
        workers[worker]["ran"] = list(out.get("ran") or [])
        for name in out.get("planned") or []:
            if name not in planned:
                planned.append(name)
        if isinstance(meta.get("platform"), dict):
            hashes[worker] = meta["platform"]
    distinct = {p.get("hash") for p in hashes.values()}
    if len(distinct) == 1:
        platform = next(iter(hashes.values()))
    elif not hashes:
        platform = {"hash": None, "note": "no worker read its cluster's platform profile"}
    else:
        platform = {"hash": None, "note": "the workers' clusters record different platform profiles: "
                    + ", ".join(f"{w} {p.get('hash')}" for w, p in sorted(hashes.items()))}
    return {"workers": workers, "planned": planned, "platform": platform}
