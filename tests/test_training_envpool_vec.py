"""The envpool adapter against gymnasium's own CartPole, and its Atari episode accounting."""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest

from cockpit_training.envpool_vec import EnvpoolVecEnv

N_ENVS = 4
MAX_STEPS = 50


def balance(obs: np.ndarray) -> int:
    """A simple controller that keeps the pole up, so episodes reach the time limit."""
    return int(obs[2] + 0.5 * obs[3] > 0)


class CountingPool:
    """Passes through to a real envpool pool and counts step calls (reset batching)."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.steps = 0

    def step(self, *args: Any) -> Any:
        self.steps += 1
        return self.pool.step(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)


def test_adapter_matches_gymnasium_cartpole_step_for_step() -> None:
    venv = EnvpoolVecEnv.make("CartPole-v1", N_ENVS, seed=3, max_episode_steps=MAX_STEPS)
    counting = CountingPool(venv.pool)
    venv.pool = counting
    refs = [gym.make("CartPole-v1", max_episode_steps=MAX_STEPS) for _ in range(N_ENVS)]
    obs = venv.reset()

    def sync(i: int, start: np.ndarray) -> None:
        refs[i].reset(seed=i)
        refs[i].unwrapped.state = start.astype(np.float64)
        ref_lengths[i] = 0

    ref_lengths = [0] * N_ENVS
    for i in range(N_ENVS):
        sync(i, obs[i])
    rng = np.random.default_rng(0)
    random_actions = rng.integers(0, 2, size=(400, N_ENVS))
    seen = {"terminated": 0, "truncated": 0}
    adapter_lengths: list[int] = []
    gym_lengths: list[int] = []

    for t in range(400):
        # Envs 0-1 are balanced (they hit the time limit); envs 2-3 act from a fixed random sequence.
        actions = np.array([balance(obs[i]) if i < 2 else random_actions[t, i] for i in range(N_ENVS)])
        calls_before = counting.steps
        new_obs, rewards, dones, infos = venv.step(actions)
        assert counting.steps - calls_before <= 2, "finished envs must be reset in one batch"
        for i in range(N_ENVS):
            r_obs, r_rew, r_term, r_trunc, _ = refs[i].step(int(actions[i]))
            ref_lengths[i] += 1
            assert rewards[i] == pytest.approx(r_rew)
            assert bool(dones[i]) == (r_term or r_trunc)
            if not dones[i]:
                np.testing.assert_allclose(new_obs[i], r_obs, atol=1e-4)
                assert "terminal_observation" not in infos[i]
                continue
            terminal = infos[i]["terminal_observation"]
            np.testing.assert_allclose(terminal, r_obs, atol=1e-4)
            # envpool cannot tell a pole that falls on the last allowed step from a time-out: it
            # reports truncation there (documented in training/envpool_vec.py). Otherwise exact.
            expect_truncated = r_trunc
            assert infos[i]["TimeLimit.truncated"] == expect_truncated, (i, t, ref_lengths[i], r_obs)
            seen["truncated" if r_trunc else "terminated"] += 1
            # The returned observation is the next episode's first one, not the terminal one.
            assert np.all(np.abs(new_obs[i]) <= 0.05)
            assert not np.allclose(new_obs[i], terminal)
            adapter_lengths.append(infos[i]["episode"]["l"])
            gym_lengths.append(ref_lengths[i])
            assert infos[i]["episode"]["r"] == pytest.approx(ref_lengths[i])
            sync(i, new_obs[i])
        obs = new_obs

    assert seen["truncated"] >= 4 and seen["terminated"] >= 10, seen
    assert adapter_lengths == gym_lengths


class ScriptedAtariPool:
    """A stand-in for an envpool Atari pool: replays scripted steps for one env.

    Each scripted step is (clipped reward, raw reward, lives lost -> terminated, game over, truncated).
    """

    config: ClassVar[dict[str, int]] = {"num_envs": 1}
    observation_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    action_space = gym.spaces.Discrete(4)

    def __init__(self, script: list[tuple[float, float, bool, bool, bool]]) -> None:
        self.script = list(script)
        self.resets = 0

    def _obs(self, value: int) -> np.ndarray:
        return np.full((1, 4, 84, 84), value, dtype=np.uint8)

    def reset(self) -> tuple[np.ndarray, dict[str, Any]]:
        return self._obs(0), {}

    def step(self, actions: np.ndarray, env_id: np.ndarray | None = None) -> tuple:
        if env_id is not None:  # the adapter's batched reset of finished envs
            self.resets += 1
            return self._obs(200), np.zeros(1), np.zeros(1, bool), np.zeros(1, bool), {"env_id": env_id}
        clipped, raw, life_lost, game_over, truncated = self.script.pop(0)
        info = {"env_id": np.array([0]), "reward": np.array([raw]), "terminated": np.array([int(game_over)])}
        terminated = np.array([life_lost or game_over])
        return self._obs(100), np.array([clipped]), terminated, np.array([truncated]), info


def test_atari_episodes_count_whole_games_with_raw_scores() -> None:
    script = [
        (1.0, 7.0, False, False, False),
        (0.0, 0.0, True, False, False),  # a life lost: SB3 sees done, but the game goes on
        (1.0, 4.0, False, False, False),
        (1.0, 1.0, True, True, False),  # game over
        (1.0, 1.0, False, False, False),
        (0.0, 0.0, False, False, True),  # time limit
    ]
    pool = ScriptedAtariPool(script)
    venv = EnvpoolVecEnv(pool, atari=True)
    venv.reset()
    results = [venv.step(np.array([0])) for _ in script]
    dones = [bool(r[2][0]) for r in results]
    episodes = [r[3][0].get("episode") for r in results]
    assert dones == [False, True, False, True, False, True]
    assert [r[1][0] for r in results] == [1.0, 0.0, 1.0, 1.0, 1.0, 0.0]  # SB3 trains on clipped rewards
    assert episodes[1] is None  # a lost life is not an episode
    assert episodes[3]["r"] == 12.0 and episodes[3]["l"] == 4
    assert episodes[5]["r"] == 1.0 and episodes[5]["l"] == 2
    assert results[5][3][0]["TimeLimit.truncated"] is True
    assert results[3][3][0]["TimeLimit.truncated"] is False
    assert pool.resets == 3
    assert results[1][3][0]["terminal_observation"][0, 0, 0] == 100
    assert results[1][0][0, 0, 0, 0] == 200  # the reset observation replaces the terminal one


def test_real_atari_reports_whole_games_not_lives() -> None:
    # Breakout has five lives. Random play only ever hits the bottom rows' 1-point bricks, so its
    # raw score equals its clipped one and cannot tell them apart: the SpaceInvaders test below
    # checks that scores are raw. This one checks that a game's score spans all its lives.
    venv = EnvpoolVecEnv.make("Breakout-v5", 2, seed=0)
    venv.reset()
    rng = np.random.default_rng(0)
    dones = 0
    clipped = np.zeros(2)
    games: list[tuple[float, float]] = []
    for _ in range(3000):
        _, rewards, d, infos = venv.step(rng.integers(0, 4, size=2))
        clipped += rewards
        dones += int(d.sum())
        for i, info in enumerate(infos):
            if "episode" in info:
                games.append((info["episode"]["r"], clipped[i]))
                clipped[i] = 0
    assert games, "random play should finish at least one Breakout game in 3000 steps"
    assert dones >= 5 * len(games)  # each lost life ends a training episode
    assert all(raw == clip for raw, clip in games)  # every life's points, none lost at a life's end
    assert sum(raw for raw, _ in games) > 0


def test_real_space_invaders_scores_are_raw_not_clipped() -> None:
    venv = EnvpoolVecEnv.make("SpaceInvaders-v5", 1, seed=0)
    venv.reset()
    rng = np.random.default_rng(0)
    clipped, raw = 0.0, None
    for _ in range(5000):
        _, rewards, _, infos = venv.step(rng.integers(0, 6, size=1))
        clipped += float(rewards[0])
        if "episode" in infos[0]:
            raw = infos[0]["episode"]["r"]
            break
    assert raw is not None, "random play should end a SpaceInvaders game in 5000 steps"
    assert raw > 2 * clipped > 0  # invaders score 5-30 points each; clipped rewards are 1
