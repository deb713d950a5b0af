"""What the supervisor asks of a launcher, whatever runs the job: start, signal and reap it, and
read its events (`Launcher.events`: the local launchers tail the job dir's `events.jsonl`, a remote
one brings them back from the node the worker runs on)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from cockpit.contract.events import Event
from cockpit.contract.ray_reports import NodeSample
from cockpit.contract.scriptargs import ScriptArgs
from cockpit.contract.workerargs import WorkerArgs, gpu_environment, mps_environment
from cockpit.core.machine.placement import GpuRef
from cockpit.core.telemetry.sampler import JobUsage


@dataclass(frozen=True)
class LaunchRequest:
    """One worker to start: its arguments (which name its job dir), the CPUs it may use, and the
    GPU (or MIG slice) it runs on, the only one it sees: by UUID when known, else by NVML index
    (`workerargs.gpu_environment`; None: no placement, it sees what we see). The worker is
    cockpit's own (`WorkerArgs`) or a user's command under the guard (`ScriptArgs`). Under `--mps`,
    `mps_pipe_dir` is the MPS control daemon's pipe directory, `mps_log_dir` its log directory (None:
    not known) and `mps_mem_limit_mib` the job's memory cap (None: unknown, no cap);
    `workerargs.mps_environment` turns them into its environment."""

    job_id: str
    args: WorkerArgs | ScriptArgs
    cpus: tuple[int, ...] | None = None
    gpu: GpuRef | None = None
    mps_pipe_dir: str | None = None
    mps_mem_limit_mib: int | None = None
    mps_log_dir: str | None = None

    @property
    def job_dir(self) -> Path:
        """Where the worker writes its events, checkpoints and logs."""
        return self.args.job_dir


def gpu_env(gpu: GpuRef | None) -> dict[str, str]:
    """What a worker's environment gets for the GPU it is placed on (`workerargs.gpu_environment`:
    its UUID when known, else its index; nothing for None)."""
    return gpu_environment(gpu.index, gpu.uuid) if gpu is not None else {}


def device_env(request: LaunchRequest) -> dict[str, str]:
    """Everything a worker's environment gets for its devices: its GPU (`gpu_env`) and, under MPS,
    the daemon it is a client of and its memory cap (`workerargs.mps_environment`). A job on no
    GPU gets no MPS variables: it would be no client of anything."""
    mps = (
        mps_environment(request.mps_pipe_dir, request.mps_mem_limit_mib, request.mps_log_dir)
        if request.gpu is not None
        else {}
    )
    return {**gpu_env(request.gpu), **mps}


@dataclass
class WorkerHandle:
    """A started worker, as its launcher identifies it."""

    job_id: str
    pid: int
    job_dir: Path
    process: object = field(repr=False, default=None)
    node: str | None = None  # the IP of the node it runs on, for a launcher that runs jobs elsewhere


class EventSource(Protocol):
    """One job's events, across all its attempts: `read_new` returns those written since the
    previous call, in order, from a bounded read (`read_all` reads on to the end); `offset` is how
    far into the job's event stream (in bytes of `events.jsonl`) it has read, and setting it makes
    the next `read_new` start there. `notices`: one line per line skipped for its size, for the
    caller to show once and clear."""

    offset: int
    notices: list[str]

    def read_new(self) -> list[Event]:
        """Complete events written since the previous call ([] when there are none yet)."""
        ...

    def read_all(self) -> list[Event]:
        """Every complete event written since the previous call, however many there are."""
        ...


class Launcher(Protocol):
    """Starts workers and reports on them; every method must return promptly."""

    def events(self, job_id: str, job_dir: Path) -> EventSource:
        """Where the supervisor reads job `job_id`'s events from, before, during and after each of
        its attempts (one source per job, asked for once, when the job is added)."""
        ...

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


@runtime_checkable
class RemoteJobs(Protocol):
    """A launcher whose workers run on other machines, where the local sampler cannot see them:
    it reports their usage itself, with each node's."""

    def usage(self) -> tuple[dict[str, JobUsage], tuple[NodeSample, ...]]:
        """Each live job's worker tree by job id, and every node's latest sample (`Sampler.remote`)."""
        ...
