"""One sampler thread: GPU counters through NVML and CPU through psutil, on a drift-free 5 Hz beat.

Each tick reads every sampled GPU's device counters (all the GPUs NVML sees, or those `--gpus`
names); GPU utilization comes from NVML's own sample buffer (`nvmlDeviceGetSamples`), so every
sample the driver took between two ticks is kept; a burst shorter than the driver's own sampling
period (measured: `GpuSample.sample_period_s`, about 167 ms on many GPUs and 1 s on some) can
still be missed. The CPU and memory
figures are averages and change slowly, and reading them is most of what the sampler costs, so
they are read once a second (`USAGE_EVERY_S`), and at once when the set of jobs changes: each
core's CPU %, RAM, every job's processes (CPU % and RSS) and their GPU memory and SM %. Every
tick's `Sample` carries the latest of them, with the time they were read (`Sample.usage_t`). A
worker's process tree is walked when the worker first appears, 2 s later, then twice as long after
each walk that finds every tree unchanged, up to every `TREE_SCAN_MAX_S`: a walk reads the whole
process table, and a worker's tree is settled once its envs have started (a served worker that
takes its next job keeps its tree). Every sample is timestamped and records the CPU time the tick
itself cost. With no NVML library or no driver, the GPU part is one clear "no GPU telemetry"
status and the CPU part keeps working.

NVML is read on a thread of its own and waited for up to a deadline (`GpuThread`, in
`cockpit.core.telemetry.gpu_thread`): a driver call that hangs leaves that tick without GPU
figures, and the status says they are stale, while the CPU and memory figures go on; a GPU is
dropped, with a status that says so, only when NVML says it is gone or after a few failed reads in
a row. A failure outside NVML (the CPU reading, `on_sample`) never touches the GPUs: it is counted
and shown in the status.

In a container without `--pid=host`, NVML lists the GPU's processes by their pids on the host, none
of which is a process here: no job's GPU memory or SM % can be read from it. The sampler notices
(`HIDDEN_PID_READINGS` readings in a row) and says so in its status; the supervisor then shows the
workers' own reports of their CUDA memory (`cockpit.contract.events.ProgressEvent`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from cockpit.contract.ray_reports import NodeSample
from cockpit.core.machine.clock import Clock, SystemClock
from cockpit.core.machine.gpu_types import GpuInfo, GpuSample
from cockpit.core.machine.nvml import GpuReader
from cockpit.core.machine.placement import GpuRoom, rooms_of
from cockpit.core.telemetry.gpu_thread import GPU_DEADLINE_S, GpuThread, Processes

SAMPLE_HZ = 5.0
# CPU % per core and per job, RAM, RSS and per-process GPU memory: read this often, not at every tick.
USAGE_EVERY_S = 1.0
# The process trees are walked again this long after a walk that found a new worker or a changed
# tree, then twice as long after each walk that found every tree unchanged, up to TREE_SCAN_MAX_S.
TREE_SCAN_S = 2.0
TREE_SCAN_MAX_S = 30.0
# Usage readings in a row in which NVML lists processes and none of them is one of ours before the
# sampler says the container hides them: one reading could be a worker still creating its context.
HIDDEN_PID_READINGS = 3
# Between two conditions in `Sampler.gpu_status` (a condition's own line may hold "; ").
STATUS_SEP = " | "
HIDDEN_PIDS_NOTE = (
    "NVML lists GPU processes this container cannot see (no --pid=host): per-job GPU memory comes from "
    "the workers' own reports; per-job SM % is not available"
)


@dataclass(frozen=True)
class JobUsage:
    """One job's whole process tree at one tick. `pid` is the tree's root, the job's worker (None
    where it is not known: samples rebuilt from files): a new pid is a new worker, whose memory
    starts afresh (`cockpit.core.telemetry.memwatch`)."""

    cpu_percent: float
    rss_bytes: int
    gpu_mem_bytes: int | None = None
    gpu_sm_percent: float | None = None
    pid: int | None = None


@dataclass(frozen=True)
class Sample:
    """Everything measured at one tick (`t` is Unix time).

    `gpus` (each sampled GPU's counters, in index order) are read at every tick; `gpu` is the
    first of them and `util_samples` its NVML readings since the previous tick (what a view of one
    GPU shows). A sample made with `gpu` alone gets `gpus == (gpu,)`.
    `cpu_percent`, the RAM figures and `jobs` are the latest reading of them, taken at `usage_t`
    (once a second, see `USAGE_EVERY_S`): a tick in between carries that reading unchanged, and
    None means it was taken at `t` (samples rebuilt from files or received over the wire). Each
    CPU % is the mean over the interval between that reading and the one before it. `cost_s` is
    the CPU time the sampler thread spent on this tick (not counting `on_sample`). `nodes` are the
    cluster's nodes as their samplers last read them, when the jobs run on Ray (else empty; the
    figures above are then this machine's, the cockpit's own).
    """

    t: float
    cpu_percent: tuple[float, ...]
    ram_used_bytes: int
    ram_total_bytes: int
    gpu: GpuSample | None
    jobs: Mapping[str, JobUsage]
    cost_s: float
    util_samples: tuple[tuple[float, float], ...] = ()
    usage_t: float | None = None
    gpus: tuple[GpuSample, ...] = ()
    nodes: tuple[NodeSample, ...] = ()

    def __post_init__(self) -> None:
        if not self.gpus and self.gpu is not None:
            object.__setattr__(self, "gpus", (self.gpu,))

    def gpu_util(self) -> dict[int, tuple[tuple[float, float], ...]]:
        """Each sampled GPU's NVML utilization readings since the previous tick, by NVML index (the
        first GPU's are `util_samples`; with no GPU sample, they count as GPU 0's)."""
        util = {(self.gpu.index if self.gpu is not None else 0): self.util_samples}
        util.update((g.index, g.util_samples) for g in self.gpus[1:])
        return util

    def gpu_of(self, index: int) -> GpuSample | None:
        """The counters of GPU `index` at this tick, if it was sampled."""
        return next((g for g in self.gpus if g.index == index), None)

    @property
    def usage_fresh(self) -> bool:
        """True when this tick read the CPU and memory figures itself rather than carrying them over."""
        return self.usage_t is None or self.usage_t == self.t

    @property
    def cpu_total_percent(self) -> float:
        """Mean over cores."""
        return sum(self.cpu_percent) / len(self.cpu_percent) if self.cpu_percent else 0.0


@dataclass
class _Tree:
    """psutil Process objects of one worker and its descendants, kept across readings so
    cpu_percent has a baseline."""

    root: psutil.Process
    members: dict[int, psutil.Process] = field(default_factory=dict)


@dataclass(frozen=True)
class _Usage:
    """The latest CPU and memory reading, which every tick's Sample carries until the next one."""

    t: float
    cpu_percent: tuple[float, ...]
    ram_used_bytes: int
    ram_total_bytes: int
    jobs: Mapping[str, JobUsage]
    nodes: tuple[NodeSample, ...] = ()


def _maps_gpu(pid: int) -> bool | None:
    """Whether process `pid` of this machine has NVIDIA's driver mapped (a GPU process does: its
    CUDA or NVML library and /dev/nvidia*); None when that cannot be read (another user's process,
    no /proc)."""
    try:
        return b"nvidia" in Path(f"/proc/{pid}/maps").read_bytes()
    except OSError:
        return None


# What a launcher whose workers run elsewhere reports (`RayLauncher.usage`): each of its live jobs'
# worker tree by job id, and each node's latest sample.
RemoteUsage = Callable[[], tuple[Mapping[str, JobUsage], tuple[NodeSample, ...]]]


class Sampler:
    """Samples at `hz` in a daemon thread; `latest()` and `history()` are safe from any thread.

    It samples the GPUs `gpus` reads (in index order), or the one GPU `gpu` reads, each round of
    NVML reads waited for up to `gpu_deadline_s`. `on_sample` (if given) is called in the sampler
    thread with each new sample. `remote` (if given) is read with the CPU figures: its jobs join
    the local ones, its nodes are `Sample.nodes`. `gpu_status` is what the views show of the
    sampling (`status_lines`).
    """

    def __init__(
        self,
        *,
        gpu: GpuReader | None = None,
        gpus: Sequence[GpuReader] = (),
        gpu_status: str = "",
        hz: float = SAMPLE_HZ,
        clock: Clock | None = None,
        history: int = 3000,
        on_sample: Callable[[Sample], None] | None = None,
        remote: RemoteUsage | None = None,
        gpu_deadline_s: float = GPU_DEADLINE_S,
    ) -> None:
        self.period = 1.0 / hz
        self.clock = clock or SystemClock()
        readers = [gpu] if gpu is not None else gpus
        self._gpu = GpuThread(readers, clock=self.clock, deadline_s=gpu_deadline_s, status=gpu_status)
        self.on_sample = on_sample
        self.remote = remote
        self._lock = threading.Lock()
        self._history: deque[Sample] = deque(maxlen=history)
        self._pids: dict[str, int] = {}
        self._trees: dict[int, _Tree] = {}  # by the worker's (the tree's root's) pid
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._process_gpu: dict[int, tuple[int | None, float | None]] = {}
        self._usage: _Usage | None = None
        self._usage_pids: dict[str, int] = {}  # the jobs the latest usage reading covered
        self._next_usage = 0.0
        self._next_tree_scan = 0.0
        self._tree_scan_every = TREE_SCAN_S
        self._walked: set[int] = set()  # roots the latest walk covered, in the jobs ever since
        self.peak_gpu_mem: dict[str, int] = {}
        self._hidden_readings = 0
        self.pids_hidden = False  # NVML's pids are not this PID namespace's (`HIDDEN_PIDS_NOTE`)
        self._gpu_processes: dict[tuple[int, float], bool] = {}  # (pid, start time) -> maps the driver
        self._errors: dict[str, tuple[int, str]] = {}  # what failed -> (how often, the latest error)
        psutil.cpu_percent(percpu=True)  # the first call only sets the baseline

    @property
    def gpu_status(self) -> str:
        """The status lines joined by `STATUS_SEP` ("" when all is well): what the views show."""
        return STATUS_SEP.join(self.status_lines())

    @gpu_status.setter
    def gpu_status(self, status: str) -> None:
        self._gpu.status = status

    @property
    def gpus(self) -> list[GpuReader]:
        """The readers of the GPUs sampled now, in index order (one lost is gone from them)."""
        return self._gpu.readers

    @gpus.setter
    def gpus(self, readers: list[GpuReader]) -> None:
        self._gpu.readers = readers

    def status_lines(self) -> list[str]:
        """One line per condition that holds now, most severe first: why there is no GPU telemetry
        or which GPU was lost; GPU figures stale (NVML not answering); NVML's processes hidden from
        this container; what the readers found wrong; failures outside NVML, counted."""
        lines = [self._gpu.status] if self._gpu.status else []
        stale_since = self._gpu.stale_since
        if stale_since is not None:
            waited = self.clock.monotonic() - stale_since
            lines.append(f"GPU figures stale: NVML has not answered for {waited:.0f} s")
        if self.pids_hidden:
            lines.append(HIDDEN_PIDS_NOTE)
        lines.extend(self._gpu.notes)
        for what, (count, latest) in list(self._errors.items()):
            times = "once" if count == 1 else f"{count} times"
            lines.append(f"{what} failed {times}, sampling goes on (latest: {latest})")
        return lines

    def _count_error(self, what: str, exc: Exception) -> None:
        count, _ = self._errors.get(what, (0, ""))
        self._errors[what] = (count + 1, f"{type(exc).__name__}: {exc}")

    @property
    def gpu(self) -> GpuReader | None:
        """The first sampled GPU's reader (the GPU of single-GPU views), or None."""
        return self.gpus[0] if self.gpus else None

    @property
    def gpu_info(self) -> GpuInfo | None:
        """Name, memory and driver of the first sampled GPU, or None."""
        return self.gpus[0].info if self.gpus else None

    @property
    def gpu_infos(self) -> tuple[GpuInfo, ...]:
        """Every GPU this sampler started with, in index order; one lost since stays (the jobs that
        ran on it name it), but it gets no samples and no more jobs (`gpu_rooms`)."""
        return self._gpu.infos

    def gpu_rooms(self) -> list[GpuRoom]:
        """Each device sampled now that a job may be placed on (`placement.rooms_of`: a MIG slice,
        not the GPU it is cut from), with its free memory at the latest tick (before the first:
        all of it), for placing jobs (`cockpit.core.machine.placement`)."""
        latest = self.latest()
        used: dict[int, int | None] = {}
        for info in (reader.info for reader in self.gpus):
            sample = latest.gpu_of(info.index) if latest is not None else None
            used[info.index] = sample.mem_used_bytes if sample is not None else 0
        return rooms_of([reader.info for reader in self.gpus], used)

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
        self._gpu.close()

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
            except Exception as exc:  # a tick that failed outside NVML: the GPUs are not to blame
                self._count_error("a sampler tick", exc)
            next_tick += self.period
            delay = next_tick - self.clock.monotonic()
            if delay < 0:  # fell behind (suspend, overload): skip the missed beats
                next_tick = self.clock.monotonic()
                continue
            self._stop.wait(delay)

    def tick(self) -> Sample:
        """Take one sample now (the thread calls this; tests may call it directly).

        NVML is read every time (`GpuThread.read`); the CPU and memory figures when a reading is due
        (`USAGE_EVERY_S` after the previous one, within half a tick), when the set of jobs changed,
        and at the first tick; otherwise the sample carries the latest reading. A CPU reading that
        fails is counted in the status and the latest one carried on (raised only when there is
        none yet); so is an `on_sample` that raises."""
        started = time.thread_time()
        t = self.clock.time()
        with self._lock:
            pids = dict(self._pids)
        now = self.clock.monotonic()
        usage = self._usage
        # Half a tick of slack: a beat that lands a hair early must not push the read a whole tick late.
        due = usage is None or pids != self._usage_pids or now >= self._next_usage - self.period / 2
        gpus, processes, gpu_cost = self._gpu.read(processes=due)
        if due:
            try:
                usage = self._read_usage(pids, t, now, processes)
            except Exception as exc:  # psutil or a cluster: its figures are lost, not the GPUs'
                self._count_error("reading CPU and memory", exc)
                if self._usage is None:
                    raise
                usage = self._usage
        assert usage is not None
        sample = Sample(
            t=t,
            cpu_percent=usage.cpu_percent,
            ram_used_bytes=usage.ram_used_bytes,
            ram_total_bytes=usage.ram_total_bytes,
            gpu=gpus[0] if gpus else None,
            jobs=usage.jobs,
            cost_s=time.thread_time() - started + gpu_cost,
            util_samples=gpus[0].util_samples if gpus else (),
            usage_t=usage.t,
            gpus=tuple(gpus),
            nodes=usage.nodes,
        )
        with self._lock:
            self._history.append(sample)
        if self.on_sample is not None:
            try:
                self.on_sample(sample)
            except Exception as exc:  # a recorder that fails must not cost the figures or the GPUs
                self._count_error("recording a sample", exc)
        return sample

    def _read_usage(self, pids: Mapping[str, int], t: float, now: float, processes: Processes | None) -> _Usage:
        """Read every core's CPU %, RAM and each job's processes now, with their GPU use from
        `processes` (NVML's compute processes by pid; None when NVML did not answer)."""
        self._process_gpu = processes or {}
        roots = set(pids.values())
        for gone in self._trees.keys() - roots:
            del self._trees[gone]
        self._walked &= roots
        # A new worker is walked at once; a served worker that takes its next job keeps its tree.
        # Otherwise a walk falls due at the reading nearest its time, not a whole second after it.
        if roots - self._walked or now >= self._next_tree_scan - USAGE_EVERY_S / 2:
            changed = self._rescan_trees(roots)
            self._tree_scan_every = TREE_SCAN_S if changed else min(TREE_SCAN_MAX_S, 2 * self._tree_scan_every)
            self._walked, self._next_tree_scan = roots, now + self._tree_scan_every
        jobs = {job_id: self._job_usage(pid) for job_id, pid in pids.items()}
        if processes and roots:
            self._judge_pid_namespace(processes)
        nodes: tuple[NodeSample, ...] = ()
        if self.remote is not None:
            try:
                remote_jobs, nodes = self.remote()
                jobs.update(remote_jobs)
            except Exception:  # a cluster that does not answer costs its figures, not the GPUs'
                nodes = self._usage.nodes if self._usage is not None else ()
        vm = psutil.virtual_memory()
        cpu = tuple(psutil.cpu_percent(percpu=True))
        usage = self._usage = _Usage(t, cpu, vm.total - vm.available, vm.total, jobs, nodes)
        self._usage_pids, self._next_usage = dict(pids), now + USAGE_EVERY_S
        with self._lock:
            for job_id, job_usage in jobs.items():
                if job_usage.gpu_mem_bytes is not None:
                    self.peak_gpu_mem[job_id] = max(self.peak_gpu_mem.get(job_id, 0), job_usage.gpu_mem_bytes)
        return usage

    def _judge_pid_namespace(self, processes: Processes) -> None:
        """Count the readings in which NVML lists processes and none of them is one of ours: in no
        job's tree, and not a GPU process of this PID namespace (no such pid here, or one that does
        not map NVIDIA's driver). After `HIDDEN_PID_READINGS` in a row, `pids_hidden`; a reading in
        which a listed pid is in a job's tree clears it. A listed pid that exists here and may be a
        GPU process (another user's, on a machine NVML and we share the pids of) is not evidence
        either way."""
        ours = {pid for tree in self._trees.values() for pid in tree.members}
        if ours & processes.keys():
            self._hidden_readings, self.pids_hidden = 0, False
            return
        if all(self._foreign(pid) for pid in processes):
            self._hidden_readings += 1
            self.pids_hidden = self.pids_hidden or self._hidden_readings >= HIDDEN_PID_READINGS
        else:
            self._hidden_readings = 0

    def _foreign(self, pid: int) -> bool:
        """True when `pid`, as NVML lists it, cannot be a process of this PID namespace."""
        try:
            started = psutil.Process(pid).create_time()
        except psutil.NoSuchProcess:
            return True
        except psutil.Error:
            return False  # there, but not ours to look at: it may be the GPU process NVML means
        known = self._gpu_processes.get((pid, started))
        if known is None:
            maps = _maps_gpu(pid)
            known = self._gpu_processes[(pid, started)] = maps is None or maps
        return not known

    def _rescan_trees(self, roots: set[int]) -> bool:
        """Find each worker's descendants with one pass over the process table; True when a tree
        is new or gained or lost a member.

        Walking /proc is the expensive part of sampling, and a worker's process tree rarely
        changes (envpool uses threads; gymnasium's env processes start with the worker), so it is
        done on the back-off schedule of `TREE_SCAN_S` .. `TREE_SCAN_MAX_S`, and never without jobs.
        """
        if not roots:
            return False
        children: dict[int, list[int]] = {}
        for proc in psutil.process_iter(["ppid"]):
            children.setdefault(proc.info["ppid"] or 0, []).append(proc.pid)
        changed = False
        for root_pid in roots:
            tree = self._trees.get(root_pid)
            if tree is None or not tree.root.is_running():  # new, or its pid now names another process
                changed = True
                try:
                    tree = self._trees[root_pid] = _Tree(psutil.Process(root_pid))
                except psutil.Error:
                    self._trees.pop(root_pid, None)
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
            changed = changed or members.keys() != tree.members.keys()
            tree.members = members
        return changed

    def _job_usage(self, pid: int) -> JobUsage:
        """The CPU %, RSS and GPU use of the worker `pid` and its descendants, as last walked."""
        tree = self._trees.get(pid)
        if tree is None:
            return JobUsage(0.0, 0, pid=pid)
        cpu, rss, gpu_mem, sm = 0.0, 0, None, None
        for member_pid, proc in list(tree.members.items()):
            try:
                with proc.oneshot():
                    # The first reading of a new process has no baseline and is 0.0, by design.
                    cpu += proc.cpu_percent(None)
                    rss += proc.memory_info().rss
            except psutil.Error:
                del tree.members[member_pid]
                # The tree changed (an env process died, maybe to be replaced): look again soon.
                self._tree_scan_every = TREE_SCAN_S
                self._next_tree_scan = min(self._next_tree_scan, self.clock.monotonic() + TREE_SCAN_S)
                continue
            mem, util = self._process_gpu.get(member_pid, (None, None))
            if mem is not None:
                gpu_mem = (gpu_mem or 0) + mem
            if util is not None:
                sm = (sm or 0.0) + util
        return JobUsage(cpu, rss, gpu_mem, sm, pid)
