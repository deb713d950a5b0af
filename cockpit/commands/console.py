"""The rich Console the command line prints with, whether a terminal is there to take over, and how
long work's steps show on it (`step_display`)."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from cockpit.contract.progress import ProgressFn, Step

PIPE_WIDTH = 160


def output_console() -> Console:
    """A console for stdout; piped output gets a wide fixed width instead of rich's 80 columns,
    so tables are not truncated in logs and files."""
    console = Console()
    return console if console.is_terminal else Console(width=PIPE_WIDTH)


def interactive() -> bool:
    """True when stdin and stdout are a terminal the TUI can take over."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def say(console: Console) -> Callable[[str], None]:
    """A line printer on `console` that prints text as it is (no markup, no highlighting)."""
    return lambda text: console.print(text, highlight=False, markup=False)


PLAIN_INTERVAL_S = 5.0  # off a terminal: a line at most this far apart while a step lasts
TICK_S = 0.5  # how often the display looks at the clock between steps


def _times(elapsed_s: float, expected_s: float) -> str:
    return f"{elapsed_s:.0f} s of about {max(expected_s, elapsed_s):.0f} s"


class _Shown:
    """The last `Step` told and when (on `clock`), so the time spent goes on between steps."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.lock = threading.Lock()  # told from the work's thread, ticked from the display's
        self.step: Step | None = None
        self.told_at = 0.0

    def elapsed(self, now: float) -> float:
        """The time the current step's work has spent by `now`."""
        assert self.step is not None
        return self.step.elapsed_s + now - self.told_at


class PlainSteps(_Shown):
    """Steps as plain lines through `say` (a log, a pipe): one as each step begins, then one every
    `interval_s` while it lasts (`tick`), each with the step, the time spent and the time expected."""

    def __init__(
        self,
        say: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        interval_s: float = PLAIN_INTERVAL_S,
    ) -> None:
        super().__init__(clock)
        self.say = say
        self.interval_s = interval_s
        self.said_at = 0.0

    def __call__(self, step: Step) -> None:
        """A step begins, or the work is done: say so now (once done, no more lines)."""
        with self.lock:
            if step.done:
                self.step = None
                self.say(f"{step.task}: done in {step.elapsed_s:.0f} s")
                return
            self.step, self.told_at = step, self.clock()
            self._say(self.told_at)

    def tick(self) -> None:
        """Say where the current step stands, if `interval_s` has passed since the last line."""
        with self.lock:
            now = self.clock()
            if self.step is not None and now - self.said_at >= self.interval_s:
                self._say(now)

    def close(self) -> None:
        """Nothing to end: every line is out."""

    def _say(self, now: float) -> None:
        assert self.step is not None
        step, self.said_at = self.step, now
        self.say(
            f"{step.task}: step {step.index}/{step.count} {step.what}, {_times(self.elapsed(now), step.expected_s)}"
        )


class RichSteps(_Shown):
    """Steps as rich progress bars on a terminal `console`, one per task (the time spent against
    the time expected), started at the first step told; `tick` moves the time on between steps."""

    def __init__(self, console: Console, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock)
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[times]}"), console=console
        )
        self.tasks: dict[str, TaskID] = {}

    def __call__(self, step: Step) -> None:
        """A step begins, or the work is done: show it."""
        with self.lock:
            if not self.tasks:
                self.progress.start()
            if step.task not in self.tasks:
                self._finish()
                self.tasks[step.task] = self.progress.add_task(step.task, total=None, times="")
            self.step, self.told_at = step, self.clock()
            if step.done:
                self._finish()
            else:
                self._show(self.told_at)

    def tick(self) -> None:
        """Move the current step's time on."""
        with self.lock:
            if self.step is not None:
                self._show(self.clock())

    def close(self) -> None:
        """Fill the last bar (its work is over) and leave the bars on the terminal."""
        with self.lock:
            if self.tasks:
                self._finish()
                self.progress.stop()

    def _show(self, now: float) -> None:
        assert self.step is not None
        step, elapsed = self.step, self.elapsed(now)
        self.progress.update(
            self.tasks[step.task],
            description=f"{step.task}: step {step.index}/{step.count} {step.what}",
            completed=elapsed,
            total=max(step.expected_s, elapsed),
            times=_times(elapsed, step.expected_s),
        )

    def _finish(self) -> None:
        """The current task's work is over: its bar full at the time it took."""
        if self.step is not None and self.step.task in self.tasks:
            elapsed = self.step.elapsed_s if self.step.done else self.elapsed(self.clock())
            self.progress.update(
                self.tasks[self.step.task],
                description=f"{self.step.task}: done",
                completed=elapsed,
                total=elapsed,
                times=f"{elapsed:.0f} s",
            )
            self.step = None


@contextlib.contextmanager
def step_display(console: Console) -> Iterator[ProgressFn]:
    """A `ProgressFn` that shows long work's steps on `console` while the block runs: rich's
    progress bars on a terminal, else a plain line per step and every `PLAIN_INTERVAL_S` within
    one (`PlainSteps`). Nothing shows until a step is told, so wrapping work that turns out quick
    (costs read from the cache) prints nothing."""
    shown: PlainSteps | RichSteps = RichSteps(console) if console.is_terminal else PlainSteps(say(console))
    stop = threading.Event()

    def ticking() -> None:
        while not stop.wait(TICK_S):
            shown.tick()

    ticker = threading.Thread(target=ticking, daemon=True, name="step-display")
    ticker.start()
    try:
        yield shown
    finally:
        stop.set()
        ticker.join()
        shown.close()
