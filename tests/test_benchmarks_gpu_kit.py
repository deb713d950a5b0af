"""The GPU verification kit (benchmarks/gpu): its arithmetic and parsers on made-up readings, its
contracts with cockpit's own outputs (tune's preset file, the advisor's OOM advice), its command
line, and the whole kit end to end on the CPU (`--cpu-smoke`)."""

from __future__ import annotations

import csv
import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from benchmarks.gpu import check, kit, measure, nvsmi
from cockpit.contract.events import Event, PhaseEvent, StartedEvent
from cockpit.contract.presets import resolve
from cockpit.contract.runrecord import ConfigRecord, HostRecord, JobRecord, RunRecord, read, write
from cockpit.contract.states import JobState, RunStatus
from cockpit.core.sizing.advisor import Machine
from cockpit.core.sizing.hill_climb import Config

CHECK_SH = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "check.sh"

DMON = """\
# Date       Time        gpu    sm   mem   enc   dec   jpg   ofa    fb  bar1  ccpm
# YYYYMMDD   HH:MM:SS    Idx     %     %     %     %     %     %    MB    MB    MB
 20261117   14:03:05      0    40     3     0     0     0     0  1234     2     0
 20261117   14:03:05      1    99    99     0     0     0     0    10     2     0
 20261117   14:03:06      0     -     5     0     0     0     0  1240     2     0
# Date       Time        gpu    sm   mem   enc   dec   jpg   ofa    fb  bar1  ccpm
 20261117   14:03:07      0    80    10     0     0     0     0  1300     2     0
 20261117   14:03:08      0    7
"""


# `nvidia-smi pmon -s u -o DT`, laid out as the nvidia-smi manual's "Process Monitoring" section
# gives its columns (a newer driver's jpg and ofa included): an idle GPU's "-" row, a command with a
# space, another GPU's process, a process without a sample that second, and a torn last line.
PMON = """\
# Date       Time        gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command
# YYYYMMDD   HH:MM:SS    Idx           #    C/G      %      %      %      %      %      %    name
 20261117   14:03:05      0          -     -      -      -      -      -      -      -    -
 20261117   14:03:06      0       4242     C     45      3      -      -      -      -    python -m cockpit_training
 20261117   14:03:06      1       9999     C     99     50      -      -      -      -    other
 20261117   14:03:07      0       4242     C      -      -      -      -      -      -    python
 20261117   14:03:08      0       4243
"""


def test_pmon_rows_are_read_by_column_name_for_gpu_0_and_skip_idle_rows_and_torn_lines() -> None:
    rows = nvsmi.parse_pmon(PMON)
    assert rows == [nvsmi.PmonRow(local("20261117 14:03:06"), 4242, 45.0),
                    nvsmi.PmonRow(local("20261117 14:03:07"), 4242, None)]  # fmt: skip


def test_the_reading_checks_hold_their_bounds() -> None:
    samples = [(100.0 + 0.1667 * i, 50.0) for i in range(30)]
    stop = samples[-1][0]
    assert check.clock_problem(samples, now=stop + 1, stopped=stop + 1) is None
    assert "from time.time()" in (check.clock_problem(samples, now=stop + 9, stopped=stop + 9) or "")
    assert "in the future" in (check.clock_problem(samples, now=stop - 9, stopped=stop - 9) or "")
    assert check.clock_problem([], now=stop, stopped=stop) == "no utilization samples in gpu_util.csv"
    assert check.median_spacing(samples) == pytest.approx(0.1667)
    assert check.median_spacing(samples[:1]) is None
    assert check.buffer_problem("buffer", {}, 60.0) is None
    assert "not NVML's buffer" in (check.buffer_problem("poll", {}, 60.0) or "")
    assert "changed" in (check.buffer_problem("buffer", {"buffer": 0.9, "poll": 0.1}, 60.0) or "")
    assert check.cuda_memory_problem(1000.0, 1400.0) is None
    assert "under the allocator's" in (check.cuda_memory_problem(1000.0, 900.0) or "")
    assert "bound 1,536 MiB" in (check.cuda_memory_problem(1000.0, 2600.0) or "")
    assert check.cuda_memory_problem(None, 2600.0) is None
    assert check.sm_problem(40.0, 50.0) is None and "bound 15 points" in (check.sm_problem(20.0, 50.0) or "")


def test_a_one_off_sample_buffer_error_costs_its_tick_not_the_check() -> None:
    # A tick polled after one nvmlDeviceGetSamples error shows as a share of the run's time; up to
    # 2 % of it passes, and the share is what the report shows.
    assert check.poll_share("buffer", {}) == 0.0 and check.poll_share("poll", {}) == 1.0
    assert check.poll_share(None, {}) is None
    assert check.poll_share("poll", {"buffer": 0.99, "poll": 0.01}) == pytest.approx(0.01)
    assert check.buffer_problem("poll", {"buffer": 0.99, "poll": 0.01}, 60.0) is None  # the newest tick polled
    assert check.buffer_problem("buffer", {"buffer": 0.99, "poll": 0.01}, 60.0) is None
    failed = check.buffer_problem("buffer", {"buffer": 0.95, "poll": 0.05}, 60.0) or ""
    assert "poll 5.0%" in failed and "bound 2%" in failed
    assert "no recorded way" in (check.buffer_problem(None, {}, 60.0) or "")


def test_sm_is_compared_with_pmon_on_the_seconds_both_have_a_sample() -> None:
    t0 = local("20261117 14:03:00")
    # pmon prints "-" for a second without a sample of the process; cockpit counts that second as 0.
    pmon = [nvsmi.PmonRow(t0 + 1, 42, 80.0), nvsmi.PmonRow(t0 + 2, 42, None), nvsmi.PmonRow(t0 + 3, 42, None),
            nvsmi.PmonRow(t0 + 4, 42, 60.0), nvsmi.PmonRow(t0 + 9, 42, 50.0)]  # fmt: skip
    cockpit = [(t0 + 0.2, 78.0), (t0 + 0.7, 82.0), (t0 + 1.5, 0.0), (t0 + 2.5, 0.0), (t0 + 3.5, 60.0),
               (t0 + 3.7, 0.0)]  # fmt: skip
    both = check.compare_sm(cockpit, pmon)
    # Rows T=1 and T=4 meet cockpit's readings in [0, 1) (80) and [3, 4) (60; its 0 there is a
    # reading without a sample, carried a second late); T=2 and T=3 are "-", left out with
    # cockpit's zeros; T=9 has no reading of cockpit's.
    assert (both.seconds, both.cockpit, both.pmon, both.no_pmon, both.no_cockpit) == (2, 70.0, 70.0, 2, 1)
    assert both.left_out == 3 and check.sm_problem(both.cockpit, both.pmon) is None
    # Counting the seconds without a sample as cockpit does would have broken the bound.
    assert check.sm_problem(sum(v for _, v in cockpit) / len(cockpit), 70.0) is not None
    assert check.compare_sm(cockpit, [nvsmi.PmonRow(t0 + 2, 42, None)]) == check.SmComparison(0, None, None, 1)


def local(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y%m%d %H:%M:%S"))


def test_dmon_rows_are_read_by_column_name_for_gpu_0_and_skip_headers_and_torn_lines() -> None:
    rows = nvsmi.parse_dmon(DMON)
    assert [(r.t, r.sm, r.mem, r.fb_mib) for r in rows] == [
        (local("20261117 14:03:05"), 40.0, 3.0, 1234.0),
        (local("20261117 14:03:06"), None, 5.0, 1240.0),  # "-": not reported, not zero
        (local("20261117 14:03:07"), 80.0, 10.0, 1300.0),
    ]


def test_compute_apps_and_gpu_facts_parse_and_keep_unreported_figures_unknown() -> None:
    apps = nvsmi.parse_compute_apps("1234, 812\n99, [N/A]\nno processes\n", 5.0)
    assert apps == [nvsmi.AppMemory(5.0, 1234, 812.0), nvsmi.AppMemory(5.0, 99, None)]
    (gpu,) = nvsmi.parse_query_gpu("NVIDIA H100 80GB HBM3, 580.159.04, 81559, 1, 81000\n")
    assert gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["memory.free"] == "81000"


def test_agreement_is_the_mean_absolute_difference_per_second_at_the_stated_shift() -> None:
    t = 1_000_000.0
    # cockpit's samples: second t-1 averages 30, second t averages 60, second t+1 averages 90.
    samples = [(t - 1 + 0.1, 20.0), (t - 1 + 0.6, 40.0), (t + 0.5, 60.0), (t + 1.5, 90.0)]
    dmon = [nvsmi.DmonRow(t, 35.0, None, None), nvsmi.DmonRow(t + 1, 50.0, None, None),
            nvsmi.DmonRow(t + 2, None, None, None), nvsmi.DmonRow(t + 9, 10.0, None, None)]  # fmt: skip
    at0 = measure.compare_util(samples, dmon)
    # Row t meets [t-1, t) = 30 (|30-35| = 5), row t+1 meets [t, t+1) = 60 (10); t+2 has no sm,
    # t+9 no samples.
    assert [(p.second, p.cockpit, p.cockpit_samples, p.dmon) for p in at0.pairs] == [
        (int(t), 30.0, 2, 35.0), (int(t) + 1, 60.0, 1, 50.0)]  # fmt: skip
    assert at0.mad == 7.5 and at0.bias == 2.5 and at0.seconds == 2
    shifted = measure.compare_util(samples, dmon, lag=1)
    assert [p.cockpit for p in shifted.pairs] == [60.0, 90.0]
    assert measure.compare_util(samples, dmon, start=t + 0.5).seconds == 1
    assert measure.compare_util([], dmon).mad is None


def cycles(t0: float, n: int, *, cycle_s: float, steps: int, start_steps: int = 0) -> list[Event]:
    """A worker attempt started at t0 whose rollouts start every `cycle_s` s, `steps` apart."""
    events: list[Event] = [StartedEvent(t0, pid=1)]
    for i in range(n):
        at, done = t0 + 5 + i * cycle_s, start_steps + i * steps
        events += [PhaseEvent(at, "rollout", i, done), PhaseEvent(at + cycle_s / 2, "train", i + 1, done + steps)]
    return events


def test_throughput_counts_whole_cycles_after_every_jobs_first_and_a_restart_starts_over() -> None:
    fast = cycles(0.0, 10, cycle_s=1.0, steps=100)  # rollouts at 5, 6, ... 14: 100 SPS
    slow = cycles(0.0, 4, cycle_s=3.0, steps=600)  # rollouts at 5, 8, 11, 14: 200 SPS
    jobs = {"000": fast, "001": slow}
    assert measure.warm_from(jobs) == 8.0  # the slower job's second rollout start
    agg = measure.aggregate(jobs, 8.0, 14.5)
    assert agg.jobs["000"] == measure.JobRate(6, 100.0) and agg.jobs["001"] == measure.JobRate(2, 200.0)
    assert agg.sps == 300.0 and agg.min_cycles == 2
    # A job with no whole cycle in the window makes the sum unknown rather than too small.
    assert measure.aggregate(jobs, 12.0, 14.5).sps is None
    assert measure.warm_from({"000": fast, "002": cycles(0.0, 1, cycle_s=1.0, steps=1)}) is None
    # After a restart only the new attempt counts: its start-up is not throughput.
    restarted = [*fast, *cycles(30.0, 3, cycle_s=2.0, steps=100, start_steps=5000)]
    assert measure.rollout_starts(restarted) == [(35.0, 5000), (37.0, 5100), (39.0, 5200)]


def test_worker_figures_leave_out_the_first_update() -> None:
    events = [StartedEvent(0.0, pid=7, device="cuda:0", startup_s=4.0, tf32=True),
              PhaseEvent(5.0, "rollout", 0, 0), PhaseEvent(9.0, "train", 1, 1000),  # slow first update
              PhaseEvent(10.0, "rollout", 1, 1000), PhaseEvent(11.0, "train", 2, 2000),
              PhaseEvent(12.0, "rollout", 2, 2000), PhaseEvent(12.5, "train", 3, 3000),
              PhaseEvent(13.0, "rollout", 3, 3000)]  # fmt: skip
    result = check.worker_figures("heavy", events, 812.0)
    assert (result.device, result.tf32, result.startup_s, result.peak_mib) == ("cuda:0", True, 4.0, 812.0)
    assert result.sps == 2000 / 3 and result.cycles == 2  # rollout starts 10 -> 13
    assert result.rollout_sps == 1500.0  # (1000 + 2000) / 2
    assert result.train_s == 0.75  # (1.0 + 0.5) / 2: the first update's train phase is not counted


def test_the_oom_preset_is_valid_and_its_batch_needs_twice_the_free_memory() -> None:
    free_mib = 81_000.0
    raw = check.oom_preset(free_mib)
    preset = resolve(raw, name="oom", source="oom.toml")
    assert preset.batch_size == preset.total_batch  # one minibatch: the whole rollout
    needed = preset.batch_size * 2 * len(preset.net_arch) * preset.net_arch[0] * 4
    assert needed >= 2 * free_mib * 2**20
    weights = 2 * len(preset.net_arch) * preset.net_arch[0] ** 2 * 4 * 4  # params, grads, Adam's two
    assert weights < 16 * 2**30  # the model fits any card the kit meets: the batch runs out


def test_the_halving_advice_is_found_in_an_oom_runs_record(tmp_path: Path) -> None:
    record = RunRecord(
        command="cockpit run", status=RunStatus.FAILED, started_at="2026-11-17T14:00:00Z",
        updated_at="2026-11-17T14:01:00Z", duration_s=60.0,
        config=ConfigRecord(jobs=1, agents=1, preset="heavy", env="LunarLander-v3", timesteps=8192, seed=0,
                            max_restarts=0),
        host=HostRecord(hostname="h", cpu_model="c", physical_cores=16, logical_cores=16, ram_gib=128.0, os="l"),
        jobs=(JobRecord(id="000", seed=0, status=JobState.FAILED, error="cuda_oom: OutOfMemoryError: CUDA out of "
                        "memory", steps=0, target=8192, restarts=0, checkpoints=0),),
    )  # fmt: skip
    write(tmp_path, record)
    advice = check.halving_advice(tmp_path)
    assert advice is not None and advice[:2] == ("4096", "2048") and "000" in advice[2]
    write(tmp_path, RunRecord(**{**record.__dict__, "jobs": (JobRecord(**{**record.jobs[0].__dict__,
                                                                          "error": "boom"}),)}))  # fmt: skip
    assert check.halving_advice(tmp_path) is None


def test_tunes_preset_file_gives_the_kit_its_pick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import cockpit.core.sizing.tune_search
    from cockpit.commands.tune import tune
    from cockpit.core.sizing.trials import Trial
    from cockpit.core.sizing.tune_search import TuneResult

    best = Config(3, 16, 512)

    def climb(*args: Any, **kwargs: Any) -> TuneResult:
        return TuneResult((Trial(Config(1, 8, 256), 900.0, 90.0, 40.0, 10.0),
                           Trial(best, 12_345.0, 90.0, 80.0, 10.0)), best, 20.0)  # fmt: skip

    monkeypatch.setattr(cockpit.core.sizing.tune_search, "costs_for", lambda *a: None)
    monkeypatch.setattr(cockpit.core.sizing.tune_search, "climb", climb)
    out = tmp_path / "tuned.toml"
    tune(Console(file=io.StringIO()), preset="cartpole", env=None, budget="60s", out=out,
         machine=Machine(2, 2, 24 * 1024**3))  # fmt: skip
    sps, jobs, preset = check.tune_pick(out)
    assert (sps, jobs, preset.n_envs, preset.batch_size) == (12_345.0, 3, 16, 512)
    plain = 'env = "CartPole-v1"\nn_envs = 2\nn_steps = 8\nbatch_size = 16\nn_epochs = 1\n'
    (tmp_path / "plain.toml").write_text(plain, encoding="utf-8")
    with pytest.raises(kit.KitError, match="no 'N SPS with J parallel job"):
        check.tune_pick(tmp_path / "plain.toml")


def test_the_default_plans_fit_the_device_tools_command_limit(tmp_path: Path) -> None:
    gpu = kit.parse_args(["--out", str(tmp_path)])
    assert gpu.checks == kit.CHECKS and gpu.device == "cuda" and gpu.presets == ("heavy", "beast")
    # Every check ends before the default --deadline, and the deadline with check.sh's wheel install
    # and the last stop's grace is the 420 s a first run may take (a rerun then fits in the 15
    # minutes of device time).
    assert kit.plan_seconds(gpu) <= gpu.deadline
    assert kit.INSTALL_S + gpu.deadline + kit.OVERRUN_S <= kit.COMMAND_BUDGET_S == 420
    smoke = kit.parse_args(["--cpu-smoke", "--out", str(tmp_path)])
    assert smoke.preset == "cartpole" and smoke.device == "cpu" and kit.plan_seconds(smoke) <= 55
    short = kit.parse_args(["--out", str(tmp_path), "--skip", "fleet,oom", "--run-seconds", "10"])
    assert "fleet" not in short.checks and kit.plan_seconds(short) < kit.plan_seconds(gpu) - 90


def test_the_checks_go_in_the_order_of_what_only_a_gpu_can_tell(tmp_path: Path) -> None:
    gpu = kit.parse_args(["--out", str(tmp_path)])
    assert gpu.checks[:4] == ("host", "run", "sweep", "mps")  # NVML, per-job memory, the sweep, MPS
    assert set(gpu.checks[4:]) == {"worker", "oom", "probe", "fleet"}  # what the CPU already showed


def test_a_check_starts_only_when_its_plan_fits_and_its_timeouts_are_cut_to_what_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # restored after: the Kit points it at its own
    (tmp_path / "out").mkdir()
    the_kit = kit.Kit(kit.parse_args(["--out", str(tmp_path / "out"), "--deadline", "100"]), tmp_path)
    the_kit.began -= 100.0 - 50.0  # 50 s left
    assert 49.0 < the_kit.timeout(120.0) <= 50.0 and the_kit.timeout(10.0) == 10.0
    assert 49.0 < the_kit.grace() <= 50.0
    ran: list[str] = []
    monkeypatch.setitem(check.CHECK_FUNCTIONS, "probe", ("probe", lambda k, sec: ran.append("probe")))
    monkeypatch.setitem(check.CHECK_FUNCTIONS, "host", ("host", lambda k, sec: ran.append("host")))
    assert kit.estimate("probe", the_kit.s) > 50.0 >= kit.estimate("host", the_kit.s)
    probe = check.run_check(the_kit, "probe")
    assert probe.status == "skipped" and "not enough time left: planned 80 s" in (probe.error or "")
    assert check.run_check(the_kit, "host").status == "passed" and ran == ["host"]
    the_kit.began -= 60.0  # past the deadline: a child still gets a few seconds, a stop its least grace
    assert the_kit.timeout(120.0) == kit.MIN_TIMEOUT_S and the_kit.grace() == kit.STOP_GRACE_MIN_S
    the_kit._log.close()


def test_plan_prints_each_checks_seconds_and_the_total_and_starts_nothing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    done = subprocess.run(["bash", str(CHECK_SH), "--plan"], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**env, "PYTHON": sys.executable, "WHEELS": str(tmp_path / "none")})  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    planned = {line.split()[0]: float(line.split()[1]) for line in lines[: len(kit.CHECKS)]}
    assert list(planned) == list(kit.CHECKS)
    match = re.fullmatch(r"planned total: (\d+) s \(deadline (\d+) s\)", lines[-1])
    assert match is not None, lines[-1]
    total, deadline = float(match.group(1)), float(match.group(2))
    assert total == round(sum(planned.values())) and total <= deadline
    assert deadline + kit.INSTALL_S + kit.OVERRUN_S <= 420
    assert "command at most: 420 s" in done.stdout
    assert not list(tmp_path.iterdir())  # nothing written, nothing started


def test_the_mps_check_is_planned_after_the_sweep_and_measures_only_what_no_earlier_check_did(tmp_path: Path) -> None:
    gpu = kit.parse_args(["--out", str(tmp_path)])
    assert gpu.checks.index("mps") == gpu.checks.index("sweep") + 1
    point = kit.sweep_point(gpu)
    assert point == 10.0 + 5.0 + 5.0  # start-up, the default window, the stop
    assert kit.mps_counts(gpu) == (2, 4, 8)  # a lone job shares the GPU with nobody
    assert kit.estimate("mps", gpu) == 3 * point  # 2, 4 and 8 with MPS; without is the sweep's
    alone = kit.parse_args(["--out", str(tmp_path), "--checks", "mps"])
    assert alone.checks == ("mps",) and kit.estimate("mps", alone) == 6 * point  # both sides of each count
    beside_run = kit.parse_args(["--out", str(tmp_path), "--checks", "run,mps", "--sweep-jobs", "2,4"])
    assert kit.estimate("mps", beside_run) == 3 * point  # 4 jobs without MPS is the run check's
    one = kit.parse_args(["--out", str(tmp_path), "--checks", "sweep,mps", "--sweep-jobs", "1"])
    assert kit.mps_counts(one) == (1,) and kit.estimate("mps", one) == point
    skipped = kit.parse_args(["--out", str(tmp_path), "--skip", "mps"])
    assert skipped.checks == tuple(c for c in kit.CHECKS if c != "mps")
    smoke = kit.parse_args(["--cpu-smoke", "--out", str(tmp_path)])
    assert "mps" in smoke.checks and kit.estimate("mps", smoke) == 0.0  # skipped at once: no GPU


def test_the_mps_table_puts_with_beside_without_and_finds_the_best_ratio() -> None:
    without = {1: (1000.0, 30.0), 2: (1800.0, 50.0), 4: (2400.0, 70.0), 8: (2500.0, 80.0)}
    with_mps = {1: (950.0, 31.0), 2: (2100.0, 62.0), 4: (3600.0, 91.0), 8: (None, 95.0)}
    rows, best = check.mps_summary([1, 2, 4, 8, 4], without, with_mps)
    assert [r.jobs for r in rows] == [1, 2, 4, 8]  # each count once, in order
    assert [(r.sps_without, r.sps_with, r.util_without, r.util_with) for r in rows] == [
        (1000.0, 950.0, 30.0, 31.0), (1800.0, 2100.0, 50.0, 62.0), (2400.0, 3600.0, 70.0, 91.0),
        (2500.0, None, 80.0, 95.0)]  # fmt: skip
    # with / without: 950 / 1000, 2100 / 1800, 3600 / 2400; 8 jobs' SPS with MPS was not measured.
    assert [r.ratio for r in rows] == [pytest.approx(0.95), pytest.approx(7 / 6), pytest.approx(1.5), None]
    assert best is not None and best.jobs == 4 and best.ratio == pytest.approx(1.5)
    # A count missing on one side is "-", never a made-up ratio; a zero without gives no ratio either.
    rows, best = check.mps_summary([2, 16], {2: (0.0, 10.0)}, {2: (500.0, 20.0), 16: (900.0, 99.0)})
    assert [(r.jobs, r.sps_without, r.ratio) for r in rows] == [(2, 0.0, None), (16, None, None)]
    assert best is None
    # Equal ratios: the fewest jobs.
    _, best = check.mps_summary([1, 2], {1: (100.0, None), 2: (200.0, None)}, {1: (150.0, None), 2: (300.0, None)})
    assert best is not None and best.jobs == 1


def test_an_mps_runs_record_must_say_mps_and_a_refusal_is_cockpits_own_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = RunRecord(
        command="cockpit run", status=RunStatus.INTERRUPTED, started_at="2026-11-17T14:00:00Z",
        updated_at="2026-11-17T14:01:00Z", duration_s=60.0,
        config=ConfigRecord(jobs=2, agents=2, preset="heavy", env="LunarLander-v3", timesteps=8192, seed=0,
                            max_restarts=0, mps=True),
        host=HostRecord(hostname="h", cpu_model="c", physical_cores=16, logical_cores=16, ram_gib=128.0, os="l"),
        jobs=(),
    )  # fmt: skip
    write(tmp_path, record)
    assert check.mps_record_problem(read(tmp_path)) is None
    write(tmp_path, RunRecord(**{**record.__dict__, "config": ConfigRecord(**{**record.config.__dict__,
                                                                               "mps": False})}))  # fmt: skip
    assert check.mps_record_problem(read(tmp_path)) == "run.toml's [config] does not say mps = true"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # restored after: the Kit points it at its own
    (tmp_path / "out").mkdir()
    the_kit = kit.Kit(kit.parse_args(["--out", str(tmp_path / "out")]), tmp_path)
    the_kit._log.close()
    run = kit.CockpitRun(the_kit, "mps-1", [])
    line = ("cockpit run: error: --mps: nvidia-cuda-mps-control is not on PATH (it comes with the NVIDIA driver's "
            "compute utilities); install them, or run without --mps")  # fmt: skip
    run.log.write_text("starting\n" + line + "\n", encoding="utf-8")
    run.proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(2)"])
    run.proc.wait()
    assert check.mps_refusal_line(run) == line
    run.log.write_text("cockpit run: error: --mps: nvidia-cuda-mps-control -d failed with code 1\n", encoding="utf-8")
    assert check.mps_refusal_line(run) is None  # a daemon that would not start is a failure, not a refusal
    run.log.write_text(line + "\n", encoding="utf-8")
    run.proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
    run.proc.wait()
    assert check.mps_refusal_line(run) is None  # only exit 2 is the refusal


@pytest.mark.parametrize(
    ("argv", "flag"),
    [(["--bogus"], "--bogus"), (["--checks", "host,gpu"], "--checks"), (["--sweep-jobs", "1,x"], "--sweep-jobs"),
     (["--run-seconds", "-5"], "--run-seconds"), ([], "--out")],
)  # fmt: skip
def test_bad_input_is_one_line_naming_the_flag_and_exit_2(argv: list[str], flag: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    done = subprocess.run(["bash", str(CHECK_SH), *argv], capture_output=True, text=True, timeout=60,
                          env={**env, "PYTHON": sys.executable, "WHEELS": str(tmp_path / "none")})  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("benchmarks.gpu.check: error: ") and flag in line
    assert not list(tmp_path.iterdir())  # nothing written, nothing started


@pytest.mark.slow
def test_cpu_smoke_runs_every_check_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "out"
    began = time.monotonic()
    # No wheels: the kit runs on this venv's packages, as the GPU machine runs on the carried ones.
    env = {**os.environ, "PYTHON": sys.executable, "WHEELS": str(tmp_path / "none")}
    done = subprocess.run(["bash", str(CHECK_SH), "--cpu-smoke", "--out", str(out)], capture_output=True, text=True,
                          timeout=400, env=env)  # fmt: skip
    print(f"--cpu-smoke took {time.monotonic() - began:.0f} s")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == ["figures.csv", "gpu_memory.csv", "kit.log", "raw.tar.gz", "report.md", "sweep.csv",
                     "util_per_second.csv"]  # the device tool brings back 8 files at most, no folders  # fmt: skip
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "7 passed, 0 failed, 0 skipped" not in report  # oom cannot pass on a CPU
    assert "6 passed, 0 failed, 2 skipped" in report, report
    assert "**skipped**: no GPU memory to exhaust on the CPU" in report
    assert "**skipped**: no GPU; MPS needs one" in report
    assert not any(check == "mps" for check, _, _ in figures_of(out))  # no figure made up for a skipped check
    assert "skipped: no nvidia-smi" in report  # dmon's comparison is skipped, not made up
    figures = figures_of(out)
    assert float(figures[("worker", "cartpole", "sps")]) > 0 and figures[("worker", "cartpole", "tf32")] == "False"
    assert figures[("run", "util", "mad_vs_dmon")] == ""  # no dmon: no figure
    assert float(figures[("sweep", "1 jobs", "aggregate_sps")]) > 0
    assert float(figures[("sweep", "2 jobs", "aggregate_sps")]) > 0
    assert figures[("fleet", "fleet", "models_verified")] == "True"
    with (out / "sweep.csv").open(encoding="utf-8", newline="") as fh:
        sweep = list(csv.DictReader(fh))
    assert {(r["jobs"], r["mps"], r["source"]) for r in sweep} == {("1", "False", "sweep"), ("2", "False", "run")}


def figures_of(out: Path) -> dict[tuple[str, str, str], str]:
    """figures.csv as (check, subject, metric) -> value."""
    with (out / "figures.csv").open(encoding="utf-8", newline="") as fh:
        return {(r["check"], r["subject"], r["metric"]): r["value"] for r in csv.DictReader(fh)}
