"""A real TPE-searched fleet, kill -9'd mid-tier and resumed: the study goes on, with one trial per
draw, no draw sampled twice, and each draw's tiers reported once as its learning curve
(`cockpit.core.fleet.search`)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import optuna
import pytest

from cockpit.contract.events import CheckpointEvent
from cockpit.core.fleet.search import STUDY_DB
from cockpit.core.fleet.store import FleetStore
from tests.test_e2e_fleet import events, start, wait_until

pytestmark = [pytest.mark.slow]

PRESET = """
env = "CartPole-v1"
n_envs = 4
n_steps = 64
batch_size = 128
n_epochs = 2
checkpoint_every = 256
timesteps = 1024
"""

PLAN = """
name = "searched"
jobs = 2
promotion = "async"
[agents]
env = "CartPole-v1"
preset = "{preset}"
seeds = 1
[agents.search]
samples = 4
sampler = "tpe"
learning_rate = {{ loguniform = [1e-4, 1e-2] }}
n_epochs = {{ int = [1, 4] }}
[[tiers]]
timesteps = 512
promote = 0.5
[[tiers]]
timesteps = 1024
[score]
episodes = 5
"""


def test_kill_9_mid_tier_then_resume_continues_the_study_with_one_trial_per_draw(tmp_path: Path) -> None:
    preset = tmp_path / "quick.toml"
    preset.write_text(PRESET)
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(preset=preset))
    run_dir, log = tmp_path / "run", tmp_path / "run.log"

    def mid_tier() -> bool:  # a checkpoint inside tier 0: a worker is training there
        jobs = run_dir / "jobs"
        return jobs.is_dir() and any(isinstance(e, CheckpointEvent) and e.step < 512
                                     for d in jobs.iterdir() for e in events(run_dir, d.name))  # fmt: skip

    proc = start(str(plan), "--run-dir", str(run_dir), log=log)
    wait_until(proc, mid_tier, log)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    store = FleetStore.in_run_dir(run_dir, read_only=True)
    before = store.draws()
    store.close()
    assert 1 <= len(before) < 4, before  # killed with draws still to make
    time.sleep(1.0)  # the orphaned workers checkpoint and exit on their parent-death signal
    proc = start("--resume", str(run_dir), log=log)
    assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]

    store = FleetStore.in_run_dir(run_dir, read_only=True)
    after, rows, results = store.draws(), store.agents(), store.results()
    store.close()
    assert sorted(after) == [0, 1, 2, 3]
    assert {d: after[d] for d in before} == before  # a draw made before the kill kept its values
    study = optuna.load_study(study_name="searched", storage=f"sqlite:///{run_dir / STUDY_DB}")
    trials = study.get_trials()
    drawn = [t.user_attrs["draw"] for t in trials if "draw" in t.user_attrs]
    assert sorted(drawn) == [0, 1, 2, 3]  # one trial per draw: none drawn twice
    asked = [t for t in trials if "draw" in t.user_attrs]
    assert {after[t.user_attrs["draw"]][0] for t in asked} == {t.number for t in asked}
    # Nothing else: a trial is created with its draw attr in one write, so a kill leaves none without.
    assert len(trials) == len(after) == 4
    assert all(t.state.is_finished() for t in trials)
    # Each draw's learning curve: its agent's score at each tier's steps it reached, reported once.
    for t in trials:
        (agent,) = [row.id for row in rows if row.index == t.user_attrs["draw"]]
        curve = {(512, 1024)[r.tier]: r.score for r in results if r.agent == agent}
        assert t.intermediate_values == curve and t.value == curve[max(curve)]
        assert t.state is (optuna.trial.TrialState.COMPLETE if 1024 in curve else optuna.trial.TrialState.PRUNED)
    for row in rows:  # each agent trained its draw's values, shown as its overrides
        assert row.overrides == after[row.index][1]
