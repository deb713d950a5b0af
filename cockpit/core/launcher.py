"""Where a job's worker is started, signalled and reaped: the seam a Ray launcher will plug into.

The supervisor only talks to a `Launcher`. `LocalLauncher` runs each worker as a subprocess in its
own session (so a terminal's Ctrl-C reaches only the cockpit, which stops workers cleanly), with
stdout and stderr in the job dir, the thread budget in its environment, optional CPU pinning, and
the cockpit's pid in `COCKPIT_PARENT_PID`, which makes the worker ask the kernel for SIGTERM
(PR_SET_PDEATHSIG) if the cockpit dies, even by SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import psutil

from cockpit.contract.rundir import JOBS, JobDir
from cockpit.contract.workerargs import PARENT_PID_ENV, THREAD_ENV_VARS, WORKER_MODULE, WorkerArgs


@dataclass(frozen=True)
class LaunchRequest:
    """One worker to start: its arguments (which name its job dir), and the CPUs it may use."""

    job_id: str
    args: WorkerArgs
    cpus: tuple[int, ...] | None = None

    @property
    def job_dir(self) -> Path:
        """Where the worker writes its events, checkpoints and logs."""
        return self.args.job_dir


@dataclass
class WorkerHandle:
    """A started worker, as its launcher identifies it."""

    job_id: str
    pid: int
    job_dir: Path
    process: object = field(repr=False, default=None)


class Launcher(Protocol):
    """Starts workers and reports on them; every method must return promptly."""

    def launch(self, request: LaunchRequest) -> WorkerHandle:
        """Start the worker; raise OSError if it cannot be started."""
        ...

    def terminate(self, handle: WorkerHandle) -> None:
        """Ask the worker to checkpoint and stop (SIGTERM to the worker itself)."""
        ...

    def kill(self, handle: WorkerHandle) -> None:
        """Kill the worker and everything it started, at once."""
        ...

    def poll(self, handle: WorkerHandle) -> int | None:
        """The exit code once the worker has exited (negative: killed by that signal), else None."""
        ...

    def stderr_tail(self, handle: WorkerHandle, lines: int = 5) -> str:
        """The last lines the worker wrote to stderr, for error messages."""
        ...

    def stopped(self, handle: WorkerHandle) -> bool:
        """True while the worker is stopped by a signal (SIGSTOP, SIGTSTP: process state T): it
        cannot make progress until continued. False when it runs, sleeps, has exited or is unknown."""
        ...


# Workers run this much nicer than the cockpit. They saturate every core by design; at equal
# priority the supervisor's 5 Hz sampling and a viewer's key presses would queue behind them. The
# cockpit sleeps almost all the time, so the workers lose nothing measurable to it.
WORKER_NICE = 10


class LocalLauncher:
    """Workers as local subprocesses (`python -m training.worker ...`), `nice` steps nicer than us."""

    def __init__(self, python: str = sys.executable, cwd: Path | None = None, nice: int = WORKER_NICE) -> None:
        self.python = python
        self.cwd = cwd
        self.nice = nice

    def launch(self, request: LaunchRequest) -> WorkerHandle:
        """Start the worker in its own session with output appended to its job dir's logs."""
        request.job_dir.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            PARENT_PID_ENV: str(os.getpid()),
            **{var: "1" for var in THREAD_ENV_VARS},
        }
        files = JobDir(request.job_dir)
        with files.stdout_log.open("ab") as out, files.stderr_log.open("ab") as err:
            proc = subprocess.Popen(
                request.args.command(self.python),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=self.cwd,
                env=env,
                start_new_session=True,
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

    def stderr_tail(self, handle: WorkerHandle, lines: int = 5) -> str:
        """The last `lines` non-empty lines of the job's stderr log."""
        return log_tail(JobDir(handle.job_dir).stderr_log, lines)

    def stopped(self, handle: WorkerHandle) -> bool:
        """The worker's process state is T (stopped by a job-control signal). A tracer's stop (t: a
        debugger or py-spy looking at it) is not counted: that pause is someone's intent and brief."""
        try:
            return bool(psutil.Process(handle.pid).status() == psutil.STATUS_STOPPED)
        except psutil.Error:  # gone, a zombie being reaped, or not ours to look at
            return False


def previous_workers(run_dir: Path) -> list[psutil.Process]:
    """Worker processes still running on a job dir of `run_dir`: a killed cockpit's orphans, which
    its death asked (PR_SET_PDEATHSIG) to checkpoint and exit."""
    jobs = (run_dir / JOBS).resolve()
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if WORKER_MODULE not in cmdline or "--job-dir" not in cmdline[:-1]:
            continue
        try:
            job_dir = Path(proc.cwd(), cmdline[cmdline.index("--job-dir") + 1]).resolve()
        except psutil.Error:
            continue
        if job_dir.parent == jobs:
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
