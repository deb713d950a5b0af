"""Stopping a training run cleanly: a flag set by signal handlers, read between steps; and
following the death of the cockpit that started the process, so that nothing outlives it.

The kernel sends a chosen signal when the cockpit dies, even by SIGKILL (PR_SET_PDEATHSIG). Which
one depends on what the process has to lose: SIGKILL while it has nothing to save
(`die_with_parent`), SIGCONT and a stop to checkpoint while it trains (`save_with_parent`).

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
    """Ask the kernel for `sig` when the cockpit named in `COCKPIT_PARENT_PID` dies (replacing any
    signal asked for before). None when no cockpit started this process (or this is not Linux),
    else whether that cockpit is still alive. Call from the main thread: the kernel keeps the
    request per thread, and sends it to the whole process."""
    parent = _parent_pid()
    if parent is None:
        return None
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    except (OSError, AttributeError):  # not Linux: nothing to ask the kernel
        return None
    return os.getppid() == parent


def _parent_pid() -> int | None:
    parent = os.environ.get(PARENT_PID_ENV)
    return int(parent) if parent else None


def die_with_parent() -> None:
    """For a process with nothing to save (a worker importing or building its job, a served worker
    between jobs, the cost probe): SIGKILL when the cockpit that started it dies, or at once if it
    already has. The kernel delivers it whatever the process is doing: in the middle of an import
    (a C call that runs no Python signal handler for seconds), or stopped by SIGSTOP.

    A job that trains calls `save_with_parent` once it has something to save, and this again when
    that is over (a served worker's job has ended)."""
    _death.stop = None
    if follow_parent(signal.SIGKILL) is False:
        os.kill(os.getpid(), signal.SIGKILL)


def save_with_parent(stop: StopFlag) -> None:
    """From now on this process has something to save: the cockpit's death asks `stop` for a
    checkpoint and a stop, as a supervisor's SIGTERM does (so call after the SIGTERM handlers are
    in place), or at once if the cockpit is already gone.

    The kernel's signal is SIGCONT, not SIGTERM: a worker stopped by SIGSTOP would keep a pending
    SIGTERM forever (only SIGKILL and SIGCONT act on a stopped process), and nobody is left to
    continue it. SIGCONT continues it, and its handler, finding the cockpit gone (our parent is
    no longer it), requests the stop: a stopped worker saves as a running one does. A SIGCONT
    while the cockpit lives (someone continuing a worker they stopped) does nothing more.
    Should the save hang, SIGKILL follows after `ORPHAN_SAVE_S` (SIGALRM at its default action,
    which needs no Python code to run): then the job loses what a kill -9 would, the training
    since its last checkpoint."""
    if _parent_pid() is None:
        return
    signal.signal(signal.SIGCONT, _on_sigcont)
    _death.stop = stop
    if follow_parent(signal.SIGCONT) is False:
        _orphaned(stop)


# What a job has left to save when its cockpit dies, at most: the resumed session waits as long for
# an orphan (cockpit.core.session.startup.ORPHAN_WAIT_S) before it kills it.
ORPHAN_SAVE_S = 30


@dataclass
class _Death:
    """The flag the cockpit's death stops (`save_with_parent`); None while there is nothing to save."""

    stop: StopFlag | None = None


_death = _Death()


def _on_sigcont(_signum: int, _frame: FrameType | None) -> None:
    stop, parent = _death.stop, _parent_pid()
    if stop is not None and parent is not None and os.getppid() != parent:
        _orphaned(stop)


def _orphaned(stop: StopFlag) -> None:
    """The cockpit is gone: stop to save, and die within `ORPHAN_SAVE_S` whatever happens."""
    stop.request("parent died")
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(ORPHAN_SAVE_S)
