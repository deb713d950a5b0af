"""Long work's steps and the time they are expected to take, told to a `ProgressFn`.

`StepTimer` knows a piece of work's steps and a guess of each one's seconds (a documented
constant at its call site). It reports a `Step` each time the work begins one, and expects in all:
the steps done as they took, the one under way as its guess or as long as it has taken already,
and the steps ahead as guessed, each guess scaled by how the steps done so far compared with
theirs. A machine twice as slow as the guesses' shows twice their time from its first step on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from cockpit.contract.progress import ProgressFn, Step


class StepTimer:
    """The steps of one piece of work, `task`: `steps` are (what, guessed seconds) in order;
    `report` (None: nobody listens) is told at each `begin`; `clock` is monotonic seconds."""

    def __init__(
        self,
        task: str,
        steps: Sequence[tuple[str, float]],
        report: ProgressFn | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.task = task
        self.steps = list(steps)
        self.report = report
        self.clock = clock
        self.began = clock()
        self.starts: list[float] = []  # when each step began, in order: the last one is under way

    def begin(self, index: int, what: str | None = None) -> None:
        """Step `index` (0-based) begins now, doing `what` (default: its name in `steps`); steps
        skipped over count as taking no time. Reports it, when anyone listens."""
        now = self.clock()
        while len(self.starts) <= index:
            self.starts.append(now)
        if self.report is not None:
            name = what if what is not None else self.steps[index][0]
            self.report(Step(self.task, name, index + 1, len(self.steps), now - self.began, self.expected(now)))

    def finish(self) -> None:
        """The work is over: reports it done (the last step's name, its time spent in all)."""
        if self.report is not None and self.starts:
            spent = self.clock() - self.began
            what, index = self.steps[len(self.starts) - 1][0], len(self.starts)
            self.report(Step(self.task, what, index, len(self.steps), spent, spent, done=True))

    def expected(self, now: float) -> float:
        """Seconds the whole work is expected to take, as of `now` (module docstring); never under
        the time spent."""
        if not self.starts:
            return max(now - self.began, sum(guess for _, guess in self.steps))
        current = len(self.starts) - 1
        took = sum(later - earlier for earlier, later in zip(self.starts, self.starts[1:], strict=False))
        guessed = sum(guess for _, guess in self.steps[:current])
        scale = took / guessed if current and guessed > 0 and took > 0 else 1.0
        under_way = max(now - self.starts[current], self.steps[current][1] * scale)
        ahead = sum(guess for _, guess in self.steps[current + 1 :]) * scale
        return max(now - self.began, self.starts[0] - self.began + took + under_way + ahead)
