"""The cartpole preset learns: PPO solves CartPole-v1 within 100k steps on a CPU."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3 import PPO

from cockpit_training.checkpoints import CheckpointStore
from tests.cockpitproc import PLAIN_RUN, Cockpit
from tests.workerproc import kinds


@PLAIN_RUN
@pytest.mark.slow
def test_cartpole_preset_reaches_475_within_100k_steps(plain_cartpole_run: Cockpit) -> None:
    # The worker of the session's plain `cockpit run` (conftest.py) that trained seed 1: the
    # cartpole preset as it ships, from nothing to 100k steps in one start, with the run's thread
    # budget (one thread a job on two cores). test_e2e_run checks the run around it.
    assert plain_cartpole_run.proc.returncode == 0, plain_cartpole_run.text()[-3000:]
    job_dir = plain_cartpole_run.run_dir / "jobs" / "001"
    events = plain_cartpole_run.events("001")
    (started,) = kinds(events, "started")
    assert started.config["preset"]["name"] == "cartpole" and started.config["seed"] == 1
    assert started.target_steps == 100_000 and started.resumed_from_step is None  # one uninterrupted run
    assert kinds(events, "finished")[0].steps == 100_000
    best_training_mean = max(p.ep_rew_mean or 0 for p in kinds(events, "progress"))
    assert best_training_mean >= 475

    # Judge the final policy on gymnasium's own CartPole-v1, not the training env.
    checkpoint, _ = CheckpointStore(job_dir / "checkpoints").newest_valid()
    assert checkpoint is not None and checkpoint.step == 100_000
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
