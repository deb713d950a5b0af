"""`CockpitCallback`: an SB3 callback that reports a PPO run to the cockpit as job events.

It works in any SB3 on-policy script, not just the cockpit's worker:

    from cockpit.callback import CockpitCallback
    model.learn(1_000_000, callback=CockpitCallback())

With no arguments it reports to the job that `cockpit run -- python train.py` started the script
for (its directory is in `COCKPIT_JOB_DIR`); run outside the cockpit, it does nothing at all.
`CockpitCallback.for_job_dir(DIR)` reports to a job directory of your choosing. There,
`CockpitCallback(checkpoint_every=N)` also saves the model every N steps into the job's
checkpoints (atomically, the newest two kept) and reports each, and after a restart
`CockpitCallback.newest_checkpoint()` names the model file to go on from.

SB3 calls `on_rollout_start` when it starts collecting and `on_rollout_end` when the rollout
buffer is full and training is about to start, so those two hooks mark the phases exactly. The
loss statistics of a train phase sit in the SB3 logger until the next `dump_logs`, which comes
after the next rollout, so they are read at the next `on_rollout_start`.

A train phase reports nothing until it ends, and a first one can last minutes on a CPU; the
cockpit calls a worker that writes no event for too long stalled and kills it. So during a train
phase the optimizer's step hook emits a `heartbeat` event every `heartbeat_interval` seconds
(the first that long into the phase): a silent worker is a hung one, not a slow one.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from cockpit.contract.events import EVENTS_FILE, EventWriter
from cockpit.contract.rundir import JobDir
from cockpit.contract.scriptargs import JOB_DIR_ENV
from cockpit_training.checkpoints import CheckpointStore
from cockpit_training.device import cuda_memory
from cockpit_training.stopping import StopFlag, StopRequested

VERSIONED_PACKAGES = ("torch", "stable-baselines3", "envpool", "gymnasium", "numpy")
# Seconds between heartbeats in a train phase: far below the cockpit's 60-s minimum stall timeout,
# and rare enough to cost nothing (one short line per 5 s of training).
HEARTBEAT_INTERVAL_S = 5.0

# SB3 logger keys of PPO's train phase, reported under their short names.
_LOSS_KEYS = (
    "loss",
    "policy_gradient_loss",
    "value_loss",
    "entropy_loss",
    "approx_kl",
    "clip_fraction",
    "explained_variance",
    "learning_rate",
    "clip_range",
)


class EpisodeTargetReached(StopRequested):
    """Raised at a rollout start once the episode target is reached; `learn()` ends with it."""


def package_versions() -> dict[str, str]:
    """Versions of Python and the training stack, for the `started` event."""
    versions = {"python": sys.version.split()[0]}
    for name in VERSIONED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


class CockpitCallback(BaseCallback):
    """Emits `started`, `phase`, `progress` and `heartbeat` events, takes periodic checkpoints, and stops.

    - The run stops exactly at the total given to `learn` (SB3 alone finishes the whole rollout
      and overshoots); with `reset_num_timesteps=False` that total includes the earlier steps.
    - `target_episodes`: an episode target instead: the run ends after the train phase of the
      rollout in which the `target_episodes`-th whole episode ended, counting from `episodes`
      (the whole episodes a resumed job had finished by its checkpoint). `learn()` is then given a
      total it never reaches, and `EpisodeTargetReached` (a `StopRequested`) ends it at the next
      rollout start, before any env step of that rollout, so the step count stays on a rollout
      boundary. `self.episodes` counts whole episodes (those with SB3's `episode` info: whole
      games on Atari) in the steps `num_timesteps` counts.
    - `stop`: when its flag is set, stop at the next env step, or after the current optimizer
      step if a train phase is running.
    - `checkpoint`: called with the model at a rollout boundary (after training) whenever
      `checkpoint_every` more steps have passed; it returns the checkpoint path and step.
    - `started_extra`: more fields for the `started` event (config, resume details).
    - `heartbeat_interval`: seconds between `heartbeat` events during a train phase (see above).
    - `emit_started` (standalone use, the default): the callback also reports `started` when
      training starts and `finished` when `learn()` returns, and closes its event file. The
      worker turns this off because it checkpoints before it reports the end.

    A stop requested during a train phase raises `StopRequested` out of `learn()`; catch it to
    save the model.

    `events` None (`CockpitCallback()`): the job named by `COCKPIT_JOB_DIR`, when the cockpit
    started this process; without it the callback is inert and leaves training as it was.
    """

    def __init__(
        self,
        events: EventWriter | None = None,
        *,
        stop: StopFlag | None = None,
        checkpoint: Callable[[Any], tuple[str, int]] | None = None,
        checkpoint_every: int = 0,
        progress_interval: float = 1.0,
        heartbeat_interval: float = HEARTBEAT_INTERVAL_S,
        started_extra: Mapping[str, Any] | None = None,
        emit_started: bool = True,
        target_episodes: int | None = None,
        episodes: int = 0,
    ) -> None:
        super().__init__(verbose=0)
        job_dir = os.environ.get(JOB_DIR_ENV)
        if events is None and job_dir:
            events = EventWriter(Path(job_dir) / EVENTS_FILE)
            if checkpoint is None and checkpoint_every:  # a script's checkpoints, in its job's directory
                checkpoint = _store_in(Path(job_dir))
        self.active = events is not None  # False: not under the cockpit, so nothing to report
        self.events = events if events is not None else EventWriter(Path(os.devnull))
        self.target_timesteps = 0
        self.stop = stop or StopFlag()
        self._checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every
        self.progress_interval = progress_interval
        self.heartbeat_interval = heartbeat_interval
        self._last_heartbeat = 0.0  # monotonic: the train phase's start, then its last heartbeat
        self.started_extra = dict(started_extra or {})
        self.emit_started = emit_started
        self.iteration = 0
        self.episodes = episodes
        self.target_episodes = target_episodes
        self._next_checkpoint = 0
        self._last_progress_t = 0.0
        self._last_progress_steps = 0
        self._hook: Any = None
        self._t0 = 0.0

    @classmethod
    def for_job_dir(cls, job_dir: str | Path, **kwargs: Any) -> CockpitCallback:
        """A callback writing to `<job_dir>/events.jsonl`, for use in a user's own script."""
        return cls(EventWriter(Path(job_dir) / EVENTS_FILE), **kwargs)

    @staticmethod
    def newest_checkpoint() -> Path | None:
        """The model file of the newest checkpoint that verifies in the cockpit job this process
        runs for (`checkpoint_every` wrote it before a crash or a stop); None outside the cockpit
        or before the first checkpoint."""
        job_dir = os.environ.get(JOB_DIR_ENV)
        if not job_dir:
            return None
        newest, _corrupt = CheckpointStore(JobDir(Path(job_dir)).checkpoints).newest_valid()
        return newest.model_path if newest is not None else None

    def _on_training_start(self) -> None:
        if not self.active:
            return
        # learn()'s own total, already including earlier steps when resuming.
        self.target_timesteps = int(self.locals["total_timesteps"])
        steps = self.num_timesteps
        self._last_progress_t, self._last_progress_steps = time.monotonic(), steps
        self._t0 = time.time()
        if self.checkpoint_every:
            self._next_checkpoint = (steps // self.checkpoint_every + 1) * self.checkpoint_every
        self._hook = self.model.policy.optimizer.register_step_post_hook(self._after_optimizer_step)
        if self.emit_started:
            extra = {
                "config": {},
                "versions": package_versions(),
                "target_steps": self.target_timesteps,
                "resumed_from_step": steps or None,
                **self.started_extra,
            }
            self.events.started(pid=os.getpid(), device=str(self.model.device), **extra)

    def _after_optimizer_step(self, *_: Any) -> None:
        if self.stop.requested:
            raise StopRequested(self.stop.reason)
        now = time.monotonic()
        if now - self._last_heartbeat >= self.heartbeat_interval:
            self._last_heartbeat = now
            self.events.heartbeat("train", num_timesteps=self.num_timesteps)

    def _on_rollout_start(self) -> None:
        if not self.active:
            return
        if self.iteration > 0:
            self.emit_progress(with_losses=True)
            self._maybe_checkpoint()
        if self.target_episodes is not None and self.episodes >= self.target_episodes:
            # The rollout that finished the target's episode has been trained: stop before any
            # step of the next one (returning False from a step would count that step first).
            raise EpisodeTargetReached(f"{self.episodes} whole episodes of {self.target_episodes}")
        self.events.phase("rollout", iteration=self.iteration, num_timesteps=self.num_timesteps)

    def _on_step(self) -> bool:
        if not self.active:
            return True
        dones = self.locals.get("dones")
        if dones is not None and dones.any():
            infos = self.locals["infos"]
            self.episodes += sum(1 for i in np.flatnonzero(dones) if "episode" in infos[i])
        if time.monotonic() - self._last_progress_t >= self.progress_interval:
            self.emit_progress(with_losses=False)
        if self.stop.requested:
            return False
        if self.num_timesteps < self.target_timesteps:
            return True
        # At the target: stopping on a rollout's last step would throw that whole rollout away
        # untrained, so let SB3 finish it; its learn loop then ends on its own.
        return self.locals.get("n_steps", -1) + 1 >= self.locals.get("n_rollout_steps", 0)

    def _on_rollout_end(self) -> None:
        if not self.active:
            return
        self.iteration += 1
        self.events.phase("train", iteration=self.iteration, num_timesteps=self.num_timesteps)
        self._last_heartbeat = time.monotonic()  # the phase event just said it is alive

    def _on_training_end(self) -> None:
        if not self.active:
            return
        self.close()
        if self.emit_started:
            status = "done" if self.num_timesteps >= self.target_timesteps else "stopped"
            self.events.finished(status=status, steps=self.num_timesteps, duration=round(time.time() - self._t0, 3))
            self.events.close()

    def close(self) -> None:
        """Remove the optimizer hook; safe to call more than once."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _maybe_checkpoint(self) -> None:
        if self._checkpoint is None or not self.checkpoint_every or self.num_timesteps < self._next_checkpoint:
            return
        self.save_checkpoint()
        self._next_checkpoint = (self.num_timesteps // self.checkpoint_every + 1) * self.checkpoint_every

    def save_checkpoint(self) -> None:
        """Write a checkpoint now (if a checkpoint function was given) and emit its event."""
        if self._checkpoint is not None:
            path, step = self._checkpoint(self.model)
            self.events.checkpoint(path=path, step=step)

    def progress_stats(self, *, with_losses: bool) -> dict[str, Any]:
        """The fields of a `progress` event as of now (also resets the SPS window); on CUDA, the
        worker's own allocator memory (`cuda_memory`)."""
        now, steps = time.monotonic(), self.num_timesteps
        elapsed = now - self._last_progress_t
        sps = (steps - self._last_progress_steps) / elapsed if elapsed > 0 else 0.0
        self._last_progress_t, self._last_progress_steps = now, steps
        buffer = self.model.ep_info_buffer or []
        stats: dict[str, Any] = {
            "num_timesteps": steps,
            "iteration": self.iteration,
            "sps": round(sps, 1),
            "ep_rew_mean": float(np.mean([e["r"] for e in buffer])) if buffer else None,
            "ep_len_mean": float(np.mean([e["l"] for e in buffer])) if buffer else None,
            "episodes": self.episodes,
        }
        stats.update(cuda_memory(self.model.device))
        if with_losses:
            logged = dict(self.model.logger.name_to_value)
            stats["losses"] = {k: float(logged[f"train/{k}"]) for k in _LOSS_KEYS if f"train/{k}" in logged}
        return stats

    def emit_progress(self, *, with_losses: bool) -> None:
        """Emit a `progress` event now; `with_losses` adds the last train phase's statistics."""
        self.events.progress(**self.progress_stats(with_losses=with_losses))


def _store_in(job_dir: Path) -> Callable[[Any], tuple[str, int]]:
    """A `checkpoint` function saving into `job_dir`'s checkpoints, as the worker's are saved."""
    store = CheckpointStore(JobDir(job_dir).checkpoints)

    def save(model: Any) -> tuple[str, int]:
        saved = store.save(model, model.num_timesteps)
        return str(saved.path), saved.step

    return save
