"""The overlap model: the speed of N jobs side by side, from what one job of the preset costs here
(`Costs`, as the probe measured it). The advisor and the fleet's projection both take it.

The overlap model for N slots (docs/fleets.md, "The overlap model"): a job is one loop that
alternates a rollout phase and a train phase, and holds one server while it runs a phase. Per
sample at the preset's n_envs, from the probe, its rollout costs `r = step_overhead_us / n_envs +
env_policy_us` (on a core: the loop, the env step and the forward pass) and its training
`t = n_epochs * (train_sample_us + train_epoch_us / (n_envs * n_steps))` (on a core without a GPU,
on the GPU with one); alone it steps at `1e6 / (r + t)` samples per second.

On a CPU machine every phase runs on the cores (`cpu_fleet_sps`), each job's envpool and torch
threads on its `cores // N` share of them (`Costs.on_env_threads`, `Costs.on_train_threads`, fitted
to the probe's measured speedups): one job alone steps at that rate;
N jobs on C cores with N <= C each hold a core at `busy_factor` times a sample's cost (every core
busy); past C, the kernel time-shares cores, and each of the `min(N - C, C)` cores running two
jobs gets their samples done at `shared_factor` times one job's cost. Both factors are measured
here with two real jobs side by side (`cockpit.core.sizing.contention`): they do not follow from one job
alone. With a GPU, the model has two stations, the cores (demand `r`) and the GPU (demand `t`, one
server: two train bursts at once share it); N jobs are the customers of a closed queueing
network, solved exactly by mean value analysis (`overlap_sps`), so train bursts that would
collide queue, which is why 4 jobs that each keep a GPU 25 % busy fill it to ~79 %, not 100 %.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cockpit.contract.costs import Costs
from cockpit.contract.envids import backend_for
from cockpit.contract.presets import Preset
from cockpit.contract.workerargs import eval_envs
from cockpit.core.machine.host import thread_budget


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
    training when it is scored over `score_episodes` episodes at each tier's end. Each job gets
    its share of the cores, `cores // slots`: where envpool steps the envs they step them
    (`Costs.on_env_threads`), and on the CPU its train phase runs on them (`Costs.on_train_threads`);
    `Speed.sps` is then one job's speed with that share."""
    threads = thread_budget(max(1, slots), physical_cores).threads_per_job
    costs = costs.on_train_threads(threads)  # on the CPU; a GPU's train phase is not on the cores
    if backend_for(preset.env) == "envpool":
        costs = costs.on_env_threads(threads)
    sample_us = costs.sample_us(preset, preset.n_envs)
    if costs.device == "cpu":
        fleet = cpu_fleet_sps(sample_us, costs, slots, physical_cores)
    else:
        fleet = overlap_sps(gpu_stations(preset, costs, physical_cores), slots)
    one_job = 1e6 / sample_us
    return Speed(
        preset,
        one_job,
        fleet / one_job,
        setup_s=costs.setup_s,
        score_s=scoring_s(preset, costs, score_episodes),
        start_s=costs.import_s,
    )


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
