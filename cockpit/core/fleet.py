"""A fleet's time and cost, projected before it runs from what this machine measured.

Every speed comes from a measurement: one job's costs as `training.probe` measured them for the
agent's preset on this machine (`cockpit.core.costs`). No speed is invented: an agent whose costs
could not be measured leaves the time and cost unknown.

The overlap model for N slots (docs/fleets.md, "The overlap model"): a job is one loop that
alternates a rollout phase and a train phase, and holds one server while it runs a phase. Per
sample at the preset's n_envs, from the probe, its rollout costs `r = step_overhead_us / n_envs +
env_policy_us` (on a core: the loop, the env step and the forward pass) and its training
`t = n_epochs * train_sample_us` (on a core without a GPU, on the GPU with one); alone it steps at
`1e6 / (r + t)` samples per second. N jobs are the customers of a closed queueing network, solved
exactly by mean value analysis (`overlap_sps`): on a CPU machine one station, the physical cores,
where each sample demands `r + t` (so N jobs run `min(N, cores)` jobs' worth: the kernel shares the
cores among more jobs than cores); with a GPU two, the cores (demand `r`) and the GPU (demand `t`,
one server: two train bursts at once share it), so train bursts that would collide queue, which is
why 4 jobs that each keep a GPU 25 % busy fill it to ~79 %, not 100 %.

A tier's wall time is its agents' steps to go at that rate; agents promoted to a later tier are not
known before the run, so a later tier is costed at the matrix's mean seconds per step.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cockpit.contract.fleetplan import FleetPlan
from cockpit.contract.presets import Preset
from cockpit.contract.runrecord import RunRecord

if TYPE_CHECKING:  # the advisor predicts N jobs' SPS with `speed_of`: it imports this module
    from cockpit.core.advisor import Costs


@dataclass(frozen=True)
class Speed:
    """One preset's measured one-job speed here, and how many such jobs the slots run at once."""

    preset: Preset
    sps: float  # one job alone, samples per second
    parallel: float  # jobs' worth the fleet's slots run at once on this machine (the overlap model)

    @property
    def fleet_sps(self) -> float:
        """Samples per second of the whole fleet when every slot runs this preset."""
        return self.sps * self.parallel


@dataclass(frozen=True)
class Station:
    """Where a job spends one phase: `servers` identical servers (cores, or one GPU), and the
    microseconds of one server each sample demands there."""

    name: str
    demand_us: float
    servers: int


def stations(preset: Preset, costs: Costs, physical_cores: int) -> tuple[Station, ...]:
    """The overlap model's stations for jobs of `preset` (module docstring): the cores alone on a
    CPU machine, the cores and one GPU with a GPU."""
    rollout = costs.step_overhead_us / preset.n_envs + costs.env_policy_us
    train = preset.n_epochs * costs.train_sample_us
    cores = max(1, physical_cores)
    if costs.device == "cpu":
        return (Station("cores", rollout + train, cores),)
    return Station("cores", rollout, cores), Station("gpu", train, 1)


def overlap_sps(network: Sequence[Station], jobs: int) -> float:
    """Samples per second of `jobs` jobs cycling through `network`: exact mean value analysis of a
    closed network with load-dependent (multi-server) stations (Reiser and Lavenberg). A station
    with `k` jobs in it serves `min(k, servers)` of them at once; `p[j]` is the chance that it holds
    `j` jobs."""
    probs = [[1.0] for _ in network]  # with no job in the network every station is empty
    rate = 0.0  # samples per microsecond
    for n in range(1, jobs + 1):
        residence = [
            sum(j / min(j, s.servers) * s.demand_us * p[j - 1] for j in range(1, n + 1))
            for s, p in zip(network, probs, strict=True)
        ]
        rate = n / sum(residence)
        for i, s in enumerate(network):
            busy = [rate * s.demand_us / min(j, s.servers) * probs[i][j - 1] for j in range(1, n + 1)]
            probs[i] = [max(0.0, 1.0 - sum(busy)), *busy]
    return rate * 1e6


def speed_of(preset: Preset, costs: Costs, slots: int, physical_cores: int) -> Speed:
    """The overlap model's speed of `slots` jobs of `preset` on a machine with `physical_cores`
    cores (and one GPU where `costs` were measured on one)."""
    one_job = 1e6 / costs.sample_us(preset, preset.n_envs)
    network = stations(preset, costs, physical_cores)
    return Speed(preset, one_job, overlap_sps(network, slots) / one_job)


@dataclass(frozen=True)
class Stage:
    """One tier (or the whole fleet) projected: agents, steps, wall time and cost."""

    label: str
    agents: int
    steps_per_agent: int  # the steps each agent trains in it (a promoted agent resumes: the difference)
    steps: int
    seconds: float | None  # None when a speed is unknown
    cost_usd: float | None  # None without a rate or a time


@dataclass(frozen=True)
class Projection:
    """The plan's tiers, their total, and the same agents all trained to the last tier."""

    tiers: tuple[Stage, ...]
    total: Stage
    all_to_last: Stage

    @property
    def saving(self) -> float:
        """The share of steps the tiers save against training every agent to the last tier."""
        return 1.0 - self.total.steps / self.all_to_last.steps if self.all_to_last.steps else 0.0


def project(plan: FleetPlan, speed: Callable[[Preset], Speed | None]) -> Projection:
    """Project `plan` on this machine; `speed` gives each agent preset's measured speed for the
    fleet's slots (None when it could not be measured)."""
    speeds = [speed(agent.preset) for agent in plan.agents]
    known = [s for s in speeds if s is not None]
    # Seconds one step of an average agent takes of the fleet's time.
    per_step = statistics.fmean(1.0 / s.fleet_sps for s in known) if known and len(known) == len(speeds) else None
    funnel = plan.funnel()
    stages = []
    done_steps = 0
    for i, (tier, agents) in enumerate(zip(plan.tiers, funnel, strict=True)):
        each = tier.timesteps - done_steps
        done_steps = tier.timesteps
        stages.append(_stage(f"tier {i}", agents, each, per_step, plan.rate_usd_per_h))
    total = _sum("total", stages, plan.rate_usd_per_h)
    last = plan.tiers[-1].timesteps
    return Projection(tuple(stages), total, _stage("all to the last tier", funnel[0], last, per_step,
                                                   plan.rate_usd_per_h))  # fmt: skip


def _stage(label: str, agents: int, each: int, per_step: float | None, rate: float | None) -> Stage:
    steps = agents * each
    seconds = steps * per_step if per_step is not None else None
    return Stage(label, agents, each, steps, seconds, _cost(seconds, rate))


def _sum(label: str, stages: Sequence[Stage], rate: float | None) -> Stage:
    times = [s.seconds for s in stages]
    seconds = sum(t for t in times if t is not None) if all(t is not None for t in times) else None
    return Stage(label, stages[0].agents if stages else 0, 0, sum(s.steps for s in stages), seconds,
                 _cost(seconds, rate))  # fmt: skip


def _cost(seconds: float | None, rate: float | None) -> float | None:
    return seconds / 3600 * rate if seconds is not None and rate is not None else None


# The settings that decide how fast a job steps (not its learning rate or its seed).
SPEED_KEYS = ("env", "n_envs", "n_steps", "batch_size", "n_epochs", "net_arch", "normalize")


def speed_from_record(preset: Preset, record: RunRecord, slots: int) -> Speed | None:
    """`preset`'s speed as a finished run measured it (on this machine or another): the mean of its
    jobs' SPS, each measured while the run's jobs ran `min(jobs, agents)` at once, and that many
    jobs' worth at most for `slots` (nothing measured more at once). None when the run trained
    another preset (by the settings that decide speed) or measured no SPS."""
    if record.preset is None:
        return None
    recorded = record.preset.as_dict()
    wanted = preset.as_dict()
    if record.config.env != preset.env or any(recorded.get(k) != wanted.get(k) for k in SPEED_KEYS if k != "env"):
        return None
    rates = [job.mean_sps for job in record.jobs if job.mean_sps]
    if not rates:
        return None
    at_once = max(1, min(record.config.jobs, record.config.agents))
    return Speed(preset, statistics.fmean(rates), float(min(slots, at_once)))
