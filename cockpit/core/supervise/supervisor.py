"""The supervisor: a queue of jobs, at most N running, restarted with back-off, stopped cleanly.

One thread owns all job state and advances it in `tick()`: it applies queued commands, follows
each live job's event file (each event read through `telemetry.job_events`, as replay reads it),
reaps exited workers, and starts queued jobs in free slots. What an exit means (done, stopped,
paused, a restart with back-off, failed) and when a silent worker is hung is `exit_policy`'s
rule; where a launch goes (its CPUs, its GPU, its MPS daemon) is `workload`'s; the `RunState`
the front ends get is built by `run_state`.

Commands and interrupts may come from any thread (a signal handler, the TUI); they are only
recorded there and acted on at the next tick. A plain `--jobs 4` run is a queue of 4 jobs with 4
slots; fleets add jobs to the same queue.
"""

from __future__ import annotations

import queue
import signal
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from cockpit.contract.advice import Advice
from cockpit.contract.controls import (
    AddJob,
    ApplyAdvice,
    Control,
    KillJob,
    RestartJob,
    SetMps,
    SetPreset,
    SetSlots,
    StopAll,
    StopJob,
    shown,
)
from cockpit.contract.events import Event, StartedEvent
from cockpit.contract.rundir import RunDir
from cockpit.contract.runspec import RestartPolicy
from cockpit.contract.states import JobState, RunStatus
from cockpit.contract.workerargs import MpsServers
from cockpit.core.feed.snapshot import NO_EVENTS_NOTE, Overrides, RunState
from cockpit.core.launch.protocol import EventSource, Launcher
from cockpit.core.machine.clock import Clock, SystemClock
from cockpit.core.machine.gpu_types import GpuInfo
from cockpit.core.machine.host import ThreadBudget, thread_budget
from cockpit.core.supervise.disk_wait import DiskWait
from cockpit.core.supervise.exit_policy import ExitPolicy
from cockpit.core.supervise.jobs import Job
from cockpit.core.supervise.run_state import run_state
from cockpit.core.supervise.workload import JobTemplate, Placement, Placer
from cockpit.core.telemetry.memwatch import MemoryVerdict
from cockpit.core.telemetry.sampler import Sample
from cockpit.core.telemetry.trend import TrendRecorder

STOP_GRACE_S = 12.0
DEFAULT_RESTART = RestartPolicy()  # frozen, so one instance can be every supervisor's default
NO_PLACEMENT = Placement()  # frozen too: no GPUs, no MPS, no pinning


class Supervisor:
    """Runs a queue of jobs through `slots` parallel workers via a `Launcher`; crashed jobs
    restart as `restart` says (`exit_policy`), each launch placed as `placement` says
    (`workload.Placement`: the GPUs, their MPS daemons, CPU pinning)."""

    def __init__(
        self,
        *,
        run_dir: Path,
        template: JobTemplate,
        seeds: Iterable[int],
        slots: int,
        launcher: Launcher,
        budget: ThreadBudget,
        restart: RestartPolicy = DEFAULT_RESTART,
        placement: Placement = NO_PLACEMENT,
        clock: Clock | None = None,
        preset_name: str = "",
    ) -> None:
        self.run_dir = run_dir
        self.template = template
        self.slots = slots
        self.launcher = launcher
        self.budget = budget
        self.clock = clock or SystemClock()
        self.preset_name = preset_name
        self.placer = Placer(placement, slots)
        self.jobs: dict[str, Job] = {}
        self.queue: deque[str] = deque()
        self._tails: dict[str, EventSource] = {}  # each job's events, from its launcher
        self._commands: queue.SimpleQueue[Control] = queue.SimpleQueue()
        self._interrupt_requested = False
        self._interrupted = False
        self._kill_now = False
        self.interrupt_signal: int = signal.SIGINT
        self.started_at = self.clock.time()
        # More jobs still to come (a fleet's later tiers): the run is not finished while True.
        self.pending_work: Callable[[], bool] = lambda: False
        # Called in each tick once ended jobs are reaped, before free slots are filled: a fleet
        # records what ended and queues what comes next, so no slot idles for a tick in between.
        self.before_launch: Callable[[], None] | None = None
        # Show front ends the live jobs and only this many ended ones, the latest (None: every job).
        self.view_limit: int | None = None
        self.warnings: list[str] = [w for w in [budget.warning()] if w]
        self.exits = ExitPolicy(restart, self.clock, launcher, self.placer, self.jobs, self.warnings, template.script)
        self.disk = DiskWait(run_dir, restart.disk_wait_s)  # jobs paused for disk space, until there is room
        self.trend = TrendRecorder()  # the run's SPS and best return, sampled by `snapshot`
        for seed in seeds:
            self._add(seed)

    @property
    def mps(self) -> MpsServers | None:
        """Under --mps: each GPU's daemon, whose pipes and logs each worker on that GPU gets."""
        return self.placer.mps

    @property
    def mps_clients(self) -> bool:
        """Whether the jobs launched from now on are the MPS daemons' clients (`SetMps` turns it)."""
        return self.placer.mps_clients

    # ----- commands (any thread) -----

    def submit(self, command: Control) -> None:
        """Queue a command; it takes effect at the next tick."""
        self._commands.put(command)

    def waiting(self) -> int:
        """The jobs queued for a slot plus the commands not yet handled (each may add one): at
        least as many as will wait once they are. Safe to call from other threads."""
        jobs = dict(self.jobs)  # one step under the GIL: the loop thread adds jobs meanwhile
        return sum(1 for job in jobs.values() if job.state is JobState.QUEUED) + self._commands.qsize()

    def interrupt(self, signum: int = signal.SIGINT) -> None:
        """Stop the run: every live job checkpoints and stops; a second call kills them now."""
        if self._interrupt_requested:
            self._kill_now = True
        self._interrupt_requested = True
        self.interrupt_signal = signum

    @property
    def interrupted(self) -> bool:
        """True once the run was asked to stop: no job starts any more."""
        return self._interrupted or self._interrupt_requested

    # ----- the loop (supervisor thread only) -----

    def _add(self, seed: int) -> Job:
        return self.add_job(
            f"{len(self.jobs):03d}", seed, self.template.timesteps, eval_episodes=self.template.eval_episodes
        )

    def add_job(
        self,
        job_id: str,
        seed: int,
        target: int,
        *,
        preset_arg: str | None = None,
        env: str | None = None,
        eval_episodes: int | None = None,
        queued: bool = True,
        episodes: int | None = None,
        preset_name: str | None = None,
        overrides: Overrides = (),
    ) -> Job:
        """Add job `job_id` in `jobs/<job_id>/`, training to `target` steps, or to `episodes` whole
        episodes when given (else the template's episode target, if any), with the template's
        preset and env unless given; at the end of the queue, or held out of it (`queued=False`)
        for `restore`. `preset_name` and `overrides` are what the views show of its preset (the
        name the user gave and what a fleet agent changes of it); without them, `preset_arg`'s name."""
        files = RunDir(self.run_dir).job(job_id)
        job = Job(job_id, seed, files.path, target, preset_arg, env, eval_episodes, preset_name, overrides)
        job.target_episodes = episodes if episodes is not None else self.template.episodes
        job.state_since = self.clock.time()
        self.jobs[job_id] = job
        self._tails[job_id] = self.launcher.events(job_id, files.path)
        if queued:
            self.queue.append(job_id)
        return job

    def extend(self, job_id: str, target: int, *, episodes: int | None = None) -> None:
        """Queue the done job `job_id` again to train on to `target` steps, or `episodes` whole
        episodes when given (a fleet's promotion): its worker resumes from the job's newest
        checkpoint."""
        job = self.jobs[job_id]
        job.target = target
        if episodes is not None:
            job.target_episodes = episodes
        self._requeue(job)
        self.queue.rotate(-1)  # _requeue puts a job first; promotions wait their turn like any job

    def restore(self, job: Job) -> list[Event]:
        """Bring a job of an earlier (resumed) run up to date with the events it wrote then, read
        from its launcher's source; returns them. Its next worker's events follow on from there."""
        events = self._read(job, everything=True)
        for event in events:
            self._apply(job, event)
        job.end_session(events[-1].t if events else None)
        return events

    def tick(self) -> None:
        """Advance every job once: commands, events, exits, back-offs, free slots."""
        now = self.clock.monotonic()
        while True:
            try:
                self._handle(self._commands.get_nowait())
            except queue.Empty:
                break
        if self._interrupt_requested and not self._interrupted:
            self._interrupted = True
            for job in self.jobs.values():
                self._stop(job)
        reported: set[str] = set()  # the jobs whose workers wrote events since the previous tick
        for job in self.jobs.values():
            if job.handle is not None and self._follow(job):
                reported.add(job.id)
        for job in self.jobs.values():
            # After _follow: a job's fresh events and its exit come first.
            self.exits.watch(job, now, reported=job.id in reported)
        if not self._interrupted:
            for job in self.disk.room(self.jobs.values(), now):
                self.warnings.append(f"{job.id}: disk space is back; going on from its checkpoint")
                self._requeue(job)
        for job in self.jobs.values():
            overdue = self._kill_now or now >= job.stop_deadline
            if job.state is JobState.STOPPING and job.handle is not None and overdue:
                self.launcher.kill(job.handle)
            due = job.state is JobState.BACKOFF and now >= job.restart_at and not self._interrupted
            if due and not self.exits.held(job):
                self._launch(job)
        if self.before_launch is not None:
            self.before_launch()
        while not self._interrupted and self.queue and self._busy_slots() < self.slots:
            self._launch(self.jobs[self.queue.popleft()])

    def _handle(self, command: Control) -> None:
        if isinstance(command, StopAll):
            self.interrupt()  # acted on later in this same tick
            return
        if isinstance(command, SetSlots):
            self._set_slots(max(1, command.slots))
            return
        if isinstance(command, SetPreset):
            self.template = replace(self.template, preset_arg=command.preset_arg)
            return
        if isinstance(command, SetMps):
            if self.mps is None:
                self.warnings.append("MPS: this run has no MPS daemon; its jobs stay as they are")
            else:
                self.placer.mps_clients = command.on
            return
        if isinstance(command, ApplyAdvice):
            self.warnings.append(
                f"advice {command.setting} -> {shown(command.suggested)} reached the supervisor unapplied"
            )
            return
        if isinstance(command, AddJob):
            next_seed = max((j.seed for j in self.jobs.values()), default=-1) + 1
            self._add(command.seed if command.seed is not None else next_seed)
            return
        job = self.jobs.get(command.job_id)
        if job is None:
            self.warnings.append(f"no job {shown(command.job_id)}")  # cut: the id came from a client
            return
        if isinstance(command, StopJob):
            self._stop(job)
        elif isinstance(command, KillJob):
            if job.handle is not None:
                job.stop_requested = True
                job.change_state(JobState.STOPPING, self.clock.time())
                self.launcher.kill(job.handle)
        elif isinstance(command, RestartJob):
            if job.state.live:
                self._stop(job)
                job.exit_reason = "restart"
            elif job.state.terminal or job.state is JobState.BACKOFF:
                self._requeue(job)

    def _set_slots(self, slots: int) -> None:
        self.slots = slots
        self.budget = thread_budget(slots, self.budget.physical_cores)  # later launches get the new share
        self.placer.set_slots(slots)
        running = [j for j in self.jobs.values() if j.state in (JobState.STARTING, JobState.RUNNING)]
        running.sort(key=lambda j: j.attempt_started_at or 0.0)
        excess = self._busy_slots() - slots
        for job in reversed(running[len(running) - excess :] if excess > 0 else []):
            self._stop(job)
            job.exit_reason = "restart"  # back to the queue once it has checkpointed

    def _requeue(self, job: Job) -> None:
        now = self.clock.time()
        if job.state is JobState.BACKOFF:
            job.change_state(JobState.STOPPED, now)
        job.change_state(JobState.QUEUED, now)
        job.error, job.stop_requested, job.exit_reason = None, False, None
        job.restarts = job.restarts_in_a_row = 0
        job.ended_at, job.slot, job.prestep_error = None, None, None
        self.queue.appendleft(job.id)

    def _stop(self, job: Job) -> None:
        now = self.clock.time()
        if job.state is JobState.QUEUED:
            self.queue.remove(job.id)
            job.change_state(JobState.STOPPED, now)
            job.exit_reason = "stopped before it started"
        elif job.state is JobState.BACKOFF:
            job.change_state(JobState.STOPPED, now)
            job.slot = None
        elif job.state in (JobState.STARTING, JobState.RUNNING, JobState.STALLED):
            job.stop_requested = True
            job.change_state(JobState.STOPPING, now)
            job.stop_deadline = self.clock.monotonic() + STOP_GRACE_S
            self.launcher.terminate(job.handle)

    def _busy_slots(self) -> int:
        return sum(1 for j in self.jobs.values() if j.state.holds_slot)

    def _free_slot(self) -> int:
        taken = {j.slot for j in self.jobs.values() if j.slot is not None and j.state.holds_slot}
        return next(i for i in range(self.slots + len(taken) + 1) if i not in taken)

    def _launch(self, job: Job) -> None:
        now = self.clock.time()
        if job.slot is None:
            job.slot = self._free_slot()
        self.placer.place(job, self.jobs.values(), self.template.device(job))
        args = self.template.args(job, self.budget.threads_per_job)
        # Whatever an earlier worker wrote after its exit was read belongs to that attempt, not this one.
        for event in self._read(job, everything=True):
            self._apply(job, event)
        job.attempt_finished = job.attempt_error = None
        job.attempt_started_seen = False
        job.last_event_at, job.stalled_at, job.stall_reason = self.clock.monotonic(), None, None
        try:
            job.handle = self.launcher.launch(self.placer.request(job, args))
        except OSError as exc:
            job.error = f"could not start the worker: {exc}"
            job.change_state(JobState.STARTING, now)
            job.change_state(JobState.FAILED, now)
            job.slot, job.ended_at = None, now
            return
        job.attempt_started_at = now
        job.change_state(JobState.STARTING, now)
        if self.template.script is not None:  # nothing says when a script starts training: it runs
            job.change_state(JobState.RUNNING, now)
            job.exit_reason = NO_EVENTS_NOTE

    def _follow(self, job: Job) -> bool:
        """Apply the job's new events and reap its worker if it exited; True when it wrote events."""
        new = self._read(job)
        for event in new:
            self._apply(job, event)
        if new:
            job.last_event_at = self.clock.monotonic()
            if job.state is JobState.STALLED and job.stall_reason is None:  # it reports again: not hung
                job.change_state(JobState.RUNNING, self.clock.time())
                job.stalled_at, job.exit_reason = None, job.reason_before_stall
        code = self.launcher.poll(job.handle)
        if code is not None:
            for event in self._read(job, everything=True):  # whatever it wrote just before exiting
                self._apply(job, event)
            if self.exits.exited(job, code, interrupted=self._interrupted):
                self._requeue(job)  # stopped to restart (`RestartJob`, fewer slots)
        return bool(new)

    def _read(self, job: Job, *, everything: bool = False) -> list[Event]:
        """The job's new events: a bounded read at a live tick, `everything` otherwise; a line its
        source skipped for its size is told once, as a warning."""
        tail = self._tails[job.id]
        events = tail.read_all() if everything else tail.read_new()
        if tail.notices:
            self.warnings.extend(f"{job.id}: {notice}" for notice in tail.notices)
            tail.notices.clear()
        return events

    def _apply(self, job: Job, event: Event) -> None:
        """Take in one of the job's events: what it says of the job (`JobEvents.apply`, replay's
        reading too), and what the supervisor makes of it (a script's target, running at start)."""
        job.apply(event)
        if job.exit_reason == NO_EVENTS_NOTE:
            job.exit_reason = None
        if isinstance(event, StartedEvent):
            if self.template.script is not None and event.target_steps:
                job.target = event.target_steps  # the script's own total: its progress and ETA
            if job.state is JobState.STARTING:
                job.change_state(JobState.RUNNING, self.clock.time())

    def stall_timeout(self, job: Job) -> float:
        """Seconds without an event after which `job`'s running worker is stalled (the policy's
        `--stall-timeout`, else derived from the job's longest silence so far)."""
        return self.exits.stall_timeout(job)

    # ----- results -----

    @property
    def finished(self) -> bool:
        """True when no job will run again without a command (or, interrupted, none is live)."""
        if self._interrupted:
            return not any(j.state.live for j in self.jobs.values())
        waiting = self.disk.waiting(self.jobs.values(), self.clock.monotonic())
        return all(j.state.terminal for j in self.jobs.values()) and not self.pending_work() and not waiting

    @property
    def disk_note(self) -> str | None:
        """`waiting for disk: N MiB free, needs M MiB` while paused jobs wait for space, else None."""
        return None if self._interrupted else self.disk.note(self.jobs.values(), self.clock.monotonic())

    @property
    def status(self) -> RunStatus:
        """The run's status now."""
        all_done = all(j.state is JobState.DONE for j in self.jobs.values())
        if self._interrupted and not all_done:
            return RunStatus.INTERRUPTED if self.finished else RunStatus.STOPPING
        if not self.finished:
            return RunStatus.RUNNING
        return RunStatus.DONE if all(j.state is JobState.DONE for j in self.jobs.values()) else RunStatus.FAILED

    def live_pids(self) -> dict[str, int]:
        """Worker pid of each live job, for the sampler."""
        return {j.id: j.handle.pid for j in self.jobs.values() if j.handle is not None}

    def snapshot(
        self,
        sample: Sample | None = None,
        peak_gpu_mem: dict[str, int] | None = None,
        *,
        all_jobs: bool = False,
        memory: Mapping[str, MemoryVerdict] | None = None,
        gpu: GpuInfo | None = None,
        gpus: tuple[GpuInfo, ...] = (),
        gpu_status: str = "",
        advice: tuple[str, ...] = (),
        suggestions: tuple[Advice, ...] = (),
        name: str | None = None,
    ) -> RunState:
        """An immutable RunState for the front ends (`run_state.run_state`: with `all_jobs`, every
        job despite `view_limit`; `memory`, the leak watch's verdict per job; the rest passed through)."""
        return run_state(
            self,
            sample,
            peak_gpu_mem,
            all_jobs=all_jobs,
            memory=memory,
            gpu=gpu,
            gpus=gpus,
            gpu_status=gpu_status,
            advice=advice,
            suggestions=suggestions,
            name=name,
        )
