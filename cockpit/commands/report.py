"""`cockpit report RUN_DIR`: a readable summary of a finished or live run from its run log."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from cockpit.commands.console import output_console
from cockpit.contract.events import EVENTS_FILE, read_events
from cockpit.contract.runspec import ConfigError
from cockpit.core.runlog import open_run_log


def load(run_dir: Path) -> dict[str, Any]:
    """The run log of `run_dir`; ConfigError (one line) if it is missing or unreadable."""
    try:
        return open_run_log(run_dir)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def _live_steps(run_dir: Path, job_id: str) -> int | None:
    """The newest step count in a job's events (fresher than run.toml while the run is live)."""
    steps = None
    for event in read_events(run_dir / "jobs" / job_id / EVENTS_FILE):
        if event["kind"] in ("phase", "progress"):
            steps = int(event["num_timesteps"])
        elif event["kind"] == "finished":
            steps = int(event["steps"])
    return steps


def _fmt(value: Any, spec: str = "{:,.1f}") -> str:
    return "-" if value is None else spec.format(value)


def print_report(run_dir: Path, console: Console | None = None) -> None:
    """Print the run's config, host, GPU, per-job results and utilization by phase."""
    console = console or output_console()
    log = load(run_dir)
    cfg, host, gpu, util = log.get("config", {}), log.get("host", {}), log.get("gpu", {}), log.get("utilization", {})
    live = log.get("status") in ("running", "stopping")
    console.print(f"[bold]{run_dir}[/]  status [bold]{log.get('status')}[/]  {log.get('command', '')}")
    duration = _fmt(log.get("duration_s"), "{:,.0f}")
    console.print(f"started {log.get('started_at')}  ended {log.get('ended_at', '-')}  duration {duration} s")
    console.print(
        f"{cfg.get('agents')} agents, {cfg.get('jobs')} at a time, preset {cfg.get('preset')} on {cfg.get('env')}, "
        f"{_fmt(cfg.get('timesteps'), '{:,}')} steps each"
    )
    console.print(
        f"host {host.get('hostname')}: {host.get('cpu_model')}, {host.get('physical_cores')} cores "
        f"({host.get('logical_cores')} threads), {host.get('ram_gib')} GiB, {host.get('os')}"
    )
    gpu_text = (
        f"{gpu.get('name')}, {gpu.get('memory_total_mib')} MiB, driver {gpu.get('driver')}"
        if gpu.get("present")
        else gpu.get("telemetry", "none")
    )
    console.print(f"GPU: {gpu_text}")
    table = Table(title="jobs" + (" (live: steps from the event files)" if live else ""), title_justify="left")
    for col in ("job", "seed", "status", "steps", "mean SPS", "ep_rew_mean", "restarts", "ckpts", "CPU %",
                "GPU % rollout", "GPU % train", "peak GPU MiB", "reason"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("job", "status", "reason") else "right")
    for job in log.get("jobs", []):
        steps = _live_steps(run_dir, job["id"]) if live else job.get("steps")
        phases = job.get("phases", {})
        table.add_row(
            job["id"], str(job.get("seed")), job.get("status", "?"),
            f"{_fmt(steps, '{:,}')}/{_fmt(job.get('target'), '{:,}')}", _fmt(job.get("mean_sps"), "{:,.0f}"),
            _fmt(job.get("final_ep_rew_mean")), str(job.get("restarts", 0)), str(job.get("checkpoints", 0)),
            _fmt(job.get("cpu_percent_mean"), "{:.0f}"),
            _fmt(phases.get("rollout", {}).get("gpu_util_mean"), "{:.0f}"),
            _fmt(phases.get("train", {}).get("gpu_util_mean"), "{:.0f}"),
            _fmt(job.get("peak_gpu_mem_mib"), "{:,}"), job.get("error") or job.get("exit_reason", ""),
        )  # fmt: skip
    console.print(table)
    if util.get("gpu_util_mean") is not None:
        console.print(
            f"GPU utilization: mean {_fmt(util.get('gpu_util_mean'))}%, p50 {_fmt(util.get('gpu_util_p50'))}%, "
            f"p95 {_fmt(util.get('gpu_util_p95'))}%; while any job trains {_fmt(util.get('gpu_util_while_training'))}%,"
            f" otherwise {_fmt(util.get('gpu_util_while_not_training'))}%"
        )
    if util.get("train_share") is not None:
        console.print(f"time with at least one job training: {util['train_share']:.0%}")
    for warning in log.get("warnings", []):
        console.print(f"[yellow]warning:[/] {warning}")


def main(run_dir: Path) -> int:
    """`cockpit report` on stdout; returns the exit code (2 with one line for no readable run)."""
    try:
        print_report(run_dir)
    except ConfigError as exc:
        print(f"cockpit report: error: {exc}", file=sys.stderr)
        return 2
    return 0
