"""The fleet's overlap model (docs/fleets.md, "The overlap model"): N jobs' aggregate SPS from one
job's probed costs, for a CPU-bound preset and a GPU-bound one. Pure arithmetic: no timing."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest

from cockpit.contract.costs import Costs
from cockpit.contract.presets import Preset, load
from cockpit.core.sizing.overlap import Station, gpu_stations, overlap_sps, speed_of


def cartpole() -> Preset:
    return load("cartpole")  # 8 envs, 20 epochs


# CPU: a sample costs 400 / 8 + 10 = 60 us of rollout and 20 x 2 = 40 us of training: 100 us. No
# share of it is an env's own step, which more env threads would split: these fixtures are for the
# contention rule and the queueing network; the env threads' credit has tests of its own.
CPU_COSTS = Costs("cpu", step_overhead_us=400.0, env_policy_us=10.0, env_step_us=0.0, train_sample_us=2.0)


def gpu_preset() -> Preset:
    return replace(load("cartpole"), n_envs=8, n_epochs=10)


def gpu_costs(rollout_us: float, train_us: float) -> Costs:
    """CUDA costs whose sample at `gpu_preset()` costs `rollout_us` on a core and `train_us` on the GPU."""
    return Costs("cuda", step_overhead_us=8 * rollout_us / 2, env_policy_us=rollout_us / 2, env_step_us=0.0,
                 train_sample_us=train_us / 10)  # fmt: skip


def one_gpu_mva(rollout_us: float, train_us: float, jobs: int) -> float:
    """The textbook recurrence for a delay (the rollout on a free core) and one queueing server (the
    GPU): R(n) = t (1 + Q(n-1)), X(n) = n / (r + R(n)), Q(n) = X(n) R(n). Samples per second."""
    queue, rate = 0.0, 0.0
    for n in range(1, jobs + 1):
        residence = train_us * (1 + queue)
        rate = n / (rollout_us + residence)
        queue = rate * residence
    return rate * 1e6


def product_form_sps(network: list[Station], jobs: int) -> float:
    """The same network solved from its stationary distribution (every way to place `jobs` jobs at
    the stations, each weighted by prod D^k / prod min(j, servers)): an independent check of MVA."""

    def weight(station: Station, k: int) -> float:
        return station.demand_us**k / math.prod(min(j, station.servers) for j in range(1, k + 1))

    placements = [ks for ks in itertools.product(range(jobs + 1), repeat=len(network)) if sum(ks) == jobs]
    weights = {ks: math.prod(weight(s, k) for s, k in zip(network, ks, strict=True)) for ks in placements}
    total = sum(weights.values())
    last = network[-1]  # samples leave the last station at its busy servers' rate
    return sum(w / total * min(ks[-1], last.servers) / last.demand_us for ks, w in weights.items()) * 1e6


@pytest.mark.parametrize(
    ("cores", "expected"),
    [
        (2, [10_000, 20_000, 20_000, 20_000]),  # more jobs than cores share them: 2 jobs' worth
        (4, [10_000, 20_000, 30_000, 40_000]),  # one core per job: N jobs' worth
        (1, [10_000, 10_000, 10_000, 10_000]),
    ],
)
def test_cpu_jobs_that_cost_each_other_nothing_run_min_n_cores_jobs_worth(cores: int, expected: list[float]) -> None:
    for slots, want in enumerate(expected, start=1):
        speed = speed_of(cartpole(), CPU_COSTS, slots, cores)
        assert speed.sps == pytest.approx(10_000)
        assert speed.parallel == pytest.approx(min(slots, cores))
        assert speed.fleet_sps == pytest.approx(want)


@pytest.mark.parametrize(
    ("cores", "expected"),
    [
        # 100 us alone; 80 us with a core each; a shared core does a sample in 125 us (two jobs' worth).
        (2, [10_000, 25_000, 12_500 + 8_000, 2 * 8_000, 2 * 8_000]),
        (4, [10_000, 25_000, 37_500, 50_000, 3 * 12_500 + 8_000]),
        (1, [10_000, 8_000, 8_000, 8_000, 8_000]),
    ],
)
def test_cpu_jobs_side_by_side_pay_the_measured_contention(cores: int, expected: list[float]) -> None:
    costs = replace(CPU_COSTS, busy_factor=0.8, shared_factor=1.25)
    rates = [speed_of(cartpole(), costs, slots, cores).fleet_sps for slots in range(1, 6)]
    assert rates == pytest.approx(expected)
    assert speed_of(cartpole(), costs, 3, cores).sps == pytest.approx(10_000)  # one job alone, whatever the slots


def test_a_gpu_bound_preset_queues_its_train_bursts_on_the_one_gpu() -> None:
    # 20 us of rollout on a core, 80 us of training on the GPU: alone 10,000 SPS, and the GPU caps the
    # fleet at 1e6 / 80 = 12,500 SPS, which queueing train bursts approach but never reach.
    costs = gpu_costs(20.0, 80.0)
    assert gpu_stations(gpu_preset(), costs, 16) == (Station("cores", 20.0, 16), Station("gpu", 80.0, 1))
    # R(2) = 80 x 1.8 = 144: X = 2 / 164; R(3) = 80 x (1 + 2 x 144 / 164): X = 3 / (20 + 220.49)
    expected = [10_000.0, 2e6 / 164, 3e6 / (20 + 80 * (1 + 288 / 164)), one_gpu_mva(20.0, 80.0, 4)]
    for slots, want in enumerate(expected, start=1):
        speed = speed_of(gpu_preset(), costs, slots, 16)
        assert speed.sps == pytest.approx(10_000)
        assert speed.fleet_sps == pytest.approx(want)
        assert speed.fleet_sps == pytest.approx(one_gpu_mva(20.0, 80.0, slots))
        assert speed.fleet_sps < 12_500
    assert [round(speed_of(gpu_preset(), costs, n, 16).parallel, 3) for n in range(1, 5)] == [1.0, 1.22, 1.247, 1.25]


def test_four_jobs_that_each_keep_the_gpu_a_quarter_busy_fill_it_to_79_percent() -> None:
    # The seeds: one job kept the GPU 25 % busy, four took it to 70-90 %, not 4 x 25 % = 100 %.
    costs = gpu_costs(75.0, 25.0)
    gpu_busy = [speed_of(gpu_preset(), costs, n, 16).fleet_sps * 25e-6 for n in range(1, 5)]
    assert gpu_busy == pytest.approx([0.25, 0.4706, 0.6538, 0.7939], abs=1e-4)
    assert [speed_of(gpu_preset(), costs, n, 16).fleet_sps for n in range(1, 5)] == pytest.approx(
        [one_gpu_mva(75.0, 25.0, n) for n in range(1, 5)]
    )


@pytest.mark.parametrize(
    "network",
    [
        [Station("cores", 75.0, 2), Station("gpu", 25.0, 1)],  # few cores: rollouts queue for them too
        [Station("cores", 20.0, 2), Station("gpu", 80.0, 1)],
        [Station("cores", 100.0, 3)],  # a CPU machine's jobs that cost each other nothing
    ],
)
def test_mva_matches_the_networks_stationary_distribution(network: list[Station]) -> None:
    for jobs in range(1, 7):
        assert overlap_sps(network, jobs) == pytest.approx(product_form_sps(network, jobs), rel=1e-9)


def test_no_slot_runs_nothing_and_more_slots_never_run_slower() -> None:
    assert speed_of(cartpole(), CPU_COSTS, 0, 2).fleet_sps == 0.0
    for costs in (CPU_COSTS, gpu_costs(75.0, 25.0), gpu_costs(20.0, 80.0)):
        rates = [speed_of(gpu_preset(), costs, n, 2).fleet_sps for n in range(1, 9)]
        assert rates == sorted(rates)


@pytest.mark.parametrize(
    ("cores", "slots", "threads"), [(2, 1, 2), (4, 1, 4), (4, 2, 2), (16, 4, 4), (2, 2, 1), (2, 3, 1)]
)
def test_an_envpool_jobs_env_threads_split_its_envs_steps(cores: int, slots: int, threads: int) -> None:
    """Each job gets `cores // slots` envpool threads: its envs' own steps (5 of an env's 10 us
    here) run side by side on them; the rest of a sample's cost stays on its Python thread."""
    costs = replace(CPU_COSTS, env_step_us=5.0)
    sample_us = 100.0 - 5.0 * (1 - 1 / threads)
    speed = speed_of(cartpole(), costs, slots, cores)
    assert speed.sps == pytest.approx(1e6 / sample_us)
    assert speed.fleet_sps == pytest.approx(min(slots, cores) * 1e6 / sample_us)
    # gymnasium's envs step in the job's own thread (or its own processes): no credit
    gymnasium_only = replace(cartpole(), env="Taxi-v4")
    assert speed_of(gymnasium_only, costs, slots, cores).sps == pytest.approx(10_000)


def test_env_threads_take_only_the_envs_own_step_off_a_sample() -> None:
    costs = replace(CPU_COSTS, env_step_us=6.0)
    assert costs.on_env_threads(1) == costs
    three = costs.on_env_threads(3)
    assert (three.env_policy_us, three.env_step_us) == pytest.approx((6.0, 2.0))
    assert three.step_overhead_us == costs.step_overhead_us and three.train_sample_us == costs.train_sample_us
