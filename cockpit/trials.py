"""One trial of `cockpit tune`: real workers of a configuration, measured side by side.

`run_trial` writes the configuration as a preset file, starts `jobs` training workers with the
thread budget `cockpit run` would give them, waits until every one has stepped (start-up and
imports are not measured), then measures for `measure_s` seconds: the aggregate steps per
second from the workers' own events, the CPU use, and the GPU utilization when NVML answers.
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
from dataclasses import dataclass, replace
from pathlib import Path

import psutil

from cockpit.core.host import thread_budget
from cockpit.core.nvml import GpuReader
from cockpit.core.search import Config
from cockpit.presets import Preset, to_toml
from training.events import EVENTS_FILE, EventTail

START_TIMEOUT_S = 120.0
POLL_S = 0.2
FOREVER = 10**12  # timesteps: trials are stopped by the clock, never by the target


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


def _progress(tail: EventTail, last: tuple[float, int] | None) -> tuple[tuple[float, int] | None, bool]:
    """The newest (t, num_timesteps) of a worker, and whether it has failed."""
    failed = False
    for event in tail.read_new():
        if "num_timesteps" in event:
            last = (float(event["t"]), int(event["num_timesteps"]))
        failed |= event["kind"] == "error"
    return last, failed


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
        last: list[tuple[float, int] | None] = [None] * config.jobs
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:  # every worker must have stepped before the clock starts
            for i, tail in enumerate(tails):
                last[i], failed = _progress(tail, last[i])
                if failed or procs[i].poll() is not None:
                    raise TrialError(f"{config.label()}: worker {i} failed; see {workdir / f'job-{i}.log'}")
            if all(p is not None for p in last):
                break
            if time.monotonic() > deadline:
                raise TrialError(f"{config.label()}: workers did not start within {START_TIMEOUT_S:.0f} s")
            time.sleep(POLL_S)
        first = list(last)
        psutil.cpu_percent()
        utils: list[float] = []
        end = time.monotonic() + measure_s
        while time.monotonic() < end:
            if gpu is not None:
                with contextlib.suppress(Exception):  # a GPU that stops answering leaves utilization unknown
                    utils.extend(value for _, value in gpu.read()[1])
            time.sleep(POLL_S)
        cpu = psutil.cpu_percent()
        for i, tail in enumerate(tails):
            last[i], _ = _progress(tail, last[i])
        sps = 0.0
        for a, b in zip(first, last, strict=True):
            assert a is not None and b is not None
            if b[0] > a[0]:
                sps += (b[1] - a[1]) / (b[0] - a[0])
        return Trial(config, sps, cpu, statistics.fmean(utils) if utils else None, time.monotonic() - started)
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in procs:
            proc.wait()
