"""NVIDIA's Multi-Process Service for `--mps`: whether a run may use it here, and the life of the
control daemon its jobs are clients of.

How MPS works (NVIDIA's MPS documentation: "Appendix: Tools and Interface Reference", and the
nvidia-cuda-mps-control(1) man page): `nvidia-cuda-mps-control -d` starts the control daemon in the
background; `echo quit | nvidia-cuda-mps-control` stops it. The daemon, its server and its
clients meet through the named pipes in `CUDA_MPS_PIPE_DIRECTORY` (default `/tmp/nvidia-mps`,
where the daemon also writes `nvidia-cuda-mps-control.pid`), and the daemon logs to
`CUDA_MPS_LOG_DIRECTORY` (default `/var/log/nvidia-mps`). A CUDA program that finds a daemon there
asks it for a server of its own user id; one of another user id is shut down once its clients are
done, so another user's daemon does not serve our jobs. MPS as cockpit uses it needs Linux and a
GPU of compute capability 7.0 (Volta) or newer, GeForce included, and no root.

The rules (`open_daemon`, `close_daemon`):
- a daemon that already serves this user (its pipe directory's `control` pipe exists, is ours,
  and its pid file names a live process) is used, and left running at the end;
- otherwise the run starts one with its pipe and log directories under the run directory
  (`RunDir.mps_pipe`, `RunDir.mps_log`; a pipe directory too long for a socket's address goes to a
  private directory under /tmp instead) and records it in `RunDir.mps_record`, written atomically
  before any job starts; `close_daemon` stops it when the run ends and removes the record;
- a daemon the run did not start is never stopped;
- a cockpit killed with SIGKILL cannot stop its daemon: the next start in that run directory
  (`run --resume`, or a run started there) finds the record, and quits the daemon it names
  (`quit_left_behind`) when the cockpit that started it is gone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cockpit.contract.files import write_atomic
from cockpit.contract.rundir import RunDir
from cockpit.contract.workerargs import MPS_LOG_DIRECTORY_ENV, MPS_PIPE_DIRECTORY_ENV
from cockpit.core.machine.nvml import GpuInfo

CONTROL_PROGRAM = "nvidia-cuda-mps-control"
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


class MpsError(Exception):
    """The daemon could not be started or asked: one line, naming `--mps`."""


@dataclass(frozen=True)
class Daemon:
    """The MPS control daemon a run's jobs are clients of: its pipe directory (what each worker
    gets as `CUDA_MPS_PIPE_DIRECTORY`), its log directory (None: not ours to know), its pid (None
    when unknown), and whether this run started it (`owned`: only then is it stopped)."""

    pipe_dir: Path
    log_dir: Path | None
    pid: int | None
    owned: bool


def refusal(
    gpus: Sequence[GpuInfo],
    gpu_status: str = "",
    environ: Mapping[str, str] | None = None,
    *,
    which: Callable[[str], str | None] = shutil.which,
    uid: int | None = None,
) -> str | None:
    """Why `--mps` cannot be used here, in one line naming the flag and what would do; None when
    it can. `gpus` are the GPUs the run may place jobs on, `gpu_status` why there are none.
    Refused: without `nvidia-cuda-mps-control` on PATH, without a GPU, with a GPU older than Volta
    (compute capability 7.0; an unknown capability is let through: the driver that lacks the call
    predates none of them), and with another user's daemon in the pipe directory."""
    env = os.environ if environ is None else environ
    if which(CONTROL_PROGRAM) is None:
        return (f"--mps: {CONTROL_PROGRAM} is not on PATH (it comes with the NVIDIA driver's compute "
                "utilities); install them, or run without --mps")  # fmt: skip
    if not gpus:
        why = gpu_status.removeprefix("no GPU telemetry: ") or "no NVIDIA GPU found"
        return f"--mps: shares a GPU between jobs, and this run has none ({why}); run without --mps"
    old = [g for g in gpus if g.compute_capability is not None and g.compute_capability < VOLTA]
    if old:
        gpu = old[0]
        major, minor = gpu.compute_capability or VOLTA
        fit = [str(g.index) for g in gpus if g not in old]
        instead = f"--gpus {','.join(fit)} (Volta or newer), or " if fit else ""
        return (f"--mps: GPU {gpu.index} ({gpu.name}) has compute capability {major}.{minor}; MPS needs "
                f"{VOLTA[0]}.{VOLTA[1]} (Volta) or newer: give {instead}run without --mps")  # fmt: skip
    pipe_dir = Path(env.get(MPS_PIPE_DIRECTORY_ENV) or DEFAULT_PIPE_DIR)
    owner = _control_owner(pipe_dir)
    me = os.getuid() if uid is None else uid
    if owner is not None and owner != me and _alive(_pid_in(pipe_dir)) is not False:
        return (f"--mps: the MPS daemon at {pipe_dir} belongs to uid {owner}, not to you (uid {me}), and "
                f"would not serve your jobs; set {MPS_PIPE_DIRECTORY_ENV} to a directory of your own, or "
                "run without --mps")  # fmt: skip
    return None


def why_unmeasurable(gpus: Sequence[GpuInfo], gpu_status: str = "") -> str | None:
    """Why what MPS gains cannot be measured here (tune's trial, `run --auto`'s window), in one line
    without the flag; None when it can: MPS cannot be used (`refusal`), or a daemon already serves
    this user, so every CUDA job is its client with or without `--mps` and there is nothing to compare."""
    refused = refusal(gpus, gpu_status)
    if refused is not None:
        return refused.removeprefix("--mps: ")
    found = serving()
    if found is not None:
        return f"the daemon at {found.pipe_dir} already serves every job"
    return None


def serving(environ: Mapping[str, str] | None = None, uid: int | None = None) -> Daemon | None:
    """The running daemon that serves this user, where the environment's pipe directory (or the
    default) holds one: its control pipe exists and is ours, and its pid file names a live
    process (a pipe left by a daemon that died is no daemon). None otherwise."""
    env = os.environ if environ is None else environ
    pipe_dir = Path(env.get(MPS_PIPE_DIRECTORY_ENV) or DEFAULT_PIPE_DIR)
    if _control_owner(pipe_dir) != (os.getuid() if uid is None else uid):
        return None
    pid = _pid_in(pipe_dir)
    if _alive(pid) is False:
        return None
    return Daemon(pipe_dir, None, pid, owned=False)


def open_daemon(run_dir: Path, environ: Mapping[str, str] | None = None) -> tuple[Daemon, list[str]]:
    """The daemon the run in `run_dir` uses, and what the run should say about it (one line each):
    first a daemon a killed cockpit left in `run_dir` is quit (`quit_left_behind`), then a daemon
    serving this user is used as it is, else one is started for the run and recorded in the run
    directory (see the module docstring). MpsError (one line) when it cannot be started."""
    env = dict(os.environ if environ is None else environ)
    notes = [note for note in [quit_left_behind(run_dir, env)] if note]
    if RunDir(run_dir).mps_record.exists():  # kept: the cockpit that started that daemon is alive
        raise MpsError(f"--mps: the run in {run_dir} is live: another cockpit runs it, with its MPS daemon; "
                       f"attach to it (cockpit attach {run_dir})")  # fmt: skip
    found = serving(env)
    if found is not None:
        notes.append(f"MPS: using the daemon already running at {found.pipe_dir}; it is left running")
        return found, notes
    files = RunDir(run_dir)
    pipe_dir, log_dir = _pipe_dir(run_dir), files.mps_log
    for directory in (pipe_dir, log_dir):
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    program = shutil.which(CONTROL_PROGRAM, path=env.get("PATH")) or CONTROL_PROGRAM
    daemon_env = {**env, MPS_PIPE_DIRECTORY_ENV: str(pipe_dir), MPS_LOG_DIRECTORY_ENV: str(log_dir)}
    try:
        done = subprocess.run([program, "-d"], env=daemon_env, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=COMMAND_TIMEOUT_S, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MpsError(f"--mps: {CONTROL_PROGRAM} -d did not start the daemon ({exc})") from exc
    if done.returncode != 0:
        said = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
        raise MpsError(f"--mps: {CONTROL_PROGRAM} -d failed with code {done.returncode}"
                       + (f": {said[-1]}" if said else "") + f" (its log: {log_dir})")  # fmt: skip
    deadline = time.monotonic() + START_WAIT_S
    while not ((pipe_dir / CONTROL_PIPE).exists() and _pid_in(pipe_dir)) and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = _pid_in(pipe_dir)
    if not (pipe_dir / CONTROL_PIPE).exists():
        raise MpsError(f"--mps: {CONTROL_PROGRAM} -d left no control pipe in {pipe_dir} within "
                       f"{START_WAIT_S:.0f} s (its log: {log_dir})")  # fmt: skip
    daemon = Daemon(pipe_dir, log_dir, pid, owned=True)
    # Before any job starts: a cockpit killed from here on leaves a record the next start finds.
    record = {"daemon_pid": pid, "pipe_dir": str(pipe_dir), "log_dir": str(log_dir), "cockpit_pid": os.getpid()}
    write_atomic(files.mps_record, json.dumps(record, indent=2) + "\n")
    notes.append(f"MPS: started a control daemon (pid {pid}) at {pipe_dir}; it stops when the run ends")
    return daemon, notes


def close_daemon(daemon: Daemon, run_dir: Path, environ: Mapping[str, str] | None = None) -> str | None:
    """Stop `daemon` if this run started it (`owned`), and remove its record; a daemon the run
    found running is left alone. Returns a line when the daemon would not stop, else None."""
    if not daemon.owned:
        return None
    problem = _quit(daemon.pipe_dir, daemon.pid, environ)
    with contextlib.suppress(FileNotFoundError):
        RunDir(run_dir).mps_record.unlink()
    return problem


@contextlib.contextmanager
def daemon_in(run_dir: Path) -> Iterator[Path]:
    """A daemon for the jobs of `run_dir` for the length of a `with` block (`open_daemon`, then
    `close_daemon`): yields its pipe directory. MpsError when it cannot be started."""
    daemon, _notes = open_daemon(run_dir)
    try:
        yield daemon.pipe_dir
    finally:
        close_daemon(daemon, run_dir)


def quit_left_behind(run_dir: Path, environ: Mapping[str, str] | None = None) -> str | None:
    """Quit the daemon a killed cockpit started for the run in `run_dir` (its record there) and
    remove the record; leave both while the cockpit that wrote it is alive (another cockpit's run,
    which the run lock then refuses). Returns what it did, in one line, or None."""
    path = RunDir(run_dir).mps_record
    try:
        record = json.loads(path.read_text())
        pipe_dir, pid, owner = Path(record["pipe_dir"]), record.get("daemon_pid"), record.get("cockpit_pid")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        path.unlink(missing_ok=True)  # unreadable: nothing in it can be acted on
        return None
    if isinstance(owner, int) and owner != os.getpid() and _alive(owner):
        return None
    # Only the daemon the record names: a pid file that names another process (a daemon since
    # started there by someone, or the pid reused) is not ours to stop.
    ours = isinstance(pid, int) and _pid_in(pipe_dir) == pid and _alive(pid)
    note = None
    if ours:
        problem = _quit(pipe_dir, pid, environ)
        note = problem or f"MPS: quit the daemon (pid {pid}) a killed cockpit left running at {pipe_dir}"
    path.unlink(missing_ok=True)
    return note


def _quit(pipe_dir: Path, pid: int | None, environ: Mapping[str, str] | None) -> str | None:
    """`echo quit | nvidia-cuda-mps-control` for the daemon at `pipe_dir`, then wait for `pid` to go."""
    env = {**(os.environ if environ is None else environ), MPS_PIPE_DIRECTORY_ENV: str(pipe_dir)}
    program = shutil.which(CONTROL_PROGRAM, path=env.get("PATH")) or CONTROL_PROGRAM
    try:
        subprocess.run([program], input=b"quit\n", env=env, capture_output=True, timeout=COMMAND_TIMEOUT_S,
                       check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"MPS: could not ask the daemon at {pipe_dir} to quit ({exc}); stop it with: echo quit | " \
               f"{MPS_PIPE_DIRECTORY_ENV}={pipe_dir} {CONTROL_PROGRAM}"  # fmt: skip
    deadline = time.monotonic() + QUIT_WAIT_S
    while pid is not None and _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid is not None and _alive(pid):
        return f"MPS: the daemon (pid {pid}) at {pipe_dir} did not quit within {QUIT_WAIT_S:.0f} s"
    return None


def _pipe_dir(run_dir: Path) -> Path:
    """The run's own pipe directory: under the run directory when its absolute path is short
    enough for the sockets the server makes there, else a private one under the temp directory,
    named after the run directory so that the record and a resumed run find the same one."""
    inside = RunDir(run_dir.resolve()).mps_pipe
    if len(os.fsencode(inside)) <= MAX_PIPE_DIR:
        return inside
    digest = hashlib.sha256(os.fsencode(run_dir.resolve())).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"cockpit-mps-{os.getuid()}-{digest}"


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
