"""An env's rendering twin: the gymnasium env a player steps to record a clip of a model, giving
the model the observations it trained on and the clip the frames a user would see.

- classic control, Box2D and a user's env: the gymnasium env itself, `render_mode="rgb_array"`;
- an envpool id gymnasium also has (CartPole-v1): gymnasium's (envpool's `env_kwargs` are envpool's
  config keys, which gymnasium's env does not take);
- an envpool Atari id (envpool renders nothing): gymnasium's ALE env (ale-py) under the preprocessing
  the job trained with, read from envpool's own config with the worker's training keys and the
  preset's `env_kwargs`: frame skip with the max of the last two frames, up to `noop_max` no-ops at
  a start, the resize with OpenCV's area filter (envpool's `use_inter_area_resize`), grayscale from
  ALE's own palette, the frame stack, FIRE at each start and after a lost life (`use_fire_reset`
  with episodic life), ALE's sticky actions at envpool's `repeat_action_probability` and envpool's
  `max_episode_steps`. Whole games: a lost life ends no episode, as the worker's scoring counts them.

An env with none (render modes without `rgb_array`, an envpool id gymnasium lacks, ale-py missing)
raises `CannotRender`, one line.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from cockpit.contract.envids import backend_for
from cockpit.contract.play import VIDEO_EXTRA

ATARI_ID_PREFIX = "ALE/"  # envpool's Pong-v5 is gymnasium's ALE/Pong-v5
FIRE = 1  # ALE's minimal action sets put FIRE second wherever the game has it


class CannotRender(ValueError):
    """The env has no rendering twin, so no clip can be made; the message is one line saying why."""


def render_twin(env_id: str, env_kwargs: Mapping[str, Any], observation_space: Any) -> tuple[gym.Env, float]:
    """The env to play and render `env_id` with, and its frame rate (its `render_fps`; 30 when it
    says none); CannotRender when there is none, when what drawing its frames needs is not installed
    (pygame, Box2D: `cockpit[video]`), or when its observations are not the model's
    (`observation_space`)."""
    try:
        env = _twin(env_id, env_kwargs)
    except gym.error.DependencyNotInstalled as exc:
        raise CannotRender(f"{env_id} cannot render here: {_first_line(exc)} (pip install '{VIDEO_EXTRA}')") from None
    try:
        _check(env_id, env, observation_space)
    except BaseException:
        env.close()
        raise
    return env, float(env.metadata.get("render_fps") or 30)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _twin(env_id: str, env_kwargs: Mapping[str, Any]) -> gym.Env:
    if backend_for(env_id) == "envpool":
        from cockpit_training.envpool_vec import is_atari

        if is_atari(env_id):
            return atari_twin(env_id, env_kwargs)
        if env_id in gym.registry:
            return gym.make(env_id, render_mode="rgb_array")
        raise CannotRender(f"{env_id} cannot render: envpool renders no frames, and gymnasium has no {env_id}")
    with warnings.catch_warnings():
        # gymnasium warns when the render mode is not the env's; `_check` says it in one line.
        warnings.filterwarnings("ignore", message=".*not in the possible render_modes.*")
        return gym.make(env_id, render_mode="rgb_array", **dict(env_kwargs))


def _check(env_id: str, env: gym.Env, observation_space: Any) -> None:
    """CannotRender unless `env` draws RGB frames and gives the model's observations."""
    modes = list(env.metadata.get("render_modes", []))
    if "rgb_array" not in modes:
        raise CannotRender(f"{env_id} cannot render: its render modes are {modes}, and a clip needs 'rgb_array'")
    shape = getattr(env.observation_space, "shape", None)
    if shape != getattr(observation_space, "shape", None):
        raise CannotRender(
            f"{env_id} cannot render: its rendering env gives observations of shape {shape}, the model "
            f"takes {getattr(observation_space, 'shape', None)}"
        )
    try:
        env.reset(seed=0)  # the player resets it again, with its own seed
        frame = env.render()
    except gym.error.DependencyNotInstalled as exc:
        raise CannotRender(f"{env_id} cannot render here: {_first_line(exc)} (pip install '{VIDEO_EXTRA}')") from None
    if not (isinstance(frame, np.ndarray) and frame.ndim == 3 and frame.shape[2] in (3, 4)):
        raise CannotRender(f"{env_id} cannot render: its rgb_array render gave {type(frame).__name__}, not an image")


def atari_twin(env_id: str, env_kwargs: Mapping[str, Any]) -> gym.Env:
    """gymnasium's ALE env for envpool's Atari `env_id`, preprocessed as envpool preprocessed the job's
    (see the module's docstring); CannotRender where ale-py or OpenCV is not installed."""
    import envpool

    from cockpit_training.envpool_vec import ATARI_TRAINING_KWARGS

    try:
        import ale_py
        import cv2  # noqa: F401  (AtariPreprocessing resizes with it)
    except ImportError as exc:
        raise CannotRender(
            f"{env_id} cannot render: envpool renders no frames, and {exc.name} is missing "
            f"(pip install '{VIDEO_EXTRA}')"
        ) from None
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation, TimeLimit

    config = envpool.make_spec(env_id, **{**ATARI_TRAINING_KWARGS, **env_kwargs}).config
    gym.register_envs(ale_py)
    env: gym.Env = gym.make(
        ATARI_ID_PREFIX + env_id,
        frameskip=1,
        repeat_action_probability=float(config.repeat_action_probability),
        full_action_space=bool(config.full_action_space),
        render_mode="rgb_array",
        max_episode_steps=None,
    )
    env = AtariPreprocessing(
        env,
        noop_max=int(config.noop_max),
        frame_skip=int(config.frame_skip),
        screen_size=(int(config.img_width), int(config.img_height)),
        terminal_on_life_loss=False,
        grayscale_obs=bool(config.gray_scale),
    )
    if bool(config.use_fire_reset) and "FIRE" in env.unwrapped.get_action_meanings():  # type: ignore[attr-defined]
        env = FireOnStart(env)
    if not config.gray_scale:
        env = ChannelsFirst(env)
    env = FrameStackObservation(env, int(config.stack_num))
    if not config.gray_scale:
        env = StackedChannels(env)
    return TimeLimit(env, max_episode_steps=int(config.max_episode_steps))


class FireOnStart(gym.Wrapper):  # type: ignore[type-arg]
    """FIRE after a reset and after each lost life, as envpool's `use_fire_reset` pressed it at each
    start of the episodic-life episodes the job trained on: games such as Breakout wait for it."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._lives = 0

    def reset(self, **kwargs: Any) -> Any:
        """Reset, then FIRE (reset again should that end the game); the observation is the reset's,
        as envpool's is."""
        obs, info = self.env.reset(**kwargs)
        _, _, terminated, truncated, fired = self.env.step(FIRE)
        if terminated or truncated:
            obs, info = self.env.reset(**kwargs)
        self._lives = int(fired.get("lives", info.get("lives", 0)))
        return obs, info

    def step(self, action: Any) -> Any:
        """Step; FIRE once more when the step lost a life and the game goes on."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        if int(info.get("lives", 0)) < self._lives and not (terminated or truncated):
            obs, more, terminated, truncated, info = self.env.step(FIRE)
            reward = float(reward) + float(more)
        self._lives = int(info.get("lives", 0))
        return obs, reward, terminated, truncated, info


class ChannelsFirst(gym.ObservationWrapper):  # type: ignore[type-arg]
    """An RGB frame (H, W, 3), channels first (3, H, W), as envpool gives a colour frame."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        h, w, c = env.observation_space.shape  # type: ignore[misc]
        self.observation_space = spaces.Box(0, 255, (c, h, w), np.uint8)

    def observation(self, observation: Any) -> Any:
        """The frame, channels first."""
        return np.transpose(observation, (2, 0, 1))


class StackedChannels(gym.ObservationWrapper):  # type: ignore[type-arg]
    """A stack of colour frames (stack, 3, H, W) as envpool stacks them: (stack × 3, H, W)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        n, c, h, w = env.observation_space.shape  # type: ignore[misc]
        self.observation_space = spaces.Box(0, 255, (n * c, h, w), np.uint8)

    def observation(self, observation: Any) -> Any:
        """The stack with its frames' channels side by side."""
        return np.reshape(observation, self.observation_space.shape)
