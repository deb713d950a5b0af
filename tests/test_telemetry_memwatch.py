"""The memory-leak watch on scripted memory series (no processes): steady growth is flagged with
about its real rate, in MiB/h; noise around a flat line, a warm-up ramp, one step after it and a
slow creep are not; a restarted worker starts a new series; the watch's memory stays bounded."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pytest

from cockpit.core.telemetry.memwatch import GROWTH_MIB_PER_H, MAX_POINTS, MIB, MemoryVerdict, MemWatch, assess

T0 = 1_800_000_000.0
Series = Callable[[float], float]  # seconds since the worker started -> MiB


def samples(shape: Series, minutes: float, *, noise_mib: float = 0.0, seed: int = 0) -> list[tuple[float, float]]:
    """One reading a second, as the sampler takes them, with uniform noise of +-`noise_mib`."""
    rng = random.Random(seed)
    return [(T0 + s, (shape(s) + rng.uniform(-noise_mib, noise_mib)) * MIB) for s in range(int(minutes * 60))]


def watched(shape: Series, minutes: float, *, noise_mib: float = 0.0, seed: int = 0,
            gpu: Series | None = None) -> tuple[MemoryVerdict | None, list[MemoryVerdict]]:  # fmt: skip
    """Feed a MemWatch as the run's recorder does; its final verdict and every verdict on the way."""
    watch, seen = MemWatch(), []
    gpu_series = dict(samples(gpu, minutes, noise_mib=noise_mib, seed=seed + 1)) if gpu is not None else {}
    for t, rss in samples(shape, minutes, noise_mib=noise_mib, seed=seed):
        gpu_bytes = gpu_series.get(t)
        watch.add(t, "000", 4242, int(rss), int(gpu_bytes) if gpu_bytes is not None else None)
        verdict = watch.verdict("000")
        if verdict is not None and (not seen or seen[-1] is not verdict):
            seen.append(verdict)
    return watch.verdict("000"), seen


def flat(level: float) -> Series:
    return lambda s: level


def steady(start: float, mib_per_h: float) -> Series:
    return lambda s: start + mib_per_h * s / 3600


def test_steady_growth_is_flagged_with_about_its_rate() -> None:
    growth = assess(samples(steady(900, 120), 40, noise_mib=10))
    assert growth.growing and growth.mib_per_h == pytest.approx(120, rel=0.1)
    verdict, _ = watched(steady(900, 120), 40, noise_mib=10)
    assert verdict is not None and verdict.growing
    assert verdict.rss_growth_mib_h == pytest.approx(120, rel=0.1)
    assert verdict.line() == f"memory growing: +{verdict.rss_growth_mib_h:,.0f} MiB/h"
    assert verdict.line().startswith(("memory growing: +11", "memory growing: +12", "memory growing: +13"))


@pytest.mark.parametrize(("rate", "minutes"), [(60, 45), (400, 20), (3000, 14)])
def test_growth_at_any_rate_worth_noting_is_flagged(rate: float, minutes: float) -> None:
    # Near the threshold a leak must stand out from +-20 MiB of noise, which takes a longer window.
    for seed in range(5):
        growth = assess(samples(steady(2000, rate), minutes, noise_mib=20, seed=seed))
        assert growth.growing and growth.mib_per_h == pytest.approx(rate, rel=0.15)


@pytest.mark.parametrize("seed", range(8))
def test_noise_around_a_flat_line_is_never_flagged(seed: int) -> None:
    # The seeds' 77 minutes, +-40 MiB of noise on 1.2 GiB: judged every 10 s along the way.
    verdict, seen = watched(flat(1200), 77, noise_mib=40, seed=seed)
    assert verdict is not None and verdict.line() == "no growth"
    assert not any(v.growing for v in seen)


def test_a_warm_up_ramp_then_flat_is_not_growth() -> None:
    # Imports, envs, the model, the first rollout: +800 MiB over the first 2.5 minutes, then flat.
    def ramp(s: float) -> float:
        return 300 + 800 * min(1.0, s / 150)

    verdict, seen = watched(ramp, 40, noise_mib=5)
    assert verdict is not None and verdict.line() == "no growth" and not any(v.growing for v in seen)


@pytest.mark.parametrize("at_s", [240, 480, 840, 1500])
def test_one_step_after_the_warm_up_is_not_growth(at_s: int) -> None:
    # A buffer allocated once after the warm-up (the first evaluation, say): +200 MiB that stays.
    def step(s: float) -> float:
        return 1000 + (200 if s >= at_s else 0)

    verdict, seen = watched(step, 40, noise_mib=5, seed=at_s)
    assert verdict is not None and verdict.line() == "no growth" and not any(v.growing for v in seen)


def test_two_steps_an_hour_apart_are_not_growth() -> None:
    def steps(s: float) -> float:
        return 1000 + (100 if s >= 400 else 0) + (100 if s >= 1500 else 0)

    verdict, seen = watched(steps, 60, noise_mib=5)
    assert verdict is not None and verdict.line() == "no growth" and not any(v.growing for v in seen)


def test_a_staircase_leak_is_growth() -> None:
    # +10 MiB every 2 minutes that never comes back (a leak per checkpoint): 300 MiB/h.
    verdict, _ = watched(lambda s: 1000 + 10 * (s // 120), 45, noise_mib=3)
    assert verdict is not None and verdict.growing
    assert verdict.rss_growth_mib_h == pytest.approx(300, rel=0.15)


def test_a_slow_creep_below_the_threshold_is_measured_but_not_flagged() -> None:
    growth = assess(samples(steady(1000, 20), 60))
    assert growth.state == "flat" and growth.mib_per_h == pytest.approx(20, rel=0.05)
    assert GROWTH_MIB_PER_H > 20


def test_a_young_worker_is_not_judged_yet() -> None:
    verdict, _ = watched(steady(900, 500), 5)
    assert verdict is not None and not verdict.judged and not verdict.growing
    assert verdict.line() == "not judged: 5 of 13 min watched"
    assert assess([]).state == "measuring"


def test_growing_gpu_memory_is_flagged_on_its_own() -> None:
    verdict, _ = watched(flat(900), 40, noise_mib=5, gpu=steady(2000, 90))
    assert verdict is not None and not verdict.rss.growing and verdict.gpu is not None and verdict.gpu.growing
    assert verdict.rss_growth_mib_h is None and verdict.gpu_growth_mib_h == pytest.approx(90, rel=0.1)
    assert verdict.line().startswith("GPU memory growing: +")
    # Both at once: both flags, in one line.
    both, _ = watched(steady(900, 200), 40, noise_mib=5, gpu=steady(2000, 90))
    assert both is not None and both.line().startswith("memory growing: +") and "; GPU memory growing: +" in both.line()


def test_a_new_worker_starts_a_new_series_and_keeps_the_judged_verdict_until_its_own() -> None:
    watch = MemWatch()
    for t, rss in samples(steady(900, 300), 30):
        watch.add(t, "000", "first", int(rss), None)
    assert watch.verdict("000") is not None and watch.verdict("000").growing  # type: ignore[union-attr]
    watch.keep(())  # the worker exited: its verdict stays
    assert watch.verdicts()["000"].growing
    # Restarted from its checkpoint: a fresh worker, flat. Until it is judged, the old verdict shows.
    later = T0 + 3600
    for s in range(20 * 60):
        watch.add(later + s, "000", "second", 800 * MIB, None)
        if s == 5 * 60:
            assert watch.verdicts()["000"].growing
    assert watch.verdicts()["000"].line() == "no growth"


def test_the_watch_holds_a_bounded_number_of_points_per_job() -> None:
    watch = MemWatch(every_s=3600.0)
    for s in range(24 * 3600):  # a day at one reading a second
        watch.add(T0 + s, "000", 1, 1000 * MIB, None)
    job = watch._jobs["000"]
    assert len(job.rss.points._held) <= 2 * MAX_POINTS and len(job.rss.bucket) <= 11


def test_judging_a_job_is_cheap() -> None:
    # The cockpit must stay under 1 % of a core supervising its jobs: a job is judged every 10 s.
    points = samples(steady(900, 120), 24 * 60)[::10]  # what a day-old series holds, and more
    started = time.perf_counter()
    for _ in range(20):
        assess(points[-2 * MAX_POINTS :])
    assert (time.perf_counter() - started) / 20 < 0.005  # < 0.05 % of a core at one judgment per 10 s
