"""Episode targets (`--episodes N`): the worker's flags, the callback's stop at the rollout boundary
after the N-th whole episode, the count saved with each checkpoint, and one real kill -9 + resume."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

from cockpit.contract.events import CheckpointEvent, EventWriter, ProgressEvent, read_events
from cockpit.contract.workerargs import WorkerArgs
from cockpit_training import worker
from cockpit_training.callback import CockpitCallback, EpisodeTargetReached
from cockpit_training.checkpoints import CheckpointStore
from tests.workerproc import kinds, start_worker, write_preset


def test_episodes_round_trips_through_the_worker_command_line(tmp_path: Path) -> None:
    args = WorkerArgs(job_dir=tmp_path, episodes=3_000)
    assert "--episodes" in args.to_argv() and "--timesteps" not in args.to_argv()
    assert WorkerArgs.parse(args.to_argv()) == args
    with pytest.raises(ValueError, match="not both"):
        WorkerArgs(job_dir=tmp_path, timesteps=1000, episodes=5)


def test_timesteps_and_episodes_together_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        WorkerArgs.parse(["--job-dir", str(tmp_path / "job"), "--timesteps", "1000", "--episodes", "5"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "argument --episodes: not allowed with argument --timesteps" in err
    assert not (tmp_path / "job").exists()  # nothing started


def test_an_episode_target_replaces_the_presets_step_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = worker.resolve_config(WorkerArgs.parse(["--job-dir", str(tmp_path), "--episodes", "50"]))
    assert config.episodes == 50 and config.timesteps == 0
    assert config.as_dict()["episodes"] == 50
    plain = worker.resolve_config(WorkerArgs.parse(["--job-dir", str(tmp_path)]))
    assert plain.episodes is None and plain.timesteps == 100_000


def test_a_checkpoint_keeps_its_episode_count(tmp_path: Path, tiny_ppo) -> None:
    model = tiny_ppo()
    store = CheckpointStore(tmp_path / "checkpoints")
    store.save(model, 64)  # as a worker before episode counts were saved wrote them
    assert store.newest_valid()[0].episodes is None
    saved = store.save(model, 128, episodes=17)
    assert saved.episodes == 17
    assert store.newest_valid()[0] == saved


def test_the_callback_stops_at_the_rollout_boundary_after_the_nth_episode(tmp_path: Path, tiny_ppo) -> None:
    model = tiny_ppo()  # 4 envs x 16 steps: 64-step rollouts; a fresh CartPole episode is ~20 steps
    events = EventWriter(tmp_path / "events.jsonl")
    callback = CockpitCallback(events, target_episodes=7, episodes=2, emit_started=False)
    with pytest.raises(EpisodeTargetReached):
        model.learn(2**62, callback=callback)
    callback.close()
    events.close()
    assert callback.episodes >= 7
    assert model.num_timesteps % 64 == 0  # not one env step into the next rollout
    # The count at each rollout boundary (a progress event with losses): the last is past the
    # target, the one before it is not, so the job ended within one rollout of the 7th episode.
    at_boundaries = [e.episodes for e in read_events(tmp_path / "events.jsonl")
                     if isinstance(e, ProgressEvent) and e.losses is not None]  # fmt: skip
    assert at_boundaries[-1] == callback.episodes >= 7 > at_boundaries[-2]
    assert at_boundaries[0] > 2  # it counted on from the resumed job's 2


@pytest.mark.slow
def test_episodes_50_survive_a_kill_9_and_end_within_one_rollout_of_the_50th(tmp_path: Path) -> None:
    # A checkpoint at every rollout boundary (8 envs x 32 steps), so the kill has one to resume from.
    preset = write_preset(tmp_path, checkpoint_every=256, n_epochs=10)
    job_dir = tmp_path / "job"
    first = start_worker(job_dir, "--preset", str(preset), "--episodes", "50")
    first.wait_for(lambda ev: len(kinds(ev, "checkpoint")) >= 1)
    os.kill(first.proc.pid, signal.SIGKILL)
    first.finish()
    assert not kinds(first.events(), "finished")  # killed before its target
    saved_episodes = CheckpointStore(job_dir / "checkpoints").newest_valid()[0].episodes
    assert saved_episodes is not None and 0 < saved_episodes < 50

    second = start_worker(job_dir, "--preset", str(preset), "--episodes", "50")
    assert second.finish() == 0, second.stderr()
    events = second.events()
    started = kinds(events, "started")
    assert len(started) == 2 and started[1].target_episodes == 50 and started[1].target_steps is None
    assert started[1].resumed_episodes == saved_episodes  # the count went on from the checkpoint
    (finished,) = kinds(events, "finished")
    assert finished.status == "done" and finished.steps % 256 == 0
    resumed = [e for e in events if e.t >= started[1].t]
    at_boundaries = [e.episodes for e in kinds(resumed, "progress") if e.losses is not None]
    assert at_boundaries[0] > saved_episodes
    assert at_boundaries[-1] >= 50 > at_boundaries[-2]  # within one rollout of the 50th
    newest = kinds(events, "checkpoint")[-1]
    assert isinstance(newest, CheckpointEvent) and newest.step == finished.steps
    assert CheckpointStore(job_dir / "checkpoints").newest_valid()[0].episodes == at_boundaries[-1]
