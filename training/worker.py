"""One PPO training job: `python -m cockpit_training.worker --preset P --timesteps T --job-dir DIR`.

The worker trains stable-baselines3 PPO on envpool (gymnasium as the fallback), reports to the
cockpit through `DIR/events.jsonl`, checkpoints to `DIR/checkpoints/`, and resumes from the newest
valid checkpoint when `DIR` already holds one, ending at exactly `--timesteps` steps in total, or
with `--episodes N` after the rollout in which the N-th whole episode ended (the count is saved
with each checkpoint, so it survives a resume).
SIGTERM or SIGINT stops it at the next step (or the next optimizer step when training), writes a
checkpoint and a `finished` event with status `stopped`, and exits 0.

Started by a cockpit (`COCKPIT_PARENT_PID`), it follows the cockpit's death, even by SIGKILL
(`cockpit_training.stopping`): until it trains, with nothing to save, it is killed at once, even
in the middle of an import or while stopped by SIGSTOP; while it trains, it is continued if
stopped, checkpoints and exits, killed after `ORPHAN_SAVE_S` if that hangs.

Exit codes: 0 done or stopped, 1 training failed (an `error` event says why), 2 bad input, 3 disk
full: a write (a checkpoint, an event, a log line) failed with ENOSPC or EDQUOT. The `error` event
(type `disk_full`) then names the path and the free space when it can still be written; the exit
code says it when it cannot, so the cockpit pauses the job rather than restarting it into the same
full disk. The previous checkpoint is left whole (`cockpit_training.checkpoints`).

`python -m cockpit_training.worker --serve --status-fd N` (see `serve`) imports once and then runs job
after job, each read from stdin, exactly as a fresh worker would run it; a launcher's pool of
these saves each job the seconds of start-up.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import math
import os
import select
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cockpit.contract.events import (
    EVENTS_FILE,
    CheckpointEvent,
    CorruptCheckpoint,
    E,
    ErrorEvent,
    EvaluatedEvent,
    EventWriter,
    FinishedEvent,
    FinishStatus,
    ProgressEvent,
    StartedEvent,
    to_json,
)
from cockpit.contract.files import free_space
from cockpit.contract.presets import Preset, PresetError, load
from cockpit.contract.rundir import TB_LOG_NAME, JobDir
from cockpit.contract.workerargs import (
    DISK_FULL_ERROR,
    DISK_FULL_EXIT,
    READY_LINE,
    SERVE_FLAG,
    ServeArgs,
    WorkerArgs,
    decode_request,
    eval_envs,
    status_line,
)
from cockpit_training.device import DeviceError, limit_native_threads, resolve_device, torch_threads_for
from cockpit_training.stopping import JobSignals, StopFlag, die_with_parent, save_with_parent

# numpy, torch, SB3 and gymnasium are imported inside functions: their thread pools size
# themselves at import, so they must load only after `limit_native_threads()` has run.
if TYPE_CHECKING:  # for the type hints alone: at run time these load inside `train`
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecEnv, VecNormalize

    from cockpit_training.callback import CockpitCallback
    from cockpit_training.checkpoints import CheckpointStore
    from cockpit_training.model import Resumed

PROGRESS_PRINT_INTERVAL = 5.0
MAX_SEED = 2**31 - 1


class WorkerInputError(ValueError):
    """A flag value the worker cannot use; the message names the flag."""


@dataclass(frozen=True)
class JobConfig:
    """Everything a worker run needs, validated: the resolved preset and the job's own settings.

    `timesteps` is the requested total; the run ends at the first whole vector step (n_envs envs)
    at or past it. With `episodes` (an episode target) `timesteps` is 0 and the run ends after
    the rollout in which the `episodes`-th whole episode ended.
    """

    preset: Preset
    env: str
    backend: str
    timesteps: int
    job_dir: Path
    seed: int
    device: str
    threads: int
    torch_threads: int
    eval_episodes: int | None = None
    episodes: int | None = None
    tensorboard: bool = True  # SB3's scalars to <job dir>/tb, where the tensorboard package is installed

    def as_dict(self) -> dict[str, Any]:
        """The config as recorded in the `started` event."""
        return {
            "preset": self.preset.as_dict(),
            "env": self.env,
            "backend": self.backend,
            "timesteps": self.timesteps,
            "job_dir": str(self.job_dir),
            "seed": self.seed,
            "device": self.device,
            "threads": self.threads,
            "torch_threads": self.torch_threads,
            "eval_episodes": self.eval_episodes,
            "episodes": self.episodes,
            "tensorboard": self.tensorboard,
        }


def resolve_config(args: WorkerArgs) -> JobConfig:
    """Validate the arguments into a `JobConfig`.

    Raises PresetError, WorkerInputError, EnvError or DeviceError, each with a one-line message.
    """
    from cockpit.contract.envids import check_env

    preset = load(args.preset)
    if args.job_dir.exists() and not args.job_dir.is_dir():
        raise WorkerInputError(f"--job-dir {args.job_dir}: is a file, not a directory")
    if args.seed + preset.n_envs > MAX_SEED:
        raise WorkerInputError(f"--seed {args.seed}: must be at most {MAX_SEED - preset.n_envs} (env seeds are 32-bit)")
    env = args.env or preset.env
    # A custom env, or one with env_kwargs, is built once here: a bad one is bad input (exit 2), not
    # a training failure to restart.
    backend = check_env(
        env,
        preset.env_kwargs,
        source="--env" if args.env else f"preset {preset.source}: env",
        kwargs_source=f"preset {preset.source}: env_kwargs",
    )
    device = resolve_device(args.device)
    # An episode target replaces the preset's default step target: no step total applies then.
    timesteps = 0 if args.episodes is not None else args.timesteps or preset.timesteps
    threads = args.threads or max(1, min(preset.n_envs, len(os.sched_getaffinity(0))))
    torch_threads = args.torch_threads or torch_threads_for(device, args.threads)
    return JobConfig(
        preset,
        env,
        backend,
        timesteps,
        args.job_dir,
        args.seed,
        device,
        threads,
        torch_threads,
        args.eval_episodes,
        args.episodes,
        args.tensorboard,
    )


class _ConsoleEvents(EventWriter):
    """Writes events and also prints a short human line for them (progress at most every 5 s)."""

    _last_print = 0.0

    def emit(self, event: E) -> E:
        super().emit(event)
        now = time.monotonic()
        if isinstance(event, ProgressEvent) and now - self._last_print >= PROGRESS_PRINT_INTERVAL:
            self._last_print = now
            rew = "n/a" if event.ep_rew_mean is None else f"{event.ep_rew_mean:.1f}"
            sps = "n/a" if event.sps is None else f"{event.sps:>8.0f}"
            print(f"[worker] {event.num_timesteps:>10,} steps  {sps} sps  ep_rew_mean {rew}", flush=True)
        elif isinstance(event, (CheckpointEvent, EvaluatedEvent, FinishedEvent, ErrorEvent)):
            detail = {k: v for k, v in to_json(event).items() if k not in ("t", "kind")}
            print(f"[worker] {event.kind}: {detail}", flush=True)
        return event


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def _disk_full_error(exc: BaseException) -> OSError | None:
    """The ENOSPC or EDQUOT OSError behind `exc`: itself, or one in its cause or context chain
    (torch's zip writer raises a RuntimeError from a failed write, or the OSError with that
    RuntimeError as its context)."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in DISK_FULL_ERRNOS:
            return current
        pending += [current.__cause__, current.__context__]
    return None


def disk_full_message(exc: BaseException, job_dir: Path) -> str | None:
    """For a write that failed for want of space: "<free> free on <path>: <strerror>", naming the
    file when the error does (else the job dir); None for any other error."""
    full = _disk_full_error(exc)
    if full is None:
        return None
    path = Path(os.fsdecode(full.filename)) if isinstance(full.filename, (str, bytes)) else job_dir
    return f"{free_space(path)} free on {path}: {full.strerror or os.strerror(full.errno)}"


def _error_type(exc: BaseException) -> str:
    from cockpit_training.device import is_cuda_oom

    if _disk_full_error(exc) is not None:
        return DISK_FULL_ERROR
    return "cuda_oom" if is_cuda_oom(exc) else type(exc).__name__


def _report_failure(events: EventWriter, exc: Exception, job_dir: Path) -> int:
    """Report why training failed and return the exit code: DISK_FULL_EXIT for a full disk (also
    when the report itself hits the full disk: the exit code alone then says so), else 1."""
    full = disk_full_message(exc, job_dir)
    try:
        if full is not None:
            events.error(type=DISK_FULL_ERROR, message=full)
            print(f"[worker] error: disk full: {full}", file=sys.stderr, flush=True)
            return DISK_FULL_EXIT
        events.error(type=_error_type(exc), message=f"{type(exc).__name__}: {exc}")
        traceback.print_exc()
    except OSError as report_failed:
        if full is not None or _disk_full_error(report_failed) is not None:
            return DISK_FULL_EXIT
        raise
    return 1


def train(config: JobConfig, stop: StopFlag, events: EventWriter, received_at: float | None = None) -> int:
    """Build or resume the model, train it to its target, checkpoint, evaluate, and report. Returns 0.

    The events, in order: `started`; the callback's `phase`, `progress`, `heartbeat` and periodic
    `checkpoint` events; a last `checkpoint` unless its step is saved already; `evaluated` when the
    target was reached and `config.eval_episodes` asks for it; `finished` (`done` or `stopped`). A
    stop asked for before anything is built emits `finished` alone. Failures propagate (`run_job`
    reports them); the VecEnv is closed either way.

    `received_at`: when this job was handed to the process (a served worker's); the `started`
    event's `startup_s` counts from it, else from the process's start."""
    _import_job_modules()
    from cockpit_training.checkpoints import CheckpointStore
    from cockpit_training.device import apply_torch_threads, enable_tf32
    from cockpit_training.envs import make_vec_env

    started = time.time()
    apply_torch_threads(config.torch_threads)
    if config.device == "cuda":
        enable_tf32()
    preset = config.preset
    store = CheckpointStore(JobDir(config.job_dir).checkpoints)
    # A resumed run must not replay the first run's env and action randomness from its start.
    newest = store.list()
    offset = int(newest[-1].name.split("-")[1]) if newest else 0
    if stop.requested:  # asked to stop while importing: nothing trained, nothing to save
        events.finished(status="stopped", steps=offset, duration=round(time.time() - started, 3))
        return 0
    venv = make_vec_env(
        config.env,
        preset.n_envs,
        seed=config.seed + offset,
        threads=config.threads,
        env_kwargs=preset.env_kwargs,
        vec_env=preset.vec_env,
        report=lambda line: print(f"[worker] {line}", file=sys.stderr, flush=True),
    )
    try:
        job = _build_or_resume(config, store, venv)
        target = _learn_target(config, job)
        _report_started(config, job, target, events, received_at)
        callback = _make_callback(config, job, stop, events)
        # Nothing to train (a finished job run again, a resume past the target) or a stop during
        # the start-up: straight to the final checkpoint and `finished`.
        if target > job.model.num_timesteps and not stop.requested:
            save_with_parent(stop)
            _learn(job.model, target, callback)
        _finish(config, job, callback.episodes, stop, events, started, iteration=callback.iteration)
        return 0
    finally:
        venv.close()


def _import_job_modules() -> None:
    """Import everything `train` and its steps use. `train` does it before it checks its stop flag,
    so a stop asked for during these seconds of imports ends the job before anything is built or
    reported as started. (The cockpit's death during them kills the worker outright:
    `die_with_parent`.)"""
    import psutil  # noqa: F401
    import stable_baselines3.common.vec_env  # noqa: F401
    import torch  # noqa: F401

    import cockpit_training.callback
    import cockpit_training.checkpoints
    import cockpit_training.device
    import cockpit_training.envs
    import cockpit_training.model
    import cockpit_training.stopping  # noqa: F401


class _Checkpoints:
    """The job's checkpoint writer, shared by the callback's periodic saves and the final one.

    It knows the newest checkpoint (the resumed one's, then each save's): its step, `last_saved`
    (None before the first), so the final save is skipped when that step is saved already; and the
    whole episodes finished by it, `saved_episodes` (0 before the first), where the job's episode
    count starts. Each save records the count of `counter` (the callback, once attached)."""

    def __init__(
        self, store: CheckpointStore, vecnorm: VecNormalize | None, *, last_saved: int | None, saved_episodes: int
    ) -> None:
        self.store = store
        self.vecnorm = vecnorm
        self.last_saved = last_saved
        self.saved_episodes = saved_episodes
        self.counter: CockpitCallback | None = None

    def save(self, model: PPO) -> tuple[str, int]:
        """Write `model`'s checkpoint at its step (with the VecNormalize statistics); its path and
        step, as CockpitCallback's `checkpoint` returns them. Write errors propagate."""
        episodes = self.counter.episodes if self.counter is not None else self.saved_episodes
        saved = self.store.save(model, model.num_timesteps, self.vecnorm, episodes=episodes)
        self.last_saved, self.saved_episodes = saved.step, episodes
        return str(saved.path), saved.step


@dataclass
class _Job:
    """A job's model, built or resumed, what it was resumed from, and its checkpoint writer."""

    model: PPO
    resumed: Resumed
    checkpoints: _Checkpoints

    @property
    def vecnorm(self) -> VecNormalize | None:
        """The model's VecNormalize wrapper, which its checkpoints save beside it (None: none)."""
        return self.checkpoints.vecnorm


def _build_or_resume(config: JobConfig, store: CheckpointStore, venv: VecEnv) -> _Job:
    """The model on `venv`: resumed from the newest checkpoint in `store` that loads (a warning on
    stderr for each corrupt one passed over), else a new one, normalized when the preset says so.
    Raises CheckpointMismatch when that checkpoint cannot continue under this preset and env."""
    from stable_baselines3.common.vec_env import VecNormalize

    from cockpit_training.model import new_model, resume

    preset = config.preset
    tensorboard_log = _tensorboard_log(config)
    resumed = resume(store, preset, venv, device=config.device, tensorboard_log=tensorboard_log)
    for bad in resumed.corrupt:
        warning = f"checkpoint {bad.path} is corrupt ({bad.reason}); using an older one"
        print(f"[worker] warning: {warning}", file=sys.stderr)
    model, vecnorm = resumed.model, resumed.vecnormalize
    if model is None:
        if preset.normalize:
            vecnorm = VecNormalize(venv, gamma=preset.gamma)
        model = new_model(
            preset, vecnorm or venv, seed=config.seed, device=config.device, tensorboard_log=tensorboard_log
        )
    else:
        model.set_random_seed(config.seed + model.num_timesteps)
    checkpoint = resumed.checkpoint
    # Whole episodes finished by the checkpoint: an episode target counts on from there (the
    # episodes under way at a kill are lost with the steps after the checkpoint).
    checkpoints = _Checkpoints(
        store,
        vecnorm,
        last_saved=checkpoint.step if checkpoint else None,
        saved_episodes=(checkpoint.episodes if checkpoint else None) or 0,
    )
    return _Job(model, resumed, checkpoints)


def _learn_target(config: JobConfig, job: _Job) -> int:
    """The step total to give `learn()`; at most the model's steps when nothing is left to train."""
    model = job.model
    if config.episodes is not None:
        # No step total: learn() runs until the callback ends it at the target's rollout
        # boundary. A `linear` schedule then has no horizon and stays at its start values.
        return _EPISODE_RUN_STEPS if job.checkpoints.saved_episodes < config.episodes else model.num_timesteps
    # The first whole vector step at or past the target, counted from where this run starts
    # (a resumed job may have run with another n_envs before).
    n_envs = config.preset.n_envs
    return model.num_timesteps + math.ceil(max(0, config.timesteps - model.num_timesteps) / n_envs) * n_envs


def _report_started(config: JobConfig, job: _Job, target: int, events: EventWriter, received_at: float | None) -> None:
    """Emit the `started` event: the config, the model, what it resumed from, and the target."""
    import psutil
    import torch

    from cockpit_training.callback import package_versions

    checkpoint = job.resumed.checkpoint
    now = time.time()
    events.emit(
        StartedEvent(
            now,
            config=config.as_dict(),
            pid=os.getpid(),
            device=str(job.model.device),
            versions=package_versions(),
            resumed_from_step=checkpoint.step if checkpoint else None,
            target_steps=target if config.episodes is None else None,
            target_episodes=config.episodes,
            resumed_episodes=checkpoint.episodes if checkpoint else None,
            corrupt_checkpoints=tuple(CorruptCheckpoint(str(c.path), c.reason) for c in job.resumed.corrupt),
            policy=type(job.model.policy).__name__,
            torch_threads=torch.get_num_threads(),
            startup_s=round(now - (psutil.Process().create_time() if received_at is None else received_at), 3),
            tf32=bool(torch.backends.cuda.matmul.allow_tf32),
        )
    )


def _make_callback(config: JobConfig, job: _Job, stop: StopFlag, events: EventWriter) -> CockpitCallback:
    """The callback that reports the training, checkpoints every `checkpoint_every` steps through
    `job.checkpoints` (which then records its episode count), and ends `learn()` at a stop or at
    the episode target. It leaves `started` and `finished` to the worker."""
    from cockpit_training.callback import CockpitCallback

    callback = CockpitCallback(
        events,
        stop=stop,
        checkpoint=job.checkpoints.save,
        checkpoint_every=config.preset.checkpoint_every,
        emit_started=False,
        target_episodes=config.episodes,
        episodes=job.checkpoints.saved_episodes,
    )
    job.checkpoints.counter = callback
    return callback


def _learn(model: PPO, target: int, callback: CockpitCallback) -> None:
    """Train `model` up to `target` steps in all, until the callback ends it (a stop, the episode
    target), then report the last progress unless the episode target's rollout start already did.
    Other errors propagate; the callback's optimizer hook and the model's logger are closed either way."""
    from cockpit_training.callback import EpisodeTargetReached
    from cockpit_training.model import close_logger
    from cockpit_training.stopping import StopRequested

    reached = False
    try:
        # The same run directory at every start (`TB_SB3_RUN`): reset_num_timesteps=False.
        model.learn(
            target - model.num_timesteps,
            callback=callback,
            reset_num_timesteps=False,
            log_interval=1,
            tb_log_name=TB_LOG_NAME,
        )
    except EpisodeTargetReached:
        reached = True  # at a rollout start, which already reported the final progress
    except StopRequested:
        pass
    finally:
        callback.close()
        close_logger(model)
    if not reached:
        callback.emit_progress(with_losses=True)


def _finish(
    config: JobConfig, job: _Job, episodes: int, stop: StopFlag, events: EventWriter, started: float, *, iteration: int
) -> None:
    """End the job: checkpoint the model unless its step is saved already, evaluate it when it
    reached its target (`episodes` whole episodes, or the step total) and `config.eval_episodes`
    asks for it, and emit `finished`: `done`, or `stopped` short of the target or when a stop
    came during the evaluation. `started`: the job's start, for the duration; `iteration`: the
    last rollout's, which the score phase carries."""
    from cockpit_training.stopping import StopRequested

    steps = job.model.num_timesteps
    if steps > 0 and steps != job.checkpoints.last_saved:
        path, step = job.checkpoints.save(job.model)
        events.checkpoint(path=path, step=step)
    status: FinishStatus
    if config.episodes is not None:
        status = "done" if episodes >= config.episodes else "stopped"
    else:
        status = "done" if steps >= config.timesteps else "stopped"
    if status == "done" and config.eval_episodes:
        try:
            _evaluate(config, job.model, job.vecnorm, stop, events, trained_episodes=episodes, iteration=iteration)
        except StopRequested:
            status = "stopped"  # a stop during the evaluation: the next start evaluates again
    events.finished(status=status, steps=steps, duration=round(time.time() - started, 3))


def _tensorboard_log(config: JobConfig) -> Path | None:
    """Where SB3 logs the job's scalars, `<job dir>/tb`; None when turned off (`--no-tensorboard`),
    or when stable-baselines3 cannot write TensorBoard files here (one line says why)."""
    from cockpit_training.model import sb3_logs_tensorboard

    if not config.tensorboard:
        return None
    if not sb3_logs_tensorboard():
        print(
            "[worker] no TensorBoard logs: stable-baselines3 cannot import torch.utils.tensorboard "
            "(pip install 'cockpit[tensorboard]')",
            file=sys.stderr,
            flush=True,
        )
        return None
    return JobDir(config.job_dir).tensorboard


# learn()'s total under an episode target: far past any run, so only the callback ends it.
_EPISODE_RUN_STEPS = 2**62

EVAL_SEED = 1_000_003  # every agent is scored on the same games, unlike any training seed


# A heartbeat at least this often in a long evaluation episode: the stall watch hears a live worker.
SCORE_HEARTBEAT_S = 5.0


def _evaluate(
    config: JobConfig,
    model: Any,
    vecnorm: Any,
    stop: StopFlag,
    events: EventWriter,
    *,
    trained_episodes: int,
    iteration: int,
) -> None:
    """Score `model` over `config.eval_episodes` deterministic episodes on a new VecEnv (`eval_envs`
    envs) seeded `EVAL_SEED`, normalized with the training statistics frozen, and
    emit `evaluated` (with the `trained_episodes` the model had trained on). A `score` phase
    (carrying `iteration`) opens it, and a heartbeat with the episodes scored so far follows each
    episode's end and every `SCORE_HEARTBEAT_S` of a long one: the viewers' progress, and the stall
    watch's sign of life. StopRequested when a stop is asked for meanwhile."""
    import copy

    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    from cockpit_training.envs import make_vec_env
    from cockpit_training.stopping import StopRequested

    assert config.eval_episodes is not None
    to_score = config.eval_episodes
    started = time.monotonic()
    steps = model.num_timesteps
    events.phase("score", iteration=iteration, num_timesteps=steps)
    events.heartbeat("score", num_timesteps=steps, scored=0, to_score=to_score)
    # Several envs at once: one forward pass serves them all (evaluate_policy splits the episodes
    # among them), which made a CartPole fleet's scoring several times cheaper than one env.
    n_envs = eval_envs(config.eval_episodes, config.preset.n_envs)
    venv = make_vec_env(
        config.env,
        n_envs,
        seed=EVAL_SEED,
        threads=min(n_envs, config.threads),
        env_kwargs=config.preset.env_kwargs,
        vec_env=config.preset.vec_env,
    )
    try:
        env: Any = venv
        if vecnorm is not None:
            env = VecNormalize(venv, training=False, norm_reward=False, gamma=config.preset.gamma)
            env.obs_rms = copy.deepcopy(vecnorm.obs_rms)

        last = {"scored": 0, "at": time.monotonic()}

        def check_stop(locals_: dict[str, Any], _globals: dict[str, Any]) -> None:
            if stop.requested:
                raise StopRequested
            # evaluate_policy's own count of the episodes each env has finished.
            scored = int(sum(locals_.get("episode_counts", ())))
            if scored != last["scored"] or time.monotonic() - last["at"] >= SCORE_HEARTBEAT_S:
                last["scored"], last["at"] = scored, time.monotonic()
                events.heartbeat("score", num_timesteps=steps, scored=min(scored, to_score), to_score=to_score)

        mean, std = evaluate_policy(
            model, env, n_eval_episodes=config.eval_episodes, deterministic=True, callback=check_stop, warn=False
        )
    finally:
        venv.close()
    events.evaluated(
        step=model.num_timesteps,
        mean_reward=float(mean),
        std_reward=float(std),
        episodes=config.eval_episodes,
        seed=EVAL_SEED,
        seconds=round(time.monotonic() - started, 3),
        trained_episodes=trained_episodes,
    )


def _input_error(message: str) -> int:
    print(f"python -m cockpit_training.worker: error: {message}", file=sys.stderr)
    return 2


def _lock_job_dir(job_dir: Path) -> int | None:
    """Take an exclusive lock on the job dir, held until the fd is closed (at the end of `run_job`,
    or with the process); None if another holds it.

    Two workers on one dir would prune each other's checkpoints (a restart issued while the old
    worker is still checkpointing its way out, say).
    """
    fd = os.open(JobDir(job_dir).lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def main(argv: list[str] | None = None) -> int:
    """Run the worker; returns its exit code (0 done or stopped, 1 failed, 2 bad input, 3 disk full).
    With `--serve`, run job after job from stdin instead (`serve`)."""
    if SERVE_FLAG in (sys.argv[1:] if argv is None else argv):
        return serve(ServeArgs.parse(argv))
    stop = StopFlag()
    stop.install_signal_handlers()
    die_with_parent()  # until `train` has something to save
    limit_native_threads()
    return run_job(argv, stop)[0]


def run_job(argv: list[str] | None, stop: StopFlag, received_at: float | None = None) -> tuple[int, Exception | None]:
    """Run one job from its flags: its exit code, and the exception that failed its training (None
    when it did not fail that way). The job dir's lock is held until it returns."""
    from cockpit.contract.envids import EnvError
    from cockpit_training.model import CheckpointMismatch

    args = WorkerArgs.parse(argv)
    try:
        config = resolve_config(args)
    except (PresetError, WorkerInputError, EnvError, DeviceError) as exc:
        if args.job_dir.is_dir():
            # The supervisor made the job dir; it learns why this job cannot start from the event.
            invalid = EventWriter(args.job_dir / EVENTS_FILE)
            try:
                invalid.error(type="invalid_config", message=str(exc))
            finally:
                invalid.close()
        return _input_error(str(exc)), None

    try:
        config.job_dir.mkdir(parents=True, exist_ok=True)
        lock = _lock_job_dir(config.job_dir)
        if lock is None:
            return _input_error(f"--job-dir {config.job_dir}: another worker is using it"), None
    except OSError as exc:
        if _disk_full_error(exc) is None:
            raise
        return DISK_FULL_EXIT, None  # nowhere to say more: not even the lock file fits
    try:
        try:
            events = _ConsoleEvents(config.job_dir / EVENTS_FILE)
        except OSError as exc:
            if _disk_full_error(exc) is None:
                raise
            return DISK_FULL_EXIT, None  # not even the event stream fits
        try:
            return train(config, stop, events, received_at), None
        except CheckpointMismatch as exc:
            events.error(type="invalid_config", message=str(exc))
            return _input_error(str(exc)), None
        except Exception as exc:
            return _report_failure(events, exc, config.job_dir), exc
        finally:
            events.close()
    finally:
        os.close(lock)  # a served worker's next job may be on this dir, or another worker's


# The served worker: one process, many jobs.


def serve(opts: ServeArgs) -> int:
    """Import once, then run job after job: read one request per line on stdin (a JSON list of a
    worker's flags), run it as `main` would in a fresh process, with fds 1 and 2 appended to the
    job dir's stdout.log and stderr.log (/dev/null between jobs), and write its exit code as one
    `status_line` to `opts.status_fd` (where `READY_LINE` said first that the imports are done).
    Each job gets a fresh StopFlag; SIGTERM or SIGINT during a
    job stops that job only. Returns 0 on EOF, after `opts.max_jobs` jobs, after a job whose
    failure may have broken the process (CUDA), or when the status pipe is gone; SIGTERM or
    SIGINT between jobs kills the process (exit by that signal). The cockpit's death kills it at
    once while it imports or waits, and stops a job that trains (`train`, `save_with_parent`),
    after which it exits. Each job's `startup_s` counts
    from when its request was sent: a fresh process's first job's includes the imports, a
    spare's (started ahead of its first job) does not.
    """
    signals = JobSignals()
    wake = signals.install()
    die_with_parent()  # between jobs: nothing to save (each job's `train` saves while it trains)
    limit_native_threads()
    _import_training_stack()
    try:
        os.write(opts.status_fd, READY_LINE)  # the pool's watch of its spares
    except OSError:
        return 0  # whoever started it is gone
    devnull = os.open(os.devnull, os.O_WRONLY)
    requests = _Requests(wake, signals)
    for count in range(1, opts.max_jobs + 1):
        line = requests.next()
        if line is None:
            signals.die_of_quit()  # returns on EOF only
            return 0
        stop = signals.begin_job()
        try:
            code, failure = _serve_one(line, stop, devnull)
        finally:
            die_with_parent()  # the job is over: nothing to save until the next one trains
        retiring = count == opts.max_jobs or _breaks_process(failure)
        try:
            os.write(opts.status_fd, status_line(code, retiring=retiring))
        except OSError:
            return 0  # whoever sent the job is gone
        finally:
            signals.end_job()
        if retiring:
            return 0
        del failure
        gc.collect()  # the job's model, buffers and env, before the next job's
    return 0


def _import_training_stack() -> None:
    """Import what every job needs (torch, SB3, envpool, gymnasium, the parts torch loads at a first
    optimizer), once per served process."""
    _import_job_modules()
    import cockpit_training.envpool_vec
    import cockpit_training.model

    cockpit_training.model.import_lazy_parts()


class _Requests:
    """Job requests, one per line on stdin, waited for with `select` beside the signal wake-up pipe."""

    def __init__(self, wake: int, signals: JobSignals) -> None:
        self.wake = wake
        self.signals = signals
        self.pending = b""

    def next(self) -> bytes | None:
        """The next request line; None on EOF or on a signal while waiting."""
        while b"\n" not in self.pending:
            if self.signals.quit is not None:
                return None
            readable, _, _ = select.select([0, self.wake], [], [])
            if self.wake in readable:
                while True:
                    try:
                        if not os.read(self.wake, 256):
                            break
                    except BlockingIOError:
                        break
            if 0 in readable:
                data = os.read(0, 65536)
                if not data:
                    return None
                self.pending += data
        line, _, self.pending = self.pending.partition(b"\n")
        return line


def _serve_one(line: bytes, stop: StopFlag, devnull: int) -> tuple[int, Exception | None]:
    """Run one request with its output in its job dir's logs; its exit code and failure."""
    try:
        argv, received_at = decode_request(line)
    except ValueError as exc:
        print(f"[worker] bad job request: {exc}", file=sys.stderr, flush=True)
        return 2, None
    _redirect_output(_job_dir_of(argv))
    try:
        return run_job(argv, stop, received_at)
    except SystemExit as exc:  # argparse's exit 2 on bad flags (or 0 for --help)
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0, None
        print(exc.code, file=sys.stderr)
        return 1, None
    except Exception as exc:  # what would have ended a fresh worker with a traceback
        traceback.print_exc()
        return 1, exc
    finally:
        _redirect_output(None, devnull)


def _job_dir_of(argv: list[str]) -> Path | None:
    """The `--job-dir` in a job's flags, before they are parsed (their errors go to its log)."""
    for i, arg in enumerate(argv):
        if arg == "--job-dir" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith("--job-dir="):
            return Path(arg.split("=", 1)[1])
    return None


def _redirect_output(job_dir: Path | None, fallback: int | None = None) -> None:
    """Point fds 1 and 2 at the job dir's stdout.log and stderr.log (appending, as a launcher
    starts a fresh worker), or at `fallback`; flushes what was written before. Left as they are
    when the logs cannot be opened."""
    sys.stdout.flush()
    sys.stderr.flush()
    _flush_c_stdio()
    for fd, path in (
        (1, JobDir(job_dir).stdout_log if job_dir else None),
        (2, JobDir(job_dir).stderr_log if job_dir else None),
    ):
        if path is None:
            if fallback is not None:
                os.dup2(fallback, fd)
            continue
        try:
            opened = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError:
            continue
        os.dup2(opened, fd)
        os.close(opened)


def _flush_c_stdio() -> None:
    """fflush(NULL): C code's buffered output belongs to the job that wrote it."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)


def _breaks_process(failure: Exception | None) -> bool:
    """Whether a job's failure may have left the process unfit for another job: any CUDA error
    (an out-of-memory or a device fault can leave the CUDA context unusable)."""
    if failure is None:
        return False
    from cockpit_training.device import is_cuda_oom

    return is_cuda_oom(failure) or "CUDA" in str(failure)


if __name__ == "__main__":
    sys.exit(main())
