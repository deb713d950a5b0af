"""A fleet's time and cost, projected before it runs from what this machine measured.

Every speed comes from a measurement: one job's costs as `training.probe` measured them for the
agent's preset on this machine (`cockpit.core.costs`). No speed is invented: an agent whose costs
could not be measured leaves the time and cost unknown.

The model for N slots (documented in docs/fleets.md): one job of an agent's preset steps at
`1e6 / Costs.sample_us(preset, n_envs)` samples per second on its own; N slots run
`min(N, physical cores / Costs.cores_per_job(preset))` such jobs' worth at once, since a job keeps
`cores_per_job` cores busy and the cores are what N jobs share on a CPU machine. A tier's wall time
is its agents' steps to go at that rate; agents promoted to a later tier are not known before the
run, so a later tier is costed at the matrix's mean seconds per step.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cockpit.contract.fleetplan import FleetPlan
from cockpit.contract.presets import Preset
from cockpit.core.advisor import Costs


@dataclass(frozen=True)
class Speed:
    """One preset's measured one-job speed here, and how many such jobs the slots run at once."""

    preset: Preset
    sps: float  # one job alone, samples per second
    parallel: float  # jobs' worth the fleet's slots run at once on this machine

    @property
    def fleet_sps(self) -> float:
        """Samples per second of the whole fleet when every slot runs this preset."""
        return self.sps * self.parallel


def speed_of(preset: Preset, costs: Costs, slots: int, physical_cores: int) -> Speed:
    """The model's speed of `slots` jobs of `preset` on a machine with `physical_cores` cores."""
    one_job = 1e6 / costs.sample_us(preset, preset.n_envs)
    parallel = min(float(slots), physical_cores / costs.cores_per_job(preset))
    return Speed(preset, one_job, parallel)


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
