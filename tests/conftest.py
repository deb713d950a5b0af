"""Shared fixtures: small real PPO models on envpool CartPole."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from stable_baselines3 import PPO

from cockpit_training.envpool_vec import EnvpoolVecEnv
from tests import mps_standin
from tests.cockpitproc import STARTED, Cockpit, start_cockpit


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules with slow end-to-end tests run first, each module whole and in its own order (so a
    module fixture is set up once): two xdist workers then end on the short tests, not one of them
    on a 2-minute run while the other waits idle."""
    slow_modules = {getattr(item, "module", None) for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: getattr(item, "module", None) not in slow_modules)


@pytest.fixture
def tiny_ppo() -> Callable[..., PPO]:
    """Builds a small, fast PPO on 4 envpool CartPole envs (64-step rollouts of 16 steps)."""

    def build(**overrides: object) -> PPO:
        venv = EnvpoolVecEnv.make("CartPole-v1", 4, seed=0, num_threads=1)
        kwargs: dict = {"n_steps": 16, "batch_size": 32, "n_epochs": 2, "seed": 0, "device": "cpu", "verbose": 0}
        kwargs.update(overrides)
        return PPO("MlpPolicy", venv, **kwargs)

    return build


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Measured costs (`cockpit.core.sizing.cost_probe`) go to a cache of the test session, not the user's."""
    saved = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    yield
    if saved is None:
        del os.environ["XDG_CACHE_HOME"]
    else:
        os.environ["XDG_CACHE_HOME"] = saved


@pytest.fixture(scope="session")
def plain_cartpole_run(tmp_path_factory: pytest.TempPathFactory) -> Cockpit:
    """A plain `cockpit run` (every default: the cartpole preset, 2 jobs with seeds 0 and 1, 100k
    steps each), run to its end once for the session. Two real CartPole trainings to 100k steps are
    the suite's most expensive run, so the tests that need one share it: test_e2e_run checks the
    run, test_e2e_learning what job 001 (seed 1) learned. Tests read it and never write into it."""
    cockpit = start_cockpit(tmp_path_factory.mktemp("plain-run") / "run")
    try:
        cockpit.finish(timeout=600)
    except subprocess.TimeoutExpired:  # the tests then fail on its exit code, with its output
        cockpit.proc.kill()
        cockpit.proc.wait()
    return cockpit


@pytest.fixture(autouse=True)
def _no_cockpit_outlives_its_test() -> Iterator[None]:
    """A test that fails before it stops its cockpit must not leave it training through the rest
    of the suite (a failed assertion once left two workers running for 15 minutes). Its workers
    follow it: the launcher gives them the parent-death signal."""
    yield
    for proc in STARTED:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    STARTED.clear()


@pytest.fixture
def torch_threads_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's `train` run in pytest's process leaves pytest's torch threads as they are."""
    import cockpit_training.device

    monkeypatch.setattr(cockpit_training.device, "apply_torch_threads", lambda _threads: None)


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> Iterator[mps_standin.StandIn]:
    # A short root: the run's own pipe directory goes under the run dir only while its path is short.
    root = Path(tempfile.mkdtemp(prefix="mps", dir="/tmp"))
    mps_standin.install(root / "bin", root / "calls.jsonl")
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("MPS_STANDIN_LOG", str(root / "calls.jsonl"))
    here = mps_standin.StandIn(root)
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(here.system_pipe))  # never the real /tmp/nvidia-mps
    yield here
    for call in here.calls():  # a failed test must leave no sleeping stand-in daemon behind
        mps_standin.end(mps_standin.daemon_pid(Path(str(call["pipe_dir"]))))
    shutil.rmtree(root, ignore_errors=True)
