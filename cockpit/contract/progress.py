"""How long work reports where it is: a `Step` to a `ProgressFn`, and the probe's progress lines.

Work that takes more than a few seconds (the cost probe, `cockpit tune`'s trials) tells a
`ProgressFn` each time it reaches a step: what it is doing, which step of how many, the time spent
and the time it expects in all. The commands render it (`cockpit.commands.console.step_display`);
core and the worker process never import rich.

The probe runs in a child process (`python -m cockpit_training.probe`), so it reports each step as
one line on stderr, `PREFIX` then the step's index into `PROBE_STEPS` (`probe_line`), which the
parent reads while the probe runs (`parse_probe_line`); every other stderr line stays what it was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

PREFIX = "cockpit-progress: "

# The probe's own steps, in order (`cockpit_training.probe.probe`): what each one times.
PROBE_STEPS = (
    "timing 2 and 16 envs",
    "timing the preset's own shape",
    "timing env steps without the policy",
    "timing training on every core",
)


@dataclass(frozen=True)
class Step:
    """Where long work stands: `task` (what all of it is for), now at step `index` (1-based) of
    `count`, `what` that step does; `elapsed_s` since the work began, `expected_s` in all (an
    estimate, never under `elapsed_s`). With `done`, the work is over, in `elapsed_s`."""

    task: str
    what: str
    index: int
    count: int
    elapsed_s: float
    expected_s: float
    done: bool = False


ProgressFn = Callable[[Step], None]


def probe_line(index: int) -> str:
    """The stderr line that says the probe begins `PROBE_STEPS[index]`."""
    return f"{PREFIX}{index}"


def parse_probe_line(line: str) -> int | None:
    """The index into `PROBE_STEPS` a probe's stderr `line` reports, or None for any other line
    (an error, a warning) or an index out of range."""
    if not line.startswith(PREFIX):
        return None
    try:
        index = int(line[len(PREFIX) :].strip())
    except ValueError:
        return None
    return index if 0 <= index < len(PROBE_STEPS) else None
