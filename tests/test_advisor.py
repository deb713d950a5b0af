"""The advisor, table-driven with the seeds' machines and numbers, plus this 2-core machine."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cockpit.core.advisor import Advice, JobMeasure, Machine, Measurements, advise
from cockpit.presets import load

GIB = 1024**3
Change = tuple[str, str]
THIS_MACHINE = Machine(physical_cores=2, logical_cores=2, ram_bytes=24 * GIB)
RTX_4070 = Machine(16, 32, 64 * GIB, "NVIDIA GeForce RTX 4070", 8 * GIB)  # the seeds' 8 GB card
RTX_4070_BIG_CPU = Machine(32, 64, 128 * GIB, "NVIDIA GeForce RTX 4070", 8 * GIB)
A100 = Machine(32, 64, 256 * GIB, "NVIDIA A100-SXM4-80GB", 80 * GIB)
RTX_3070 = Machine(8, 16, 32 * GIB, "NVIDIA GeForce RTX 3070", 8 * GIB)


def by_setting(items: list[Advice]) -> dict[str, tuple[str, str]]:
    return {a.setting: (a.current, a.suggested) for a in items}


def one_heavy_job_idle_between_bursts(peak_gib: float = 1.5) -> Measurements:
    """The seeds' single heavy job: ~25 % GPU on average, ~80 % while training, CPU not full."""
    job = JobMeasure("000", sps=700, train_share=0.3, gpu_util_rollout=10, gpu_util_train=80,
                     gpu_mem_peak_bytes=int(peak_gib * GIB), cpu_percent=400)  # fmt: skip
    return Measurements((job,), gpu_util_mean=25.0, gpu_util_while_training=80.0, cpu_percent_mean=40.0)


@pytest.mark.parametrize(
    ("case", "host", "preset", "jobs", "measured", "expected"),
    [
        # beast needs ~16 cores (seed): one job fits 16, two do not; on 8 cores halve its envs
        ("beast on 16 cores", Machine(16, 32, 64 * GIB, "NVIDIA A40", 48 * GIB), "beast", 1, None,
         {"preset": ("beast", "heavy")}),
        ("2 beast on 16 cores", Machine(16, 32, 64 * GIB), "beast", 2, None, {"jobs": ("2", "1")}),
        ("beast on 8 cores", Machine(8, 16, 32 * GIB), "beast", 1, None, {"n_envs": ("64", "32")}),
        # the seeds' RTX 4070 and heavy: 4 jobs took 25 % to 70-90 %; 16 cores step only 2 heavy jobs
        ("4070 heavy, hardware only", RTX_4070_BIG_CPU, "heavy", 1, None, {"jobs": ("1", "4")}),
        ("4070 heavy, 16 cores", RTX_4070, "heavy", 1, None, {"jobs": ("1", "2")}),
        ("4070 heavy, measured idle gaps", RTX_4070_BIG_CPU, "heavy", 1, one_heavy_job_idle_between_bursts(),
         {"jobs": ("1", "4")}),
        # 8 GB: 4 jobs x 2.5 GiB peaks is over 90 % of the card; 2 fit
        ("4070 heavy, GPU memory", RTX_4070_BIG_CPU, "heavy", 4,
         Measurements((JobMeasure("000", gpu_mem_peak_bytes=int(2.5 * GIB)),)), {"jobs": ("4", "2")}),
        # the seeds' A100 80GB ran 8 parallel agents (16 envs each); the table suggests beast
        ("A100, 8 agents of fast", A100, "fast", 8, None, {"preset": ("fast", "beast")}),
        # 8 cores step one heavy job's 32 envs: the preset shrinks, the job count stays
        ("3070 heavy", RTX_3070, "heavy", 1, None, {"preset": ("heavy", "fast")}),
        # this 2-core machine: no GPU, CartPole steps cheaply, so 2 jobs fit; heavy's MLP is too wide
        ("this machine, cartpole x2", THIS_MACHINE, "cartpole", 2, None, {}),
        ("this machine, heavy", THIS_MACHINE, "heavy", 1, None,
         {"n_envs": ("32", "8"), "net_arch": ("1024,512,256", "64,64")}),
    ],
)  # fmt: skip
def test_advice_from_the_seeds(
    case: str, host: Machine, preset: str, jobs: int, measured: Measurements | None, expected: dict[str, Change]
) -> None:
    items = advise(host, load(preset), jobs, measured)
    got = by_setting(items)
    for setting, change in expected.items():
        assert got.get(setting) == change, (case, [a.line() for a in items])
    if not expected:
        assert items == [], (case, [a.line() for a in items])
    for item in items:
        assert item.reason and item.effect and item.current != item.suggested


def test_overlap_advice_quotes_the_measured_numbers_and_names_its_cap() -> None:
    items = advise(RTX_4070, load("heavy"), 1, one_heavy_job_idle_between_bursts())
    jobs = next(a for a in items if a.setting == "jobs")
    assert jobs.suggested == "2"
    assert "GPU 25 % on average but 80 % while a job trains, CPU 40 %" in jobs.reason
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
