"""`cockpit report RUN_DIR`: a readable summary of a finished or live run from its run log, or
(`--json`) the run as one JSON object for scripts and monitors.

A fleet's run dir (`cockpit fleet`) also has its fleet reported from `fleet.db` and
`models/models.toml` (`cockpit.core.fleet.report`): the tiers, the leaderboard, every agent and the
collected models, whose checksums are verified; a search fleet's draws are analysed too
(`cockpit.core.fleet.analysis`: each key's importance, and score against cost with the Pareto
front). When a model fails its check, the whole report is still printed, and the command exits 1
with one line on stderr naming the files.

What is read and assembled, the JSON object included, is `cockpit.core.record.run_report`'s; this
command prints it.

`--html OUT.html` writes the report with plots instead, as one self-contained page
(`cockpit.commands.htmlreport`), and `--png DIR` writes each figure as `DIR/<name>.png`
(`cockpit.commands.plots`, matplotlib; both imported only then, so the text report does not pay
for matplotlib)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cockpit.commands import leaderboard, searchreport
from cockpit.commands.console import output_console
from cockpit.commands.searchreport import SearchAnalysis
from cockpit.contract.files import write_atomic
from cockpit.contract.runspec import ConfigError
from cockpit.core.feed.snapshot import preset_label
from cockpit.core.fleet.report import STATUSES, FleetSummary
from cockpit.core.machine.util_reading import BUSY_LEGEND, gpu_read_lines
from cockpit.core.record.run_report import (
    json_report,
    live_steps,
    plot_series,
    read_fleet,
    read_record,
    search_analysis,
)
from cockpit.core.telemetry.memwatch import NO_GROWTH
from cockpit.formatting import short


def _fmt(value: Any, spec: str = "{:,.1f}") -> str:
    return "-" if value is None else spec.format(value)


def print_report(run_dir: Path, console: Console | None = None) -> FleetSummary | None:
    """Print the run's config, host, GPU, per-job results and utilization by phase, and for a fleet
    its tiers, leaderboard and models (`print_fleet`); returns the fleet (None for an ordinary run).
    ConfigError (one line), before anything is printed, when `run_dir` holds no readable run.toml
    or an unreadable fleet.db."""
    console = console or output_console()
    log = read_record(run_dir)
    fleet = read_fleet(run_dir)
    cfg, host, gpu, util = log.config, log.host, log.gpu, log.utilization
    live = log.status.live
    named = f"  name [bold]{escape(log.name)}[/]" if log.name is not None else ""
    console.print(f"[bold]{run_dir}[/]{named}  status [bold]{log.status}[/]  {log.command}")
    duration = _fmt(log.duration_s, "{:,.0f}")
    console.print(f"started {log.started_at}  ended {log.ended_at or '-'}  duration {duration} s")
    if cfg.script is not None:
        console.print(f"{cfg.agents} agents, {cfg.jobs} at a time, each running: {escape(' '.join(cfg.script))}")
    else:
        each = f"{cfg.episodes:,} episodes" if cfg.episodes is not None else f"{_fmt(cfg.timesteps, '{:,}')} steps"
        console.print(f"{cfg.agents} agents, {cfg.jobs} at a time, preset {cfg.preset} on {cfg.env}, {each} each")
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
    # A preset column only where jobs have their own (a fleet's agents): a plain run's is in the header.
    presets = any(job.preset is not None for job in log.jobs)
    for col in (
        "job",
        "seed",
        *(("preset",) if presets else ()),
        "status",
        "steps",
        "mean SPS",
        "ep_rew_mean",
        "restarts",
        "ckpts",
        "CPU %",
        "peak RSS MiB",
        "GPU busy % rollout",
        "GPU busy % train",
        "peak GPU MiB",
        "SM % mean",
        "memory",
        "reason",
    ):
        table.add_column(col, justify="left" if col in ("job", "preset", "status", "memory", "reason") else "right")
    for job in log.jobs:
        preset = (escape(preset_label(job.preset or cfg.preset, tuple(job.overrides.items()))),) if presets else ()
        steps = live_steps(run_dir, job.id) if live else job.steps
        rollout, train = job.phases.get("rollout"), job.phases.get("train")
        progress = f"{_fmt(steps, '{:,}')}/{_fmt(job.target or None, '{:,}')}"
        if job.target_episodes is not None:  # an episode target: its episodes of target, and the steps they took
            progress = f"{_fmt(job.episodes, '{:,}')}/{job.target_episodes:,} ep, {_fmt(steps, '{:,}')}"
        table.add_row(
            job.id,
            str(job.seed),
            *preset,
            str(job.status),
            progress,
            _fmt(job.mean_sps, "{:,.0f}"),
            _fmt(job.final_ep_rew_mean),
            str(job.restarts),
            str(job.checkpoints),
            _fmt(job.cpu_percent_mean, "{:.0f}"),
            _fmt(job.peak_rss_mib, "{:,.0f}"),
            _fmt(rollout.gpu_util_mean if rollout else None, "{:.0f}"),
            _fmt(train.gpu_util_mean if train else None, "{:.0f}"),
            _fmt(job.peak_gpu_mem_mib, "{:,}"),
            _fmt(job.gpu_sm_percent_mean, "{:.0f}"),
            job.memory or "-",
            job.error or job.exit_reason or "",
        )
    console.print(table)
    # The leak watch's word on the run: the seeds' "Memory leaks: none detected", or who grows.
    growing = [
        job for job in log.jobs if job.memory_growth_mib_h is not None or job.gpu_memory_growth_mib_h is not None
    ]
    judged = sum(1 for job in log.jobs if job.memory == NO_GROWTH)
    for job in growing:
        console.print(f"[yellow]memory:[/] job {job.id}: {job.memory}", highlight=False)
    if judged and not growing:
        console.print(f"memory: no growth ({judged} job(s) watched long enough to judge)", highlight=False)
    if util is not None and util.gpu_util_mean is not None:
        console.print(
            f"GPU busy (any kernel): mean {_fmt(util.gpu_util_mean)}%, p50 {_fmt(util.gpu_util_p50)}%, "
            f"p95 {_fmt(util.gpu_util_p95)}%; while any job trains {_fmt(util.gpu_util_while_training)}%,"
            f" otherwise {_fmt(util.gpu_util_while_not_training)}%"
        )
    if util is not None and util.train_share is not None:
        console.print(f"time with at least one job training: {util.train_share:.0%}")
    read = gpu_read_lines(log.gpus)
    if read or (util is not None and util.gpu_util_mean is not None):
        console.print(BUSY_LEGEND, highlight=False)
    for line in read:
        console.print(line, highlight=False)
    for warning in log.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    if fleet is not None:
        print_fleet(fleet, console)
        analysis = search_analysis(fleet, log)
        if analysis is not None:
            print_search(analysis, console)
    return fleet


LEADERS = 10  # leaderboard rows in the text report (--json lists every agent with a score)
FAILED_LISTED = 10  # failed agents named with their errors in the text report
DRAWS_LISTED = 20  # draws in the score-against-cost table (--json lists every one)


def print_fleet(fleet: FleetSummary, console: Console) -> None:
    """The fleet's section of the text report: its plan, agents by status, tiers, top leaderboard,
    failed agents and the models line (each checksum problem on its own line)."""
    rate = f", ${fleet.rate_usd_per_h:g}/h" if fleet.rate_usd_per_h is not None else ""
    console.print(
        f"[bold]fleet {escape(fleet.name)}[/] ({escape(fleet.source)}): {len(fleet.agents):,} agents, "
        f"{fleet.promotion} promotion, {len(fleet.tiers)} tier(s){rate}",
        highlight=False,
    )
    by_status = ", ".join(f"{n:,} {status}" for status in STATUSES if (n := fleet.count(status)))
    console.print(f"agents: {by_status or 'none'}", highlight=False)
    tiers = Table(title="tiers", title_justify="left")
    unit = "episodes" if any(t.episodes is not None for t in fleet.tiers) else "timesteps"  # one unit a plan
    for col in ("tier", unit, "planned", "entered", "training", "finished", "promoted", "culled", "failed"):
        tiers.add_column(col, justify="right")
    for t in fleet.tiers:
        tiers.add_row(
            *(
                f"{n:,}"
                for n in (
                    t.tier,
                    t.episodes or t.timesteps or 0,
                    t.planned,
                    t.entered,
                    t.training,
                    t.finished,
                    t.promoted,
                    t.culled,
                    t.failed,
                )
            )
        )
    console.print(tiers)
    if fleet.leaderboard:
        shown = fleet.leaderboard[:LEADERS]
        board = Table(
            title=f"leaderboard (top {len(shown)} of {len(fleet.leaderboard):,} scored; the highest tier first)",
            title_justify="left",
        )
        pbt = fleet.promotion == "pbt"
        for col in leaderboard.columns(pbt):
            board.add_column(col, justify="left" if col in leaderboard.LEFT else "right")
        for leader in shown:
            board.add_row(*map(escape, leaderboard.cells(leader, pbt, every_copy=False)))
        console.print(board)
        winner = next((a for a in fleet.agents if a.id == shown[0].agent and a.schedule), None)
        if winner is not None:  # pbt: the values the best weights were trained with (report --json: everyone's)
            console.print(f"schedule of {winner.id} (--replay {winner.id} trains it again):", highlight=False)
            for step in winner.schedule:
                copied = f", resumed {step.copied_from}'s checkpoint" if step.copied_from else ""
                values = ", ".join(f"{k}={short(v)}" for k, v in step.values.items())
                console.print(f"  tier {step.tier}: {step.trained_by}{copied}: {escape(values)}", highlight=False)
    failed = [agent for agent in fleet.agents if agent.status == "failed"]
    for agent in failed[:FAILED_LISTED]:
        console.print(
            f"[red]failed:[/] {agent.id} in tier {agent.tier}: {escape(agent.error or 'no error recorded')}",
            highlight=False,
        )
    if len(failed) > FAILED_LISTED:
        console.print(f"[red]failed:[/] {len(failed) - FAILED_LISTED:,} more (report --json lists them)")
    models = fleet.models
    if models.verified and not models.entries:
        console.print("models: none collected yet (the agents that finish the last tier are)", highlight=False)
    elif models.verified:
        console.print(f"models: {len(models.entries):,} collected, checksums verified", highlight=False)
    else:
        console.print(
            f"[red]models: {len(models.entries):,} collected, {len(models.problems):,} problem(s):[/]", highlight=False
        )
        for problem in models.problems:
            console.print(f"  {problem}", style="red", highlight=False, markup=False)


def print_search(analysis: SearchAnalysis, console: Console) -> None:
    """A search fleet's analysis (`searchreport`): each key's importance, or the line saying why
    there is none, and its scored draws' score against cost, the Pareto front marked."""
    # No markup: a note may name `[agents.search]` or `cockpit[search]`, which rich would take for tags.
    console.print(searchreport.summary(analysis), highlight=False, markup=False)
    if analysis.importance_note is not None:
        console.print(analysis.importance_note, highlight=False, markup=False)
    else:
        console.print(searchreport.importance_title(analysis), highlight=False, markup=False)
        table = Table()
        for col in ("key", "importance", ""):
            table.add_column(col, justify="right" if col == "importance" else "left")
        for key, share in analysis.importance:
            table.add_row(escape(key), f"{share:.2f}", "█" * round(share * searchreport.BAR))
        console.print(table)
    shown = searchreport.listed(analysis, DRAWS_LISTED)
    if not shown:
        return
    console.print(searchreport.front_title(analysis), highlight=False, markup=False)
    table = Table()
    for col in searchreport.COLUMNS:
        table.add_column(col, justify="left" if col in searchreport.LEFT else "right")
    for point in shown:
        table.add_row(*map(escape, searchreport.cells(point)))
    console.print(table)
    if len(analysis.scored) > len(shown):
        console.print(f"{len(analysis.scored) - len(shown):,} more scored draws (report --json lists them)")


def check_outputs(html: Path | None, png_dir: Path | None, *, as_json: bool = False) -> None:
    """ConfigError (one line naming the flag and what would be valid) when `--html` or `--png` name
    a place the report cannot go, or come with `--json`; nothing is read or written before."""
    if as_json and (html is not None or png_dir is not None):
        raise ConfigError("--json prints the run as JSON; --html and --png write its plots: give one or the other")
    if html is not None:
        if html.is_dir():
            raise ConfigError(
                f"--html {html}: is a directory; give the page's file name, such as {html / 'report.html'}"
            )
        if not html.parent.is_dir():
            raise ConfigError(f"--html {html}: directory {html.parent} does not exist; create it or name another file")
    if png_dir is not None:
        if png_dir.exists() and not png_dir.is_dir():
            raise ConfigError(f"--png {png_dir}: not a directory; give a directory for the PNG files")
        if not png_dir.exists() and not png_dir.parent.is_dir():
            raise ConfigError(f"--png {png_dir}: directory {png_dir.parent} does not exist; create it or name another")


def write_plots(run_dir: Path, *, html: Path | None, png_dir: Path | None) -> list[str]:
    """Draw the run's figures and write them: the page to `html`, each figure to `png_dir/<name>.png`
    (the directory made if missing), every file atomically; prints a line per output and returns a
    fleet's model problems. ConfigError (one line) for no readable run, or a file that cannot be
    written."""
    from cockpit.commands.htmlreport import page
    from cockpit.commands.plots import plots

    series = plot_series(run_dir)
    figures = plots(series)
    flag = f"--html {html}"
    try:
        if html is not None:
            write_atomic(html, page(series, figures))
            print(f"wrote {html} ({len(figures)} figures)")
        if png_dir is not None:
            flag = f"--png {png_dir}"
            png_dir.mkdir(exist_ok=True)
            for figure in figures:
                write_atomic(png_dir / f"{figure.name}.png", figure.png)
            print(f"wrote {len(figures)} PNGs to {png_dir}: {', '.join(f'{f.name}.png' for f in figures)}")
    except OSError as exc:
        raise ConfigError(f"{flag}: cannot write: {exc.strerror or exc}") from exc
    return list(series.fleet.summary.models.problems) if series.fleet is not None else []


def main(run_dir: Path, *, as_json: bool = False, html: Path | None = None, png_dir: Path | None = None) -> int:
    """`cockpit report` on stdout, as tables or (`as_json`) as one JSON object, or (`html`,
    `png_dir`) as plots written to files; returns the exit code: 2 with one line for no readable
    run or a bad flag; 1, after the whole report and with one line on stderr, when a fleet's
    collected model is missing or fails its checksum."""
    try:
        check_outputs(html, png_dir, as_json=as_json)
        if html is not None or png_dir is not None:
            problems = write_plots(run_dir, html=html, png_dir=png_dir)
        elif as_json:
            report = json_report(run_dir)
            print(json.dumps(report, indent=2))
            problems = report["fleet"]["models"]["problems"] if report["fleet"] is not None else []
        else:
            fleet = print_report(run_dir)
            problems = list(fleet.models.problems) if fleet is not None else []
    except ConfigError as exc:
        print(f"cockpit report: error: {exc}", file=sys.stderr)
        return 2
    if problems:
        print(f"cockpit report: error: models failed verification: {'; '.join(problems)}", file=sys.stderr)
        return 1
    return 0
