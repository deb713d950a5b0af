"""The supervisor's state for the front ends: its jobs and run as an immutable `RunState`."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from cockpit.contract.advice import Advice
from cockpit.contract.states import RunStatus
from cockpit.contract.workerargs import MpsServers
from cockpit.core.feed.snapshot import JobLife, JobProgress, JobSetup, JobTelemetry, RunState, job_view, stepping_sps
from cockpit.core.machine.clock import Clock
from cockpit.core.machine.gpu_types import GpuInfo
from cockpit.core.machine.host import ThreadBudget
from cockpit.core.supervise.jobs import Job
from cockpit.core.supervise.workload import JobTemplate
from cockpit.core.telemetry.memwatch import MemoryVerdict
from cockpit.core.telemetry.sampler import JobUsage, Sample
from cockpit.core.telemetry.throughput import run_eta
from cockpit.core.telemetry.trend import TrendRecorder, best_return


class Supervised(Protocol):
    """What `run_state` reads of a supervisor (`Supervisor` has it)."""

    run_dir: Path
    preset_name: str
    template: JobTemplate
    jobs: dict[str, Job]
    view_limit: int | None
    clock: Clock
    trend: TrendRecorder
    started_at: float
    slots: int
    warnings: list[str]
    budget: ThreadBudget

    @property
    def status(self) -> RunStatus: ...

    @property
    def mps(self) -> MpsServers | None: ...

    @property
    def mps_clients(self) -> bool: ...

    @property
    def disk_note(self) -> str | None: ...


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


def shown_jobs(jobs: Mapping[str, Job], view_limit: int | None) -> list[Job]:
    """The jobs front ends get: all of them, or with `view_limit` the ones not ended and the
    latest ended ones (a fleet of 500 agents shows what runs now, not 500 rows)."""
    if view_limit is None:
        return list(jobs.values())
    ended = sorted((j for j in jobs.values() if j.state.terminal), key=lambda j: j.ended_at or j.state_since)
    keep = {j.id for j in ended[len(ended) - view_limit :]} if view_limit else set()
    return [j for j in jobs.values() if not j.state.terminal or j.id in keep]


def run_state(
    sup: Supervised,
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
    """`sup` now as an immutable RunState for the front ends (with `all_jobs`, every job despite `view_limit`);
    `memory` is the leak watch's verdict per job. What the supervisor does not own (the sampler's
    GPUs and their status, the --auto log and the advisor's suggestions, the run's name) is
    passed through to the state. It also offers the run's figures to its trend (`sup.trend`),
    which keeps a point once a second however often it is called.

    A job's GPU memory and its peak are NVML's (from `sample` and `peak_gpu_mem`: the job's
    processes as the driver counts them, CUDA context included); where NVML cannot say which
    process is the job's (None: a container without `--pid=host`), they are the worker's own
    reports (`Job.cuda_reserved_bytes`, `Job.cuda_peak_bytes`: its caching allocator's, without
    the context), which the advisor's GPU-memory caps and run.toml's peak then use too."""
    views = []
    now = sup.clock.time()
    memory = memory or {}
    for job in sup.jobs.values() if all_jobs else shown_jobs(sup.jobs, sup.view_limit):
        # A worker's throughput is measured until it exits; an ended attempt keeps its last figure.
        measured_at = now if job.state.live else job.state_since
        sps = job.throughput.rate(measured_at)
        views.append(
            job_view(
                job=JobSetup(
                    id=job.id,
                    seed=job.seed,
                    env=job.env,
                    preset=job.preset_name or (_preset_name(job.preset_arg) if job.preset_arg else None),
                    overrides=job.overrides,
                    target=job.target,
                    target_episodes=job.target_episodes,
                ),
                life=JobLife(
                    state=job.state,
                    phase=job.phase,
                    phase_since=job.phase_since,
                    restarts=job.restarts,
                    checkpoints=job.checkpoints,
                    last_checkpoint_step=job.last_checkpoint_step,
                    error=job.error,
                    exit_reason=job.exit_reason,
                    started_at=job.first_started_at,
                    ended_at=job.ended_at,
                ),
                progress=JobProgress(
                    steps=job.steps,
                    episodes=job.episodes,
                    sps=sps,
                    mean_sps=job.mean_sps,
                    rollout_sps=job.rollout_sps,
                    ep_rew_mean=job.ep_rew_mean,
                    ep_len_mean=job.ep_len_mean,
                    episodes_per_h=job.throughput.episodes_per_h(measured_at),
                    scored=job.scoring[0] if job.scoring else None,
                    to_score=job.scoring[1] if job.scoring else None,
                ),
                telemetry=JobTelemetry(
                    pid=job.handle.pid if job.handle is not None else None,
                    device=job.device,
                    gpu=job.gpu.index if job.gpu is not None else None,
                    node=job.handle.node if job.handle is not None else None,
                    usage=_usage(job, sample),
                    peak_gpu_mem_bytes=_peak(job, peak_gpu_mem),
                    memory=memory.get(job.id),
                ),
            )
        )
    # Every job's return counts, not only the shown ones: a fleet's best agent may have ended.
    trend = sup.trend.observe(
        sup.clock.monotonic(),
        now,
        lambda: (stepping_sps(views), best_return(job.ep_rew_mean for job in sup.jobs.values())),
    )
    return RunState(
        run_dir=str(sup.run_dir),
        preset=sup.preset_name,
        env=sup.template.env,
        status=sup.status,
        started_at=sup.started_at,
        now=now,
        slots=sup.slots,
        jobs=tuple(views),
        sample=sample,
        gpu=gpu,
        gpus=gpus,
        gpu_status=gpu_status,
        warnings=tuple(sup.warnings),
        threads_per_job=sup.budget.threads_per_job,
        physical_cores=sup.budget.physical_cores,
        advice=advice,
        suggestions=suggestions,
        eta_s=run_eta(views, sup.slots),
        name=name,
        trend=trend,
        mps=sup.mps_clients,
        disk_wait=sup.disk_note,
        mps_external=sup.mps.shared.pipe_dir
        if sup.mps is not None and sup.mps.external and sup.mps.shared is not None
        else None,
    )
