"""Fast, in-process checks at the seams of the worker behaviours the slow end-to-end tests cover
with real processes: a stop signal sets the flag and the stop checkpoints and finishes `stopped`,
a worker whose cockpit dies (even by kill -9) is asked to stop, a mismatched checkpoint is refused
and kept, and one job dir admits one worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from stable_baselines3 import PPO

from cockpit.contract.events import E, EventWriter, PhaseEvent, read_events
from cockpit.contract.presets import Preset, load
from cockpit.contract.workerargs import PARENT_PID_ENV
from cockpit_training import worker
from cockpit_training.checkpoints import CheckpointStore
from cockpit_training.envpool_vec import EnvpoolVecEnv
from cockpit_training.model import CheckpointMismatch, new_model, resume
from cockpit_training.stopping import StopFlag

ROLLOUT = 64  # 4 envs x 16 steps


def tiny_preset(**overrides: object) -> Preset:
    """The cartpole preset at the tiny_ppo fixture's size: 4 envs, 16-step rollouts, one epoch."""
    small = {"n_envs": 4, "n_steps": 16, "batch_size": 32, "n_epochs": 1, "checkpoint_every": 1_000_000}
    return replace(load("cartpole"), **{**small, **overrides})  # type: ignore[arg-type]


def config(job_dir: Path, preset: Preset, timesteps: int, *, tensorboard: bool = True) -> worker.JobConfig:
    return worker.JobConfig(preset, preset.env, "envpool", timesteps, job_dir, 0, "cpu", 1, 1,
                            tensorboard=tensorboard)  # fmt: skip


class StopAtRollout(EventWriter):
    """The worker's events to `path`, with a stop requested (as SIGTERM's handler does) when the
    rollout that starts at step `step` begins; never with `step` None."""

    def __init__(self, path: Path, stop: StopFlag, step: int | None) -> None:
        super().__init__(path)
        self.stop, self.step = stop, step

    def emit(self, event: E) -> E:
        if isinstance(event, PhaseEvent) and event.phase == "rollout" and event.num_timesteps == self.step:
            self.stop.request("SIGTERM")
        return super().emit(event)


@pytest.mark.usefixtures("torch_threads_kept")
def test_a_stop_mid_run_writes_a_loadable_checkpoint_and_finishes_stopped(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    stop = StopFlag()
    code = worker.train(config(job_dir, tiny_preset(), 100_000), stop,
                        StopAtRollout(job_dir / "events.jsonl", stop, ROLLOUT))  # fmt: skip
    assert code == 0
    events = read_events(job_dir / "events.jsonl")
    (checkpoint,) = [e for e in events if e.kind == "checkpoint"]
    (finished,) = [e for e in events if e.kind == "finished"]
    assert finished.status == "stopped" and finished.steps == ROLLOUT + 4  # one vector step past the stop
    assert checkpoint.step == finished.steps
    saved, corrupt = CheckpointStore(job_dir / "checkpoints").newest_valid()
    assert saved is not None and not corrupt and saved.step == finished.steps
    assert PPO.load(saved.model_path).num_timesteps == finished.steps


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_sets_the_flag_instead_of_ending_the_process(sig: signal.Signals) -> None:
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    stop = StopFlag()
    try:
        stop.install_signal_handlers()
        os.kill(os.getpid(), sig)  # handled before kill() returns: the signal is for this thread
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    assert stop.requested and stop.reason == sig.name


def saved_checkpoint(tmp_path: Path, preset: Preset) -> CheckpointStore:
    venv = EnvpoolVecEnv.make(preset.env, preset.n_envs, seed=0, num_threads=1)
    store = CheckpointStore(tmp_path / "checkpoints")
    store.save(new_model(preset, venv, seed=0, device="cpu"), 64)
    return store


@pytest.mark.parametrize(
    ("env", "overrides", "message"),
    [
        ("Acrobot-v1", {}, "another --env?"),
        ("CartPole-v1", {"net_arch": (128, 128)}, "its network is [64, 64], the preset's [128, 128]"),
        ("CartPole-v1", {"activation": "relu"}, "its activation is Tanh, the preset's relu"),
        ("CartPole-v1", {"normalize": True}, "it was trained with normalize = False, the preset says True"),
    ],
)
def test_a_checkpoint_that_cannot_continue_is_refused_and_kept(
    tmp_path: Path, env: str, overrides: dict, message: str
) -> None:
    store = saved_checkpoint(tmp_path, tiny_preset())
    before = store.list()
    venv = EnvpoolVecEnv.make(env, 4, seed=0, num_threads=1)
    with pytest.raises(CheckpointMismatch, match="cannot continue under preset") as refused:
        resume(store, tiny_preset(env=env, **overrides), venv, device="cpu")
    assert message in str(refused.value)
    assert store.list() == before and not (store.directory / "corrupt").exists()


def test_the_same_preset_and_env_resume(tmp_path: Path) -> None:
    store = saved_checkpoint(tmp_path, tiny_preset())
    resumed = resume(store, tiny_preset(), EnvpoolVecEnv.make("CartPole-v1", 4, seed=0, num_threads=1), device="cpu")
    assert resumed.model is not None and resumed.checkpoint is not None and resumed.checkpoint.step == 64


def test_a_job_dir_admits_one_worker_at_a_time(tmp_path: Path) -> None:
    first = worker._lock_job_dir(tmp_path)
    assert first is not None
    try:
        assert worker._lock_job_dir(tmp_path) is None  # a second open file description conflicts
    finally:
        os.close(first)
    again = worker._lock_job_dir(tmp_path)  # released with its holder
    assert again is not None
    os.close(again)


def test_a_worker_started_on_a_locked_job_dir_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(StopFlag, "install_signal_handlers", lambda self: None)  # keep pytest's
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    held = worker._lock_job_dir(job_dir)
    assert held is not None
    try:
        code = worker.main(["--timesteps", "1000", "--job-dir", str(job_dir)])
    finally:
        os.close(held)
    assert code == 2
    assert f"--job-dir {job_dir}: another worker is using it" in capsys.readouterr().err
    assert not (job_dir / "events.jsonl").exists() and not (job_dir / "checkpoints").exists()


# A stand-in worker: follows its cockpit like `cockpit_training.worker` does (killed with it until
# it trains, then asked to stop), then reports why it stopped.
FOLLOWER = """
import time
from cockpit_training.stopping import StopFlag, die_with_parent, save_with_parent
stop = StopFlag()
stop.install_signal_handlers()
die_with_parent()
print("importing", flush=True)
save_with_parent(stop)
print("stopped at once" if stop.requested else "training", flush=True)
deadline = time.monotonic() + 10
while not stop.requested and time.monotonic() < deadline:
    time.sleep(0.02)
print(stop.reason or "still running", flush=True)
"""
# A stand-in cockpit: starts the follower, says its pid, and waits to be killed.
COCKPIT = """
import os, subprocess, sys, time
os.environ[sys.argv[1]] = str(os.getpid())
follower = subprocess.Popen([sys.executable, "-c", sys.argv[2]], stdout=open(sys.argv[3], "w"))
print(follower.pid, flush=True)
time.sleep(60)
"""


def _wait_for_lines(path: Path, count: int, timeout: float = 10.0) -> list[str]:
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= count:
            break
        time.sleep(0.02)
    return lines


def _wait_for_exit(pid: int, timeout: float = 10.0) -> bool:
    """Whether `pid` ended (a zombie has) within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def _cockpit_of(follower: str, out: Path) -> tuple[subprocess.Popen[str], int]:
    """A stand-in cockpit (`COCKPIT`) running `follower`'s code as its worker, writing to `out`;
    the cockpit's process and the worker's pid, once it has started."""
    repo = Path(__file__).resolve().parents[1]
    cockpit = subprocess.Popen(
        [sys.executable, "-c", COCKPIT, PARENT_PID_ENV, follower, str(out)], cwd=repo, stdout=subprocess.PIPE, text=True
    )
    assert cockpit.stdout is not None
    return cockpit, int(cockpit.stdout.readline())


def test_a_training_worker_whose_cockpit_is_killed_9_is_asked_to_stop(tmp_path: Path) -> None:
    out = tmp_path / "follower.out"
    cockpit, follower = _cockpit_of(FOLLOWER, out)
    try:
        assert _wait_for_lines(out, 2) == ["importing", "training"]
        cockpit.kill()
        cockpit.wait()
        # The kernel's parent-death signal (SIGCONT), whose handler finds the cockpit gone.
        assert _wait_for_lines(out, 3, timeout=5) == ["importing", "training", "parent died"]
    finally:
        cockpit.kill()
        cockpit.wait()
    assert _wait_for_exit(follower)


def test_a_worker_whose_cockpit_died_before_it_started_is_killed_at_once(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, PARENT_PID_ENV: "1"}  # not this process's parent: that cockpit is gone
    result = subprocess.run(
        [sys.executable, "-c", FOLLOWER], cwd=repo, env=env, capture_output=True, text=True, timeout=30
    )
    assert (result.returncode, result.stdout) == (-signal.SIGKILL, ""), result.stderr


def test_a_job_whose_cockpit_died_before_it_trains_stops_at_once(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, PARENT_PID_ENV: "1"}
    saving = FOLLOWER.replace("die_with_parent()\n", "")  # straight to training
    result = subprocess.run(
        [sys.executable, "-c", saving], cwd=repo, env=env, capture_output=True, text=True, timeout=30
    )
    assert result.stdout.splitlines() == ["importing", "stopped at once", "parent died"], result.stderr


# A stand-in worker whose save never ends once its cockpit is gone.
HANGING = """
import time
from cockpit_training import stopping
stopping.ORPHAN_SAVE_S = 1
stop = stopping.StopFlag()
stop.install_signal_handlers()
stopping.save_with_parent(stop)
print("training", flush=True)
while True:
    time.sleep(0.1)
"""


def test_a_worker_whose_save_hangs_after_its_cockpit_died_is_killed(tmp_path: Path) -> None:
    out = tmp_path / "follower.out"
    cockpit, follower = _cockpit_of(HANGING, out)
    try:
        assert _wait_for_lines(out, 1) == ["training"]
    finally:
        cockpit.kill()
        cockpit.wait()
    gone = _wait_for_exit(follower, timeout=30)
    if not gone:
        os.kill(follower, signal.SIGKILL)
    assert gone, f"{follower} still running 30 s after its cockpit died"
