"""Rendering twins (`cockpit_training.render_envs`): an envpool Atari job's twin is gymnasium's ALE
env giving, from the same game state, the very observations envpool gave the job (frame skip and
max-pool, area resize, ALE's grayscale, the stack, FIRE at the start), with the preset's env_kwargs;
a classic-control id renders rgb_array frames at its render_fps; an env that cannot is one line."""

from __future__ import annotations

import envpool
import gymnasium as gym
import numpy as np
import pytest

from cockpit_training.envpool_vec import ATARI_TRAINING_KWARGS, EnvpoolVecEnv
from cockpit_training.render_envs import CannotRender, render_twin
from tests.test_training_custom_env import workdir  # noqa: F401  (a fixture)


def _pool(env_kwargs: dict[str, object]) -> object:
    return envpool.make("Pong-v5", env_type="gymnasium", num_envs=1, seed=0, **{**ATARI_TRAINING_KWARGS, **env_kwargs})


@pytest.mark.parametrize("game", ["Breakout-v5", "Pong-v5"])
def test_the_atari_twin_sees_what_envpool_gave_the_job(game: str) -> None:
    # One no-op at most: envpool and the twin draw their no-op counts from their own generators, so
    # only without them do the two games start alike. Breakout waits for FIRE at the start of each
    # life: 300 random steps go through every life, a game over and a new game.
    kwargs = {"noop_max": 1}
    venv = EnvpoolVecEnv.make(game, 1, seed=0, **kwargs)  # the job's own VecEnv
    twin, fps = render_twin(game, kwargs, venv.observation_space)
    assert fps == 30.0 and twin.observation_space.shape == venv.observation_space.shape == (4, 84, 84)
    ours = venv.reset()
    theirs, _ = twin.reset(seed=0)
    assert np.array_equal(ours[0], theirs)
    rng, games, score = np.random.default_rng(1), [], 0.0
    for step in range(300):
        action = int(rng.integers(0, venv.action_space.n))  # type: ignore[attr-defined]
        ours, _, _, infos = venv.step(np.array([action]))
        theirs, reward, terminated, truncated, _ = twin.step(action)
        score += reward
        if terminated or truncated:
            games.append(score)
            assert infos[0]["episode"]["r"] == score  # the game's own score, as the worker counts it
            theirs, score = twin.reset()[0], 0.0
        assert np.array_equal(ours[0], theirs), f"step {step}"
    assert twin.render().shape == (210, 160, 3)  # the full-colour screen, for the clip
    if game == "Breakout-v5":
        assert len(games) == 1  # a whole game of five lives went by
    twin.close()


def test_the_presets_env_kwargs_shape_the_atari_twin() -> None:
    kwargs = {"stack_num": 2, "img_height": 64, "img_width": 48, "gray_scale": False}
    pool = _pool(kwargs)
    twin, _ = render_twin("Pong-v5", kwargs, pool.observation_space)  # type: ignore[attr-defined]
    assert twin.observation_space.shape == pool.observation_space.shape == (6, 64, 48)  # type: ignore[attr-defined]
    ours, _ = pool.reset()  # type: ignore[attr-defined]
    theirs, _ = twin.reset(seed=0)
    assert ours[0].shape == theirs.shape
    twin.close()


def test_classic_control_renders_rgb_frames_at_its_render_fps() -> None:
    space = gym.make("CartPole-v1").observation_space
    twin, fps = render_twin("CartPole-v1", {}, space)
    twin.reset(seed=0)
    assert fps == 50.0 and twin.render().shape == (400, 600, 3)
    twin.close()


@pytest.mark.usefixtures("workdir")
def test_an_env_without_rgb_frames_cannot_render_in_one_line() -> None:
    with pytest.raises(CannotRender) as caught:
        render_twin("gridworld:GridWorld-v0", {}, None)
    assert str(caught.value) == (
        "gridworld:GridWorld-v0 cannot render: its render modes are ['ansi'], and a clip needs 'rgb_array'"
    )
    with pytest.raises(CannotRender, match="observations of shape \\(4,\\), the model takes \\(3,\\)"):
        render_twin("CartPole-v1", {}, gym.spaces.Box(0, 1, (3,)))
