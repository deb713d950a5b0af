"""Phase accounting: GPU utilization and CPU % per job and per phase, measured.

Joins each job's `phase` events (rollout or train, from its events file) with the timestamped
telemetry: every GPU utilization sample and every per-job CPU reading is attributed to the phase
each job was in at that instant. The result is the seeds' table of rollout, training and average
utilization, but measured, plus the overall mean, p50 and p95 and the share of time during which
at least one job was training (the overlap that parallel jobs are meant to create).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

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
    """One job's phases as sorted transitions; `at(t)` is the phase at time t (None outside)."""

    def __init__(self, transitions: Transitions, end: float) -> None:
        ordered = sorted(transitions, key=lambda x: x[0])
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
    total, current_start, current_end = 0.0, None, None
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


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def account(
    phases: Mapping[str, Transitions],
    gpu_util: Sequence[tuple[float, float]],
    job_cpu: Sequence[tuple[float, str, float]],
    end: float,
) -> Accounting:
    """Attribute GPU samples `(t, util %)` and job CPU readings `(t, job, cpu %)` to phases.

    `phases` maps each job to its `(t, phase)` transitions (phase None when its worker stopped);
    a job's last phase lasts until `end`.
    """
    timelines = {job: _Timeline(tr, end) for job, tr in phases.items() if tr}
    jobs: dict[str, dict[str, PhaseStats]] = {}
    for job, timeline in timelines.items():
        jobs[job] = {}
        for phase in PHASES:
            spans = timeline.intervals(phase)
            gpu = [u for t, u in gpu_util if any(s <= t < e for s, e in spans)]
            cpu = [c for t, j, c in job_cpu if j == job and timeline.at(t) == phase]
            jobs[job][phase] = PhaseStats(sum(e - s for s, e in spans), _mean(gpu), _mean(cpu))

    train_spans = [span for tl in timelines.values() for span in tl.intervals("train")]
    active = [span for tl in timelines.values() for p in PHASES for span in tl.intervals(p)]
    active_length = _union_length(active)
    while_training, not_training, in_run = [], [], []
    for t, util in gpu_util:
        if not any(s <= t < e for s, e in active):
            continue
        in_run.append(util)
        (while_training if any(s <= t < e for s, e in train_spans) else not_training).append(util)
    values = np.array(in_run) if in_run else None
    return Accounting(
        gpu_util_mean=float(values.mean()) if values is not None else None,
        gpu_util_p50=float(np.percentile(values, 50)) if values is not None else None,
        gpu_util_p95=float(np.percentile(values, 95)) if values is not None else None,
        train_share=_union_length(train_spans) / active_length if active_length > 0 else None,
        gpu_util_while_training=_mean(while_training),
        gpu_util_while_not_training=_mean(not_training),
        jobs=jobs,
    )
