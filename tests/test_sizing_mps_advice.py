"""MPS measured, then advised: the advisor's rule (a measured gain, or how to measure it), the
store of measured gains, and `cockpit tune` measuring its winner with MPS and on the device mix
the advisor predicts, against scripted trials (no GPU here: the trial runner is the boundary)."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from cockpit.commands.console import say
from cockpit.commands.recommend import recommend
from cockpit.commands.tune import mps_summary
from cockpit.contract.advice import AdviceSetting
from cockpit.contract.costs import MpsGain
from cockpit.contract.presets import load
from cockpit.contract.workerargs import MPS_PIPE_DIRECTORY_ENV
from cockpit.core.launch.protocol import device_env
from cockpit.core.machine.gpu_types import GpuInfo
from cockpit.core.machine.mps_daemon import daemon_in
from cockpit.core.machine.placement import GpuRef
from cockpit.core.sizing.advisor import Machine, advise
from cockpit.core.sizing.hill_climb import Config
from cockpit.core.sizing.mps_gains import cached_mps_gain, mps_cache_path, record_mps_gain
from cockpit.core.sizing.trials import Trial, trial_requests
from cockpit.core.sizing.tune_search import STARTUP_S, Extras, TuneResult, climb, measure_seconds, tune_extras
from tests import mps_standin
from tests.mps_standin import StandIn

GIB = 1024**3
GPU_NAME = "NVIDIA GeForce RTX 4090 (fake)"
GPU_MACHINE = Machine(32, 64, 64 * GIB, GPU_NAME, 24 * GIB,
                      (GpuInfo(0, GPU_NAME, 24 * GIB, "555.42", "GPU-fake-0", compute_capability=(8, 9)),))  # fmt: skip
CPU_MACHINE = Machine(2, 2, 24 * GIB)
HEAVY = load("heavy")


def gain(sps_off: float, sps_on: float, jobs: int = 4) -> MpsGain:
    return MpsGain(jobs, sps_off, sps_on, "cockpit tune", "2026-11-28T12:00:00")


def mps_item(machine: Machine, jobs: int, **kwargs: Any) -> Any:
    return next((a for a in advise(machine, HEAVY, jobs, **kwargs) if a.setting is AdviceSetting.MPS), None)


# ----- the advisor -----


def test_mps_is_advised_from_a_measured_gain_only() -> None:
    item = mps_item(GPU_MACHINE, 4, mps_gain=gain(10_000, 11_200), mps_usable=True)
    assert item is not None and (item.current, item.suggested) == ("off", "on")
    assert "x1.12" in item.effect and "10,000 -> 11,200" in item.effect and "--mps" in item.effect
    assert "ends every job on that GPU" in item.reason  # the fault domain, said where it is advised
    # Measured and under x1.05: nothing is advised, whether or not a daemon could be started.
    assert mps_item(GPU_MACHINE, 4, mps_gain=gain(10_000, 10_400), mps_usable=True) is None
    assert mps_item(GPU_MACHINE, 4, mps_gain=gain(10_000, 9_000), mps_usable=True) is None


def test_unmeasured_mps_is_said_so_with_how_to_measure_it() -> None:
    item = mps_item(GPU_MACHINE, 4, mps_usable=True)
    assert item is not None and item.suggested == "measure it"
    assert "nobody has measured MPS" in item.effect
    assert "cockpit tune --preset heavy" in item.reason and "cockpit run --auto --jobs 4" in item.reason
    # Where MPS cannot be used here, there is nothing to measure; one job, or no GPU, shares nothing.
    assert mps_item(GPU_MACHINE, 4, mps_usable=False) is None
    eight_cores = dataclasses.replace(GPU_MACHINE, physical_cores=8, logical_cores=16)  # room for one heavy job
    assert mps_item(eight_cores, 1, mps_usable=True) is None
    assert mps_item(CPU_MACHINE, 4, mps_gain=gain(10_000, 12_000), mps_usable=True) is None


def test_the_advice_counts_the_jobs_the_advisor_suggests() -> None:
    # One job asked on a 4090 of 32 cores: the GPU table suggests 4, and MPS is for those 4.
    item = mps_item(GPU_MACHINE, 1, mps_usable=True)
    assert item is not None and "--jobs 4" in item.reason


# ----- the store -----


def test_a_measured_gain_is_kept_per_preset_and_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cached_mps_gain(HEAVY, GPU_NAME) is None
    record_mps_gain(HEAVY, GPU_NAME, gain(10_000, 11_200))
    kept = cached_mps_gain(HEAVY, GPU_NAME)
    assert kept is not None and kept.gain == pytest.approx(1.12) and kept.jobs == 4 and kept.by == "cockpit tune"
    assert cached_mps_gain(HEAVY, "NVIDIA A100-SXM4-80GB") is None  # another GPU measured nothing
    assert cached_mps_gain(load("fast"), GPU_NAME) is None  # nor another preset
    assert cached_mps_gain(HEAVY, None) is None
    record_mps_gain(HEAVY, GPU_NAME, gain(10_000, 9_500))  # the newest replaces it
    assert cached_mps_gain(HEAVY, GPU_NAME) == gain(10_000, 9_500)


def test_a_broken_store_is_no_measurement(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    mps_cache_path().parent.mkdir(parents=True)
    mps_cache_path().write_text("not toml [")
    assert cached_mps_gain(HEAVY, GPU_NAME) is None
    record_mps_gain(HEAVY, GPU_NAME, gain(0.0, 11_000))  # no SPS without MPS: not a measurement
    assert cached_mps_gain(HEAVY, GPU_NAME) is None


# ----- recommend -----


def test_recommend_advises_mps_from_the_kept_gain_and_says_why_it_cannot_measure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, standin: StandIn
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def shown() -> str:
        out = io.StringIO()
        recommend(Console(file=out, width=400), preset="heavy", env=None, jobs=4, run_dir=None, machine=GPU_MACHINE,
                  probe=False)  # fmt: skip
        return out.getvalue()

    unmeasured = shown()
    assert "not measured for this preset on this GPU" in unmeasured and "off -> measure it" in unmeasured
    record_mps_gain(HEAVY, GPU_NAME, gain(10_000, 11_200))
    measured = shown()
    assert "off -> on" in measured and "x1.12 with MPS for 4 jobs" in measured
    # Without the control program on PATH there is nothing to measure with: no "measure it" item.
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    mps_cache_path().unlink()
    missing = shown()
    assert "nvidia-cuda-mps-control is not on PATH" in missing and "measure it" not in missing


# ----- the trials' workers -----


def test_a_trials_gpu_workers_are_mps_clients_and_its_cpu_workers_are_not(tmp_path: Path) -> None:
    config = Config(3, 8, 256)
    requests = trial_requests(HEAVY, tmp_path / "p.toml", config, tmp_path, 16, cpu_jobs=1,
                              gpu=GpuRef(0, "GPU-fake-0"), mps_pipe_dir=tmp_path / "pipe")  # fmt: skip
    assert [r.args.device for r in requests] == ["auto", "auto", "cpu"]  # type: ignore[union-attr]
    envs = [device_env(r) for r in requests]
    assert [e.get(MPS_PIPE_DIRECTORY_ENV) for e in envs] == [str(tmp_path / "pipe")] * 2 + [None]
    assert envs[2] == {} and requests[2].gpu is None and requests[2].mps_pipe_dir is None  # it trains on the cores
    assert {r.args.threads for r in requests} == {5}  # type: ignore[union-attr]  # 16 cores // 3 jobs
    plain = trial_requests(HEAVY, tmp_path / "p.toml", config, tmp_path, 16)
    assert all(device_env(r) == {} and r.args.device == "auto" for r in plain)  # type: ignore[union-attr]


# ----- tune's extras -----


class ScriptedTrials:
    """The trial runner of a machine with a GPU: `sps(config, cpu_jobs, mps)`; every call recorded,
    and whether an MPS daemon's control pipe was there during an MPS trial."""

    def __init__(self, sps: Any) -> None:
        self.sps = sps
        self.calls: list[tuple[Config, int, bool]] = []
        self.pipe_seen: list[bool] = []

    def __call__(self, preset: Any, config: Config, *, cpu_jobs: int = 0, mps_pipe_dir: Path | None = None,
                 **_: Any) -> Trial:  # fmt: skip
        mps = mps_pipe_dir is not None
        if mps:
            self.pipe_seen.append((mps_pipe_dir / "control").exists())  # type: ignore[operator]
        self.calls.append((config, cpu_jobs, mps))
        return Trial(config, self.sps(config, cpu_jobs, mps), 50.0, 60.0, 1.0, cpu_jobs, mps)


def tune_with(trials: ScriptedTrials, extras: Extras, tmp_path: Path) -> TuneResult:
    start = Config(4, 32, 512)
    return climb(HEAVY, GPU_MACHINE, 600.0, workdir=tmp_path, start=start, extras=extras, trial=trials)


def peak_at_four(config: Config) -> float:
    """A climb that ends on 4 x 32 envs: each neighbour measures less."""
    return 10_000.0 - 500 * abs(config.jobs - 4) - 10 * abs(config.n_envs - 32)


def test_tune_measures_its_winner_under_a_daemon_it_starts_and_stops(tmp_path: Path, standin: StandIn) -> None:
    trials = ScriptedTrials(lambda c, cpu, mps: peak_at_four(c) * (1.15 if mps else 1.0))
    result = tune_with(trials, Extras(mps_why_not="", open_mps=daemon_in), tmp_path)
    assert result.best == Config(4, 32, 512) and trials.calls[-1] == (result.best, 0, True)
    assert sum(mps for _, _, mps in trials.calls) == 1  # one MPS trial, after the climb
    assert trials.pipe_seen == [True]  # the workers met a running daemon
    assert result.mps is not None and result.mps.gain == pytest.approx(1.15) and result.mps_on
    assert result.run_flags() == "--jobs 4 --mps"
    started = [c for c in standin.calls() if c["argv"] == ["-d"]]
    quits = [c for c in standin.calls() if "quit" in str(c["stdin"])]
    assert len(started) == len(quits) == 1  # and stopped once the trial was over
    assert not any(mps_standin.alive(p) for p in [mps_standin.daemon_pid(Path(str(started[0]["pipe_dir"])))] if p)
    assert "x1.15 with MPS for 4 jobs" in mps_summary(result) and "run with --mps" in mps_summary(result)


def test_mps_that_measures_slower_is_kept_off(tmp_path: Path, standin: StandIn) -> None:
    trials = ScriptedTrials(lambda c, cpu, mps: peak_at_four(c) * (0.97 if mps else 1.0))
    result = tune_with(trials, Extras(mps_why_not="", open_mps=daemon_in), tmp_path)
    assert result.mps is not None and result.mps.gain == pytest.approx(0.97) and not result.mps_on
    assert result.run_flags() == "--jobs 4"
    assert "run without it" in mps_summary(result)


def test_a_daemon_that_cannot_start_leaves_mps_unmeasured(tmp_path: Path, standin: StandIn,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("MPS_STANDIN_FAIL", "1")
    trials = ScriptedTrials(lambda c, cpu, mps: peak_at_four(c))
    result = tune_with(trials, Extras(mps_why_not="", open_mps=daemon_in), tmp_path)
    assert result.mps is None and "-d failed" in result.mps_why_not and result.run_flags() == "--jobs 4"
    assert not any(mps for _, _, mps in trials.calls)


def test_without_a_gpu_tune_measures_no_extras(tmp_path: Path) -> None:
    trials = ScriptedTrials(lambda c, cpu, mps: peak_at_four(c))
    result = tune_with(trials, Extras(), tmp_path)
    assert all(cpu == 0 and not mps for _, cpu, mps in trials.calls)
    assert result.mps is None and mps_summary(result) == "MPS: not measured (no GPU)"


def test_the_advised_device_mix_wins_when_it_measures_faster_and_mps_is_measured_on_it(
    tmp_path: Path, standin: StandIn
) -> None:
    mix = Config(5, 32, 512)

    def sps(config: Config, cpu_jobs: int, mps: bool) -> float:
        base = 11_000.0 if cpu_jobs == 1 else peak_at_four(config)
        return base * (1.10 if mps else 1.0)

    trials = ScriptedTrials(sps)
    extras = Extras(mix_for=lambda best: (mix, 1), mps_why_not="", open_mps=daemon_in)
    result = tune_with(trials, extras, tmp_path)
    assert trials.calls[-2:] == [(mix, 1, False), (mix, 1, True)]
    assert (result.best, result.cpu_jobs) == (mix, 1)
    assert result.mps is not None and result.mps.gain == pytest.approx(1.10)
    assert result.run_flags() == "--jobs 5 --devices 4:cuda,1:cpu --mps"


def test_a_mix_that_measures_slower_leaves_the_climbs_winner(tmp_path: Path) -> None:
    trials = ScriptedTrials(lambda c, cpu, mps: 9_000.0 if cpu else peak_at_four(c))
    result = tune_with(trials, Extras(mix_for=lambda best: (Config(5, 32, 512), 1), mps_why_not="no GPU"), tmp_path)
    assert trials.calls[-1] == (Config(5, 32, 512), 1, False)
    assert (result.best, result.cpu_jobs, result.run_flags()) == (Config(4, 32, 512), 0, "--jobs 4")


def test_tune_does_not_compare_mps_with_mps_under_another_users_daemon(
    tmp_path: Path, standin: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    console = say(Console(file=io.StringIO()))
    assert tune_extras(console, GPU_MACHINE, HEAVY, None).mps_why_not == ""  # measurable: no daemon yet
    standin.start_daemon_by_hand()
    other = mps_standin.as_another_user(standin.system_pipe, monkeypatch)
    extras = tune_extras(console, GPU_MACHINE, HEAVY, None)
    trials = ScriptedTrials(lambda c, cpu, mps: peak_at_four(c))
    result = tune_with(trials, extras, tmp_path)
    assert not any(mps for _, _, mps in trials.calls) and result.mps is None
    assert mps_summary(result) == (f"MPS: not measured (the daemon at {standin.system_pipe} (started by uid {other}) "
                                   "already serves every job)")  # fmt: skip
    assert len(standin.calls()) == 1  # tune started no daemon of its own


def test_a_budget_with_room_for_one_trial_and_its_confirmations_measures_it_and_then_the_extras(
    tmp_path: Path, standin: StandIn
) -> None:
    # tune's smallest budget, 30 s: 3 trials of 10 s (5 s of start-up, 5 measured). A GPU's extras
    # (the device mix, MPS) would not fit beside the first trial's confirmations, and the climb
    # must measure its first trial all the same, then the extras as far as the budget goes.
    budget = 3 * (measure_seconds(30.0) + STARTUP_S)
    mix = Config(5, 32, 512)
    trials = ScriptedTrials(lambda c, cpu, mps: peak_at_four(c))
    extras = Extras(mix_for=lambda best: (mix, 1), mps_why_not="", open_mps=daemon_in)
    start = Config(4, 32, 512)
    result = climb(HEAVY, GPU_MACHINE, budget, workdir=tmp_path, start=start, extras=extras, trial=trials)
    assert trials.calls == [(start, 0, False), (mix, 1, False), (start, 0, True)]
    assert result.best == start and result.mps is not None
