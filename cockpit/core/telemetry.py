"""One sampler thread: GPU counters through NVML and CPU through psutil, on a drift-free 5 Hz beat.

Each tick reads the GPU's device counters and every job's processes (CPU % and RSS; the process
trees themselves are re-walked every 2 s); GPU
utilization comes from NVML's own sample buffer (`nvmlDeviceGetSamples`) so bursts shorter than
the 200 ms tick are still seen, and per-process GPU memory and SM % are read about once a second.
Every sample is timestamped and records what the tick itself cost. With no NVML library or no
driver, the GPU part is one clear "no GPU telemetry" status and the CPU part keeps working.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import psutil

from cockpit.core.clock import Clock, SystemClock
from cockpit.core.nvml import GpuInfo, GpuReader, GpuSample

SAMPLE_HZ = 5.0
PROCESS_GPU_EVERY_S = 1.0
TREE_SCAN_S = 2.0


@dataclass(frozen=True)
class JobUsage:
    """One job's whole process tree at one tick."""

    cpu_percent: float
    rss_bytes: int
    gpu_mem_bytes: int | None = None
    gpu_sm_percent: float | None = None


@dataclass(frozen=True)
class Sample:
    """Everything measured at one tick (`t` is Unix time)."""

    t: float
    cpu_percent: tuple[float, ...]
    ram_used_bytes: int
    ram_total_bytes: int
    gpu: GpuSample | None
    jobs: Mapping[str, JobUsage]
    cost_s: float
    util_samples: tuple[tuple[float, float], ...] = ()

    @property
    def cpu_total_percent(self) -> float:
        """Mean over cores."""
        return sum(self.cpu_percent) / len(self.cpu_percent) if self.cpu_percent else 0.0


@dataclass
class _Tree:
    """psutil Process objects of one job, kept across ticks so cpu_percent has a baseline."""

    root: psutil.Process
    members: dict[int, psutil.Process] = field(default_factory=dict)


class Sampler:
    """Samples at `hz` in a daemon thread; `latest()` and `history()` are safe from any thread.

    `on_sample` (if given) is called in the sampler thread with each new sample.
    """

    def __init__(
        self,
        *,
        gpu: GpuReader | None = None,
        gpu_status: str = "",
        hz: float = SAMPLE_HZ,
        clock: Clock | None = None,
        history: int = 3000,
        on_sample: Callable[[Sample], None] | None = None,
    ) -> None:
        self.gpu = gpu
        self.gpu_status = gpu_status
        self.period = 1.0 / hz
        self.clock = clock or SystemClock()
        self.on_sample = on_sample
        self._lock = threading.Lock()
        self._history: deque[Sample] = deque(maxlen=history)
        self._pids: dict[str, int] = {}
        self._trees: dict[str, _Tree] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._process_gpu: dict[int, tuple[int | None, float | None]] = {}
        self._next_process_gpu = 0.0
        self._next_tree_scan = 0.0
        self._scanned_pids: dict[str, int] = {}
        self.peak_gpu_mem: dict[str, int] = {}
        psutil.cpu_percent(percpu=True)  # the first call only sets the baseline

    @property
    def gpu_info(self) -> GpuInfo | None:
        """Name, memory and driver of the sampled GPU, or None."""
        return self.gpu.info if self.gpu else None

    def set_jobs(self, pids: Mapping[str, int]) -> None:
        """The worker pid of each live job; the sampler follows each one's process tree."""
        with self._lock:
            self._pids = dict(pids)

    def start(self) -> None:
        """Start the sampler thread."""
        self._thread = threading.Thread(target=self._run, name="cockpit-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and release NVML."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self.gpu is not None:
            self.gpu.close()

    def latest(self) -> Sample | None:
        """The newest sample, if any."""
        with self._lock:
            return self._history[-1] if self._history else None

    def history(self) -> list[Sample]:
        """The kept samples, oldest first (a copy)."""
        with self._lock:
            return list(self._history)

    def _run(self) -> None:
        # Drift-free: the next tick is scheduled from the previous target, not from "now".
        next_tick = self.clock.monotonic()
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as exc:  # one bad read must not silently freeze every figure
                self._lose_gpu(exc)
            next_tick += self.period
            delay = next_tick - self.clock.monotonic()
            if delay < 0:  # fell behind (suspend, overload): skip the missed beats
                next_tick = self.clock.monotonic()
                continue
            self._stop.wait(delay)

    def _lose_gpu(self, exc: Exception) -> None:
        """Carry on CPU-only after a GPU read failed (driver reset, GPU fell off the bus)."""
        if self.gpu is not None:
            self.gpu_status = f"no GPU telemetry: lost ({type(exc).__name__}: {exc})"
            gpu, self.gpu = self.gpu, None
            gpu.close()

    def tick(self) -> Sample:
        """Take one sample now (the thread calls this; tests may call it directly)."""
        started = time.perf_counter()
        t = self.clock.time()
        with self._lock:
            pids = dict(self._pids)
        gpu_sample = None
        util: list[tuple[float, float]] = []
        if self.gpu is not None:
            gpu_sample, util = self.gpu.read()
            if self.clock.monotonic() >= self._next_process_gpu:
                self._process_gpu = self.gpu.processes()
                self._next_process_gpu = self.clock.monotonic() + PROCESS_GPU_EVERY_S
        now = self.clock.monotonic()
        if pids != self._scanned_pids or now >= self._next_tree_scan:
            self._rescan_trees(pids)
            self._scanned_pids, self._next_tree_scan = dict(pids), now + TREE_SCAN_S
        jobs = {job_id: self._job_usage(job_id, pid) for job_id, pid in pids.items()}
        for job_id in set(self._trees) - set(pids):
            del self._trees[job_id]
        vm = psutil.virtual_memory()
        sample = Sample(
            t=t,
            cpu_percent=tuple(psutil.cpu_percent(percpu=True)),
            ram_used_bytes=vm.total - vm.available,
            ram_total_bytes=vm.total,
            gpu=gpu_sample,
            jobs=jobs,
            cost_s=time.perf_counter() - started,
            util_samples=tuple(util),
        )
        with self._lock:
            self._history.append(sample)
            for job_id, usage in jobs.items():
                if usage.gpu_mem_bytes is not None:
                    self.peak_gpu_mem[job_id] = max(self.peak_gpu_mem.get(job_id, 0), usage.gpu_mem_bytes)
        if self.on_sample is not None:
            self.on_sample(sample)
        return sample

    def _rescan_trees(self, pids: Mapping[str, int]) -> None:
        """Find every job's descendants with one pass over the process table.

        Walking /proc is the expensive part of a tick, and a worker's process tree rarely
        changes (envpool uses threads), so it is done every `TREE_SCAN_S`, not at 5 Hz.
        """
        children: dict[int, list[int]] = {}
        for proc in psutil.process_iter(["ppid"]):
            children.setdefault(proc.info["ppid"] or 0, []).append(proc.pid)
        for job_id, root_pid in pids.items():
            tree = self._trees.get(job_id)
            if tree is None or tree.root.pid != root_pid:
                try:
                    tree = self._trees[job_id] = _Tree(psutil.Process(root_pid))
                except psutil.Error:
                    self._trees.pop(job_id, None)
                    continue
            found, stack = [root_pid], [root_pid]
            while stack:
                for child in children.get(stack.pop(), []):
                    found.append(child)
                    stack.append(child)
            members = {}
            for member_pid in found:
                known = tree.members.get(member_pid)
                if known is None:
                    try:
                        known = tree.root if member_pid == root_pid else psutil.Process(member_pid)
                    except psutil.Error:
                        continue
                members[member_pid] = known
            tree.members = members

    def _job_usage(self, job_id: str, pid: int) -> JobUsage:
        tree = self._trees.get(job_id)
        if tree is None or tree.root.pid != pid:
            return JobUsage(0.0, 0)
        cpu, rss, gpu_mem, sm = 0.0, 0, None, None
        for member_pid, proc in list(tree.members.items()):
            try:
                with proc.oneshot():
                    # The first reading of a new process has no baseline and is 0.0, by design.
                    cpu += proc.cpu_percent(None)
                    rss += proc.memory_info().rss
            except psutil.Error:
                del tree.members[member_pid]
                continue
            mem, util = self._process_gpu.get(member_pid, (None, None))
            if mem is not None:
                gpu_mem = (gpu_mem or 0) + mem
            if util is not None:
                sm = (sm or 0.0) + util
        return JobUsage(cpu, rss, gpu_mem, sm)
