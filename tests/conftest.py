"""Shared fixtures: small real PPO models on envpool CartPole."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
from stable_baselines3 import PPO

from training.envpool_vec import EnvpoolVecEnv


@pytest.fixture
def tiny_ppo() -> Callable[..., PPO]:
    """Builds a small, fast PPO on 4 envpool CartPole envs (64-step rollouts of 16 steps)."""

    def build(**overrides: object) -> PPO:
        venv = EnvpoolVecEnv.make("CartPole-v1", 4, seed=0, num_threads=1)
        kwargs: dict = {"n_steps": 16, "batch_size": 32, "n_epochs": 2, "seed": 0, "device": "cpu", "verbose": 0}
        kwargs.update(overrides)
        return PPO("MlpPolicy", venv, **kwargs)

    return build


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Measured costs (`cockpit.core.costs`) go to a cache of the test session, not the user's."""
    saved = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    yield
    if saved is None:
        del os.environ["XDG_CACHE_HOME"]
    else:
        os.environ["XDG_CACHE_HOME"] = saved
