"""Phase accounting: GPU utilization and CPU % per job and per phase, measured.

Joins each job's `phase` events (rollout or train, from its events file) with the timestamped
telemetry: every GPU utilization sample and every per-job CPU reading is attributed to the phase
each job was in at that instant. The result is the seeds' table of rollout, training and average
utilization, but measured, plus the overall mean, p50 and p95 and the share of time during which
at least one job was training (the overlap that parallel jobs are meant to create).

With several GPUs, utilization samples are kept per GPU (by NVML index) and a job's phases are
attributed against the samples of its own GPU (the GPU each job is on, given when samples are
settled; a job without one counts against every GPU's samples, as on a machine of one GPU). The
same figures then come per GPU (`Accounting.gpus`, over the jobs on it), and the run's over every
GPU's samples together.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

PHASES = ("rollout", "train")

Transitions = Sequence[tuple[float, str | None]]


@dataclass(frozen=True)
class PhaseStats:
    """One job's (or all jobs') figures for one phase."""

    seconds: float
    gpu_util_mean: float | None
    cpu_percent_mean: float | None


@dataclass(frozen=True)
class GpuFigures:
    """Utilization over some samples (one GPU's, or every GPU's): mean, p50 and p95, the share of
    time at least one of its jobs trained, and the mean while one did and while none did."""

    gpu_util_mean: float | None
    gpu_util_p50: float | None
    gpu_util_p95: float | None
    train_share: float | None
    gpu_util_while_training: float | None
    gpu_util_while_not_training: float | None


@dataclass(frozen=True)
class Accounting(GpuFigures):
    """Utilization by phase, per job, for the whole run (over every GPU), and per GPU by NVML index."""

    jobs: Mapping[str, Mapping[str, PhaseStats]]
    gpus: Mapping[int, GpuFigures] = field(default_factory=dict)


class _Timeline:
    """One job's phases as sorted transitions; `at(t)` is the phase at time t (None outside). With
    `start`, only the phase at `start` and the transitions after it are kept: what `intervals`
    clipped to `start` needs, in time that does not grow with the job's history."""

    def __init__(self, transitions: Transitions, end: float, start: float | None = None) -> None:
        ordered = sorted(transitions, key=lambda x: x[0])
        if start is not None:
            prune(ordered, start)
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


class _Util:
    """One GPU's (or every GPU's) utilization samples as a 0-100 histogram and running means."""

    def __init__(self) -> None:
        self.hist = [0] * 101
        self.all, self.training, self.not_training = _Mean(), _Mean(), _Mean()

    def add(self, value: float, *, training: bool) -> None:
        self.hist[min(100, max(0, round(value)))] += 1
        self.all.add(value)
        (self.training if training else self.not_training).add(value)

    def percentile(self, q: float) -> float | None:
        n = sum(self.hist)
        if n == 0:
            return None
        rank, seen = q * n, 0
        for value, count in enumerate(self.hist):
            seen += count
            if seen >= rank:
                return float(value)
        return 100.0

    def figures(self, train: float, active: float) -> GpuFigures:
        """These samples' figures, with `train` and `active` the union lengths of their jobs' spans."""
        share = train / active if active > 0 else None
        return GpuFigures(
            self.all.value,
            self.percentile(0.50),
            self.percentile(0.95),
            share,
            self.training.value,
            self.not_training.value,
        )


PhaseSeconds = dict[tuple[str, str], float]  # (job, phase) -> seconds
Placement = Mapping[str, int]  # job -> the NVML index of the GPU it is on


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


def _phase_at(transitions: Sequence[tuple[float, str | None]], t: float) -> int:
    """The index of the last transition at or before `t` (0 when none is)."""
    return max(0, bisect.bisect_right(transitions, t, key=lambda tr: tr[0]) - 1)


def phases_since(transitions: list[tuple[float, str | None]], since: float) -> list[tuple[float, str | None]]:
    """The transitions after `since`, preceded by the last one at or before it (if any)."""
    return transitions[_phase_at(transitions, since) :]


def prune(transitions: list[tuple[float, str | None]], before: float) -> None:
    """`phases_since` in place: drop the transitions before `before` but the last of them (the
    phase at `before`): what `PhaseAccountant` has folded, a viewer's window has no use for either."""
    del transitions[: _phase_at(transitions, before)]


def _on_gpu(phases: Mapping[str, Transitions], placement: Placement, gpu: int) -> dict[str, Transitions]:
    """The jobs of `phases` on GPU `gpu`: placed there, or placed nowhere."""
    return {job: tr for job, tr in phases.items() if placement.get(job, gpu) == gpu}


class PhaseAccountant:
    """Accumulates accounting incrementally, so a run of days costs the same per update as a
    run of minutes: samples are attributed once, when their phase is known, then dropped, and
    phase time is summed up to the settled moment (`folded_until`), after which the caller
    may `prune` older transitions.

    Samples arrive as soon as they are taken, but a job's phase event reaches the cockpit a
    moment later, so `settle(phases, until)` only attributes samples older than `until`. GPU
    utilization is kept as a 0-100 histogram, which gives exact percentiles of NVML's integer
    readings without keeping the series. Feeding (`add_*`) and settling may run in different
    threads. `placement` (job -> GPU) says which GPU's samples each job's phases meet.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._util: list[tuple[float, float, int]] = []
        self._cpu: list[tuple[float, str, float]] = []
        self._gpu_by: dict[tuple[str, str], _Mean] = {}
        self._cpu_by: dict[tuple[str, str], _Mean] = {}
        self._run = _Util()
        self._per_gpu: dict[int, _Util] = {}
        self._folded_until: float | None = None
        self._seconds: PhaseSeconds = {}
        # The union lengths of all train spans and all spans: the run's (None) and each GPU's jobs'.
        self._unions: dict[int | None, tuple[float, float]] = {}

    @property
    def folded_until(self) -> float | None:
        """Phase time before this moment is summed up (None: nothing yet)."""
        return self._folded_until

    def _unions_between(
        self, phases: Mapping[str, Transitions], placement: Placement, start: float | None, end: float
    ) -> tuple[PhaseSeconds, dict[int | None, tuple[float, float]]]:
        """`_slice` over [start, end) for the run (key None) and for each GPU's jobs."""
        seconds, train, active = _slice(phases, start, end)
        unions: dict[int | None, tuple[float, float]] = {None: (train, active)}
        for gpu in self._per_gpu.keys() | set(placement.values()):
            _, gpu_train, gpu_active = _slice(_on_gpu(phases, placement, gpu), start, end)
            unions[gpu] = (gpu_train, gpu_active)
        return seconds, unions

    def _fold(self, phases: Mapping[str, Transitions], until: float, placement: Placement) -> None:
        if self._folded_until is not None and until <= self._folded_until:
            return
        seconds, unions = self._unions_between(phases, placement, self._folded_until, until)
        for key, value in seconds.items():
            self._seconds[key] = self._seconds.get(key, 0.0) + value
        self._unions = _sum_unions(self._unions, unions)
        self._folded_until = until

    def add_util(self, samples: Sequence[tuple[float, float]], gpu: int = 0) -> None:
        """GPU `gpu`'s (NVML index) utilization samples `(Unix time, %)`."""
        with self._lock:
            self._util.extend((t, value, gpu) for t, value in samples)

    def add_cpu(self, t: float, job: str, percent: float) -> None:
        """One job's CPU % at time t."""
        with self._lock:
            self._cpu.append((t, job, percent))

    def settle(self, phases: Mapping[str, Transitions], until: float, placement: Placement | None = None) -> None:
        """Attribute every pending sample taken before `until` to the phases in `phases`: a GPU's
        samples to the jobs on it (`placement`; a job not in it is on every GPU)."""
        placement = placement or {}
        with self._lock:
            util = [s for s in self._util if s[0] < until]
            self._util = [s for s in self._util if s[0] >= until]
            cpu = [s for s in self._cpu if s[0] < until]
            self._cpu = [s for s in self._cpu if s[0] >= until]
        timelines = {job: _Timeline(tr, until) for job, tr in phases.items() if tr}
        for t, value, gpu in util:
            current = {job: tl.at(t) for job, tl in timelines.items() if placement.get(job, gpu) == gpu}
            if not any(current.values()):
                continue  # before the first of its jobs started or after the last one ended
            training = "train" in current.values()
            self._run.add(value, training=training)
            self._per_gpu.setdefault(gpu, _Util()).add(value, training=training)
            for job, phase in current.items():
                if phase is not None:
                    self._gpu_by.setdefault((job, phase), _Mean()).add(value)
        for t, job, value in cpu:
            timeline = timelines.get(job)
            phase = timeline.at(t) if timeline is not None else None
            if phase is not None:
                self._cpu_by.setdefault((job, phase), _Mean()).add(value)

    def result(
        self,
        phases: Mapping[str, Transitions],
        end: float,
        *,
        settle_until: float | None = None,
        placement: Placement | None = None,
    ) -> Accounting:
        """The accounting so far; samples and phase time before `settle_until` (default `end`)
        are settled first, and the phase time after it is added without being kept. `placement`
        is each job's GPU now (its phase time counts towards that GPU's train share)."""
        placement = placement or {}
        until = end if settle_until is None else settle_until
        self.settle(phases, until, placement)
        self._fold(phases, min(until, end), placement)
        recent, recent_unions = self._unions_between(phases, placement, self._folded_until, end)
        unions = _sum_unions(self._unions, recent_unions)
        seconds = dict(self._seconds)
        for key, value in recent.items():
            seconds[key] = seconds.get(key, 0.0) + value
        jobs: dict[str, dict[str, PhaseStats]] = {}
        for job in dict.fromkeys(job for job, _ in seconds):
            jobs[job] = {}
            for phase in PHASES:
                gpu, cpu = self._gpu_by.get((job, phase)), self._cpu_by.get((job, phase))
                jobs[job][phase] = PhaseStats(
                    seconds.get((job, phase), 0.0), gpu.value if gpu else None, cpu.value if cpu else None
                )
        gpus = {gpu: util.figures(*unions.get(gpu, (0.0, 0.0))) for gpu, util in sorted(self._per_gpu.items())}
        return Accounting(**asdict(self._run.figures(*unions[None])), jobs=jobs, gpus=gpus)


def _sum_unions(
    a: Mapping[int | None, tuple[float, float]], b: Mapping[int | None, tuple[float, float]]
) -> dict[int | None, tuple[float, float]]:
    """Union lengths of two consecutive stretches of time, added key by key."""
    return {
        key: (
            a.get(key, (0.0, 0.0))[0] + b.get(key, (0.0, 0.0))[0],
            a.get(key, (0.0, 0.0))[1] + b.get(key, (0.0, 0.0))[1],
        )
        for key in a.keys() | b.keys()
    }
