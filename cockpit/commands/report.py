"""`cockpit report RUN_DIR`: a readable summary of a finished or live run from its run log, or
(`--json`) the run as one JSON object for scripts and monitors."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from cockpit.commands.console import output_console
from cockpit.contract.events import FinishedEvent, PhaseEvent, ProgressEvent, read_events
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import RunRecord, RunRecordError, iso, read
from cockpit.contract.runspec import ConfigError
from cockpit.core.feed import Replay, SourceError
from cockpit.core.runs import open_run
from cockpit.core.state import RunState


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


def main(run_dir: Path, *, as_json: bool = False) -> int:
    """`cockpit report` on stdout, as tables or (`as_json`) as one JSON object; returns the exit
    code (2 with one line for no readable run)."""
    try:
        if as_json:
            print(json.dumps(json_report(run_dir), indent=2))
        else:
            print_report(run_dir)
    except ConfigError as exc:
        print(f"cockpit report: error: {exc}", file=sys.stderr)
        return 2
    return 0


# ----- report --json -----

JSON_SCHEMA_VERSION = 1
FIRST_FRAME_WAIT_S = 5.0


def json_report(run_dir: Path) -> dict[str, Any]:
    """The run as `report --json` prints it (schema: docs/report.schema.json, documented in
    docs/report-json.md): from the run's control socket while it is live, else from its files.
    ConfigError (one line) when `run_dir` is no run."""
    try:
        source = open_run(run_dir)
    except SourceError as exc:
        raise ConfigError(str(exc)) from exc
    try:
        frame = source.frame()
        deadline = time.monotonic() + FIRST_FRAME_WAIT_S
        while frame is None and time.monotonic() < deadline:  # attached before the run's first tick
            time.sleep(0.05)
            frame = source.frame()
        if frame is None:
            raise ConfigError(f"{run_dir}: the run answered but sent no state within {FIRST_FRAME_WAIT_S:.0f} s")
        live = not isinstance(source, Replay)
    finally:
        source.close()
    try:
        command = read(run_dir).command
    except RunRecordError:
        command = ""  # a live run that has not written its first run.toml yet
    return state_json(frame.state, live=live, command=command)


def state_json(state: RunState, *, live: bool, command: str) -> dict[str, Any]:
    """`state` in report --json's schema (see `json_report`)."""
    counts: dict[str, int] = {}
    for job in state.jobs:
        counts[job.state.value] = counts.get(job.state.value, 0) + 1
    rates = [job.sps for job in state.jobs if job.sps is not None and job.state.stepping]
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "run_dir": state.run_dir,
        "live": live,
        "status": state.status.value,
        "command": command,
        "preset": state.preset,
        "env": state.env,
        "slots": state.slots,
        "agents": len(state.jobs),
        "started_at": iso(state.started_at),
        "now": iso(state.now),
        "sps": _round(sum(rates)) if rates else None,
        "eta_s": _round(state.eta_s),
        "counts": counts,
        "jobs": [
            {
                "id": job.id,
                "seed": job.seed,
                "state": job.state.value,
                "steps": job.steps,
                "target": job.target,
                "sps": _round(job.sps) if job.state.stepping else None,
                "mean_sps": _round(job.mean_sps),
                "eta_s": _round(job.eta_s),
                "ep_rew_mean": job.ep_rew_mean,
                "restarts": job.restarts,
                "error": job.error,
                "reason": job.exit_reason,
            }
            for job in state.jobs
        ],
        "warnings": list(state.warnings),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
