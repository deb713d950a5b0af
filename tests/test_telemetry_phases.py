"""Phase accounting against a known burst pattern from the scripted NVML stand-in."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from cockpit.core.machine.nvml import open_gpu
from cockpit.core.telemetry.phases import Accounting, PhaseAccountant, Transitions
from tests.fake_pynvml import FakeGpu, FakeNvml

T0 = 1_800_000_000.0


def account(
    phases: Mapping[str, Transitions],
    gpu_util: Sequence[tuple[float, float]],
    job_cpu: Sequence[tuple[float, str, float]],
    end: float,
) -> Accounting:
    """All of a run's GPU samples `(t, util %)` and job CPU readings `(t, job, cpu %)` through one
    `PhaseAccountant` at once: the whole-run figures the incremental ones must match."""
    accountant = PhaseAccountant()
    accountant.add_util(gpu_util)
    for t, job, percent in job_cpu:
        accountant.add_cpu(t, job, percent)
    return accountant.result(phases, end)


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
    gpu, _ = open_gpu(
        FakeNvml(FakeGpu(util_at=util_at, clock=lambda: clock[0], period=0.05, start=T0 - 0.5)), clock=lambda: clock[0]
    )
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
    from cockpit.core.telemetry.phases import PhaseAccountant

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


def test_folding_and_pruning_as_a_long_run_does_give_the_same_figures() -> None:
    import random

    from cockpit.core.telemetry.phases import PhaseAccountant, prune

    rng = random.Random(7)
    full: dict[str, list[tuple[float, str | None]]] = {}
    for job, start in (("000", 0.0), ("001", 0.7), ("002", 3.1)):
        t, phase, transitions = T0 + start, "rollout", []
        while t < T0 + 600:
            transitions.append((t, phase))
            t += rng.uniform(0.05, 2.0)
            phase = "train" if phase == "rollout" else "rollout"
        transitions.append((t, None))  # the worker stopped
        full[job] = transitions
    util = [(T0 + i * 0.2, float(i % 101)) for i in range(0, 3100)]
    accountant, live = PhaseAccountant(), {job: [] for job in full}
    longest = 0
    before = 0.0
    for now in (T0 + 10.0 * k for k in range(1, 63)):  # the session writes run.toml every 10 s
        for job, transitions in full.items():
            live[job].extend(tr for tr in transitions if before < tr[0] <= now)
        accountant.add_util([u for u in util if before < u[0] <= now])
        before = now
        accountant.result(live, now, settle_until=now - 5.0)
        for transitions in live.values():
            prune(transitions, min(accountant.folded_until or now, now - 60.0))
            longest = max(longest, len(transitions))
    folded = accountant.result(live, T0 + 620.0)
    whole = account(full, util, [], end=T0 + 620.0)
    assert folded.train_share == pytest.approx(whole.train_share)
    assert folded.gpu_util_while_training == pytest.approx(whole.gpu_util_while_training)
    for job in full:
        for phase in ("rollout", "train"):
            assert folded.jobs[job][phase].seconds == pytest.approx(whole.jobs[job][phase].seconds), (job, phase)
            assert folded.jobs[job][phase].gpu_util_mean == pytest.approx(whole.jobs[job][phase].gpu_util_mean)
    # about 600 transitions per job went by; what is kept is about 70 s of them
    assert sum(len(t) for t in full.values()) > 1500 and longest < 120


def test_prune_keeps_the_phase_at_the_cut() -> None:
    from cockpit.core.telemetry.phases import prune

    transitions: list[tuple[float, str | None]] = [(1.0, "rollout"), (2.0, "train"), (3.0, "rollout"), (4.0, "train")]
    prune(transitions, 3.5)
    assert transitions == [(3.0, "rollout"), (4.0, "train")]
    prune(transitions, 0.5)  # nothing before the cut: nothing to drop
    assert transitions == [(3.0, "rollout"), (4.0, "train")]
    prune(transitions, 3.0)
    assert transitions == [(3.0, "rollout"), (4.0, "train")]


def test_a_long_session_keeps_only_recent_transitions_and_logs_every_second(tmp_path: Path) -> None:
    from cockpit.contract.runrecord import read
    from tests.fakeclock import FakeClock
    from tests.test_feed_control import scripted_session

    clock = FakeClock(T0)
    session = scripted_session(tmp_path / "run", jobs=1, clock=clock)
    (job,) = session.supervisor.jobs.values()
    # An hour of a cartpole-like job: a 0.05 s rollout then a 0.05 s train phase, 20 times a second.
    t = T0
    for _ in range(360):
        end = t + 10.0
        while t < end:
            job.phases += [(t, "rollout"), (t + 0.05, "train")]
            t += 0.1
        clock.t = t
        session.write_run_log(session.snapshot())
        assert len(job.phases) < 1400  # the last minute and the lag, not the hour
    clock.t = t
    session.write_run_log(session.snapshot(), final=True)
    assert session.log_failure is None
    logged = read(session.spec.run_dir).jobs[0].phases
    half = (t - T0) / 2  # about 1800 s each
    assert logged["train"].seconds == pytest.approx(half, rel=1e-3)
    assert logged["rollout"].seconds == pytest.approx(half, rel=1e-3)
