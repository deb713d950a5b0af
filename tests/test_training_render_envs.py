"""Rendering twins (`cockpit_training.render_envs`): an envpool Atari job's twin is gymnasium's ALE
env giving, from the same game state, the very observations envpool gave the job (frame skip and
max-pool, area resize, ALE's grayscale, the stack, FIRE at the start), with the preset's env_kwargs;
a classic-control id renders rgb_array frames at its render_fps; an env that cannot is one line."""

from __future__ import annotations

import envpool
import gymnasium as gym
import numpy as np
import pytest

from cockpit_training.envpool_vec import ATARI_TRAINING_KWARGS
from cockpit_training.render_envs import CannotRender, render_twin
from tests.test_training_custom_env import workdir  # noqa: F401  (a fixture)


def _pool(env_kwargs: dict[str, object]) -> object:
    return envpool.make("Pong-v5", env_type="gymnasium", num_envs=1, seed=0, **{**ATARI_TRAINING_KWARGS, **env_kwargs})


def test_the_atari_twin_sees_what_envpool_gave_the_job() -> None:
    # One no-op at most: envpool and ALE draw their no-op counts from their own generators, so only
    # without them do the two games start in the same state. Pong's serve then comes at step 15 and
    # its direction is the two emulators' own; the frames before it are the preprocessing's alone.
    kwargs = {"noop_max": 1}
    pool = _pool(kwargs)
    twin, fps = render_twin("Pong-v5", kwargs, pool.observation_space)  # type: ignore[attr-defined]
    assert fps == 30.0 and twin.observation_space.shape == (4, 84, 84)
    ours, _ = pool.reset()  # type: ignore[attr-defined]
    theirs, _ = twin.reset(seed=0)
    assert np.array_equal(ours[0], theirs)
    for step in range(12):
        action = step % 6
        ours, *_ = pool.step(np.array([action]))  # type: ignore[attr-defined]
        theirs, *_ = twin.step(action)
        assert np.array_equal(ours[0], theirs), f"step {step}"
    assert twin.render().shape == (210, 160, 3)  # the full-colour screen, for the clip
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
