"""Local launches: a job's worker started, signalled and reaped on this machine, its events tailed
from the job dir's `events.jsonl` (the `Launcher` protocol is `cockpit.core.launch.protocol`).

`LocalLauncher` runs each worker as a subprocess in its own session (so a terminal's Ctrl-C
reaches only the cockpit, which stops workers cleanly), with stdout and stderr in the job dir, the
thread budget in its environment, optional CPU pinning, and the cockpit's pid in
`COCKPIT_PARENT_PID`, which makes the worker ask the kernel for a signal (PR_SET_PDEATHSIG) if the
cockpit dies, even by SIGKILL: SIGKILL while it has nothing to save, else one that has it
checkpoint and exit, stopped or not (`cockpit_training.stopping`).

`PooledLauncher` (`cockpit.core.launch.pooled`) does the same with served workers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil

from cockpit.contract.envids import WORKDIR_ENV
from cockpit.contract.events import EventReader
from cockpit.contract.files import user_umask
from cockpit.contract.rundir import JOB_LOCK, JOBS, JobDir
from cockpit.contract.scriptargs import ScriptArgs
from cockpit.contract.workerargs import (
    PARENT_PID_ENV,
    SERVE_FLAG,
    THREAD_ENV_VARS,
    WORKER_MODULE,
)
from cockpit.core.launch.protocol import EventSource, LaunchRequest, WorkerHandle, device_env


class LocalJobFiles:
    """What a launcher whose workers write on this machine reads from their job dirs: the events
    file, tailed (an `EventReader`, as cheap as reading it directly), and the stderr log."""

    def events(self, job_id: str, job_dir: Path) -> EventSource:
        """An `EventReader` on the job dir's `events.jsonl`."""
        return EventReader(JobDir(job_dir).events)

    def stderr_tail(self, handle: WorkerHandle, lines: int = 5) -> str:
        """The last `lines` non-empty lines of the job's stderr log."""
        return log_tail(JobDir(handle.job_dir).stderr_log, lines)


# Workers run this much nicer than the cockpit. They saturate every core by design; at equal
# priority the supervisor's 5 Hz sampling and a viewer's key presses would queue behind them. The
# cockpit sleeps almost all the time, so the workers lose nothing measurable to it.
WORKER_NICE = 10


class LocalLauncher(LocalJobFiles):
    """Workers as local subprocesses (`python -m cockpit_training.worker ...`), `nice` steps nicer than us."""

    def __init__(self, python: str = sys.executable, cwd: Path | None = None, nice: int = WORKER_NICE) -> None:
        self.python = python
        self.cwd = cwd
        self.nice = nice

    def launch(self, request: LaunchRequest) -> WorkerHandle:
        """Start the worker in its own session with output appended to its job dir's logs."""
        request.job_dir.mkdir(parents=True, exist_ok=True)
        files = JobDir(request.job_dir)
        with files.stdout_log.open("ab") as out, files.stderr_log.open("ab") as err:
            proc = subprocess.Popen(
                request.args.command(self.python),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=self.cwd,
                env={**worker_env(), **request.args.environment(), **device_env(request)},
                start_new_session=True,
                # A user's command writes where it likes: with the user's modes, not the run's 0600.
                umask=user_umask() if isinstance(request.args, ScriptArgs) else -1,
            )
        # Affinity and priority are set from here rather than in a preexec_fn, which is unsafe in a
        # threaded parent; the worker's threads start later (after imports) and inherit both.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.nice:
                os.setpriority(os.PRIO_PROCESS, proc.pid, os.getpriority(os.PRIO_PROCESS, 0) + self.nice)
            if request.cpus:
                os.sched_setaffinity(proc.pid, request.cpus)
        return WorkerHandle(request.job_id, proc.pid, request.job_dir, proc)

    def terminate(self, handle: WorkerHandle) -> None:
        """SIGTERM to the worker only: its gymnasium env processes must outlive its checkpoint."""
        self._signal(lambda: os.kill(handle.pid, signal.SIGTERM))

    def kill(self, handle: WorkerHandle) -> None:
        """SIGKILL to the worker's whole process group (its session)."""
        self._signal(lambda: os.killpg(handle.pid, signal.SIGKILL))

    @staticmethod
    def _signal(send: Callable[[], None]) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
            send()

    def poll(self, handle: WorkerHandle) -> int | None:
        """`Popen.poll()`: reaps the worker once it has exited."""
        assert isinstance(handle.process, subprocess.Popen)
        return handle.process.poll()

    def stopped(self, handle: WorkerHandle) -> bool:
        """The worker's process state is T (stopped by a job-control signal). A tracer's stop (t: a
        debugger or py-spy looking at it) is not counted: that pause is someone's intent and brief."""
        try:
            return bool(psutil.Process(handle.pid).status() == psutil.STATUS_STOPPED)
        except psutil.Error:  # gone, a zombie being reaped, or not ours to look at
            return False


def worker_env() -> dict[str, str]:
    """A worker's environment: ours, unbuffered output, our pid to follow, one-thread native pools,
    and our working directory, where a `module:EnvId` env's module may live (`envids.WORKDIR_ENV`:
    the worker looks there whatever its own cwd and `sys.path` are)."""
    return {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        PARENT_PID_ENV: str(os.getpid()),
        WORKDIR_ENV: os.environ.get(WORKDIR_ENV) or os.getcwd(),
        **{var: "1" for var in THREAD_ENV_VARS},
    }


def pin_threads(pid: int, cpus: tuple[int, ...]) -> None:
    """Pin every thread of `pid` to `cpus` (affinity is per thread; new threads inherit it)."""
    try:
        tids = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        tids = [pid]
    for tid in tids:
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            os.sched_setaffinity(tid, cpus)


def previous_workers(run_dir: Path) -> list[psutil.Process]:
    """Worker processes still running on a job dir of `run_dir`: a killed cockpit's orphans, which
    its death asked (PR_SET_PDEATHSIG) to checkpoint and exit (it killed those with nothing to
    save). A served worker counts while it holds the lock of one of those job dirs (an idle one
    has been killed, or exits on its own: its stdin has closed)."""
    jobs = (run_dir / JOBS).resolve()
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if WORKER_MODULE not in cmdline:
            continue
        try:
            if SERVE_FLAG in cmdline:  # a served worker: the job dir whose lock it holds, if any
                job_dirs = [Path(f.path).parent for f in proc.open_files() if Path(f.path).name == JOB_LOCK]
            elif "--job-dir" in cmdline[:-1]:
                job_dirs = [Path(proc.cwd(), cmdline[cmdline.index("--job-dir") + 1])]
            else:
                continue
        except psutil.Error:
            continue
        if any(job_dir.resolve().parent == jobs for job_dir in job_dirs):
            found.append(proc)
    return found


def wait_for_previous_workers(run_dir: Path, timeout_s: float) -> str | None:
    """Before a resumed run starts its own workers: wait up to `timeout_s` for the previous
    session's orphaned workers to checkpoint and exit, then SIGKILL any left (a worker that never
    got going has nothing to save). Two workers on one job dir would be refused by its lock, and
    an orphan's late events would read as the new worker's. Returns a line saying what it did, or
    None when there were none."""
    orphans = previous_workers(run_dir)
    if not orphans:
        return None
    _, alive = psutil.wait_procs(orphans, timeout=timeout_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=5)
    killed = f", killed {len(alive)} still running after {timeout_s:.0f} s" if alive else ""
    return f"waited for {len(orphans)} worker(s) of the previous session to checkpoint and exit{killed}"


def log_tail(path: Path, lines: int = 5, max_bytes: int = 16_384) -> str:
    """The last `lines` non-empty lines of a log file ("" if it does not exist)."""
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - max_bytes))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join([line for line in text.splitlines() if line.strip()][-lines:])
