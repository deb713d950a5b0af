"""Jobs side by side (`cockpit.core.sizing.contention`): the factors' arithmetic and the partners' shape.
The real measurement with two CartPole partners is part of the suite's one full probe
(tests/test_commands_recommend.py): its factors are in range and no partner outlives it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cockpit.contract.presets import load
from cockpit.core.sizing import contention
from cockpit.core.sizing.contention import Contention, Iteration, factors, partner_shape, rate


def test_a_rate_is_samples_over_the_iterations_seconds() -> None:
    its = [Iteration(10.0, 10.5, 256), Iteration(11.0, 11.25, 256)]  # the gap between them is not theirs
    assert rate(its) == pytest.approx(512 / 0.75)


def test_factors_are_costs_over_the_cost_alone() -> None:
    # Alone 1,000 SPS; with a core each 1,250 and 750 (mean 1,000 -> x1.0); sharing one core they
    # did 400 + 400: a sample there costs 1,000 / 800 of one alone.
    assert factors([1100.0, 900.0], [1250.0, 750.0], [400.0, 400.0]) == Contention(1.0, 1.25, 1000.0)
    assert factors([1000.0, 1000.0], [1250.0, 1250.0], [500.0, 500.0]) == Contention(0.8, 1.0, 1000.0)
    assert factors([1000.0], [], [400.0, 400.0]).busy_factor == 1.0  # one CPU: nothing to measure


def test_one_jobs_speed_is_the_mean_of_the_probes_and_the_partners_processes() -> None:
    from cockpit.core.sizing.cost_probe import SPEED_FIGURES, _three_processes

    cartpole = load("cartpole")  # 256 samples an iteration, 20 epochs
    record = {"iteration_s": 0.128, "own_epochs": 20, "env_step_us": 9.0, "step_overhead_us": 900.0,
              "env_policy_us": 20.0, "train_sample_us": 18.0, "train_epoch_us": 400.0}  # fmt: skip
    # The probe did 2,000 SPS, the partners 1,700 on average: one job is (2,000 + 2 x 1,700) / 3 = 1,800.
    merged = _three_processes(cartpole, record, 0.128, 1700.0)
    for key in SPEED_FIGURES:
        assert merged[key] == pytest.approx(record[key] * 2000 / 1800, abs=0.01)
    assert merged["env_step_us"] == 9.0 and merged["processes_timed"] == 3
    # Timed with 5 of its 20 epochs, the probe's iteration is not the partners': left as measured.
    assert _three_processes(cartpole, {**record, "own_epochs": 5}, 0.128, 1700.0) == {**record, "own_epochs": 5}


def test_partners_train_the_preset_itself_when_an_iteration_is_short() -> None:
    cartpole = load("cartpole")
    assert partner_shape(cartpole, 0.15) == cartpole


def test_a_long_iteration_is_cut_to_one_epoch_of_a_shorter_rollout() -> None:
    pong = replace(load("fast"), env="Pong-v5")
    shape = partner_shape(pong, 12.0)
    assert shape.n_epochs == 1 and shape.n_envs == pong.n_envs and shape.net_arch == pong.net_arch
    # 256 steps x 0.5 s / 12 s = 10.7: 10 steps of 16 envs, one minibatch of all 160 samples
    assert (shape.n_steps, shape.batch_size) == (10, 160)
    assert partner_shape(pong, 1000.0).n_steps == contention.MIN_STEPS
