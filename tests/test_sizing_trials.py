"""How a tune trial turns a worker's events into steps per second (`cockpit.core.sizing.trials.Progress`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cockpit.contract.events import ErrorEvent, Event, PhaseEvent, ProgressEvent
from cockpit.core.sizing.trials import Progress


def cycle_events(t: float, steps: int, *, rollout_s: float, train_s: float, samples: int) -> list[Event]:
    """One rollout (progress events every second) and its train phase, starting at `t`."""
    events: list[Event] = [PhaseEvent(t, "rollout", 0, steps)]
    for k in range(1, int(rollout_s)):
        events.append(ProgressEvent(t + k, steps + samples * k // int(rollout_s)))
    events.append(PhaseEvent(t + rollout_s, "train", 1, steps + samples))
    return events


def worker(cycles: int, *, rollout_s: float = 2.0, train_s: float = 6.0, samples: int = 2048) -> list[Event]:
    out: list[Event] = []
    t, steps = 1000.0, 0
    for _ in range(cycles):
        out += cycle_events(t, steps, rollout_s=rollout_s, train_s=train_s, samples=samples)
        t, steps = t + rollout_s + train_s, steps + samples
    return out


def test_the_rate_spans_whole_cycles_so_a_cut_in_a_train_phase_does_not_flatter_it() -> None:
    progress = Progress()
    # Cycles of 2 s rollout + 6 s train, 2048 steps each: the true rate is 256 steps/s. The
    # window ends 2.5 s into a train phase, right after the rollout that preceded it.
    progress.observe(e for e in worker(4) if e.t <= 1000 + 3 * 8 + 2.5)
    start = (1000.0, 0)
    assert progress.rate(1000.0, start) == pytest.approx(256.0)
    # The naive figure, from the first event to the newest, counts the last rollout without its
    # train phase: 4 rollouts' steps over 3 cycles and a rollout.
    naive = (progress.latest[1] - start[1]) / (progress.latest[0] - start[0])  # type: ignore[index]
    assert naive == pytest.approx(4 * 2048 / 26)
    assert naive > 1.2 * progress.rate(1000.0, start)


def test_cycles_that_began_before_the_clock_started_are_not_counted() -> None:
    progress = Progress()
    # A slow first cycle (start-up) then fast ones: only the cycles after t0 count.
    progress.observe(cycle_events(1000.0, 0, rollout_s=10, train_s=10, samples=2048))
    fast = [replace(e, t=e.t + 20, num_timesteps=e.num_timesteps + 2048) for e in worker(4, train_s=2.0)]
    progress.observe(fast)
    assert progress.rate(1020.0, (1015.0, 2048)) == pytest.approx(2048 / 4)


def test_a_cycle_longer_than_the_wait_is_taken_whole_even_if_it_began_before_the_clock() -> None:
    progress = Progress()
    progress.observe(worker(2, rollout_s=5.0, train_s=25.0, samples=3000))  # 30 s cycles
    progress.observe([PhaseEvent(1060.0, "rollout", 2, 6000)])
    progress.observe([ProgressEvent(1062.0, 6600)])
    # the clock started at 1040: only one rollout start (1060) since; the newest whole cycle is 1030-1060
    assert len(progress.cycles_since(1040.0)) == 1
    assert progress.rate(1040.0, (1035.0, 3000)) == pytest.approx(3000 / 30)


def test_without_two_rollout_starts_it_falls_back_to_the_event_span() -> None:
    progress = Progress()
    progress.observe(cycle_events(1000.0, 0, rollout_s=10, train_s=10, samples=1000))
    assert progress.cycles_since(1000.5) == []
    assert progress.rate(1000.5, (1000.0, 0)) == pytest.approx(1000 / 10)
    assert Progress().rate(0.0, None) == 0.0


def test_an_error_event_marks_the_worker_failed() -> None:
    progress = Progress()
    progress.observe([ErrorEvent(1.0, "cuda_oom", "boom")])
    assert progress.failed
