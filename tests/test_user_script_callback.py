"""CockpitCallback in a user's own SB3 script, on SB3's standard DummyVecEnv with Monitor."""

from __future__ import annotations

from pathlib import Path

from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

from cockpit.contract.events import read_events
from cockpit_training.callback import CockpitCallback


def test_a_plain_sb3_script_reports_to_the_cockpit(tmp_path: Path) -> None:
    venv = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(1000, callback=CockpitCallback.for_job_dir(tmp_path / "job", progress_interval=3600))
    events = read_events(tmp_path / "job" / "events.jsonl")
    assert events[0].kind == "started" and events[0].device == "cpu"
    assert events[0].versions["stable-baselines3"] and events[0].versions["torch"]
    assert model.num_timesteps == 1000  # stopped exactly at learn's total
    phases = [e.phase for e in events if e.kind == "phase"]
    assert phases[:4] == ["rollout", "train", "rollout", "train"]
    progress = [e for e in events if e.kind == "progress"]
    assert progress[-1].episodes > 0 and progress[-1].ep_len_mean > 0
    assert events[-1].kind == "finished" and events[-1].status == "done" and events[-1].steps == 1000
