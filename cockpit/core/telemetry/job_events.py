"""The one reading of a job's event stream: what its events say about it, folded in order.

A job's worker writes `started`, `phase`, `progress`, `checkpoint`, `heartbeat`, `evaluated`,
`finished` and `error` events. `JobEvents.apply` takes them one at a time and keeps what they
mean for the job: its steps and episodes, its newest progress figures, its phase and since when,
its scoring progress, its checkpoints, its live throughput (`Throughput`), its device, the worker's
own CUDA memory reports, this attempt's outcome, and the longest silence between two of its
events. `end_attempt` closes an attempt's phase when its worker is gone, `end_session` what an earlier
session of a resumed run read.

Both readers of the stream use it: the supervisor (`supervise.jobs.Job` is a `JobEvents`, and
`Supervisor` applies each event as it reads it) and replay (`record.replay` folds a finished
run's events through it and indexes its state by time). A replay therefore shows what the live
view showed by construction; what only the supervisor knows (why it ended or restarted a job,
its own clock) is not derived here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cockpit.contract.events import (
    CheckpointEvent,
    ErrorEvent,
    EvaluatedEvent,
    Event,
    FinishedEvent,
    HeartbeatEvent,
    PhaseEvent,
    ProgressEvent,
    StartedEvent,
)
from cockpit.core.telemetry.throughput import Throughput

# (time, phase) transitions, with phase None when the worker stopped.
Transitions = list[tuple[float, str | None]]


@dataclass(kw_only=True)
class JobEvents:
    """What one job's events said so far (see the module docstring). Only `apply` and
    `end_attempt` change it, apart from the resets the supervisor makes at a launch."""

    steps: int = 0
    rollout_sps: float | None = None  # the worker's `sps` of its newest progress event: its rollout rate
    # The live throughput over whole cycles, of the current attempt (a `started` event restarts it).
    throughput: Throughput = field(default_factory=Throughput)
    ep_rew_mean: float | None = None
    ep_len_mean: float | None = None
    episodes: int = 0  # whole episodes finished, across restarts (as of the newest report)
    device: str | None = None
    # The worker's own CUDA memory, from its progress events (`ProgressEvent.cuda_reserved_bytes`):
    # what its current worker's allocator holds (None before its first report, or on the CPU) and
    # the most any of the job's workers held. Shown only where NVML cannot attribute the job's.
    cuda_reserved_bytes: int | None = None
    cuda_peak_bytes: int | None = None
    phase: str | None = None
    phase_since: float | None = None
    scoring: tuple[int, int] | None = None  # in a score phase: (episodes scored, of how many), from its heartbeats
    evaluation: EvaluatedEvent | None = None  # the newest score, of this or an earlier attempt
    checkpoints: int = 0
    last_checkpoint_step: int | None = None
    # The first `started` event's time and step count: where the job's mean SPS counts from.
    first_started_at: float | None = None
    steps_at_first_start: int | None = None
    # Phase transitions; the supervisor's session prunes those summed up already and older than a
    # viewer's window.
    phases: Transitions = field(default_factory=list)
    # This attempt's: whether its `started` was seen, its outcome events, and the step it resumed
    # from (an attempt whose events never pass it trained not a single step).
    attempt_started_seen: bool = False
    attempt_finished: FinishedEvent | None = None
    attempt_error: ErrorEvent | None = None
    attempt_from_step: int = 0
    # The longest silence between two events of one attempt (event times, over every attempt) and
    # the newest event's time: what a default stall timeout grows with.
    longest_silence_s: float = 0.0
    last_event_t: float | None = None

    def apply(self, event: Event) -> None:
        """Take in the job's next event (a `started` one opens a new attempt)."""
        if self.last_event_t is not None and not isinstance(event, StartedEvent):
            self.longest_silence_s = max(self.longest_silence_s, event.t - self.last_event_t)
        self.last_event_t = event.t
        self.throughput.observe(event)
        if isinstance(event, StartedEvent):
            self.attempt_started_seen = True
            self.device = event.device
            self.cuda_reserved_bytes = None  # a new worker: its allocator starts empty
            self.steps = self.attempt_from_step = event.resumed_from_step or 0
            self.episodes = event.resumed_episodes or 0
            if self.steps_at_first_start is None:
                self.steps_at_first_start, self.first_started_at = self.steps, event.t
        elif isinstance(event, PhaseEvent):
            self.phase, self.phase_since, self.scoring = event.phase, event.t, None
            self.phases.append((event.t, event.phase))
            self.steps = event.num_timesteps
        elif isinstance(event, ProgressEvent):
            self.steps = event.num_timesteps
            self.rollout_sps, self.ep_rew_mean = event.sps, event.ep_rew_mean
            self.ep_len_mean, self.episodes = event.ep_len_mean, event.episodes or 0
            if event.cuda_reserved_bytes is not None:
                self.cuda_reserved_bytes = event.cuda_reserved_bytes
            if event.cuda_peak_bytes is not None:
                self.cuda_peak_bytes = max(self.cuda_peak_bytes or 0, event.cuda_peak_bytes)
        elif isinstance(event, CheckpointEvent):
            self.checkpoints += 1
            self.last_checkpoint_step = event.step
        elif isinstance(event, FinishedEvent) and self.attempt_started_seen:
            # A `finished` before this attempt's `started` is a previous worker's late word.
            self.attempt_finished = event
            self.steps = event.steps
        elif isinstance(event, ErrorEvent):
            self.attempt_error = event
        elif isinstance(event, EvaluatedEvent):
            self.evaluation = event
        elif isinstance(event, HeartbeatEvent) and event.scored is not None and event.to_score is not None:
            self.scoring = (event.scored, event.to_score)

    def end_attempt(self, t: float) -> None:
        """The attempt's worker is gone at `t`: its phase, if any, ends there."""
        if self.phase is not None:
            self.phases.append((t, None))
            self.phase = self.phase_since = self.scoring = None

    def end_session(self, t: float | None) -> None:
        """An earlier session's events were read (a resumed run), the last at `t` (None: there
        were none): its attempt's outcome is no later attempt's, its last phase ended with it, and
        the mean SPS counts from the next session's first start."""
        self.attempt_finished = self.attempt_error = None
        if t is not None:
            self.end_attempt(t)
        self.phase = self.phase_since = self.scoring = None
        self.steps_at_first_start, self.first_started_at = self.steps, None
