"""Measured job costs: the probe (`cockpit_training.probe`) and its cache (`cockpit.core.sizing.cost_probe`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from cockpit.contract.costs import Costs
from cockpit.contract.presets import Preset, load
from cockpit.contract.runspec import ConfigError
from cockpit.core.machine.host import HostInfo
from cockpit.core.sizing.cost_probe import cache_key, cache_path, cached_costs, measured_costs, run_probe

RECORD = {"env": "CartPole-v1", "device": "cpu", "step_overhead_us": 372.0, "env_policy_us": 5.0,
          "env_step_us": 7.8, "train_sample_us": 5.0, "train_epoch_us": 512.0, "batch_size": 256,
          "setup_s": 0.25, "import_s": 4.0, "episode_steps_max": 500, "busy_factor": 0.9,
          "shared_factor": 1.2,
          "train_threads": 2, "train_speedup": 0.94}  # fmt: skip


class FakeProbe:
    """Stands in for the probe subprocess; counts its calls."""

    def __init__(self) -> None:
        self.calls: list[Preset] = []

    def __call__(self, preset: Preset, workdir: Path) -> dict[str, Any]:
        assert workdir.is_dir()
        self.calls.append(preset)
        return dict(RECORD, env=preset.env)


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


def test_the_first_call_probes_and_says_so_later_ones_read_the_cache(cache_home: Path) -> None:
    probe, told = FakeProbe(), []
    first = measured_costs(load("cartpole"), None, on_probe=told.append, probe=probe)
    assert first == Costs("cpu", 372.0, 5.0, 7.8, 5.0, 512.0, 0.25, 4.0, 500, 0.9, 1.2, 2, 0.94)
    assert len(told) == 1 and "CartPole-v1" in told[0] and str(cache_path()) in told[0]
    assert cache_path() == cache_home / "cockpit" / "costs.toml" and cache_path().is_file()
    again = measured_costs(load("cartpole"), None, on_probe=told.append, probe=probe)
    assert again == first and len(probe.calls) == 1 and len(told) == 1


def test_what_changes_the_cost_is_in_the_key(cache_home: Path) -> None:
    probe = FakeProbe()
    cartpole = load("cartpole")
    for preset, gpu in [(cartpole, None), (replace(cartpole, batch_size=128), None),
                        (replace(cartpole, net_arch=(256, 256)), None), (replace(cartpole, env="Acrobot-v1"), None),
                        (cartpole, "NVIDIA GeForce RTX 4090")]:  # fmt: skip
        measured_costs(preset, gpu, probe=probe)
    assert len(probe.calls) == 5
    # n_envs, n_steps and epochs are not: the costs are per env, per step and per epoch
    measured_costs(replace(cartpole, n_envs=32, n_steps=64, n_epochs=4), None, probe=probe)
    assert len(probe.calls) == 5


def test_an_unreadable_cache_is_measured_again_and_rewritten(cache_home: Path) -> None:
    cache_path().parent.mkdir(parents=True)
    cache_path().write_text("not [toml")
    probe = FakeProbe()
    measured_costs(load("cartpole"), None, probe=probe)
    measured_costs(load("cartpole"), None, probe=probe)
    assert len(probe.calls) == 1
    assert "step_overhead_us = 372.0" in cache_path().read_text()


def test_a_failing_probe_is_a_one_line_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"measuring Nope-v0: the probe failed: .*Nope-v0"):
        run_probe(replace(load("cartpole"), env="Nope-v0"), tmp_path)


@pytest.mark.parametrize("missing", ["train_epoch_us", "setup_s", "import_s", "episode_steps_max", "busy_factor",
                                     "shared_factor", "train_threads", "train_speedup"])  # fmt: skip
def test_a_record_from_before_a_figure_was_measured_is_measured_again(cache_home: Path, missing: str) -> None:
    old = {key: value for key, value in RECORD.items() if key != missing}
    cache_path().parent.mkdir(parents=True)
    cache_path().write_text(tomli_w.dumps({cache_key(load("cartpole"), None): old}))
    assert cached_costs(load("cartpole"), None) is None
    probe = FakeProbe()
    assert measured_costs(load("cartpole"), None, probe=probe).train_epoch_us == 512.0
    assert len(probe.calls) == 1


def test_an_epochs_fixed_cost_is_shared_by_the_rollouts_samples() -> None:
    costs = Costs("cpu", step_overhead_us=800.0, env_policy_us=10.0, env_step_us=5.0, train_sample_us=2.0,
                  train_epoch_us=512.0)  # fmt: skip
    cartpole = load("cartpole")  # 8 envs x 32 steps = 256 samples a rollout, 20 epochs
    assert costs.rollout_us(cartpole, 8) == 800.0 / 8 + 10.0
    assert costs.train_us(cartpole, 8) == 20 * (2.0 + 512.0 / 256)
    # twice the envs, twice the samples to share each epoch's fixed cost
    assert costs.train_us(cartpole, 16) == 20 * (2.0 + 512.0 / 512)
    assert costs.sample_us(cartpole, 8) == costs.rollout_us(cartpole, 8) + costs.train_us(cartpole, 8)


def test_cached_costs_never_probe(cache_home: Path) -> None:
    assert cached_costs(load("cartpole"), None) is None
    measured_costs(load("cartpole"), None, probe=FakeProbe())
    expected = Costs("cpu", 372.0, 5.0, 7.8, 5.0, 512.0, 0.25, 4.0, 500, 0.9, 1.2, 2, 0.94)
    assert cached_costs(load("cartpole"), None) == expected
    assert cached_costs(load("cartpole"), "NVIDIA A100-SXM4-80GB") is None


@pytest.mark.parametrize("costs", [None, Costs("cpu", 372.0, 5.0, 7.8, 5.0, 512.0, 0.25, 4.0, 500, 0.9, 1.2, 2, 0.94)])
def test_a_runs_live_advice_uses_the_measured_costs_when_there_are_some(tmp_path: Path, costs: Costs | None) -> None:
    from tests.fakeclock import FakeClock
    from tests.test_feed_control import scripted_session

    two_cores = HostInfo("box", "test CPU", physical_cores=2, logical_cores=2, ram_bytes=24 * 1024**3, os="Linux")
    session = scripted_session(tmp_path / "run", clock=FakeClock(), host=two_cores, costs=costs)
    session.write_run_log(session.snapshot())
    changes = {(a.setting, a.current, a.suggested) for a in session.snapshot().suggestions}
    if costs is None:
        assert changes == set()
    else:
        assert changes == {("n_envs", "8", "32")}


NOT_MEASUREMENTS = [{"step_overhead_us": -1.0}, {"train_sample_us": float("nan")}, {"train_epoch_us": -3.0},
                    {"setup_s": float("inf")}, {"episode_steps_max": None},
                    {"env_policy_us": 0.0, "train_sample_us": 0.0}, {"device": None, "env_step_us": "x"},
                    {"busy_factor": 0.0}, {"shared_factor": float("nan")}, {"train_speedup": 0.0},
                    {"train_threads": 0}]  # fmt: skip


@pytest.mark.parametrize("bad", NOT_MEASUREMENTS)
def test_a_probe_record_that_is_not_a_measurement_is_one_config_error(cache_home: Path, bad: dict[str, Any]) -> None:
    def probe(preset: Preset, workdir: Path) -> dict[str, Any]:
        return {**RECORD, **bad}

    with pytest.raises(ConfigError, match="measuring CartPole-v1: "):
        measured_costs(load("cartpole"), None, probe=probe)
    assert cached_costs(load("cartpole"), None) is None  # nothing cached


@pytest.mark.parametrize(("large_rollout_s", "per_env_us"), [(0.2048, 50.0), (0.12, 10.0)])
def test_the_probes_per_env_cost_is_the_rollouts_slope_never_under_an_env_steps_own_cost(
    monkeypatch: pytest.MonkeyPatch, large_rollout_s: float, per_env_us: float
) -> None:
    """Scripted timings at the probe's seams: with 2 envs a 128-step rollout takes 0.1152 s (900 us
    a step); with 16, `large_rollout_s`. A slope the noise pulled under what an env's step alone
    costs (10 us, timed apart and steadier) gives way to that floor instead of reading 0."""
    from cockpit_training import probe

    preset = load("cartpole")

    def phase_times(presets: list[Preset], device: str) -> list[tuple[float, float, int, float]]:
        rollout = {2: 0.1152, 16: large_rollout_s, preset.n_envs: 0.1}
        return [(rollout[p.n_envs], 0.05 * p.n_epochs, p.total_batch, 0.01) for p in presets]

    monkeypatch.setattr(probe, "_phase_times", phase_times)
    monkeypatch.setattr(probe, "_env_step_us", lambda env_id, env_kwargs: 10.0)
    monkeypatch.setattr(probe, "_episode_steps_max", lambda env_id, env_kwargs: 500)
    record = probe.probe(preset, "cpu")
    assert record["env_step_us"] == 10.0
    assert record["env_policy_us"] == pytest.approx(per_env_us, abs=0.01)
    # the own shape's rollout step comes back whole: its fixed cost plus its envs' share
    own_step_us = 0.1 / preset.n_steps * 1e6
    assert record["step_overhead_us"] + preset.n_envs * record["env_policy_us"] == pytest.approx(own_step_us, abs=0.2)


def test_the_probe_takes_the_median_of_three_iterations_unless_one_is_too_long_to_repeat() -> None:
    from cockpit_training.probe import MEDIAN_LIMIT_S, TIMED_ITERATIONS, TIMED_S, _time_more

    assert _time_more(0, 0.0) and _time_more(0, 10 * MEDIAN_LIMIT_S)  # at least one, however long
    # Short iterations: up to TIMED_ITERATIONS while under TIMED_S.
    assert _time_more(TIMED_ITERATIONS - 1, TIMED_S / 2) and not _time_more(TIMED_ITERATIONS, TIMED_S / 2)
    # A heavy shape's 10-s iterations: three of them, not the one TIMED_S alone would allow.
    assert [_time_more(n, 10.0 * n) for n in (1, 2, 3)] == [True, True, False]
    # One iteration too long to repeat: that one only.
    assert not _time_more(1, MEDIAN_LIMIT_S)


def test_the_probe_counts_the_median_timing_not_the_mean_the_first_or_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    # Scripted iterations (after a warm-up that is left out): rollouts of 5.0, 2.0 and 1.0 s, train
    # phases of 0.4, 0.2 and 0.1 s. The median is 2.0 / 0.2; the mean (2.67 / 0.23), the first
    # (5.0 / 0.4) and the last (1.0 / 0.1) all differ from it.
    from types import SimpleNamespace

    import cockpit_training.probe as probe

    now = [0.0]
    phases = iter([(9.0, 9.0), (5.0, 0.4), (2.0, 0.2), (1.0, 0.1)])

    class Model:
        def learn(self, total: int, callback: Any, reset_num_timesteps: bool = True) -> None:
            rollout_s, train_s = next(phases)
            callback._on_rollout_start()
            now[0] += rollout_s
            callback._on_rollout_end()
            now[0] += train_s
            callback._on_training_end()

    class Venv:
        def close(self) -> None:
            pass

    monkeypatch.setattr(probe, "_build", lambda preset, device: (Venv(), Model()))
    monkeypatch.setattr(probe, "time", SimpleNamespace(monotonic=lambda: now[0], perf_counter=lambda: now[0]))
    ((rollout_s, train_s, samples, _setup),) = probe._phase_times([load("cartpole")], "cpu")
    assert (rollout_s, train_s) == pytest.approx((2.0, 0.2)) and samples == load("cartpole").total_batch
