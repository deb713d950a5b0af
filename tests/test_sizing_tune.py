"""`cockpit tune`: the hill climb against scripted machines, the budget, and one real search."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from rich.console import Console

from cockpit.commands.tune import parse_budget
from cockpit.contract.presets import Preset, load
from cockpit.contract.runspec import ConfigError
from cockpit.core.machine.tempdirs import sweep
from cockpit.core.sizing.advisor import Machine
from cockpit.core.sizing.cost_probe import measured_costs
from cockpit.core.sizing.hill_climb import Config, HillClimb, Space
from cockpit.core.sizing.trials import Trial
from tests.cockpitproc import run_cockpit

# What the probe measured for a CartPole job on the 2-core development machine (costs.toml).
CARTPOLE_COSTS = {"device": "cpu", "step_overhead_us": 1354.38, "env_policy_us": 23.59, "env_step_us": 25.97,
                  "train_sample_us": 20.01, "train_epoch_us": 341.36, "setup_s": 0.011, "import_s": 4.921,
                  "episode_steps_max": 500, "busy_factor": 0.9734, "shared_factor": 1.1236,
          "train_threads": 2, "train_speedup": 0.94}  # fmt: skip


def cached_cartpole_costs(tmp_path: Path) -> dict[str, str]:
    """The environment of a cockpit whose cost cache (in `tmp_path`) holds this machine's CartPole
    costs, as the probe would have left them: tune then starts its trials without probing."""
    cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", cache["XDG_CACHE_HOME"])
        measured_costs(load("cartpole"), None, probe=lambda preset, tmp: CARTPOLE_COSTS)
    return cache


SPACE = Space(max_jobs=4, max_envs=32, n_steps=32, batch_cap=256, min_envs=2)


def climb_on(sps_of: dict[tuple[int, int], float], start: Config) -> tuple[Config, int]:
    """Run the climb to its end on a scripted machine: the winner and how many trials it took."""
    search = HillClimb(SPACE, start)
    while (config := search.next()) is not None:
        search.measured(config, sps_of.get((config.jobs, config.n_envs), 0.0))
    assert search.best is not None
    return search.best, len(search.results)


def test_the_grid_is_every_jobs_and_power_of_two_envs_with_a_dividing_batch() -> None:
    grid = SPACE.grid()
    assert len(grid) == 4 * 5  # jobs 1..4 x envs 2, 4, 8, 16, 32
    assert all((c.n_envs * 32) % c.batch_size == 0 and c.batch_size <= 256 for c in grid)
    assert SPACE.config(1, 2) == Config(1, 2, 64) and SPACE.config(5, 8) is None


def test_the_climb_finds_a_peak_away_from_the_start_in_fewer_trials_than_the_grid() -> None:
    # two cores: 2 jobs x 16 envs is best; everything falls off around it
    sps = {(j, e): 1000 * min(j, 2) * (1 - abs(e - 16) / 40) - 150 * max(0, j - 2) for j in range(1, 5)
           for e in (2, 4, 8, 16, 32)}  # fmt: skip
    best, trials = climb_on(sps, SPACE.config(1, 4))  # type: ignore[arg-type]
    assert (best.jobs, best.n_envs) == (2, 16)
    assert trials <= len(SPACE.grid()) // 2  # climbed to its end, with no budget cutting it short


def test_a_gain_within_noise_does_not_move_the_best() -> None:
    search = HillClimb(SPACE, SPACE.config(2, 8))  # type: ignore[arg-type]
    search.measured(SPACE.config(2, 8), 1000.0)  # type: ignore[arg-type]
    search.measured(SPACE.config(3, 8), 1010.0)  # type: ignore[arg-type]  # +1 %: noise
    assert search.best == SPACE.config(2, 8)


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("5m", 300), ("1.5h", 5400)])
def test_budgets(text: str, seconds: float) -> None:
    assert parse_budget(text) == seconds


def test_a_bad_budget_is_one_line_exit_2() -> None:
    with pytest.raises(ConfigError, match="--budget '5 minutes'"):
        parse_budget("5 minutes")
    result = run_cockpit("tune", "--budget", "0s")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "--budget" in result.stderr


def test_a_first_time_probe_is_paid_from_the_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import cockpit.core.sizing.tune_search
    from cockpit.commands.tune import tune
    from cockpit.contract.costs import Costs
    from cockpit.core.sizing.tune_search import TuneResult

    budgets: list[float] = []

    def slow_probe(console: Console, machine: Machine, preset: Preset, progress: object = None) -> Costs:
        time.sleep(0.5)
        return Costs("cpu", 372.0, 5.0, 7.8, 5.0)

    # The winner is neither the first nor the last trial, and differs from the preset's own
    # n_envs (8) and batch (256): the written preset can only match it by taking the winner.
    first, best, last = SPACE.config(1, 16), SPACE.config(2, 4), SPACE.config(3, 32)
    assert first is not None and best is not None and last is not None and best.batch_size == 128

    def recording_climb(preset: Preset, machine: Machine, budget_s: float, **kwargs: Any) -> TuneResult:
        budgets.append(budget_s)
        assert kwargs["costs"] == Costs("cpu", 372.0, 5.0, 7.8, 5.0)
        trials = (Trial(first, 700.0, 100.0, None, 10.0), Trial(best, 1000.0, 100.0, None, 10.0),
                  Trial(last, 900.0, 100.0, None, 10.0))  # fmt: skip
        return TuneResult(trials, best, 30.0)

    monkeypatch.setattr(cockpit.core.sizing.tune_search, "costs_for", slow_probe)
    monkeypatch.setattr(cockpit.core.sizing.tune_search, "climb", recording_climb)
    console, machine = Console(file=io.StringIO()), Machine(2, 2, 24 * 1024**3)
    tune(console, preset="cartpole", env=None, budget="60s", out=tmp_path / "t.toml", machine=machine)
    (budget,) = budgets
    assert 58.0 < budget <= 59.5
    tuned = load(str(tmp_path / "t.toml"))
    assert (tuned.n_envs, tuned.batch_size) == (best.n_envs, best.batch_size) == (4, 128)
    assert f"--jobs {best.jobs}" in tuned.description and "1,000 SPS" in tuned.description


def test_a_budget_too_short_for_one_trial_is_one_line_exit_2_before_any_probe(tmp_path: Path) -> None:
    out = tmp_path / "tuned.toml"
    cache = tmp_path / "cache"
    result = run_cockpit("tune", "--preset", "cartpole", "--budget", "20s", "--out", str(out), timeout=120,
                         env={"XDG_CACHE_HOME": str(cache)})  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr == ("cockpit tune: error: --budget 20s: 20 s is too short for one trial (about 10 s, "
                             "measured 3 times); give at least 30s\n")  # fmt: skip
    assert not out.exists() and not cache.exists() and "measuring" not in result.stdout  # no probe ran


@pytest.mark.slow
def test_a_real_tune_on_cartpole_writes_a_preset_that_loads(tmp_path: Path) -> None:
    out = tmp_path / "tuned.toml"
    cache = cached_cartpole_costs(tmp_path)  # the whole 40 s go to trials
    result = run_cockpit("tune", "--preset", "cartpole", "--env", "CartPole-v1", "--budget", "40s", "--out", str(out),
                         timeout=120, env=cache)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    tuned = load(str(out))
    assert tuned.env == "CartPole-v1" and (tuned.n_envs * tuned.n_steps) % tuned.batch_size == 0
    assert "<- best" in result.stdout and "cockpit run --preset" in tuned.description
    # The preset is the winner the printed trials table marks: its n_envs, batch and --jobs.
    rows = [line.split() for line in result.stdout.splitlines() if "<- best" in line]
    assert rows, result.stdout
    winners = {(int(row[0]), int(row[1]), int(row[2])) for row in rows}
    assert len(winners) == 1, result.stdout  # the winner's rows (measured again) name one config
    ((jobs, n_envs, batch),) = winners
    assert (tuned.n_envs, tuned.batch_size) == (n_envs, batch), result.stdout
    assert tuned.description.endswith(f"--jobs {jobs}"), tuned.description


def test_the_leaders_measured_again_decide_by_their_means() -> None:
    search = HillClimb(SPACE, SPACE.config(2, 8))  # type: ignore[arg-type]
    lucky, steady = SPACE.config(2, 32), SPACE.config(2, 16)
    search.measured(steady, 1000.0)  # type: ignore[arg-type]
    search.measured(lucky, 1300.0)  # type: ignore[arg-type]  # one lucky short trial
    assert search.best == lucky and search.leaders() == [lucky, steady]
    search.measured(lucky, 700.0)  # type: ignore[arg-type]
    search.measured(steady, 1040.0)  # type: ignore[arg-type]
    assert search.best == steady  # 1020 on average against 1000


def test_the_climb_starts_at_recommends_pick_inside_the_space() -> None:
    from cockpit.contract.costs import Costs
    from cockpit.core.sizing.tune_search import start_config

    two_cores = Machine(2, 2, 24 * 1024**3)
    measured = Costs("cpu", 372.0, 5.0, 7.8, 5.0)
    assert start_config(load("cartpole"), two_cores, measured) == Config(2, 32, 256)
    assert start_config(load("cartpole"), two_cores) == Config(2, 8, 256)  # the table: no n_envs rule


@pytest.mark.slow
def test_kill_9_of_tune_mid_trial_leaves_no_worker_alive(tmp_path: Path) -> None:
    """tune's trial workers follow the cockpit's death like a run's (the Launcher's parent-death
    signal): killing tune with SIGKILL mid-trial must not leave them training."""
    # With this machine's costs in its cache, tune goes straight to its first trial, no probe first.
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1", **cached_cartpole_costs(tmp_path)}
    tune = subprocess.Popen([sys.executable, "-m", "cockpit", "tune", "--preset", "cartpole", "--budget", "10m",
                             "--out", str(tmp_path / "t.toml")], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        workers: list[psutil.Process] = []
        while time.monotonic() < deadline:  # a probe, if any, comes first; then the first trial's workers step
            stepping = [p for p in tmp_path.glob("cockpit-tune-*/trial-*/job-*/events.jsonl") if p.stat().st_size]
            workers = [p for p in psutil.Process(tune.pid).children(recursive=True)
                       if "cockpit_training.worker" in " ".join(p.cmdline())]  # fmt: skip
            if stepping and workers:
                break
            assert tune.poll() is None, "tune exited before its first trial"
            time.sleep(0.2)
        assert workers, "no trial worker started within 120 s"
        os.kill(tune.pid, signal.SIGKILL)
        tune.wait(timeout=10)
        _, alive = psutil.wait_procs(workers, timeout=5)
        assert not [p for p in alive if _running(p)], "trial workers outlived tune by more than 5 s"
        # Its directory outlived it (nothing runs at SIGKILL), named by its owner, whom the next
        # start finds dead and whose directory it removes.
        (left,) = tmp_path.glob(f"cockpit-tune-{tune.pid}-*")
        assert sweep("tune", tmp_path) == [left] and not left.exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(tune.pid, signal.SIGKILL)


def _running(process: psutil.Process) -> bool:
    """True unless the process is gone or a zombie (dead, only not yet reaped by its new parent)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
