"""The real worker process: bad input, kill -9 and resume, SIGTERM, corrupt checkpoints, fallback."""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from cockpit.contract.events import PhaseEvent, read_events
from cockpit_training.checkpoints import MODEL_FILE, CheckpointStore
from tests.workerproc import Worker, kinds, run_worker, start_worker, write_preset


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--preset", "huge"], "preset 'huge': no such preset; choose one of cartpole, fast, heavy, beast"),
        (["--env", "CartPol-v1"], "--env 'CartPol-v1': neither envpool nor gymnasium has this env"),
        (["--timesteps", "-5"], "argument --timesteps: expected a positive integer, got '-5'"),
        (["--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
        pytest.param(
            ["--device", "cuda"],
            "--device cuda: ",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA"),
        ),
        (["--seed", "5000000000"], "--seed 5000000000: must be at most 2147483639"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_starts_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    job_dir = tmp_path / "job"
    base = {"--timesteps": "1000", "--job-dir": str(job_dir)}
    base.update(zip(args[::2], args[1::2], strict=True))
    result = run_worker(*[part for pair in base.items() for part in pair])
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not job_dir.exists()


def test_a_bad_preset_file_names_the_file_and_key(tmp_path: Path) -> None:
    preset = tmp_path / "bad.toml"
    preset.write_text('env = "CartPole-v1"\nn_envs = 8\nn_steps = 32\nbatch_size = 100\nn_epochs = 2\n')
    result = run_worker("--preset", str(preset), "--timesteps", "1000", "--job-dir", str(tmp_path / "job"))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"python -m cockpit_training.worker: error: {preset}: 'batch_size' 100 must divide n_envs x n_steps = 256; "
        'try 64 or 128, or batch_size = "auto"'
    )


def test_an_existing_job_dir_gets_an_error_event_for_bad_input(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    result = run_worker("--env", "Nope-v0", "--timesteps", "1000", "--job-dir", str(job_dir))
    assert result.returncode == 2
    (event,) = kinds(read_events(job_dir / "events.jsonl"), "error")
    assert event.type == "invalid_config" and "Nope-v0" in event.message


# One pytest-xdist worker runs the module: its tests share the module's `finished_1024`, made once.
pytestmark = pytest.mark.xdist_group("test_training_worker_process")


@pytest.fixture(scope="module")
def finished_1024(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The job dir of one worker run of the test preset (`write_preset()`) from nothing to 1,024
    steps (exit 0), with TMPDIR set to the `tmp` dir beside it. The tests that go on from a finished
    job share it: each continues a copy of its own (`continued`), so a worker start-up (seconds of
    imports) is paid once, not in every test."""
    directory = tmp_path_factory.mktemp("finished-1024")
    (directory / "tmp").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(directory / "tmp"))  # SB3's default logger makes SB3-<time> dirs there
        worker = start_worker(directory / "job", "--preset", str(write_preset(directory)), "--timesteps", "1024")
        assert worker.finish() == 0, worker.stderr()
    (finished,) = kinds(worker.events(), "finished")
    assert finished.status == "done" and finished.steps == 1024
    yield directory / "job"


def continued(finished: Path, tmp_path: Path) -> Path:
    """A copy of a finished job dir in tmp_path, for a test to continue."""
    return Path(shutil.copytree(finished, tmp_path / "job"))


@pytest.mark.slow
def test_kill_9_then_restart_resumes_and_ends_exactly_at_the_target(tmp_path: Path) -> None:
    preset = write_preset(tmp_path, checkpoint_every=2048)
    job_dir = tmp_path / "job"
    target = 20_000  # the kill comes at about 6,144 steps (the third checkpoint)
    first = start_worker(job_dir, "--preset", str(preset), "--timesteps", str(target))
    events = first.wait_for(lambda ev: len(kinds(ev, "checkpoint")) >= 3)
    os.kill(first.proc.pid, signal.SIGKILL)
    first.finish()
    killed_at = max(e.num_timesteps for e in kinds(first.events(), "phase"))
    last_checkpoint = kinds(events, "checkpoint")[-1].step
    assert killed_at < target

    second = start_worker(job_dir, "--preset", str(preset), "--timesteps", str(target))
    assert second.finish() == 0, second.stderr()
    events = second.events()
    started = kinds(events, "started")
    assert len(started) == 2
    assert started[1].resumed_from_step >= last_checkpoint
    assert [s.torch_threads for s in started] == [1, 1]  # the thread budget reached torch
    assert [s.tf32 for s in started] == [False, False]  # TF32 is for CUDA only; a CPU worker leaves it off
    (finished,) = kinds(events, "finished")
    assert finished.status == "done" and finished.steps == target
    store = CheckpointStore(job_dir / "checkpoints")
    assert len(store.list()) == 2
    assert store.newest_valid()[0].step == target
    # The second run's phases continue from the checkpoint, not from zero.
    second_phases = [e for e in kinds(events, "phase") if e.t >= started[1].t]
    assert second_phases[0].num_timesteps == started[1].resumed_from_step


def run_small_preset(tmp_path: Path, *, env: str, n_envs: int, n_steps: int, timesteps: int) -> list[dict]:
    """Run a one-epoch preset for `env` to completion (exit 0) and return its events."""
    preset = tmp_path / "small.toml"
    preset.write_text(f'env = "{env}"\nn_envs = {n_envs}\nn_steps = {n_steps}\nbatch_size = 64\nn_epochs = 1\n')
    worker = start_worker(tmp_path / "job", "--preset", str(preset), "--timesteps", str(timesteps))
    assert worker.finish() == 0, worker.stderr()
    return worker.events()


def signal_within_10s(worker: Worker, sig: signal.Signals = signal.SIGTERM) -> tuple[list[dict], dict]:
    """Signal the worker; it must exit 0 within 10 s. Returns its events and `finished` event."""
    sent = time.monotonic()
    worker.proc.send_signal(sig)
    assert worker.finish(timeout=10) == 0, worker.stderr()
    assert time.monotonic() - sent < 10
    events = worker.events()
    (finished,) = kinds(events, "finished")
    return events, finished


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_checkpoints_and_finishes_stopped(tmp_path: Path, sig: signal.Signals) -> None:
    preset = write_preset(tmp_path, checkpoint_every=1_000_000)
    job_dir = tmp_path / "job"
    worker = start_worker(job_dir, "--preset", str(preset), "--timesteps", "1000000")
    worker.wait_for(lambda ev: len(kinds(ev, "phase")) >= 6)
    events, finished = signal_within_10s(worker, sig)
    (checkpoint,) = kinds(events, "checkpoint")
    assert finished.status == "stopped" and 0 < finished.steps < 1_000_000
    assert checkpoint.step == finished.steps
    saved, corrupt = CheckpointStore(job_dir / "checkpoints").newest_valid()
    assert saved is not None and saved.step == finished.steps and not corrupt


@pytest.mark.slow
def test_sigterm_during_a_long_train_phase_stops_within_10s(tmp_path: Path) -> None:
    # 1000 epochs of a 512x512 MLP over each rollout: one train phase takes far longer than 10 s.
    preset = write_preset(tmp_path, checkpoint_every=1_000_000, n_epochs=1000, net_arch=(512, 512))
    job_dir = tmp_path / "job"
    worker = start_worker(job_dir, "--preset", str(preset), "--timesteps", "1000000")
    worker.wait_for(lambda ev: any(isinstance(e, PhaseEvent) and e.phase == "train" for e in ev))
    time.sleep(1.0)
    events, finished = signal_within_10s(worker)
    assert finished.status == "stopped" and finished.steps == 256
    assert kinds(events, "phase")[-1].phase == "train"  # the stop came mid-training
    assert kinds(events, "checkpoint")[0].step == 256


@pytest.mark.slow
def test_a_corrupt_newest_checkpoint_is_reported_and_the_previous_one_used(tmp_path: Path) -> None:
    preset = write_preset(tmp_path, checkpoint_every=1024)
    job_dir = tmp_path / "job"
    first = start_worker(job_dir, "--preset", str(preset), "--timesteps", "4096")
    assert first.finish() == 0, first.stderr()
    older, newest = CheckpointStore(job_dir / "checkpoints").list()
    (newest / MODEL_FILE).write_bytes(b"torn")

    second = start_worker(job_dir, "--preset", str(preset), "--timesteps", "6144")
    assert second.finish() == 0, second.stderr()
    started = kinds(second.events(), "started")[-1]
    assert started.resumed_from_step == int(older.name.split("-")[1])
    (bad,) = started.corrupt_checkpoints
    assert newest.name in bad.path and "SHA-256" in bad.reason
    assert "is corrupt" in second.stderr()
    assert kinds(second.events(), "finished")[-1].steps == 6144


@pytest.mark.slow
def test_a_finished_job_run_again_finishes_at_once(tmp_path: Path, finished_1024: Path) -> None:
    job_dir = continued(finished_1024, tmp_path)  # the first run: the test preset to 1024 steps
    args = ("--preset", str(write_preset(tmp_path)), "--timesteps", "1024")
    assert start_worker(job_dir, *args).finish() == 0
    events = read_events(job_dir / "events.jsonl")
    finished = kinds(events, "finished")
    assert [f.steps for f in finished] == [1024, 1024]
    assert [f.status for f in finished] == ["done", "done"]
    # The second run resumed from the final checkpoint and trained no further: no phase after its start.
    starts = [i for i, e in enumerate(events) if e.kind == "started"]
    assert len(starts) == 2 and events[starts[1]].resumed_from_step == 1024
    assert [e.kind for e in events[starts[1] :] if e.kind == "phase"] == []


@pytest.mark.slow
def test_a_new_or_resumed_worker_leaves_nothing_in_the_temp_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, finished_1024: Path
) -> None:
    new_temp = finished_1024.parent / "tmp"  # the new worker's (1024 steps from nothing) TMPDIR
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))  # SB3's default logger makes SB3-<time> dirs there
    preset, job_dir = write_preset(tmp_path), continued(finished_1024, tmp_path)
    assert start_worker(job_dir, "--preset", str(preset), "--timesteps", "2048").finish() == 0
    assert [f.steps for f in kinds(read_events(job_dir / "events.jsonl"), "finished")] == [1024, 2048]
    assert [p.name for p in new_temp.glob("SB3-*")] == []
    assert [p.name for p in temp.glob("SB3-*")] == []


@pytest.mark.slow
def test_env_ids_envpool_lacks_fall_back_to_gymnasium(tmp_path: Path) -> None:
    events = run_small_preset(tmp_path, env="Taxi-v4", n_envs=2, n_steps=64, timesteps=512)
    assert kinds(events, "started")[0].config["backend"] == "gymnasium"
    assert kinds(events, "finished")[0].steps == 512


@pytest.mark.slow
def test_a_resumed_job_trains_with_the_current_presets_rollout_settings(tmp_path: Path, finished_1024: Path) -> None:
    job_dir = continued(finished_1024, tmp_path)  # trained with n_steps 32 (8 envs) to 1024 steps
    # Same network, twice the rollout: n_steps 64 instead of 32 (8 envs).
    bigger = tmp_path / "bigger.toml"
    bigger.write_text(write_preset(tmp_path).read_text().replace("n_steps = 32", "n_steps = 64"))
    second = start_worker(job_dir, "--preset", str(bigger), "--timesteps", "3072")
    assert second.finish() == 0, second.stderr()
    events = second.events()
    resumed_at = kinds(events, "started")[-1].t
    trains = [e.num_timesteps for e in kinds(events, "phase") if e.phase == "train" and e.t > resumed_at]
    assert trains == [1024 + 512 * k for k in range(1, 5)]


@pytest.mark.slow
def test_a_resume_with_more_envs_ends_at_the_first_vector_step_past_the_target(
    tmp_path: Path, finished_1024: Path
) -> None:
    job_dir = continued(finished_1024, tmp_path)  # 8 envs to 1024 steps
    wide = tmp_path / "wide.toml"
    wide.write_text(write_preset(tmp_path).read_text().replace("n_envs = 8", "n_envs = 16"))
    second = start_worker(job_dir, "--preset", str(wide), "--timesteps", "2008")
    assert second.finish() == 0, second.stderr()
    events = second.events()
    started, finished = kinds(events, "started")[-1], kinds(events, "finished")[-1]
    assert started.resumed_from_step == 1024
    assert started.target_steps == 1024 + 62 * 16 == finished.steps  # 61.5 vector steps to go


@pytest.mark.slow
def test_a_resume_on_another_env_is_refused_and_keeps_the_checkpoints(tmp_path: Path, finished_1024: Path) -> None:
    job_dir = continued(finished_1024, tmp_path)  # CartPole-v1 to 1024 steps
    preset = write_preset(tmp_path)
    before = CheckpointStore(job_dir / "checkpoints").list()
    result = run_worker(
        "--preset", str(preset), "--env", "Acrobot-v1", "--timesteps", "2048", "--job-dir", str(job_dir)
    )
    assert result.returncode == 2
    assert "cannot continue under preset" in result.stderr and "another --env?" in result.stderr
    assert CheckpointStore(job_dir / "checkpoints").list() == before
    assert not (job_dir / "checkpoints" / "corrupt").exists()


@pytest.mark.slow
def test_normalized_runs_checkpoint_and_resume_their_statistics(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    preset = tmp_path / "norm.toml"
    preset.write_text(write_preset(tmp_path).read_text() + "normalize = true\n")
    assert start_worker(job_dir, "--preset", str(preset), "--timesteps", "1024").finish() == 0
    saved, _ = CheckpointStore(job_dir / "checkpoints").newest_valid()
    assert saved.vecnormalize_path is not None
    first = _statistics(saved.vecnormalize_path)
    # Stepped: 8 observations at the reset, then 1024 steps (fresh statistics: count 1e-4, mean 0, var 1).
    assert first["obs_rms"].count == pytest.approx(1e-4 + 8 + 1024)
    assert not np.allclose(first["obs_rms"].mean, 0.0) and not np.allclose(first["obs_rms"].var, 1.0)
    assert first["ret_rms"].count > 1000 and not np.allclose(first["ret_rms"].var, 1.0)
    second = start_worker(job_dir, "--preset", str(preset), "--timesteps", "2048")
    assert second.finish() == 0, second.stderr()
    assert kinds(second.events(), "started")[-1].resumed_from_step == 1024
    resumed, _ = CheckpointStore(job_dir / "checkpoints").newest_valid()
    assert resumed.step == 2048 and resumed.vecnormalize_path is not None
    last = _statistics(resumed.vecnormalize_path)
    # The resumed run kept counting from the saved statistics (its own reset, then 1024 more steps);
    # statistics started afresh would count only 8 + 1024.
    assert last["obs_rms"].count == pytest.approx(first["obs_rms"].count + 8 + 1024)
    assert last["ret_rms"].count == pytest.approx(first["ret_rms"].count + 1024)
    # Resuming the same job without normalization would silently change its inputs: refused.
    plain = run_worker("--preset", str(write_preset(tmp_path)), "--timesteps", "4096", "--job-dir", str(job_dir))
    assert plain.returncode == 2 and "normalize" in plain.stderr


def _statistics(path: Path) -> dict:
    """The running statistics in a checkpoint's vecnormalize.pkl."""
    with path.open("rb") as fh:
        vecnorm = pickle.load(fh)
    return {"obs_rms": vecnorm.obs_rms, "ret_rms": vecnorm.ret_rms}


@pytest.mark.slow
def test_two_workers_cannot_share_a_job_dir(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    first = start_worker(job_dir, "--preset", str(write_preset(tmp_path)), "--timesteps", "1000000")
    first.wait_for(lambda ev: bool(kinds(ev, "started")))
    second = run_worker("--timesteps", "1000", "--job-dir", str(job_dir))
    assert second.returncode == 2 and "another worker is using it" in second.stderr
    signal_within_10s(first)


def test_a_job_dir_that_is_a_file_is_bad_input(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    result = run_worker("--timesteps", "1000", "--job-dir", str(target))
    assert result.returncode == 2 and f"--job-dir {target}: is a file" in result.stderr


@pytest.mark.slow
def test_resuming_with_a_different_network_is_refused(tmp_path: Path, finished_1024: Path) -> None:
    job_dir = continued(finished_1024, tmp_path)  # a [64, 64] network to 1024 steps
    wider = write_preset(tmp_path, net_arch=(128, 128))
    result = run_worker("--preset", str(wider), "--timesteps", "2048", "--job-dir", str(job_dir))
    assert result.returncode == 2
    assert "its network is [64, 64], the preset's [128, 128]" in result.stderr
    assert kinds(read_events(job_dir / "events.jsonl"), "error")[-1].type == "invalid_config"


@pytest.mark.slow
def test_atari_gets_a_cnn_policy(tmp_path: Path) -> None:
    events = run_small_preset(tmp_path, env="Pong-v5", n_envs=4, n_steps=32, timesteps=256)
    started = kinds(events, "started")[0]
    assert started.policy == "ActorCriticCnnPolicy" and started.config["backend"] == "envpool"
