"""NVIDIA's Multi-Process Service for `--mps`: whether a run may use it here, and the life of the
control daemons its jobs are clients of.

How MPS works (NVIDIA's MPS documentation: "Appendix: Tools and Interface Reference", "Appendix:
Common Tasks", "Error Containment", and the nvidia-cuda-mps-control(1) man page):
`nvidia-cuda-mps-control -d` starts the control daemon in the background; `echo quit |
nvidia-cuda-mps-control` stops it. The daemon, its servers and their clients meet through the
named pipes in `CUDA_MPS_PIPE_DIRECTORY` (default `/tmp/nvidia-mps`, where the daemon also writes
`nvidia-cuda-mps-control.pid`), and the daemon logs to `CUDA_MPS_LOG_DIRECTORY` (default
`/var/log/nvidia-mps`). A CUDA program that finds a daemon there asks it for a server of its own
user id, which the daemon starts for it: a daemon started by root serves every user. The server
sees the GPUs the daemon was started with (`CUDA_VISIBLE_DEVICES`). A fatal GPU fault in one
client ends every client of that server on the GPU it hit, and the server refuses new clients
(`cudaErrorMpsServerNotReady`) until all of them exited. MPS as cockpit uses it needs Linux and a
GPU of compute capability 7.0 (Volta) or newer, GeForce included, and no root.

The rules (`open_daemons`, `close_daemons`):
- a daemon already serving the pipe directory of the environment (`CUDA_MPS_PIPE_DIRECTORY`, else
  the default), whoever started it (its `control` pipe exists and its pid file names a live
  `nvidia-cuda-mps-control`: a pid file left by a dead daemon, or one whose pid now names another
  program, is no daemon), is used as one daemon for every GPU, and left running at the end;
- otherwise the run starts one daemon per GPU it places jobs on, each with that GPU alone in its
  `CUDA_VISIBLE_DEVICES` (by UUID, as workers get it) and its own pipe and log directories under
  the run directory (`RunDir.mps_gpu_pipe`, `RunDir.mps_gpu_log`; a pipe directory too long for a
  socket's address goes to a private directory under /tmp instead, checked to be ours and 0700),
  so that a fault on one GPU never touches the jobs of another. It records them in
  `RunDir.mps_record`, written atomically after each start and before any job starts;
  `close_daemons` stops them when the run ends and removes the record;
- a daemon the run did not start is never stopped;
- a cockpit killed with SIGKILL cannot stop its daemons: the next start in that run directory
  (`run --resume`, or a run started there) finds the record, and quits each daemon it names
  (`quit_left_behind`) when the cockpit that started them is gone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cockpit.contract.files import write_atomic
from cockpit.contract.rundir import RunDir
from cockpit.contract.workerargs import (
    MPS_LOG_DIRECTORY_ENV,
    MPS_PIPE_DIRECTORY_ENV,
    MpsDaemonDirs,
    MpsServers,
    gpu_environment,
)
from cockpit.core.machine.gpu_types import GpuInfo
from cockpit.core.machine.tempdirs import private_dir

CONTROL_PROGRAM = "nvidia-cuda-mps-control"
# What the kernel keeps of its name (/proc/PID/comm: 15 bytes); the server's is the same.
CONTROL_COMM = CONTROL_PROGRAM[:15]
DEFAULT_PIPE_DIR = Path("/tmp/nvidia-mps")
CONTROL_PIPE = "control"
PID_FILE = "nvidia-cuda-mps-control.pid"
VOLTA = (7, 0)
# The daemon's server makes sockets in its pipe directory; a socket's address holds 108 bytes
# (sun_path), and the names it adds there take up to about 40.
MAX_PIPE_DIR = 64
START_WAIT_S = 10.0  # for `-d` to leave its control pipe and pid file
QUIT_WAIT_S = 10.0  # for a quit daemon's process to go
COMMAND_TIMEOUT_S = 30.0
# An error from MPS itself, not from the job: the CUDA runtime's cudaErrorMps* (805-810), the
# driver's CUDA_ERROR_MPS_*, and their messages as PyTorch prints them (CUDA runtime API, "Error
# Handling": cudaErrorMpsConnectionFailed "MPS client failed to connect to the MPS control daemon
# or the MPS server", cudaErrorMpsRpcFailure "the remote procedural call between the MPS server
# and the MPS client failed", cudaErrorMpsServerNotReady "the MPS server is not ready to accept new
# MPS client requests", cudaErrorMpsMaxClientsReached, cudaErrorMpsMaxConnectionsReached,
# cudaErrorMpsClientTerminated "the MPS client has been terminated by the server").
MPS_ERROR = re.compile(
    r"cudaErrorMps\w*|CUDA_ERROR_MPS_\w*|MPS client failed to connect|MPS server is not ready"
    r"|between the MPS server and the MPS client|MPS client has been terminated|required to create MPS client",
    re.IGNORECASE,
)


def mps_error(text: str) -> bool:
    """Whether `text` (a job's error or its stderr's last line) is an error of MPS itself
    (`MPS_ERROR`): the server, not the job's input."""
    return MPS_ERROR.search(text) is not None


class MpsError(Exception):
    """The daemon could not be started or asked: one line, naming `--mps`."""


@dataclass(frozen=True)
class Daemon:
    """An MPS control daemon a run's jobs are clients of: its pipe directory (what each worker
    gets as `CUDA_MPS_PIPE_DIRECTORY`), its log directory (None: not ours to know), its pid (None
    when unknown), whether this run started it (`owned`: only then is it stopped), and the GPU it
    serves alone (`gpu`, its NVML index; None: every GPU, a daemon found running)."""

    pipe_dir: Path
    log_dir: Path | None
    pid: int | None
    owned: bool
    gpu: int | None = None

    @property
    def dirs(self) -> MpsDaemonDirs:
        """What its clients get (`workerargs.mps_environment`)."""
        return MpsDaemonDirs(str(self.pipe_dir), str(self.log_dir) if self.log_dir is not None else None)


def servers(daemons: Sequence[Daemon]) -> MpsServers:
    """The daemons as the workers' launches look them up: by GPU, or one found running for all."""
    shared = next((d for d in daemons if d.gpu is None), None)
    if shared is not None:
        return MpsServers(shared=shared.dirs, external=not shared.owned)
    return MpsServers(by_gpu=tuple((d.gpu, d.dirs) for d in daemons if d.gpu is not None))


def refusal(
    gpus: Sequence[GpuInfo],
    gpu_status: str = "",
    *,
    which: Callable[[str], str | None] = shutil.which,
) -> str | None:
    """Why `--mps` cannot be used here, in one line naming the flag and what would do; None when
    it can. `gpus` are the GPUs the run may place jobs on, `gpu_status` why there are none.
    Refused: without `nvidia-cuda-mps-control` on PATH, without a GPU, and with a GPU older than
    Volta (compute capability 7.0; an unknown capability is let through: the driver that lacks the
    call predates none of them). A daemon another user started is no reason: a root daemon starts a
    server for each user that asks."""
    if which(CONTROL_PROGRAM) is None:
        return (
            f"--mps: {CONTROL_PROGRAM} is not on PATH (it comes with the NVIDIA driver's compute "
            "utilities); install them, or run without --mps"
        )
    if not gpus:
        why = gpu_status.removeprefix("no GPU telemetry: ") or "no NVIDIA GPU found"
        return f"--mps: shares a GPU between jobs, and this run has none ({why}); run without --mps"
    old = [g for g in gpus if g.compute_capability is not None and g.compute_capability < VOLTA]
    if old:
        gpu = old[0]
        major, minor = gpu.compute_capability or VOLTA
        fit = [str(g.index) for g in gpus if g not in old]
        instead = f"--gpus {','.join(fit)} (Volta or newer), or " if fit else ""
        return (
            f"--mps: GPU {gpu.index} ({gpu.name}) has compute capability {major}.{minor}; MPS needs "
            f"{VOLTA[0]}.{VOLTA[1]} (Volta) or newer: give {instead}run without --mps"
        )
    return None


def why_unmeasurable(gpus: Sequence[GpuInfo], gpu_status: str = "") -> str | None:
    """Why what MPS gains cannot be measured here (tune's trial, `run --auto`'s window), in one line
    without the flag; None when it can: MPS cannot be used (`refusal`), or a daemon already serves
    the pipe directory, whoever started it, so every CUDA job is its client with or without `--mps`
    and there would be nothing to compare MPS with."""
    refused = refusal(gpus, gpu_status)
    if refused is not None:
        return refused.removeprefix("--mps: ")
    found = serving()
    if found is not None:
        return f"the daemon at {found.pipe_dir}{started_by(found.pipe_dir)} already serves every job"
    return None


def serving(environ: Mapping[str, str] | None = None) -> Daemon | None:
    """The running daemon at the environment's pipe directory (or the default), whoever started
    it: its control pipe exists and its pid file names a live `nvidia-cuda-mps-control` (a pipe
    left by a daemon that died, or a pid file whose pid now names another program, is no daemon;
    a pid that cannot be read or asked about is taken at its word). None otherwise."""
    env = os.environ if environ is None else environ
    pipe_dir = Path(env.get(MPS_PIPE_DIRECTORY_ENV) or DEFAULT_PIPE_DIR)
    if not (pipe_dir / CONTROL_PIPE).exists():
        return None
    pid = _pid_in(pipe_dir)
    if _is_daemon(pid) is False:
        return None
    return Daemon(pipe_dir, None, pid, owned=False)


def open_daemons(
    run_dir: Path, gpus: Sequence[GpuInfo], environ: Mapping[str, str] | None = None
) -> tuple[list[Daemon], list[str]]:
    """The daemons the run in `run_dir` uses for its jobs on `gpus`, and what the run should say
    about them (one line each): first the daemons a killed cockpit left in `run_dir` are quit
    (`quit_left_behind`), then a daemon already serving is used as it is, for every GPU, else one
    is started for each of `gpus` and recorded in the run directory (see the module docstring).
    MpsError (one line) when one cannot be started; those already started are then stopped."""
    env = dict(os.environ if environ is None else environ)
    notes = quit_left_behind(run_dir, env)
    if RunDir(run_dir).mps_record.exists():  # kept: the cockpit that started those daemons is alive
        raise MpsError(
            f"--mps: the run in {run_dir} is live: another cockpit runs it, with its MPS daemons; "
            f"attach to it (cockpit attach {run_dir})"
        )
    found = serving(env)
    if found is not None:
        notes.append(
            f"MPS: using the daemon already running at {found.pipe_dir}{started_by(found.pipe_dir)} for every "
            "GPU; it is left running"
        )
        return [found], notes
    started: list[Daemon] = []
    try:
        for gpu in gpus:
            started.append(_start(run_dir, gpu, env))
            _write_record(run_dir, started)  # before any job starts: a killed cockpit leaves it for the next start
    except MpsError:
        close_daemons(started, run_dir, env)
        raise
    for daemon in started:
        notes.append(
            f"MPS: started a control daemon (pid {daemon.pid}) for GPU {daemon.gpu} at {daemon.pipe_dir}; "
            "it stops when the run ends"
        )
    return started, notes


def _start(run_dir: Path, gpu: GpuInfo, env: Mapping[str, str]) -> Daemon:
    """Start the daemon of GPU `gpu` for the run in `run_dir`: that GPU alone visible to it, its
    own pipe and log directories. MpsError (one line) when it does not start."""
    files = RunDir(run_dir)
    log_dir = files.mps_gpu_log(gpu.index)
    try:
        pipe_dir = _pipe_dir(run_dir, gpu.index)
        log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise MpsError(f"--mps: no pipe directory for GPU {gpu.index}'s daemon: {exc}") from exc
    try:
        return _spawn(gpu, pipe_dir, log_dir, env)
    except MpsError:
        if not pipe_dir.is_relative_to(run_dir.resolve()):  # a private /tmp one: nothing of the run stays there
            shutil.rmtree(pipe_dir, ignore_errors=True)
        raise


def _spawn(gpu: GpuInfo, pipe_dir: Path, log_dir: Path, env: Mapping[str, str]) -> Daemon:
    """`nvidia-cuda-mps-control -d` for GPU `gpu` alone, with `pipe_dir` and `log_dir`; the daemon
    once its control pipe is there. MpsError (one line) when it does not start."""
    program = shutil.which(CONTROL_PROGRAM, path=env.get("PATH")) or CONTROL_PROGRAM
    daemon_env = {
        **env,
        **gpu_environment(gpu.index, gpu.uuid),
        MPS_PIPE_DIRECTORY_ENV: str(pipe_dir),
        MPS_LOG_DIRECTORY_ENV: str(log_dir),
    }
    try:
        done = subprocess.run(
            [program, "-d"],
            env=daemon_env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MpsError(f"--mps: {CONTROL_PROGRAM} -d did not start the daemon of GPU {gpu.index} ({exc})") from exc
    if done.returncode != 0:
        said = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
        raise MpsError(
            f"--mps: {CONTROL_PROGRAM} -d failed with code {done.returncode}"
            + (f": {said[-1]}" if said else "")
            + f" (GPU {gpu.index}; its log: {log_dir})"
        )
    deadline = time.monotonic() + START_WAIT_S
    while not ((pipe_dir / CONTROL_PIPE).exists() and _pid_in(pipe_dir)) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not (pipe_dir / CONTROL_PIPE).exists():
        raise MpsError(
            f"--mps: {CONTROL_PROGRAM} -d left no control pipe in {pipe_dir} within "
            f"{START_WAIT_S:.0f} s (its log: {log_dir})"
        )
    return Daemon(pipe_dir, log_dir, _pid_in(pipe_dir), owned=True, gpu=gpu.index)


def _write_record(run_dir: Path, daemons: Sequence[Daemon]) -> None:
    """`mps.json`: the daemons this run started, and the cockpit that started them."""
    record = {
        "cockpit_pid": os.getpid(),
        "daemons": [
            {"gpu": d.gpu, "daemon_pid": d.pid, "pipe_dir": str(d.pipe_dir), "log_dir": str(d.log_dir)} for d in daemons
        ],
    }
    write_atomic(RunDir(run_dir).mps_record, json.dumps(record, indent=2) + "\n")


def close_daemons(daemons: Sequence[Daemon], run_dir: Path, environ: Mapping[str, str] | None = None) -> str | None:
    """Stop each of `daemons` this run started (`owned`), remove the private /tmp pipe directory of
    each one that stopped (the run directory keeps its own), and remove their record; a daemon the
    run found running is left alone. Returns a line when one would not stop, else None."""
    owned = [d for d in daemons if d.owned]
    if not owned:
        return None
    problems = []
    for daemon in owned:
        problem = _quit(daemon.pipe_dir, daemon.pid, environ)
        if problem:
            problems.append(problem)
        elif not daemon.pipe_dir.is_relative_to(run_dir.resolve()):
            shutil.rmtree(daemon.pipe_dir, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        RunDir(run_dir).mps_record.unlink()
    return "; ".join(problems) or None


@contextlib.contextmanager
def daemon_in(run_dir: Path, gpu: GpuInfo | None = None) -> Iterator[Daemon]:
    """A daemon for jobs on `gpu` (None: the first GPU, index 0) of `run_dir` for the length of a
    `with` block (`open_daemons`, then `close_daemons`): yields it. MpsError when it cannot be
    started."""
    daemons, _notes = open_daemons(run_dir, [gpu if gpu is not None else GpuInfo(0, "", 0, "")])
    try:
        yield daemons[0]
    finally:
        close_daemons(daemons, run_dir)


def quit_left_behind(run_dir: Path, environ: Mapping[str, str] | None = None) -> list[str]:
    """Quit the daemons a killed cockpit started for the run in `run_dir` (its record there) and
    remove the record; leave both while the cockpit that wrote it is alive (another cockpit's run,
    which the run lock then refuses). Returns what it did, one line a daemon."""
    path = RunDir(run_dir).mps_record
    try:
        record = json.loads(path.read_text())
        owner = record.get("cockpit_pid")
        # A record of one daemon is what cockpit wrote before it started one per GPU.
        entries = record.get("daemons", [record])
        left = [(Path(e["pipe_dir"]), e.get("daemon_pid")) for e in entries]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        path.unlink(missing_ok=True)  # unreadable: nothing in it can be acted on
        return []
    if isinstance(owner, int) and owner != os.getpid() and _alive(owner):
        return []
    notes = []
    for pipe_dir, pid in left:
        # Only the daemon the record names: a pid file that names another process (a daemon since
        # started there by someone, or the pid reused) is not ours to stop.
        if isinstance(pid, int) and _pid_in(pipe_dir) == pid and _is_daemon(pid) is not False:
            problem = _quit(pipe_dir, pid, environ)
            notes.append(problem or f"MPS: quit the daemon (pid {pid}) a killed cockpit left running at {pipe_dir}")
    path.unlink(missing_ok=True)
    return notes


def _quit(pipe_dir: Path, pid: int | None, environ: Mapping[str, str] | None) -> str | None:
    """`echo quit | nvidia-cuda-mps-control` for the daemon at `pipe_dir`, then wait for `pid` to go."""
    env = {**(os.environ if environ is None else environ), MPS_PIPE_DIRECTORY_ENV: str(pipe_dir)}
    program = shutil.which(CONTROL_PROGRAM, path=env.get("PATH")) or CONTROL_PROGRAM
    try:
        subprocess.run([program], input=b"quit\n", env=env, capture_output=True, timeout=COMMAND_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return (
            f"MPS: could not ask the daemon at {pipe_dir} to quit ({exc}); stop it with: echo quit | "
            f"{MPS_PIPE_DIRECTORY_ENV}={pipe_dir} {CONTROL_PROGRAM}"
        )
    deadline = time.monotonic() + QUIT_WAIT_S
    while pid is not None and _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid is not None and _alive(pid):
        return f"MPS: the daemon (pid {pid}) at {pipe_dir} did not quit within {QUIT_WAIT_S:.0f} s"
    return None


def _pipe_dir(run_dir: Path, index: int) -> Path:
    """The pipe directory of the run's daemon for GPU `index`, made: under the run directory when
    its absolute path is short enough for the sockets the server makes there, else under the temp
    directory, named after the run directory so that the record and a resumed run find the same
    one. Either way it is ours and 0700, or PermissionError in one line (`tempdirs.private_dir`,
    as the control socket's directory is): a 0777 directory another user made first at that
    predictable name could swap the pipes the jobs connect to."""
    inside = RunDir(run_dir.resolve()).mps_gpu_pipe(index)
    if len(os.fsencode(inside)) <= MAX_PIPE_DIR:
        inside.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        return private_dir(inside)  # a --run-dir another user prepared could hold pipes of theirs
    digest = hashlib.sha256(os.fsencode(run_dir.resolve())).hexdigest()[:16]
    return private_dir(Path(tempfile.gettempdir()) / f"cockpit-mps-{os.getuid()}-{digest}-{index}")


def started_by(pipe_dir: Path) -> str:
    """ " (started by uid N)" for a daemon whose control pipe another user owns, else ""."""
    owner = _control_owner(pipe_dir)
    return f" (started by uid {owner})" if owner is not None and owner != os.getuid() else ""


def _control_owner(pipe_dir: Path) -> int | None:
    """The uid that owns `pipe_dir`'s control pipe; None when there is none."""
    try:
        return (pipe_dir / CONTROL_PIPE).stat().st_uid
    except OSError:
        return None


def _pid_in(pipe_dir: Path) -> int | None:
    """The pid the daemon wrote in `pipe_dir`'s pid file; None when there is none or it is unreadable."""
    try:
        return int((pipe_dir / PID_FILE).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int | None) -> bool | None:
    """Whether process `pid` exists (another user's counts: it answers EPERM); None for no pid."""
    if pid is None or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (a daemon child of ours that exited but is not reaped yet) is gone for our purposes.
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def _is_daemon(pid: int | None) -> bool | None:
    """Whether process `pid` is a live MPS control daemon: it runs (`_alive`) and its name
    (/proc/PID/comm, else its command line) is `nvidia-cuda-mps-control`'s. None for no pid, or
    where /proc will not say (another user's process on a locked-down /proc): taken at its word."""
    alive = _alive(pid)
    if not alive:
        return alive
    try:
        if Path(f"/proc/{pid}/comm").read_text().strip() == CONTROL_COMM:
            return True
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return False
    except OSError:
        return None
    return any(os.path.basename(arg) == os.fsencode(CONTROL_PROGRAM) for arg in argv[:2])
