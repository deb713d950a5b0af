"""The kit's arithmetic, on what cockpit already records: no second sampler, no GPU needed.

- GPU utilization per second from `gpu_util.csv` (every NVML sample the run's sampler read), set
  against `nvidia-smi dmon`'s rows (`compare_util`): a dmon row stamped second T describes the
  second that ends at T, so it meets cockpit's samples in [T-1, T), shifted by `lag` seconds.
- Throughput over whole rollout + train cycles, the definition `cockpit.core.telemetry.throughput` gives
  the cockpit's own SPS: between two rollout starts of one worker attempt, never a cut mid-cycle.
  A run's aggregate is the sum over its jobs inside a common window that opens once every job has
  finished its first cycle (its start-up and first rollout are warm-up, not throughput).
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.gpu.nvsmi import DmonRow
from cockpit.contract.events import Event, PhaseEvent, StartedEvent
from cockpit.core.telemetry.throughput import Mark, steps_per_s

Sample = tuple[float, float]  # (Unix time, util %)


def read_util_samples(path: Path) -> list[Sample]:
    """`gpu_util.csv`'s (t, util) rows in time order; a torn or empty row is skipped, a missing
    file is no samples."""
    if not path.exists():
        return []
    samples = []
    with path.open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            try:
                samples.append((float(row["t"]), float(row["util"])))
            except (KeyError, TypeError, ValueError):
                continue
    return sorted(samples)


def per_second(samples: Sequence[Sample]) -> dict[int, tuple[float, int]]:
    """Each whole second (Unix time, floored) with samples in it: their mean and their count."""
    bins: dict[int, list[float]] = {}
    for t, util in samples:
        bins.setdefault(math.floor(t), []).append(util)
    return {second: (statistics.fmean(values), len(values)) for second, values in sorted(bins.items())}


@dataclass(frozen=True)
class SecondPair:
    """One second seen by both: cockpit's mean of its samples, how many, and dmon's `sm`."""

    second: int  # the dmon row's stamp
    cockpit: float
    cockpit_samples: int
    dmon: float


@dataclass(frozen=True)
class Agreement:
    """cockpit against dmon over the seconds both saw: mean absolute difference in points."""

    lag: int
    pairs: tuple[SecondPair, ...]

    @property
    def seconds(self) -> int:
        """Seconds compared."""
        return len(self.pairs)

    @property
    def mad(self) -> float | None:
        """Mean of |cockpit - dmon| in utilization points; None with no second compared."""
        return statistics.fmean(abs(p.cockpit - p.dmon) for p in self.pairs) if self.pairs else None

    @property
    def bias(self) -> float | None:
        """Mean of cockpit - dmon: positive when cockpit reads higher."""
        return statistics.fmean(p.cockpit - p.dmon for p in self.pairs) if self.pairs else None


def compare_util(samples: Sequence[Sample], dmon: Sequence[DmonRow], *, lag: int = 0,
                 start: float | None = None, end: float | None = None) -> Agreement:  # fmt: skip
    """Each dmon row stamped T (within [start, end] when given) against cockpit's samples in
    [T-1+lag, T+lag); seconds where either has nothing are left out."""
    bins = per_second(samples)
    pairs = []
    for row in dmon:
        if row.sm is None or (start is not None and row.t < start) or (end is not None and row.t > end):
            continue
        mine = bins.get(int(row.t) - 1 + lag)
        if mine is not None:
            pairs.append(SecondPair(int(row.t), mine[0], mine[1], row.sm))
    return Agreement(lag, tuple(pairs))


def util_between(samples: Sequence[Sample], start: float, end: float) -> float | None:
    """Mean utilization of the samples in [start, end]; None with none there."""
    values = [u for t, u in samples if start <= t <= end]
    return statistics.fmean(values) if values else None


# ----- throughput -----


def rollout_starts(events: Sequence[Event]) -> list[Mark]:
    """(t, steps) of each rollout start of the job's last attempt (after its last `started`)."""
    last_start = max((i for i, e in enumerate(events) if isinstance(e, StartedEvent)), default=-1)
    return [(e.t, e.num_timesteps) for e in events[last_start + 1 :] if isinstance(e, PhaseEvent)
            and e.phase == "rollout"]  # fmt: skip


def warm_from(jobs: Mapping[str, Sequence[Event]]) -> float | None:
    """When every job has finished its first whole cycle (the latest second rollout start): where a
    measurement window opens. None while some job has not, or with no jobs."""
    seconds = []
    for events in jobs.values():
        starts = rollout_starts(events)
        if len(starts) < 2:
            return None
        seconds.append(starts[1][0])
    return max(seconds) if seconds else None


@dataclass(frozen=True)
class JobRate:
    """One job's whole-cycle throughput in a window: the cycles counted and their SPS."""

    cycles: int
    sps: float | None


def job_rate(events: Sequence[Event], start: float, end: float) -> JobRate:
    """The job's SPS over the whole cycles between its first and last rollout start in [start, end]."""
    inside = [m for m in rollout_starts(events) if start <= m[0] <= end]
    if len(inside) < 2:
        return JobRate(0, None)
    return JobRate(len(inside) - 1, steps_per_s(inside[0], inside[-1]))


@dataclass(frozen=True)
class Aggregate:
    """A run's throughput in a window: the sum of its jobs' whole-cycle SPS (None when a job had no
    whole cycle in it, so the sum would undercount), and each job's own."""

    start: float
    end: float
    jobs: Mapping[str, JobRate]

    @property
    def sps(self) -> float | None:
        """Steps per second of all jobs together."""
        rates = [r.sps for r in self.jobs.values()]
        return None if not rates or any(r is None for r in rates) else sum(r for r in rates if r is not None)

    @property
    def min_cycles(self) -> int:
        """The fewest whole cycles any job had in the window."""
        return min((r.cycles for r in self.jobs.values()), default=0)


def aggregate(jobs: Mapping[str, Sequence[Event]], start: float, end: float) -> Aggregate:
    """Every job's whole-cycle SPS in [start, end]."""
    return Aggregate(start, end, {job: job_rate(events, start, end) for job, events in sorted(jobs.items())})
