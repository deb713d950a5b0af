"""The headless front end's plain output (its API for logs) and its table at 80 columns."""

from __future__ import annotations

import io
from dataclasses import replace

from rich.console import Console

from cockpit.contract.advice import Advice
from cockpit.contract.states import RunStatus
from cockpit.core.feed.snapshot import JobView, RunState
from cockpit.views.headless import HeadlessView, jobs_table

T0 = 1_800_000_000.0


def job(job_id: str, state: str, steps: int, **kw: object) -> JobView:
    fields = dict(
        id=job_id, seed=int(job_id), state=state, phase=None, phase_since=None, steps=steps, target=100_000,
        sps=None, mean_sps=None, ep_rew_mean=None, restarts=0, checkpoints=0, last_checkpoint_step=None,
        error=None, exit_reason=None, pid=None, device=None, cpu_percent=None, rss_bytes=None,
        gpu_mem_bytes=None, peak_gpu_mem_bytes=None, started_at=None, ended_at=None,
    )  # fmt: skip
    fields.update(kw)
    return JobView(**fields)  # type: ignore[arg-type]


def state(now: float, status: RunStatus, *jobs: JobView) -> RunState:
    return RunState(
        run_dir="runs/x", preset="cartpole", env="CartPole-v1", status=status, started_at=T0, now=now, slots=2,
        jobs=jobs, sample=None, gpu=None, gpu_status="no GPU telemetry: NVML library not found", warnings=(),
    )  # fmt: skip


def test_plain_output_prints_changes_at_once_and_progress_every_interval() -> None:
    out = io.StringIO()
    view = HeadlessView(Console(file=out, width=200), every_s=10.0)
    view.update(state(T0, RunStatus.RUNNING, job("000", "starting", 0)))
    view.update(
        state(T0 + 2, RunStatus.RUNNING, job("000", "running", 2048, phase="rollout", sps=5120.0, ep_rew_mean=22.5))
    )
    view.update(state(T0 + 5, RunStatus.RUNNING, job("000", "running", 4096, phase="train", sps=5000.0)))
    failed = job("000", "failed", 4096, restarts=3, error="RuntimeError: boom", exit_reason="failed after 3 restarts")
    view.close(state(T0 + 11, RunStatus.FAILED, failed))
    lines = out.getvalue().splitlines()
    assert lines[0] == "2027-01-15T08:00:00Z [job 000] starting  0/100,000 (0%)"
    assert lines[1] == "2027-01-15T08:00:00Z [system] no GPU telemetry: NVML library not found"
    assert (
        lines[2]
        == "2027-01-15T08:00:02Z [job 000] starting -> running  rollout  2,048/100,000 (2%)  5,120 sps  rew 22.5"
    )
    assert "08:00:05Z" not in out.getvalue()  # no periodic line before 10 s
    assert lines[3].startswith("2027-01-15T08:00:11Z [job 000] running -> failed  4,096/100,000 (4%)  restarts 3")
    assert lines[3].endswith("error: RuntimeError: boom")
    assert lines[-3] == "run failed: 1 failed (1 jobs, 11 s)"
    assert lines[-2] == "  job 000 (seed 0) failed at 4,096/100,000 steps: RuntimeError: boom"
    assert lines[-1] == "run log: runs/x/run.toml"


def test_the_table_fits_80_columns_without_truncating() -> None:
    out = io.StringIO()
    rows = [job(f"{i:03d}", "running", 525_312, phase="rollout", sps=12_046.0, ep_rew_mean=-123.4, cpu_percent=101.0,
                restarts=2) for i in range(3)]  # fmt: skip
    console = Console(file=out, width=80)
    console.print(jobs_table(state(T0, RunStatus.RUNNING, *rows), width=80))
    text = out.getvalue()
    assert "…" not in text and "525k/100k" in text and "12k" in text and "-123.4" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_live_advice_is_printed_when_what_it_suggests_changes() -> None:
    out = io.StringIO()
    view = HeadlessView(Console(file=out, width=300), every_s=1000.0)

    def advised(now: float, suggested: str, reason: str) -> RunState:
        item = Advice("n_envs", "8", suggested, "~+24% SPS per job", reason)
        return replace(state(now, RunStatus.RUNNING), suggestions=(item,))

    view.update(advised(T0, "32", "measured here: 410 us"))
    view.update(advised(T0 + 10, "32", "measured here: 398 us"))  # same change, new numbers: not again
    view.update(advised(T0 + 20, "16", "measured here: 398 us"))
    lines = [line for line in out.getvalue().splitlines() if "advice" in line]
    assert lines == [
        "[cockpit] advice: n_envs: 8 -> 32. ~+24% SPS per job (measured here: 410 us)",
        "[cockpit] advice: n_envs: 8 -> 16. ~+24% SPS per job (measured here: 398 us)",
    ]


def test_the_etas_are_shown_in_the_table_the_lines_and_the_run_line() -> None:
    running = job("000", "running", 40_000, phase="train", sps=34.1, eta_s=1758.0, rollout_sps=204.8)
    live = replace(state(T0 + 20, RunStatus.RUNNING, running, job("001", "queued", 0)), eta_s=4690.0)
    out = io.StringIO()
    console = Console(file=out, width=80)
    console.print(jobs_table(live, width=80))
    text = out.getvalue()
    assert "ETA" in text and "29m18s" in text and "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    out = io.StringIO()
    view = HeadlessView(Console(file=out, width=200), every_s=10.0)
    view.update(live)
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("[job 000] running  train    40,000/100,000 (40%)  34 sps  eta 29m18s")
    assert "2027-01-15T08:00:20Z [run] 34 sps  eta 1h18m" in lines


def test_a_fleet_agents_lines_name_the_preset_given_and_its_overrides() -> None:
    out = io.StringIO()
    view = HeadlessView(Console(file=out, width=200), every_s=10.0)
    agent = job("001", "running", 2048, preset="cartpole", overrides=(("learning_rate", "0.001"),))
    view.update(state(T0, RunStatus.RUNNING, job("000", "running", 1024), agent))
    lines = out.getvalue().splitlines()
    assert lines[0] == "2027-01-15T08:00:00Z [job 000] running  1,024/100,000 (1%)"  # the run's own: no preset
    assert lines[1] == "2027-01-15T08:00:00Z [job 001] running  cartpole learning_rate=0.001  2,048/100,000 (2%)"
