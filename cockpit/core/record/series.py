"""A recorded run as the series its plotted report draws (`cockpit report --html/--png`).

`read_series(run_dir)` reads a run directory once, through the readers that already exist:
run.toml through `cockpit.contract.runrecord`, the telemetry CSVs through replay's `csv_rows`, each
job's events through `cockpit.contract.events`, and a fleet through `cockpit.core.fleet.report`
(with every agent's score at each tier from `fleet.db`). What it returns is plain and UI-free:

- the GPU's utilization over time: every NVML reading of `gpu_util.csv` (or, for a run without
  that file, each tick's mean from `samples.csv`), and whether the run had a GPU at all;
- each core's CPU % at each sampler tick (`samples.csv`'s `cpu_cores`);
- each job's phases as transitions (the phase from then on, None when it ran no phase), closed at
  the run's end; its throughput at each rollout start, by the cockpit's one definition of SPS over
  whole rollout + train cycles (`cockpit.core.telemetry.throughput.Throughput`, what the jobs table showed);
  and its `ep_rew_mean` from each `progress` event, both against its steps;
- a fleet's summary and every result it recorded (an agent's score at the end of each tier);
- the clips of its jobs and of a fleet's models (`cockpit.core.record.clips`), which the page embeds.

Nothing here decimates or draws: the figures (`cockpit.commands.plots`) bin the series to their
pixel width. Reading a 1-hour run of 4 jobs (18,000 ticks, 37,500 events per job) takes about a
second on the 2-core dev box (`benchmarks/report_render.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from cockpit.contract.events import (
    ErrorEvent,
    FinishedEvent,
    PhaseEvent,
    ProgressEvent,
    StartedEvent,
    iter_events,
)
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import RunRecord, read, unix
from cockpit.core.feed.source import Transition
from cockpit.core.fleet.analysis import SearchAnalysis, search_analysis
from cockpit.core.fleet.report import FleetSummary, fleet_summary
from cockpit.core.fleet.store import Result
from cockpit.core.record.clips import Clip, RunClips, run_clips
from cockpit.core.record.replay import csv_rows, gpu_util_readings
from cockpit.core.telemetry.throughput import Throughput

__all__ = ["Clip", "FleetSeries", "JobSeries", "RunSeries", "Telemetry", "read_series"]


@dataclass(frozen=True)
class Telemetry:
    """The sampler's record over the run, in time order (Unix times).

    `gpu_t`/`gpu_util` are the GPU utilization readings (%); empty without a GPU. `cpu_t` are the
    sampler's ticks and `cpu_cores` each tick's CPU % per core (a tick that recorded fewer cores
    than another has fewer values)."""

    gpu_t: tuple[float, ...]
    gpu_util: tuple[float, ...]
    cpu_t: tuple[float, ...]
    cpu_cores: tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class JobSeries:
    """One job's measured history.

    `phases` are its transitions `(t, phase)` in time order, `phase` None from a moment it ran none
    (before its first phase, after an outcome, at the run's end); the last one is always None, so
    every phase has an end. `sps` is `(steps, SPS)` at each rollout start once a whole cycle was
    measured; `returns` is `(steps, ep_rew_mean)` of each progress event that had one."""

    id: str
    seed: int
    phases: tuple[Transition, ...]
    sps: tuple[tuple[int, float], ...]
    returns: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class FleetSeries:
    """A fleet's summary (tiers, leaderboard, agents, models) and every score it recorded, in the
    order recorded: an agent has one result per tier it finished."""

    summary: FleetSummary
    results: tuple[Result, ...]
    analysis: SearchAnalysis | None = None  # a search fleet's (`cockpit.core.fleet.analysis`)


@dataclass(frozen=True)
class RunSeries:
    """A recorded run for the plotted report: its run record, its span (first to last moment
    recorded, Unix times), its telemetry, every job's series, its fleet (None for a plain run),
    and its clips."""

    run_dir: Path
    record: RunRecord
    start: float
    end: float
    telemetry: Telemetry
    jobs: tuple[JobSeries, ...]
    fleet: FleetSeries | None
    clips: RunClips = field(default_factory=RunClips)

    @property
    def has_gpu(self) -> bool:
        """True when the run sampled an NVIDIA GPU (run.toml's `[gpu] present`)."""
        return self.record.gpu is not None and self.record.gpu.present


def _number(text: str | None) -> float | None:
    """A CSV cell as a finite number; None when empty; ValueError when malformed."""
    if not text:
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def _telemetry(files: RunDir, gpu_index: int) -> Telemetry:
    """samples.csv and gpu_util.csv (GPU `gpu_index`'s readings: samples.csv's GPU is the first sampled,
    so is the plot's); rows that do not parse are skipped, as replay skips them."""
    cpu_t: list[float] = []
    cores: list[tuple[float, ...]] = []
    tick_util: list[tuple[float, float]] = []
    for row in csv_rows(files.samples):
        try:
            t = float(row["t"])
            per_core = tuple(float(c) for c in (row.get("cpu_cores") or "").split())
            total = _number(row.get("cpu_percent"))
            util = _number(row.get("gpu_util"))
        except (KeyError, TypeError, ValueError):
            continue
        cpu_t.append(t)
        cores.append(per_core or ((total,) if total is not None else ()))
        if util is not None:
            tick_util.append((t, util))
    readings = gpu_util_readings(files.gpu_util, gpu_index)
    # Every NVML reading where the run kept them; a file without any falls back to the ticks' means.
    gpu = sorted(readings or tick_util)
    order = sorted(range(len(cpu_t)), key=cpu_t.__getitem__)
    return Telemetry(
        gpu_t=tuple(t for t, _ in gpu),
        gpu_util=tuple(u for _, u in gpu),
        cpu_t=tuple(cpu_t[i] for i in order),
        cpu_cores=tuple(cores[i] for i in order),
    )


def _job(job_id: str, seed: int, events: Path, end: float) -> JobSeries:
    """One job's series from its events file (streamed), its last phase closed at `end`."""
    phases: list[Transition] = []
    sps: list[tuple[int, float]] = []
    returns: list[tuple[int, float]] = []
    throughput = Throughput()
    last_t = -math.inf

    def transition(t: float, phase: str | None) -> None:
        if (phases[-1][1] if phases else None) != phase:
            phases.append((t, phase))

    for event in iter_events(events):
        t = last_t = max(last_t, event.t)  # clocks may step back; the series must not
        throughput.observe(event)
        if isinstance(event, PhaseEvent):
            transition(t, event.phase)
            if event.phase == "rollout":
                rate = throughput.rate(t)
                if rate is not None:
                    sps.append((event.num_timesteps, rate))
        elif isinstance(event, ProgressEvent):
            if event.ep_rew_mean is not None:
                returns.append((event.num_timesteps, event.ep_rew_mean))
        elif isinstance(event, (StartedEvent, FinishedEvent, ErrorEvent)):
            transition(t, None)
    if phases and phases[-1][1] is not None:
        transition(max(end, phases[-1][0]), None)
    return JobSeries(job_id, seed, tuple(phases), tuple(sps), tuple(returns))


def _fleet(run_dir: Path, record: RunRecord) -> FleetSeries | None:
    """The fleet in `run_dir` with every recorded score and, for a search, its analysis (dollars
    at the cost per step `record` measured); None for a plain run. FleetReportError (one line naming
    the file) when fleet.db cannot be read."""
    summary = fleet_summary(run_dir)
    if summary is None:
        return None
    return FleetSeries(summary, summary.results, search_analysis(summary, record))


def read_series(run_dir: Path) -> RunSeries:
    """The run in `run_dir` as series (see the module docstring). Reads only. RunRecordError (one
    line) when there is no readable run.toml; FleetReportError (one line) for a fleet whose
    fleet.db cannot be read. Missing or torn CSV and event files are no error: what is there is
    read. The jobs are run.toml's, in its order."""
    record = read(run_dir)
    files = RunDir(run_dir)
    telemetry = _telemetry(files, record.gpus[0].index if record.gpus else 0)
    started, ended = unix(record.started_at), unix(record.ended_at) or unix(record.updated_at)
    starts = [t for t in (started, *telemetry.cpu_t[:1]) if t is not None]
    start = min(starts) if starts else 0.0
    end = max((t for t in (ended, *telemetry.cpu_t[-1:]) if t is not None), default=start)
    jobs = tuple(_job(job.id, job.seed, files.job(job.id).events, end) for job in record.jobs)
    if not starts:  # neither run.toml nor the sampler has a time: the jobs' first events do
        start = min((job.phases[0][0] for job in jobs if job.phases), default=end)
    clips = run_clips(run_dir, tuple(job.id for job in record.jobs))
    return RunSeries(run_dir, record, start, max(end, start), telemetry, jobs, _fleet(run_dir, record), clips)
