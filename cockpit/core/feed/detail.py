"""One job's detail, read from its directory alone: the same for a live run and a finished one.

The job's `events.jsonl` can hold millions of lines after a long run, so it is streamed once and
only bounded summaries are kept: the newest notable events, and curves thinned as they grow.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cockpit.contract.checkpoint_files import checkpoint_order, checkpoints_in
from cockpit.contract.events import (
    CheckpointEvent,
    ErrorEvent,
    Event,
    EventReader,
    FinishedEvent,
    ProgressEvent,
    StartedEvent,
)
from cockpit.contract.rundir import JobDir, RunDir
from cockpit.core.feed.source import Checkpoint, JobDetail, SourceError
from cockpit.core.launch.local import log_tail
from cockpit.core.telemetry.bounded_series import Thinned

NOTABLE = (StartedEvent, CheckpointEvent, FinishedEvent, ErrorEvent)
MAX_EVENTS = 50
MAX_POINTS = 500
STDERR_LINES = 20


def _checkpoints_on_disk(job_dir: Path, event_times: Mapping[str, float]) -> tuple[Checkpoint, ...]:
    """Complete checkpoints in the job's directory (`.tmp-*` and `corrupt/` are not), oldest first."""
    found = checkpoints_in(JobDir(job_dir).checkpoints)
    return tuple(
        Checkpoint(step=(checkpoint_order(p.name) or (0, 0))[0], path=str(p), t=event_times.get(p.name)) for p in found
    )


class JobDetailReader:
    """Follows one job's files: each `read()` parses only the events appended since the last one,
    so a detail screen refreshing every 2 s stays cheap on a job with millions of events.

    Raises SourceError naming the job and the directory when there is no such job directory.
    """

    def __init__(self, run_dir: Path, job_id: str) -> None:
        self._files = RunDir(run_dir).job(job_id)
        self.job_dir = self._files.path
        if job_id in ("", ".", "..") or "/" in job_id or not self.job_dir.is_dir():
            raise SourceError(f"no job {job_id!r} in {run_dir}: {self.job_dir} does not exist")
        self.job_id = job_id
        self._tail = EventReader(self._files.events)
        self._config: Mapping[str, Any] = {}
        self._notable: deque[Event] = deque(maxlen=MAX_EVENTS)
        self._curve: Thinned[tuple[int, float]] = Thinned(MAX_POINTS)
        self._sps: Thinned[tuple[float, float]] = Thinned(MAX_POINTS)
        self._checkpoint_times: dict[str, float] = {}

    def _take(self, event: Event) -> None:
        if isinstance(event, ProgressEvent):
            if event.ep_rew_mean is not None:
                self._curve.add((event.num_timesteps, event.ep_rew_mean))
            if event.sps is not None:
                self._sps.add((event.t, event.sps))
        elif isinstance(event, NOTABLE):
            self._notable.append(event)
            if isinstance(event, StartedEvent):
                self._config = event.config
            elif isinstance(event, CheckpointEvent) and event.path:
                self._checkpoint_times[Path(event.path).name] = event.t

    def read(self) -> JobDetail:
        """The detail as the files are now (see `job_detail`)."""
        while True:  # a bounded read at a time, taken before the next: a long history is not held whole
            for event in self._tail.read_new():
                self._take(event)
            if not self._tail.more:
                break
        stderr = log_tail(self._files.stderr_log, STDERR_LINES)
        return JobDetail(
            job_id=self.job_id,
            job_dir=str(self.job_dir),
            config=self._config,
            events=tuple(self._notable),
            stderr_tail=tuple(stderr.splitlines()),
            curve=self._curve.points(),
            sps=self._sps.points(),
            checkpoints=_checkpoints_on_disk(self.job_dir, self._checkpoint_times),
        )


class JobDetailReaders:
    """One reader per job, kept for as long as the source that owns this lives."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._readers: dict[str, JobDetailReader] = {}

    def __call__(self, job_id: str) -> JobDetail:
        """The job's detail now (SourceError for an unknown job)."""
        reader = self._readers.get(job_id)
        if reader is None:
            reader = self._readers[job_id] = JobDetailReader(self.run_dir, job_id)
        return reader.read()


def job_detail(run_dir: Path, job_id: str) -> JobDetail:
    """The detail of job `job_id` of the run in `run_dir`, from `run_dir/jobs/<job_id>/` only.

    `config` is the newest `started` event's config ({} before the first); `events` the newest
    `MAX_EVENTS` notable events (started, checkpoint, finished, error), oldest first;
    `stderr_tail` the last `STDERR_LINES` non-empty lines of stderr.log; `curve` and `sps` are
    thinned to at most `MAX_POINTS` points (first and last kept), and skip progress events whose
    value is null; `checkpoints` are the directories that exist now (pruned ones are gone), with
    `t` from their checkpoint event when it was read. Raises SourceError naming the job and the
    directory when there is no such job directory.
    """
    return JobDetailReader(run_dir, job_id).read()
