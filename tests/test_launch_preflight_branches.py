"""Every verdict and failure branch of the pre-flight (`cockpit.core.launch.preflight.unfit_envs`),
driven through its real check process (`python -m cockpit_training.trainable`) with envs of a user's
module: an env whose constructor fails (`env`), one whose first step fails under PPO (`step`), a
check that outlives its timeout, one that crashes (with its last words, and without any), and one
that exits 0 without printing a verdict. Each is one line (`ConfigError`), never a traceback, and
never taken for a pass. The `observation` and `model` verdicts are in `test_launch_preflight.py`."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from cockpit.contract.presets import Preset, load
from cockpit.contract.runspec import ConfigError
from cockpit.contract.trainability import Unfit
from cockpit.core.launch.preflight import check_trainable, unfit_envs
from tests.user_module import user_module_dir

USER_MODULE = """
import os
import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Plain(gym.Env):
    observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, False, False, {}


class StepFails(Plain):
    def step(self, action):
        raise RuntimeError("the simulator lost its connection")


def refuses(**kwargs):
    raise ValueError("no such map: 'nowhere'")


def hangs(**kwargs):
    time.sleep(3600)


def says_and_exits(**kwargs):
    raise SystemExit("the licence server is unreachable")


def dies(**kwargs):
    os._exit(7)


def leaves_quietly(**kwargs):
    os._exit(0)


gym.register(id="Plain-v0", entry_point=Plain, max_episode_steps=20)
gym.register(id="StepFails-v0", entry_point=StepFails, max_episode_steps=20)
for name, make in [("Refuses", refuses), ("Hangs", hangs), ("SaysAndExits", says_and_exits), ("Dies", dies),
                   ("LeavesQuietly", leaves_quietly)]:
    gym.register(id=f"{name}-v0", entry_point=make)
"""


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A user's working directory holding `userfaults.py`, as the cwd (the check process finds the
    module there); its imports and registrations in this process are undone after."""
    with user_module_dir(tmp_path, monkeypatch, "userfaults", USER_MODULE) as workdir:
        yield workdir


def on(name: str) -> Preset:
    return dataclasses.replace(load("cartpole"), env=f"userfaults:{name}-v0")


def test_an_env_that_cannot_be_built_and_one_whose_first_step_fails_are_each_named(workdir: Path) -> None:
    plain, refused, stepped = unfit_envs([on("Plain"), on("Refuses"), on("StepFails")])  # one process
    assert plain is None
    assert refused == Unfit("env", "ValueError: no such map: 'nowhere'")
    assert stepped == Unfit("step", "RuntimeError: the simulator lost its connection", policy="MlpPolicy")
    with pytest.raises(ConfigError) as raised:
        check_trainable(on("Refuses"), "--env")
    assert str(raised.value) == "--env 'userfaults:Refuses-v0': building it failed: ValueError: no such map: 'nowhere'"
    with pytest.raises(ConfigError) as raised:
        check_trainable(on("StepFails"), "--env")
    assert str(raised.value).startswith(
        "--env 'userfaults:StepFails-v0': stable-baselines3 cannot train this env: a first reset and step under "
        "SB3's PPO with MlpPolicy failed: RuntimeError: the simulator lost its connection; wrap the env to fit, then "
    )


def test_a_check_that_outlives_its_timeout_is_one_line(workdir: Path) -> None:
    # The env never comes back: whatever the machine's speed, the check is over its timeout.
    with pytest.raises(ConfigError) as raised:
        unfit_envs([on("Plain"), on("Hangs")], timeout_s=2)
    assert str(raised.value) == (
        "checking userfaults:Plain-v0, userfaults:Hangs-v0 with stable-baselines3 took over 2 s"
    )


@pytest.mark.parametrize(("name", "said"), [
    ("SaysAndExits", "failed: the licence server is unreachable"),  # its last line of stderr
    ("Dies", "failed: exit 7"),  # nothing said: its exit code
    ("LeavesQuietly", "printed no verdict (Expecting value: line 1 column 1 (char 0))"),  # exit 0, no line
])  # fmt: skip
def test_a_check_that_crashes_or_says_nothing_is_one_line_never_a_pass(workdir: Path, name: str, said: str) -> None:
    with pytest.raises(ConfigError) as raised:
        unfit_envs([on(name)])
    assert str(raised.value) == f"checking userfaults:{name}-v0 with stable-baselines3 {said}"
