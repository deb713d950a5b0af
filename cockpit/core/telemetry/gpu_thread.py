"""The sampler's NVML reads: each round on a thread of its own, waited for up to a deadline.

A driver call that hangs holds up only its own round: the tick that asked goes on without GPU
figures (`GpuThread.read` returns none), the figures are stale until the round answers
(`GpuThread.stale_since`), and no new round is asked meanwhile. A GPU is dropped (`GpuThread.lose`,
with a `status` that says so) only when NVML says it is gone (`gpu_lost`: off the bus, or needing a
reset) or after `GPU_FAILS_TO_DROP` failed reads in a row; one failed read only costs that GPU its
figures at that tick. `cockpit.core.telemetry.sampler.Sampler` composes one and owns everything
else (the CPU figures, the beat, the status lines).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from cockpit.core.machine.clock import Clock
from cockpit.core.machine.gpu_types import GpuInfo, GpuSample
from cockpit.core.machine.nvml import GpuReader, close_gpus, gpu_lost

# How long a tick waits for NVML before it goes on without GPU figures (a hung driver call).
GPU_DEADLINE_S = 1.0
# Failed reads of one GPU in a row before it is dropped: one second at 5 Hz, so a transient error
# (a timeout, a busy driver) costs a few ticks' figures, not the GPU for the rest of the run.
GPU_FAILS_TO_DROP = 5

# NVML's compute processes by pid: (GPU memory in bytes, SM %), each None when NVML does not say.
Processes = dict[int, tuple[int | None, float | None]]


@dataclass
class _GpuRead:
    """One round of NVML reads, run on a thread of its own so that a driver call that hangs holds
    up only this round: each reader's sample or the exception its read raised, and (with
    `processes`) its compute processes. `done` is set when every reader has answered; `cost_s` is
    the CPU time the round took."""

    readers: list[GpuReader]
    processes: bool
    started: float  # the sampler clock's monotonic time
    done: threading.Event = field(default_factory=threading.Event)
    results: list[tuple[GpuReader, GpuSample | Exception, Processes | None]] = field(default_factory=list)
    cost_s: float = 0.0

    def run(self) -> None:
        started = time.thread_time()
        try:
            for reader in self.readers:
                try:
                    sample = reader.read()[0]
                except Exception as exc:  # judged by `GpuThread.read`: a lost GPU or one failed read
                    self.results.append((reader, exc, None))
                    continue
                processes = None
                if self.processes:
                    try:
                        processes = reader.processes()
                    except Exception:  # its processes unknown this reading, its counters still good
                        processes = None
                self.results.append((reader, sample, processes))
        finally:
            self.cost_s = time.thread_time() - started
            self.done.set()


class GpuThread:
    """Reads the GPUs `readers` read (kept in index order) on the `clock`, each round waited for up
    to `deadline_s` (module docstring). `status` is why there is no GPU telemetry or which GPU was
    lost ("" when neither); `notes` what the readers found wrong (`GpuReader.take_notes`), each once."""

    def __init__(
        self, readers: Sequence[GpuReader], *, clock: Clock, deadline_s: float = GPU_DEADLINE_S, status: str = ""
    ) -> None:
        self.readers: list[GpuReader] = sorted(readers, key=lambda r: r.info.index)
        # Every GPU read at the start, kept when one is lost: a job placed on it must move.
        self.infos: tuple[GpuInfo, ...] = tuple(reader.info for reader in self.readers)
        self.clock = clock
        self.deadline_s = deadline_s
        self.status = status
        self.notes: list[str] = []
        self._pending: _GpuRead | None = None  # the latest round of NVML reads, until it answered
        self.stale_since: float | None = None  # when the round NVML has not answered yet began (monotonic)
        self._fails: dict[int, int] = {}  # failed reads in a row, by GPU index

    def read(self, processes: bool) -> tuple[list[GpuSample], Processes | None, float]:
        """Every GPU's counters now, with (`processes`) the compute processes on them by pid, and
        the CPU time the reads took; processes None when they were not read or NVML did not answer.

        A round that does not answer within `deadline_s` makes the GPU figures stale (none at this
        tick, and none until it answers) rather than holding up the caller. A GPU whose read fails
        is skipped at this tick, and dropped (`lose`) when NVML says it is gone or after
        `GPU_FAILS_TO_DROP` failures in a row."""
        pending = self._pending
        if pending is not None and not pending.done.is_set():
            return [], None, 0.0  # NVML still has not answered the last round: ask nothing more
        if not self.readers:
            self._pending = self.stale_since = None
            return [], ({} if processes else None), 0.0
        read = self._pending = _GpuRead(list(self.readers), processes, self.clock.monotonic())
        threading.Thread(target=read.run, name="cockpit-nvml", daemon=True).start()
        if not read.done.wait(self.deadline_s):
            if self.stale_since is None:
                self.stale_since = read.started
            return [], None, 0.0
        self._pending = self.stale_since = None
        samples: list[GpuSample] = []
        found: Processes | None = {} if processes else None
        for reader, result, reader_processes in read.results:
            index = reader.info.index
            if isinstance(result, Exception):
                self._fails[index] = self._fails.get(index, 0) + 1
                if gpu_lost(result) or self._fails[index] >= GPU_FAILS_TO_DROP:
                    self.lose(result, [reader])
                continue
            self._fails.pop(index, None)
            samples.append(result)
            for note in reader.take_notes():
                if note not in self.notes:
                    self.notes = [*self.notes, note]
            if found is not None:
                for pid, (mem, sm) in (reader_processes or {}).items():
                    # A process on several GPUs holds memory on each: its total is theirs together.
                    known_mem, known_sm = found.get(pid, (None, None))
                    found[pid] = (
                        mem if known_mem is None else known_mem + (mem or 0),
                        sm if known_sm is None else known_sm + (sm or 0.0),
                    )
        return samples, found, read.cost_s

    def lose(self, exc: Exception, readers: Sequence[GpuReader] | None = None) -> None:
        """Carry on without `readers` (default: every GPU) after a read of them failed (a driver
        reset, a GPU that fell off the bus); none left: `status` says there is no GPU telemetry."""
        lost = list(self.readers if readers is None else readers)
        if not lost:
            return
        self.readers = [reader for reader in self.readers if reader not in lost]
        fails = max(self._fails.pop(r.info.index, 0) for r in lost)
        repeated = f" after {fails} failed reads in a row" if fails > 1 else ""
        why = f"lost ({type(exc).__name__}: {exc}){repeated}"
        if self.readers:
            self.status = f"GPU {', '.join(str(r.info.index) for r in lost)} {why}"
        else:
            self.status = f"no GPU telemetry: {why}"
        close_gpus(lost)

    def close(self) -> None:
        """Release NVML, unless a driver call still hangs: shutting it down under that call could
        hang the caller too; the process's exit releases it."""
        pending = self._pending
        if pending is None or pending.done.is_set():
            close_gpus(self.readers)
