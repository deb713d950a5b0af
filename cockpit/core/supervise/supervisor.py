"""The supervisor: a queue of jobs, at most N running, restarted with back-off, stopped cleanly.

One thread owns all job state and advances it in `tick()`: it applies queued commands, follows
each live job's event file, reaps exited workers, and starts queued jobs in free slots.

A crashed job restarts from its checkpoint as its `RestartPolicy` says: the n-th restart in a row
waits `backoff_s · 2^(n-1)` s (1 s, 2 s, 4 s … by default), at most `backoff_max_s`; the crash
after `max_restarts` restarts in a row marks it failed. An attempt that ran `healthy_uptime_s`
(from its launch, on the supervisor's clock) before crashing starts the count again, so a job
that trains for days and crashes now and then is never failed for it, while one that cannot get
going fails within seconds. One that fails with the same error on two starts in a row, each
before a single step and by its own error (not a signal, a stall or a full disk), is failed at
once: that error is its input (`INPUT_ERROR_EXIT`), and a restart would only repeat it. A worker
that ran out of disk space (a `disk_full` error, or exit code `DISK_FULL_EXIT`) is not a crash:
its job is paused, with the free space in its error, until a restart command (or `run --resume`)
continues it.

A running worker that writes no event for its stall timeout (`RestartPolicy.stall_timeout`: the
`--stall-timeout`, else 3x the job's longest silence so far, at least 60 s) is hung: its job turns
`stalled`, and once it has shown as stalled for `STALL_GRACE_S` too, the worker is killed, process
group and all, and restarted from its checkpoint as a crash that counts against the policy, with
`stalled: no events for N s` as its error. A worker stopped by a signal (state T) is shown stalled
at once (at the first tick in which it wrote nothing: only then is its process state asked for),
and killed on the same timeout. Events that resume before the kill make it running again.

A script run (`cockpit run -- python train.py ...`: `JobTemplate.script`) launches each job as the
user's command under the guard (`ScriptArgs`). Such a job is running once launched, and is done
when the command exits 0; any other exit is a crash. Its events, if its script reports through
`CockpitCallback`, are followed like a worker's (a `started` event's `target_steps` becomes the
job's target); until the first one it shows `NO_EVENTS_NOTE`, and the stall watch leaves it
alone: a script may be silent all its life.

On a machine with GPUs, each launch places the job on one (`cockpit.core.machine.placement`: the GPU it
ran on before, found by UUID, while it is there, has room for the job's known peak GPU memory and
is not crowded; else the one with the fewest jobs, then the most free memory; never past what the
GPU's compute mode takes: one job on an EXCLUSIVE_PROCESS GPU unless the jobs are MPS clients,
none on a PROHIBITED one); the launcher makes that the only GPU its worker sees.

Under MPS (`mps`: `--mps`), each worker placed on a GPU is a client of that GPU's MPS daemon
(`MpsServers.for_gpu`: its pipe and log directories), its memory capped from its known peak
(`workerargs.mps_memory_limit_mib`). A fatal fault in one MPS client ends every client on that
GPU, so crashes of several jobs of one GPU within `MPS_FAULT_WINDOW_S` of each other are one
event, not one each: the first crash is counted against its job's policy as any crash is; the
others on that GPU within the window are that same fault, restarted from their checkpoints with
the first (at the same moment) without counting against their own policies or being taken for
their input's error, and one warning names MPS and every job it ended. The server refuses new
clients until every client of the fault has exited, so none of them restarts while another job of
that GPU still has a worker: a crash under MPS waits for the others of its GPU while it may still
be the first of a fault (`MPS_FAULT_WINDOW_S`), and a fault's jobs wait until they are all gone.
Jobs of other GPUs are never held: each GPU has its own daemon. The same holds without `--mps`
where a daemon found running serves every CUDA process (`MpsServers.external`). An error of MPS
itself (`mps_daemon.mps_error`: the server not ready, the client unable to connect) is never taken for
the job's input: it restarts with back-off as any GPU fault does.

Commands and interrupts may come from any thread (a signal handler, the TUI); they are only
recorded there and acted on at the next tick. A plain `--jobs 4` run is a queue of 4 jobs with 4
slots; fleets add jobs to the same queue.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import queue
import signal
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
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
)
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
from cockpit.contract.files import free_space
from cockpit.contract.rundir import RunDir
from cockpit.contract.runspec import RestartPolicy
from cockpit.contract.scriptargs import ScriptArgs
from cockpit.contract.states import JobState, RunStatus
from cockpit.contract.workerargs import (
    DISK_FULL_ERROR,
    DISK_FULL_EXIT,
    DeviceRequest,
    MpsServers,
    WorkerArgs,
    mps_memory_limit_mib,
)
from cockpit.core.feed.snapshot import (
    NO_EVENTS_NOTE,
    JobLife,
    JobProgress,
    JobSetup,
    JobTelemetry,
    Overrides,
    RunState,
    job_view,
    stepping_sps,
)
from cockpit.core.launch.protocol import EventSource, Launcher, LaunchRequest, WorkerHandle
from cockpit.core.machine.clock import Clock, SystemClock
from cockpit.core.machine.gpu_types import GpuInfo
from cockpit.core.machine.host import ThreadBudget, pin_sets, thread_budget
from cockpit.core.machine.mps_daemon import mps_error
from cockpit.core.machine.placement import GpuRef, GpuRoom, place
from cockpit.core.supervise.jobs import Job
from cockpit.core.telemetry.memwatch import MemoryVerdict
from cockpit.core.telemetry.sampler import JobUsage, Sample
from cockpit.core.telemetry.throughput import run_eta
from cockpit.core.telemetry.trend import TrendRecorder, best_return

STOP_GRACE_S = 12.0
# A stalled job is shown as such at least this long before it is killed: a viewer sees why, and a
# worker that was only slow gets one more chance to report.
STALL_GRACE_S = 10.0
DEFAULT_RESTART = RestartPolicy()  # frozen, so one instance can be every supervisor's default
# Under MPS, crashes of jobs of one GPU this close together are one client fault that ended them
# all: the driver ends every client within moments, and their workers exit as their next CUDA call
# fails, which a job in its rollout makes only once the rollout ends (seconds).
MPS_FAULT_WINDOW_S = 10.0


@dataclass
class MpsFault:
    """One MPS client fault on a GPU: when its first crash was (supervisor clock), the jobs it
    ended in order, when they all restart, the index of its warning in `Supervisor.warnings`, and
    the workers of the GPU's other jobs at its first crash (`clients`: the server's clients then,
    which must all be gone before it takes new ones)."""

    gpu: int
    at: float
    jobs: list[str]
    restart_at: float | None
    warning: int
    clients: tuple[WorkerHandle, ...] = ()


@dataclass(frozen=True)
class JobTemplate:
    """What every job of a run shares: worker arguments apart from seed and job dir, or the user's
    command (`script`, a `ScriptArgs` template) that runs instead of cockpit's worker."""

    preset_arg: str
    env: str
    timesteps: int
    script: tuple[str, ...] | None = None
    episodes: int | None = None  # an episode target per job (`--episodes`) in place of `timesteps`
    tensorboard: bool = True  # the workers log SB3's scalars to <job dir>/tb (False: --no-tensorboard)
    # One torch thread per worker instead of its core budget: the probe measured that the preset's
    # train phase gains nothing from more (`Costs.one_torch_thread`).
    one_torch_thread: bool = False
    # The device each parallel slot's worker trains on (`--devices`), by slot; empty: the worker's choice.
    devices: tuple[str, ...] = ()
    eval_episodes: int | None = None  # score each job's model over this many episodes at its target (`--eval-episodes`)


# A job's exit reason when it failed the same way, before a single step, on two starts in a row.
INPUT_ERROR_EXIT = "failed: the same error at each start"


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def _usage(job: Job, sample: Sample | None) -> JobUsage | None:
    """The job's process tree in `sample` (None when it has no worker now: a sample taken before
    its exit was reaped still holds the worker's last reading), its GPU memory the worker's own
    report where NVML could not attribute any."""
    usage = sample.jobs.get(job.id) if sample is not None and job.handle is not None else None
    if usage is not None and usage.gpu_mem_bytes is None and job.cuda_reserved_bytes is not None:
        usage = dataclasses.replace(usage, gpu_mem_bytes=job.cuda_reserved_bytes)
    return usage


def _peak(job: Job, peak_gpu_mem: Mapping[str, int] | None) -> int | None:
    """The job's GPU memory peak: NVML's, else the worker's own report of it."""
    peak = (peak_gpu_mem or {}).get(job.id)
    return peak if peak is not None else job.cuda_peak_bytes


@functools.lru_cache(maxsize=1024)  # a fleet's jobs share a few preset files; snapshots come 5 times a second
def _preset_name(preset_arg: str) -> str:
    """A preset's name as the jobs table shows it: a name, or a preset file's stem."""
    return Path(preset_arg).stem


class Supervisor:
    """Runs a queue of jobs through `slots` parallel workers via a `Launcher`; crashed jobs
    restart as `restart` says (see the module docstring). `gpus` gives the GPUs jobs may be
    placed on as they are at the moment of a launch (none: no placement), and `peak_gpu_mem`
    each job's peak GPU memory measured so far (bytes by job id), which its previous GPU must
    still have free for the job to go back to it. `mps` is where the workers of each GPU meet
    their MPS daemon under `--mps` (None: no MPS); with `mps_clients` False the daemons stand ready
    and the jobs are not their clients until `SetMps(True)` (`run --auto` measuring MPS), or a
    daemon found running serves them anyway (`MpsServers.external`)."""

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
        pin: bool = False,
        clock: Clock | None = None,
        preset_name: str = "",
        gpus: Callable[[], Sequence[GpuRoom]] = tuple,
        peak_gpu_mem: Callable[[], Mapping[str, int]] = dict,
        mps: MpsServers | None = None,
        mps_clients: bool = True,
    ) -> None:
        self.run_dir = run_dir
        self.mps = mps  # under --mps: each GPU's daemon, whose pipes and logs each worker on that GPU gets
        # Whether the jobs launched from now on are the daemons' clients: `--auto` starts daemons
        # without them and turns them on and off (`SetMps`) to measure what MPS does.
        self.mps_clients = mps is not None and mps_clients
        self.mps_faults: list[MpsFault] = []
        self.gpus = gpus
        self.peak_gpu_mem = peak_gpu_mem
        self.template = template
        self.slots = slots
        self.launcher = launcher
        self.budget = budget
        self.restart = restart
        self.clock = clock or SystemClock()
        self.preset_name = preset_name
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
        self.trend = TrendRecorder()  # the run's SPS and best return, sampled by `snapshot`
        cpus = sorted(os.sched_getaffinity(0))
        self._pins = pin_sets(slots, cpus) if pin else None
        for seed in seeds:
            self._add(seed)

    # ----- commands (any thread) -----

    def submit(self, command: Control) -> None:
        """Queue a command; it takes effect at the next tick."""
        self._commands.put(command)

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
        return self.add_job(f"{len(self.jobs):03d}", seed, self.template.timesteps,
                            eval_episodes=self.template.eval_episodes)  # fmt: skip

    def add_job(
        self, job_id: str, seed: int, target: int, *, preset_arg: str | None = None, env: str | None = None,
        eval_episodes: int | None = None, queued: bool = True, episodes: int | None = None,
        preset_name: str | None = None, overrides: Overrides = (),
    ) -> Job:  # fmt: skip
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
        events = self._tails[job.id].read_new()
        for event in events:
            self._apply(job, event)
        job.attempt_finished = job.attempt_error = None
        if job.phase is not None:  # the earlier session's last phase ended with that session
            job.phases.append((events[-1].t, None))
        job.phase = job.phase_since = job.scoring = None
        # Mean SPS covers what this session trains, over this session's running time.
        job.steps_at_first_start, job.first_started_at = job.steps, None
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
            self._watch(job, now, reported=job.id in reported)
        for job in self.jobs.values():
            overdue = self._kill_now or now >= job.stop_deadline
            if job.state is JobState.STOPPING and job.handle is not None and overdue:
                self.launcher.kill(job.handle)
            due = job.state is JobState.BACKOFF and now >= job.restart_at and not self._interrupted
            if due and not self._mps_held(job):
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
                self.mps_clients = command.on
            return
        if isinstance(command, ApplyAdvice):
            self.warnings.append(f"advice {command.setting} -> {command.suggested} reached the supervisor unapplied")
            return
        if isinstance(command, AddJob):
            next_seed = max((j.seed for j in self.jobs.values()), default=-1) + 1
            self._add(command.seed if command.seed is not None else next_seed)
            return
        job = self.jobs.get(command.job_id)
        if job is None:
            self.warnings.append(f"no job {command.job_id!r}")
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
        if self._pins is not None:
            self._pins = pin_sets(slots, sorted(os.sched_getaffinity(0)))
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

    def _jobs_on_gpus(self, but: Job) -> dict[int, int]:
        """NVML index -> the jobs other than `but` that hold a slot on that GPU."""
        counts: dict[int, int] = {}
        for job in self.jobs.values():
            if job is not but and job.gpu is not None and job.state.holds_slot:
                counts[job.gpu.index] = counts.get(job.gpu.index, 0) + 1
        return counts

    def _known_peak(self, job: Job) -> int | None:
        """The job's GPU memory peak measured so far, this session's or a resumed run's record."""
        known = [p for p in (self.peak_gpu_mem().get(job.id), job.recorded_peak_gpu_mem) if p]
        return max(known, default=None)

    def _device(self, job: Job) -> DeviceRequest:
        """The device `job`'s slot trains on (`JobTemplate.devices`), else the worker's choice."""
        devices = self.template.devices
        if not devices or job.slot is None:
            return "auto"
        return "cpu" if devices[job.slot % len(devices)] == "cpu" else "cuda"

    def _place(self, job: Job) -> None:
        """Put `job` on its GPU for this launch (`cockpit.core.machine.placement`); None without a
        GPU, and for a job whose slot trains on the CPU (`--devices`): it takes no GPU's room."""
        if self._device(job) == "cpu":
            job.gpu = None
            return
        # The GPUs' compute modes bound the jobs on each unless they are MPS clients (`placement.job_limit`).
        room = place(self.gpus(), self._jobs_on_gpus(job), job.gpu, self._known_peak(job), mps=self.mps_clients)
        job.gpu = GpuRef(room.index, room.uuid) if room is not None else None

    def _launch(self, job: Job) -> None:
        now = self.clock.time()
        if job.slot is None:
            job.slot = self._free_slot()
        self._place(job)
        cpus = tuple(self._pins[job.slot % len(self._pins)]) if self._pins else None
        template = self.template
        args: WorkerArgs | ScriptArgs
        if template.script is not None:
            args = ScriptArgs(job.job_dir, job.id, job.seed, template.script, threads=self.budget.threads_per_job)
        else:
            episodes = job.target_episodes
            args = WorkerArgs(job.job_dir, preset=job.preset_arg or template.preset_arg, env=job.env or template.env,
                              device=self._device(job),
                              timesteps=job.target if episodes is None else None, episodes=episodes, seed=job.seed,
                              threads=self.budget.threads_per_job, eval_episodes=job.eval_episodes,
                              tensorboard=template.tensorboard,
                              torch_threads=1 if template.one_torch_thread else None)  # fmt: skip
        # Whatever an earlier worker wrote after its exit was read belongs to that attempt, not this one.
        for event in self._tails[job.id].read_new():
            self._apply(job, event)
        job.attempt_finished = job.attempt_error = None
        job.attempt_started_seen = False
        job.last_event_at, job.stalled_at, job.stall_reason = self.clock.monotonic(), None, None
        try:
            served = self.mps is not None and self.mps_clients and job.gpu is not None
            dirs = self.mps.for_gpu(job.gpu.index) if served and self.mps is not None and job.gpu is not None else None
            cap = mps_memory_limit_mib(self._known_peak(job)) if dirs is not None else None
            job.handle = self.launcher.launch(LaunchRequest(job.id, args, cpus, job.gpu,
                                                            dirs.pipe_dir if dirs is not None else None, cap,
                                                            dirs.log_dir if dirs is not None else None))  # fmt: skip
        except OSError as exc:
            job.error = f"could not start the worker: {exc}"
            job.change_state(JobState.STARTING, now)
            job.change_state(JobState.FAILED, now)
            job.slot, job.ended_at = None, now
            return
        job.attempt_started_at = now
        job.change_state(JobState.STARTING, now)
        if template.script is not None:  # nothing says when a script starts training: it runs
            job.change_state(JobState.RUNNING, now)
            job.exit_reason = NO_EVENTS_NOTE

    def _follow(self, job: Job) -> bool:
        """Apply the job's new events and reap its worker if it exited; True when it wrote events."""
        new = self._tails[job.id].read_new()
        for event in new:
            self._apply(job, event)
        if new:
            job.last_event_at = self.clock.monotonic()
            if job.state is JobState.STALLED and job.stall_reason is None:  # it reports again: not hung
                job.change_state(JobState.RUNNING, self.clock.time())
                job.stalled_at, job.exit_reason = None, job.reason_before_stall
        code = self.launcher.poll(job.handle)
        if code is not None:
            for event in self._tails[job.id].read_new():  # whatever it wrote just before exiting
                self._apply(job, event)
            self._exited(job, code)
        return bool(new)

    def _apply(self, job: Job, event: Event) -> None:
        # The longest silence between two events of one attempt (a `started` opens an attempt),
        # on the worker's timestamps: what the default stall timeout grows with.
        if job.last_event_t is not None and not isinstance(event, StartedEvent):
            job.longest_silence_s = max(job.longest_silence_s, event.t - job.last_event_t)
        job.last_event_t = event.t
        job.throughput.observe(event)  # a `started` event begins the new attempt's measure
        if job.exit_reason == NO_EVENTS_NOTE:
            job.exit_reason = None
        if isinstance(event, StartedEvent):
            job.attempt_started_seen = True
            if self.template.script is not None and event.target_steps:
                job.target = event.target_steps  # the script's own total: its progress and ETA
            job.device = event.device
            job.cuda_reserved_bytes = None  # a new worker: its allocator starts empty
            job.steps = job.attempt_from_step = event.resumed_from_step or 0
            job.episodes = event.resumed_episodes or 0
            if job.steps_at_first_start is None:
                job.steps_at_first_start, job.first_started_at = job.steps, event.t
            if job.state is JobState.STARTING:
                job.change_state(JobState.RUNNING, self.clock.time())
        elif isinstance(event, PhaseEvent):
            job.phase, job.phase_since, job.scoring = event.phase, event.t, None
            job.phases.append((event.t, event.phase))
            job.steps = event.num_timesteps
        elif isinstance(event, ProgressEvent):
            job.steps = event.num_timesteps
            job.rollout_sps, job.ep_rew_mean = event.sps, event.ep_rew_mean
            job.ep_len_mean, job.episodes = event.ep_len_mean, event.episodes or 0
            if event.cuda_reserved_bytes is not None:
                job.cuda_reserved_bytes = event.cuda_reserved_bytes
            if event.cuda_peak_bytes is not None:
                job.cuda_peak_bytes = max(job.cuda_peak_bytes or 0, event.cuda_peak_bytes)
        elif isinstance(event, CheckpointEvent):
            job.checkpoints += 1
            job.last_checkpoint_step = event.step
        elif isinstance(event, FinishedEvent) and job.attempt_started_seen:
            # A `finished` before this attempt's `started` is a previous worker's late word.
            job.attempt_finished = event
            job.steps = event.steps
        elif isinstance(event, ErrorEvent):
            job.attempt_error = event
        elif isinstance(event, EvaluatedEvent):
            job.evaluation = event
        elif isinstance(event, HeartbeatEvent) and event.scored is not None and event.to_score is not None:
            job.scoring = (event.scored, event.to_score)

    def _exited(self, job: Job, code: int) -> None:
        now = self.clock.time()
        handle, job.handle = job.handle, None
        if job.attempt_started_at is not None:
            job.active_seconds += now - job.attempt_started_at
        if job.phase is not None:
            job.phases.append((now, None))
            job.phase = job.phase_since = job.scoring = None
        finished = job.attempt_finished
        if self.template.script is not None:  # a script is done when it exits 0, whatever it reported
            finished = FinishedEvent(now, "done", job.steps) if code == 0 and not job.stop_requested else None
        if finished is not None and finished.status == "done":
            job.change_state(JobState.DONE, now)
            job.exit_reason, job.ended_at, job.slot = "done", now, None
            return
        if job.stop_requested or finished is not None:
            restart = job.exit_reason == "restart" and not self._interrupted
            job.change_state(JobState.STOPPED, now)
            job.ended_at, job.slot = now, None
            job.exit_reason = "stopped" if finished is not None else _exit_reason(code)
            if restart:
                self._requeue(job)
            return
        if self._pause_if_disk_full(job, code, now):
            return
        if job.stall_reason is not None:  # killed by the stall watch: its SIGKILL says nothing
            reason = job.stall_reason
        elif job.attempt_error is not None:
            reason = job.attempt_error.reason
        else:
            tail = self.launcher.stderr_tail(handle, 1)
            reason = _exit_reason(code) + (f": {tail}" if tail else "")
        job.error = reason
        if self._interrupted:
            job.change_state(JobState.STOPPED, now)
            job.exit_reason, job.ended_at, job.slot = _exit_reason(code), now, None
            return
        policy = self.restart
        if self._mps_collateral(job, code):
            return
        healthy = job.attempt_started_at is not None and now - job.attempt_started_at >= policy.healthy_uptime_s
        # The server's error, not the job's: its worker's last words may come before a traceback's tail.
        server_fault = mps_error(reason) or (handle is not None and mps_error(self.launcher.stderr_tail(handle, 20)))
        if self._input_error(job, code, reason, healthy, server_fault=server_fault):
            job.error = (
                f"{reason} (the same error on 2 starts in a row, each before a single step: the "
                "job's input, its env, preset or command, not a passing fault; fix it and resume the run)"
            )
            job.change_state(JobState.FAILED, now)
            job.exit_reason, job.ended_at, job.slot = INPUT_ERROR_EXIT, now, None
            return
        if healthy:
            job.restarts_in_a_row = 0  # this attempt was healthy: its crash is not part of a crash loop
        if job.restarts_in_a_row < policy.max_restarts:
            job.restarts_in_a_row += 1
            job.restarts += 1
            delay = min(policy.backoff_max_s, policy.backoff_s * 2 ** (job.restarts_in_a_row - 1))
            job.restart_at = self.clock.monotonic() + delay
            job.change_state(JobState.BACKOFF, now)
            job.exit_reason = job.stall_reason or _exit_reason(code)
        else:
            job.change_state(JobState.FAILED, now)
            job.exit_reason, job.ended_at, job.slot = f"failed after {job.restarts_in_a_row} restarts", now, None

    def _mps_collateral(self, job: Job, code: int) -> bool:
        """Under MPS, whether this crash is part of an MPS client fault already counted: another job
        of the same GPU crashed less than `MPS_FAULT_WINDOW_S` ago. Such a job goes to back-off
        with the fault's first job, to restart from its checkpoint when that one does, without
        counting against its own policy; the fault's warning then names it too. A first crash
        opens a possible fault and is counted as usual (returns False). A kill by the stall watch
        is the cockpit's doing, not a client fault."""
        if not self._mps_served or job.gpu is None or job.stall_reason is not None:
            return False
        now_mono, now = self.clock.monotonic(), self.clock.time()
        index = job.gpu.index
        fault = next((f for f in reversed(self.mps_faults) if f.gpu == index and now_mono - f.at <= MPS_FAULT_WINDOW_S),
                     None)  # fmt: skip
        if fault is None:
            # Its restart time is set by the caller's count; the fault learns it on its second job.
            # A fault is kept while it may grow, and while its jobs wait for the others of its GPU.
            waiting = {j.id for j in self.jobs.values() if j.state is JobState.BACKOFF}
            self.mps_faults = [f for f in self.mps_faults
                               if now_mono - f.at <= MPS_FAULT_WINDOW_S or waiting.intersection(f.jobs)]  # fmt: skip
            clients = tuple(o.handle for o in self.jobs.values()
                            if o.handle is not None and o.gpu is not None and o.gpu.index == index)  # fmt: skip
            self.mps_faults.append(MpsFault(index, now_mono, [job.id], restart_at=None, warning=-1, clients=clients))
            return False
        first = self.jobs.get(fault.jobs[0])
        if fault.restart_at is None:
            fault.restart_at = first.restart_at if first is not None and first.state is JobState.BACKOFF else now_mono
        fault.jobs.append(job.id)
        job.restarts += 1  # it did restart: shown, but not part of any crash loop of its own
        job.prestep_error = None
        job.restart_at = fault.restart_at
        job.change_state(JobState.BACKOFF, now)
        job.exit_reason = f"MPS client fault on GPU {index}: {_exit_reason(code)}"
        line = (f"MPS: a client fault on GPU {index} ended {len(fault.jobs)} jobs at once ({', '.join(fault.jobs)}); "
                "each restarts from its checkpoint, counted as one crash")  # fmt: skip
        if fault.warning < 0:
            fault.warning = len(self.warnings)
            self.warnings.append(line)
        else:
            self.warnings[fault.warning] = line
        return True

    @property
    def _mps_served(self) -> bool:
        """Whether the jobs launched now on GPUs are MPS clients: under `--mps` (or `SetMps`), or
        of a daemon found running, which serves every CUDA process here."""
        return self.mps_clients or (self.mps is not None and self.mps.external)

    def _mps_held(self, job: Job) -> bool:
        """Whether `job`, due to restart, waits for the other clients of its GPU's MPS server to go
        (module docstring): it crashed in an MPS fault (or in what may still become one, within
        `MPS_FAULT_WINDOW_S`) and another job of that GPU still has a worker. The server refuses new
        clients until all those of the fault exited; a job of another GPU never holds it."""
        if not self._mps_served or job.gpu is None:
            return False
        fault = next((f for f in reversed(self.mps_faults) if job.id in f.jobs), None)
        if fault is None:
            return False
        if len(fault.jobs) < 2 and self.clock.monotonic() - fault.at > MPS_FAULT_WINDOW_S:
            return False  # a crash of its own: no other client of its GPU went with it
        # The server's clients at the fault that are not yet reaped (a worker launched since is
        # no client of it, and the fault's own jobs restart together).
        return any(self.jobs[h.job_id].handle is h for h in fault.clients if h.job_id in self.jobs)

    @staticmethod
    def _input_error(job: Job, code: int, reason: str, healthy: bool, *, server_fault: bool = False) -> bool:
        """Whether this crash repeats the previous attempt's: the same error, from the job itself (an
        exit code, not a signal, a stall, a full disk or an error of the MPS server, `server_fault`),
        before a single step, twice in a row. A restart would only repeat it. Remembers this
        attempt's error for the next one's question."""
        stepped = job.attempt_started_seen and job.steps > job.attempt_from_step
        own = code >= 0 and job.stall_reason is None and not server_fault
        previous, job.prestep_error = job.prestep_error, None if stepped or healthy or not own else reason
        return job.prestep_error is not None and previous == reason

    def stall_timeout(self, job: Job) -> float:
        """Seconds without an event after which `job`'s running worker is stalled (the policy's
        `--stall-timeout`, else derived from the job's longest silence so far)."""
        return self.restart.stall_timeout(job.longest_silence_s)

    def _watch(self, job: Job, now: float, *, reported: bool = False) -> None:
        """The stall watch for a job that has started training (see the module docstring): mark it
        stalled when its worker is silent past the timeout or stopped by a signal, and kill it once
        it is silent past the timeout and has been stalled for `STALL_GRACE_S`. Its exit, at a
        later tick, restarts it through `_exited` with `stall_reason` as its error.

        `reported`: the worker wrote events since the previous tick. Its process state is then not
        asked for (`Launcher.stopped` reads /proc, at every tick the costliest part of following a
        busy worker): it ran a moment ago, and a stopped worker writes nothing, so a stop still
        shows at the next tick."""
        if job.state not in (JobState.RUNNING, JobState.STALLED) or job.handle is None or job.stall_reason:
            return
        if self.template.script is not None and not job.attempt_started_seen:
            return  # a script without CockpitCallback writes no events: its silence is no stall
        silent, timeout = now - job.last_event_at, self.stall_timeout(job)
        stopped = not reported and self.launcher.stopped(job.handle)
        if job.state is JobState.RUNNING:
            if silent >= timeout or stopped:
                job.change_state(JobState.STALLED, self.clock.time())
                # Why it is where it is, until it is killed or reports again (then the old reason).
                job.stalled_at, job.reason_before_stall = now, job.exit_reason
                why = "process stopped by a signal" if stopped else f"no events for {silent:.0f} s"
                job.exit_reason = f"stalled: {why}; killed after {timeout:.0f} s without events"
            return
        assert job.stalled_at is not None  # set with the state
        if silent >= timeout and now - job.stalled_at >= STALL_GRACE_S:
            signal_note = " (process stopped by a signal)" if stopped else ""
            job.stall_reason = f"stalled: no events for {silent:.0f} s{signal_note}"
            self.launcher.kill(job.handle)

    def _pause_if_disk_full(self, job: Job, code: int, now: float) -> bool:
        """Pause a job whose worker ran out of disk space (its `disk_full` error event, or its exit
        code alone when not even that event fit) and return True. A restart would fill the same
        disk again and burn the restart policy in a loop; `RestartJob` or `run --resume` continues
        the job from its last checkpoint once there is room."""
        error = job.attempt_error
        if error is not None and error.type == DISK_FULL_ERROR:
            detail = error.message
        elif code == DISK_FULL_EXIT and self.template.script is None:  # a user's script means its own by 3
            detail = f"{free_space(job.job_dir)} free on {job.job_dir}"
        else:
            return False
        job.error = f"disk full: {detail}"
        job.change_state(JobState.PAUSED, now)
        job.exit_reason, job.ended_at, job.slot = "paused: disk full", now, None
        return True

    # ----- results -----

    @property
    def finished(self) -> bool:
        """True when no job will run again without a command (or, interrupted, none is live)."""
        if self._interrupted:
            return not any(j.state.live for j in self.jobs.values())
        return all(j.state.terminal for j in self.jobs.values()) and not self.pending_work()

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

    def _shown(self) -> list[Job]:
        """The jobs front ends get: all of them, or with `view_limit` the ones not ended and the
        latest ended ones (a fleet of 500 agents shows what runs now, not 500 rows)."""
        if self.view_limit is None:
            return list(self.jobs.values())
        ended = sorted((j for j in self.jobs.values() if j.state.terminal), key=lambda j: j.ended_at or j.state_since)
        keep = {j.id for j in ended[len(ended) - self.view_limit :]} if self.view_limit else set()
        return [j for j in self.jobs.values() if not j.state.terminal or j.id in keep]

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
        """An immutable RunState for the front ends (with `all_jobs`, every job despite `view_limit`);
        `memory` is the leak watch's verdict per job. What the supervisor does not own (the sampler's
        GPUs and their status, the --auto log and the advisor's suggestions, the run's name) is
        passed through to the state. It also offers the run's figures to its trend (`self.trend`),
        which keeps a point once a second however often it is called.

        A job's GPU memory and its peak are NVML's (from `sample` and `peak_gpu_mem`: the job's
        processes as the driver counts them, CUDA context included); where NVML cannot say which
        process is the job's (None: a container without `--pid=host`), they are the worker's own
        reports (`Job.cuda_reserved_bytes`, `Job.cuda_peak_bytes`: its caching allocator's, without
        the context), which the advisor's GPU-memory caps and run.toml's peak then use too."""
        views = []
        now = self.clock.time()
        memory = memory or {}
        for job in self.jobs.values() if all_jobs else self._shown():
            # A worker's throughput is measured until it exits; an ended attempt keeps its last figure.
            measured_at = now if job.state.live else job.state_since
            sps = job.throughput.rate(measured_at)
            views.append(
                job_view(
                    job=JobSetup(id=job.id, seed=job.seed, env=job.env,
                                 preset=job.preset_name or (_preset_name(job.preset_arg) if job.preset_arg else None),
                                 overrides=job.overrides, target=job.target, target_episodes=job.target_episodes),
                    life=JobLife(state=job.state, phase=job.phase, phase_since=job.phase_since, restarts=job.restarts,
                                 checkpoints=job.checkpoints, last_checkpoint_step=job.last_checkpoint_step,
                                 error=job.error, exit_reason=job.exit_reason, started_at=job.first_started_at,
                                 ended_at=job.ended_at),
                    progress=JobProgress(steps=job.steps, episodes=job.episodes, sps=sps, mean_sps=job.mean_sps,
                                         rollout_sps=job.rollout_sps, ep_rew_mean=job.ep_rew_mean,
                                         ep_len_mean=job.ep_len_mean,
                                         episodes_per_h=job.throughput.episodes_per_h(measured_at),
                                         scored=job.scoring[0] if job.scoring else None,
                                         to_score=job.scoring[1] if job.scoring else None),
                    telemetry=JobTelemetry(pid=job.handle.pid if job.handle is not None else None, device=job.device,
                                           gpu=job.gpu.index if job.gpu is not None else None,
                                           node=job.handle.node if job.handle is not None else None,
                                           usage=_usage(job, sample), peak_gpu_mem_bytes=_peak(job, peak_gpu_mem),
                                           memory=memory.get(job.id)),
                )
            )  # fmt: skip
        # Every job's return counts, not only the shown ones: a fleet's best agent may have ended.
        trend = self.trend.observe(
            self.clock.monotonic(),
            now,
            lambda: (stepping_sps(views), best_return(job.ep_rew_mean for job in self.jobs.values())),
        )  # fmt: skip
        return RunState(
            run_dir=str(self.run_dir),
            preset=self.preset_name,
            env=self.template.env,
            status=self.status,
            started_at=self.started_at,
            now=now,
            slots=self.slots,
            jobs=tuple(views),
            sample=sample,
            gpu=gpu,
            gpus=gpus,
            gpu_status=gpu_status,
            warnings=tuple(self.warnings),
            threads_per_job=self.budget.threads_per_job,
            physical_cores=self.budget.physical_cores,
            advice=advice,
            suggestions=suggestions,
            eta_s=run_eta(views, self.slots),
            name=name,
            trend=trend,
            mps=self.mps_clients,
            mps_external=self.mps.shared.pipe_dir
            if self.mps is not None and self.mps.external and self.mps.shared is not None
            else None,
        )
