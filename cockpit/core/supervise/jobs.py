"""Job states and the one place that changes them.

A job is one agent (one seed) of a run. Its state moves only through `Job.change_state`, which
refuses transitions the table below does not allow, so the supervisor cannot reach an invalid
state by accident (supervisord's discipline).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.contract.states import JobState
from cockpit.core.feed.snapshot import Overrides
from cockpit.core.machine.placement import GpuRef
from cockpit.core.telemetry.job_events import JobEvents

# How a worker that exists can end up: asked to stop, crashed (back-off or failed), done, stopped,
# or paused by a full disk.
_ENDINGS = {JobState.STOPPING, JobState.BACKOFF, JobState.FAILED, JobState.DONE, JobState.STOPPED, JobState.PAUSED}

_ALLOWED: dict[JobState, set[JobState]] = {
    # DONE and FAILED straight from the queue: a resumed run's jobs that ended in an earlier session.
    JobState.QUEUED: {JobState.STARTING, JobState.STOPPED, JobState.DONE, JobState.FAILED},
    JobState.STARTING: {JobState.RUNNING, *_ENDINGS},
    JobState.RUNNING: {JobState.STALLED, *_ENDINGS},
    # A stalled worker is killed (BACKOFF, or FAILED when the policy is spent), recovers when its
    # events resume (RUNNING), or exits on its own or on a command like a running one.
    JobState.STALLED: {JobState.RUNNING, *_ENDINGS},
    JobState.BACKOFF: {JobState.STARTING, JobState.STOPPED},
    JobState.STOPPING: {JobState.STOPPED, JobState.DONE, JobState.FAILED},
    JobState.DONE: {JobState.QUEUED},
    JobState.STOPPED: {JobState.QUEUED},
    JobState.FAILED: {JobState.QUEUED},
    JobState.PAUSED: {JobState.QUEUED},  # continued by a restart command once the disk has room
}


class InvalidTransition(RuntimeError):
    """A state change the job life cycle does not allow (a supervisor bug)."""


@dataclass
class Job(JobEvents):
    """One agent of a run, as the supervisor tracks it. Only the supervisor mutates it. What its
    events say (steps, progress, phases, throughput, this attempt's outcome...) is the
    `JobEvents` it is, which replay reads the same way; the rest is the supervisor's own."""

    id: str
    seed: int
    job_dir: Path
    target: int
    # A fleet's agents differ in preset and env, and are scored: None takes the run's template.
    preset_arg: str | None = None
    env: str | None = None
    eval_episodes: int | None = None
    # The preset the user named and the overrides a fleet agent applies to it, for the views:
    # `preset_arg` is then a file written for the agent, whose stem means nothing to the user.
    preset_name: str | None = None
    overrides: Overrides = ()
    state: JobState = JobState.QUEUED
    state_since: float = 0.0
    handle: Any = None
    slot: int | None = None
    # The GPU its worker runs on (`cockpit.core.machine.placement`); kept across restarts while it is there.
    gpu: GpuRef | None = None
    # Its peak GPU memory in an earlier session of the run (run.toml): room its GPU must have to keep it.
    recorded_peak_gpu_mem: int | None = None
    restarts: int = 0  # in this run, as the views and run.toml show them
    # Restarts since the last attempt that ran `RestartPolicy.healthy_uptime_s`: what the policy counts.
    restarts_in_a_row: int = 0
    restart_at: float = 0.0
    stop_deadline: float = 0.0
    stop_requested: bool = False
    error: str | None = None
    exit_reason: str | None = None
    target_episodes: int | None = None  # an episode target in place of the step `target`
    ended_at: float | None = None
    active_seconds: float = 0.0
    attempt_started_at: float | None = None  # this launch's time on the supervisor's clock
    # The error of the previous attempt, when it ended the same way this one may: by its own error
    # (not a signal, a stall or a full disk) before a single step and before `healthy_uptime_s`.
    prestep_error: str | None = None
    # The stall watch: when (supervisor's monotonic clock) this attempt was launched or its last
    # event was read, when it was seen stalled, and why it was killed.
    last_event_at: float = 0.0
    stalled_at: float | None = None
    reason_before_stall: str | None = None
    stall_reason: str | None = None

    def change_state(self, new: JobState, now: float) -> None:
        """Move to `new`, or raise InvalidTransition if the life cycle does not allow it."""
        if new is self.state:
            return
        if new not in _ALLOWED[self.state]:
            raise InvalidTransition(f"job {self.id}: {self.state.value} -> {new.value} is not allowed")
        self.state = new
        self.state_since = now

    @property
    def mean_sps(self) -> float | None:
        """Steps trained by this run's launches per second of their running time."""
        if self.steps_at_first_start is None or self.active_seconds <= 0:
            return None
        return (self.steps - self.steps_at_first_start) / self.active_seconds
