"""Building the vectorized training env: envpool when it has the id, gymnasium otherwise.

envpool steps all envs in C++ threads inside the worker process, with a preset's `env_kwargs` as
envpool config keys. For ids it lacks (gymnasium's own, and a user's `module:EnvId-v0`) the
fallback is gymnasium envs, `gymnasium.make(env_id, **env_kwargs)` each wrapped in `Monitor` so
episode statistics reach SB3 the same way, stepped in one of SB3's two VecEnvs:

- `DummyVecEnv`: one env after another in the worker; no overhead beyond the env's own step;
- `SubprocVecEnv`: one process per env (forkserver start), stepped in parallel, at the price of a
  pipe round trip per env and step.

The preset's `vec_env` forces one; `auto` (the default) measures what one env step costs here (a
fraction of a second on one env) and lets `cockpit.contract.envids.pick_vec_env` decide, with the
job's core budget (`threads`) as the cores to spread processes over.
"""

from __future__ import annotations

import functools
import math
import os
import signal
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Literal

import gymnasium as gym
from gymnasium import spaces
from stable_baselines3.common.preprocessing import is_image_space, is_image_space_channels_first
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv

from cockpit.contract.envids import VecEnvKind, backend_for, ensure_importable, is_custom, pick_vec_env

STEP_PROBE_S = 0.2  # how long `step_cost_us` steps one env: enough for ~1,000 steps of a cheap env
STEP_PROBE_MIN_STEPS = 3  # and at least this many, however slow a step is
# Timed in chunks of at least this long, and the cheapest chunk counts: on a loaded machine (other
# jobs' workers) a chunk the scheduler cut into is slower for reasons that are not the env's.
STEP_PROBE_CHUNK_S = 0.001


def _make_monitored(env_id: str, seed: int, env_kwargs: Mapping[str, Any], child: bool) -> gym.Env:
    """One monitored env; `child` when it runs inside a SubprocVecEnv process."""
    from stable_baselines3.common.monitor import Monitor

    if child:
        # Ctrl-C (or a SIGTERM to the process group) reaches these children too; only the worker may
        # react, or they die first and the worker cannot step its env to a clean checkpoint. They
        # still end with the worker: their pipe to it closes.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # A `module:EnvId` module is found here as in the worker: multiprocessing hands each child the
    # worker's current sys.path (`ensure_importable` ran there), whenever its forkserver started.
    env = Monitor(gym.make(env_id, **env_kwargs))
    env.action_space.seed(seed)
    return env


_step_costs: dict[str, float] = {}  # choose_vec_env's measurements, by env id and kwargs


def step_cost_us(env_id: str, env_kwargs: Mapping[str, Any] | None = None, *, seed: int = 0) -> float:
    """Microseconds one gymnasium env step costs here (resets included as they fall), with random
    actions, over `STEP_PROBE_S` or `STEP_PROBE_MIN_STEPS` steps, whichever is longer: the cheapest
    of its `STEP_PROBE_CHUNK_S` chunks, per step. Wall time, not CPU time, so an env that waits (on
    a simulator process, say) counts its waits, which parallel processes overlap too."""
    if is_custom(env_id):
        ensure_importable()
    env = gym.make(env_id, **dict(env_kwargs or {}))
    try:
        env.reset(seed=seed)
        env.action_space.seed(seed)
        best, steps, began = math.inf, 0, time.perf_counter()
        while time.perf_counter() - began < STEP_PROBE_S or steps < STEP_PROBE_MIN_STEPS:
            chunk, start = 0, time.perf_counter()
            while True:
                _, _, terminated, truncated, _ = env.step(env.action_space.sample())
                if terminated or truncated:
                    env.reset()
                chunk += 1
                if (elapsed := time.perf_counter() - start) >= STEP_PROBE_CHUNK_S:
                    break
            best, steps = min(best, elapsed / chunk), steps + chunk
    finally:
        env.close()
    return best * 1e6


def choose_vec_env(
    env_id: str, n_envs: int, *, threads: int, env_kwargs: Mapping[str, Any] | None = None, vec_env: str = "auto"
) -> tuple[VecEnvKind, str]:
    """Which VecEnv the gymnasium fallback uses for `n_envs` copies of `env_id`, and why: `vec_env`
    when it is `dummy` or `subproc`, else by a measured step (`step_cost_us`, taken only when the
    answer depends on it). `threads` is the job's core budget; 0 means every usable CPU."""
    if vec_env in ("dummy", "subproc"):
        kind: VecEnvKind = "dummy" if vec_env == "dummy" else "subproc"
        return kind, f"{'DummyVecEnv' if kind == 'dummy' else 'SubprocVecEnv'}: the preset's vec_env says so"
    cores = threads or len(os.sched_getaffinity(0))
    if n_envs < 2 or cores < 2:
        return pick_vec_env(None, n_envs, cores)
    # Once per env and kwargs in a process: a served worker's later jobs and a job's scoring reuse it.
    key = f"{env_id} {sorted((env_kwargs or {}).items())!r}"
    if key not in _step_costs:
        _step_costs[key] = step_cost_us(env_id, env_kwargs)
    return pick_vec_env(_step_costs[key], n_envs, cores)


def make_vec_env(
    env_id: str,
    n_envs: int,
    *,
    seed: int,
    threads: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    vec_env: str = "auto",
    report: Callable[[str], None] | None = None,
) -> VecEnv:
    """`n_envs` copies of `env_id` as one SB3 VecEnv, env i seeded with `seed + i`, each built with
    `env_kwargs`.

    `threads` is envpool's worker-thread count (0 lets envpool pick), and the gymnasium fallback's
    core budget when `vec_env` is `auto` (see `choose_vec_env`); `report` is told which VecEnv the
    fallback chose, and why, in one line.
    """
    kwargs = dict(env_kwargs or {})
    if backend_for(env_id) == "envpool":
        from cockpit_training.envpool_vec import EnvpoolVecEnv

        with warnings.catch_warnings():
            # envpool's Box spaces are float64-bounded; gymnasium warns once per space when it casts.
            warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")
            return EnvpoolVecEnv.make(env_id, n_envs, seed=seed, num_threads=threads, **kwargs)
    kind, why = choose_vec_env(env_id, n_envs, threads=threads, env_kwargs=kwargs, vec_env=vec_env)
    if report is not None:
        report(f"{env_id}: {n_envs} env(s) in {why}")
    makers = [functools.partial(_make_monitored, env_id, seed + i, kwargs, kind == "subproc") for i in range(n_envs)]
    if kind == "dummy":
        return DummyVecEnv(makers)
    return SubprocVecEnv(makers, start_method="forkserver")


# The smallest image side SB3's default CnnPolicy (NatureCNN: an 8x8 kernel at stride 4, then 4x4
# and 3x3) can take; SB3's env checker warns below it ("The minimal resolution for an image is 36x36").
CNN_MIN_SIDE = 36


def policy_for(observation_space: spaces.Space) -> Literal["MlpPolicy", "CnnPolicy", "MultiInputPolicy"]:
    """MultiInputPolicy for a Dict observation (SB3 takes no other policy for one); CnnPolicy for
    images NatureCNN can take (Atari frames); MlpPolicy for everything else, a smaller image
    (MiniGrid's 7x7x3 view) among them, which it flattens."""
    if isinstance(observation_space, spaces.Dict):
        return "MultiInputPolicy"
    if not (isinstance(observation_space, spaces.Box) and is_image_space(observation_space, check_channels=False)):
        return "MlpPolicy"
    shape = observation_space.shape
    sides = shape[1:] if is_image_space_channels_first(observation_space) else shape[:2]
    return "CnnPolicy" if min(sides) >= CNN_MIN_SIDE else "MlpPolicy"
