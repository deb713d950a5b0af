"""Which model `cockpit play` plays (`cockpit.core.record.playable`, `cockpit.core.launch.player.job_model`):
a job's newest checkpoint with the env its worker recorded, a fleet's best agent's collected model,
each checked against its SHA-256 first; bad choices are one line naming the flag. Job directories
and fleets are written straight to disk: no training."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cockpit.contract.checkpoint_files import META_FILE, MODEL_FILE, VECNORMALIZE_FILE
from cockpit.contract.events import EventWriter
from cockpit.contract.files import sha256_of
from cockpit.contract.model_manifest import MODELS_DIR
from cockpit.contract.rundir import RUN_TOML, RunDir
from cockpit.core.record.playable import PlayableError, playable
from tests.test_commands_report_fleet import _sync_fleet


def write_job(job_dir: Path, env: str = "CartPole-v1", env_kwargs: dict[str, object] | None = None,
              steps: tuple[int, ...] = (2048, 4096), normalize: bool = False) -> list[Path]:  # fmt: skip
    """A job directory as a worker leaves it: a `started` event with its config, and a checkpoint
    per step (stand-in model bytes, with the sums in meta.json); the checkpoints, oldest first."""
    job_dir.mkdir(parents=True)
    preset = {"name": "cartpole", "env": env, "env_kwargs": env_kwargs or {}, "normalize": normalize}
    EventWriter(job_dir / "events.jsonl").started(pid=1, device="cpu", config={"env": env, "preset": preset})
    made = []
    for i, step in enumerate(steps):
        checkpoint = job_dir / "checkpoints" / f"step-{step:012d}-{1000 + i}"
        checkpoint.mkdir(parents=True)
        (checkpoint / MODEL_FILE).write_bytes(f"model at {step}".encode())
        if normalize:
            (checkpoint / VECNORMALIZE_FILE).write_bytes(f"statistics at {step}".encode())
        sums = {p.name: sha256_of(p) for p in checkpoint.iterdir()}
        (checkpoint / META_FILE).write_text(json.dumps({"step": step, "files": sums}))
        made.append(checkpoint)
    return made


def _run(run_dir: Path, jobs: tuple[str, ...]) -> None:
    run_dir.mkdir()
    (run_dir / RUN_TOML).write_text("")
    for job in jobs:
        write_job(RunDir(run_dir).job(job).path, env_kwargs={"max_episode_steps": 200})


def test_a_jobs_newest_checkpoint_is_played_on_the_env_its_worker_recorded(tmp_path: Path) -> None:
    checkpoints = write_job(tmp_path / "job", env="Pong-v5", env_kwargs={"stack_num": 2}, normalize=True)
    model = playable(tmp_path / "job")
    assert model.source == checkpoints[-1]
    assert (model.model, model.vecnormalize) == (checkpoints[-1] / MODEL_FILE, checkpoints[-1] / VECNORMALIZE_FILE)
    assert (model.env, dict(model.env_kwargs)) == ("Pong-v5", {"stack_num": 2})
    older = playable(tmp_path / "job", checkpoint=checkpoints[0])
    assert older.model == checkpoints[0] / MODEL_FILE
    request = model.request(tmp_path / "r.json", episodes=2)
    assert (request.env, request.vecnormalize, request.source) == ("Pong-v5", model.vecnormalize, str(checkpoints[-1]))


def test_a_checkpoint_failing_its_sums_is_refused(tmp_path: Path) -> None:
    checkpoints = write_job(tmp_path / "job")
    (checkpoints[-1] / MODEL_FILE).write_bytes(b"flipped")
    with pytest.raises(PlayableError, match=r"model\.zip does not match the SHA-256 its worker recorded"):
        playable(tmp_path / "job")


def test_a_run_of_several_jobs_asks_which_and_an_unknown_job_names_the_jobs(tmp_path: Path) -> None:
    _run(tmp_path / "run", ("0", "1", "10", "2"))
    with pytest.raises(PlayableError, match=r"holds 4 jobs: name one with --job ID \(0, 1, 2, 10\)$"):
        playable(tmp_path / "run")
    with pytest.raises(PlayableError, match=r"^--job 7: no such job in .* \(its jobs: 0, 1, 2, 10\)$"):
        playable(tmp_path / "run", job="7")
    assert playable(tmp_path / "run", job="10").env_kwargs == {"max_episode_steps": 200}
    with pytest.raises(PlayableError, match=r"--best: .* is not a fleet"):
        playable(tmp_path / "run", best=True)


def test_best_is_the_leaderboards_first_and_its_collected_model_is_checked_first(tmp_path: Path) -> None:
    run = tmp_path / "fleet"
    _sync_fleet(run)  # a0007 leads with 500, a0004 follows; both collected
    write_job(RunDir(run).job("a0007").path, env_kwargs={"max_episode_steps": 300})
    write_job(RunDir(run).job("a0004").path, env_kwargs={"max_episode_steps": 300})
    best = playable(run, best=True)
    assert best.model == run / MODELS_DIR / "a0007.zip"
    assert (best.env, dict(best.env_kwargs)) == ("CartPole-v1", {"max_episode_steps": 300})
    assert playable(run, checkpoint=run / MODELS_DIR / "a0004.zip").model == run / MODELS_DIR / "a0004.zip"
    (run / MODELS_DIR / "a0007.zip").write_bytes(b"tampered")
    with pytest.raises(PlayableError, match=r"a0007\.zip: does not match its SHA-256 in models\.toml: not played"):
        playable(run, best=True)


def test_a_collected_model_plays_on_its_jobs_env_settings_when_its_checkpoints_are_gone_or_bad(tmp_path: Path) -> None:
    run = tmp_path / "fleet"
    _sync_fleet(run)
    a7 = write_job(RunDir(run).job("a0007").path, env_kwargs={"max_episode_steps": 300})
    a4 = write_job(RunDir(run).job("a0004").path, env_kwargs={"max_episode_steps": 400})
    for checkpoint in a7:  # pruned
        shutil.rmtree(checkpoint)
    (a4[-1] / MODEL_FILE).write_bytes(b"flipped")  # fails its sums; the collected copy does not
    assert dict(playable(run, best=True).env_kwargs) == {"max_episode_steps": 300}
    collected = playable(run, checkpoint=run / MODELS_DIR / "a0004.zip")
    assert (collected.model, dict(collected.env_kwargs)) == (run / MODELS_DIR / "a0004.zip", {"max_episode_steps": 400})


def test_a_collected_model_whose_jobs_env_is_unknown_is_one_line_not_a_guess(tmp_path: Path) -> None:
    run = tmp_path / "fleet"
    _sync_fleet(run)  # its jobs' directories are not there: nothing records their env_kwargs
    with pytest.raises(PlayableError, match=r"a0007\.zip: not played: the env settings it trained with are unknown "
                       r"\(.*a0007: not a job directory \(no events\.jsonl\)\)$"):  # fmt: skip
        playable(run, best=True)
    job_dir = RunDir(run).job("a0004").path
    job_dir.mkdir(parents=True)
    EventWriter(job_dir / "events.jsonl").started(pid=1, device="cpu", config={"command": ["python", "mine.py"]})
    with pytest.raises(PlayableError, match=r"a0004\.zip: not played: .*its events record no env"):
        playable(run, job="a0004")
