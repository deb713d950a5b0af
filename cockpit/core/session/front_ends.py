"""The front ends a command hands a run to (`FrontEnds`), and the cockpit opened on a run that is
already live or finished (`watch_run`, for `cockpit attach`): the light half of the front door,
which loads no launcher, sampler or supervisor."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from cockpit.core.feed.source import RunSource, SourceError
from cockpit.core.record.find_runs import open_run

if TYPE_CHECKING:
    from cockpit.core.session.run_session import View


class FrontEnds(Protocol):
    """The views a command hands a run to; the command line supplies them (views sit above core
    and commands: `cockpit.views.terminal.TerminalFrontEnds`), and tests can hand another."""

    def headless(self) -> View:
        """The plain view: a live table on a terminal, timestamped lines otherwise."""
        ...

    def watch(self, source: RunSource, *, who: str) -> int:
        """The cockpit on `source` until the user quits; returns the exit code to end with."""
        ...


def watch_run(run_dir: Path, front: FrontEnds, *, terminal: bool, who: str = "cockpit attach") -> int:
    """Open the cockpit on the run in `run_dir` (live: its control socket; else a replay of its
    record: `find_runs.open_run`); one line and exit 2 when it is no run or there is no terminal."""
    try:
        source = open_run(run_dir)
    except SourceError as exc:
        return refuse(who, str(exc))
    if not terminal:
        source.close()
        return refuse(who, f"the cockpit needs a terminal; without one, read: cockpit report {run_dir}")
    return front.watch(source, who=who)


def refuse(who: str, problem: str) -> int:
    """Say on stderr, as `who`, why nothing starts (one line); the exit code 2."""
    print(f"{who}: error: {problem}", file=sys.stderr)
    return 2
