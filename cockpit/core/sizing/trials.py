"""One trial of `cockpit tune`: real workers of a configuration, measured side by side.

`run_trial` writes the configuration as a preset file, starts `jobs` training workers with the
thread budget `cockpit run` would give them, waits until every one has stepped (start-up and
imports are not measured), then measures for `measure_s` seconds: the aggregate steps per
second from the workers' own events, the CPU use, and the GPU utilization when NVML answers.

Each worker's rate is taken over whole rollout + train cycles, from one rollout start to a
later one. A window cut at an arbitrary moment would count a cycle's steps without the rest of
its train phase, which flatters configurations with long train phases (many envs) by up to a
cycle's train time. When a worker has not closed a cycle within `measure_s`, the trial waits
for it, up to `MAX_STRETCH` times as long, and then takes its newest whole cycle.
The workers run as a run's workers do (through the `Launcher`) and are then killed; a trial
leaves nothing running, even when tune itself is killed (the workers' parent-death signal).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil

from cockpit.contract.events import EVENTS_FILE, ErrorEvent, Event, EventReader
from cockpit.contract.presets import Preset, to_toml
from cockpit.contract.workerargs import WorkerArgs
from cockpit.core.launch.local import LocalLauncher
from cockpit.core.launch.protocol import Launcher, LaunchRequest, WorkerHandle
from cockpit.core.machine.host import thread_budget
from cockpit.core.machine.nvml import GpuReader
from cockpit.core.machine.placement import GpuRef
from cockpit.core.sizing.hill_climb import Config
from cockpit.core.telemetry.throughput import Throughput, steps_per_s

START_TIMEOUT_S = 120.0
POLL_S = 0.2
FOREVER = 10**12  # timesteps: trials are stopped by the clock, never by the target
MAX_STRETCH = 3.0  # a trial waits up to this many times `measure_s` for every worker to close a cycle
KILL_WAIT_S = 10.0  # a SIGKILLed worker is reaped well within this


class TrialError(RuntimeError):
    """A worker of the trial failed or never started stepping."""


@dataclass(frozen=True)
class Trial:
    """What one configuration measured."""

    config: Config
    sps: float
    cpu_percent: float  # mean over cores during the measurement
    gpu_util: float | None  # mean, when a GPU was sampled
    seconds: float  # wall time the trial took, start-up included
    cpu_jobs: int = (
        0  # of `config.jobs`, how many trained on the CPU (the rest on the GPU, or wherever "auto" put them)
    )
    mps: bool = False  # the GPU's jobs were clients of an MPS daemon

    def setting(self) -> str:
        """What the trial measured beyond jobs x n_envs: its device mix and MPS, "" for neither."""
        parts = [f"{self.config.jobs - self.cpu_jobs}:cuda,{self.cpu_jobs}:cpu"] if self.cpu_jobs else []
        return " ".join(parts + (["MPS"] if self.mps else []))


def preset_toml(preset: Preset, config: Config, description: str) -> str:
    """`preset` with the configuration's n_envs and batch size, as a preset file's text."""
    return to_toml(replace(preset, n_envs=config.n_envs, batch_size=config.batch_size, description=description))


@dataclass
class Progress:
    """One worker's step count as its events report it. The rollout starts and the rate between
    two of them are `cockpit.core.telemetry.throughput`'s, the live figure's definition; what a trial adds
    is the span: from the clock's start `t0` rather than a sliding window."""

    marks: Throughput = field(default_factory=lambda: Throughput(window_s=math.inf))
    failed: bool = False

    @property
    def latest(self) -> tuple[float, int] | None:
        """The newest (t, num_timesteps) of a phase or progress event."""
        return self.marks.latest

    @property
    def rollout_starts(self) -> list[tuple[float, int]]:
        """The rollout starts, oldest first, as (t, num_timesteps)."""
        return self.marks.rollout_starts

    def observe(self, events: Iterable[Event]) -> None:
        """Take in a worker's new events."""
        for event in events:
            self.marks.observe(event)
            self.failed |= isinstance(event, ErrorEvent)

    def cycles_since(self, t0: float) -> list[tuple[float, int]]:
        """The rollout starts at or after `t0` (Unix time)."""
        return self.marks.cycles_since(t0)

    def rate(self, t0: float, start: tuple[float, int] | None) -> float:
        """Steps per second since `t0`: over whole cycles when two rollout starts follow it, else
        over the newest whole cycle, even one that began before `t0`, else from `start` (the
        newest event before `t0`) to the newest event (0.0 without one)."""
        marks = self.cycles_since(t0)
        if len(marks) < 2:
            marks = self.rollout_starts[-2:]
        a, b = (marks[0], marks[-1]) if len(marks) >= 2 else (start, self.latest)
        rate = steps_per_s(a, b) if a is not None and b is not None else None
        return 0.0 if rate is None else rate


def trial_requests(
    preset: Preset,
    preset_file: Path,
    config: Config,
    workdir: Path,
    physical_cores: int,
    *,
    cpu_jobs: int = 0,
    gpu: GpuRef | None = None,
    mps_pipe_dir: Path | None = None,
    mps_log_dir: Path | None = None,
) -> list[LaunchRequest]:
    """The workers of a trial of `config`, as `cockpit run` would start them: each with the thread
    budget of `config.jobs` jobs on `physical_cores`; the last `cpu_jobs` of them on the CPU
    (`--devices`), the others on the device a worker picks, placed on `gpu` when given and then,
    with `mps_pipe_dir` (and its `mps_log_dir`), clients of that MPS daemon (a job on the CPU is no
    client of it)."""
    threads = thread_budget(config.jobs, physical_cores).threads_per_job
    requests = []
    for i in range(config.jobs):
        on_cpu = i >= config.jobs - cpu_jobs
        args = WorkerArgs(
            workdir / f"job-{i}",
            preset=str(preset_file),
            env=preset.env,
            timesteps=FOREVER,
            seed=i,
            threads=threads,
            device="cpu" if on_cpu else "auto",
        )
        place = None if on_cpu else gpu
        mps = str(mps_pipe_dir) if mps_pipe_dir is not None and place is not None else None
        logs = str(mps_log_dir) if mps is not None and mps_log_dir is not None else None
        requests.append(LaunchRequest(f"trial-{i}", args, gpu=place, mps_pipe_dir=mps, mps_log_dir=logs))
    return requests


def run_trial(
    preset: Preset,
    config: Config,
    *,
    workdir: Path,
    measure_s: float,
    physical_cores: int,
    gpu: GpuReader | None = None,
    launcher: Launcher | None = None,
    cpu_jobs: int = 0,
    mps_pipe_dir: Path | None = None,
    mps_log_dir: Path | None = None,
) -> Trial:
    """Measure `config` (see the module docstring); TrialError if a worker fails to run. With
    `cpu_jobs`, that many of its jobs train on the CPU; with `mps_pipe_dir` (and `gpu`, which the
    GPU's jobs are placed on), they are clients of that MPS daemon, whose logs are in
    `mps_log_dir` (`trial_requests`).

    The workers start through `launcher` (a `LocalLauncher` by default) as a run's workers do: in
    their own sessions, niced, and tied to this process by the parent-death signal, so a killed
    `cockpit tune` leaves none of them training.
    """
    launcher = launcher or LocalLauncher()
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    preset_file = workdir / "preset.toml"
    preset_file.write_text(preset_toml(preset, config, f"tune trial {config.label()}"), encoding="utf-8")
    place = GpuRef(gpu.info.index, gpu.info.uuid) if gpu is not None and mps_pipe_dir is not None else None
    handles: list[WorkerHandle] = []
    readers: list[EventReader] = []
    try:
        for request in trial_requests(
            preset,
            preset_file,
            config,
            workdir,
            physical_cores,
            cpu_jobs=cpu_jobs,
            gpu=place,
            mps_pipe_dir=mps_pipe_dir,
            mps_log_dir=mps_log_dir,
        ):
            handles.append(launcher.launch(request))
            readers.append(EventReader(request.job_dir / EVENTS_FILE))
        progress = [Progress() for _ in readers]

        def poll() -> None:
            for i, (reader, handle) in enumerate(zip(readers, handles, strict=True)):
                progress[i].observe(reader.read_new())
                if progress[i].failed or launcher.poll(handle) is not None:
                    said = launcher.stderr_tail(handle, 1)
                    raise TrialError(
                        f"{config.label()}: worker {i} failed"
                        + (f": {said}" if said else "")
                        + f"; see {handle.job_dir}"
                    )

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:  # every worker must have stepped before the clock starts
            poll()
            if all(p.latest is not None for p in progress):
                break
            if time.monotonic() > deadline:
                raise TrialError(f"{config.label()}: workers did not start within {START_TIMEOUT_S:.0f} s")
            time.sleep(POLL_S)
        t0, first = time.time(), [p.latest for p in progress]
        psutil.cpu_percent()
        utils: list[float] = []
        began = time.monotonic()
        while (elapsed := time.monotonic() - began) < measure_s or (
            elapsed < measure_s * MAX_STRETCH and any(len(p.cycles_since(t0)) < 2 for p in progress)
        ):
            if gpu is not None:
                with contextlib.suppress(Exception):  # a GPU that stops answering leaves utilization unknown
                    utils.extend(value for _, value in gpu.read()[1])
            time.sleep(POLL_S)
            poll()
        cpu = psutil.cpu_percent()
        sps = sum(p.rate(t0, start) for p, start in zip(progress, first, strict=True))
        util = statistics.fmean(utils) if utils else None
        return Trial(config, sps, cpu, util, time.monotonic() - started, cpu_jobs, mps_pipe_dir is not None)
    finally:
        for handle in handles:
            launcher.kill(handle)
        deadline = time.monotonic() + KILL_WAIT_S
        while any(launcher.poll(h) is None for h in handles) and time.monotonic() < deadline:
            time.sleep(0.01)
