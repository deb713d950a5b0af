"""Each job's cockpit-side figures as TensorBoard scalars: `<job dir>/tb/cockpit/`, beside SB3's run.

The worker logs what stable-baselines3 logs (`rollout/ep_rew_mean`, `train/loss`, ...) into
`<job dir>/tb/PPO_0` (`cockpit.contract.rundir`). What only the cockpit measures is written here,
in the cockpit process, with TensorBoard's own `RecordWriter` and protos (torch never loads
here), into a run of its own, `<job dir>/tb/cockpit/`, so its event files never mix with SB3's:

- `cockpit/sps`: the job's live SPS (`cockpit.core.telemetry.throughput`: whole rollout + train cycles), at
  the job's steps when it was read, written when the steps have moved since the last one;
- `cockpit/cpu_percent/rollout` and `cockpit/cpu_percent/train`: the job's CPU % (its process
  tree, psutil) while it was in that phase, the mean over each interval of `EVERY_S`;
- `cockpit/gpu_util/rollout` and `cockpit/gpu_util/train`: the utilization (NVML's samples) of the
  job's GPU while the job was in that phase, over the same intervals. Without a GPU there are no NVML
  samples and so no GPU scalar at all: never a zero that was not measured.

Samples are attributed to phases by `cockpit.core.telemetry.phases` (a `PhaseAccountant` per interval), and
an interval is settled once it is `PHASE_EVENT_LAG_S` old, as run.toml's accounting is: the phase
events that say where its samples belong reach the cockpit a moment after the samples. Its figures
go at the job's steps at the interval's end (the step the job had at the update nearest it).

The session calls `update` from its loop every `EVERY_S`: a few protos per job, appended in the
caller's thread, and one flush. TensorBoard's `EventFileWriter` is not used: it writes from a
thread of its own, which on a full disk died with a traceback on the cockpit's stderr. Here a
failed write raises where the update runs, which ends the scalars with one warning (`failed`).

`tensorboard` is an optional extra. `tensorboard_api()` is the one place it is imported; without
it a run goes on unchanged and says once how to enable it (`install_hint`).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import iso
from cockpit.core.feed.snapshot import RunState
from cockpit.core.record.runlog import PHASE_EVENT_LAG_S
from cockpit.core.telemetry.phases import PHASES, PhaseAccountant, phases_since
from cockpit.core.telemetry.sampler import Sample

EVERY_S = 5.0  # how often the session writes: a point per 5 s is plenty for a curve over hours
SPS_TAG = "cockpit/sps"
CPU_TAG = "cockpit/cpu_percent/"  # + phase
GPU_TAG = "cockpit/gpu_util/"  # + phase


def install_hint(run_dir: Path) -> str:
    """The one line a run says when the `tensorboard` package is missing."""
    return f"tensorboard not installed: pip install 'cockpit[tensorboard]' to log each job to {run_dir}/jobs/<id>/tb"


class EventFile(Protocol):
    """An event file this module appends to (`_EventFile`; tests swap in their own)."""

    def add_event(self, event: Any) -> None:
        """Append one `Event` proto."""
        ...

    def flush(self) -> None:
        """Hand what was appended to the OS."""
        ...

    def close(self) -> None:
        """Flush and close the file."""
        ...


@dataclass(frozen=True)
class TensorBoardApi:
    """The parts of the `tensorboard` package this module uses: the event file writer (a logdir
    in, an `EventFile` out) and the `Event` and `Summary` protos."""

    writer: Callable[[str], EventFile]
    event: Callable[..., Any]
    summary: Any


def tensorboard_api() -> TensorBoardApi | None:
    """TensorBoard's record writer and protos; None when the `tensorboard` package cannot be imported."""
    try:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.record_writer import RecordWriter
    except ImportError:
        return None

    def writer(logdir: str) -> EventFile:
        return _EventFile(Path(logdir), RecordWriter, Event)

    return TensorBoardApi(writer, Event, Summary)


class _EventFile:
    """One TensorBoard event file, written in the caller's thread through TensorBoard's own
    `RecordWriter` and `Event` proto, named and begun as its `EventFileWriter` does. That writer
    writes from a thread of its own, which on a full disk died with a traceback on the cockpit's
    stderr; here a failed write raises `OSError` in `add_event` or `flush`, where the caller
    turns it into one warning."""

    _opened = 0  # a per-process count in the file name, as TensorBoard's writer keeps one

    def __init__(self, logdir: Path, record_writer: Callable[[Any], Any], event: Callable[..., Any]) -> None:
        # tb/ and tb/cockpit/ only: a job or run dir that is gone stays gone (FileNotFoundError),
        # since a deleted run directory made again would pass for a replaced one.
        for folder in (logdir.parent, logdir):
            folder.mkdir(exist_ok=True)
        _EventFile._opened += 1
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{_EventFile._opened}"
        self._file = (logdir / name).open("ab")
        try:
            self._records = record_writer(self._file)
            self.add_event(event(wall_time=time.time(), file_version="brain.Event:2"))
        except BaseException:
            self._file.close()
            raise

    def add_event(self, event: Any) -> None:
        """Append one `Event` proto."""
        self._records.write(event.SerializeToString())

    def flush(self) -> None:
        """Hand what was appended to the OS."""
        self._file.flush()

    def close(self) -> None:
        """Flush and close the file."""
        self._file.close()


@dataclass
class _JobLog:
    """One job's writer and what it needs to place its points: the job's (t, steps) at each update
    while it was live, and the steps of the last SPS point."""

    marks: deque[tuple[float, int]] = field(default_factory=deque)
    sps_steps: int | None = None
    file: EventFile | None = None
    # The first update that found the job's worker gone: once the samples up to then are written,
    # the job's file is closed (a fleet's hundreds of agents must not keep a thread each).
    ended_at: float | None = None

    def steps_at(self, t: float) -> int | None:
        """The job's steps at the newest update at or before `t`; None if it was not live yet."""
        found = None
        for mark_t, steps in self.marks:
            if mark_t > t:
                break
            found = steps
        return found

    def forget_before(self, t: float) -> None:
        """Drop the marks no later interval needs: all before `t` but the newest of them."""
        while len(self.marks) > 1 and self.marks[1][0] <= t:
            self.marks.popleft()


class TensorBoardScalars:
    """Writes every job's cockpit scalars (see the module docstring) under `run_dir`'s job dirs.

    Called from one thread (the session's loop): `update` every `every_s`, then `close`.
    """

    def __init__(
        self, run_dir: Path, api: TensorBoardApi, *, every_s: float = EVERY_S, lag_s: float = PHASE_EVENT_LAG_S
    ) -> None:
        self.run_dir = RunDir(run_dir)
        self.api = api
        self.every_s = every_s
        self.lag_s = lag_s
        # Why the scalars stopped (a write failed), for the run's warnings; None while they are written.
        self.failed: str | None = None
        self._jobs: dict[str, _JobLog] = {}
        self._last: float | None = None  # `now` of the last update
        self._settled: float | None = None  # samples before this were attributed and written
        self._seen: float | None = None  # `t` of the newest sample taken in
        self._util: list[tuple[float, float, int]] = []  # NVML samples (t, %, GPU) not settled yet
        self._cpu: list[tuple[float, str, float]] = []  # (t, job, CPU %) readings not settled yet

    def due(self, now: float) -> bool:
        """Whether an update at `now` (Unix time) would write: `every_s` after the last one."""
        return self.failed is None and (self._last is None or now - self._last >= self.every_s)

    def update(
        self,
        state: RunState,
        samples: Sequence[Sample],
        phases: Mapping[str, list[tuple[float, str | None]]],
        *,
        final: bool = False,
    ) -> None:
        """Write what is new: each live job's SPS at its steps now, and each job's CPU % and GPU
        utilization by phase over the samples older than `lag_s` (all of them when `final`).

        `samples` are the sampler's, oldest first (those seen before are skipped); `phases` each
        job's phase transitions, as the supervisor keeps them. A failed write sets `failed` and
        ends the scalars; the run goes on."""
        if self.failed is not None:
            return
        self._last = state.now
        try:
            self._take(samples)
            self._write_sps(state)
            placement = {job.id: job.gpu for job in state.jobs if job.gpu is not None}
            self._write_phases(phases, state.now if final else state.now - self.lag_s, placement)
            self._flush(final=final)
        except OSError as exc:
            self.failed = f"TensorBoard scalars not written after {iso(state.now)}: {exc.strerror or exc}"
            self.close()

    def close(self) -> None:
        """Close every job's event file (flushing it); nothing is written after this."""
        for log in self._jobs.values():
            if log.file is not None:
                with contextlib.suppress(OSError):  # the last flush on a full disk or in a deleted dir
                    log.file.close()
                log.file = None
        self._jobs.clear()

    def _take(self, samples: Sequence[Sample]) -> None:
        """Keep the NVML samples and the fresh CPU readings of the samples not seen yet."""
        first = 0 if self._seen is None else bisect.bisect_right(samples, self._seen, key=lambda sample: sample.t)
        for sample in samples[first:]:
            self._seen = sample.t
            for gpu, util in sample.gpu_util().items():
                self._util.extend((t, value, gpu) for t, value in util)
            if sample.usage_fresh:  # a reading carried over to later ticks is one reading (as the recorder counts)
                self._cpu.extend((sample.t, job, usage.cpu_percent) for job, usage in sample.jobs.items())

    def _write_sps(self, state: RunState) -> None:
        """Mark where each job is (a live one, or one that ended since it was live: its last
        steps), and write a live job's SPS when its steps have moved."""
        live = {job.id for job in state.jobs if job.state.live}
        for job_id, log in self._jobs.items():
            if job_id not in live and log.ended_at is None:
                log.ended_at = state.now
        for job in state.jobs:
            if not job.state.live and job.id not in self._jobs:
                continue
            log = self._jobs.setdefault(job.id, _JobLog())
            log.marks.append((state.now, job.steps))
            if not job.state.live:
                continue
            log.ended_at = None  # live again (a restart, a fleet's next tier)
            if job.state.stepping and job.sps is not None and job.steps != log.sps_steps:
                log.sps_steps = job.steps
                self._write(job.id, state.now, job.steps, {SPS_TAG: job.sps})

    def _write_phases(
        self, phases: Mapping[str, list[tuple[float, str | None]]], until: float, placement: Mapping[str, int]
    ) -> None:
        """Attribute the samples before `until` to the jobs' phases, each job's against its GPU's
        (`placement`), and write each job's means."""
        if self._settled is not None and until <= self._settled:
            return
        start, self._settled = self._settled, until
        util = [s for s in self._util if s[0] < until]
        cpu = [s for s in self._cpu if s[0] < until]
        self._util = [s for s in self._util if s[0] >= until]
        self._cpu = [s for s in self._cpu if s[0] >= until]
        if not util and not cpu:
            return
        interval = PhaseAccountant()
        for t, value, gpu in util:
            interval.add_util([(t, value)], gpu)
        for t, job_id, percent in cpu:
            interval.add_cpu(t, job_id, percent)
        # Only the transitions since the previous update, and the one in effect then: a job keeps
        # minutes of them, and attributing 5 s of samples must not go over all of them each time.
        recent = {
            job_id: tr if start is None else phases_since(tr, start)
            for job_id, tr in phases.items()
            if job_id in self._jobs
        }
        accounting = interval.result(recent, until, placement=placement)
        for job_id, by_phase in accounting.jobs.items():
            steps = self._jobs[job_id].steps_at(until)
            if steps is None:
                continue
            values: dict[str, float] = {}
            for phase in PHASES:
                stats = by_phase[phase]
                if stats.cpu_percent_mean is not None:
                    values[CPU_TAG + phase] = stats.cpu_percent_mean
                if stats.gpu_util_mean is not None:
                    values[GPU_TAG + phase] = stats.gpu_util_mean
            if values:
                self._write(job_id, until, steps, values)

    def _write(self, job_id: str, wall_time: float, steps: int, values: Mapping[str, float]) -> None:
        log = self._jobs[job_id]
        if log.file is None:
            log.file = self.api.writer(str(self.run_dir.job(job_id).tensorboard_cockpit))
        summary = self.api.summary(
            value=[self.api.summary.Value(tag=tag, simple_value=value) for tag, value in values.items()]
        )
        log.file.add_event(self.api.event(wall_time=wall_time, step=steps, summary=summary))

    def _flush(self, *, final: bool) -> None:
        """Flush what this update wrote; close the files of jobs that ended and are fully written."""
        settled = self._settled if self._settled is not None else 0.0
        for job_id, log in list(self._jobs.items()):
            ended = log.ended_at is not None and (final or log.ended_at <= settled)
            if log.file is not None:
                if ended:
                    log.file.close()
                    log.file = None
                else:
                    log.file.flush()
            if ended:
                del self._jobs[job_id]
            else:
                log.forget_before(settled)
