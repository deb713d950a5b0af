"""Replay: a finished run, read back from its files, shown as it was at any moment.

Everything is read once when the replay opens: `run.toml`, the telemetry CSVs and every job's
`events.jsonl`. Each job's events are folded through `telemetry.job_events.JobEvents`, the reading
the supervisor applies live, and what it says after each event is kept in a few time-sorted lists
(starts, outcomes, steps, progress, checkpoints, phase transitions), so the state at any `t` is a
handful of bisections, `seek` + `frame` cost the same at any position, and a job shows what the
live view showed of it. What the event files cannot say (why the
supervisor ended a job, its final restart count) comes from `run.toml`'s job records, which
describe the end of the run and are used there.

Measured on the 2-core dev box (not a test), a 1-hour run with 4 jobs (18,000 samples at 5 Hz,
37,500 events per job): opening takes about 1.7 s and holds about 75 MiB, mostly the rebuilt
samples; `seek` + `frame` take about 0.1 ms.

The run's trend (`cockpit.core.telemetry.trend`) is rebuilt at each position from the same lists: a point a
second over the 10 minutes before it, each a few bisections per job. The points of the previous
position are kept, so a seek computes only the points it adds. Measured the same way on a
synthetic 1-hour run of 4 jobs (`benchmarks.report_render.synthesize_run`): the first frame takes
about 14 ms (600 points), a 5 s seek + frame about 0.5 ms, a jump to a far position about 15 ms;
on a 64-agent fleet (`synthesize_fleet`) 38 ms, 2 ms and 12 ms.
"""

from __future__ import annotations

import bisect
import csv
import io
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar, overload

from cockpit.contract.controls import Control
from cockpit.contract.events import (
    CheckpointEvent,
    ErrorEvent,
    FinishedEvent,
    HeartbeatEvent,
    PhaseEvent,
    ProgressEvent,
    StartedEvent,
    iter_events,
)
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import JobRecord, RunRecord, RunRecordError, read, unix
from cockpit.contract.states import JobState, RunStatus
from cockpit.core.feed.detail import JobDetailReaders
from cockpit.core.feed.snapshot import (
    JobLife,
    JobProgress,
    JobSetup,
    JobTelemetry,
    JobView,
    MemoryFigures,
    RunState,
    job_view,
)
from cockpit.core.feed.source import WINDOW_S, Frame, JobDetail, SourceError, Transition
from cockpit.core.machine.gpu_types import GpuInfo, GpuSample
from cockpit.core.record.runlog import MIB
from cockpit.core.telemetry.job_events import JobEvents
from cockpit.core.telemetry.memwatch import MemoryVerdict, MemWatch
from cockpit.core.telemetry.sampler import JobUsage, Sample
from cockpit.core.telemetry.throughput import S_PER_H, live_rate, run_eta, run_sps, window_start
from cockpit.core.telemetry.trend import TREND_EVERY_S, TREND_SPAN_S, Trend, best_return

V = TypeVar("V")
D = TypeVar("D")

NO_GPU_RECORDED = "no GPU recorded"
TERMINAL_STATES = frozenset({"done", "stopped", "failed", "paused"})


def csv_rows(path: Path) -> Iterator[dict[str, str]]:
    """The rows of a telemetry CSV by column name; a torn last line is dropped, no file is no rows.
    The one reader of the CSVs: replay and the report's plots (`record.series`) both read through it."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    yield from csv.DictReader(io.StringIO(text))


def gpu_util_readings(path: Path, gpu: int) -> list[tuple[float, float]]:
    """GPU `gpu`'s (NVML index) utilization readings in gpu_util.csv as (Unix time, %), sorted;
    a file from before its `gpu` column holds one GPU's, taken as `gpu`'s. Rows that do not
    parse are skipped."""
    readings = []
    for row in csv_rows(path):
        try:
            if int(row.get("gpu") or gpu) == gpu:
                readings.append((float(row["t"]), float(row["util"])))
        except (KeyError, TypeError, ValueError):
            continue
    return sorted(readings)


def _num(row: Mapping[str, str | None], key: str) -> float | None:
    """A numeric cell, None when empty or absent; raises ValueError on a malformed one."""
    value = row.get(key)
    return float(value) if value else None


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


# A job's history is kept as time-indexed lists: a list of times, non-decreasing, beside the
# values recorded at them. These three are the only lookups made in them (bisections over the
# plain float lists, so they run at C speed however long the run).


def _bytes(mib: int | None) -> int | None:
    """MiB in bytes; None (memory the run did not record) stays None."""
    return mib * MIB if mib is not None else None


def _upto(ts: Sequence[float], t: float) -> int:
    """How many of the times `ts` are at or before `t`: the index just past them."""
    return bisect.bisect_right(ts, t)


@overload
def _latest(ts: Sequence[float], values: Sequence[V], t: float) -> V | None: ...
@overload
def _latest(ts: Sequence[float], values: Sequence[V], t: float, default: D) -> V | D: ...
def _latest(ts: Sequence[float], values: Sequence[V], t: float, default: object = None) -> object:
    """The value recorded last at or before `t` (`default` when none was)."""
    n = bisect.bisect_right(ts, t)
    return values[n - 1] if n else default


def _since(ts: Sequence[float], values: Sequence[V], since: float, until: float) -> Sequence[V]:
    """The values recorded after `since` up to `until`, preceded by the last one at or before
    `since`, if any: for phase transitions, the phase in effect at `since` and its changes (what
    `phases.phases_since` gives, bounded at `until` without copying a long run's whole list)."""
    return values[max(0, bisect.bisect_right(ts, since) - 1) : bisect.bisect_right(ts, until)]


@dataclass
class _Attempt:
    """One `started` event: a worker process's life, until its outcome, the next start, or the end."""

    seq: int
    t: float
    device: str | None
    pid: int | None
    restarts: int  # restarts so far, this one included (a start after an attempt that did not finish)
    first_rollout: int  # index of its first rollout start in `_JobHistory.rollout_ts`
    end: float = math.inf
    finished: bool = False


@dataclass(frozen=True)
class _Outcome:
    """A `finished` or `error` event of the attempt it belongs to."""

    seq: int
    t: float
    status: str  # done, stopped, or failed (an error)
    error: str | None


@dataclass
class _JobHistory:
    """What one job's events said (`JobEvents`), as time-sorted lists (times are made
    non-decreasing as they are read), with its attempts and outcomes."""

    id: str
    seed: int
    target: int
    final: JobRecord | None  # run.toml's record of the job; None for a job only on disk
    attempts: list[_Attempt] = field(default_factory=list)
    attempt_ts: list[float] = field(default_factory=list)
    outcomes: list[_Outcome] = field(default_factory=list)
    outcome_ts: list[float] = field(default_factory=list)
    step_ts: list[float] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    progress_ts: list[float] = field(default_factory=list)
    # (sps, ep_rew_mean, ep_len_mean) of each progress event
    progress: list[tuple[float | None, float | None, float | None]] = field(default_factory=list)
    # The whole-episode count the job shows (`JobEvents.episodes`) beside the one its episode rate
    # counts (`Throughput.latest_episodes`: None while the worker reports none), set by each
    # progress event and by a start (its resumed count).
    episode_ts: list[float] = field(default_factory=list)
    episodes: list[tuple[int, int | None]] = field(default_factory=list)
    rollout_ts: list[float] = field(default_factory=list)  # rollout starts, for the live throughput
    rollout_steps: list[int] = field(default_factory=list)
    rollout_episodes: list[int | None] = field(default_factory=list)
    target_episodes: int | None = None  # an episode target, from run.toml or the workers' `started`
    checkpoint_ts: list[float] = field(default_factory=list)
    checkpoint_steps: list[int] = field(default_factory=list)
    phases: list[Transition] = field(default_factory=list)
    phase_ts: list[float] = field(default_factory=list)
    # (episodes scored, of how many) as a score phase's heartbeats said, None from any other phase on.
    scoring_ts: list[float] = field(default_factory=list)
    scoring: list[tuple[int, int] | None] = field(default_factory=list)
    peak_ts: list[float] = field(default_factory=list)
    peaks: list[int] = field(default_factory=list)  # GPU memory peak so far, from job_samples
    memory_ts: list[float] = field(default_factory=list)
    memory: list[MemoryVerdict] = field(default_factory=list)  # the leak watch's verdicts, as they changed
    threads: int | None = None  # env threads of its first start (the run's thread budget per job)

    def _phase(self, t: float, phase: str | None) -> None:
        if (self.phases[-1][1] if self.phases else None) != phase:
            self.phases.append((t, phase))
            self.phase_ts.append(t)

    def _steps(self, t: float, steps: Any) -> None:
        if steps is not None:
            self.step_ts.append(t)
            self.steps.append(_int(steps))

    def read(self, path: Path) -> None:
        """Index the job's event file, streamed (it may hold millions of lines). Each event is
        folded through `JobEvents`, the reading the supervisor applies live, and what that then
        says of the job is kept at the event's time; only the attempts, their outcomes and their
        restarts (the supervisor's doing, which no event derives) are reckoned here."""
        seen = JobEvents()
        self.phases = seen.phases  # its transitions, as the live job keeps them
        last_t = -math.inf
        for seq, event in enumerate(iter_events(path)):
            t = last_t = max(last_t, event.t)
            if event.t != t:
                event = replace(event, t=t)
            current = self.attempts[-1] if self.attempts else None
            outcome = isinstance(event, (FinishedEvent, ErrorEvent))
            if outcome and (current is None or current.end != math.inf):
                continue  # an outcome with no open attempt is a previous worker's late word: ignored
            rollouts = seen.throughput.rollouts
            if isinstance(event, StartedEvent):
                seen.end_attempt(t)  # a previous worker still open was killed without a word
            seen.apply(event)
            if isinstance(event, StartedEvent):
                # A start after an attempt that never finished cleanly is the supervisor's restart.
                crashed = current is not None and not current.finished
                if current is not None and current.end == math.inf:
                    current.end = t  # killed without a word
                restarts = (current.restarts if current else 0) + crashed
                if self.threads is None:
                    self.threads = event.threads
                attempt = _Attempt(seq, t, seen.device, event.pid, restarts, len(self.rollout_ts))
                self.attempts.append(attempt)
                self.attempt_ts.append(t)
                if event.target_episodes is not None:
                    self.target_episodes = event.target_episodes
            elif isinstance(event, ProgressEvent):
                self.progress_ts.append(t)
                self.progress.append((seen.rollout_sps, seen.ep_rew_mean, seen.ep_len_mean))
            elif isinstance(event, CheckpointEvent):
                self.checkpoint_ts.append(t)
                self.checkpoint_steps.append(event.step)
            elif isinstance(event, (FinishedEvent, ErrorEvent)) and current is not None:
                status: str
                if isinstance(event, FinishedEvent):
                    status, error = event.status, None
                    current.finished = True
                else:
                    status, error = "failed", event.reason
                current.end = t
                self.outcomes.append(_Outcome(seq, t, status, error))
                self.outcome_ts.append(t)
                seen.end_attempt(t)
            if isinstance(event, (StartedEvent, ProgressEvent)):
                self.episode_ts.append(t)
                self.episodes.append((seen.episodes, seen.throughput.latest_episodes))
            if isinstance(event, (PhaseEvent, HeartbeatEvent)):
                self.scoring_ts.append(t)
                self.scoring.append(seen.scoring)
            if isinstance(event, (StartedEvent, PhaseEvent, ProgressEvent, FinishedEvent)):
                self._steps(t, seen.steps)
            newest = seen.throughput.newest_rollout
            if seen.throughput.rollouts > rollouts and newest is not None:
                self.rollout_ts.append(newest[0])
                self.rollout_steps.append(newest[1])
                self.rollout_episodes.append(newest[2])
            if len(self.phase_ts) < len(self.phases):
                self.phase_ts.extend(p[0] for p in self.phases[len(self.phase_ts) :])

    def close(self, end: float) -> None:
        """The run ended at `end`: an attempt still open ends there, and so does its phase."""
        if self.attempts and self.attempts[-1].end == math.inf:
            self.attempts[-1].end = max(end, self.attempts[-1].t)
        if self.phases and self.phases[-1][1] is not None:
            self._phase(max(end, self.phases[-1][0]), None)

    def _status(
        self, attempt: _Attempt | None, outcome: _Outcome | None, *, restarted: bool
    ) -> tuple[str, str | None, str | None]:
        """(state, error, exit reason) given the newest attempt so far and its outcome, if any."""
        if attempt is None:
            return "queued", None, None
        if outcome is None:
            return "running", None, None
        if outcome.status == "failed" and restarted:
            return "backoff", outcome.error, None  # a later start: the supervisor restarted it
        state = outcome.status
        final = self.final.status if self.final is not None else None
        if not restarted and final is not None and final.terminal:
            state = final.value  # e.g. an error while the run was interrupted ended as "stopped"
        return state, outcome.error, outcome.status if outcome.status in ("done", "stopped") else None

    def view(self, t: float, at_end: bool, usage: JobUsage | None, run_end: float) -> JobView:
        """The job as it was at `t` (`at_end`: at the run's end, where run.toml has the last word).
        `usage` is the job's reading in the sample shown (the newest at or before `t`), None if none."""
        cut = math.inf if at_end else t
        attempts = self.attempts[: _upto(self.attempt_ts, cut)]
        attempt = attempts[-1] if attempts else None
        outcome = _latest(self.outcome_ts, self.outcomes, cut)
        if outcome is not None and (attempt is None or outcome.seq < attempt.seq):
            outcome = None  # an earlier attempt's: this one has not ended yet
        state, error, exit_reason = self._status(attempt, outcome, restarted=len(attempts) < len(self.attempts))
        if at_end and self.final is not None:
            state = self.final.status.value
            error, exit_reason = self.final.error, self.final.exit_reason
        steps = _latest(self.step_ts, self.steps, cut, 0)
        rollout_sps, reward, ep_len = _latest(self.progress_ts, self.progress, cut, (None, None, None))
        measured_at = t if state == "running" else min(t, run_end)
        sps = self._throughput(attempt, cut, steps, measured_at)
        # Before any event the job's counts are those of `JobEvents()`, as the live job's are.
        episodes, counted = _latest(self.episode_ts, self.episodes, cut, (0, None))
        episodes_per_h = self._episode_rate(attempt, cut, counted, measured_at)
        n_checkpoints = _upto(self.checkpoint_ts, cut)
        last_checkpoint = _latest(self.checkpoint_ts, self.checkpoint_steps, cut)
        phase = phase_since = None
        if state == "running":
            phase_since, phase = _latest(self.phase_ts, self.phases, cut, (None, None))
            if phase is None:
                phase_since = None
        first = self.attempts[0] if self.attempts else None
        mean_sps = None
        if first is not None and attempt is not None:
            active = sum(min(cut, a.end, run_end) - a.t for a in attempts)
            # The first count at or after the first start: that start's own, or a tie's.
            first_steps = self.steps[bisect.bisect_left(self.step_ts, first.t)]
            mean_sps = (steps - first_steps) / active if active > 0 else None
        peak = _latest(self.peak_ts, self.peaks, cut)
        memory: MemoryVerdict | MemoryFigures | None = _latest(self.memory_ts, self.memory, cut)
        restarts = attempt.restarts if attempt else 0
        if at_end and self.final is not None:
            final = self.final
            steps, restarts, n_checkpoints = final.steps, final.restarts, final.checkpoints
            mean_sps = final.mean_sps if final.mean_sps is not None else mean_sps
            if final.last_checkpoint_step is not None:
                last_checkpoint = final.last_checkpoint_step
            episodes = final.episodes if final.episodes is not None else episodes
            if final.memory is not None:  # the run's own last verdict, on every reading it took
                memory = MemoryFigures(final.memory, final.memory_growth_mib_h, final.gpu_memory_growth_mib_h)
        live = state == "running"
        scoring = _latest(self.scoring_ts, self.scoring, cut) if phase == "score" else None
        return job_view(
            job=JobSetup(
                id=self.id,
                seed=self.seed,
                env=None,  # run.toml records no job's own env (a fleet's agents'): the run's
                # Its own preset and overrides as run.toml last recorded them (a fleet agent's; none: the run's).
                preset=self.final.preset if self.final is not None else None,
                overrides=tuple(self.final.overrides.items()) if self.final is not None else (),
                target=self.target,
                target_episodes=self.target_episodes,
            ),
            life=JobLife(
                state=JobState(state),
                phase=phase,
                phase_since=phase_since,
                restarts=restarts,
                checkpoints=n_checkpoints,
                last_checkpoint_step=last_checkpoint,
                error=error,
                exit_reason=exit_reason,
                started_at=first.t if first is not None and first.t <= cut else None,
                ended_at=_ended_at(attempt, outcome, run_end) if state in TERMINAL_STATES else None,
            ),
            progress=JobProgress(
                steps=steps,
                episodes=episodes,
                sps=sps,
                mean_sps=mean_sps,
                rollout_sps=rollout_sps,
                ep_rew_mean=reward,
                ep_len_mean=ep_len,
                episodes_per_h=episodes_per_h,
                scored=scoring[0] if scoring else None,
                to_score=scoring[1] if scoring else None,
            ),
            telemetry=JobTelemetry(
                pid=attempt.pid if live and attempt else None,
                device=attempt.device if attempt else None,
                gpu=self.final.gpu if self.final is not None else None,  # where it last ran: run.toml's word
                node=None,  # not recorded
                # As recorded: a job's reading in a sample taken just before its worker ended still
                # shows after the end, until the next sample (live, an ended worker has none).
                usage=usage,
                peak_gpu_mem_bytes=peak,
                memory=memory,
            ),
        )

    def sps_at(self, t: float) -> float | None:
        """The live throughput `view(t, ...)` shows while the job trains at `t`; None when it does
        not (not started, or its attempt ended) or has no rate yet. What the run's trend adds up."""
        attempt = _latest(self.attempt_ts, self.attempts, t)
        if attempt is None:
            return None
        outcome = _latest(self.outcome_ts, self.outcomes, t)
        if outcome is not None and outcome.seq > attempt.seq:
            return None  # this attempt's outcome: the job is not running at `t`
        return self._throughput(attempt, t, _latest(self.step_ts, self.steps, t, 0), t)

    def return_at(self, t: float) -> float | None:
        """The `ep_rew_mean` of the job's newest progress event at or before `t` (as `view` shows it)."""
        progress = _latest(self.progress_ts, self.progress, t)
        return progress[1] if progress is not None else None

    def _throughput(self, attempt: _Attempt | None, cut: float, steps: int, now: float) -> float | None:
        """The live throughput of `attempt` as the supervisor measured it at `now` (at most the
        attempt's end): the same window over its rollout starts up to `cut`, the same rate."""
        if attempt is None:
            return None
        hi = _upto(self.rollout_ts, cut)
        start = window_start(self.rollout_ts, attempt.first_rollout, hi)
        if start is None:
            return None
        # The newest step count up to `cut` is a phase or progress event's once two rollouts began.
        latest = (self._latest_step_t(cut), steps)
        first = (self.rollout_ts[start], self.rollout_steps[start])
        last = (self.rollout_ts[hi - 1], self.rollout_steps[hi - 1])
        return live_rate(first, last, latest, min(now, attempt.end))

    def _episode_rate(self, attempt: _Attempt | None, cut: float, episodes: int | None, now: float) -> float | None:
        """Whole episodes per hour as the supervisor measured them at `now`: the window and rule
        of `_throughput` over the episode counts at the rollout starts."""
        if attempt is None or episodes is None:
            return None
        hi = _upto(self.rollout_ts, cut)
        start = window_start(self.rollout_ts, attempt.first_rollout, hi)
        if start is None:
            return None
        first_count, last_count = self.rollout_episodes[start], self.rollout_episodes[hi - 1]
        if first_count is None or last_count is None:
            return None
        latest = (self._latest_step_t(cut), episodes)
        rate = live_rate(
            (self.rollout_ts[start], first_count), (self.rollout_ts[hi - 1], last_count), latest, min(now, attempt.end)
        )
        return None if rate is None else rate * S_PER_H

    def _latest_step_t(self, cut: float) -> float:
        """When the newest step count up to `cut` was read; there is one once a rollout started."""
        t = _latest(self.step_ts, self.step_ts, cut)
        assert t is not None  # a rollout's phase event carries a step count
        return t


# The leak watch over a recorded run looks this often (or, over a long run, this many times in
# all): what the run saw to the minute, without judging a day-long run 8,640 times per job on open.
REPLAY_MEMORY_EVERY_S = 60.0
REPLAY_MEMORY_LOOKS = 200


def _watch_memory(jobs: Mapping[str, _JobHistory], usage_rows: list[tuple[float, str, JobUsage]]) -> None:
    """Each job's leak-watch verdicts over the run, as the run's own watch formed them: from its
    readings in job_samples.csv (each once: a reading carried over to later ticks is written with
    each), a new worker at each `started` event."""
    if not usage_rows:
        return
    span = usage_rows[-1][0] - usage_rows[0][0]
    watch = MemWatch(every_s=max(REPLAY_MEMORY_EVERY_S, span / REPLAY_MEMORY_LOOKS))
    fed: dict[str, tuple[float, JobUsage]] = {}
    for t, job_id, usage in usage_rows:
        job = jobs.get(job_id)
        last = fed.get(job_id)
        if job is None or usage.rss_bytes <= 0 or (last is not None and last[1] == usage and t - last[0] < 1.5):
            continue
        fed[job_id] = (t, usage)
        watch.add(t, job_id, _upto(job.attempt_ts, t), usage.rss_bytes, usage.gpu_mem_bytes)
        verdict = watch.verdict(job_id)
        if verdict is not None and (not job.memory or job.memory[-1] is not verdict):
            job.memory_ts.append(t)
            job.memory.append(verdict)


def _ended_at(attempt: _Attempt | None, outcome: _Outcome | None, run_end: float) -> float | None:
    """When a job that ended did: its outcome event, else (killed without a word) its attempt's end."""
    if outcome is not None:
        return outcome.t
    return min(attempt.end, run_end) if attempt is not None else None


class ReplaySource:
    """A `Replay` of the finished run in `run_dir`: read-only, positioned at the run's end.

    Raises SourceError (one line naming the directory) when `run_dir` has no readable run.toml.
    Missing or torn telemetry and event files are not errors: what is there is shown.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._details = JobDetailReaders(run_dir)
        self.read_only = True
        self._files = RunDir(run_dir)
        recorded = _load_run_log(run_dir)
        config, host, gpu_table = recorded.config, recorded.host, recorded.gpu
        self._gpu: GpuInfo | None = None
        # How the first GPU's utilization was read as the file last said ("" and None in files from
        # before it was recorded): each replayed sample shows it, as the live one did.
        self._util_read: tuple[str, float | None] = ("", None)
        if gpu_table is not None and gpu_table.present:
            # samples.csv's GPU columns are the first sampled GPU's: [[gpus]]'s first, where recorded.
            first = recorded.gpus[0] if recorded.gpus else None
            if first is not None:
                period_ms = first.util_sample_period_ms
                self._util_read = (first.util_read or "", period_ms / 1000 if period_ms is not None else None)
            self._gpu = GpuInfo(
                index=first.index if first is not None else 0,
                name=first.name if first is not None else gpu_table.name or "",
                memory_total_bytes=_bytes(first.memory_total_mib if first is not None else gpu_table.memory_total_mib),
                driver=gpu_table.driver or "",
                uuid=first.uuid or "" if first is not None else "",
            )
        # Every GPU the run sampled (its samples over time are the first one's only).
        self._gpus = (
            tuple(
                GpuInfo(
                    index=g.index,
                    name=g.name,
                    memory_total_bytes=_bytes(g.memory_total_mib),
                    driver=gpu_table.driver or "" if gpu_table is not None else "",
                    uuid=g.uuid or "",
                )
                for g in recorded.gpus
            )
            if self._gpu is not None and len(recorded.gpus) > 1
            else ()
        )
        telemetry = gpu_table.telemetry if gpu_table is not None else None
        # run.toml writes "ok" for a healthy GPU, where a live RunState has "".
        self._gpu_status = "" if self._gpu is not None and telemetry == "ok" else telemetry or NO_GPU_RECORDED
        self._ram_total = int(host.ram_gib * 1024**3)
        self._gpu_mem_total = self._gpu.memory_total_bytes if self._gpu else None
        usage, usage_rows = self._read_job_samples()
        self._samples, self._sample_ts = self._read_samples(usage)
        self._jobs = self._read_jobs(recorded, usage_rows)
        first_event = min((j.attempt_ts[0] for j in self._jobs if j.attempt_ts), default=None)
        last_event = max((j.step_ts[-1] for j in self._jobs if j.step_ts), default=None)
        started = unix(recorded.started_at)
        ended = unix(recorded.ended_at) or unix(recorded.updated_at)
        start = self._sample_ts[0] if self._sample_ts else started if started is not None else first_event or 0.0
        end = self._sample_ts[-1] if self._sample_ts else ended if ended is not None else last_event or start
        self._span = (start, max(start, end))
        for job in self._jobs:
            job.close(self._span[1])
        self._final_status = recorded.status
        self._started_at = started if started is not None else start
        preset, self._env = config.shown()
        self._preset = (recorded.preset.name if recorded.preset is not None else "") or preset
        self._slots = min(config.jobs, config.agents)
        self._warnings = recorded.warnings
        self._name = recorded.name
        self._mps = config.mps
        self._mps_external = config.mps_external
        self._physical_cores = host.physical_cores
        self._threads_per_job = next((j.threads for j in self._jobs if j.threads), 0)
        self._t = self._span[1]
        self._frame: Frame | None = None
        # The trend's points by their index k (at k * TREND_EVERY_S): those of the window shown
        # last, so a seek computes only the points it adds.
        self._trend_points: dict[int, tuple[float | None, float | None]] = {}

    # ----- loading -----

    def _read_job_samples(self) -> tuple[dict[float, dict[str, JobUsage]], list[tuple[float, str, JobUsage]]]:
        """job_samples.csv by tick time (to rebuild each Sample's `jobs`) and as rows in file order."""
        usage: dict[float, dict[str, JobUsage]] = {}
        rows: list[tuple[float, str, JobUsage]] = []
        for row in csv_rows(self._files.job_samples):
            try:
                t, job = float(row["t"]), row["job"]
                gpu_mem = _num(row, "gpu_mem_mib")
                job_usage = JobUsage(
                    cpu_percent=_num(row, "cpu_percent") or 0.0,
                    rss_bytes=int((_num(row, "rss_mib") or 0.0) * MIB),
                    gpu_mem_bytes=int(gpu_mem * MIB) if gpu_mem is not None else None,
                    gpu_sm_percent=_num(row, "gpu_sm_percent"),
                )
            except (KeyError, TypeError, ValueError):
                continue
            # Both files write a tick's time with the same format, so equal strings, equal floats.
            usage.setdefault(t, {})[job] = job_usage
            rows.append((t, job, job_usage))
        return usage, rows

    def _read_samples(self, usage: Mapping[float, Mapping[str, JobUsage]]) -> tuple[list[Sample], list[float]]:
        """samples.csv (with gpu_util.csv's readings) rebuilt as Samples, and their times, sorted."""
        util = gpu_util_readings(self._files.gpu_util, self._gpu.index if self._gpu is not None else 0)
        util_ts = [t for t, _ in util]
        samples: list[Sample] = []
        for row in csv_rows(self._files.samples):
            try:
                samples.append(self._sample(row, usage))
            except (KeyError, TypeError, ValueError):
                continue
        samples.sort(key=lambda s: s.t)
        ts = [s.t for s in samples]
        if util:
            # Each sample carries the NVML utilization readings since the previous one, as live.
            for i, s in enumerate(samples):
                lo = _upto(util_ts, ts[i - 1]) if i else 0
                hi = _upto(util_ts, s.t)
                if hi > lo:
                    samples[i] = Sample(
                        s.t,
                        s.cpu_percent,
                        s.ram_used_bytes,
                        s.ram_total_bytes,
                        s.gpu,
                        s.jobs,
                        s.cost_s,
                        tuple(util[lo:hi]),
                    )
        return samples, ts

    def _sample(self, row: Mapping[str, str | None], usage: Mapping[float, Mapping[str, JobUsage]]) -> Sample:
        t = float(row["t"] or "")
        cores = (row.get("cpu_cores") or "").split()
        cpu = tuple(float(c) for c in cores) if cores else (_num(row, "cpu_percent") or 0.0,)
        gpu_mem = _num(row, "gpu_mem_used_mib")
        gpu = None
        if gpu_mem is not None:
            clock = _num(row, "gpu_sm_mhz")
            gpu = GpuSample(
                util_percent=_num(row, "gpu_util"),
                util_peak_percent=_num(row, "gpu_util_peak"),
                mem_used_bytes=int(gpu_mem * MIB),
                mem_total_bytes=self._gpu_mem_total,
                power_w=_num(row, "gpu_power_w"),
                temperature_c=_num(row, "gpu_temp_c"),
                sm_clock_mhz=int(clock) if clock is not None else None,
                throttle_reasons=(),  # not recorded
                util_mode=self._util_read[0],
                sample_period_s=self._util_read[1],
            )
        return Sample(
            t=t,
            cpu_percent=cpu,
            ram_used_bytes=int((_num(row, "ram_used_mib") or 0.0) * MIB),
            ram_total_bytes=self._ram_total,
            gpu=gpu,
            jobs=usage.get(t, {}),
            cost_s=(_num(row, "cost_ms") or 0.0) / 1000,
        )

    def _read_jobs(self, recorded: RunRecord, usage_rows: list[tuple[float, str, JobUsage]]) -> list[_JobHistory]:
        """Every job of run.toml and of `jobs/`, in run.toml's order, with its events indexed. A job
        only on disk (a run.toml written before it started) gets seed 0 and the run's timesteps."""
        records = {r.id: r for r in recorded.jobs}
        jobs_dir = self._files.jobs
        on_disk = sorted(p.name for p in jobs_dir.iterdir() if p.is_dir()) if jobs_dir.is_dir() else []
        ids = list(records) + [j for j in on_disk if j not in records]
        histories = []
        for job_id in ids:
            record = records.get(job_id)
            if record is not None:
                history = _JobHistory(job_id, record.seed, record.target, record)
            else:
                history = _JobHistory(job_id, 0, recorded.config.timesteps, None)
            # run.toml's episode target first; a job it does not list takes its workers' word.
            history.target_episodes = record.target_episodes if record is not None else recorded.config.episodes
            history.read(self._files.job(job_id).events)
            histories.append(history)
        by_id = {h.id: h for h in histories}
        for t, job_id, job_usage in usage_rows:
            found = by_id.get(job_id)
            if found is not None and job_usage.gpu_mem_bytes is not None:
                peak = max(job_usage.gpu_mem_bytes, found.peaks[-1] if found.peaks else 0)
                found.peak_ts.append(t)
                found.peaks.append(peak)
        _watch_memory(by_id, usage_rows)
        return histories

    # ----- the Replay protocol -----

    @property
    def span(self) -> tuple[float, float]:
        """First and last recorded moment: the first and last sample (else run.toml's times)."""
        return self._span

    @property
    def position(self) -> float:
        """The moment `frame()` shows."""
        return self._t

    def seek(self, t: float) -> None:
        """Show the run as it was at `t`, clamped to `span`."""
        t = min(max(t, self._span[0]), self._span[1])
        if t != self._t:
            self._t, self._frame = t, None

    def frame(self) -> Frame:
        """The run at the current position: its state, the samples in (t - WINDOW_S, t], and each
        job's phase transitions in that window (built once per position)."""
        if self._frame is None:
            self._frame = self._build(self._t)
        return self._frame

    def _build(self, t: float) -> Frame:
        at_end = t >= self._span[1]
        since = t - WINDOW_S
        sample = _latest(self._sample_ts, self._samples, t)
        end = self._span[1]
        views = tuple(
            job.view(t, at_end, sample.jobs.get(job.id) if sample is not None else None, end) for job in self._jobs
        )
        until = math.inf if at_end else t
        phases = {job.id: tuple(_since(job.phase_ts, job.phases, since, until)) for job in self._jobs}
        state = RunState(
            run_dir=str(self.run_dir),
            preset=self._preset,
            env=self._env,
            status=self._final_status if at_end else RunStatus.RUNNING,
            started_at=self._started_at,
            now=t,
            slots=self._slots,
            jobs=views,
            sample=sample,
            gpu=self._gpu,
            gpus=self._gpus,
            gpu_status=self._gpu_status,
            warnings=self._warnings,
            threads_per_job=self._threads_per_job,
            physical_cores=self._physical_cores,
            eta_s=run_eta(views, self._slots),
            name=self._name,
            trend=self._trend(t),
            mps=self._mps,
            mps_external=self._mps_external,
        )
        samples = self._samples[_upto(self._sample_ts, since) : _upto(self._sample_ts, t)]
        return Frame(state=state, samples=tuple(samples), phases=phases)

    def _trend(self, t: float) -> Trend:
        """The run's trend as the live run kept it at `t`: a point at each whole multiple of
        `TREND_EVERY_S` within `TREND_SPAN_S` before `t`, from the run's first moment on."""
        first = math.ceil(max(self._span[0], t - TREND_SPAN_S) / TREND_EVERY_S)
        last = math.floor(t / TREND_EVERY_S)
        known, points = self._trend_points, dict[int, tuple[float | None, float | None]]()
        for k in range(first, last + 1):
            point = known.get(k)
            if point is None:
                at = k * TREND_EVERY_S
                # A job not started or not running at `at` has no sps there; every job's last return counts.
                point = (
                    run_sps(job.sps_at(at) for job in self._jobs),
                    best_return(job.return_at(at) for job in self._jobs),
                )
            points[k] = point
        self._trend_points = points
        return Trend(
            tuple(k * TREND_EVERY_S for k in points),
            tuple(p[0] for p in points.values()),
            tuple(p[1] for p in points.values()),
        )

    def submit(self, command: Control) -> None:
        """Always raises SourceError: a finished run takes no commands."""
        raise SourceError(f"{self.run_dir} is a finished run: replay is read-only")

    def detail(self, job_id: str) -> JobDetail:
        """The job's detail from its directory (see `job_detail`); SourceError for an unknown job."""
        return self._details(job_id)

    def close(self) -> None:
        """Nothing to release: everything was read when the replay opened."""


def _load_run_log(run_dir: Path) -> RunRecord:
    try:
        return read(run_dir)
    except RunRecordError as exc:
        raise SourceError(str(exc)) from exc


def open_replay(run_dir: Path) -> ReplaySource:
    """A replay of the run in `run_dir`, positioned at its end; SourceError (one line naming the
    directory) when there is no readable run.toml."""
    return ReplaySource(run_dir)
