"""How long `cockpit report --html` takes on big runs: a 1-hour run of 4 jobs and a 64-agent fleet.

    .venv/bin/python -m benchmarks.report_render [--hours 1] [--jobs 4] [--agents 64] [--keep DIR]

Builds each run directory the way a run writes it, through the contract's and the cockpit's own
writers at a run's rates: `run.toml` through `cockpit.contract.runrecord.write`, the telemetry CSVs
through the run log's `Recorder` (a sample every 0.2 s, 5 Hz, with NVML's utilization readings at
about 6 Hz and each job's CPU and memory once a second), and each job's events through
`EventWriter` (a rollout phase, a train phase and a progress event per cycle, CartPole-like cycles
of 0.29 s: about 37,000 events per job and hour, as the replay's measurement used). The GPU
curve follows the jobs' train phases. Then it times the three steps of `report --html`: reading
the series, drawing the figures, and writing the page, and prints them with the page's size.

The test suite builds small runs with the same functions (`synthesize_run`, `synthesize_fleet`).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cockpit.contract.events import EventWriter
from cockpit.contract.fleetplan import parse_plan
from cockpit.contract.presets import load as load_preset
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import (
    ConfigRecord,
    GpuRecord,
    HostRecord,
    JobRecord,
    PhaseRecord,
    RunRecord,
    UtilizationRecord,
    iso,
    write,
)
from cockpit.contract.states import JobState, RunStatus
from cockpit.contract.toml import tomllib
from cockpit.core.fleet.promotion import sync_promotions
from cockpit.core.fleet.store import FleetStore
from cockpit.core.machine.gpu_types import GpuSample
from cockpit.core.record.runlog import MIB, Recorder
from cockpit.core.telemetry.sampler import JobUsage, Sample

TICK_S = 0.2  # the sampler's 5 Hz
NVML_S = 1 / 6  # NVML's sample buffer, about 6 readings a second
USAGE_S = 1.0  # CPU and memory per job, once a second
ROLLOUT_S, TRAIN_S = 0.2, 0.09  # a CartPole-like cycle on a CPU
STEPS_PER_ROLLOUT = 256  # n_envs 8 x n_steps 32
START = 1_795_000_000.0
GPU = GpuRecord(present=True, telemetry="ok", name="NVIDIA GeForce RTX 4090", memory_total_mib=24_564, driver="550.54")
NO_GPU = GpuRecord(present=False, telemetry="no GPU telemetry: NVML library not found (no NVIDIA driver installed)")
HOST = HostRecord(hostname="bench", cpu_model="synthetic 16-core CPU", physical_cores=16, logical_cores=32,
                  ram_gib=64.0, os="Linux")  # fmt: skip


@dataclass
class _Job:
    """A synthetic job's history as it is written: its train phases feed the GPU curve."""

    id: str
    seed: int
    trains: list[tuple[float, float]] = field(default_factory=list)
    rollout_s: float = 0.0
    train_s: float = 0.0
    steps: int = 0
    spans: list[tuple[float, float]] = field(default_factory=list)  # each worker's life
    last_return: float | None = None

    @property
    def first(self) -> float:
        return self.spans[0][0] if self.spans else math.inf

    @property
    def last(self) -> float:
        return self.spans[-1][1] if self.spans else -math.inf

    def live(self, t: float) -> bool:
        return any(a <= t <= b for a, b in self.spans)


def _train(writer: EventWriter, job: _Job, t0: float, t1: float, target: int, rng: random.Random) -> float:
    """One worker's life from `t0`: started, cycles of rollout, train and progress until `t1` or
    `target` steps, finished. Returns when it ended."""
    writer.started(pid=1000 + job.seed, device="cuda", config={"threads": 4}, target_steps=target,
                   resumed_from_step=job.steps or None, t=t0)  # fmt: skip
    t, iteration = t0 + 1.5, 0  # imports, envs and model first
    while t < t1 and job.steps < target:
        rollout = ROLLOUT_S * rng.uniform(0.85, 1.2)
        train = TRAIN_S * rng.uniform(0.9, 1.3)
        writer.phase("rollout", iteration=iteration, num_timesteps=job.steps, t=t)
        writer.phase("train", iteration=iteration + 1, num_timesteps=job.steps + STEPS_PER_ROLLOUT, t=t + rollout)
        job.trains.append((t + rollout, t + rollout + train))
        job.rollout_s, job.train_s = job.rollout_s + rollout, job.train_s + train
        job.steps += STEPS_PER_ROLLOUT
        t += rollout + train
        iteration += 1
        learned = 500.0 * (1.0 - math.exp(-job.steps / (60_000 + 4_000 * (job.seed % 8))))
        job.last_return = round(max(9.0, learned + rng.gauss(0, 8)), 2)
        writer.progress(num_timesteps=job.steps, iteration=iteration, sps=STEPS_PER_ROLLOUT / rollout,
                        ep_rew_mean=job.last_return, ep_len_mean=max(9.0, learned), episodes=job.steps // 200,
                        t=t)  # fmt: skip
    writer.finished(status="done" if job.steps >= target else "stopped", steps=job.steps, t=t)
    job.spans.append((t0, t))
    return t


def _telemetry(run_dir: Path, jobs: Sequence[_Job], start: float, end: float, gpu: bool, rng: random.Random) -> float:
    """The run's CSVs through the run log's Recorder, at 5 Hz; the GPU busy while jobs train.
    Returns the share of time with at least one job training."""
    starts = np.sort(np.array([s for job in jobs for s, _ in job.trains]))
    ends = np.sort(np.array([e for job in jobs for _, e in job.trains]))
    recorder = Recorder(run_dir)
    training_ticks = ticks = 0
    next_nvml, next_usage = start, start
    t = start
    while t <= end:
        readings = []
        while next_nvml <= t:
            active = int(np.searchsorted(starts, next_nvml, "right") - np.searchsorted(ends, next_nvml, "right"))
            readings.append((next_nvml, min(100.0, 6.0 + 62.0 * active + rng.uniform(0, 8))))
            next_nvml += NVML_S
        active = int(np.searchsorted(starts, t, "right") - np.searchsorted(ends, t, "right"))
        training_ticks += active > 0
        ticks += 1
        fresh = next_usage <= t
        if fresh:
            next_usage += USAGE_S
        live = {job.id: JobUsage(cpu_percent=rng.uniform(60, 100), rss_bytes=(900 + int(job.seed)) * MIB,
                                 gpu_mem_bytes=1800 * MIB if gpu else None, pid=1000 + job.seed)
                for job in jobs if job.live(t)}  # fmt: skip
        utils = [u for _, u in readings]
        sample_gpu = None
        if gpu:
            sample_gpu = GpuSample(util_percent=sum(utils) / len(utils) if utils else None,
                                   util_peak_percent=max(utils) if utils else None,
                                   mem_used_bytes=(2000 + 1800 * len(live)) * MIB, mem_total_bytes=24_564 * MIB,
                                   power_w=120.0 + 3.0 * (utils[-1] if utils else 0), temperature_c=61.0,
                                   sm_clock_mhz=2520, throttle_reasons=())  # fmt: skip
        cores = tuple(min(100.0, rng.uniform(55, 100) if i < 4 * len(live) else rng.uniform(0, 15))
                      for i in range(HOST.logical_cores))  # fmt: skip
        recorder(Sample(t=t, cpu_percent=cores, ram_used_bytes=(8000 + 900 * len(live)) * MIB,
                        ram_total_bytes=int(HOST.ram_gib * 1024) * MIB, gpu=sample_gpu, jobs=live, cost_s=0.0015,
                        util_samples=tuple(readings) if gpu else (), usage_t=t if fresh else t - 0.2))  # fmt: skip
        t += TICK_S
    recorder.close()
    return training_ticks / max(ticks, 1)


def _job_record(job: _Job, status: JobState, target: int, gpu: bool) -> JobRecord:
    return JobRecord(
        id=job.id, seed=job.seed, status=status, exit_reason=status.value, steps=job.steps, target=target,
        duration_s=round(job.last - job.first, 3), mean_sps=job.steps / max(job.last - job.first, 1e-9),
        final_ep_rew_mean=job.last_return, restarts=0, checkpoints=0, peak_gpu_mem_mib=1800 if gpu else None,
        cpu_percent_mean=80.0, peak_rss_mib=900.0 + job.seed,
        phases={"rollout": PhaseRecord(seconds=round(job.rollout_s, 3), gpu_util_mean=18.0 if gpu else None,
                                       cpu_percent_mean=95.0),
                "train": PhaseRecord(seconds=round(job.train_s, 3), gpu_util_mean=71.0 if gpu else None,
                                     cpu_percent_mean=45.0)},
    )  # fmt: skip


def _record(run_dir: Path, *, command: str, config: ConfigRecord, jobs: list[JobRecord], start: float, end: float,
            gpu: bool, train_share: float, warnings: tuple[str, ...] = ()) -> None:  # fmt: skip
    preset = load_preset(config.preset)
    util = UtilizationRecord(gpu_util_mean=31.0 if gpu else None, gpu_util_p50=22.0 if gpu else None,
                             gpu_util_p95=92.0 if gpu else None, train_share=round(train_share, 4),
                             gpu_util_while_training=74.0 if gpu else None,
                             gpu_util_while_not_training=9.0 if gpu else None, sampler_ticks=int((end - start) * 5),
                             sampler_cost_ms_mean=1.5)  # fmt: skip
    write(run_dir, RunRecord(command=command, status=RunStatus.DONE, started_at=iso(start) or "",
                             ended_at=iso(end), updated_at=iso(end) or "", duration_s=round(end - start, 3),
                             config=config, host=HOST, gpu=GPU if gpu else NO_GPU, preset=preset, jobs=tuple(jobs),
                             utilization=util, warnings=warnings))  # fmt: skip


def synthesize_run(run_dir: Path, *, jobs: int = 4, seconds: float = 3600.0, gpu: bool = True, seed: int = 0) -> Path:
    """A finished run of `jobs` parallel jobs training for `seconds`, written in `run_dir` (made)."""
    rng = random.Random(seed)
    run_dir.mkdir(parents=True)
    files = RunDir(run_dir)
    start, end = START, START + seconds
    target = 10**9
    made = [_Job(f"{i:03d}", i) for i in range(jobs)]
    for job in made:
        with_writer = EventWriter(files.job(job.id).events)
        _train(with_writer, job, start + 0.4 * int(job.seed), end - 0.5, target, rng)
    share = _telemetry(run_dir, made, start, end, gpu, rng)
    config = ConfigRecord(jobs=jobs, agents=jobs, preset="cartpole", env="CartPole-v1", timesteps=target, seed=0,
                          max_restarts=3)  # fmt: skip
    records = [_job_record(job, JobState.STOPPED, target, gpu) for job in made]
    warning = f"{jobs} parallel jobs x 4 env threads = {4 * jobs} env threads on {HOST.physical_cores} physical cores"
    _record(run_dir, command=f"cockpit run --headless --jobs {jobs}", config=config, jobs=records, start=start,
            end=end, gpu=gpu, train_share=share, warnings=(warning,))  # fmt: skip
    return run_dir


FLEET_PLAN = """
name = "bench"
jobs = {slots}
promotion = "sync"
rate_usd_per_h = 1.99
[agents]
env = "CartPole-v1"
preset = "cartpole"
seeds = {seeds}
[agents.overrides]
learning_rate = [0.001, 0.0005, 0.0003, 0.0001]
[[tiers]]
timesteps = {tier0}
promote = 0.25
[[tiers]]
timesteps = {tier1}
"""


def synthesize_fleet(run_dir: Path, *, agents: int = 64, slots: int = 4, tier0: int = 40_960, tier1: int = 163_840,
                     gpu: bool = True, seed: int = 0) -> Path:  # fmt: skip
    """A finished sync fleet of `agents` (a multiple of 4) in `slots` slots, two tiers, a quarter
    promoted, written in `run_dir` (made): run.toml, CSVs, events, and fleet.db through FleetStore."""
    rng = random.Random(seed)
    run_dir.mkdir(parents=True)
    files = RunDir(run_dir)
    text = FLEET_PLAN.format(slots=slots, seeds=agents // 4, tier0=tier0, tier1=tier1)
    plan = parse_plan(tomllib.loads(text), "bench.toml")
    store = FleetStore.in_run_dir(run_dir)
    store.create(text, "bench.toml", [(a.id, a.index, a.env, a.preset_name, dict(a.overrides), a.seed)
                                      for a in plan.agents])  # fmt: skip
    jobs = {a.id: _Job(a.id, a.seed + 4 * a.index) for a in plan.agents}
    writers = {job_id: EventWriter(files.job(job_id).events) for job_id in jobs}
    free = [START] * slots

    def run_tier(ids: list[str], tier: int, target: int) -> None:
        for job_id in ids:
            slot = min(range(slots), key=free.__getitem__)
            store.start(job_id, tier)
            job = jobs[job_id]
            free[slot] = _train(writers[job_id], job, free[slot], math.inf, target, rng) + 0.3
            quality = 500.0 * (1 - math.exp(-job.steps / (50_000 + 9_000 * (job.seed % 7))))
            store.record(job_id, tier, steps=job.steps, score=round(quality + rng.gauss(0, 10), 2),
                         score_std=round(rng.uniform(0, 25), 2), train_return=round(quality * 0.9, 2))  # fmt: skip

    run_tier([a.id for a in plan.agents], 0, tier0)
    promoted = sync_promotions(store.results(0), plan.funnel()[1])
    store.promote(promoted, 0, decided=True)
    run_tier(promoted, 1, tier1)
    store.close()
    start, end = START, max(free)
    share = _telemetry(run_dir, list(jobs.values()), start, end, gpu, rng)
    config = ConfigRecord(jobs=slots, agents=agents, preset="cartpole", env="CartPole-v1", timesteps=tier1, seed=0,
                          max_restarts=3)  # fmt: skip
    records = [_job_record(job, JobState.DONE, tier1 if job.id in promoted else tier0, gpu) for job in jobs.values()]
    _record(run_dir, command="cockpit fleet bench.toml --jobs 4", config=config, jobs=records, start=start, end=end,
            gpu=gpu, train_share=share)  # fmt: skip
    return run_dir


def render(run_dir: Path, out: Path) -> dict[str, float]:
    """`cockpit report RUN_DIR --html OUT` in its three steps, timed (seconds), with the page's MiB."""
    from cockpit.commands.htmlreport import page
    from cockpit.commands.plots import plots
    from cockpit.contract.files import write_atomic
    from cockpit.core.record.series import read_series

    t0 = time.perf_counter()
    series = read_series(run_dir)
    t1 = time.perf_counter()
    figures = plots(series)
    t2 = time.perf_counter()
    write_atomic(out, page(series, figures))
    t3 = time.perf_counter()
    return {"read_s": t1 - t0, "draw_s": t2 - t1, "page_s": t3 - t2, "total_s": t3 - t0,
            "figures": len(figures), "page_mib": out.stat().st_size / MIB}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Build the runs, render each, print the times."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--hours", type=float, default=1.0, help="the plain run's length (default 1)")
    parser.add_argument("--jobs", type=int, default=4, help="the plain run's parallel jobs (default 4)")
    parser.add_argument("--agents", type=int, default=64, help="the fleet's agents, a multiple of 4 (default 64)")
    parser.add_argument("--keep", type=Path, help="build the runs and reports here instead of a temporary directory")
    args = parser.parse_args(argv)
    import matplotlib  # noqa: F401  - imported before timing, as a command that draws pays it once

    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        cases = [
            (f"{args.hours:g} h run, {args.jobs} jobs",
             lambda: synthesize_run(root / "run", jobs=args.jobs, seconds=args.hours * 3600)),
            (f"{args.agents}-agent fleet, 4 slots", lambda: synthesize_fleet(root / "fleet", agents=args.agents)),
        ]  # fmt: skip
        for label, build in cases:
            t = time.perf_counter()
            run_dir = build()
            built = time.perf_counter() - t
            times = render(run_dir, root / f"{run_dir.name}.html")
            print(f"{label}: built in {built:.1f} s; report: read {times['read_s']:.2f} s, draw "
                  f"{times['draw_s']:.2f} s ({times['figures']:.0f} figures), page {times['page_s']:.2f} s, "
                  f"total {times['total_s']:.2f} s, {times['page_mib']:.2f} MiB", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
