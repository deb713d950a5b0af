"""Building a PPO model from a preset, or resuming one from the newest valid checkpoint.

On resume the current preset's rollout and optimization settings replace the saved ones (so a
job restarted with a new n_envs or batch size, as the advisor does, trains with them), but the
network must be the one the checkpoint holds: weights cannot change shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from stable_baselines3 import PPO
from stable_baselines3.common.utils import LinearSchedule
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

from cockpit.presets import Preset
from training.checkpoints import Checkpoint, CheckpointStore, CorruptCheckpoint
from training.envs import policy_for

_ACTIVATIONS: dict[str, type[torch.nn.Module]] = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}


class CheckpointMismatch(ValueError):
    """The checkpoint cannot continue under this preset (its network differs)."""


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


def new_model(preset: Preset, venv: VecEnv, *, seed: int, device: str) -> PPO:
    """A fresh PPO for `venv` with the preset's settings; CnnPolicy for images, else MlpPolicy."""
    return PPO(
        policy_for(venv.observation_space),
        venv,
        policy_kwargs={"net_arch": list(preset.net_arch), "activation_fn": _ACTIVATIONS[preset.activation]},
        seed=seed,
        device=device,
        verbose=0,
        **ppo_hyperparameters(preset),
    )


@dataclass
class Resumed:
    """The outcome of looking for a checkpoint to resume from."""

    model: PPO | None = None
    vecnormalize: VecNormalize | None = None
    checkpoint: Checkpoint | None = None
    corrupt: list[CorruptCheckpoint] = field(default_factory=list)


def resume(store: CheckpointStore, preset: Preset, venv: VecEnv, *, device: str) -> Resumed:
    """Load the newest checkpoint that verifies and loads; quarantine each one that does not.

    Raises `CheckpointMismatch` when the newest loadable checkpoint's network differs from the
    preset's. Returns an empty `Resumed` (apart from `corrupt`) when there is nothing to resume.
    """
    result = Resumed()
    checkpoint, result.corrupt = store.newest_valid()
    while checkpoint is not None:
        try:
            vecnorm = None
            if checkpoint.vecnormalize_path is not None:
                vecnorm = VecNormalize.load(str(checkpoint.vecnormalize_path), venv)
            model = PPO.load(
                checkpoint.model_path,
                env=vecnorm or venv,
                device=device,
                custom_objects=ppo_hyperparameters(preset),
            )
        except Exception as exc:  # whatever makes a checkpoint unloadable, the one before may do
            result.corrupt.append(store.quarantine(checkpoint.path, f"failed to load: {type(exc).__name__}: {exc}"))
            checkpoint, more = store.newest_valid()
            result.corrupt.extend(more)
            continue
        saved_arch = list(model.policy_kwargs.get("net_arch", []))
        if saved_arch != list(preset.net_arch):
            raise CheckpointMismatch(
                f"{checkpoint.path}: the checkpoint's network is {saved_arch} but preset {preset.name!r} "
                f"asks for {list(preset.net_arch)}; use a new --job-dir or the original network"
            )
        result.model, result.vecnormalize, result.checkpoint = model, vecnorm, checkpoint
        return result
    return result
