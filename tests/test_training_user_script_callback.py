"""CockpitCallback in a user's own SB3 script, on SB3's standard DummyVecEnv with Monitor.

Imported by its public name, `cockpit.callback`. With no arguments it reports to the job named by
`COCKPIT_JOB_DIR` (what `cockpit run -- COMMAND` sets), and outside the cockpit it does nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

from cockpit.callback import CockpitCallback
from cockpit.contract.events import read_events
from cockpit.contract.scriptargs import JOB_DIR_ENV


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


def small_model() -> PPO:
    venv = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    return PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu")


def test_outside_the_cockpit_the_callback_does_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(JOB_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    model = small_model()
    callback = CockpitCallback(checkpoint_every=128)
    model.learn(1000, callback=callback)
    assert not callback.active and list(tmp_path.iterdir()) == []
    assert model.num_timesteps == 1024  # SB3's own end, a whole rollout: the callback stopped nothing
    assert CockpitCallback.newest_checkpoint() is None


def test_under_the_cockpit_it_reports_to_its_job_and_checkpoints_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_dir = tmp_path / "run" / "jobs" / "003"
    monkeypatch.setenv(JOB_DIR_ENV, str(job_dir))
    model = small_model()
    model.learn(1000, callback=CockpitCallback(checkpoint_every=256, progress_interval=3600))
    events = read_events(job_dir / "events.jsonl")
    assert events[0].kind == "started" and events[0].target_steps == 1000 and events[0].resumed_from_step is None
    saved = [e for e in events if e.kind == "checkpoint"]
    assert [e.step for e in saved] == [256, 512, 768]
    newest = CockpitCallback.newest_checkpoint()
    assert newest is not None and newest.is_file() and newest.parent.parent == job_dir / "checkpoints"
    assert "000000000768" in newest.parent.name  # the newest two are kept, this one last
    # A restarted script goes on from there, and says so.
    resumed = PPO.load(newest, env=make_vec_env("CartPole-v1", n_envs=2, seed=0), device="cpu")
    resumed.learn(1000 - resumed.num_timesteps, callback=CockpitCallback(), reset_num_timesteps=False)
    restarted = [e for e in read_events(job_dir / "events.jsonl") if e.kind == "started"][-1]
    assert restarted.resumed_from_step == 768 and restarted.target_steps == 1000
