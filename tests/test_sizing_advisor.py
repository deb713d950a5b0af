"""The advisor, table-driven with the seeds' machines and numbers, plus this 2-core machine."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cockpit.contract.advice import Advice
from cockpit.contract.costs import Costs
from cockpit.contract.presets import Preset, load
from cockpit.core.sizing.advisor import JobMeasure, Machine, Measurements, advise, cores_needed

GIB = 1024**3
THIS_MACHINE = Machine(physical_cores=2, logical_cores=2, ram_bytes=24 * GIB)
RTX_4070 = Machine(16, 32, 64 * GIB, "NVIDIA GeForce RTX 4070", 8 * GIB)  # the seeds' 8 GB card
RTX_4070_BIG_CPU = Machine(32, 64, 128 * GIB, "NVIDIA GeForce RTX 4070", 8 * GIB)
A100 = Machine(32, 64, 256 * GIB, "NVIDIA A100-SXM4-80GB", 80 * GIB)
RTX_3070 = Machine(8, 16, 32 * GIB, "NVIDIA GeForce RTX 3070", 8 * GIB)


def by_setting(items: list[Advice]) -> dict[str, tuple[str, str]]:
    return {a.setting: (a.current, a.suggested) for a in items}


Expected = tuple[str, str, str, dict[str, float | int | str]]  # setting, current, suggested, key numbers


def assert_advice(items: list[Advice], expected: list[Expected], case: str) -> None:
    """The advice is exactly `expected`, in order: no item missing, none extra, the numbers given."""
    lines = [a.line() for a in items]
    assert [(a.setting, a.current, a.suggested) for a in items] == [e[:3] for e in expected], (case, lines)
    for item, (*_, numbers) in zip(items, expected, strict=True):
        assert {k: item.numbers.get(k) for k in numbers} == numbers, (case, item.setting, item.numbers)
        assert item.reason and item.effect and item.current != item.suggested


def one_heavy_job_idle_between_bursts(peak_gib: float = 1.5) -> Measurements:
    """The seeds' single heavy job: ~25 % GPU on average, ~80 % while training, CPU not full."""
    job = JobMeasure("000", sps=700, train_share=0.3, gpu_util_rollout=10, gpu_util_train=80,
                     gpu_mem_peak_bytes=int(peak_gib * GIB), cpu_percent=400)  # fmt: skip
    return Measurements((job,), gpu_util_mean=25.0, gpu_util_while_training=80.0, cpu_percent_mean=40.0)


@pytest.mark.parametrize(
    ("case", "host", "preset", "jobs", "measured", "expected"),
    [
        # beast needs 64 envs / 4 per core = 16 cores (seed): one job fits 16; the A40's table row
        # says heavy, and min(4 jobs, 16 cores // 16) = 1 job, as now
        ("beast on 16 cores", Machine(16, 32, 64 * GIB, "NVIDIA A40", 48 * GIB), "beast", 1, None,
         [("preset", "beast", "heavy", {"gpu": "NVIDIA A40"})]),
        # 2 x 16 = 32 cores > 16: 16 // 16 = 1 job, or 16 x 4 // 2 = 32 envs each; no GPU and a
        # 1024-wide layer (> 256): the first two layers at 256 / 4 = 64
        ("2 beast on 16 cores", Machine(16, 32, 64 * GIB), "beast", 2, None,
         [("jobs", "2", "1", {"cores_needed": 32.0, "physical_cores": 16}),
          ("n_envs", "64", "32", {"cores_needed": 32.0, "physical_cores": 16}),
          ("net_arch", "1024,512,512,256", "64,64", {"widest_layer": 1024})]),
        # 16 cores > 8: 8 // 16 rounds to 0, at least 1 job (no jobs change); 8 x 4 // 1 = 32 envs
        ("beast on 8 cores", Machine(8, 16, 32 * GIB), "beast", 1, None,
         [("n_envs", "64", "32", {"cores_needed": 16.0, "physical_cores": 8}),
          ("net_arch", "1024,512,512,256", "64,64", {"widest_layer": 1024})]),
        # the seeds' RTX 4070 and heavy: 4 jobs took 25 % to 70-90 %; a heavy job needs 32 / 4 = 8
        # cores, so 32 cores fit min(4, 32 // 8) = 4 jobs and 16 cores min(4, 16 // 8) = 2
        ("4070 heavy, hardware only", RTX_4070_BIG_CPU, "heavy", 1, None,
         [("jobs", "1", "4", {"gpu": "NVIDIA GeForce RTX 4070"})]),
        ("4070 heavy, 16 cores", RTX_4070, "heavy", 1, None, [("jobs", "1", "2", {"gpu": "NVIDIA GeForce RTX 4070"})]),
        # GPU 25 % < 60, bursts 80 % >= 50, CPU 40 % < 80: ceil(1 x 85 / 25) = 4 jobs, under both
        # caps (cores 32 // 8 = 4, GPU memory floor(0.9 x 8 / 1.5) = 4); the table's 1 -> 4 comes second
        ("4070 heavy, measured idle gaps", RTX_4070_BIG_CPU, "heavy", 1, one_heavy_job_idle_between_bursts(),
         [("jobs", "1", "4", {"gpu_util_mean": 25.0, "gpu_util_train": 80.0, "cpu_percent": 40.0})]),
        # 8 GB: 4 jobs x 2.5 GiB = 10 GiB is over 0.9 x 8 = 7.2 GiB; floor(7.2 / 2.5) = 2 fit
        ("4070 heavy, GPU memory", RTX_4070_BIG_CPU, "heavy", 4,
         Measurements((JobMeasure("000", gpu_mem_peak_bytes=int(2.5 * GIB)),)),
         [("jobs", "4", "2", {"peak_gib": 2.5, "total_gib": 8.0})]),
        # the seeds' A100 80GB ran 8 parallel agents (16 envs each = 4 cores, 8 x 4 = 32 cores);
        # the table suggests beast and 8 jobs, as now
        ("A100, 8 agents of fast", A100, "fast", 8, None,
         [("preset", "fast", "beast", {"gpu": "NVIDIA A100-SXM4-80GB"})]),
        # 8 cores step one heavy job's 32 envs (8 cores): the preset shrinks, min(2, 8 // 8) = 1 job stays
        ("3070 heavy", RTX_3070, "heavy", 1, None, [("preset", "heavy", "fast", {"gpu": "NVIDIA GeForce RTX 3070"})]),
        # this 2-core machine: no GPU, CartPole steps at 32 envs a core, 2 x 8 / 32 = 0.5 cores
        ("this machine, cartpole x2", THIS_MACHINE, "cartpole", 2, None, []),
        # heavy needs 32 / 4 = 8 cores of 2: 2 x 4 // 1 = 8 envs; its 1024-wide MLP is too wide
        ("this machine, heavy", THIS_MACHINE, "heavy", 1, None,
         [("n_envs", "32", "8", {"cores_needed": 8.0, "physical_cores": 2}),
          ("net_arch", "1024,512,256", "64,64", {"widest_layer": 1024})]),
    ],
)  # fmt: skip
def test_advice_from_the_seeds(
    case: str, host: Machine, preset: str, jobs: int, measured: Measurements | None, expected: list[Expected]
) -> None:
    items = advise(host, load(preset), jobs, measured)
    assert_advice(items, expected, case)


def test_overlap_advice_quotes_the_measured_numbers_and_names_its_cap() -> None:
    items = advise(RTX_4070, load("heavy"), 1, one_heavy_job_idle_between_bursts())
    jobs = next(a for a in items if a.setting == "jobs")
    assert jobs.suggested == "2"
    assert "GPU busy 25 % on average but 80 % while a job trains, CPU 40 %" in jobs.reason
    assert "cores cap it at 2" in jobs.reason


def test_overlap_is_not_advised_when_the_cpu_is_already_busy() -> None:
    busy = replace(one_heavy_job_idle_between_bursts(), cpu_percent_mean=85.0)
    assert "jobs" not in by_setting(advise(RTX_4070_BIG_CPU, load("heavy"), 4, busy))


def test_cpu_bound_run_sheds_a_job_then_envs() -> None:
    bound = Measurements((JobMeasure("000"), JobMeasure("001")), gpu_util_mean=12.0, cpu_percent_mean=97.0)
    assert by_setting(advise(RTX_4070_BIG_CPU, load("heavy"), 2, bound))["jobs"] == ("2", "1")
    one = Measurements((JobMeasure("000"),), gpu_util_mean=12.0, cpu_percent_mean=97.0)
    assert by_setting(advise(RTX_4070_BIG_CPU, load("heavy"), 1, one))["n_envs"] == ("32", "16")


def test_an_out_of_memory_event_halves_the_batch_keeping_a_divisor() -> None:
    oom = Measurements((JobMeasure("000", cuda_oom=True),))
    preset = replace(load("heavy"), batch_size=3 * 1024 + 1024)  # 4096 of 8192
    (item,) = [a for a in advise(RTX_4070, preset, 1, oom) if a.setting == "batch_size"]
    assert item.suggested == "2048" and 8192 % int(item.suggested) == 0
    odd = replace(load("heavy"), n_steps=250, batch_size=4000)  # total 8000: 2000 divides it
    (item,) = [a for a in advise(RTX_4070, odd, 1, oom) if a.setting == "batch_size"]
    assert item.suggested == "2000"


def test_a_batch_that_does_not_divide_the_rollout_is_fixed_first() -> None:
    bad = replace(load("cartpole"), batch_size=100)  # 256 is not a multiple of 100
    (item,) = [a for a in advise(THIS_MACHINE, bad, 1) if a.setting == "batch_size"]
    assert (item.current, item.suggested) == ("100", "64")


def test_without_a_gpu_a_saturated_cpu_is_the_goal_not_a_problem() -> None:
    full = Measurements((JobMeasure("000"), JobMeasure("001")), gpu_util_mean=None, cpu_percent_mean=98.0)
    assert advise(THIS_MACHINE, load("cartpole"), 2, full) == []


# Costs as `cockpit_training.probe` measured them on this 2-core machine (microseconds, one thread).
CARTPOLE_COSTS = Costs("cpu", step_overhead_us=372, env_policy_us=5, env_step_us=7.8, train_sample_us=5)
PONG_COSTS = Costs("cpu", step_overhead_us=760, env_policy_us=525, env_step_us=287, train_sample_us=985)


def pong_cpu() -> Preset:
    return replace(load("cartpole"), env="Pong-v5", n_steps=64, batch_size=256, n_epochs=2, net_arch=(256,))


@pytest.mark.parametrize(
    ("case", "host", "preset", "jobs", "costs", "expected"),
    [
        # CartPole's 20 epochs of a 64x64 MLP are cheap: a sample costs 372 / n + 5 + 20 x 5 us, so
        # the 372 us step overhead is 46.5 / 151.5 = 31 % of it at 8 envs, 23.25 / 128.25 = 18 % at
        # 16 and 11.6 / 116.6 = 10 % at 32, where the cap of 4 x 8 stops it; 2 jobs x 1 core fit 2 cores
        ("cartpole on 2 cores", THIS_MACHINE, load("cartpole"), 2, CARTPOLE_COSTS,
         [("n_envs", "8", "32", {"step_overhead_us": 372, "env_policy_us": 5, "train_sample_us": 5})]),
        # Pong's CNN training dominates: 760 / 8 = 95 us of 95 + 525 + 2 x 985 = 2590 is 4 % (< 10 %)
        ("pong on 2 cores", THIS_MACHINE, pong_cpu(), 2, PONG_COSTS, []),
        # without a GPU each job's loop keeps a core busy: 4 jobs need 4 cores of 2, 2 // 1 = 2 fit
        ("pong, 4 jobs on 2 cores", THIS_MACHINE, pong_cpu(), 4, PONG_COSTS,
         [("jobs", "4", "2", {"jobs": 4, "n_envs": 8, "cores_needed": 4.0, "physical_cores": 2})]),
        # ... and 2 jobs would leave 6 of 8 cores idle: one job per core
        ("pong, 2 jobs on 8 cores", Machine(8, 16, 32 * GIB), pong_cpu(), 2, PONG_COSTS,
         [("jobs", "2", "8", {"jobs": 2, "physical_cores": 8})]),
        # with a GPU only the rollout loads the cores: (900 / 32 + 30) / (900 / 32 + 30 + 20 x 6) =
        # 58.1 / 178.1 = 0.33 cores a job, so 16 cores keep the table's 4 heavy jobs going (not just
        # the 2 its envs-per-core guess allows); the overhead, 28.1 / 178.1 = 16 % at 32 envs, is
        # 14.1 / 164.1 = 9 % at 64
        ("4070 heavy, measured", RTX_4070, load("heavy"), 1,
         Costs("cuda", step_overhead_us=900, env_policy_us=30, env_step_us=25, train_sample_us=6),
         [("n_envs", "32", "64", {"step_overhead_us": 900, "env_policy_us": 30, "train_sample_us": 6}),
          ("jobs", "1", "4", {"gpu": "NVIDIA GeForce RTX 4070"})]),
    ],
)  # fmt: skip
def test_advice_from_measured_costs(
    case: str, host: Machine, preset: Preset, jobs: int, costs: Costs, expected: list[Expected]
) -> None:
    assert_advice(advise(host, preset, jobs, costs=costs), expected, case)


def test_more_envs_quote_the_measured_costs_and_the_expected_gain() -> None:
    (item,) = [a for a in advise(THIS_MACHINE, load("cartpole"), 2, costs=CARTPOLE_COSTS) if a.setting == "n_envs"]
    assert "372 us + 5.0 us per env" in item.reason and "20 epoch(s)" in item.reason
    assert "from 31% to 10%" in item.effect and "batch_size 256" in item.effect
    # 46.5 + 5 + 100 us per sample at 8 envs against 11.6 + 5 + 100 at 32: about +30 %
    assert "+30%" in item.effect


def test_the_envs_stop_growing_at_what_the_cores_can_step() -> None:
    # With a GPU the envs are the cores' load: one core steps one job's envs at most, so with
    # costly envs on 1 core the doubling stops before the overhead target.
    costs = Costs("cuda", step_overhead_us=2000, env_policy_us=40, env_step_us=35, train_sample_us=1)
    preset = replace(load("heavy"), n_envs=8)
    one_core = Machine(1, 2, 8 * GIB, "NVIDIA GeForce RTX 4070", 8 * GIB)
    items = by_setting(advise(one_core, preset, 1, costs=costs))
    envs = int(items["n_envs"][1])
    assert envs > 8 and cores_needed(replace(preset, n_envs=envs), 1, costs) <= 1
    assert cores_needed(replace(preset, n_envs=envs * 2), 1, costs) > 1 or envs * 2 > 32


def test_a_gpu_job_counts_its_rollout_share_of_a_core_and_never_zero() -> None:
    heavy = load("heavy")
    # an env step measured as free (noise clamps it to 0) must not make a job free
    free_envs = Costs("cuda", step_overhead_us=100, env_policy_us=5, env_step_us=0.0, train_sample_us=2)
    assert cores_needed(heavy, 1, free_envs) >= 0.25
    items = advise(A100, heavy, 2, costs=free_envs)  # no ZeroDivisionError
    assert all(item.reason for item in items)
    # the rollout (Python loop, env steps, the forward's launch) is CPU work: 900/32 + 30 = 58.125 us
    # of a sample's 58.125 + 20 epochs x 6 = 178.125 us, so 4 jobs keep 4 x 58.125 / 178.125 cores busy
    busy = Costs("cuda", step_overhead_us=900, env_policy_us=30, env_step_us=25, train_sample_us=6)
    assert cores_needed(heavy, 4, busy) == pytest.approx(4 * 58.125 / 178.125)  # 1.305


def test_applied_envs_advice_cannot_compound_past_the_runs_cap() -> None:
    costs = Costs("cpu", step_overhead_us=2000, env_policy_us=20, env_step_us=5, train_sample_us=10)
    cartpole = load("cartpole")
    first = by_setting(advise(THIS_MACHINE, cartpole, 2, costs=costs))["n_envs"]
    assert first == ("8", "32")
    applied = replace(cartpole, n_envs=32, batch_size=256)
    assert "n_envs" in by_setting(advise(THIS_MACHINE, applied, 2, costs=costs))  # 32 -> 128 on its own
    assert "n_envs" not in by_setting(advise(THIS_MACHINE, applied, 2, costs=costs, max_envs=32))
