"""The cartpole preset learns: PPO solves CartPole-v1 within 100k steps on a CPU."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3 import PPO

from tests.workerproc import kinds, start_worker
from training.checkpoints import CheckpointStore


@pytest.mark.slow
def test_cartpole_preset_reaches_475_within_100k_steps(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    worker = start_worker(job_dir, "--preset", "cartpole", "--timesteps", "100000", "--seed", "1")
    assert worker.finish(timeout=300) == 0, worker.stderr()
    events = worker.events()
    assert kinds(events, "finished")[0].steps == 100_000
    best_training_mean = max(p.ep_rew_mean or 0 for p in kinds(events, "progress"))
    assert best_training_mean >= 475

    # Judge the final policy on gymnasium's own CartPole-v1, not the training env.
    checkpoint, _ = CheckpointStore(job_dir / "checkpoints").newest_valid()
    model = PPO.load(checkpoint.model_path, device="cpu")
    env = gym.make("CartPole-v1")
    returns = []
    for episode in range(20):
        obs, _ = env.reset(seed=1000 + episode)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(int(action))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    assert np.mean(returns) >= 475, returns
