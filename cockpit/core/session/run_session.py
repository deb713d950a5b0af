"""A run from start to exit: supervisor, sampler and run log wired together, views fed snapshots.

The session loop runs on the main thread at 5 Hz: it ticks the supervisor, tells the sampler which
processes to follow, hands the front end a fresh `RunState`, and rewrites `run.toml` every ~10 s.
SIGINT and SIGTERM only ask the supervisor to stop (a second one kills the workers at once); the
loop then waits for every job to checkpoint and exit, and writes the final run log. While it runs,
the session serves its states, telemetry and phases on the run's control socket (`control.py`),
where any number of viewers attach; it is their `ControlProvider`.

The loop also watches the run directory (`rundirwatch.py`). When it is deleted, moved away,
replaced or stays unwritable, the workers have nowhere left to checkpoint into: the session kills
them at once, skips the final run log, and `run()` returns with `lost` saying what happened (the
`run` command prints it in one line and exits `RUN_DIR_LOST_EXIT`).
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import fcntl
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cockpit.contract.advice import Advice, AdviceSetting
from cockpit.contract.controls import AddJob, ApplyAdvice, Control, RestartJob, SetMps, SetPreset, SetSlots, shown
from cockpit.contract.costs import Costs, MpsGain
from cockpit.contract.files import write_atomic
from cockpit.contract.presets import largest_divisor_at_most, to_toml
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import AdviceRecord, RunRecord, iso
from cockpit.contract.runrecord import write as write_record
from cockpit.contract.runspec import ConfigError, RunSpec
from cockpit.contract.settings import RunSettings, resumed
from cockpit.contract.states import JobState, RunStatus
from cockpit.contract.workerargs import MpsServers
from cockpit.core.export.tensorboard import TensorBoardScalars
from cockpit.core.feed.control import ControlError, ControlServer
from cockpit.core.feed.snapshot import RunState
from cockpit.core.feed.source import WINDOW_S, Transition
from cockpit.core.fleet.run import FleetRun
from cockpit.core.launch.protocol import Launcher, RemoteJobs
from cockpit.core.machine.clock import Clock
from cockpit.core.machine.host import HostInfo
from cockpit.core.machine.nvml import GpuReader, close_gpus, keep_gpus
from cockpit.core.machine.visibility import with_slices
from cockpit.core.record.runlog import Recorder, phase_accounting, record
from cockpit.core.session.clips import SessionClips
from cockpit.core.session.on_done import run_on_done
from cockpit.core.sizing.advisor import (
    CHEAP_ENVS_PER_CORE,
    MAX_ENVS_SCALE,
    Measurements,
    advise,
    job_measure,
    machine_of,
    memory_advice,
)
from cockpit.core.sizing.autotune import AutoTuner
from cockpit.core.sizing.mps_gains import record_mps_gain
from cockpit.core.supervise.rundirwatch import RunDirWatch
from cockpit.core.supervise.supervisor import STOP_GRACE_S, Supervisor
from cockpit.core.telemetry.phases import Accounting, phases_since, prune
from cockpit.core.telemetry.sampler import Sample, Sampler

TICK_S = 0.2
# With nobody watching live (headless, no viewer attached, no --auto), the run's state is built this
# often rather than every tick: building it goes over every job the view shows, and a fleet's view
# over every agent, while headless prints a line at most every few seconds. Jobs are still followed
# and slots filled at every tick.
UNWATCHED_STATE_S = 1.0
# A viewer that fetched the state this recently is watching: the state is built at every tick.
WATCHED_FOR_S = 2.0
RUN_LOG_EVERY_S = 10.0  # also how often the advisor looks at the run again
# After a write of run.toml failed (a full disk), the next try comes this soon: the file is
# written again as soon as there is room, not up to RUN_LOG_EVERY_S later.
RUN_LOG_RETRY_S = 2.0
ADVICE_CPU_SAMPLES = 300  # the last minute at 5 Hz
CONTROL_LINGER_S = 1.0  # how long the final state stays served for viewers still polling


class View(Protocol):
    """A front end: it renders snapshots and never owns run state."""

    def update(self, state: RunState) -> None:
        """Show the run as it is now (called at every tick)."""
        ...

    def close(self, state: RunState) -> None:
        """Show the final state and release the terminal."""
        ...


EXIT_CODES = {RunStatus.DONE: 0, RunStatus.FAILED: 1}
RUN_DIR_LOST_EXIT = 3  # the run directory was deleted or became unwritable; the workers were killed


def live_measurements(state: RunState, accounting: Accounting, history: Sequence[Sample]) -> Measurements:
    """What the advisor measures of a live run: each job's latest SPS and CPU %, not its means (the
    advice follows the run now), its phases and memory, and the machine's CPU over the newest
    `ADVICE_CPU_SAMPLES` of `history`."""
    jobs = tuple(
        job_measure(
            job.id,
            sps=job.sps,
            phases=accounting.jobs.get(job.id, {}),
            gpu_mem_peak_bytes=job.peak_gpu_mem_bytes,
            cpu_percent=job.cpu_percent,
            error=job.error,
            memory_growth_mib_h=job.memory_growth_mib_h,
            gpu_memory_growth_mib_h=job.gpu_memory_growth_mib_h,
            gpu=job.gpu,
        )
        for job in state.jobs
    )
    recent = [s.cpu_total_percent for s in history[-ADVICE_CPU_SAMPLES:]]
    cpu = sum(recent) / len(recent) if recent else None
    return Measurements(jobs, accounting.gpu_util_mean, accounting.gpu_util_while_training, cpu)


# What a machine can hold, for the commands a viewer sends (`RunSession.slot_limit`): the advisor's
# table lets a core step at most CHEAP_ENVS_PER_CORE envs, so with at least one env a job no sizing
# of cockpit's asks more jobs a CPU than that; and a worker with PyTorch loaded holds more than
# 256 MiB of memory.
JOBS_PER_CPU = CHEAP_ENVS_PER_CORE
JOB_MIN_RAM = 256 * 1024**2


def slot_limit(slots: int, host: HostInfo) -> int:
    """The most jobs a run of `--jobs slots` on `host` may run at once, and keep waiting for a
    slot: what the machine holds, `JOBS_PER_CPU` a logical CPU and one a `JOB_MIN_RAM` of its
    memory, whichever is fewer; or `slots` where that is more."""
    machine = min(JOBS_PER_CPU * host.logical_cores, host.ram_bytes // JOB_MIN_RAM)
    return max(slots, machine, 1)


def check_bounds(command: Control, slots: int, host: HostInfo, waiting: Callable[[], int]) -> None:
    """ValueError (one line) for a command that asks a run of `--jobs slots` on `host` for more
    than it holds (`slot_limit`): more slots, a job added while as many already wait (`waiting()`:
    the jobs queued and the commands not yet handled), jobs advice that would add past it."""
    limit = slot_limit(slots, host)
    gib = host.ram_bytes / 1024**3
    at_most = (
        f"this run runs at most {limit} jobs at once ({JOBS_PER_CPU} a logical CPU, one a {JOB_MIN_RAM // 1024**2} "
        f"MiB of memory: {host.logical_cores} CPUs and {gib:.1f} GiB here; --jobs {slots})"
    )
    if isinstance(command, SetSlots) and command.slots > limit:
        raise ValueError(f"set_slots {command.slots}: {at_most}")
    if isinstance(command, AddJob) and (queued := waiting()) >= limit:
        raise ValueError(f"add: {queued} jobs already wait for a slot, and {at_most}")
    if isinstance(command, ApplyAdvice) and command.setting is AdviceSetting.JOBS:
        value = 0  # not a number: refused as advice (`RunSession._apply`), in one line too
        with contextlib.suppress(ValueError):
            value = int(command.suggested)
        if value > limit:  # each job it lacks becomes an AddJob
            raise ValueError(f"advice jobs -> {value}: {at_most}")


@dataclass
class RunSession:
    """One `cockpit run` (or `--resume`, or a `cockpit fleet`), as `startup.start_session` builds
    it: its supervisor, the sampler and the recorder that keeps its samples, ready to `run()`.

    With `serve` (the default), `run()` serves the run on its control socket; if the socket cannot
    be set up, the run goes on unserved and says why in its warnings.
    """

    spec: RunSpec
    sampler: Sampler
    supervisor: Supervisor
    recorder: Recorder
    clock: Clock
    host: HostInfo
    serve: bool = True
    auto: AutoTuner | None = None  # `--auto`: the loop that sizes the parallel jobs
    costs: Costs | None = None  # what a job of the preset costs here, if measured (`cockpit.core.sizing.cost_probe`)
    tensorboard: TensorBoardScalars | None = None  # each job's cockpit scalars, unless --no-tensorboard
    # A fleet (`cockpit fleet`): it got the supervisor and feeds its queue.
    fleet: FleetRun | None = None
    # Under --mps: where the jobs of each GPU meet their MPS daemon (`cockpit.core.machine.mps_daemon`); a
    # daemon found running, with or without --mps (`MpsServers.external`).
    mps: MpsServers | None = None
    clips: SessionClips | None = None  # --video-every's and a fleet's [video] clips (session/clips.py)

    def __post_init__(self) -> None:
        # The preset the jobs train now (applied advice changes it); None for a script run.
        self._preset = (
            dataclasses.replace(self.spec.loaded_preset, env=self.spec.env) if self.spec.loaded_preset else None
        )
        self._suggestions: tuple[Advice, ...] = ()
        self._mps_kept = False  # --auto's MPS measurement is in mps.toml
        self._applied: list[AdviceRecord] = []
        # Jobs on other machines have no local pid to follow: their launcher reports them, and their nodes.
        self._remote = isinstance(self.launcher, RemoteJobs)
        self.log_failure: str | None = None
        self._latest: RunState | None = None  # written by the loop, read by control threads
        self._watch: RunDirWatch | None = None  # from the start of `run()`
        # Set when the run directory was lost: "run directory X was deleted ...; the workers were stopped ..."
        self.lost: str | None = None
        self._view_failure: str | None = None
        self._watched_at: float | None = None  # time.monotonic() of a viewer's latest fetch
        self._fleet_view: tuple[float, Any] | None = None  # (when, FleetView): refreshed once a second

    @property
    def launcher(self) -> Launcher:
        """What starts the run's jobs: the supervisor's."""
        return self.supervisor.launcher

    def submit(self, command: Control) -> None:
        """Send a command to the supervisor (thread-safe); the TUI uses this too. An
        `ApplyAdvice` becomes the supervisor commands that carry it out; ValueError (one line)
        for advice that cannot be applied to a running run, and for a command past what this
        machine can run (`check_bounds`)."""
        check_bounds(command, self.spec.slots, self.host, self.supervisor.waiting)
        if isinstance(command, ApplyAdvice):
            for step in self._apply(command):
                self.supervisor.submit(step)
            return
        self.supervisor.submit(command)

    def _apply(self, advice: ApplyAdvice) -> list[Control]:
        if advice.setting is AdviceSetting.MEMORY:
            raise ValueError("memory advice changes no setting: it says what to look for in the job that grows")
        if advice.setting is AdviceSetting.MPS:
            return self._apply_mps(advice)
        if not advice.setting.live:
            raise ValueError(f"{advice.setting} cannot change under running jobs: start a new run with it")
        state = self._latest
        try:
            value = int(advice.suggested)
        except ValueError:
            value = 0
        if state is None or value < 1:
            raise ValueError(f"advice {advice.setting} -> {shown(advice.suggested)}: nothing to apply yet")
        if advice.setting is AdviceSetting.JOBS:
            missing = max(0, value - state.slots - state.count(JobState.QUEUED))
            steps: list[Control] = [AddJob() for _ in range(missing)]
            self._log_applied(advice)
            return [*steps, SetSlots(value)]
        preset = self._preset
        if preset is None:
            raise ValueError(f"{advice.setting} is the script's own setting: cockpit does not change it")
        if advice.setting is AdviceSetting.N_ENVS:
            batch = largest_divisor_at_most(value * preset.n_steps, preset.batch_size)
            preset = dataclasses.replace(preset, n_envs=value, batch_size=batch)
        elif preset.total_batch % value == 0:
            preset = dataclasses.replace(preset, batch_size=value)
        else:
            raise ValueError(f"batch_size {value} does not divide n_envs x n_steps = {preset.total_batch}")
        path = RunDir(self.spec.run_dir).preset_file(len(self._applied) + 1).resolve()
        write_atomic(path, to_toml(preset))
        self._preset = preset
        self._log_applied(advice)
        # Each live job checkpoints and resumes under the new rollout and batch settings.
        return [SetPreset(str(path)), *(RestartJob(j.id) for j in state.jobs if j.state.active)]

    def _apply_mps(self, advice: ApplyAdvice) -> list[Control]:
        """MPS on or off under running jobs: only with the run's daemon standing (`--mps`, or
        `--auto` where one could be started). Each live job checkpoints and resumes as a client
        of it, or not."""
        if advice.suggested not in ("on", "off"):
            raise ValueError(f"advice mps -> {shown(advice.suggested)}: MPS is turned on or off once measured")
        if self.mps is None:
            raise ValueError("mps cannot change under running jobs without an MPS daemon: start a new run with --mps")
        if self.mps.external and self.mps.shared is not None:
            raise ValueError(
                f"mps cannot change: the daemon at {self.mps.shared.pipe_dir} serves every CUDA process here"
            )
        state = self._latest
        self._log_applied(advice)
        live = [RestartJob(j.id) for j in state.jobs if j.state.active] if state is not None else []
        return [SetMps(advice.suggested == "on"), *live]

    def _log_applied(self, advice: ApplyAdvice) -> None:
        self._applied.append(
            AdviceRecord(
                at=iso(self.clock.time()) or "",
                action="apply",
                setting=advice.setting.value,
                suggested=advice.suggested,
            )
        )

    # ----- ControlProvider (called from the control server's threads) -----

    def latest_state(self) -> RunState | None:
        """The latest state built (the final state once the run ended), None before the first. An
        attached viewer asking for it makes the loop build a state at every tick while it asks."""
        self._watched_at = time.monotonic()
        return self._latest

    def samples_since(self, t: float) -> list[Sample]:
        """The sampler's kept samples newer than `t`, oldest first."""
        history = self.sampler.history()
        return history[bisect.bisect_right(history, t, key=lambda sample: sample.t) :]

    def phases_since(self, since: Mapping[str, float]) -> dict[str, list[Transition]]:
        """For each job in `since`, its phase transitions after that time (`phases.phases_since`)."""
        # The loop thread adds jobs and appends transitions while this runs: copying a dict or a
        # list is one step under the GIL, so work on copies and never iterate the originals.
        jobs = dict(self.supervisor.jobs)
        return {job_id: phases_since(list(jobs[job_id].phases), t) for job_id, t in since.items() if job_id in jobs}

    def snapshot(self, *, all_jobs: bool = False) -> RunState:
        """The run as it is now (a fleet's: its live and latest jobs, or with `all_jobs` every one)."""
        state = self.supervisor.snapshot(
            self.sampler.latest(),
            dict(self.sampler.peak_gpu_mem),
            all_jobs=all_jobs,
            gpu=self.sampler.gpu_info,
            gpus=self.sampler.gpu_infos,
            gpu_status=self.sampler.gpu_status,
            advice=tuple(change.line() for change in self.auto.log) if self.auto is not None else (),
            suggestions=self._suggestions,
            name=self.spec.name,
            memory=self.recorder.memory.verdicts(),
        )
        if self.fleet is None:
            return state
        now = self.clock.monotonic()
        if self._fleet_view is None or now - self._fleet_view[0] >= 1.0 or not state.status.live:
            # Its tiers and leaderboard go over every agent: once a second is plenty for 500 of them.
            self._fleet_view = (now, self.fleet.view(state.sps, state.now - state.started_at))
        fleet = self._fleet_view[1]
        return dataclasses.replace(state, fleet=fleet, eta_s=fleet.eta_s)

    def _advice_log(self) -> list[AdviceRecord]:
        auto = [change.record() for change in self.auto.log] if self.auto is not None else []
        return sorted(auto + self._applied, key=lambda entry: entry.at)

    def _advise(self, state: RunState, accounting: Accounting) -> None:
        measured = live_measurements(state, accounting, self.sampler.history())
        if self.spec.loaded_preset is None or self._preset is None:
            # A script run's settings are the script's: no advice on them; but its memory is watched.
            self._suggestions = tuple(memory_advice(measured))
            return
        machine = machine_of(self.host, self.sampler.gpu_info, [r.info for r in self.sampler.gpus])
        cap = self.spec.loaded_preset.n_envs * MAX_ENVS_SCALE  # of the preset the run began with
        self._suggestions = tuple(
            advise(machine, self._preset, state.slots, measured, self.costs, max_envs=cap, mps=self.spec.mps)
        )

    def write_run_log(self, state: RunState, *, final: bool = False) -> None:
        """Rewrite run.toml atomically; a failure (full disk) is recorded, not raised. A sample
        file that stopped growing (the recorder's failure) becomes a warning the views show."""
        failed = self.recorder.failed
        if failed is not None and failed not in self.supervisor.warnings:
            self.supervisor.warnings.append(failed)
        phases = {job.id: list(job.phases) for job in self.supervisor.jobs.values()}
        placement = {job.id: job.gpu.index for job in self.supervisor.jobs.values() if job.gpu is not None}
        accounting = phase_accounting(phases, self.recorder, state.now, final=final, placement=placement)
        folded = self.recorder.accountant.folded_until
        if folded is not None:  # keep what is not summed up yet, and what viewers still show
            for job in self.supervisor.jobs.values():
                prune(job.phases, min(folded, state.now - WINDOW_S))
        self._advise(state, accounting)
        if self.fleet is not None:  # the record lists every agent that ran, not the view's latest few
            state = dataclasses.replace(self.snapshot(all_jobs=True), status=state.status)
        try:
            write_record(
                self.spec.run_dir,
                record(self.spec, state, self.host, accounting, self.recorder, advice=self._advice_log()),
            )
            self.log_failure = None
        except OSError as exc:
            if self._watch is not None and self._watch.check(force=True) is not None:
                return  # the run dir itself is gone: the loop's next look reports that, not this write
            self.log_failure = f"run.toml not updated: {exc.strerror or exc}"
            if self.log_failure not in self.supervisor.warnings:
                self.supervisor.warnings.append(self.log_failure)

    def run(
        self, view: View, *, on_tick: Callable[[RunState], Any] | None = None, handle_signals: bool = True
    ) -> RunState:
        """Run every job to the end (or until interrupted) and return the final state.

        SIGINT, SIGTERM and SIGHUP (a dropped ssh session) all stop the run cleanly; that needs the
        main thread, so a session run elsewhere (a test beside a TUI) passes `handle_signals=False`
        and is stopped with a `StopAll` command. If the loop
        itself fails, the workers are stopped (then killed) before the error propagates, and
        the run log still gets its final write.
        """
        self.spec.run_dir.mkdir(parents=True, exist_ok=True)
        self._lock = os.open(RunDir(self.spec.run_dir).lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock)
            raise ConfigError(f"{self.spec.run_dir}: another cockpit is running this run") from None
        self._watch = RunDirWatch(self.spec.run_dir, self.clock)
        signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP) if handle_signals else ()
        previous = {sig: signal.getsignal(sig) for sig in signals}

        def on_signal(signum: int, _frame: Any) -> None:
            self.supervisor.interrupt(signum)

        for sig in signals:
            signal.signal(sig, on_signal)
        server = self._serve() if self.serve else None
        self.sampler.start()
        try:
            try:
                self._loop(view, on_tick)
            except BaseException:
                self._drain()
                raise
            finally:
                self.sampler.stop()
                state = self._latest = self.snapshot(all_jobs=True)
                if self.lost is None:  # else there is no run dir to write into (or a stranger's)
                    warned = len(self.supervisor.warnings)
                    self._write_scalars(state, final=True)
                    self.write_run_log(state, final=True)
                    if len(self.supervisor.warnings) > warned:  # the last words say it was not written
                        state = self._latest = self.snapshot(all_jobs=True)
                self.recorder.close()
                if self.tensorboard is not None:
                    self.tensorboard.close()
                if self.clips is not None:  # after the run's record: Ctrl-C or SIGTERM ends their wait
                    state = self._latest = self.clips.finish(self)
                if self.fleet is not None:
                    self.fleet.close()
            if self.lost is not None:
                # Viewers attached over the socket learn why from the final state; the `run`
                # command prints `lost` itself, so the headless view is not handed it twice.
                self._latest = dataclasses.replace(state, warnings=(*state.warnings, self.lost))
            self._show(view.close, state)
            return state
        finally:
            if server is not None:
                server.stop()  # lingers until attached viewers have fetched the final state
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _serve(self) -> ControlServer | None:
        """Start the control server; on failure warn and carry on (the run matters more than viewers)."""
        server = ControlServer(self.spec.run_dir, self, linger_s=CONTROL_LINGER_S)
        try:
            server.start()
        except (ControlError, OSError) as exc:
            self.supervisor.warnings.append(f"no control socket, nothing can attach: {exc}")
            return None
        return server

    def _watched(self, on_tick: Callable[[RunState], Any] | None) -> bool:
        """True when someone follows every tick's state: `on_tick`, --auto, or a viewer that asked
        for the state within `WATCHED_FOR_S`."""
        recently = self._watched_at is not None and time.monotonic() - self._watched_at < WATCHED_FOR_S
        return on_tick is not None or self.auto is not None or recently

    def _loop(self, view: View, on_tick: Callable[[RunState], Any] | None) -> None:
        last_log = last_state = None
        next_tick = self.clock.monotonic()
        assert self._watch is not None
        while True:
            # Before the tick, which may launch a worker (a restart after a back-off): its launch
            # would make the deleted directory again.
            gone = self._watch.check()
            if gone is not None:
                self._abandon(gone)
                return
            self.supervisor.tick()
            self.sampler.set_jobs({} if self._remote else self.supervisor.live_pids())
            now = self.clock.monotonic()
            due = last_state is None or now - last_state >= UNWATCHED_STATE_S - TICK_S / 2
            every = RUN_LOG_EVERY_S if self.log_failure is None else RUN_LOG_RETRY_S
            log_due = last_log is None or now - last_log >= every
            if due or log_due or self._watched(on_tick) or self.supervisor.finished:
                state = self._latest = self.snapshot()
                last_state = now
                self._hand_out(state, view, on_tick)
                if log_due:
                    self.write_run_log(state)
                    last_log = now
                if self.supervisor.finished:
                    return
            next_tick += TICK_S
            self.clock.sleep(next_tick - self.clock.monotonic())

    def _hand_out(self, state: RunState, view: View, on_tick: Callable[[RunState], Any] | None) -> None:
        """Give a new state to everything that follows the run: --auto, the view, TensorBoard's
        scalars and `on_tick`."""
        if self.auto is not None:
            for command in self.auto.tick(state):
                self.submit(command)
            self._keep_mps_gain()
        self._show(view.update, state)
        self._write_scalars(state)
        if self.clips is not None:
            self.clips.tick(state)
        if on_tick is not None:
            on_tick(state)

    def _keep_mps_gain(self) -> None:
        """Once --auto has measured MPS, keep the two figures for `recommend` (`mps_gains`), once."""
        assert self.auto is not None
        measured, gpu = self.auto.mps_measured, self.sampler.gpu_info
        if measured is None or self._mps_kept or self._preset is None or gpu is None:
            return
        self._mps_kept = True
        jobs, sps_off, sps_on = measured
        record_mps_gain(
            self._preset, gpu.name, MpsGain(jobs, sps_off, sps_on, "cockpit run --auto", iso(self.clock.time()) or "")
        )

    def _write_scalars(self, state: RunState, *, final: bool = False) -> None:
        """Write each job's cockpit scalars for TensorBoard when they are due (every few seconds)
        and at the end; a failed write ends them with one warning."""
        board = self.tensorboard
        if board is None or not (final or board.due(state.now)):
            return
        phases = {job.id: list(job.phases) for job in self.supervisor.jobs.values()}
        board.update(state, self.sampler.history(), phases, final=final)
        if board.failed is not None and board.failed not in self.supervisor.warnings:
            self.supervisor.warnings.append(board.failed)

    def _show(self, show: Callable[[RunState], None], state: RunState) -> None:
        """Hand the view a state; a view whose output cannot be written (its log on a full disk)
        costs a warning, not the run."""
        try:
            show(state)
        except OSError as exc:
            if self._view_failure is None:
                self._view_failure = f"output not written: {exc.strerror or exc}"
                self.supervisor.warnings.append(self._view_failure)

    def _abandon(self, what: str) -> None:
        """The run dir `what` (was deleted, ...): kill every worker now, as they cannot checkpoint."""
        self.lost = (
            f"run directory {self.spec.run_dir} {what}; the workers were stopped (nothing left to checkpoint into)"
        )
        self._drain(kill_now=True)

    def _drain(self, *, kill_now: bool = False) -> None:
        """Stop every worker after a failure of the loop itself: SIGTERM, then SIGKILL; with
        `kill_now`, SIGKILL to every worker's process group first."""
        sup = self.supervisor
        if kill_now:
            for job in sup.jobs.values():
                if job.handle is not None:
                    sup.launcher.kill(job.handle)
            sup.interrupt()  # the second call below marks the run killed, not waiting to checkpoint
        sup.interrupt()
        deadline = self.clock.monotonic() + STOP_GRACE_S + 1
        while not sup.finished and self.clock.monotonic() < deadline:
            try:
                sup.tick()
            except Exception:
                break
            self.clock.sleep(TICK_S)
        for job in sup.jobs.values():
            if job.handle is not None:
                sup.launcher.kill(job.handle)


def exit_code(state: RunState, interrupt_signal: int = signal.SIGINT) -> int:
    """0 when every job finished, 1 when some failed, were stopped or paused, 128 + the signal
    number (130 for Ctrl-C, 143 for SIGTERM) when interrupted. (A run whose directory was lost
    exits `RUN_DIR_LOST_EXIT`; its session's `lost` says so.)"""
    if state.status is RunStatus.INTERRUPTED:
        return 128 + int(interrupt_signal)
    return EXIT_CODES.get(state.status, 1)


def open_launcher(spec: RunSpec, local: Callable[[], Launcher]) -> AbstractContextManager[Launcher]:
    """The launcher a run's jobs go through, to use in a `with`: `local()` (this machine's), or a
    `RayLauncher` on `spec.cluster`, which joins or starts the cluster now and leaves it at the
    end; ConfigError (one line) when the cluster cannot run the run."""
    if spec.cluster is None:
        launcher = local()
        return launcher if isinstance(launcher, AbstractContextManager) else nullcontext(launcher)
    from cockpit.core.launch.ray_launcher import RayLauncher

    return RayLauncher(spec.cluster.address, storage=spec.cluster.storage, slots=spec.slots)


def sampled_gpus(spec: RunSpec, gpus: list[GpuReader], status: str) -> tuple[list[GpuReader], str]:
    """The GPUs the run's sampler reads, of `gpus` (this machine's that it may use, open), and
    their status line: those `--gpus` names (with the MIG slices of a GPU it names); none on a Ray
    cluster joined by address, whose jobs run on other machines (each node's GPU is in its node's
    samples), so this machine's GPU is no job's."""
    if spec.cluster is not None and spec.cluster.address is not None:
        close_gpus(gpus)
        return [], "no GPU telemetry here: the jobs run on the Ray cluster (each node's GPU is on its line)"
    named = with_slices(spec.gpus, [r.info for r in gpus]) if spec.gpus is not None else None
    return keep_gpus(gpus, named), status


def run_on_launcher(
    spec: RunSpec, local: Callable[[], Launcher], session: Callable[[Launcher], RunSession], view: View, who: str
) -> int:
    """`run_to_exit` for the session `session(launcher)` builds on the run's launcher
    (`open_launcher`), which is closed after the run; a cluster that cannot run it is one line
    on stderr and 2."""
    try:
        opened = open_launcher(spec, local)
    except ConfigError as exc:
        print(f"{who}: error: {exc}", file=sys.stderr)
        return 2
    with opened as launcher:
        return run_to_exit(session(launcher), view, who)


def run_to_exit(session: RunSession, view: View, who: str) -> int:
    """Run `session` with `view` to its end and return the command's exit code (`exit_code`); a
    run that cannot start (another cockpit holds it) is one line on stderr and 2, a lost run
    directory one line and `RUN_DIR_LOST_EXIT`. `who` prefixes the lines (`cockpit run`). A run
    that ended (done, failed or stopped) then runs its `--on-done` command (`on_done.run_on_done`),
    whose failure is one line on stderr and changes nothing else."""
    try:
        state = session.run(view)
    except ConfigError as exc:
        print(f"{who}: error: {exc}", file=sys.stderr)
        return 2
    if session.lost is not None:
        print(f"{who}: error: {session.lost}", file=sys.stderr)
        if session.spec.on_done is not None:
            print(f"{who}: --on-done not run: the run directory is gone", file=sys.stderr)
        return RUN_DIR_LOST_EXIT
    code = exit_code(state, session.supervisor.interrupt_signal)
    if session.spec.on_done is not None:
        problem = run_on_done(session.spec.on_done, state.status, session.spec.run_dir, session.spec.name, code)
        if problem is not None:
            print(f"{who}: {problem}", file=sys.stderr)
    return code


def resume_settings(run_dir: Path, recorded: RunRecord) -> RunSettings:
    """The settings an earlier run in `run_dir` recorded in its run.toml (`[config]` and its name),
    as each setting's declaration says `--resume` takes it (`settings.resumed`); what the file
    does not hold (older files, no `--stall-timeout` or no `--name`) stays the default."""
    return resumed(recorded.config, recorded.name, run_dir)
