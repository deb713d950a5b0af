"""`cockpit report RUN_DIR`: a readable summary of a finished or live run from its run log."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from cockpit.commands.console import output_console
from cockpit.contract.events import FinishedEvent, PhaseEvent, ProgressEvent, read_events
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import RunRecord, RunRecordError, read
from cockpit.contract.runspec import ConfigError


def load(run_dir: Path) -> RunRecord:
    """The run record of `run_dir`; ConfigError (one line) if it is missing, unreadable or from
    a newer cockpit."""
    try:
        return read(run_dir)
    except RunRecordError as exc:
        raise ConfigError(str(exc)) from exc


def _live_steps(run_dir: Path, job_id: str) -> int | None:
    """The newest step count in a job's events (fresher than run.toml while the run is live)."""
    steps = None
    for event in read_events(RunDir(run_dir).job(job_id).events):
        if isinstance(event, (PhaseEvent, ProgressEvent)):
            steps = event.num_timesteps
        elif isinstance(event, FinishedEvent):
            steps = event.steps
    return steps


def _fmt(value: Any, spec: str = "{:,.1f}") -> str:
    return "-" if value is None else spec.format(value)


def print_report(run_dir: Path, console: Console | None = None) -> None:
    """Print the run's config, host, GPU, per-job results and utilization by phase; ConfigError
    (one line) when `run_dir` holds no readable run.toml."""
    console = console or output_console()
    log = load(run_dir)
    cfg, host, gpu, util = log.config, log.host, log.gpu, log.utilization
    live = log.status.live
    console.print(f"[bold]{run_dir}[/]  status [bold]{log.status}[/]  {log.command}")
    duration = _fmt(log.duration_s, "{:,.0f}")
    console.print(f"started {log.started_at}  ended {log.ended_at or '-'}  duration {duration} s")
    console.print(
        f"{cfg.agents} agents, {cfg.jobs} at a time, preset {cfg.preset} on {cfg.env}, "
        f"{_fmt(cfg.timesteps, '{:,}')} steps each"
    )
    console.print(
        f"host {host.hostname}: {host.cpu_model}, {host.physical_cores} cores "
        f"({host.logical_cores} threads), {host.ram_gib} GiB, {host.os}"
    )
    if gpu is None:
        gpu_text = "none"
    elif gpu.present:
        gpu_text = f"{gpu.name}, {gpu.memory_total_mib} MiB, driver {gpu.driver}"
    else:
        gpu_text = gpu.telemetry
    console.print(f"GPU: {gpu_text}")
    table = Table(title="jobs" + (" (live: steps from the event files)" if live else ""), title_justify="left")
    for col in ("job", "seed", "status", "steps", "mean SPS", "ep_rew_mean", "restarts", "ckpts", "CPU %",
                "GPU % rollout", "GPU % train", "peak GPU MiB", "reason"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("job", "status", "reason") else "right")
    for job in log.jobs:
        steps = _live_steps(run_dir, job.id) if live else job.steps
        rollout, train = job.phases.get("rollout"), job.phases.get("train")
        table.add_row(
            job.id, str(job.seed), str(job.status),
            f"{_fmt(steps, '{:,}')}/{_fmt(job.target, '{:,}')}", _fmt(job.mean_sps, "{:,.0f}"),
            _fmt(job.final_ep_rew_mean), str(job.restarts), str(job.checkpoints),
            _fmt(job.cpu_percent_mean, "{:.0f}"),
            _fmt(rollout.gpu_util_mean if rollout else None, "{:.0f}"),
            _fmt(train.gpu_util_mean if train else None, "{:.0f}"),
            _fmt(job.peak_gpu_mem_mib, "{:,}"), job.error or job.exit_reason or "",
        )  # fmt: skip
    console.print(table)
    if util is not None and util.gpu_util_mean is not None:
        console.print(
            f"GPU utilization: mean {_fmt(util.gpu_util_mean)}%, p50 {_fmt(util.gpu_util_p50)}%, "
            f"p95 {_fmt(util.gpu_util_p95)}%; while any job trains {_fmt(util.gpu_util_while_training)}%,"
            f" otherwise {_fmt(util.gpu_util_while_not_training)}%"
        )
    if util is not None and util.train_share is not None:
        console.print(f"time with at least one job training: {util.train_share:.0%}")
    for warning in log.warnings:
        console.print(f"[yellow]warning:[/] {warning}")


def main(run_dir: Path) -> int:
    """`cockpit report` on stdout; returns the exit code (2 with one line for no readable run)."""
    try:
        print_report(run_dir)
    except ConfigError as exc:
        print(f"cockpit report: error: {exc}", file=sys.stderr)
        return 2
    return 0
