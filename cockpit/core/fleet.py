"""A fleet's time and cost, projected before it runs from what this machine measured.

Every speed comes from a measurement: one job's costs as `cockpit_training.probe` measured them for the
agent's preset on this machine (`cockpit.core.costs`). No speed is invented: an agent whose costs
could not be measured leaves the time and cost unknown.

The overlap model for N slots (docs/fleets.md, "The overlap model"): a job is one loop that
alternates a rollout phase and a train phase, and holds one server while it runs a phase. Per
sample at the preset's n_envs, from the probe, its rollout costs `r = step_overhead_us / n_envs +
env_policy_us` (on a core: the loop, the env step and the forward pass) and its training
`t = n_epochs * (train_sample_us + train_epoch_us / (n_envs * n_steps))` (on a core without a GPU,
on the GPU with one); alone it steps at `1e6 / (r + t)` samples per second.

On a CPU machine every phase runs on a core (`cpu_fleet_sps`): one job alone steps at that rate;
N jobs on C cores with N <= C each hold a core at `busy_factor` times a sample's cost (every core
busy); past C, the kernel time-shares cores, and each of the `min(N - C, C)` cores running two
jobs gets their samples done at `shared_factor` times one job's cost. Both factors are measured
here with two real jobs side by side (`cockpit.core.contention`): they do not follow from one job
alone. With a GPU, the model has two stations, the cores (demand `r`) and the GPU (demand `t`, one
server: two train bursts at once share it); N jobs are the customers of a closed queueing
network, solved exactly by mean value analysis (`overlap_sps`), so train bursts that would
collide queue, which is why 4 jobs that each keep a GPU 25 % busy fill it to ~79 %, not 100 %.

A tier's wall time is its agents' steps to go at that rate, with what each agent pays around its
training (its setup and its scoring, as the probe measured them) and the workers' start-ups
(`project`); agents promoted to a later tier are not known before the run, so a later tier is
costed at the matrix's mean. A plan in episodes trains each agent its episodes at the measured
steps per episode of its env (`project`'s `episode_steps`; unknown, and so its time, when nothing
measured one).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cockpit.contract.envids import backend_for
from cockpit.contract.fleetplan import FleetPlan, Unit
from cockpit.contract.presets import Preset
from cockpit.contract.runrecord import RunRecord
from cockpit.contract.workerargs import SERVE_MAX_JOBS, eval_envs
from cockpit.core.host import thread_budget

if TYPE_CHECKING:  # the advisor predicts N jobs' SPS with `speed_of`: it imports this module
    from cockpit.core.advisor import Costs


@dataclass(frozen=True)
class Speed:
    """One preset's measured one-job speed here, how many such jobs the slots run at once, and what
    an agent pays around its training (0 where nothing measured it)."""

    preset: Preset
    sps: float  # one job alone, samples per second
    parallel: float  # jobs' worth the fleet's slots run at once on this machine (the overlap model)
    setup_s: float = 0.0  # per agent and tier: building its env and model (or loading its checkpoint)
    score_s: float = 0.0  # per agent and tier: scoring it, at most (every episode at the env's limit)
    start_s: float = 0.0  # per worker process: its imports, paid once by each slot's fresh worker

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


def gpu_stations(preset: Preset, costs: Costs, physical_cores: int) -> tuple[Station, ...]:
    """The overlap model's stations for jobs of `preset` on a machine with a GPU (module
    docstring): the cores, where each sample's rollout runs, and the one GPU, where it trains."""
    rollout, train = costs.rollout_us(preset, preset.n_envs), costs.train_us(preset, preset.n_envs)
    return Station("cores", rollout, max(1, physical_cores)), Station("gpu", train, 1)


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


def speed_of(preset: Preset, costs: Costs, slots: int, physical_cores: int, *, score_episodes: int = 0) -> Speed:
    """The overlap model's speed of `slots` jobs of `preset` on a machine with `physical_cores`
    cores (and one GPU where `costs` were measured on one), with what each agent pays around its
    training when it is scored over `score_episodes` episodes at each tier's end. Where envpool
    steps the envs, each job's share of the cores steps them (`Costs.on_env_threads`); `Speed.sps`
    is then one job's speed with that share."""
    if backend_for(preset.env) == "envpool":
        costs = costs.on_env_threads(thread_budget(max(1, slots), physical_cores).threads_per_job)
    sample_us = costs.sample_us(preset, preset.n_envs)
    if costs.device == "cpu":
        fleet = cpu_fleet_sps(sample_us, costs, slots, physical_cores)
    else:
        fleet = overlap_sps(gpu_stations(preset, costs, physical_cores), slots)
    one_job = 1e6 / sample_us
    return Speed(preset, one_job, fleet / one_job, setup_s=costs.setup_s,
                 score_s=scoring_s(preset, costs, score_episodes), start_s=costs.import_s)  # fmt: skip


def cpu_fleet_sps(sample_us: float, costs: Costs, slots: int, physical_cores: int) -> float:
    """Samples per second of `slots` jobs on a CPU machine whose one job alone costs `sample_us` a
    sample (module docstring): alone, that rate; up to a job per core, each at `busy_factor` times
    the cost; past that, `min(slots - cores, cores)` cores each run two jobs' samples at
    `shared_factor` times the cost (three or more on a core are taken to cost what two do)."""
    if slots <= 0:
        return 0.0
    if slots == 1:
        return 1e6 / sample_us
    cores = max(1, physical_cores)
    one_each, two_share = 1e6 / (sample_us * costs.busy_factor), 1e6 / (sample_us * costs.shared_factor)
    if slots <= cores:
        return slots * one_each
    doubled = min(slots - cores, cores)
    return (cores - doubled) * one_each + doubled * two_share


def scoring_s(preset: Preset, costs: Costs, episodes: int) -> float:
    """At most what scoring an agent over `episodes` episodes costs: the worker plays them on
    `eval_envs` envs at once, each env its share of them in turn, every episode at the env's step
    limit (0 for an env without one: nothing bounds it)."""
    if episodes <= 0 or costs.episode_steps_max <= 0:
        return 0.0
    envs = eval_envs(episodes, preset.n_envs)
    return math.ceil(episodes / envs) * costs.episode_steps_max * costs.step_us(envs) / 1e6


@dataclass(frozen=True)
class Stage:
    """One tier (or the whole fleet) projected: agents, the amount they train in the plan's unit
    (steps or episodes), the steps that is, wall time and cost."""

    label: str
    agents: int
    each: int  # what each agent trains in it (a promoted agent resumes: the difference)
    amount: int  # all its agents' together
    steps: float | None  # `amount` in steps (None: a plan in episodes with no measured episode length)
    seconds: float | None  # None when a speed or an episode length is unknown
    cost_usd: float | None  # None without a rate or a time


@dataclass(frozen=True)
class Projection:
    """The plan's tiers, their total, and the same agents all trained to the last tier; `unit`
    is what the stages' `each` and `amount` count."""

    tiers: tuple[Stage, ...]
    total: Stage
    all_to_last: Stage
    unit: Unit = "timesteps"

    @property
    def saving(self) -> float:
        """The share of the plan's unit the tiers save against training every agent to the last tier."""
        return 1.0 - self.total.amount / self.all_to_last.amount if self.all_to_last.amount else 0.0


def project(plan: FleetPlan, speed: Callable[[Preset], Speed | None],
            episode_steps: Callable[[str], float | None] = lambda env: None) -> Projection:  # fmt: skip
    """Project `plan` on this machine; `speed` gives each agent preset's measured speed for the
    fleet's slots (None when it could not be measured), and, for a plan in episodes,
    `episode_steps` each env's measured steps per episode (None when nothing measured it: the
    steps, time and cost are then unknown).

    An agent and tier holds its slot for its steps at one slot's share of the fleet's rate, its
    setup and its scoring, and `1 / SERVE_MAX_JOBS` of a fresh worker's start (a served worker
    retires after that many jobs); the first tier also waits for the slots' first workers to
    start. A sync tier takes whole rounds of `jobs` agents (the last round's idle slots wait for
    it); an async one keeps every slot busy."""
    speeds = [speed(agent.preset) for agent in plan.agents]
    known = [s for s in speeds if s is not None]
    costs = _AgentCosts.mean(known, plan.jobs) if known and len(known) == len(speeds) else None
    per: float | None = 1.0
    if plan.unit == "episodes":  # the matrix's mean agent, as for its speed
        lengths = [episode_steps(agent.env) for agent in plan.agents]
        per = statistics.fmean(n for n in lengths if n is not None) if None not in lengths else None
    funnel = plan.funnel()
    rate = plan.rate_usd_per_h

    def stage(label: str, agents: int, each: int, *, first: bool) -> Stage:
        steps = None if per is None else each * per
        seconds = costs.wall_s(agents, steps, plan, first=first) if costs and steps is not None else None
        return Stage(label, agents, each, agents * each, None if steps is None else agents * steps, seconds,
                     _cost(seconds, rate))  # fmt: skip

    stages = [stage(f"tier {i}", agents, tier.target - (plan.tiers[i - 1].target if i else 0), first=i == 0)
              for i, (tier, agents) in enumerate(zip(plan.tiers, funnel, strict=True))]  # fmt: skip
    times = [s.seconds for s in stages]
    seconds = sum(t for t in times if t is not None) if None not in times else None
    steps = [s.steps for s in stages]
    total = Stage(
        "total",
        funnel[0],
        0,
        sum(s.amount for s in stages),
        sum(n for n in steps if n is not None) if None not in steps else None,
        seconds,
        _cost(seconds, rate),
    )
    everyone = stage("all to the last tier", funnel[0], plan.tiers[-1].target, first=True)
    return Projection(tuple(stages), total, everyone, plan.unit)  # fmt: skip


@dataclass(frozen=True)
class _AgentCosts:
    """An average agent's costs in one slot's seconds."""

    step_s: float
    job_s: float  # per agent and tier: setup, scoring, and its share of a fresh worker's start
    start_s: float  # a fresh worker's start

    @classmethod
    def mean(cls, speeds: Sequence[Speed], slots: int) -> _AgentCosts:
        start = statistics.fmean(s.start_s for s in speeds)
        return cls(step_s=statistics.fmean(slots / s.fleet_sps for s in speeds),
                   job_s=statistics.fmean(s.setup_s + s.score_s for s in speeds) + start / SERVE_MAX_JOBS,
                   start_s=start)  # fmt: skip

    def wall_s(self, agents: int, steps_each: float, plan: FleetPlan, *, first: bool) -> float:
        """Wall seconds for `agents` agents each training `steps_each` steps on the plan's slots."""
        agent_s = steps_each * self.step_s + self.job_s
        slots = max(1, plan.jobs)
        rounds = math.ceil(agents / slots) if plan.promotion == "sync" else max(1.0, agents / slots)
        return rounds * agent_s + (self.start_s if first else 0.0)


def _cost(seconds: float | None, rate: float | None) -> float | None:
    return seconds / 3600 * rate if seconds is not None and rate is not None else None


# The settings that decide how fast a job steps (not its learning rate or its seed).
SPEED_KEYS = ("env", "n_envs", "n_steps", "batch_size", "n_epochs", "net_arch", "normalize", "env_kwargs", "vec_env")


def episode_steps_from_record(env: str, record: RunRecord) -> float | None:
    """Steps per whole episode over a finished run's training on `env` (on any machine: an
    episode's length is the env's and the agents', not the hardware's): its jobs' steps over their
    whole episodes. None when it trained another env or recorded no episodes."""
    if record.config.env != env:
        return None
    jobs = [job for job in record.jobs if job.episodes]
    return sum(job.steps for job in jobs) / sum(job.episodes or 0 for job in jobs) if jobs else None


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
