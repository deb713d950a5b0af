"""`PooledLauncher`: served workers (`python -m cockpit_training.worker --serve`), each of which
runs job after job, so that a fleet of short jobs pays the worker's start-up (importing torch,
SB3 and envpool: seconds) once per process rather than once per job. A process a few jobs from
retiring gets a spare started beside it, so its successor has imported by the time it is needed.
A served process is bound to the GPU it was started for (CUDA is set up once per process), so
the pool hands a job only to a process of the job's GPU. Its owner calls `close()`.

The pool watches its idle processes (`_watch_idle`, from `launch` and `poll`, at most every
`WATCH_INTERVAL_S`): one stopped by a signal (state T), or a spare that has not finished importing
within `ready_timeout_s`, would take the next job and hold it until the stall watch's minute ran
out; it is killed instead, and a fresh spare for the same GPU takes its place. A served worker
kills itself at the cockpit's death while idle, even stopped (`cockpit_training.stopping`).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from cockpit.contract.rundir import JobDir
from cockpit.contract.workerargs import (
    READY_LINE,
    SERVE_MAX_JOBS,
    ServeArgs,
    WorkerArgs,
    encode_request,
    mps_environment,
    parse_status,
)
from cockpit.core.launch.local import WORKER_NICE, LocalJobFiles, pin_threads, worker_env
from cockpit.core.launch.protocol import LaunchRequest, WorkerHandle, gpu_env
from cockpit.core.machine.placement import GpuRef

# A retiring process's spare starts this many jobs before the end (its last job included): a
# fleet's short jobs took 5-10 s, and a spare started with the last one, importing at nice 10
# beside two training jobs on 2 cores, had not finished importing when it was needed (1.8-2.8 s).
SPARE_LEAD_JOBS = 3
# A spare whose imports take longer than this is taken for hung and replaced. They took 2-10 s on 2
# busy cores; this leaves room for a machine far slower, or far busier, than that.
SPARE_READY_S = 180.0
WATCH_INTERVAL_S = 1.0  # how often the idle processes' states are read (/proc)


@dataclass(eq=False)
class _PooledJob:
    """`WorkerHandle.process` for a job a `PooledLauncher` handed to a served worker."""

    served: _Served
    code: int | None = None  # once known: the job's exit code (or the process's, if it died)


@dataclass(eq=False)
class _Served:
    """One served worker process, as its launcher tracks it."""

    proc: subprocess.Popen[bytes]
    status_fd: int  # the read end of its status pipe (non-blocking); -1 once closed
    gpu: GpuRef | None = None  # the GPU it was started for (index and UUID): it serves jobs placed there only
    cpus: tuple[int, ...] | None = None  # the CPUs it was last pinned to (None: as started)
    jobs: int = 0  # handed to it so far
    job: _PooledJob | None = None  # the job it runs now
    retiring: bool = False  # it exits after its job: never back in the idle pool
    unread: bytes = b""  # a status line's start, read before its end
    mps: tuple[str | None, str | None] = (None, None)  # the MPS pipe and log dirs it was started with
    started_at: float = 0.0  # time.monotonic() at its start
    ready: bool = False  # it said its imports are done (READY_LINE)


class PooledLauncher(LocalJobFiles):
    """Workers as served processes (`python -m cockpit_training.worker --serve`), each running one job
    after another: `launch` hands the job to an idle one started for the job's GPU, or starts one
    if none is idle.

    Each process is started as `LocalLauncher` starts a worker (its own session, `nice` steps
    nicer, the same environment, so it follows our pid's death), with its stdout and stderr in the
    first job's logs; it appends each job's output to that job's logs. The job is written to its
    stdin as one line; it reports the job's exit code on a status pipe and waits for the next. A
    process retires after `max_jobs` jobs (its memory), or after a job whose failure may have left
    it broken (CUDA).

    `WorkerHandle.pid` is the process's pid. Once a job has ended (its code returned by `poll`),
    `terminate` and `kill` of its handle do nothing: the process may be running another job.
    The owner calls `close()` when it is done launching (or uses the launcher as a context
    manager): idle processes end then, busy ones once their jobs end. Processes are started by
    the thread that calls `launch`, whose exit the kernel treats as our death (PR_SET_PDEATHSIG).
    """

    def __init__(
        self,
        python: str = sys.executable,
        cwd: Path | None = None,
        nice: int = WORKER_NICE,
        max_jobs: int = SERVE_MAX_JOBS,
        ready_timeout_s: float = SPARE_READY_S,
    ) -> None:
        self.python = python
        self.cwd = cwd
        self.nice = nice
        self.max_jobs = max_jobs
        self.ready_timeout_s = ready_timeout_s
        self.replaced = 0  # idle processes killed as stopped or hung, and replaced
        self._watched_at = -math.inf
        self._processes: list[_Served] = []  # every process started and not yet reaped
        self._idle: list[_Served] = []  # those waiting for a job, the most recently idle last

    def __enter__(self) -> PooledLauncher:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def launch(self, request: LaunchRequest) -> WorkerHandle:
        """Hand the job to an idle served worker, or to a new one; OSError if none can take it. A
        process handed its `SPARE_LEAD_JOBS`-th last job (of `max_jobs`) gets a spare started
        beside it, which imports while those jobs run, waits behind the warm processes, and
        serves the job after its last."""
        if not isinstance(request.args, WorkerArgs):
            raise OSError("a served worker runs cockpit's own worker only, not a user's command")
        line = encode_request(request.args, sent_at=time.time())  # before a process starts for it
        request.job_dir.mkdir(parents=True, exist_ok=True)
        self._watch_idle(force=True)
        self._reap()
        served = None
        while served is None:
            # The most recently idle process of the job's GPU: the others keep waiting for theirs.
            candidate = next((p for p in reversed(self._idle) if p.gpu == request.gpu), None)
            if candidate is None:
                break
            self._idle.remove(candidate)
            if candidate.proc.poll() is None and self._hand(candidate, request, line):
                served = candidate
            else:
                self._end(candidate)
        if served is None:
            served = self._start(JobDir(request.job_dir), request.gpu, request.mps_pipe_dir, request.mps_log_dir)
            if not self._hand(served, request, line):
                self._end(served)
                raise OSError(f"the served worker {served.proc.pid} exited before it took the job")
        job = _PooledJob(served)
        served.job, served.jobs = job, served.jobs + 1
        if served.jobs == max(1, self.max_jobs - SPARE_LEAD_JOBS + 1):
            with contextlib.suppress(OSError):  # no spare costs the next job a start-up, nothing more
                spare = self._start(None, request.gpu, request.mps_pipe_dir, request.mps_log_dir)
                self._idle.insert(0, spare)  # after any process already warm
        return WorkerHandle(request.job_id, served.proc.pid, request.job_dir, job)

    def _start(
        self, logs: JobDir | None, gpu: GpuRef | None, mps_pipe_dir: str | None = None, mps_log_dir: str | None = None
    ) -> _Served:
        """A new served process for GPU `gpu` with its output in `logs`' stdout and stderr logs (a first job's),
        or discarded (a spare's: its jobs' output goes to their own logs; one that fails to
        start is found dead when handed a job, and a fresh process takes the job instead).
        Under MPS it is a client of the daemon at `mps_pipe_dir` (its logs in `mps_log_dir`), with
        no memory cap: one process runs many jobs, and a cap fixed at its start would be one job's."""
        read, write = os.pipe()
        try:
            with contextlib.ExitStack() as files:
                out, err = (
                    (files.enter_context(logs.stdout_log.open("ab")), files.enter_context(logs.stderr_log.open("ab")))
                    if logs is not None
                    else (subprocess.DEVNULL, subprocess.DEVNULL)
                )
                proc = subprocess.Popen(
                    ServeArgs(status_fd=write, max_jobs=self.max_jobs).command(self.python),
                    stdin=subprocess.PIPE,
                    stdout=out,
                    stderr=err,
                    cwd=self.cwd,
                    env={
                        **worker_env(),
                        **gpu_env(gpu),
                        **(mps_environment(mps_pipe_dir, None, mps_log_dir) if gpu is not None else {}),
                    },
                    start_new_session=True,
                    pass_fds=(write,),
                )
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
        os.set_blocking(read, False)
        if self.nice:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.setpriority(os.PRIO_PROCESS, proc.pid, os.getpriority(os.PRIO_PROCESS, 0) + self.nice)
        served = _Served(proc, read, gpu=gpu, mps=(mps_pipe_dir, mps_log_dir), started_at=time.monotonic())
        self._processes.append(served)
        return served

    def _hand(self, served: _Served, request: LaunchRequest, line: bytes) -> bool:
        """Pin `served` for the job, then send it the job; False when it is gone."""
        if request.cpus != served.cpus:
            pin_threads(served.proc.pid, request.cpus or tuple(sorted(os.sched_getaffinity(0))))
            served.cpus = request.cpus
        assert served.proc.stdin is not None
        try:
            served.proc.stdin.write(line)
            served.proc.stdin.flush()
        except OSError:  # BrokenPipeError: it exited
            return False
        return True

    def poll(self, handle: WorkerHandle) -> int | None:
        """The job's exit code once its status line has come, or the process's exit code (negative:
        killed by that signal) if it died running the job; else None. Never blocks."""
        self._watch_idle()
        job = _job(handle)
        if job.code is not None:
            return job.code
        served = job.served
        exited = served.proc.poll()  # before reading: a status written before it exited is read
        self._read_status(served)
        if job.code is None and exited is not None:
            job.code = exited
            served.job = None
            self._end(served)
        return job.code

    def _read_status(self, served: _Served) -> None:
        """Read what `served` reported; a finished job gets its code, and the process goes back to
        the idle pool (or ends, when it retires)."""
        while served.status_fd >= 0:
            try:
                data = os.read(served.status_fd, 4096)
            except BlockingIOError:
                break
            if not data:  # it closed the pipe: it has exited or is exiting
                break
            served.unread += data
        while b"\n" in served.unread:
            line, _, served.unread = served.unread.partition(b"\n")
            if line + b"\n" == READY_LINE:
                served.ready = True
                continue
            try:
                code, retiring = parse_status(line)
            except ValueError:
                continue
            if served.job is None:
                continue
            served.job.code, served.job = code, None
            served.retiring = served.retiring or retiring or served.jobs >= self.max_jobs
            if served.retiring or served.proc.poll() is not None:
                self._end(served)
            else:
                self._idle.append(served)

    def _watch_idle(self, *, force: bool = False) -> None:
        """Replace each idle process stopped by a signal, or not done importing within
        `ready_timeout_s`, by a fresh spare for its GPU; forget those that exited. At most every
        `WATCH_INTERVAL_S` unless `force`d."""
        now = time.monotonic()
        if not force and now - self._watched_at < WATCH_INTERVAL_S:
            return
        self._watched_at = now
        for served in list(self._idle):
            self._read_status(served)  # its ready line
            if served.proc.poll() is not None:
                self._end(served)
                continue
            hung = not served.ready and now - served.started_at >= self.ready_timeout_s
            if not (hung or _stopped(served.proc.pid)):
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(served.proc.pid, signal.SIGKILL)
            position = self._idle.index(served)
            self._end(served)
            self.replaced += 1
            with contextlib.suppress(OSError):  # none: the next job starts a process of its own
                self._idle.insert(position, self._start(None, served.gpu, *served.mps))

    def terminate(self, handle: WorkerHandle) -> None:
        """SIGTERM to the process while it runs this job: the job checkpoints and stops, and the
        process stays for the next job."""
        if self.poll(handle) is None:
            _send(lambda: os.kill(handle.pid, signal.SIGTERM))

    def kill(self, handle: WorkerHandle) -> None:
        """SIGKILL to the process group of the process running this job; it leaves the pool."""
        if self.poll(handle) is None:
            _job(handle).served.retiring = True
            _send(lambda: os.killpg(handle.pid, signal.SIGKILL))

    def stopped(self, handle: WorkerHandle) -> bool:
        """The process is in state T while it runs this job (see `LocalLauncher.stopped`)."""
        return _job(handle).code is None and _stopped(handle.pid)

    def close(self, timeout_s: float = 5.0) -> None:
        """End the idle processes (EOF on their stdin; SIGKILL to those not gone within
        `timeout_s`), and have the busy ones end after their jobs. The launcher stays usable: a
        later launch starts a new process."""
        for served in self._processes:
            self._end(served)
        deadline = time.monotonic() + timeout_s
        for served in self._processes:
            if served.job is not None:
                continue
            try:
                served.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(served.proc.pid, signal.SIGKILL)
                served.proc.wait()
        self._reap()

    def _end(self, served: _Served) -> None:
        """`served` leaves the pool: EOF on its stdin ends it once it is idle."""
        served.retiring = True
        if served in self._idle:
            self._idle.remove(served)
        if served.proc.stdin is not None:
            with contextlib.suppress(OSError):
                served.proc.stdin.close()

    def _reap(self) -> None:
        """Forget the ended processes that have exited (reaping them), and close their pipes."""
        for served in list(self._processes):
            if served.job is None and served.proc.poll() is not None:
                self._end(served)
                self._processes.remove(served)
                if served.status_fd >= 0:
                    os.close(served.status_fd)
                    served.status_fd = -1


def _stopped(pid: int) -> bool:
    """Process `pid` is in state T (see `LocalLauncher.stopped`)."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_STOPPED)
    except psutil.Error:
        return False


def _send(send: Callable[[], None]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        send()


def _job(handle: WorkerHandle) -> _PooledJob:
    assert isinstance(handle.process, _PooledJob), "not a PooledLauncher's handle"
    return handle.process
