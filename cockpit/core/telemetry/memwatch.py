"""The memory-leak watch: does a job's memory keep growing, and how fast?

The seeds checked "Memory leaks: none detected" by hand after 77 minutes. This does it for every
job, from the RSS (and per-process GPU memory) the sampler already reads once a second.

`assess` is the pure verdict on one series of one worker process: (time, bytes) samples in, a
`Growth` out. It ignores the first `WARMUP_S` (a worker's memory rises while it imports, builds its
envs and model, fills its first rollout and writes its first checkpoint: normal), and judges only
once `MIN_WINDOW_S` of samples follow the warm-up. It splits that window into `INTERVALS` equal
intervals, takes each one's median (a train phase's short-lived tensors and a garbage collection do
not move a median), and fits a Theil-Sen line through the medians (the median of the slopes of every
pair: one odd interval cannot tilt it). The series is `growing` when all of these hold:

- the slope is at least `GROWTH_MIB_PER_H` (50 MiB/h: a worker that grows by 1.2 GiB a day runs a
  multi-day run, or 17 workers on one machine, out of memory; slower creep is allocator noise);
- the rise over the window is more than `NOISE_FACTOR` times the medians' scatter around the line
  (so noise around a flat line, whatever its slope by chance, is never called growth);
- memory rose from most intervals to the next (`RISING_SHARE`), each time by more than two
  intervals' medians differ by chance: it keeps growing, not in a step or two;
- no single step carries more than `MAX_STEP_SHARE` of the whole rise (looking two intervals wide,
  as a step inside an interval shows in two): a step (a buffer allocated once, after the warm-up)
  is not a leak.

`MemWatch` feeds `assess` for every job of a run in bounded memory and time: readings go into
`BUCKET_S` buckets whose medians are thinned as they grow (at most ~2 x `MAX_POINTS` per series,
evenly spread over the worker's life), and a job is assessed at most every `EVERY_S`. A new worker
process for a job (a restart, a resume) starts a new series; until that one can be judged, the job
keeps its previous worker's verdict.
"""

from __future__ import annotations

import itertools
import math
import statistics
import threading
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from cockpit.core.telemetry.bounded_series import Thinned

MIB = 1024 * 1024
WARMUP_S = 180.0  # the first minutes of a worker: its memory rises as it starts, which is normal
MIN_WINDOW_S = 600.0  # after the warm-up, this much of a series before it is judged at all
INTERVALS = 10  # the window is cut into this many intervals; each is represented by its median
MIN_INTERVALS = 6  # intervals with readings needed for a fit (gaps: a stopped worker, a slow sampler)
GROWTH_MIB_PER_H = 50.0
NOISE_FACTOR = 4.0
RISING_SHARE = 0.6
MAX_STEP_SHARE = 0.4
BUCKET_S = 10.0  # readings are kept as the median of each this-long bucket
MAX_POINTS = 120
EVERY_S = 10.0  # a job is assessed at most this often
NO_GROWTH = "no growth"

State = Literal["measuring", "flat", "growing"]


@dataclass(frozen=True)
class Growth:
    """The verdict on one series: `measuring` until it is long enough to judge, then `flat` or
    `growing`. `mib_per_h` is the fitted slope once judged (whatever the state), `watched_s` the
    seconds of samples behind it (the warm-up included)."""

    state: State
    mib_per_h: float | None = None
    watched_s: float = 0.0

    @property
    def growing(self) -> bool:
        """True when the series keeps growing beyond what is worth noting."""
        return self.state == "growing"


def _theil_sen(points: Sequence[tuple[float, float]]) -> float:
    """The median of the slopes between every two points (distinct times)."""
    slopes = [(v2 - v1) / (t2 - t1) for i, (t1, v1) in enumerate(points) for t2, v2 in points[i + 1 :] if t2 > t1]
    return statistics.median(slopes)


def _sigma(values: Sequence[float]) -> float:
    """A robust standard deviation: 1.4826 times the median absolute deviation (0 for one value)."""
    center = statistics.median(values)
    return 1.4826 * statistics.median(abs(v - center) for v in values)


def assess(samples: Sequence[tuple[float, float]], *, threshold_mib_h: float = GROWTH_MIB_PER_H) -> Growth:
    """The verdict on one worker process's memory: `samples` are (Unix time, bytes), oldest first,
    from the process's first reading on (see the module docstring for the rule)."""
    if not samples:
        return Growth("measuring")
    start = samples[0][0]
    watched = samples[-1][0] - start
    kept = [(t, v) for t, v in samples if t >= start + WARMUP_S]
    if not kept or kept[-1][0] - kept[0][0] < MIN_WINDOW_S:
        return Growth("measuring", watched_s=watched)
    lo, span = kept[0][0], kept[-1][0] - kept[0][0]
    width = span / INTERVALS
    groups: list[list[float]] = [[] for _ in range(INTERVALS)]
    for t, v in kept:
        groups[min(INTERVALS - 1, int((t - lo) / width))].append(v)
    filled = [(i, g) for i, g in enumerate(groups) if g]
    if len(filled) < MIN_INTERVALS:
        return Growth("measuring", watched_s=watched)
    medians = [(lo + (i + 0.5) * width, statistics.median(g)) for i, g in filled]
    # How far two intervals' medians differ by chance: from the scatter of each one's readings
    # (the standard error of a median is about 1.25 sigma / sqrt(n)), typical over the intervals.
    step_noise = math.sqrt(2) * statistics.median(1.2533 * _sigma(g) / math.sqrt(len(g)) for _, g in filled)
    slope = _theil_sen(medians)  # bytes per second
    mib_per_h = slope * 3600 / MIB
    scatter = _sigma([v - slope * t for t, v in medians])  # the medians around the line
    rise = slope * (medians[-1][0] - medians[0][0])
    values = [v for _, v in medians]
    steps = [b - a for a, b in itertools.pairwise(values)]
    total = values[-1] - values[0]
    # A step inside an interval splits between its median and the next: look two intervals wide.
    widest = max(b - a for a, b in zip(values, values[2:], strict=False))
    growing = (
        mib_per_h >= threshold_mib_h
        and rise > NOISE_FACTOR * scatter
        and total > 0
        and sum(1 for step in steps if step > step_noise) >= RISING_SHARE * len(steps)
        and widest <= MAX_STEP_SHARE * total
    )
    return Growth("growing" if growing else "flat", round(mib_per_h, 1), watched)


@dataclass(frozen=True)
class MemoryVerdict:
    """A job's memory as the watch last judged it: its RSS and, where the GPU's per-process memory
    is known, its GPU memory (`gpu` None otherwise)."""

    rss: Growth
    gpu: Growth | None = None

    @classmethod
    def recorded(
        cls, line: str | None, rss_mib_per_h: float | None, gpu_mib_per_h: float | None
    ) -> MemoryVerdict | None:
        """The judged verdict a run.toml recorded (`line` and the flagged rates), None when it
        recorded none or had not judged the job yet: what a resumed run shows until it judges anew."""
        if line != NO_GROWTH and rss_mib_per_h is None and gpu_mib_per_h is None:
            return None

        def growth(rate: float | None) -> Growth:
            return Growth("growing", rate) if rate is not None else Growth("flat")

        return cls(growth(rss_mib_per_h), growth(gpu_mib_per_h) if gpu_mib_per_h is not None else None)

    @property
    def growing(self) -> bool:
        """True when its RSS or its GPU memory keeps growing."""
        return self.rss.growing or (self.gpu is not None and self.gpu.growing)

    @property
    def judged(self) -> bool:
        """True once its RSS series was long enough to judge."""
        return self.rss.state != "measuring"

    @property
    def rss_growth_mib_h(self) -> float | None:
        """The RSS's growth rate when it is flagged as growing, else None."""
        return self.rss.mib_per_h if self.rss.growing else None

    @property
    def gpu_growth_mib_h(self) -> float | None:
        """The GPU memory's growth rate when it is flagged as growing, else None."""
        return self.gpu.mib_per_h if self.gpu is not None and self.gpu.growing else None

    def line(self) -> str:
        """What views and run.toml say: `memory growing: +120 MiB/h` (and/or `GPU memory
        growing: +N MiB/h`, joined by "; "), `no growth`, or how long it was watched before it can
        be judged."""
        rates = (("memory", self.rss_growth_mib_h), ("GPU memory", self.gpu_growth_mib_h))
        flags = [f"{what} growing: +{rate:,.0f} MiB/h" for what, rate in rates if rate is not None]
        if flags:
            return "; ".join(flags)
        if self.judged:
            return NO_GROWTH
        needed = (WARMUP_S + MIN_WINDOW_S) / 60
        return f"not judged: {self.rss.watched_s / 60:.0f} of {needed:.0f} min watched"


@dataclass
class _Series:
    """One worker's readings of one kind, as bucket medians thinned to a bounded, even spread."""

    points: Thinned[tuple[float, float]] = field(default_factory=lambda: Thinned(MAX_POINTS))
    bucket: list[float] = field(default_factory=list)
    bucket_start: float | None = None
    bucket_last: float = 0.0

    def add(self, t: float, value: float) -> None:
        if self.bucket_start is not None and t - self.bucket_start >= BUCKET_S:
            self._close()
        if self.bucket_start is None:
            self.bucket_start = t
        self.bucket.append(value)
        self.bucket_last = t

    def _close(self) -> None:
        if self.bucket and self.bucket_start is not None:
            self.points.add(((self.bucket_start + self.bucket_last) / 2, statistics.median(self.bucket)))
        self.bucket, self.bucket_start = [], None

    def samples(self) -> list[tuple[float, float]]:
        """The kept points, the open bucket's median last."""
        held = list(self.points.points())
        if self.bucket and self.bucket_start is not None:
            held.append(((self.bucket_start + self.bucket_last) / 2, statistics.median(self.bucket)))
        return held


@dataclass
class _Job:
    """One job's watch: the series of its current worker and the verdicts so far."""

    attempt: Hashable
    rss: _Series = field(default_factory=_Series)
    gpu: _Series | None = None
    verdict: MemoryVerdict | None = None  # the current worker's
    earlier: MemoryVerdict | None = None  # the latest judged verdict of an earlier worker
    next_at: float = 0.0

    def assess(self) -> None:
        gpu = assess(self.gpu.samples()) if self.gpu is not None else None
        self.verdict = MemoryVerdict(assess(self.rss.samples()), gpu)

    def shown(self) -> MemoryVerdict | None:
        """The current worker's verdict, or an earlier worker's while the current one is too young."""
        if self.verdict is not None and (self.verdict.judged or self.earlier is None):
            return self.verdict
        return self.earlier


class MemWatch:
    """The leak watch over a run's jobs (see the module docstring). `add` is called from the
    sampler thread; `verdicts` from any thread."""

    def __init__(self, every_s: float = EVERY_S) -> None:
        self.every_s = every_s
        self._jobs: dict[str, _Job] = {}
        self._ended: dict[str, MemoryVerdict] = {}  # jobs without a live worker: their last verdict
        self._lock = threading.Lock()

    def add(self, t: float, job_id: str, attempt: Hashable, rss_bytes: int, gpu_bytes: int | None) -> None:
        """One reading of job `job_id`'s worker `attempt` (its pid, say: a new one starts a new
        series) at `t`: RSS and, when known, GPU memory, in bytes."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.attempt != attempt:
                earlier = job.shown() if job is not None else self._ended.pop(job_id, None)
                job = self._jobs[job_id] = _Job(attempt, earlier=earlier if earlier and earlier.judged else None)
                job.next_at = t + self.every_s
            job.rss.add(t, float(rss_bytes))
            if gpu_bytes is not None:
                if job.gpu is None:
                    job.gpu = _Series()
                job.gpu.add(t, float(gpu_bytes))
            if t >= job.next_at:
                job.assess()
                job.next_at = t + self.every_s

    def keep(self, live: Iterable[str]) -> None:
        """Only the jobs in `live` have a worker now: the others are judged once more on all they
        read, and their series dropped (a run of 500 agents holds series only for its live ones)."""
        live = set(live)
        with self._lock:
            for job_id in [j for j in self._jobs if j not in live]:
                job = self._jobs.pop(job_id)
                job.assess()
                shown = job.shown()
                if shown is not None:
                    self._ended[job_id] = shown

    def restore(self, job_id: str, verdict: MemoryVerdict) -> None:
        """Start job `job_id` with `verdict` (an earlier session's, when a run is resumed): shown
        until a worker of this session can be judged."""
        with self._lock:
            if job_id not in self._jobs:
                self._ended[job_id] = verdict

    def verdict(self, job_id: str) -> MemoryVerdict | None:
        """Job `job_id`'s verdict now; None before its first assessment."""
        with self._lock:
            job = self._jobs.get(job_id)
            return job.shown() if job is not None else self._ended.get(job_id)

    def verdicts(self) -> dict[str, MemoryVerdict]:
        """Every job's verdict now (jobs not assessed yet are left out)."""
        with self._lock:
            shown = dict(self._ended)
            for job_id, job in self._jobs.items():
                verdict = job.shown()
                if verdict is not None:
                    shown[job_id] = verdict
            return shown
