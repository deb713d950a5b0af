"""The live SPS is throughput over whole rollout + train cycles, and the ETAs that follow from it
(`cockpit.core.telemetry.throughput`), against scripted workers whose true figures are known."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from cockpit.contract.events import PhaseEvent, ProgressEvent, StartedEvent
from cockpit.contract.states import JobState
from cockpit.core.telemetry.throughput import MAX_CYCLES, Throughput, job_eta, run_eta, window_start
from cockpit.formatting import eta
from tests.cycles import script

T0 = 1_800_000_000.0


def test_sampled_every_second_the_live_sps_and_eta_tell_the_truth() -> None:
    # 10 s rollouts and train phases of about 50 s (48..52: the window's cycles differ), 2,048
    # steps a cycle: the worker reports 204.8 SPS, its true throughput is 2048 / 60 = 34.1.
    run = script(T0, cycles=40, rollout_s=10, train_s=(50, 52, 48, 51, 49), steps_per_cycle=2048)
    assert run.whole_cycle_rate == pytest.approx(2048 / 60)
    assert run.rollout_rate == pytest.approx(204.8)
    tracker, pending, samples = Throughput(), list(run.events), 0
    steps = 0
    for second in range(int(run.cycle_starts[1] - T0), int(run.end - T0) + 1):
        now = T0 + second
        while pending and pending[0].t <= now:
            event = pending.pop(0)
            tracker.observe(event)
            if isinstance(event, (PhaseEvent, ProgressEvent)):
                steps = event.num_timesteps
        sps = tracker.rate(now)
        assert sps is not None and sps == pytest.approx(run.whole_cycle_rate, rel=0.05), second
        left = run.end - now
        eta_s = job_eta(JobState.RUNNING, steps, run.target, sps)
        assert eta_s is not None
        # A step count moves only while a rollout runs, so any ETA from it is uncertain by up to a
        # train phase (52 s), and by the few % the window's cycles differ from the mean: within
        # 10 % holds where at least 15 cycles are left.
        if left >= 900:
            assert eta_s == pytest.approx(left, rel=0.10), second
            samples += 1
    assert samples > 1300


def test_a_long_train_phase_lowers_the_figure_and_never_shows_the_rollout_rate() -> None:
    # Five 60 s cycles, then a train phase of 600 s (a preset with many epochs on a CPU).
    run = script(T0, cycles=6, rollout_s=10, train_s=(50, 50, 50, 50, 50, 600), steps_per_cycle=2048)
    tracker = Throughput()
    long_rollout = run.cycle_starts[5]
    tracker.observe_all(run.until(long_rollout + 10))
    whole = 2048 / 60
    assert tracker.rate(long_rollout + 10) == pytest.approx(whole)
    before = whole
    for second in range(11, 611):
        now = long_rollout + second
        sps = tracker.rate(now)
        assert sps is not None
        assert sps <= before + 1e-9  # it only falls while nothing steps
        assert abs(sps - run.rollout_rate) > 0.5 * run.rollout_rate
        if second > 60:  # the ongoing cycle has lasted longer than the window's mean cycle
            assert sps < whole
        before = sps
    # At the end: the window's cycles and the long one, over their time together.
    assert before == pytest.approx(2 * 2048 / (60 + 610))


def test_no_figure_before_the_first_whole_cycle_and_a_restart_starts_again() -> None:
    run = script(T0, cycles=3, rollout_s=10, train_s=50, steps_per_cycle=2048)
    tracker = Throughput()
    tracker.observe_all(run.until(T0 + 59))
    assert tracker.rate(T0 + 59) is None  # one rollout start: no whole cycle yet
    tracker.observe_all([e for e in run.events if T0 + 59 < e.t <= T0 + 61])
    assert tracker.rate(T0 + 61) == pytest.approx(2048 / 60)
    # The worker crashes; a new one starts from a checkpoint: its start-up is not throughput.
    tracker.observe(StartedEvent(T0 + 100, pid=2, resumed_from_step=2048))
    assert tracker.rate(T0 + 100) is None and tracker.latest is None
    restarted = script(T0 + 130, cycles=2, rollout_s=10, train_s=50, steps_per_cycle=2048, start_steps=2048)
    tracker.observe_all(restarted.events[1:])  # its `started` came above
    assert tracker.rate(T0 + 250) == pytest.approx(2048 / 60)


def test_the_window_spans_30_s_of_short_cycles_and_its_memory_is_bounded() -> None:
    # Cycles of 0.5 s: the window takes the newest rollout start at least 30 s back.
    run = script(T0, cycles=200, rollout_s=0.25, train_s=0.25, steps_per_cycle=100, finish=False)
    tracker = Throughput()
    tracker.observe_all(run.events)
    window = tracker.window()
    assert window is not None and window[1][0] - window[0][0] == pytest.approx(30.0)
    # A week of 0.1 s cycles keeps a bounded list of rollout starts.
    tracker = Throughput()
    for k in range(200_000):
        tracker.observe(PhaseEvent(T0 + k * 0.1, "rollout", k, k * 10))
    assert len(tracker.rollout_starts) <= 2 * MAX_CYCLES + 64
    assert tracker.rate(T0 + 200_000 * 0.1 - 0.1) == pytest.approx(100.0)


def test_the_window_opens_one_whole_cycle_back_at_least_and_max_cycles_at_most() -> None:
    times = [0.0, 100.0, 200.0]
    assert window_start(times, 0, 1) is None
    assert window_start(times, 0, 3) == 1  # cycles longer than 30 s: one whole cycle
    assert window_start([float(k) for k in range(100)], 0, 100) == 69  # 1 s cycles: 30 of them
    assert window_start([float(k) for k in range(100)], 0, 100, window_s=1000, max_cycles=10) == 89
    assert window_start([float(k) for k in range(100)], 50, 60) == 50  # not before the attempt's first


@dataclass(frozen=True)
class Job:
    state: JobState
    steps: int
    target: int
    sps: float | None
    eta_s: float | None


def running(steps: int, sps: float, target: int = 1000) -> Job:
    return Job(JobState.RUNNING, steps, target, sps, job_eta(JobState.RUNNING, steps, target, sps))


def queued(target: int = 1000) -> Job:
    return Job(JobState.QUEUED, 0, target, None, None)


def test_the_run_eta_simulates_the_slots_with_the_queue() -> None:
    # 2 slots, 5 agents of 1,000 steps: two running at 10 SPS (60 s and 20 s left), three queued
    # that need 1000 / 10 = 100 s each. Slots free at 20 and 60: the first queued job ends at
    # 120, the second at 160, the third takes the slot freed at 120 and ends at 220.
    jobs = [running(400, 10.0), running(800, 10.0), queued(), queued(), queued()]
    assert run_eta(jobs, slots=2) == pytest.approx(220.0)
    # The queued jobs need their steps at the mean rate of the training jobs: (10 + 30) / 2.
    jobs = [running(400, 10.0), running(400, 30.0), queued()]
    assert run_eta(jobs, slots=2) == pytest.approx(20.0 + 1000 / 20.0)
    # One slot free: a queued job starts at once and needs 100 s.
    assert run_eta([running(400, 10.0), queued()], slots=2) == pytest.approx(100.0)


def test_the_run_eta_leaves_out_jobs_that_will_not_train_and_is_unknown_without_a_rate() -> None:
    done = Job(JobState.DONE, 1000, 1000, None, 0.0)
    failed = Job(JobState.FAILED, 10, 1000, None, None)
    assert run_eta([done, failed, running(500, 50.0)], slots=1) == pytest.approx(10.0)
    assert run_eta([done, failed], slots=1) == 0.0
    assert run_eta([failed], slots=1) is None
    assert run_eta([queued(), Job(JobState.STARTING, 0, 1000, None, None)], slots=2) is None
    backoff = Job(JobState.BACKOFF, 500, 1000, None, None)
    assert run_eta([backoff, running(0, 100.0)], slots=2) == pytest.approx(10.0)  # 500 steps at 100 SPS
    assert job_eta(JobState.DONE, 1000, 1000, None) == 0.0
    assert job_eta(JobState.BACKOFF, 500, 1000, 100.0) is None


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(None, "-"), (float("inf"), "-"), (0.4, "0s"), (45, "45s"), (200, "3m20s"), (3599.6, "1h00m"),
     (7500, "2h05m"), (3 * 86400 + 4 * 3600 + 59, "3d04h")],
)  # fmt: skip
def test_etas_read_as_durations(seconds: float | None, shown: str) -> None:
    assert eta(seconds) == shown
