"""Stopping a training run cleanly: a flag set by signal handlers, read between steps.

Kept free of heavy imports so the worker can install its handlers before numpy and torch load.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from types import FrameType


class StopRequested(Exception):
    """Raised between optimizer steps when a stop was requested during a train phase."""


@dataclass
class StopFlag:
    """Set by a signal handler (or anyone) to ask the run to stop at the next step."""

    requested: bool = False
    reason: str = ""

    def request(self, reason: str) -> None:
        """Ask for a stop; the first reason given is kept."""
        if not self.requested:
            self.reason = reason
        self.requested = True

    def install_signal_handlers(self) -> None:
        """Make SIGTERM and SIGINT request a stop instead of killing the process."""

        def handler(signum: int, _frame: FrameType | None) -> None:
            self.request(signal.Signals(signum).name)

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
