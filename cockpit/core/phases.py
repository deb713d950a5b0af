"""Phase accounting: GPU utilization and CPU % per job and per phase, measured.

Joins each job's `phase` events (rollout or train, from its events file) with the timestamped
telemetry: every GPU utilization sample and every per-job CPU reading is attributed to the phase
each job was in at that instant. The result is the seeds' table of rollout, training and average
utilization, but measured, plus the overall mean, p50 and p95 and the share of time during which
at least one job was training (the overlap that parallel jobs are meant to create).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

PHASES = ("rollout", "train")

Transitions = Sequence[tuple[float, str | None]]


@dataclass(frozen=True)
class PhaseStats:
    """One job's (or all jobs') figures for one phase."""

    seconds: float
    gpu_util_mean: float | None
    cpu_percent_mean: float | None


@dataclass(frozen=True)
class Accounting:
    """Utilization by phase, per job and for the whole run."""

    gpu_util_mean: float | None
    gpu_util_p50: float | None
    gpu_util_p95: float | None
    train_share: float | None
    gpu_util_while_training: float | None
    gpu_util_while_not_training: float | None
    jobs: Mapping[str, Mapping[str, PhaseStats]]


class _Timeline:
    """One job's phases as sorted transitions; `at(t)` is the phase at time t (None outside). With
    `start`, only the phase at `start` and the transitions after it are kept: what `intervals`
    clipped to `start` needs, in time that does not grow with the job's history."""

    def __init__(self, transitions: Transitions, end: float, start: float | None = None) -> None:
        ordered = sorted(transitions, key=lambda x: x[0])
        if start is not None:
            del ordered[: max(0, bisect.bisect_right(ordered, start, key=lambda x: x[0]) - 1)]
        self.times = [t for t, _ in ordered]
        self.phases = [p for _, p in ordered]
        self.end = end

    def at(self, t: float) -> str | None:
        i = bisect.bisect_right(self.times, t) - 1
        if i < 0 or t > self.end:
            return None
        return self.phases[i]

    def intervals(self, phase: str) -> list[tuple[float, float]]:
        bounds = [*self.times[1:], self.end]
        return [(s, e) for s, e, p in zip(self.times, bounds, self.phases, strict=True) if p == phase and e > s]


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total, current_start, current_end = 0.0, 0.0, None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        total += current_end - current_start
    return total


class _Mean:
    """A running sum and count."""

    __slots__ = ("n", "total")

    def __init__(self) -> None:
        self.total, self.n = 0.0, 0

    def add(self, value: float) -> None:
        self.total += value
        self.n += 1

    @property
    def value(self) -> float | None:
        return self.total / self.n if self.n else None


PhaseSeconds = dict[tuple[str, str], float]  # (job, phase) -> seconds


def _slice(phases: Mapping[str, Transitions], start: float | None, end: float) -> tuple[PhaseSeconds, float, float]:
    """Phase time in [start, end) (from the first transition when `start` is None): the seconds
    of each (job, phase), and the lengths of the union of all train spans and of all spans."""
    seconds: PhaseSeconds = {}
    train, active = [], []
    for job, transitions in phases.items():
        if not transitions:
            continue
        timeline = _Timeline(transitions, end, start)
        for phase in PHASES:
            # A span runs to the next transition, which may come after `end`: clip both sides.
            spans = [(s if start is None else max(s, start), min(e, end)) for s, e in timeline.intervals(phase)]
            spans = [(s, e) for s, e in spans if e > s]
            seconds[(job, phase)] = sum(e - s for s, e in spans)
            active += spans
            if phase == "train":
                train += spans
    return seconds, _union_length(train), _union_length(active)


def prune(transitions: list[tuple[float, str | None]], before: float) -> None:
    """Drop the transitions before `before` but the last of them (the phase at `before`), in
    place: what `PhaseAccountant` has folded, a viewer's window has no use for either."""
    keep_from = bisect.bisect_right(transitions, before, key=lambda tr: tr[0]) - 1
    if keep_from > 0:
        del transitions[:keep_from]


class PhaseAccountant:
    """Accumulates accounting incrementally, so a run of days costs the same per update as a
    run of minutes: samples are attributed once, when their phase is known, then dropped, and
    phase time is summed up to the settled moment (`folded_until`), after which the caller
    may `prune` older transitions.

    Samples arrive as soon as they are taken, but a job's phase event reaches the cockpit a
    moment later, so `settle(phases, until)` only attributes samples older than `until`. GPU
    utilization is kept as a 0-100 histogram, which gives exact percentiles of NVML's integer
    readings without keeping the series. Feeding (`add_*`) and settling may run in different
    threads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._util: list[tuple[float, float]] = []
        self._cpu: list[tuple[float, str, float]] = []
        self._gpu_by: dict[tuple[str, str], _Mean] = {}
        self._cpu_by: dict[tuple[str, str], _Mean] = {}
        self._hist = [0] * 101
        self._all, self._training, self._not_training = _Mean(), _Mean(), _Mean()
        self._folded_until: float | None = None
        self._seconds: PhaseSeconds = {}
        self._train_union = self._active_union = 0.0

    @property
    def folded_until(self) -> float | None:
        """Phase time before this moment is summed up (None: nothing yet)."""
        return self._folded_until

    def _fold(self, phases: Mapping[str, Transitions], until: float) -> None:
        if self._folded_until is not None and until <= self._folded_until:
            return
        seconds, train, active = _slice(phases, self._folded_until, until)
        for key, value in seconds.items():
            self._seconds[key] = self._seconds.get(key, 0.0) + value
        self._train_union += train
        self._active_union += active
        self._folded_until = until

    def add_util(self, samples: Sequence[tuple[float, float]]) -> None:
        """GPU utilization samples `(Unix time, %)`."""
        with self._lock:
            self._util.extend(samples)

    def add_cpu(self, t: float, job: str, percent: float) -> None:
        """One job's CPU % at time t."""
        with self._lock:
            self._cpu.append((t, job, percent))

    def settle(self, phases: Mapping[str, Transitions], until: float) -> None:
        """Attribute every pending sample taken before `until` to the phases in `phases`."""
        with self._lock:
            util = [s for s in self._util if s[0] < until]
            self._util = [s for s in self._util if s[0] >= until]
            cpu = [s for s in self._cpu if s[0] < until]
            self._cpu = [s for s in self._cpu if s[0] >= until]
        timelines = {job: _Timeline(tr, until) for job, tr in phases.items() if tr}
        for t, value in util:
            current = {job: tl.at(t) for job, tl in timelines.items()}
            if not any(current.values()):
                continue  # before the first job started or after the last one ended
            self._hist[min(100, max(0, round(value)))] += 1
            self._all.add(value)
            (self._training if "train" in current.values() else self._not_training).add(value)
            for job, phase in current.items():
                if phase is not None:
                    self._gpu_by.setdefault((job, phase), _Mean()).add(value)
        for t, job, value in cpu:
            timeline = timelines.get(job)
            phase = timeline.at(t) if timeline is not None else None
            if phase is not None:
                self._cpu_by.setdefault((job, phase), _Mean()).add(value)

    def _percentile(self, q: float) -> float | None:
        n = sum(self._hist)
        if n == 0:
            return None
        rank, seen = q * n, 0
        for value, count in enumerate(self._hist):
            seen += count
            if seen >= rank:
                return float(value)
        return 100.0

    def result(self, phases: Mapping[str, Transitions], end: float, *, settle_until: float | None = None) -> Accounting:
        """The accounting so far; samples and phase time before `settle_until` (default `end`)
        are settled first, and the phase time after it is added without being kept."""
        until = end if settle_until is None else settle_until
        self.settle(phases, until)
        self._fold(phases, min(until, end))
        recent, train, active = _slice(phases, self._folded_until, end)
        train += self._train_union
        active += self._active_union
        seconds = dict(self._seconds)
        for key, value in recent.items():
            seconds[key] = seconds.get(key, 0.0) + value
        jobs: dict[str, dict[str, PhaseStats]] = {}
        for job in dict.fromkeys(job for job, _ in seconds):
            jobs[job] = {}
            for phase in PHASES:
                gpu, cpu = self._gpu_by.get((job, phase)), self._cpu_by.get((job, phase))
                jobs[job][phase] = PhaseStats(seconds.get((job, phase), 0.0), gpu.value if gpu else None,
                                              cpu.value if cpu else None)  # fmt: skip
        return Accounting(
            gpu_util_mean=self._all.value,
            gpu_util_p50=self._percentile(0.50),
            gpu_util_p95=self._percentile(0.95),
            train_share=train / active if active > 0 else None,
            gpu_util_while_training=self._training.value,
            gpu_util_while_not_training=self._not_training.value,
            jobs=jobs,
        )
