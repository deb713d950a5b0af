"""RunState: the immutable snapshot every front end renders (TUI, headless, report).

Views never own state: they receive these snapshots and send `Control`s back through the
supervisor's one command interface.

A job's `JobView` is built by `job_view`, whoever builds it (the live supervisor, a replay): the
one place that turns its usage, its leak-watch verdict and its figures into what the views show.
A source hands it four parts: what the job is (`JobSetup`), where it is in its life (`JobLife`),
how far and fast it has come (`JobProgress`), and what is measured of its worker (`JobTelemetry`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cockpit.contract.advice import Advice
from cockpit.contract.states import JobState, RunStatus
from cockpit.core.machine.gpu_types import GpuInfo
from cockpit.core.telemetry.memwatch import MemoryVerdict
from cockpit.core.telemetry.sampler import JobUsage, Sample
from cockpit.core.telemetry.throughput import job_eta, run_sps
from cockpit.core.telemetry.trend import NO_TREND, Trend

Overrides = tuple[tuple[str, str], ...]  # (key, value as written) pairs in key order: `override_pairs`


def override_pairs(overrides: Mapping[str, Any]) -> Overrides:
    """A fleet agent's preset overrides as the views show them: each key as the plan typed it with
    its value's repr (`0.001`, `'tanh'`), a float to 4 significant digits (a drawn learning rate
    reads `0.001252`, not `0.0012520653814999472`; run.toml, fleet.db and `report --json` keep it
    whole), in key order; () for none."""
    return tuple(
        (key, f"{value:.4g}" if isinstance(value, float) else repr(value)) for key, value in sorted(overrides.items())
    )


def preset_label(preset: str, overrides: Iterable[tuple[str, str]] = ()) -> str:
    """A preset as the user thinks of it: the name they gave, then each override as `key=value`,
    keys as typed, one space apart (`cartpole learning_rate=0.001`); the name alone without overrides.
    What every view shows of a job's preset (the TUI, the headless lines, the reports)."""
    return " ".join([preset, *(f"{key}={value}" for key, value in overrides)])


def stepping_sps(jobs: Iterable[JobView]) -> float | None:
    """The run's live throughput: its training jobs' `sps` together (None when none has one)."""
    return run_sps(job.sps for job in jobs if job.state.stepping)


# What a script job that has not reported yet shows as its `exit_reason` (the supervisor sets it
# at launch and clears it at the first event); `JobView.no_events` says so to the views.
NO_EVENTS_NOTE = "no training events: add CockpitCallback for phases and progress"


@dataclass(frozen=True, kw_only=True)
class JobView:
    """One job as a front end shows it (built by `job_view` from what a source knows of the job)."""

    id: str
    seed: int
    state: JobState
    phase: str | None
    phase_since: float | None
    steps: int
    target: int
    sps: float | None  # live throughput over recent whole rollout + train cycles (`cockpit.core.telemetry.throughput`)
    mean_sps: float | None  # steps trained per second of running time, over the run
    ep_rew_mean: float | None
    restarts: int
    checkpoints: int
    last_checkpoint_step: int | None
    error: str | None
    exit_reason: str | None
    pid: int | None
    device: str | None
    cpu_percent: float | None
    rss_bytes: int | None
    gpu_mem_bytes: int | None
    peak_gpu_mem_bytes: int | None
    started_at: float | None
    ended_at: float | None
    # Seconds until the job reaches its target at `sps` (`cockpit.core.telemetry.throughput.job_eta`): 0 when
    # done, None when unknown (not training, or before its first whole cycle).
    eta_s: float | None = None
    # The worker's own `sps` of its newest progress event: the rollout rate, far above the
    # throughput when train phases are long. Shown only labelled "rollout SPS".
    rollout_sps: float | None = None
    # The job's own env and preset name when it differs from the run's (a fleet's agents); None: the run's.
    # `preset` is the name the user gave (the plan's `cartpole`), never the file a fleet writes for
    # an agent with overrides; `overrides` are what that agent changes of it (() for a plain run).
    env: str | None = None
    preset: str | None = None
    overrides: Overrides = ()
    # The leak watch's verdict (`cockpit.core.telemetry.memwatch`, as run.toml records it): None before the
    # first judgment, "no growth", "memory growing: +N MiB/h" (and/or GPU memory), or "not judged:
    # ..."; and the flagged growth rates, None unless that memory keeps growing.
    memory: str | None = None
    memory_growth_mib_h: float | None = None
    gpu_memory_growth_mib_h: float | None = None
    # An episode target (`--episodes`; `target` is 0 then), the whole episodes finished (across
    # restarts), the newest mean episode length, and the live episode rate over the window of
    # `sps` (`Throughput.episodes_per_h`); None when unknown. With an episode target `eta_s` is
    # the episodes left at `ep_len_mean` steps each over `sps` (`throughput.job_eta`).
    target_episodes: int | None = None
    episodes: int | None = None
    ep_len_mean: float | None = None
    episodes_per_h: float | None = None
    # The GPU its worker runs (or last ran) on, by NVML index (`cockpit.core.machine.placement`); None: none.
    gpu: int | None = None
    # The IP of the cluster node its worker runs on (`--ray`; None for a job of this machine): the
    # views group the jobs' CPU under their nodes.
    node: str | None = None
    # Its processes' SM % on the GPU, as NVML's per-process utilization samples say (None when
    # unknown: no GPU, no sample from NVML yet, or host PIDs NVML cannot match in a container).
    gpu_sm_percent: float | None = None
    # In a score phase (a fleet's agent evaluated at its tier's end): the evaluation episodes
    # scored so far and how many it plays; None otherwise.
    scored: int | None = None
    to_score: int | None = None
    # A script job that has written no event yet (its `exit_reason` is `NO_EVENTS_NOTE`): running,
    # with no phase or progress to show until its script reports through `CockpitCallback`.
    no_events: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", JobState(self.state))  # a plain string is accepted

    @property
    def memory_growing(self) -> bool:
        """True when the leak watch flags its RSS or GPU memory as growing."""
        return self.memory_growth_mib_h is not None or self.gpu_memory_growth_mib_h is not None

    @property
    def fraction(self) -> float:
        """Progress towards the target (in episodes for an episode target), 0..1."""
        if self.target_episodes:
            return min(1.0, (self.episodes or 0) / self.target_episodes)
        return min(1.0, self.steps / self.target) if self.target else 0.0


@dataclass(frozen=True)
class MemoryFigures:
    """The leak watch's verdict on a job as the views show it and run.toml records it (the
    `memory`, `memory_growth_mib_h` and `gpu_memory_growth_mib_h` of `JobView` and `JobRecord`):
    all None before the job's first judgment."""

    memory: str | None = None
    memory_growth_mib_h: float | None = None
    gpu_memory_growth_mib_h: float | None = None

    @classmethod
    def of(cls, verdict: MemoryVerdict | None) -> MemoryFigures:
        """A verdict's line and flagged growth rates (None: no verdict yet, all None)."""
        if verdict is None:
            return cls()
        return cls(verdict.line(), verdict.rss_growth_mib_h, verdict.gpu_growth_mib_h)


@dataclass(frozen=True, kw_only=True)
class JobSetup:
    """What a job is: its id and seed, its own env, preset and overrides (None and (): the run's),
    and its target in steps, or in whole episodes (`target` 0 then)."""

    id: str
    seed: int
    env: str | None
    preset: str | None
    overrides: Overrides
    target: int
    target_episodes: int | None


@dataclass(frozen=True, kw_only=True)
class JobLife:
    """Where a job is in its life: its state and phase (since when), its restarts and checkpoints,
    why it failed or ended, and when it first started and ended."""

    state: JobState
    phase: str | None
    phase_since: float | None
    restarts: int
    checkpoints: int
    last_checkpoint_step: int | None
    error: str | None
    exit_reason: str | None
    started_at: float | None
    ended_at: float | None


@dataclass(frozen=True, kw_only=True)
class JobProgress:
    """How far a job has come and how fast: its steps and episodes, its throughput (live, over the
    run, the rollout's), its newest return and episode length, and in a score phase the evaluation
    episodes scored of how many."""

    steps: int
    episodes: int | None
    sps: float | None
    mean_sps: float | None
    rollout_sps: float | None
    ep_rew_mean: float | None
    ep_len_mean: float | None
    episodes_per_h: float | None
    scored: int | None
    to_score: int | None


@dataclass(frozen=True, kw_only=True)
class JobTelemetry:
    """What is measured of a job's worker and where it runs: its pid, device, GPU index and node,
    its process tree's `usage` in the sample shown (None: no reading of it), its peak GPU memory,
    and the leak watch's `memory` (a verdict, or the figures a run.toml recorded; None before its
    first judgment)."""

    pid: int | None
    device: str | None
    gpu: int | None
    node: str | None
    usage: JobUsage | None
    peak_gpu_mem_bytes: int | None
    memory: MemoryVerdict | MemoryFigures | None


def job_view(*, job: JobSetup, life: JobLife, progress: JobProgress, telemetry: JobTelemetry) -> JobView:
    """One job as the views show it, from what its source knows of it: the one builder of a
    `JobView`, so that a replayed job shows what the live one did.

    Every figure of the four parts is required: a source that cannot know one (a replay, the node a
    job ran on) says None for it where it builds them. The rest of `JobView` is derived here, the
    same for every source: the CPU %, RSS, GPU memory and SM % of `telemetry.usage` (all four None
    without a reading), the leak watch's `telemetry.memory` as its line and flagged rates, the ETA
    at `progress.sps` (`throughput.job_eta`), and `no_events` from the exit reason."""
    memory, usage = telemetry.memory, telemetry.usage
    figures = memory if isinstance(memory, MemoryFigures) else MemoryFigures.of(memory)
    eta_s = job_eta(
        life.state,
        progress.steps,
        job.target,
        progress.sps,
        target_episodes=job.target_episodes,
        episodes=progress.episodes,
        ep_len_mean=progress.ep_len_mean,
    )
    return JobView(
        id=job.id,
        seed=job.seed,
        env=job.env,
        preset=job.preset,
        overrides=job.overrides,
        target=job.target,
        target_episodes=job.target_episodes,
        state=life.state,
        phase=life.phase,
        phase_since=life.phase_since,
        restarts=life.restarts,
        checkpoints=life.checkpoints,
        last_checkpoint_step=life.last_checkpoint_step,
        error=life.error,
        exit_reason=life.exit_reason,
        started_at=life.started_at,
        ended_at=life.ended_at,
        steps=progress.steps,
        episodes=progress.episodes,
        sps=progress.sps,
        mean_sps=progress.mean_sps,
        rollout_sps=progress.rollout_sps,
        ep_rew_mean=progress.ep_rew_mean,
        ep_len_mean=progress.ep_len_mean,
        episodes_per_h=progress.episodes_per_h,
        scored=progress.scored,
        to_score=progress.to_score,
        pid=telemetry.pid,
        device=telemetry.device,
        gpu=telemetry.gpu,
        node=telemetry.node,
        peak_gpu_mem_bytes=telemetry.peak_gpu_mem_bytes,
        cpu_percent=usage.cpu_percent if usage is not None else None,
        rss_bytes=usage.rss_bytes if usage is not None else None,
        gpu_mem_bytes=usage.gpu_mem_bytes if usage is not None else None,
        gpu_sm_percent=usage.gpu_sm_percent if usage is not None else None,
        memory=figures.memory,
        memory_growth_mib_h=figures.memory_growth_mib_h,
        gpu_memory_growth_mib_h=figures.gpu_memory_growth_mib_h,
        eta_s=eta_s,
        no_events=life.exit_reason == NO_EVENTS_NOTE,
    )


@dataclass(frozen=True)
class TierView:
    """One tier of a fleet: how many agents are where in it, and when it will be done."""

    tier: int
    timesteps: int | None  # its target: steps, or (a plan in episodes) None and `episodes`
    planned: int  # agents the plan sends into it (async may send more)
    entered: int  # agents assigned to it so far
    running: int  # of those, with a worker now
    finished: int  # with a score
    promoted: int
    culled: int  # finished, not promoted, and the tier can promote no more of them
    failed: int
    eta_s: float | None  # until its last agent is done at the fleet's live rate (0 when done)
    episodes: int | None = None  # its target in whole episodes, for a plan in episodes


@dataclass(frozen=True)
class LeaderView:
    """One agent on the leaderboard: its best tier's score and its settings."""

    agent: str
    env: str
    preset: str
    overrides: str  # "key=value, ..." (`override_pairs` joined by ", ") or ""
    seed: int
    tier: int
    steps: int
    score: float
    lineage: str = ""  # pbt: whose checkpoint it copied last, at which tier ("a0007@t1"), "" for none


@dataclass(frozen=True)
class SearchView:
    """A fleet's search (`[agents.search]`) so far: its sampler, the draws made of how many, the
    best score yet (None before any), whose it is with its values ("key=value, ..."), the steps the
    fleet's scored tiers had trained when it was first reached (`search_progress`), and for each
    searched key one line: the range drawn, and where the best agents' values lie."""

    sampler: str
    samples: int
    drawn: int
    best_score: float | None
    best_agent: str | None
    best_values: str
    best_steps: int | None
    ranges: tuple[str, ...]


@dataclass(frozen=True)
class FleetView:
    """A fleet's progress: its tier funnel, leaderboard, ETA and cost, and what it decided."""

    name: str
    promotion: str
    agents: int
    tiers: tuple[TierView, ...]
    leaders: tuple[LeaderView, ...]  # best first
    eta_s: float | None  # until the last tier is done at the fleet's live rate
    rate_usd_per_h: float | None
    spent_usd: float | None  # the run's wall time so far at the rate
    projected_usd: float | None  # spent plus the ETA at the rate
    notices: tuple[str, ...]  # promotions and tier summaries, the newest last (the last few)
    notice_count: int  # notices so far, so a viewer prints only those it has not seen
    search: SearchView | None = None  # with `[agents.search]`


@dataclass(frozen=True)
class RunState:
    """The whole run at one moment."""

    run_dir: str
    preset: str
    env: str
    status: RunStatus
    started_at: float
    now: float
    slots: int
    jobs: tuple[JobView, ...]
    sample: Sample | None
    gpu: GpuInfo | None
    gpu_status: str
    warnings: tuple[str, ...]
    threads_per_job: int = 0  # env threads each job gets from the thread budget (0: unknown)
    physical_cores: int = 0  # the cores that budget divides (0: unknown)
    advice: tuple[str, ...] = ()  # the --auto loop's decisions, newest last
    suggestions: tuple[Advice, ...] = ()  # the advisor on this run's measurements, most pressing first
    # Seconds until every agent, queued ones included, reaches its target (`throughput.run_eta`).
    eta_s: float | None = None
    fleet: FleetView | None = None  # a fleet's tiers and leaderboard (`cockpit fleet`)
    name: str | None = None  # the run's name (`--name`, a fleet's plan name); None: it has none
    # Its aggregate SPS and best return over the last minutes (`cockpit.core.telemetry.trend`), for the plot.
    trend: Trend = NO_TREND
    # Every GPU sampled, in index order; `gpu` is the first (what a view of one GPU shows).
    gpus: tuple[GpuInfo, ...] = ()
    mps: bool = False  # the jobs on each GPU are clients of NVIDIA's MPS (`--mps`)
    # The pipe directory of an MPS daemon found running, not started for the run: every CUDA job here
    # is its client, with or without `--mps`. None: no such daemon.
    mps_external: str | None = None
    # `waiting for disk: N MiB free, needs M MiB` while jobs paused by a full disk wait for space
    # (`--disk-wait`); None otherwise.
    disk_wait: str | None = None

    def __post_init__(self) -> None:
        if not self.gpus and self.gpu is not None:
            object.__setattr__(self, "gpus", (self.gpu,))

    def jobs_on(self, index: int) -> tuple[JobView, ...]:
        """The jobs placed on GPU `index`; on a run of one GPU, every job (a job not placed, of a
        run recorded before placement, ran on the only GPU there was)."""
        if len(self.gpus) <= 1:
            return self.jobs
        return tuple(job for job in self.jobs if job.gpu == index)

    @property
    def sps(self) -> float | None:
        """The run's live throughput: its training jobs' `sps` together (None when none has one)."""
        return stepping_sps(self.jobs)

    def count(self, state: JobState | str) -> int:
        """How many jobs are in `state` (the enum or its value)."""
        wanted = JobState(state)
        return sum(1 for job in self.jobs if job.state is wanted)
