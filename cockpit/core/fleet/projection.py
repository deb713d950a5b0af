"""A fleet's time and cost, projected before it runs from what this machine measured.

Every speed comes from a measurement: one job's costs as `cockpit_training.probe` measured them for the
agent's preset on this machine (`cockpit.core.sizing.cost_probe`). No speed is invented: an agent whose costs
could not be measured leaves the time and cost unknown.

Each agent's speed comes from the overlap model (`cockpit.core.sizing.overlap`).

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

from cockpit.contract.fleetplan import FleetPlan, Unit
from cockpit.contract.presets import Preset
from cockpit.contract.runrecord import RunRecord
from cockpit.contract.workerargs import SERVE_MAX_JOBS
from cockpit.core.sizing.overlap import Speed


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


def project(
    plan: FleetPlan,
    speed: Callable[[Preset], Speed | None],
    episode_steps: Callable[[str], float | None] = lambda env: None,
) -> Projection:
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
        return Stage(
            label, agents, each, agents * each, None if steps is None else agents * steps, seconds, _cost(seconds, rate)
        )

    stages = [
        stage(f"tier {i}", agents, tier.target - (plan.tiers[i - 1].target if i else 0), first=i == 0)
        for i, (tier, agents) in enumerate(zip(plan.tiers, funnel, strict=True))
    ]
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
    return Projection(tuple(stages), total, everyone, plan.unit)


@dataclass(frozen=True)
class _AgentCosts:
    """An average agent's costs in one slot's seconds."""

    step_s: float
    job_s: float  # per agent and tier: setup, scoring, and its share of a fresh worker's start
    start_s: float  # a fresh worker's start

    @classmethod
    def mean(cls, speeds: Sequence[Speed], slots: int) -> _AgentCosts:
        start = statistics.fmean(s.start_s for s in speeds)
        return cls(
            step_s=statistics.fmean(slots / s.fleet_sps for s in speeds),
            job_s=statistics.fmean(s.setup_s + s.score_s for s in speeds) + start / SERVE_MAX_JOBS,
            start_s=start,
        )

    def wall_s(self, agents: int, steps_each: float, plan: FleetPlan, *, first: bool) -> float:
        """Wall seconds for `agents` agents each training `steps_each` steps on the plan's slots."""
        agent_s = steps_each * self.step_s + self.job_s
        slots = max(1, plan.jobs)
        # sync and pbt wait at each tier's end for its last agent: whole rounds of slots.
        rounds = math.ceil(agents / slots) if plan.promotion in ("sync", "pbt") else max(1.0, agents / slots)
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
