"""An env stable-baselines3 cannot train is refused before anything starts, by SB3's own checks.

MiniGrid observes a Dict whose `mission` key is a text space SB3 has no buffer for. Before the
pre-flight, `cockpit run --env minigrid:MiniGrid-Empty-5x5-v0` started a worker that failed with
`TypeError: 'NoneType' object is not iterable` (SB3's DummyVecEnv sizing the text), restarted it
three times and exited 1. Now `run`, `fleet` and `recommend` say in one line which env, which key,
which space and what the usual fix is, and exit 2 with no run directory made. The fix they name
(MiniGrid's `ImgObsWrapper` in a module of the user's) passes the same check, and SB3's warnings
(advice about spaces it still trains on) never become refusals.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from cockpit.contract.presets import Preset, load
from cockpit.contract.trainability import Unfit, dump_verdicts, load_verdicts
from cockpit.core.launch.preflight import unfit_envs
from cockpit_training.envs import policy_for
from cockpit_training.trainable import observation_unfit, verdict
from tests.user_module import user_module_dir

MINIGRID = "minigrid:MiniGrid-Empty-5x5-v0"
COCKPIT = str(Path(sys.executable).parent / "cockpit")

# A user's module: the fix the refusal names, a fix that is not enough, and an env SB3 warns about.
USER_MODULE = '''
import gymnasium as gym
import minigrid  # noqa: F401  (registers MiniGrid's envs)
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import FilterObservation
from minigrid.wrappers import ImgObsWrapper


def image_only(**kwargs):
    return ImgObsWrapper(gym.make("MiniGrid-Empty-5x5-v0", **kwargs))


def without_mission(**kwargs):
    return FilterObservation(gym.make("MiniGrid-Empty-5x5-v0", **kwargs), ["direction", "image"])


class Warned(gym.Env):
    """Trains under PPO, but SB3's env checker warns (an asymmetric float64 action Box) and asserts
    (a numpy.float32 reward is not a Python float)."""

    observation_space = spaces.Box(-1.0, 1.0, (3,), np.float64)
    action_space = spaces.Box(0.0, 10.0, (2,), np.float64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3), {}

    def step(self, action):
        return np.zeros(3), np.float32(1.0), False, False, {}


gym.register(id="GridImage-v0", entry_point=image_only)
gym.register(id="GridNoMission-v0", entry_point=without_mission)
gym.register(id="Warned-v0", entry_point=Warned, max_episode_steps=20)
'''


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A user's working directory holding `usergrid.py`, as the cwd; its imports and registrations
    are undone after."""
    # usergrid imports minigrid, which registers its envs once per process: imported here, they are
    # not undone with usergrid's, or a later test in this process would find no MiniGrid id (a CI
    # run whose order put such a test first failed that way).
    import minigrid  # noqa: F401

    with user_module_dir(tmp_path, monkeypatch, "usergrid", USER_MODULE) as workdir:
        yield workdir


def on(env: str) -> Preset:
    return dataclasses.replace(load("cartpole"), env=env)


def cockpit(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COCKPIT, *args], cwd=cwd, capture_output=True, text=True, timeout=180,
                          stdin=subprocess.DEVNULL)  # fmt: skip


# ----- SB3's judgement, in the worker's process -----


def test_sb3_names_the_dict_key_it_cannot_take_and_keeps_the_others() -> None:
    import minigrid  # noqa: F401

    space = gym.make("MiniGrid-Empty-5x5-v0").observation_space
    unfit = observation_unfit(space)
    assert unfit is not None and unfit.part == "observation" and unfit.key == "mission"
    assert unfit.space == "minigrid.core.mission.MissionSpace" and unfit.keep == ("direction", "image")
    # SB3's own words, without the function address MiniGrid's repr carries.
    assert unfit.error == "NotImplementedError: MissionSpace observation space is not supported"


def test_sb3_refuses_a_tuple_and_a_nested_dict_and_takes_a_flat_dict() -> None:
    tuple_space = spaces.Tuple((spaces.Discrete(32), spaces.Discrete(11)))
    unfit = observation_unfit(tuple_space)
    assert unfit is not None and unfit.key is None and unfit.space == "gymnasium.spaces.tuple.Tuple"
    nested = spaces.Dict({"pos": spaces.Box(-1, 1, (2,)), "goal": spaces.Dict({"xy": spaces.Box(-1, 1, (2,))})})
    unfit = observation_unfit(nested)
    assert unfit is not None and unfit.key == "goal" and unfit.keep == ("pos",)
    assert "Nested observation spaces are not supported" in unfit.error
    assert observation_unfit(spaces.Dict({"pos": spaces.Box(-1, 1, (2,)), "n": spaces.Discrete(3)})) is None


def test_the_policy_fits_the_space_as_sb3_builds_it() -> None:
    assert policy_for(spaces.Dict({"pos": spaces.Box(-1, 1, (2,))})) == "MultiInputPolicy"
    assert policy_for(spaces.Box(0, 255, (4, 84, 84), np.uint8)) == "CnnPolicy"  # envpool's Atari frames
    assert policy_for(spaces.Box(0, 255, (84, 84, 3), np.uint8)) == "CnnPolicy"
    # NatureCNN's 8x8 kernel at stride 4 cannot take a 7x7 view: MiniGrid's image is flattened.
    assert policy_for(spaces.Box(0, 255, (7, 7, 3), np.uint8)) == "MlpPolicy"
    assert policy_for(spaces.Box(-1, 1, (4,))) == "MlpPolicy"


def test_the_usual_fix_trains_and_sb3_warnings_are_not_refusals(workdir: Path) -> None:
    assert verdict(on("usergrid:GridImage-v0")) is None
    assert verdict(on("usergrid:Warned-v0")) is None
    # Without the text the Dict still holds a 7x7 image, which SB3's MultiInputPolicy gives NatureCNN.
    unfit = verdict(on("usergrid:GridNoMission-v0"))
    assert unfit is not None and unfit.part == "model" and unfit.policy == "MultiInputPolicy"
    assert "RuntimeError" in unfit.error and "Kernel size can't be greater than actual input size" in unfit.error


def test_a_verdict_crosses_the_process_intact() -> None:
    unfit = Unfit("observation", "NotImplementedError: x", "a.B", "mission", ("image",), "MlpPolicy")
    assert load_verdicts(dump_verdicts([None, unfit]), 2) == [None, unfit]
    with pytest.raises(ValueError):
        load_verdicts(dump_verdicts([None]), 2)
    with pytest.raises(ValueError):
        load_verdicts('[{"part": "nonsense", "error": "x"}]', 1)


def test_one_check_process_answers_for_each_env_and_skips_envpools(workdir: Path) -> None:
    presets = [on(MINIGRID), on("CartPole-v1"), on("usergrid:GridImage-v0")]
    minigrid, cartpole, image = unfit_envs(presets)
    assert cartpole is None and image is None
    assert minigrid is not None and minigrid.key == "mission"
    assert unfit_envs([on("CartPole-v1")]) == [None]  # envpool's: no process started at all


# ----- what the user sees -----


def refusal(result: subprocess.CompletedProcess[str], command: str) -> str:
    """The one line `cockpit COMMAND` refused with (exit 2, nothing on stdout)."""
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"cockpit {command}: error: ")
    return lines[0]


def assert_names_env_space_and_fix(line: str) -> None:
    assert f"'{MINIGRID}': stable-baselines3 cannot train this env" in line
    assert "its observation is a Dict whose key 'mission' is a MissionSpace" in line
    assert "(minigrid.core.mission.MissionSpace), a space SB3 does not take" in line
    assert "minigrid.wrappers.ImgObsWrapper(env)" in line
    assert "gymnasium.register(id='MyEnv-v0', entry_point=...)" in line and "mymodule:MyEnv-v0" in line


def test_run_refuses_minigrid_in_one_line_and_starts_nothing(tmp_path: Path) -> None:
    line = refusal(cockpit(tmp_path, "run", "--env", MINIGRID, "--headless", "--run-dir", "r"), "run")
    assert line.startswith(f"cockpit run: error: --env '{MINIGRID}'")
    assert_names_env_space_and_fix(line)
    assert list(tmp_path.iterdir()) == []  # no run dir, no runs/, no worker's files


def test_a_fleet_plan_with_minigrid_is_refused_naming_the_plan_and_its_key(tmp_path: Path) -> None:
    plan = tmp_path / "grid.toml"
    plan.write_text(
        textwrap.dedent(f"""
        name = "grid"
        [agents]
        env = ["CartPole-v1", "{MINIGRID}"]
        preset = "cartpole"
        seeds = 2
        [[tiers]]
        timesteps = 2048
    """)
    )
    for flags in (["--dry-run"], ["--headless", "--run-dir", "r"]):
        line = refusal(cockpit(tmp_path, "fleet", str(plan), *flags), "fleet")
        assert line.startswith(f"cockpit fleet: error: {plan}: 'agents.env' '{MINIGRID}'")
        assert_names_env_space_and_fix(line)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.toml"]


def test_recommend_refuses_it_too(tmp_path: Path) -> None:
    line = refusal(cockpit(tmp_path, "recommend", "--env", MINIGRID), "recommend")
    assert_names_env_space_and_fix(line)
