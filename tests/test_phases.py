"""Phase accounting against a known burst pattern from the scripted NVML stand-in."""

from __future__ import annotations

import itertools

import pytest

from cockpit.core.nvml import open_gpu
from cockpit.core.phases import account
from tests.fake_pynvml import FakeGpu, FakeNvml

T0 = 1_800_000_000.0


def job_phases(offset: float, cycles: int) -> list[tuple[float, str | None]]:
    """Rollout for 3 s, train for 1 s, repeated; the worker stops at the end."""
    out: list[tuple[float, str | None]] = []
    t = T0 + offset
    for _ in range(cycles):
        out += [(t, "rollout"), (t + 3.0, "train")]
        t += 4.0
    return [*out, (t, None)]


def test_a_single_job_gets_its_bursts_attributed_to_training() -> None:
    phases = {"000": job_phases(0.0, 5)}
    train = [(s, e) for (s, p), (e, _) in itertools.pairwise(phases["000"]) if p == "train"]

    def util_at(t: float) -> float:  # the GPU bursts while the job trains
        return 90.0 if any(s <= t < e for s, e in train) else 4.0

    clock = [T0 - 0.5]
    gpu, _ = open_gpu(FakeNvml(FakeGpu(util_at=util_at, clock=lambda: clock[0], period=0.05, start=T0 - 0.5)))
    samples = []
    while clock[0] < T0 + 21:
        clock[0] += 0.2
        samples += gpu.read()[1]
    cpu = [(t, "000", 100.0 if util_at(t) == 4.0 else 30.0) for t, _ in samples[::4]]

    result = account(phases, samples, cpu, end=T0 + 21)
    job = result.jobs["000"]
    assert job["rollout"].seconds == pytest.approx(15.0) and job["train"].seconds == pytest.approx(5.0)
    assert job["train"].gpu_util_mean == pytest.approx(90.0)
    assert job["rollout"].gpu_util_mean == pytest.approx(4.0)
    assert job["rollout"].cpu_percent_mean == pytest.approx(100.0)
    assert job["train"].cpu_percent_mean == pytest.approx(30.0)
    assert result.gpu_util_mean == pytest.approx(0.25 * 90 + 0.75 * 4, abs=1.0)
    assert result.gpu_util_p50 == pytest.approx(4.0) and result.gpu_util_p95 == pytest.approx(90.0)
    assert result.train_share == pytest.approx(0.25)
    assert result.gpu_util_while_training == pytest.approx(90.0)
    assert result.gpu_util_while_not_training == pytest.approx(4.0)


def test_staggered_jobs_overlap_their_training() -> None:
    # Job 001 trains while 000 rolls out: the share of time with some training doubles.
    phases = {"000": job_phases(0.0, 4), "001": job_phases(2.0, 4)}
    samples = [(T0 + i * 0.1, 50.0) for i in range(0, 180)]
    result = account(phases, samples, [], end=T0 + 18)
    assert result.train_share == pytest.approx(8.0 / 18.0)
    assert result.jobs["001"]["train"].seconds == pytest.approx(4.0)
    assert result.gpu_util_mean == pytest.approx(50.0)


def test_no_samples_means_no_figures() -> None:
    result = account({"000": job_phases(0.0, 1)}, [], [], end=T0 + 4)
    assert result.gpu_util_mean is None and result.jobs["000"]["train"].gpu_util_mean is None
    assert result.train_share == pytest.approx(0.25)


def test_settling_in_steps_gives_the_same_result_as_all_at_once() -> None:
    from cockpit.core.phases import PhaseAccountant

    phases = {"000": job_phases(0.0, 4), "001": job_phases(1.5, 4)}
    util = [(T0 + i * 0.1, float(i % 97)) for i in range(0, 175)]
    cpu = [(T0 + i * 0.2, f"00{i % 2}", float(i % 50)) for i in range(0, 85)]
    whole = account(phases, util, cpu, end=T0 + 17.5)
    accountant = PhaseAccountant()
    for start, cut in ((-1.0, 5.0), (5.0, 11.0), (11.0, 17.5)):
        accountant.add_util([u for u in util if start <= u[0] - T0 < cut])
        for t, job, c in cpu:
            if start <= t - T0 < cut:
                accountant.add_cpu(t, job, c)
        accountant.settle(phases, T0 + cut - 1.0)  # the newest second waits for its phase events
    assert accountant.result(phases, T0 + 17.5) == whole
