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
The workers are then killed; a trial leaves nothing running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil

from cockpit.contract.events import EVENTS_FILE, EventTail
from cockpit.contract.presets import Preset, to_toml
from cockpit.core.host import thread_budget
from cockpit.core.nvml import GpuReader
from cockpit.core.search import Config

START_TIMEOUT_S = 120.0
POLL_S = 0.2
FOREVER = 10**12  # timesteps: trials are stopped by the clock, never by the target
MAX_STRETCH = 3.0  # a trial waits up to this many times `measure_s` for every worker to close a cycle


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


def preset_toml(preset: Preset, config: Config, description: str) -> str:
    """`preset` with the configuration's n_envs and batch size, as a preset file's text."""
    return to_toml(replace(preset, n_envs=config.n_envs, batch_size=config.batch_size, description=description))


@dataclass
class Progress:
    """One worker's step count as its events report it."""

    latest: tuple[float, int] | None = None  # the newest (t, num_timesteps) of any event
    rollout_starts: list[tuple[float, int]] = field(default_factory=list)  # (t, num_timesteps)
    failed: bool = False

    def feed(self, events: Iterable[dict[str, Any]]) -> None:
        """Take in a worker's new events."""
        for event in events:
            if "num_timesteps" in event:
                self.latest = (float(event["t"]), int(event["num_timesteps"]))
                if event["kind"] == "phase" and event.get("phase") == "rollout":
                    self.rollout_starts.append(self.latest)
            self.failed |= event["kind"] == "error"

    def cycles_since(self, t0: float) -> list[tuple[float, int]]:
        """The rollout starts at or after `t0` (Unix time)."""
        return [mark for mark in self.rollout_starts if mark[0] >= t0]

    def rate(self, t0: float, start: tuple[float, int] | None) -> float:
        """Steps per second since `t0`: over whole cycles when two rollout starts follow it, else
        over the newest whole cycle, even one that began before `t0`, else from `start` (the
        newest event before `t0`) to the newest event (0.0 without one)."""
        marks = self.cycles_since(t0)
        if len(marks) < 2:
            marks = self.rollout_starts[-2:]
        a, b = (marks[0], marks[-1]) if len(marks) >= 2 else (start, self.latest)
        if a is None or b is None or b[0] <= a[0]:
            return 0.0
        return (b[1] - a[1]) / (b[0] - a[0])


def run_trial(preset: Preset, config: Config, *, workdir: Path, measure_s: float, physical_cores: int,
              gpu: GpuReader | None = None) -> Trial:  # fmt: skip
    """Measure `config` (see the module docstring); TrialError if a worker fails to run."""
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    preset_file = workdir / "preset.toml"
    preset_file.write_text(preset_toml(preset, config, f"tune trial {config.label()}"), encoding="utf-8")
    threads = thread_budget(config.jobs, physical_cores).threads_per_job
    procs, tails = [], []
    try:
        for i in range(config.jobs):
            job_dir = workdir / f"job-{i}"
            argv = [sys.executable, "-m", "training.worker", "--preset", str(preset_file), "--env", preset.env,
                    "--timesteps", str(FOREVER), "--job-dir", str(job_dir), "--seed", str(i),
                    "--threads", str(threads)]  # fmt: skip
            with (workdir / f"job-{i}.log").open("wb") as log:
                procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                              start_new_session=True))  # fmt: skip
            tails.append(EventTail(job_dir / EVENTS_FILE))
        progress = [Progress() for _ in tails]

        def poll() -> None:
            for i, tail in enumerate(tails):
                progress[i].feed(tail.read_new())
                if progress[i].failed or procs[i].poll() is not None:
                    raise TrialError(f"{config.label()}: worker {i} failed; see {workdir / f'job-{i}.log'}")

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
        return Trial(config, sps, cpu, statistics.fmean(utils) if utils else None, time.monotonic() - started)
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in procs:
            proc.wait()
