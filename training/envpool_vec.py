"""envpool as a stable-baselines3 `VecEnv`, with SB3's auto-reset semantics.

envpool and SB3 disagree about when a finished env resets. envpool returns the terminal
observation on the step an episode ends and resets on the *next* step (which ignores its action
and yields reward 0). SB3 wants the reset observation on the same step, with the finished
episode's last observation in `info["terminal_observation"]`. This adapter bridges the two: after
each step it resets all finished envs at once with one partial envpool step on just those env ids
(envpool's own, non-forced reset path, so Atari's episodic-life reset keeps the game going), and
hands SB3 the reset observations plus the terminal ones in the infos.

It also sets `TimeLimit.truncated` so SB3 bootstraps the value of truncated episodes. (envpool
marks an episode that terminates on its last allowed step as truncated, where gymnasium says both
terminated and truncated; envpool exposes nothing to tell the two apart.) It reports
`info["episode"]` (`r`, `l`, `t`) only for whole real episodes: for Atari, the game's raw score
until game over, not clipped rewards and not single lives.
"""

from __future__ import annotations

import time
from typing import Any

import envpool
import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn

# SB3's AtariWrapper trains on clipped rewards and treats a lost life as an episode end; envpool
# does both natively and still reports the raw score (`info["reward"]`) and game over
# (`info["terminated"]`), which the adapter uses for episode statistics.
ATARI_TRAINING_KWARGS: dict[str, Any] = {"episodic_life": True, "reward_clip": True}


def is_atari(env_id: str) -> bool:
    """True when envpool implements `env_id` with its ALE (Atari) backend."""
    spec_cls = type(envpool.make_spec(env_id)).__name__
    return "Atari" in spec_cls


class EnvpoolVecEnv(VecEnv):
    """A batch of `num_envs` envpool environments stepped synchronously, as an SB3 VecEnv.

    Seeds are fixed when the pool is created (envpool ignores seeds given to reset), so pass the
    seed here; env i gets `seed + i` inside envpool.
    """

    def __init__(self, pool: Any, *, atari: bool = False) -> None:
        """Wrap an envpool gymnasium pool in sync mode (batch_size == num_envs).

        `atari` switches episode statistics to the raw score and game over in envpool's infos.
        """
        self.pool = pool
        self.atari = atari
        num_envs = pool.config["num_envs"]
        self._actions: np.ndarray | None = None
        self._returns = np.zeros(num_envs, dtype=np.float64)
        self._lengths = np.zeros(num_envs, dtype=np.int64)
        self._t0 = time.perf_counter()
        self._reset_actions = np.zeros((num_envs, *pool.action_space.shape), dtype=pool.action_space.dtype)
        super().__init__(num_envs, pool.observation_space, pool.action_space)

    @classmethod
    def make(
        cls, env_id: str, num_envs: int, *, seed: int = 0, num_threads: int = 0, **envpool_kwargs: Any
    ) -> EnvpoolVecEnv:
        """Create the pool for `env_id`; Atari envs train with episodic life and clipped rewards."""
        atari = is_atari(env_id)
        kwargs = {**(ATARI_TRAINING_KWARGS if atari else {}), **envpool_kwargs}
        pool = envpool.make(
            env_id,
            env_type="gymnasium",
            num_envs=num_envs,
            batch_size=num_envs,
            seed=seed,
            num_threads=num_threads,
            **kwargs,
        )
        return cls(pool, atari=atari)

    def reset(self) -> VecEnvObs:
        """Reset every env (a forced, full reset) and clear the episode statistics."""
        obs, _ = self.pool.reset()
        self._returns[:] = 0.0
        self._lengths[:] = 0
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        """Remember the actions; stepping is synchronous and happens in `step_wait`."""
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        """Step all envs, reset the finished ones in one batch, and build SB3's infos."""
        obs, rewards, terminated, truncated, info = self.pool.step(self._actions)
        raw_rewards = info["reward"] if self.atari else rewards
        self._returns += raw_rewards
        self._lengths += 1
        dones = terminated | truncated
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        if dones.any():
            ids = np.flatnonzero(dones)
            # With episodic life a lost life is `terminated`; the game is over only on game over.
            real_end = (info["terminated"].astype(bool) | truncated) if self.atari else dones
            elapsed = round(time.perf_counter() - self._t0, 6)
            for i in ids:
                entry = infos[i]
                entry["terminal_observation"] = obs[i].copy()
                entry["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
                if real_end[i]:
                    entry["episode"] = {"r": float(self._returns[i]), "l": int(self._lengths[i]), "t": elapsed}
                    self._returns[i] = 0.0
                    self._lengths[i] = 0
            reset_obs, _, _, _, reset_info = self.pool.step(self._reset_actions[: len(ids)], ids.astype(np.int32))
            obs[reset_info["env_id"]] = reset_obs
        return obs, rewards.astype(np.float32, copy=False), dones, infos

    def close(self) -> None:
        """envpool frees its threads when the pool is garbage-collected; drop our reference."""
        self.pool = None

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """The pool's attribute, repeated once per selected env (all envs share one pool)."""
        value = None if attr_name == "render_mode" else getattr(self.pool, attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Not supported: envpool envs are configured once, when the pool is created."""
        raise NotImplementedError(f"envpool envs cannot set attribute {attr_name!r} after creation")

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        """Not supported: envpool exposes no per-env Python objects to call."""
        raise NotImplementedError(f"envpool envs have no per-env method {method_name!r}")

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        """envpool envs are never gymnasium-wrapped."""
        return [False for _ in self._get_indices(indices)]
