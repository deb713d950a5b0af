"""The states a job and a run can be in, as every process and file names them.

They cross the control socket (attach) and are recorded in run.toml, so they live in the contract.
Only the supervisor changes a job's state (`cockpit.core.supervise.jobs` holds the allowed transitions).
"""

from __future__ import annotations

from enum import Enum


class JobState(str, Enum):
    """Where a job is in its life."""

    QUEUED = "queued"  # waiting for a free slot
    STARTING = "starting"  # process launched, no `started` event yet
    RUNNING = "running"  # training
    # Live but silent past the stall timeout, or stopped by a signal: killed and restarted from its
    # checkpoint once the timeout has passed, unless its events resume first (then running again).
    STALLED = "stalled"
    BACKOFF = "backoff"  # crashed; waiting to restart from its checkpoint
    STOPPING = "stopping"  # asked to stop; waiting for it to checkpoint and exit
    DONE = "done"  # reached its target
    STOPPED = "stopped"  # stopped on request (resumable)
    FAILED = "failed"  # crashed more often than the restart policy allows
    PAUSED = "paused"  # its disk is full: not restarted; `r` or `run --resume` continues it once there is room

    def __str__(self) -> str:
        # The value, in f-strings too (Python 3.12 formats a mixed-in enum by its name otherwise).
        return self.value

    @property
    def terminal(self) -> bool:
        """True for states a job does not leave without a command."""
        return self in (JobState.DONE, JobState.STOPPED, JobState.FAILED, JobState.PAUSED)

    @property
    def holds_slot(self) -> bool:
        """True while the job occupies one of the run's parallel slots (a back-off keeps its slot)."""
        return self.live or self is JobState.BACKOFF

    @property
    def live(self) -> bool:
        """True while a worker process exists for the job."""
        return self in (JobState.STARTING, JobState.RUNNING, JobState.STALLED, JobState.STOPPING)

    @property
    def active(self) -> bool:
        """True while its worker is starting or training and has not been asked to stop."""
        return self in (JobState.STARTING, JobState.RUNNING)

    @property
    def stepping(self) -> bool:
        """True while its worker has started training and reports progress (stopping included)."""
        return self in (JobState.RUNNING, JobState.STOPPING)


class RunStatus(str, Enum):
    """The run as a whole."""

    RUNNING = "running"
    STOPPING = "stopping"  # interrupted; jobs are checkpointing
    DONE = "done"  # every job reached its target
    FAILED = "failed"  # every job ended, some failed or were stopped
    INTERRUPTED = "interrupted"  # SIGINT/SIGTERM: unfinished jobs can be resumed

    def __str__(self) -> str:
        return self.value

    @property
    def live(self) -> bool:
        """True while the run's supervisor is still at work (running or stopping its jobs)."""
        return self in (RunStatus.RUNNING, RunStatus.STOPPING)
