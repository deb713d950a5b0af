"""A full disk waited out (`--disk-wait`): jobs paused for disk space resume by themselves once
there is room for their checkpoints again.

A worker that runs out of disk space exits and its job is paused (`exit_policy`), its newest whole
checkpoint kept. Restarting it at once would fill the same disk again, so the job waits: every
`CHECK_S` seconds `DiskWait` reads the space free on the run directory's filesystem, and when it
is at least what the paused jobs need (`need`: the size of each one's newest checkpoint, as the
next one will be about as big, and `MARGIN` for the events, logs and run.toml written meanwhile)
it hands them back to the queue, to go on from those checkpoints. Until then the run is not over:
it keeps running, its jobs paused, and says `waiting for disk: N MiB free, needs M` (`note`).

`--disk-wait SECONDS` bounds the wait (None, the default: no bound). Past it, the paused jobs stay
paused and the run ends failed, as it did before there was a wait, and `--on-done` runs; 0 is that
at once. A job paused for disk space is told from other paused ones by its `exit_reason`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cockpit.contract.checkpoint_files import newest_checkpoint
from cockpit.contract.files import free_bytes
from cockpit.contract.rundir import JobDir
from cockpit.contract.states import JobState
from cockpit.core.supervise.jobs import Job

PAUSED_FOR_DISK = "paused: disk full"  # the exit_reason of a job paused for disk space
CHECK_S = 5.0  # how often the free space is read while jobs wait for it
MARGIN = (
    4 * 2**20
)  # beyond the checkpoints: the events, logs, TensorBoard scalars and run.toml meanwhile (KiB a second)
MIB = 2**20


def checkpoint_bytes(job_dir: Path) -> int:
    """The size of the newest checkpoint in `job_dir` (its `step-*` directory of the highest step;
    0 when there is none yet): what the job's next checkpoint will need, about."""
    newest = newest_checkpoint(JobDir(job_dir).checkpoints)
    if newest is None:
        return 0
    total = 0
    for path in newest.rglob("*"):
        try:
            total += path.stat().st_size if path.is_file() else 0
        except OSError:  # a file removed as the worker rotates its checkpoints
            continue
    return total


@dataclass
class DiskWait:
    """The wait of the jobs paused for disk space on the filesystem of `run_dir`, bounded by
    `limit_s` (`--disk-wait`; None: no bound, 0: no wait). `free` reads the bytes free (a seam
    for tests: `files.free_bytes` by default). Times are the supervisor's monotonic clock."""

    run_dir: Path
    limit_s: float | None = None
    free: Callable[[Path], int | None] = free_bytes
    since: float | None = None  # when the jobs began to wait (the first pause of this wait)
    free_now: int | None = None  # bytes free at the last check
    needed: int = 0  # bytes the waiting jobs need, at the last check
    _checked_at: float = field(default=float("-inf"), repr=False)

    @staticmethod
    def paused(jobs: Iterable[Job]) -> list[Job]:
        """The jobs paused for disk space."""
        return [j for j in jobs if j.state is JobState.PAUSED and j.exit_reason == PAUSED_FOR_DISK]

    def waiting(self, jobs: Iterable[Job], now: float) -> bool:
        """True while jobs are paused for disk space and the wait is within its bound: the run
        is not over. Past the bound it is False for good, until jobs pause for disk again."""
        if not self.paused(jobs):
            self.since = None
            return False
        if self.since is None:
            self.since = now
        return self.limit_s is None or now - self.since < self.limit_s

    def room(self, jobs: Iterable[Job], now: float) -> list[Job]:
        """The paused jobs to hand back to the queue now: all of them once the disk has room for
        their checkpoints, read at most every `CHECK_S` seconds while they wait; else none."""
        waiting = self.paused(jobs)
        if not waiting or not self.waiting(waiting, now) or now - self._checked_at < CHECK_S:
            return []
        self._checked_at = now
        self.needed = MARGIN + sum(checkpoint_bytes(j.job_dir) for j in waiting)
        self.free_now = self.free(self.run_dir)
        if self.free_now is None or self.free_now < self.needed:
            return []
        self.since = None
        return waiting

    def note(self, jobs: Iterable[Job], now: float) -> str | None:
        """`waiting for disk: N MiB free, needs M` while jobs wait (the free space as last read),
        None otherwise."""
        if not self.waiting(jobs, now):
            return None
        free = "unknown space" if self.free_now is None else f"{self.free_now / MIB:,.0f} MiB"
        return f"waiting for disk: {free} free, needs {max(self.needed, MARGIN) / MIB:,.0f} MiB"
