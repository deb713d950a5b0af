"""The worker's arguments: one type, to and from its command line, and its environment contract.

Everything that starts a worker (the supervisor, tune's trials, a user by hand) builds a
`WorkerArgs` and turns it into argv with `to_argv`; the worker turns argv back into the same type
with `parse`. The parser lives here so the flags, their defaults and their help have one home.

The launcher and the worker also agree on two environment variables: `PARENT_PID_ENV` (the
supervising process, whose death the worker follows) and `THREAD_ENV_VARS` (native thread pools
pinned to one thread before numpy or torch load), `gpu_environment` (the one GPU a worker of a
machine with several may use, as `cuda:0`), `mps_environment` (the MPS daemon a worker is a client
of under `--mps`, and its memory cap), and on how a full disk ends a worker: an `error`
event of type `DISK_FULL_ERROR` and the exit code `DISK_FULL_EXIT` (the exit code alone when the
event could not be written either), after which the supervisor pauses the job instead of
restarting it.

A served worker (`python -m cockpit_training.worker --serve --status-fd N`, `ServeArgs`) runs many jobs in
one process, so that the imports and start-up are paid once: it reads one job per line on stdin
(`encode_request`: the flags `WorkerArgs.to_argv` gives, and when it was sent), runs it as a fresh worker
would (same events, logs, lock and exit codes), and writes one `status_line` per job on fd N:
`exit <code>`, or `exit <code> retiring` when it exits after that job. Before its first job it
writes `READY_LINE` there once its imports are done. EOF on stdin ends it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

from cockpit.contract.arguments import ArgumentParser, non_negative_int, positive_int
from cockpit.contract.presets import builtin_names

WORKER_MODULE = "cockpit_training.worker"
PARENT_PID_ENV = "COCKPIT_PARENT_PID"
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
CUDA_VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"
CUDA_DEVICE_ORDER_ENV = "CUDA_DEVICE_ORDER"


def gpu_environment(index: int | None, uuid: str = "") -> dict[str, str]:
    """The environment that gives a worker one GPU alone, which it then sees as `cuda:0`: by its
    `uuid` (`GPU-...`, or `MIG-...` for a MIG slice) when known, else by its NVML `index`; nothing
    for index None (no GPU placement: the worker sees what the cockpit sees, `CUDA_VISIBLE_DEVICES`
    included)."""
    if index is None:
        return {}
    # A UUID names the one device whatever the order, and is the only way to name a MIG slice. An
    # index needs the order: CUDA numbers GPUs fastest first unless told otherwise, NVML by PCI
    # bus id, and without it the index would name another GPU on a machine of mixed models.
    return {CUDA_VISIBLE_DEVICES_ENV: uuid or str(index), CUDA_DEVICE_ORDER_ENV: "PCI_BUS_ID"}


MPS_PIPE_DIRECTORY_ENV = "CUDA_MPS_PIPE_DIRECTORY"
MPS_LOG_DIRECTORY_ENV = "CUDA_MPS_LOG_DIRECTORY"
MPS_MEM_LIMIT_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
# A client's memory cap over the job's measured peak: PyTorch's caching allocator reserves in
# blocks, and an attempt restarted from a checkpoint, or one that evaluates, may reach a little
# past the peak an earlier attempt showed. The cap is there to keep one runaway job from taking
# the memory of the others sharing the MPS server, not to squeeze a job that is well.
MPS_MEM_HEADROOM = 1.25
MPS_MEM_HEADROOM_MIB = 256
MIB = 1024 * 1024


def mps_memory_limit_mib(peak_bytes: int | None) -> int | None:
    """The `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` of a job, in MiB, from its known peak GPU memory
    (`peak_bytes`: what NVML or the worker measured on an earlier attempt): the peak times
    `MPS_MEM_HEADROOM` plus `MPS_MEM_HEADROOM_MIB`, rounded up. None when the peak is unknown (a
    first attempt): no cap then, since a guess too low would fail a healthy job."""
    if not peak_bytes or peak_bytes <= 0:
        return None
    return -(-int(peak_bytes * MPS_MEM_HEADROOM) // MIB) + MPS_MEM_HEADROOM_MIB


def mps_environment(
    pipe_dir: str | None, mem_limit_mib: int | None = None, log_dir: str | None = None
) -> dict[str, str]:
    """What a worker's environment gets under MPS: `CUDA_MPS_PIPE_DIRECTORY`, the directory of the
    control daemon's pipes (a client finds its daemon there: it must be the daemon's own),
    `CUDA_MPS_LOG_DIRECTORY`, the daemon's log directory, when known (`log_dir`), and
    `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` when `mem_limit_mib` is known, for device 0, the ordinal
    the client sees: its one GPU (`gpu_environment`). Nothing for `pipe_dir` None (no MPS).

    NVIDIA's MPS documentation, "Appendix: Environment Variables" (CUDA_MPS_PIPE_DIRECTORY: the
    same value for the daemon and every client of its server; CUDA_MPS_LOG_DIRECTORY: likewise,
    as "Starting MPS client application" sets both; CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: a
    comma-separated list of `ordinal=limit`, the ordinal as the client enumerates devices)."""
    if pipe_dir is None:
        return {}
    env = {MPS_PIPE_DIRECTORY_ENV: pipe_dir}
    if log_dir is not None:
        env[MPS_LOG_DIRECTORY_ENV] = log_dir
    if mem_limit_mib is not None:
        env[MPS_MEM_LIMIT_ENV] = f"0={mem_limit_mib}M"
    return env


@dataclass(frozen=True)
class MpsDaemonDirs:
    """Where the clients of one MPS control daemon meet it: its pipe directory and its log
    directory (None: the daemon's own, not cockpit's to know: a daemon found running)."""

    pipe_dir: str
    log_dir: str | None = None


@dataclass(frozen=True)
class MpsServers:
    """The MPS control daemons a run's jobs on GPUs are clients of: one per GPU, by NVML index
    (`by_gpu`: each daemon sees that GPU alone, so a fault on one GPU ends the clients of that
    GPU only), or one daemon for every GPU (`shared`). `external`: the shared daemon was found
    running, not started for the run; it serves every CUDA process here, named or not."""

    by_gpu: tuple[tuple[int, MpsDaemonDirs], ...] = ()
    shared: MpsDaemonDirs | None = None
    external: bool = False

    def for_gpu(self, index: int) -> MpsDaemonDirs | None:
        """The daemon the clients on GPU `index` meet; None where no daemon serves that GPU."""
        if self.shared is not None:
            return self.shared
        return next((dirs for gpu, dirs in self.by_gpu if gpu == index), None)


DISK_FULL_ERROR = "disk_full"  # the `error` event's type when a write failed with ENOSPC or EDQUOT
DISK_FULL_EXIT = 3  # the worker's exit code then (0 done or stopped, 1 failed, 2 bad input)

SERVE_FLAG = "--serve"  # `python -m cockpit_training.worker --serve ...`: the served worker (ServeArgs)
SERVE_MAX_JOBS = 25  # jobs a served worker runs before it exits, which bounds its memory growth
EVAL_ENVS_MAX = 16  # scoring plays up to this many envs at once, even where the preset trains on fewer


def eval_envs(episodes: int, n_envs: int) -> int:
    """How many envs a worker scores `episodes` episodes on at once: one each where that is at most
    the preset's `n_envs` or `EVAL_ENVS_MAX`. One round of episodes takes as long as the longest
    episode, where two rounds (10 episodes on 8 envs) took as long as the longest two in a row; a
    forward pass for 10 envs costs what one for 8 does."""
    return max(1, min(episodes, max(n_envs, EVAL_ENVS_MAX)))


DeviceRequest = Literal["auto", "cpu", "cuda"]
DEVICES: tuple[DeviceRequest, ...] = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class WorkerArgs:
    """One worker's command line, as data. None means "the worker's default"."""

    job_dir: Path
    preset: str = "cartpole"
    env: str | None = None
    timesteps: int | None = None  # a step target; None: the preset's, unless `episodes` is given
    seed: int = 0
    device: DeviceRequest = "auto"
    threads: int | None = None
    # torch's intra-op threads; None: the job's whole core budget (`threads`) on the CPU, 1 on a GPU.
    torch_threads: int | None = None
    eval_episodes: int | None = None  # score the model at its target with this many episodes
    # An episode target instead of a step target (never both): stop after the rollout in which the
    # N-th whole episode ended, counted across resumes.
    episodes: int | None = None
    # SB3's scalars to <job dir>/tb (when the tensorboard package is there); False: --no-tensorboard.
    tensorboard: bool = True

    def __post_init__(self) -> None:
        if self.timesteps is not None and self.episodes is not None:
            raise ValueError("a worker takes --timesteps or --episodes, not both")

    def to_argv(self) -> tuple[str, ...]:
        """The flags after `python -m cockpit_training.worker`; `parse(to_argv())` gives this back."""
        argv = ["--preset", self.preset]
        if self.env is not None:
            argv += ["--env", self.env]
        if self.timesteps is not None:
            argv += ["--timesteps", str(self.timesteps)]
        if self.episodes is not None:
            argv += ["--episodes", str(self.episodes)]
        argv += ["--job-dir", str(self.job_dir), "--seed", str(self.seed)]
        if self.device != "auto":
            argv += ["--device", self.device]
        if self.threads is not None:
            argv += ["--threads", str(self.threads)]
        if self.torch_threads is not None:
            argv += ["--torch-threads", str(self.torch_threads)]
        if self.eval_episodes is not None:
            argv += ["--eval-episodes", str(self.eval_episodes)]
        if not self.tensorboard:
            argv.append("--no-tensorboard")
        return tuple(argv)

    def command(self, python: str) -> list[str]:
        """The whole command line that runs this worker with the interpreter `python`."""
        return [python, "-m", WORKER_MODULE, *self.to_argv()]

    def environment(self) -> dict[str, str]:
        """What this worker's environment adds to every worker's (`launch.local.worker_env`): nothing;
        a script job's (`ScriptArgs`) adds its job's directory, seed and threads."""
        return {}

    @classmethod
    def parse(cls, argv: Sequence[str] | None = None) -> WorkerArgs:
        """The worker's arguments from argv (sys.argv[1:] when None); bad input prints one line
        naming the flag and exits 2."""
        ns = build_parser().parse_args(None if argv is None else list(argv))
        return cls(
            job_dir=ns.job_dir,
            preset=ns.preset,
            env=ns.env,
            timesteps=ns.timesteps,
            seed=ns.seed,
            device=cast(DeviceRequest, ns.device),
            threads=ns.threads,
            torch_threads=ns.torch_threads,
            eval_episodes=ns.eval_episodes,
            episodes=ns.episodes,
            tensorboard=not ns.no_tensorboard,
        )


def build_parser() -> ArgumentParser:
    """The worker's command line, with its help."""
    parser = ArgumentParser(
        prog=f"python -m {WORKER_MODULE}",
        description="Train one PPO agent (stable-baselines3 on envpool) and report to the cockpit "
        "through DIR/events.jsonl. Re-running on the same --job-dir resumes from its newest checkpoint.",
        epilog=f"Example: python -m {WORKER_MODULE} --preset cartpole --timesteps 100000 --job-dir runs/demo. "
        f"`python -m {WORKER_MODULE} {SERVE_FLAG} --help`: one process that runs job after job (for launchers).",
    )
    parser.add_argument(
        "--preset",
        default="cartpole",
        metavar="P",
        help=f"built-in preset ({', '.join(builtin_names())}) or a path to a .toml file (default: cartpole)",
    )
    parser.add_argument(
        "--env", metavar="ENV", help="environment id, e.g. CartPole-v1 or Pong-v5 (default: the preset's env)"
    )
    target = parser.add_mutually_exclusive_group()  # both at once is one line and exit 2
    target.add_argument(
        "--timesteps",
        type=positive_int,
        metavar="T",
        help="total environment steps to train for, across restarts (default: the preset's timesteps, "
        "unless --episodes is given)",
    )
    target.add_argument(
        "--episodes",
        type=positive_int,
        metavar="N",
        help="train until N whole episodes (whole games on Atari) have finished, across restarts: the job stops "
        "after training the rollout in which the N-th ended; replaces the preset's timesteps",
    )
    parser.add_argument(
        "--job-dir",
        type=Path,
        required=True,
        metavar="DIR",
        help="where events.jsonl and checkpoints/ go; the newest checkpoint is the final model",
    )
    parser.add_argument("--seed", type=non_negative_int, default=0, metavar="S", help="random seed (default: 0)")
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="torch device; auto picks cuda when available (default: auto)",
    )
    parser.add_argument(
        "--threads", type=positive_int, metavar="K", help="envpool worker threads (default: min(n_envs, usable CPUs))"
    )
    parser.add_argument(
        "--torch-threads",
        type=positive_int,
        metavar="N",
        help="torch intra-op threads (default: on the CPU the job's --threads budget, which its train phase "
        "then uses as its rollout used it for envpool; on a GPU 1)",
    )
    parser.add_argument(
        "--eval-episodes",
        type=positive_int,
        metavar="N",
        help="once at the target, score the model over N deterministic episodes on a separate env with a fixed "
        "seed and report it as an `evaluated` event (a fleet ranks its agents on it; default: no evaluation)",
    )
    parser.add_argument(
        "--no-tensorboard",
        action="store_true",
        help="no TensorBoard logs (default: SB3's scalars go to DIR/tb/PPO_0 when the tensorboard package is "
        "installed)",
    )
    return parser


@dataclass(frozen=True)
class ServeArgs:
    """A served worker's command line: where it reports each job's exit code, and after how many
    jobs it exits."""

    status_fd: int
    max_jobs: int = SERVE_MAX_JOBS

    def to_argv(self) -> tuple[str, ...]:
        """The flags after `python -m cockpit_training.worker`; `parse(to_argv())` gives this back."""
        return (SERVE_FLAG, "--status-fd", str(self.status_fd), "--max-jobs", str(self.max_jobs))

    def command(self, python: str) -> list[str]:
        """The whole command line that starts this served worker with the interpreter `python`."""
        return [python, "-m", WORKER_MODULE, *self.to_argv()]

    @classmethod
    def parse(cls, argv: Sequence[str] | None = None) -> ServeArgs:
        """The served worker's arguments from argv (sys.argv[1:] when None); bad input prints one
        line naming the flag and exits 2."""
        ns = build_serve_parser().parse_args(None if argv is None else list(argv))
        return cls(status_fd=ns.status_fd, max_jobs=ns.max_jobs)


def build_serve_parser() -> ArgumentParser:
    """The served worker's command line, with its help."""
    parser = ArgumentParser(
        prog=f"python -m {WORKER_MODULE} {SERVE_FLAG}",
        description="Run job after job in one process, so that importing torch, SB3 and envpool is paid once. "
        'Each stdin line is one job: a JSON object, {"argv": [the worker\'s flags: --preset ... --job-dir DIR ...], '
        '"sent_at": epoch seconds}. The job runs '
        f"as `python -m {WORKER_MODULE} FLAGS` would, its output appended to DIR/stdout.log and DIR/stderr.log, and "
        "its exit code is written to --status-fd as one line, `exit CODE` (`exit CODE retiring` when the process exits "
        "after it). EOF on stdin, or SIGTERM between jobs, ends the process; SIGTERM during a job stops that job.",
    )
    parser.add_argument(SERVE_FLAG, action="store_true", required=True, help="serve jobs from stdin")
    parser.add_argument(
        "--status-fd",
        type=non_negative_int,
        required=True,
        metavar="N",
        help="an open file descriptor (a pipe's write end) for the one status line per job",
    )
    parser.add_argument(
        "--max-jobs",
        type=positive_int,
        default=SERVE_MAX_JOBS,
        metavar="K",
        help=f"exit after K jobs, which bounds the process's memory growth (default: {SERVE_MAX_JOBS})",
    )
    return parser


def encode_request(args: WorkerArgs, sent_at: float) -> bytes:
    """One job for a served worker, on one line: a JSON object with its flags (`argv`) and when
    the launcher began handing it over (`sent_at`, seconds since the epoch), from which the job's
    `startup_s` counts: a process started ahead of its first job (a spare) must not count its
    imports, nor a job sent to a busy process's pipe lose its wait."""
    return json.dumps({"argv": list(args.to_argv()), "sent_at": sent_at}).encode("utf-8") + b"\n"


def decode_request(line: bytes) -> tuple[list[str], float]:
    """The flags and the send time in one request line; ValueError when it is malformed."""
    request = json.loads(line)
    if not isinstance(request, dict):
        raise ValueError(f"a job request must be a JSON object, got {line[:200]!r}")
    argv, sent_at = request.get("argv"), request.get("sent_at")
    if not isinstance(argv, list) or not all(isinstance(arg, str) for arg in argv):
        raise ValueError(f"a job request needs `argv`, a JSON list of strings, got {line[:200]!r}")
    if not isinstance(sent_at, (int, float)) or isinstance(sent_at, bool):
        raise ValueError(f"a job request needs `sent_at`, a number of seconds, got {line[:200]!r}")
    return argv, float(sent_at)


RETIRING = "retiring"
READY_LINE = b"ready\n"  # a served worker's imports are done: it waits for jobs


def status_line(code: int, *, retiring: bool = False) -> bytes:
    """A served worker's report of one job: `exit <code>`, with ` retiring` when it exits next."""
    return f"exit {code}{' ' + RETIRING if retiring else ''}\n".encode("ascii")


def parse_status(line: bytes) -> tuple[int, bool]:
    """The exit code in a status line and whether the process is retiring; ValueError if malformed."""
    words = line.decode("ascii", errors="replace").split()
    if len(words) not in (2, 3) or words[0] != "exit" or words[2:] not in ([], [RETIRING]):
        raise ValueError(f"not a status line: {line!r}")
    return int(words[1]), len(words) == 3
