"""`cockpit recommend`: from hardware alone, from a run's run.toml, and bad input."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import psutil
import pytest
from rich.console import Console

from cockpit.commands.recommend import measurements_from_run, recommend
from cockpit.contract.progress import PROBE_STEPS
from cockpit.contract.runrecord import (
    ConfigRecord,
    HostRecord,
    JobRecord,
    PhaseRecord,
    RunRecord,
    UtilizationRecord,
    write,
)
from cockpit.contract.states import JobState, RunStatus
from cockpit.contract.toml import tomllib
from cockpit.core.sizing.advisor import Machine
from tests.cockpitproc import run_cockpit

GIB = 1024**3
RTX_4070 = Machine(32, 64, 128 * GIB, "NVIDIA GeForce RTX 4070", 8 * GIB)


def _run_dir(tmp_path: Path) -> Path:
    """A run.toml like a one-job heavy run on the seeds' RTX 4070: 25 % GPU, bursts to 80 %."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    job = JobRecord(
        id="000", seed=0, status=JobState.DONE, steps=1000, target=1000, restarts=0, checkpoints=0, mean_sps=700.0,
        peak_gpu_mem_mib=1536, cpu_percent_mean=380.0, error="",
        phases={"rollout": PhaseRecord(seconds=70.0, gpu_util_mean=10.0),
                "train": PhaseRecord(seconds=30.0, gpu_util_mean=80.0)},
    )  # fmt: skip
    record = RunRecord(
        command="cockpit run", status=RunStatus.DONE, started_at="2026-11-22T00:00:00Z",
        updated_at="2026-11-22T00:01:40Z", duration_s=100.0,
        config=ConfigRecord(jobs=1, agents=1, preset="heavy", env="LunarLander-v3", timesteps=1000, seed=0,
                            max_restarts=3),
        host=HostRecord(hostname="box", cpu_model="CPU", physical_cores=32, logical_cores=64, ram_gib=128.0,
                        os="Linux"),
        jobs=(job,), utilization=UtilizationRecord(gpu_util_mean=25.0, gpu_util_while_training=80.0, sampler_ticks=2),
    )  # fmt: skip
    write(run_dir, record)
    (run_dir / "samples.csv").write_text("t,cpu_percent\n1.0,35.0\n2.0,45.0\n")
    return run_dir


def test_measurements_come_from_the_run_log_and_samples(tmp_path: Path) -> None:
    _, measured = measurements_from_run(_run_dir(tmp_path))
    (job,) = measured.jobs
    assert job.train_share == 0.3 and job.gpu_util_train == 80.0 and job.gpu_mem_peak_bytes == 1536 * 1024**2
    assert measured.gpu_util_mean == 25.0 and measured.cpu_percent_mean == 40.0


def test_recommend_from_a_run_prints_its_numbers_and_adds_jobs(tmp_path: Path) -> None:
    console = Console(record=True, width=200)
    items = recommend(console, preset=None, env=None, jobs=None, run_dir=_run_dir(tmp_path), machine=RTX_4070,
                      probe=False)  # fmt: skip
    assert [(a.setting, a.current, a.suggested) for a in items] == [("jobs", "1", "4")]
    text = console.export_text()
    assert "measured GPU    25.0 % mean, 80.0 % while training" in text
    assert "heavy: LunarLander-v3, n_envs 32" in text and "RTX 4070" in text


def test_recommend_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    for args, message in ((["--preset", "huge"], "preset 'huge'"), (["--from", str(tmp_path)], "--from")):
        result = run_cockpit("recommend", *args)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("cockpit recommend: error:") and message in lines[0]


def test_recommend_for_this_machine_runs_and_names_the_cores() -> None:
    result = run_cockpit("recommend", "--no-probe")
    assert result.returncode == 0, result.stderr
    assert "numbers used" in result.stdout and "physical" in result.stdout
    assert "measured costs" not in result.stdout and "per core" in result.stdout


@pytest.mark.slow
def test_recommend_measures_this_machine_once_then_reads_the_cache(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    first = run_cockpit("recommend", "--preset", "cartpole", "--jobs", "2", env=env)
    assert first.returncode == 0, first.stderr
    assert "measuring what a CartPole-v1 job costs on this machine" in first.stdout
    # Off a terminal the probe's steps are plain lines: each step as it begins, in order, of one count.
    steps = [re.match(r"measuring CartPole-v1: step (\d+)/(\d+) (.+), \d+ s of about \d+ s$", line)
             for line in first.stdout.splitlines() if line.startswith("measuring CartPole-v1: step")]  # fmt: skip
    assert steps and all(steps), first.stdout
    numbers = [int(m.group(1)) for m in steps if m]
    assert sorted(numbers) == numbers and sorted(set(numbers)) == list(range(1, 11)), first.stdout
    assert {int(m.group(2)) for m in steps if m} == {10}, first.stdout
    whats = list(dict.fromkeys(m.group(3) for m in steps if m))
    assert whats[0] == "starting the probe" and whats[1:5] == list(PROBE_STEPS), whats
    assert whats[-1] == "two jobs side by side, round 4 of 4", whats
    assert "measuring CartPole-v1: done in " in first.stdout
    assert "measured costs" in first.stdout and "us per env" in first.stdout
    # The probe and its two partners, for real (the suite's one full probe of a CartPole job): what
    # they measured is in the cache, and none of their processes outlives the command.
    (record,) = tomllib.loads((tmp_path / "cockpit" / "costs.toml").read_text(encoding="utf-8")).values()
    assert record["env"] == "CartPole-v1" and record["device"] == "cpu" and record["batch_size"] == 256
    for key in ("step_overhead_us", "env_policy_us", "env_step_us", "train_sample_us"):
        assert record[key] > 0, (key, record)
    assert record["train_epoch_us"] >= 0, record
    assert record["setup_s"] > 0 and record["import_s"] > record["setup_s"] and record["episode_steps_max"] == 500
    # a step's fixed cost (Python, one forward call) dwarfs one CartPole env's share of it
    assert record["step_overhead_us"] > 5 * record["env_policy_us"]
    for factor in (record["busy_factor"], record["shared_factor"]):
        assert math.isfinite(factor) and 0.25 < factor < 4.0, record
    # one train epoch timed on every core here against one thread: 2 cores on these machines
    assert record["train_threads"] == min(psutil.cpu_count(logical=False), len(os.sched_getaffinity(0))), record
    # its value is the machine's (on a loaded one two threads can crawl): a measurement, not a default
    assert math.isfinite(record["train_speedup"]) and record["train_speedup"] > 0, record
    assert not [p for p in psutil.process_iter(["cmdline"]) if "cockpit_training.probe" in " ".join(
        p.info["cmdline"] or []) and _cache_of(p) == str(tmp_path)]  # fmt: skip
    # the measured step overhead (hundreds of us) makes 8 CartPole envs per job too few
    assert "n_envs" in first.stdout and "step overhead falls from" in first.stdout
    second = run_cockpit("recommend", "--preset", "cartpole", "--jobs", "2", env=env)
    assert second.returncode == 0 and "measuring" not in second.stdout
    assert "measured costs" in second.stdout


def test_a_failing_probe_says_why_and_the_advice_comes_from_the_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cockpit.core.sizing.cost_probe
    from cockpit.contract.runspec import ConfigError

    def broken(*_: object, **__: object) -> dict:
        raise ConfigError("measuring CartPole-v1: the probe failed: RuntimeError: boom")

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(cockpit.core.sizing.cost_probe, "run_probe", broken)
    console = Console(record=True, width=200)
    two_cores = Machine(2, 2, 24 * GIB)
    items = recommend(console, preset="cartpole", env=None, jobs=16, run_dir=None, machine=two_cores)
    text = console.export_text()
    assert "the probe failed: RuntimeError: boom; sizing from the tables instead" in text
    assert "per core" in text and "measured costs" not in text
    assert ("jobs", "16", "8") in [(a.setting, a.current, a.suggested) for a in items]  # 32 cartpole envs a core


def _cache_of(process: psutil.Process) -> str | None:
    """The XDG_CACHE_HOME `process` runs with (a probe of this test's has the test's), None when
    it is gone or not ours to read: another test may run its own probe at the same time."""
    try:
        return process.environ().get("XDG_CACHE_HOME")
    except psutil.Error:
        return None
