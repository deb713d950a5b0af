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


class JobSignals:
    """SIGTERM and SIGINT in a process that runs one job after another (the served worker).

    During a job they ask that job to stop: each job gets a fresh `StopFlag` from `begin_job`.
    Between jobs they set `quit`; `install` returns the read end of a pipe that becomes readable
    on each signal (`signal.set_wakeup_fd`), so an idle wait in `select` wakes at once.
    """

    def __init__(self) -> None:
        self.job: StopFlag | None = None
        self.quit: signal.Signals | None = None

    def install(self) -> int:
        """Install the handlers (main thread only); returns the wake-up pipe's read end."""
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)
        return read

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        sig = signal.Signals(signum)
        if self.job is not None:
            self.job.request(sig.name)
        elif self.quit is None:
            self.quit = sig

    def begin_job(self) -> StopFlag:
        """A fresh flag for the job about to run; from now on a signal is this job's. A signal
        that came while the job's request was being read is counted as the job's too."""
        flag = StopFlag()
        self.job = flag
        if self.quit is not None:
            flag.request(self.quit.name)
            self.quit = None
        return flag

    def end_job(self) -> None:
        """The job is over: a signal from now on asks the process to quit."""
        self.job = None

    def die_of_quit(self) -> None:
        """Exit as the quit signal's default action would (a process without handlers, killed)."""
        if self.quit is not None:
            signal.signal(self.quit, signal.SIG_DFL)
            os.kill(os.getpid(), self.quit)


def follow_parent(sig: signal.Signals) -> bool | None:
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
    if follow_parent(signal.SIGTERM) is False:
        stop.request("parent died")


def die_with_parent() -> None:
    """For a process with nothing to save (the cost probe): SIGKILL when the cockpit that started
    it dies, or at once if it already has."""
    if follow_parent(signal.SIGKILL) is False:
        os.kill(os.getpid(), signal.SIGKILL)
