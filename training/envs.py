"""Building the vectorized training env: envpool when it has the id, gymnasium otherwise.

envpool steps all envs in C++ threads inside the worker process. For ids it lacks, the fallback
is gymnasium envs in SB3's `SubprocVecEnv` (one process per env, forkserver start), each wrapped
in `Monitor` so episode statistics reach SB3 the same way.
"""

from __future__ import annotations

import functools
import signal
import warnings
from typing import Literal

import gymnasium as gym
from gymnasium import spaces
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.vec_env import SubprocVecEnv, VecEnv

from cockpit.contract.envids import backend_for


def _make_monitored(env_id: str, seed: int) -> gym.Env:
    """Runs inside each SubprocVecEnv child."""
    from stable_baselines3.common.monitor import Monitor

    # Ctrl-C (or a SIGTERM to the process group) reaches these children too; only the worker may
    # react, or they die first and the worker cannot step its env to a clean checkpoint. They
    # still end with the worker: their pipe to it closes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    env = Monitor(gym.make(env_id))
    env.action_space.seed(seed)
    return env


def make_vec_env(env_id: str, n_envs: int, *, seed: int, threads: int = 0) -> VecEnv:
    """`n_envs` copies of `env_id` as one SB3 VecEnv, env i seeded with `seed + i`.

    `threads` is envpool's worker-thread count (0 lets envpool pick); the gymnasium fallback uses
    one process per env instead.
    """
    if backend_for(env_id) == "envpool":
        from training.envpool_vec import EnvpoolVecEnv

        with warnings.catch_warnings():
            # envpool's Box spaces are float64-bounded; gymnasium warns once per space when it casts.
            warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")
            return EnvpoolVecEnv.make(env_id, n_envs, seed=seed, num_threads=threads)
    makers = [functools.partial(_make_monitored, env_id, seed + i) for i in range(n_envs)]
    return SubprocVecEnv(makers, start_method="forkserver")


def policy_for(observation_space: spaces.Space) -> Literal["MlpPolicy", "CnnPolicy"]:
    """CnnPolicy for image observations (Atari frames), MlpPolicy for everything else."""
    return "CnnPolicy" if is_image_space(observation_space, check_channels=False) else "MlpPolicy"
