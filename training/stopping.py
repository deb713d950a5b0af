"""Stopping a training run cleanly: a flag set by signal handlers, read between steps.

Kept free of heavy imports so the worker can install its handlers before numpy and torch load.
"""

from __future__ import annotations

import ctypes
import os
import signal
from dataclasses import dataclass
from types import FrameType

from cockpit.contract.workerargs import PARENT_PID_ENV

PR_SET_PDEATHSIG = 1


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


def _follow_parent(sig: signal.Signals) -> bool | None:
    """Ask the kernel for `sig` when the cockpit named in `COCKPIT_PARENT_PID` dies. None when no
    cockpit started this process (or this is not Linux), else whether that cockpit is still alive."""
    parent = os.environ.get(PARENT_PID_ENV)
    if not parent:
        return None
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    except (OSError, AttributeError):  # not Linux: nothing to ask the kernel
        return None
    return os.getppid() == int(parent)


def stop_with_parent(stop: StopFlag) -> None:
    """When a cockpit started this process (`COCKPIT_PARENT_PID`), have the kernel send SIGTERM
    when the cockpit dies, even by SIGKILL, so no worker outlives it. Call after
    `install_signal_handlers`, so that SIGTERM means checkpoint-and-stop.

    If the cockpit already died before this ran, the stop is requested at once.
    """
    if _follow_parent(signal.SIGTERM) is False:
        stop.request("parent died")


def die_with_parent() -> None:
    """For a process with nothing to save (the cost probe): SIGKILL when the cockpit that started
    it dies, or at once if it already has."""
    if _follow_parent(signal.SIGKILL) is False:
        os.kill(os.getpid(), signal.SIGKILL)
