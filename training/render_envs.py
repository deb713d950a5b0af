"""An env's rendering twin: the gymnasium env a player steps to record a clip of a model, giving
the model the observations it trained on and the clip the frames a user would see.

- classic control, Box2D and a user's env: the gymnasium env itself, `render_mode="rgb_array"`;
- an envpool id gymnasium also has (CartPole-v1): gymnasium's (envpool's `env_kwargs` are envpool's
  config keys, which gymnasium's env does not take);
- an envpool Atari id (envpool renders nothing): gymnasium's ALE env (ale-py) played as envpool
  plays it (`EnvpoolAtari`), from envpool's own config with the worker's training keys and the
  preset's `env_kwargs`: the frame skip with the max of the last two frames, the no-ops and the FIRE
  that start a game and each life, the resize with OpenCV's area filter, ALE's grayscale, the frame
  stack, sticky actions and the step limit. From the same game state the model sees, pixel for pixel,
  what envpool gave it; the clip shows the game's full-colour screen. Whole games: the worker's
  scoring counts them so.

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
    (`EnvpoolAtari`), with envpool's own config: its defaults, the worker's training keys and the
    preset's `env_kwargs`; CannotRender where ale-py or OpenCV is not installed."""
    import envpool

    from cockpit_training.envpool_vec import ATARI_TRAINING_KWARGS

    try:
        import ale_py
        import cv2  # noqa: F401  (the area resize, as envpool's)
    except ImportError as exc:
        raise CannotRender(
            f"{env_id} cannot render: envpool renders no frames, and {exc.name} is missing "
            f"(pip install '{VIDEO_EXTRA}')"
        ) from None
    config = envpool.make_spec(env_id, **{**ATARI_TRAINING_KWARGS, **env_kwargs}).config
    gym.register_envs(ale_py)
    env = gym.make(
        ATARI_ID_PREFIX + env_id,
        frameskip=1,
        repeat_action_probability=float(config.repeat_action_probability),
        full_action_space=bool(config.full_action_space),
        render_mode="rgb_array",
        max_episode_steps=None,
    )
    return EnvpoolAtari(env, config)


class EnvpoolAtari(gym.Wrapper):  # type: ignore[type-arg]
    """An ALE env (one emulator frame a step) played as envpool's Atari env plays, from its config
    (`envpool.make_spec(...).config`), so that from the same game state a model sees exactly what it
    saw in training (sail-sg/envpool, `envpool/atari/atari_env.h`):

    - a start (a new game, and with episodic life each lost life, as the job trained): up to
      `noop_max - 1` no-op frames, then one FIRE frame where the game has FIRE (`use_fire_reset`),
      the observation being that last screen, the whole stack filled with it at a new game;
    - a step: the action for `frame_skip` frames, stopping at game over; the max of the last two
      screens (the last one alone when the game ended early), resized with OpenCV's area filter
      (`use_inter_area_resize`; bilinear otherwise) to `img_height` × `img_width`, grayscale from
      ALE's palette or RGB channels first, pushed on a stack of `stack_num`;
    - a lost life while the game goes on starts again as above, as envpool's reset of an
      episodic-life episode did (its frames' points uncounted, as envpool counted none); the
      episode here is the whole game, as the worker's scoring counts it; truncated at
      `max_episode_steps` steps.
    """

    def __init__(self, env: gym.Env, config: Any) -> None:
        super().__init__(env)
        self.frame_skip, self.noop_max = int(config.frame_skip), int(config.noop_max)
        self.size = (int(config.img_width), int(config.img_height))
        self.gray, self.stack_num = bool(config.gray_scale), int(config.stack_num)
        self.max_steps, self.area = int(config.max_episode_steps), bool(config.use_inter_area_resize)
        self.ale = env.unwrapped.ale  # type: ignore[attr-defined]
        self.actions = list(env.unwrapped._action_set)  # type: ignore[attr-defined]
        self.fire = bool(config.use_fire_reset) and ale_action(1) in self.actions
        channels = 1 if self.gray else 3
        shape = (self.stack_num * channels, self.size[1], self.size[0])
        self.observation_space = spaces.Box(0, 255, shape, np.uint8)
        self._stack: list[np.ndarray] = []
        self._pool: list[np.ndarray] = [self._screen(), self._screen()]
        self._lives, self._steps = 0, 0

    def _screen(self) -> np.ndarray:
        return self.ale.getScreenGrayscale() if self.gray else self.ale.getScreenRGB()  # type: ignore[no-any-return]

    def _push(self, screen: np.ndarray, fill: bool) -> np.ndarray:
        import cv2

        method = cv2.INTER_AREA if self.area else cv2.INTER_LINEAR
        frame = cv2.resize(screen, self.size, interpolation=method)
        frame = frame[None] if self.gray else np.transpose(frame, (2, 0, 1))
        self._stack = [frame] * self.stack_num if fill else [*self._stack[1:], frame]
        return np.concatenate(self._stack, axis=0)

    def _start(self, new_game: bool) -> np.ndarray:
        """envpool's reset: no-ops, FIRE, the screen pushed (filling the stack at a new game)."""
        noops = int(self.np_random.integers(0, self.noop_max)) + 1 - int(self.fire)
        for _ in range(noops):
            self.ale.act(ale_action(0))
            if self.ale.game_over():
                self.ale.reset_game()
                new_game = True
        if self.fire:
            self.ale.act(ale_action(1))
        self._lives = int(self.ale.lives())
        return self._push(self._screen(), fill=new_game)

    def reset(self, **kwargs: Any) -> Any:
        """A new game (seeded as gymnasium seeds ALE), started as envpool starts one."""
        _, info = self.env.reset(**kwargs)
        self._steps = 0
        return self._start(new_game=True), info

    def step(self, action: Any) -> Any:
        """`frame_skip` frames of `action`, max-pooled, resized and stacked; a lost life starts again."""
        reward, left = 0.0, self.frame_skip
        while left > 0 and not self.ale.game_over():
            reward += float(self.ale.act(self.actions[int(action)]))
            if left <= 2:
                self._pool[2 - left] = self._screen()
            left -= 1
        screen = np.maximum(self._pool[0], self._pool[1]) if left == 0 else self._pool[0]
        obs = self._push(screen, fill=False)
        self._steps += 1
        terminated = bool(self.ale.game_over())
        truncated = self._steps >= self.max_steps and not terminated
        if not (terminated or truncated) and 0 < self.ale.lives() < self._lives:
            obs = self._start(new_game=False)
        self._lives = int(self.ale.lives())
        return obs, reward, terminated, truncated, {"lives": self._lives}


def ale_action(number: int) -> Any:
    """ALE's action `number` (0 NOOP, 1 FIRE) as ale-py's enum."""
    import ale_py

    return ale_py.Action(number)
