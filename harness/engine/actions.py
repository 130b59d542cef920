"""A data-only scenario's actions (``runner.actions``): each run once, at its time from its window's
start, in a timer thread, on a declared object only while it is the drill's.
"""

from __future__ import annotations

import threading
import time

from harness.engine.workload import object_ref
from harness.faults import FaultError
from harness.kube import objects as kube_objects
from harness.scaffolding.drill_objects import OWNER_LABEL, DrillObjects
from harness.spec.scenario import ACTION_VERBS

# How long an action's timer may still be running its API call when its window ends.
REQUEST_JOIN_SECONDS = kube_objects.REQUEST_TIMEOUT_SECONDS + 5


class Actions:
    """The scenario's actions for one window, each run once at ``after_seconds`` from the
    window's start in a timer thread; :meth:`finish` cancels those that did not run (the window
    ended early, e.g. on an abort) and returns what happened to each, for the evidence."""

    def __init__(self, drill, specs: list[dict], window: str) -> None:
        self.drill, self.results = drill, []
        self.specs = [a for a in specs if a["window"] == window]
        self.objects: DrillObjects | None = None
        self._timers: list[threading.Timer] = []
        self._lock = threading.Lock()

    def start(self, window_started_at: float, objects: DrillObjects | None) -> "Actions":
        """Start the timers; ``objects`` are the declared objects, the only ones an action deletes
        (and only while they carry their label: validation admits only declared objects, and this
        holds at run time too)."""
        self.objects = objects
        for spec in self.specs:
            delay = max(0.0, window_started_at + float(spec["after_seconds"]) - time.time())
            timer = threading.Timer(delay, self._run, args=(spec, window_started_at))
            timer.daemon = True
            self._timers.append(timer)
            timer.start()
        return self

    def _run(self, spec: dict, window_started_at: float) -> None:
        at = time.time()
        verb = next(v for v in ACTION_VERBS if v in spec)
        ref = spec[verb]
        try:
            if self.objects is None:
                raise FaultError(f"the scenario declares no objects (workload.manifests) for an action to {verb}")
            ref = object_ref({k: v for k, v in spec[verb].items() if k in ("kind", "name", "namespace")},
                             self.drill.namespace, self.objects.kinds)
            if verb == "scale":
                outcome = self.objects.scale_if_ours(ref, int(spec[verb]["replicas"]))
            elif verb == "kill_container":
                outcome = self.objects.kill_container_if_ours(ref, spec[verb]["container"])
            else:
                outcome = (self.objects.evict_if_ours if verb == "evict" else self.objects.delete_if_ours)(ref)
            what = {"scale": f"scale {ref} to {spec[verb].get('replicas')}",
                    "kill_container": f"kill container {spec[verb].get('container')} of {ref}"}.get(
                verb, f"{verb} {ref}")
            done = outcome != "not ours" and not (outcome == "gone" and verb in ("scale", "kill_container"))
            result = {"ok": done, "detail": {
                "deleted": f"{what}: accepted", "evicted": f"{what}: accepted", "scaled": f"{what}: accepted",
                "gone": f"{what}: not done, it does not exist" if verb in ("scale", "kill_container")
                else f"{what}: already gone",
                "not ours": f"{what}: not done, it is not this drill's (label {OWNER_LABEL})"}.get(
                    outcome, f"{what}: {outcome}")}
        except Exception as exc:  # recorded; the drill errors after its measures (see run)
            result = {"ok": False, "detail": f"{verb} {ref}: {type(exc).__name__}: {exc}"[:300]}
        self.drill.say(f"action {spec['name']}: {result['detail']}")
        with self._lock:
            self.results.append({"name": spec["name"], "window": spec["window"], "at": at,
                                 "seconds_into_window": round(at - window_started_at, 2), **result})

    def finish(self) -> list[dict]:
        for timer, spec in zip(self._timers, self.specs):
            timer.cancel()
            timer.join(timeout=REQUEST_JOIN_SECONDS)
            with self._lock:
                if not any(r["name"] == spec["name"] for r in self.results):
                    self.results.append({"name": spec["name"], "window": spec["window"], "at": None, "ok": False,
                                         "detail": "not run: the window ended before its time"})
        return list(self.results)
