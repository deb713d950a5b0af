"""The plotted report as one self-contained HTML page (`cockpit report RUN_DIR --html OUT.html`).

The page opens offline and references nothing outside itself: the figures are PNGs inlined as
`data:` URIs, the style is one inline `<style>` block in the browser's own fonts, and there is no
script. Every text taken from the run (a command line, a warning, an agent's overrides) is escaped.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

from cockpit.commands import leaderboard, searchreport
from cockpit.commands.plots import SEARCH_FIGURES, Plot
from cockpit.commands.searchreport import SearchAnalysis
from cockpit.contract.runrecord import RunRecord
from cockpit.core.feed.snapshot import preset_label
from cockpit.core.fleet.report import STATUSES, FleetSummary
from cockpit.core.machine.util_reading import BUSY_LEGEND, gpu_read_lines
from cockpit.core.record.series import RunSeries
from cockpit.core.telemetry.memwatch import NO_GROWTH

LEADERS_LISTED = 20  # leaderboard rows in the page's table
DRAWS_LISTED = 50  # rows of a search's score-against-cost table
FAILED_LISTED = 20  # failed agents named with their errors

STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1240px; color: #222; padding: 0 12px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin: 28px 0 6px; }
p.meta { color: #555; margin: 2px 0; } code { font-size: 13px; }
figure { margin: 12px 0 24px; } figure img { width: 100%; height: auto; border: 1px solid #ddd; }
figcaption { color: #555; font-size: 13px; margin-top: 4px; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0 12px; }
th, td { border-bottom: 1px solid #e3e3e3; padding: 3px 10px 3px 0; text-align: right; vertical-align: top; }
th { color: #555; font-weight: 600; } td.l, th.l { text-align: left; }
ul.warnings li { color: #8a5a00; } .bad { color: #b00020; }
"""


def _cell(value: Any, spec: str = "{:,.1f}") -> str:
    """A table cell's text: '-' for an unknown figure, numbers formatted by `spec`."""
    if value is None:
        return "-"
    if isinstance(value, float | int) and not isinstance(value, bool):
        return spec.format(value)
    return str(value)


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], left: Iterable[str] = ()) -> str:
    """An HTML table of already formatted cells (escaped here); columns in `left` align left."""
    lefts = set(left)
    cls = [' class="l"' if h in lefts else "" for h in headers]
    head = "".join(f"<th{c}>{escape(h)}</th>" for h, c in zip(headers, cls, strict=True))
    body = "".join(
        "<tr>" + "".join(f"<td{c}>{escape(v)}</td>" for v, c in zip(row, cls, strict=True)) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _pairs(items: Iterable[tuple[str, Any]]) -> str:
    """A two-column table of settings: name, value."""
    return _table(
        ("setting", "value"), ((k, _cell(v, "{}")) for k, v in items if v is not None), left=("setting", "value")
    )


def _figure(plot: Plot) -> str:
    data = base64.b64encode(plot.png).decode("ascii")
    return (
        f'<figure id="{escape(plot.name)}"><h2>{escape(plot.title)}</h2>'
        f'<img alt="{escape(plot.title)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{escape(plot.caption)}</figcaption></figure>"
    )


def _summary(record: RunRecord) -> str:
    """The run's header: where, what, when, and its utilization and memory in a sentence each."""
    cfg = record.config
    lines = [
        f"status <b>{escape(str(record.status))}</b>, started {escape(record.started_at)}, ended "
        f"{escape(record.ended_at or '-')}, duration {record.duration_s:,.0f} s"
    ]
    if cfg.script is not None:
        lines.append(
            f"{cfg.agents} agents, {cfg.jobs} at a time, each running <code>{escape(' '.join(cfg.script))}</code>"
        )
    else:
        each = f"{cfg.episodes:,} episodes" if cfg.episodes is not None else f"{cfg.timesteps:,} steps"
        lines.append(
            f"{cfg.agents} agents, {cfg.jobs} at a time, preset {escape(cfg.preset)} on {escape(cfg.env)}, {each} each"
        )
    lines.append(f"<code>{escape(record.command)}</code>")
    util = record.utilization
    if util is not None and util.gpu_util_mean is not None:
        lines.append(
            f"GPU busy (any kernel): mean {_cell(util.gpu_util_mean)}%, p50 {_cell(util.gpu_util_p50)}%, p95 "
            f"{_cell(util.gpu_util_p95)}%; while any job trains {_cell(util.gpu_util_while_training)}%, "
            f"otherwise {_cell(util.gpu_util_while_not_training)}%"
        )
    if util is not None and util.train_share is not None:
        lines.append(f"time with at least one job training: {util.train_share:.0%}")
    read = gpu_read_lines(record.gpus)
    if read or (util is not None and util.gpu_util_mean is not None):
        lines.append(escape(BUSY_LEGEND))
    lines += [escape(line) for line in read]
    growing = [
        job for job in record.jobs if job.memory_growth_mib_h is not None or job.gpu_memory_growth_mib_h is not None
    ]
    judged = sum(1 for job in record.jobs if job.memory == NO_GROWTH)
    lines += [f'<span class="bad">memory: job {escape(job.id)}: {escape(job.memory or "")}</span>' for job in growing]
    if judged and not growing:
        lines.append(f"memory: no growth ({judged} job(s) watched long enough to judge)")
    return "".join(f'<p class="meta">{line}</p>' for line in lines)


def _jobs(record: RunRecord) -> str:
    # A preset column only where jobs have their own (a fleet's agents): a plain run's is in the header.
    presets = any(job.preset is not None for job in record.jobs)
    headers = (
        "job",
        "seed",
        *(("preset",) if presets else ()),
        "status",
        "steps",
        "target",
        "mean SPS",
        "ep_rew_mean",
        "restarts",
        "CPU %",
        "peak RSS MiB",
        "GPU busy % rollout",
        "GPU busy % train",
        "peak GPU MiB",
        "SM % mean",
        "memory",
        "reason",
    )
    rows = []
    for job in record.jobs:
        rollout, train = job.phases.get("rollout"), job.phases.get("train")
        target = f"{job.target_episodes:,} episodes" if job.target_episodes is not None else _cell(job.target, "{:,}")
        preset = (preset_label(job.preset or record.config.preset, job.overrides.items()),) if presets else ()
        rows.append(
            (
                job.id,
                str(job.seed),
                *preset,
                str(job.status),
                _cell(job.steps, "{:,}"),
                target,
                _cell(job.mean_sps, "{:,.0f}"),
                _cell(job.final_ep_rew_mean),
                str(job.restarts),
                _cell(job.cpu_percent_mean, "{:.0f}"),
                _cell(job.peak_rss_mib, "{:,.0f}"),
                _cell(rollout.gpu_util_mean if rollout else None, "{:.0f}"),
                _cell(train.gpu_util_mean if train else None, "{:.0f}"),
                _cell(job.peak_gpu_mem_mib, "{:,}"),
                _cell(job.gpu_sm_percent_mean, "{:.0f}"),
                job.memory or "-",
                job.error or job.exit_reason or "",
            )
        )
    return "<h2>Jobs</h2>" + _table(headers, rows, left=("job", "preset", "status", "memory", "reason"))


def _fleet(fleet: FleetSummary, plots: Sequence[Plot]) -> str:
    rate = f", ${fleet.rate_usd_per_h:g}/h" if fleet.rate_usd_per_h is not None else ""
    by_status = ", ".join(f"{n:,} {status}" for status in STATUSES if (n := fleet.count(status)))
    counts = f"{len(fleet.agents):,} agents, {fleet.promotion} promotion, {len(fleet.tiers)} tier(s){rate}"
    parts = [
        f"<h2>Fleet {escape(fleet.name)}</h2>",
        f'<p class="meta">plan {escape(fleet.source)}: {escape(counts)}; agents: {escape(by_status or "none")}</p>',
    ]
    unit = "episodes" if any(t.episodes is not None for t in fleet.tiers) else "timesteps"
    columns = ("tier", unit, "planned", "entered", "training", "finished", "promoted", "culled", "failed")
    tiers = [
        (
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
        for t in fleet.tiers
    ]
    parts.append(_table(columns, ([f"{n:,}" for n in tier] for tier in tiers)))
    parts += [_figure(plot) for plot in plots]
    leaders = fleet.leaderboard[:LEADERS_LISTED]
    if leaders:
        parts.append(f"<h2>Leaderboard (top {len(leaders)} of {len(fleet.leaderboard):,} scored)</h2>")
        # pbt: every checkpoint the agent copied, oldest first ("a0006@t0, a0008@t4": whose, at which tier's end).
        pbt = fleet.promotion == "pbt"
        rows = (leaderboard.cells(a, pbt, every_copy=True) for a in leaders)
        parts.append(_table(leaderboard.columns(pbt), rows, left=tuple(leaderboard.LEFT)))
    failed = [agent for agent in fleet.agents if agent.status == "failed"]
    parts += [
        f'<p class="bad">failed: {escape(a.id)} in tier {a.tier}: {escape(a.error or "no error recorded")}</p>'
        for a in failed[:FAILED_LISTED]
    ]
    if len(failed) > FAILED_LISTED:
        parts.append(f'<p class="bad">failed: {len(failed) - FAILED_LISTED:,} more (report --json lists them)</p>')
    models = fleet.models
    if models.verified:
        line = (
            f"models: {len(models.entries):,} collected, checksums verified"
            if models.entries
            else "models: none collected yet (the agents that finish the last tier are)"
        )
        parts.append(f'<p class="meta">{line}</p>')
    else:
        parts.append(
            f'<p class="bad">models: {len(models.entries):,} collected, {len(models.problems):,} problem(s):</p>'
        )
        parts += [f'<p class="bad">{escape(problem)}</p>' for problem in models.problems]
    return "".join(parts)


def _search(analysis: SearchAnalysis, plots: Sequence[Plot]) -> str:
    """A search fleet's analysis (`searchreport`): the importance table (or why there is none), the
    parallel coordinates and the Pareto front's figures, and the score-against-cost table."""
    parts = ['<section id="search"><h2>Search</h2>', f'<p class="meta">{escape(searchreport.summary(analysis))}</p>']
    if analysis.importance_note is not None:
        parts.append(f'<p class="meta">{escape(analysis.importance_note)}</p>')
    else:
        parts.append(f'<p class="meta">{escape(searchreport.importance_title(analysis))}</p>')
        parts.append(
            _table(("key", "importance"), ((key, f"{share:.2f}") for key, share in analysis.importance), left=("key",))
        )
    parts += [_figure(plot) for plot in plots]
    shown = searchreport.listed(analysis, DRAWS_LISTED)
    if shown:
        parts.append(f'<p class="meta">{escape(searchreport.front_title(analysis))}</p>')
        parts.append(_table(searchreport.COLUMNS, map(searchreport.cells, shown), left=tuple(searchreport.LEFT)))
    if len(analysis.scored) > len(shown):
        parts.append(
            f'<p class="meta">{len(analysis.scored) - len(shown):,} more scored draws (report --json lists them)</p>'
        )
    return "".join([*parts, "</section>"])


def _settings(record: RunRecord) -> str:
    cfg, host, gpu = record.config, record.host, record.gpu
    parts = ["<h2>Settings</h2>", _pairs((f.name, getattr(cfg, f.name)) for f in dataclasses.fields(cfg))]
    if record.preset is not None:
        preset = record.preset
        parts.append(f"<h3>preset {escape(preset.name)}</h3>")
        parts.append(
            _pairs((f.name, getattr(preset, f.name)) for f in dataclasses.fields(preset) if f.name not in ("name",))
        )
    gpu_text = "none recorded"
    if gpu is not None:
        gpu_text = f"{gpu.name}, {gpu.memory_total_mib:,} MiB, driver {gpu.driver}" if gpu.present else gpu.telemetry
    parts.append("<h3>machine</h3>")
    parts.append(
        _pairs(
            [
                ("host", host.hostname),
                ("CPU", host.cpu_model),
                ("cores", f"{host.physical_cores} physical, {host.logical_cores} logical"),
                ("RAM", f"{host.ram_gib} GiB"),
                ("OS", host.os),
                ("GPU", gpu_text),
            ]
        )
    )
    return "".join(parts)


def _advice(record: RunRecord) -> str:
    if not record.advice:
        return '<h2>Advice</h2><p class="meta">none applied during the run (no --auto decisions or applied advice)</p>'
    rows = []
    for item in record.advice:
        if item.setting is not None:
            change = f"{item.setting} -> {item.suggested}"
        else:
            change = f"jobs {_cell(item.jobs_before, '{}')} -> {_cell(item.jobs_after, '{}')}"
        sps = f"{_cell(item.sps_before, '{:,.0f}')} -> {_cell(item.sps_after, '{:,.0f}')}"
        rows.append((item.at, item.action, change, sps, item.reason or ""))
    return "<h2>Advice</h2>" + _table(
        ("at", "action", "change", "SPS", "why"), rows, left=("at", "action", "change", "why")
    )


def page(series: RunSeries, plots: Sequence[Plot]) -> str:
    """The whole report page for `series` with its rendered `plots` (`cockpit.commands.plots.plots`):
    the header, warnings, the run's figures, the jobs, a fleet's section with its figures, a search
    fleet's analysis with its own, then the settings and the advice the run applied."""
    record = series.record
    title = f"cockpit report: {record.name or series.run_dir.name}"
    run_plots = [plot for plot in plots if not plot.fleet]
    fleet_plots = [plot for plot in plots if plot.fleet and plot.name not in SEARCH_FIGURES]
    search_plots = [plot for plot in plots if plot.name in SEARCH_FIGURES]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="meta"><code>{escape(str(series.run_dir))}</code></p>',
        _summary(record),
    ]
    if record.warnings:
        parts.append('<h2>Warnings</h2><ul class="warnings">')
        parts += [f"<li>{escape(warning)}</li>" for warning in record.warnings]
        parts.append("</ul>")
    parts += [_figure(plot) for plot in run_plots]
    parts.append(_jobs(record))
    if series.fleet is not None:
        parts.append(_fleet(series.fleet.summary, fleet_plots))
        if series.fleet.analysis is not None:
            parts.append(_search(series.fleet.analysis, search_plots))
    parts += [_settings(record), _advice(record), "</body></html>", ""]
    return "\n".join(parts)
