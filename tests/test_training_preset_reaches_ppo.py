"""A preset's PPO settings reach the SB3 model the worker trains: a fresh model, one resumed from a
checkpoint saved under other settings (the advisor's restart, a fleet's next tier), and a fleet
agent's `[agents.overrides]` through the preset argument its worker is launched with.

Each value is read back from the model itself (its attributes, its schedules, its optimizer), and
the presets used here differ from SB3's defaults and from each other in every one of them, so a
setting that is dropped on its way shows as the default or as the old value.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback

from cockpit.contract.fleetplan import parse_plan
from cockpit.contract.presets import Preset, load
from cockpit.contract.toml import tomllib
from cockpit.core.fleet.run import FleetRun
from cockpit.core.machine.host import thread_budget
from cockpit.core.supervise.supervisor import JobTemplate, Supervisor
from cockpit_training import worker
from cockpit_training.checkpoints import CheckpointStore
from cockpit_training.envpool_vec import EnvpoolVecEnv
from cockpit_training.model import new_model, resume
from tests.fakeclock import FakeClock
from tests.test_supervise_supervisor import FakeLauncher

ROLLOUT = 64  # 4 envs x 16 steps
SMALL = {"n_envs": 4, "n_steps": 16, "batch_size": 32, "n_epochs": 1, "checkpoint_every": 1_000_000}
# Every PPO setting unlike SB3's default and unlike the cartpole preset's.
OTHER = {"learning_rate": 7e-4, "gamma": 0.97, "gae_lambda": 0.91, "clip_range": 0.15, "ent_coef": 0.013,
         "vf_coef": 0.37, "max_grad_norm": 0.61, "n_epochs": 2, "batch_size": 16}  # fmt: skip


def small_preset(**overrides: object) -> Preset:
    """The cartpole preset at a tiny size, with `overrides`."""
    return replace(load("cartpole"), **{**SMALL, **overrides})  # type: ignore[arg-type]


def scheduled(preset: Preset, start: float, progress_remaining: float) -> float:
    """What the preset's schedule gives at `progress_remaining` (1 at the start of training, 0 at its end)."""
    return start * progress_remaining if preset.schedule == "linear" else start


def assert_follows(model: PPO, preset: Preset) -> None:
    """`model` carries every PPO setting of `preset`, its schedules included."""
    assert (model.gamma, model.gae_lambda, model.ent_coef, model.vf_coef, model.max_grad_norm) == (
        preset.gamma, preset.gae_lambda, preset.ent_coef, preset.vf_coef, preset.max_grad_norm,
    )  # fmt: skip
    assert (model.n_steps, model.batch_size, model.n_epochs) == (preset.n_steps, preset.batch_size, preset.n_epochs)
    for progress in (1.0, 0.5, 0.25):
        assert model.lr_schedule(progress) == pytest.approx(scheduled(preset, preset.learning_rate, progress))
        assert model.clip_range(progress) == pytest.approx(scheduled(preset, preset.clip_range, progress))


class OptimizerRates(BaseCallback):
    """The optimizer's learning rate, with the progress it was set at, at each rollout's start
    after the first (by then `train()` has set it from the model's schedule)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[float, float]] = []
        self._rollouts = 0

    def _on_rollout_start(self) -> None:
        self._rollouts += 1
        if self._rollouts > 1:
            lr = self.model.policy.optimizer.param_groups[0]["lr"]
            self.seen.append((self.model._current_progress_remaining, lr))

    def _on_step(self) -> bool:
        return True


def assert_trains_at_its_rates(model: PPO, preset: Preset) -> None:
    """Three rollouts' training as the worker runs it (`learn` to a step total, counting on), each
    update with the optimizer at the preset's learning rate for its progress."""
    rates = OptimizerRates()
    target = model.num_timesteps + 3 * ROLLOUT
    model.learn(target - model.num_timesteps, callback=rates, reset_num_timesteps=False)
    assert len(rates.seen) == 2
    for progress, lr in rates.seen:
        assert 0 < progress < 1
        assert lr == pytest.approx(scheduled(preset, preset.learning_rate, progress))


def venv(preset: Preset) -> EnvpoolVecEnv:
    return EnvpoolVecEnv.make(preset.env, preset.n_envs, seed=0, num_threads=1)


@pytest.mark.parametrize("schedule", ["linear", "constant"])
def test_a_fresh_model_takes_every_setting_of_its_preset(schedule: str) -> None:
    preset = small_preset(schedule=schedule, **OTHER)
    model = new_model(preset, venv(preset), seed=0, device="cpu")
    assert_follows(model, preset)
    assert model.policy.optimizer.param_groups[0]["lr"] == pytest.approx(preset.learning_rate)
    assert_trains_at_its_rates(model, preset)


@pytest.mark.parametrize(("saved_schedule", "schedule"), [("linear", "constant"), ("constant", "linear")])
def test_a_resumed_model_takes_the_current_presets_settings_not_the_saved_ones(
    tmp_path: Path, saved_schedule: str, schedule: str
) -> None:
    saved = small_preset(schedule=saved_schedule)
    store = CheckpointStore(tmp_path / "checkpoints")
    first = new_model(saved, venv(saved), seed=0, device="cpu")
    first.learn(ROLLOUT)
    store.save(first, first.num_timesteps)
    preset = small_preset(schedule=schedule, **OTHER)
    resumed = resume(store, preset, venv(preset), device="cpu")
    assert resumed.model is not None and resumed.model.num_timesteps == ROLLOUT
    assert_follows(resumed.model, preset)
    assert_trains_at_its_rates(resumed.model, preset)


FLEET = """
name = "sweep"
jobs = 2
promotion = "sync"
[agents]
env = "CartPole-v1"
preset = "cartpole"
seeds = 1
[agents.overrides]
learning_rate = [7e-4, 2e-4]
ent_coef = [0.013]
gamma = [0.97]
schedule = ["constant"]
n_envs = [4]
n_steps = [16]
batch_size = [32]
[[tiers]]
timesteps = 1000
"""


def test_a_fleet_agents_overrides_reach_its_workers_model(tmp_path: Path) -> None:
    plan = parse_plan(tomllib.loads(FLEET), "plan.toml")
    launcher = FakeLauncher()
    supervisor = Supervisor(run_dir=tmp_path / "run", template=JobTemplate("cartpole", "CartPole-v1", 1000), seeds=(),
                            slots=plan.jobs, launcher=launcher, budget=thread_budget(plan.jobs, 2),
                            clock=FakeClock())  # fmt: skip
    fleet = FleetRun.new(plan, FLEET, supervisor, clock=supervisor.clock)
    try:
        supervisor.tick()
        assert len(launcher.processes) == 2
        rates: set[float] = set()
        for proc in launcher.processes:
            agent = fleet.agents[proc.request.job_id].row
            # What the launched worker does with its arguments, up to the model it trains.
            config = worker.resolve_config(proc.request.args)
            store = CheckpointStore(proc.request.args.job_dir / "checkpoints")
            model = worker._build_or_resume(config, store, venv(config.preset)).model
            assert model.learning_rate == agent.overrides["learning_rate"]
            assert model.policy.optimizer.param_groups[0]["lr"] == agent.overrides["learning_rate"]
            assert (model.ent_coef, model.gamma, model.n_steps) == (0.013, 0.97, 16)
            assert model.lr_schedule(0.5) == agent.overrides["learning_rate"]  # constant, as overridden
            rates.add(model.learning_rate)
        assert rates == {7e-4, 2e-4}
    finally:
        fleet.close()
