"""Progress lines for the person watching a run: which drill of how many, and the time left.

A drill's expected duration is the one ``kdrill run --plan`` gives (harness/cli/plan.py): its record's
duration in the newest intact run under the reports directory, or for a data-only scenario its
windows alone. A drill with neither counts as the mean of the drills this run has finished (none
finished yet: the time left is not given). Under pytest-xdist the controller says when each drill
ends, on which worker (workers' own lines are not shown by xdist).
"""

from __future__ import annotations

import time
from typing import Callable


def minutes(seconds: float) -> str:
    """``about 40 s`` under 90 s, else ``about 12 min``."""
    return f"about {seconds:.0f} s" if seconds < 90 else f"about {seconds / 60:.0f} min"


class RunProgress:
    """``planned``: the drills (``name`` or ``name[case]``) in the order they run; ``expected``:
    label -> seconds, for those with a figure (harness/cli/plan.py :func:`expected_seconds`)."""

    def __init__(self, planned: list[str], expected: dict[str, float],
                 clock: Callable[[], float] = time.time) -> None:
        self.planned, self.expected, self.clock = list(planned), dict(expected), clock
        self.finished: dict[str, float] = {}  # label -> measured seconds
        self.done: set[str] = set()  # finished, or dropped without running (skipped)
        self.current: tuple[str, float] | None = None  # label, started at (epoch seconds)

    def _place(self, label: str) -> str:
        if label in self.planned:
            return f"drill {self.planned.index(label) + 1} of {len(self.planned)}"
        return f"a drill not among the {len(self.planned)} planned"

    def _guess(self, label: str) -> float | None:
        if label in self.expected:
            return self.expected[label]
        if self.finished:
            return sum(self.finished.values()) / len(self.finished)
        return None

    def seconds_left(self) -> float | None:
        """Seconds until the last planned drill ends: the current drill's expected remainder (at
        least 0) plus every drill not yet started. None when a drill's figure cannot be guessed."""
        left = 0.0
        for label in self.planned:
            if label in self.done:
                continue
            guess = self._guess(label)
            if guess is None:
                return None
            if self.current is not None and label == self.current[0]:
                guess = max(0.0, guess - (self.clock() - self.current[1]))
            left += guess
        return left

    def _left_text(self) -> str:
        left = self.seconds_left()
        return "time left unknown" if left is None else f"run: {minutes(left)} left"

    def started(self, label: str) -> str:
        """The line said when ``label`` starts."""
        self.current = (label, self.clock())
        guess = self.expected.get(label)
        return (f"{self._place(label)}: {label}"
                f" ({minutes(guess) + ' expected' if guess is not None else 'no expected duration'}); "
                f"{self._left_text()}")

    def ended(self, label: str, verdict: str, seconds: float) -> str:
        """The line said when ``label`` ends with ``verdict`` after ``seconds``."""
        self.finished[label] = seconds
        self.dropped(label)
        done = sum(1 for p in self.planned if p in self.done)
        return (f"{self._place(label)}: {label} {verdict} in {seconds:.0f} s; "
                f"{len(self.planned) - done} to go, {self._left_text()}")

    def dropped(self, label: str) -> None:
        """``label`` will not run (or has ended): no longer counted in the time left."""
        self.done.add(label)
        if self.current is not None and self.current[0] == label:
            self.current = None
