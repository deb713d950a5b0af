"""Starting a player (`python -m cockpit_training.play`) and reading what it left.

A player is a worker's kin: its own session (process group), at the lowest priority (nice 19),
following the cockpit's death like a worker, one-thread native pools unless `threads` says more, and
the CPU for its policy (`PlayRequest.device`). Recording then takes no GPU memory and only the
cycles training leaves, so a clip made beside running jobs costs them little.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from cockpit.contract.checkpoint_files import MODEL_FILE, VECNORMALIZE_FILE, newest_checkpoint, unverified
from cockpit.contract.events import StartedEvent, iter_events
from cockpit.contract.play import PlayRequest, PlayResult
from cockpit.contract.rundir import JobDir
from cockpit.contract.workerargs import THREAD_ENV_VARS
from cockpit.core.launch.local import worker_env

# The lowest priority Linux has (nice 19): beside workers at WORKER_NICE, a player gets about an
# eighth of a shared core's time under CFS's weights, so a clip takes the cycles training leaves
# rather than an equal share of them, which is what a player as nice as a worker took.
PLAYER_NICE = 19


@dataclass(frozen=True)
class JobModel:
    """A job's model as a player loads it: the checkpoint directory it comes from (`source`), its
    `model.zip` and VecNormalize statistics (None when the job did not normalize), and the env and
    the preset's `env_kwargs` the job trained on, as its worker recorded them."""

    source: Path
    model: Path
    vecnormalize: Path | None
    env: str
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def request(self, result: Path, **options: Any) -> PlayRequest:
        """The `PlayRequest` that plays this model, writing its result to `result`; `options` are
        the request's other fields (episodes, video, seed...)."""
        return PlayRequest(
            model=self.model,
            env=self.env,
            result=result,
            vecnormalize=self.vecnormalize,
            env_kwargs=dict(self.env_kwargs),
            source=str(self.source),
            **options,
        )


def trained_env(job_dir: Path) -> tuple[str, dict[str, Any]]:
    """The env id and the preset's `env_kwargs` the job in `job_dir` trained on, from its newest
    `started` event that names an env (a resumed job's config is its last start's). ValueError (one
    line naming the directory) when there is no such job or no started event names an env: then
    nothing says which settings the model needs, and none are guessed."""
    files = JobDir(job_dir)
    if not files.events.is_file():
        raise ValueError(f"{job_dir}: not a job directory (no {files.events.name})")
    config: Mapping[str, Any] = {}
    for event in iter_events(files.events):
        if isinstance(event, StartedEvent) and event.config.get("env"):
            config = event.config
    if not config:
        raise ValueError(f"{job_dir}: its events record no env (a user's script's job has no model to play)")
    preset = config.get("preset")
    kwargs = preset.get("env_kwargs", {}) if isinstance(preset, Mapping) else {}
    return str(config["env"]), dict(kwargs or {})


def job_model(job_dir: Path, checkpoint: Path | None = None) -> JobModel:
    """The model of the job in `job_dir`: `checkpoint` (a checkpoint directory) when given, else the
    job's newest (the final model of a finished job: the worker checkpoints at its end), its files
    checked against the SHA-256 sums its worker recorded; the env and env_kwargs from the job's
    newest `started` event (`trained_env`). ValueError (one line naming the directory) when there is
    no such job, no checkpoint, or a checkpoint that fails its sums."""
    env, env_kwargs = trained_env(job_dir)
    chosen = checkpoint if checkpoint is not None else newest_checkpoint(JobDir(job_dir).checkpoints)
    if chosen is None:
        raise ValueError(
            f"{job_dir}: no checkpoint yet (a job checkpoints every checkpoint_every steps and at its end)"
        )
    if not (chosen / MODEL_FILE).is_file():
        raise ValueError(f"--checkpoint {chosen}: not a checkpoint directory (no {MODEL_FILE})")
    problem = unverified(chosen)
    if problem is not None:
        raise ValueError(problem)
    vecnormalize = chosen / VECNORMALIZE_FILE
    return JobModel(
        source=chosen,
        model=chosen / MODEL_FILE,
        vecnormalize=vecnormalize if vecnormalize.is_file() else None,
        env=env,
        env_kwargs=env_kwargs,
    )


def start_player(
    request: PlayRequest,
    *,
    nice: int = PLAYER_NICE,
    python: str = sys.executable,
    stdout: int | IO[bytes] | None = subprocess.PIPE,
    stderr: int | IO[bytes] | None = subprocess.PIPE,
    threads: int = 1,
) -> subprocess.Popen[bytes]:
    """Start the player for `request` in its own session, `nice` steps nicer than this process (at
    most nice 19, the lowest priority), with
    `threads` threads for numpy and torch; stdout carries its progress lines
    (`cockpit.contract.play.parse_episode_line`). The caller waits for it (or kills its process group:
    `os.killpg(proc.pid, SIGKILL)`) and then reads `request.result` with `read_result`."""
    request.result.parent.mkdir(parents=True, exist_ok=True)
    env = {**worker_env(), **{var: str(threads) for var in THREAD_ENV_VARS}}
    proc = subprocess.Popen(
        request.command(python),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env=env,
        start_new_session=True,
    )
    # As the launcher does: from here, not a preexec_fn (unsafe in a threaded parent such as the TUI).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if nice:
            os.setpriority(os.PRIO_PROCESS, proc.pid, min(19, os.getpriority(os.PRIO_PROCESS, 0) + nice))
    return proc


def read_result(path: Path) -> PlayResult:
    """The result a player wrote at `path`; ValueError (one line naming the file) when there is none
    (the player died before writing it) or it is not one."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{path}: no play result ({exc.strerror or exc})") from None
    try:
        return PlayResult.from_json(text)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
