"""What the commands that show a run need from the views: the headless view and the cockpit.

Views sit above commands, so a command never imports one: `cli.py` hands `run` and `attach` a
`FrontEnds` (`cockpit.views.terminal.TerminalFrontEnds`), and tests can hand them another.
"""

from __future__ import annotations

from typing import Protocol

from cockpit.core.feed.source import RunSource
from cockpit.core.session.loop import View


class FrontEnds(Protocol):
    """The views a command hands a run to; the command line supplies them (views sit above commands)."""

    def headless(self) -> View:
        """The plain view: a live table on a terminal, timestamped lines otherwise."""
        ...

    def watch(self, source: RunSource, *, who: str) -> int:
        """The cockpit on `source` until the user quits; returns the exit code to end with."""
        ...
