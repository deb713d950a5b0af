"""Building a PPO model from a preset, or resuming one from the newest valid checkpoint.

On resume the current preset's rollout and optimization settings replace the saved ones (so a
job restarted with a new n_envs or batch size, as the advisor does, trains with them), but the
env's spaces, the network, its activation and observation normalization must be the ones the
checkpoint was trained with.

With a `tensorboard_log` (the job's `tb/`), SB3's own logger writes its scalars there, its run
directory named by SB3 (`learn(tb_log_name=...)`); without one the model logs to memory only. The
caller closes the logger (`close_logger`) when the job ends.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from stable_baselines3 import PPO
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.save_util import load_from_zip_file
from stable_baselines3.common.utils import LinearSchedule
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

from cockpit.contract.presets import Preset
from cockpit_training.checkpoints import Checkpoint, CheckpointStore, CorruptCheckpoint
from cockpit_training.envs import policy_for

_ACTIVATIONS: dict[str, type[torch.nn.Module]] = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}


class CheckpointMismatch(ValueError):
    """A good checkpoint that cannot continue under this preset or env (spaces or network differ)."""


def ppo_hyperparameters(preset: Preset) -> dict[str, Any]:
    """The PPO constructor arguments a preset sets, schedules included (everything but the policy)."""
    learning_rate: Any = preset.learning_rate
    clip_range: Any = preset.clip_range
    if preset.schedule == "linear":
        learning_rate = LinearSchedule(preset.learning_rate, 0.0, 1.0)
        clip_range = LinearSchedule(preset.clip_range, 0.0, 1.0)
    return {
        "learning_rate": learning_rate,
        "n_steps": preset.n_steps,
        "batch_size": preset.batch_size,
        "n_epochs": preset.n_epochs,
        "gamma": preset.gamma,
        "gae_lambda": preset.gae_lambda,
        "clip_range": clip_range,
        "ent_coef": preset.ent_coef,
        "vf_coef": preset.vf_coef,
        "max_grad_norm": preset.max_grad_norm,
    }


def sb3_logs_tensorboard() -> bool:
    """Whether stable-baselines3 can write TensorBoard files here: its logger imports
    `torch.utils.tensorboard.SummaryWriter` when it loads, and has None in its place where that
    import failed (the `tensorboard` package is missing). A model given a `tensorboard_log`
    then would fail its first `learn()` with an ImportError."""
    from stable_baselines3.common import logger

    return logger.SummaryWriter is not None


def _logdir(tensorboard_log: Path | None) -> str | None:
    """`tensorboard_log` as SB3 takes it (a string path, None for none)."""
    return str(tensorboard_log) if tensorboard_log is not None else None


def _logger_for(model: PPO) -> PPO:
    """Without a `tensorboard_log`, give `model` a logger that keeps its values in memory only: left
    to itself, every `learn()` creates an empty `SB3-<timestamp>` directory in the system temp dir,
    one per job start. With one, `learn()` sets up SB3's own logger there."""
    if model.tensorboard_log is None:
        model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def close_logger(model: PPO) -> None:
    """Close what SB3's logger holds open (a TensorBoard event file and its writer thread): a
    served worker runs job after job in one process."""
    logger = getattr(model, "_logger", None)  # none before the first `learn()`
    if logger is not None:
        logger.close()


def import_lazy_parts() -> None:
    """Import what torch loads only when a process builds its first optimizer (its compiler
    stack, `torch._dynamo`: about 2 s on a CPU), so that a served worker pays it with its other
    imports, before any job waits on it, and the probe counts it in `import_s`."""
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])


def new_model(preset: Preset, venv: VecEnv, *, seed: int, device: str, tensorboard_log: Path | None = None) -> PPO:
    """A fresh PPO for `venv` with the preset's settings; CnnPolicy for images, else MlpPolicy. With
    `tensorboard_log`, SB3 logs its scalars there."""
    model = PPO(
        policy_for(venv.observation_space),
        venv,
        policy_kwargs={"net_arch": list(preset.net_arch), "activation_fn": _ACTIVATIONS[preset.activation]},
        seed=seed,
        device=device,
        verbose=0,
        tensorboard_log=_logdir(tensorboard_log),
        **ppo_hyperparameters(preset),
    )
    return _logger_for(model)


@dataclass
class Resumed:
    """The outcome of looking for a checkpoint to resume from."""

    model: PPO | None = None
    vecnormalize: VecNormalize | None = None
    checkpoint: Checkpoint | None = None
    corrupt: list[CorruptCheckpoint] = field(default_factory=list)


def _mismatches(data: dict[str, Any], checkpoint: Checkpoint, preset: Preset, venv: VecEnv) -> list[str]:
    """What makes the checkpoint unable to continue under this preset and env (empty if nothing)."""
    problems = []
    if data.get("observation_space") != venv.observation_space or data.get("action_space") != venv.action_space:
        problems.append(
            f"its env has observation space {data.get('observation_space')} and action space "
            f"{data.get('action_space')}, this env {venv.observation_space} and {venv.action_space} (another --env?)"
        )
    kwargs = data.get("policy_kwargs", {})
    if list(kwargs.get("net_arch", [])) != list(preset.net_arch):
        problems.append(f"its network is {list(kwargs.get('net_arch', []))}, the preset's {list(preset.net_arch)}")
    if kwargs.get("activation_fn") is not _ACTIVATIONS[preset.activation]:
        saved = getattr(kwargs.get("activation_fn"), "__name__", "?")
        problems.append(f"its activation is {saved}, the preset's {preset.activation}")
    if (checkpoint.vecnormalize_path is not None) != preset.normalize:
        problems.append(f"it was trained with normalize = {not preset.normalize}, the preset says {preset.normalize}")
    return problems


def resume(
    store: CheckpointStore, preset: Preset, venv: VecEnv, *, device: str, tensorboard_log: Path | None = None
) -> Resumed:
    """Load the newest checkpoint that verifies and deserializes; quarantine each one that does not.
    The model logs to `tensorboard_log` (None: to memory), whatever the checkpoint was trained with.

    Raises `CheckpointMismatch` when that checkpoint cannot continue under this preset and env
    (different spaces, network, activation or normalization): those checkpoints are good, so they
    stay. Errors other than a corrupt file (out of memory, a bad device) propagate. Returns an
    empty `Resumed` (apart from `corrupt`) when there is nothing to resume.
    """
    result = Resumed()
    checkpoint, result.corrupt = store.newest_valid()
    while checkpoint is not None:
        try:
            data, _, _ = load_from_zip_file(checkpoint.model_path, device="cpu", load_data=True)
            if checkpoint.vecnormalize_path is not None:
                with checkpoint.vecnormalize_path.open("rb") as fh:
                    pickle.load(fh)
        except Exception as exc:  # unreadable archive or pickle: the one before may do
            result.corrupt.append(store.quarantine(checkpoint.path, f"failed to load: {type(exc).__name__}: {exc}"))
            checkpoint, more = store.newest_valid()
            result.corrupt.extend(more)
            continue
        problems = _mismatches(data or {}, checkpoint, preset, venv)
        if problems:
            raise CheckpointMismatch(
                f"{checkpoint.path} cannot continue under preset {preset.name!r}: {'; '.join(problems)}; "
                "use a new --job-dir, or the original preset and env"
            )
        vecnorm = None
        if checkpoint.vecnormalize_path is not None:
            vecnorm = VecNormalize.load(str(checkpoint.vecnormalize_path), venv)
            # The pickle keeps the gamma it was saved with; the reward it normalizes discounts by the
            # preset's (a pbt exploit may have perturbed gamma), as a fresh VecNormalize would.
            vecnorm.gamma = preset.gamma
        # The saved `tensorboard_log` is the one of the run that saved it: this run's replaces it.
        model = PPO.load(
            checkpoint.model_path,
            env=vecnorm or venv,
            device=device,
            custom_objects=ppo_hyperparameters(preset),
            tensorboard_log=_logdir(tensorboard_log),
        )
        result.model, result.vecnormalize, result.checkpoint = _logger_for(model), vecnorm, checkpoint
        return result
    return result
