"""What runs on a Ray node for the cockpit: `JobKeeper`, one per job attempt, which starts the job's
worker and reports on it, and `NodeSampler`, one per node, which reads the node's CPU, memory and
GPU. `ray_launcher.RayLauncher` makes them Ray actors; they are plain classes here, so that this
module imports neither ray nor anything the cockpit's side does not already load.

The keeper starts the worker (`WorkerArgs`, or a user's command under the guard: `ScriptArgs`)
exactly as `LocalLauncher` does, in its own session, niced, with stdout and stderr in its job dir,
and with the keeper's own pid as `COCKPIT_PARENT_PID`: the worker asks the kernel for SIGTERM when
the keeper's process dies (ray.kill, its node's raylet gone), so it checkpoints and exits rather
than training on for nobody. Ray runs a synchronous actor's calls on its process's main thread,
which lives as long as the actor: the parent-death signal follows the thread that started the
worker, so it fires when the actor dies and not before.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from cockpit.contract.envids import WORKDIR_ENV
from cockpit.contract.ray_reports import MAX_EVENT_BYTES, JobReport, NodeSample, Placement
from cockpit.contract.rundir import JobDir
from cockpit.contract.scriptargs import ScriptArgs
from cockpit.contract.workerargs import WorkerArgs
from cockpit.core.launch.local import log_tail, worker_env
from cockpit.core.machine.nvml import GpuReader, open_gpu

USAGE_EVERY_S = 1.0  # the worker tree's CPU and memory, as the local sampler reads them


class JobKeeper:
    """Starts one job's worker on this node, and reports, signals and ends it (see the module
    docstring). Each method returns at once."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._events: Path | None = None
        self._stderr: Path | None = None
        self._tree: dict[int, psutil.Process] = {}
        self._usage: tuple[float | None, int | None] = (None, None)
        self._usage_at = 0.0

    def start(self, args: WorkerArgs | ScriptArgs, workdir: str, nice: int) -> Placement:
        """Start the worker: `workdir` is the cockpit's working directory (a script's own files, a
        `module:EnvId` env's module), used as the worker's when it exists on this node."""
        import ray

        files = JobDir(args.job_dir)
        files.path.mkdir(parents=True, exist_ok=True)
        self._events, self._stderr = files.events, files.stderr_log
        env = {**worker_env(), WORKDIR_ENV: workdir, **args.environment()}
        with files.stdout_log.open("ab") as out, files.stderr_log.open("ab") as err:
            self._proc = subprocess.Popen(
                args.command(sys.executable),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=workdir if os.path.isdir(workdir) else files.path,
                env=env,
                start_new_session=True,
            )
        if nice:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.setpriority(os.PRIO_PROCESS, self._proc.pid, os.getpriority(os.PRIO_PROCESS, 0) + nice)
        context = ray.get_runtime_context()
        return Placement(self._proc.pid, context.get_node_id(), ray.util.get_node_ip_address())

    def report(self, offset: int) -> JobReport:
        """The events from byte `offset` on, and the worker's state (`JobReport`). The exit code is
        read before the events and given only with the last of them, so a report with a code
        carries everything the worker wrote."""
        proc = self._proc
        assert proc is not None and self._events is not None, "start() first"
        code = proc.poll()
        data = b""
        with contextlib.suppress(FileNotFoundError), self._events.open("rb") as fh:
            fh.seek(offset)
            data = fh.read(MAX_EVENT_BYTES)
        if code is not None and len(data) < MAX_EVENT_BYTES:  # else more to fetch: the code comes with the rest
            self._end_group(proc.pid)  # what the worker left in its session has no one to answer to
            return JobReport(data, code, False, None, None, log_tail(self._stderr, 5) if self._stderr else "")
        try:
            stopped = psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED
        except psutil.Error:
            stopped = False
        cpu, rss = self._read_usage(proc.pid)
        return JobReport(data, None, stopped, cpu, rss)

    def _read_usage(self, pid: int) -> tuple[float | None, int | None]:
        """The worker tree's CPU % and RSS, read at most every `USAGE_EVERY_S`."""
        now = time.monotonic()
        if now - self._usage_at < USAGE_EVERY_S:
            return self._usage
        self._usage_at = now
        try:
            root = self._tree.get(pid) or psutil.Process(pid)
            members = [root, *root.children(recursive=True)]
        except psutil.Error:
            return self._usage
        tree, cpu, rss = {}, 0.0, 0
        for proc in members:
            proc = self._tree.get(proc.pid, proc)  # keeps its CPU-time baseline
            try:
                cpu += proc.cpu_percent(None)
                rss += proc.memory_info().rss
            except psutil.Error:
                continue
            tree[proc.pid] = proc
        self._tree = tree
        self._usage = (cpu, rss)
        return self._usage

    def terminate(self) -> None:
        """SIGTERM to the worker only: it checkpoints and stops (its env processes must outlive that)."""
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self._proc.pid, signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL to the worker's process group, and reap the worker: the actor's own end (ray.kill)
        would reach only its direct child, which leaves the worker's children running."""
        if self._proc is not None:
            self._end_group(self._proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=5)

    @staticmethod
    def _end_group(pgid: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


class NodeSampler:
    """Reads this node's CPU per core, memory and GPU (the first, through NVML) when asked; `node`
    is the name its samples carry."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._gpu: GpuReader | None = open_gpu()[0]
        psutil.cpu_percent(percpu=True)  # the first call only sets the baseline

    def sample(self) -> NodeSample:
        """The node now; each CPU % is the mean since the previous call."""
        vm = psutil.virtual_memory()
        util = used = total = None
        if self._gpu is not None:
            try:
                gpu, _ = self._gpu.read()
                util, used, total = gpu.util_percent, gpu.mem_used_bytes, gpu.mem_total_bytes
            except Exception:  # a lost GPU costs its figures, not the node's CPU ones
                self._gpu = None
        cpu = tuple(psutil.cpu_percent(percpu=True))
        return NodeSample(self.node, time.time(), cpu, vm.total - vm.available, vm.total, util, used, total)

    def sees(self, path: str) -> bool:
        """True when `path` exists on this node (the shared storage's probe file)."""
        return os.path.exists(path)
