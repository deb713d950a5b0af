"""The plotted report's figures: matplotlib on its Agg backend, from a run's series
(`cockpit.core.record.series`), each rendered to PNG bytes.

It sits in the commands layer, beside `report`, its one user: matplotlib is a renderer, as the rich
tables `report` prints are, and the views layer (headless, the TUI), above the commands, may not be
imported by them. It never imports pyplot, so no GUI backend is ever loaded: each `Figure` is drawn
by a `FigureCanvasAgg`.

Long series are cut to the figure's pixel width before they are drawn (`PIXELS` bins across the
time axis): a line gets each bin's mean, the GPU curve also its range (a burst shorter than a pixel
still shows), a phase lane each bin's share of time in rollout and in train, and the CPU heatmap
each bin's mean per core. A 1-hour run draws as fast as a 1-minute one.

Without a GPU the GPU plots say so (`NO_GPU`) instead of drawing zeros.
"""

from __future__ import annotations

import io
import json
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize, to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from cockpit.contract.runrecord import JobRecord
from cockpit.contract.searchspace import Distribution
from cockpit.core.feed.source import Transition
from cockpit.core.fleet.report import search_progress
from cockpit.core.record.series import FleetSeries, RunSeries

DPI = 100
WIDTH_IN = 12.0
PIXELS = int(WIDTH_IN * DPI)  # bins across a time axis: one per pixel column of the figure
NO_GPU = "no GPU: this run had no NVIDIA GPU to sample"
NO_GPU_SAMPLES = "no GPU samples recorded"
ROLLOUT_COLOR = "#9ecae1"
TRAIN_COLOR = "#d62728"
GPU_COLOR = "#2b2b2b"
LABELLED_JOBS = 12  # more jobs than this: no legend, thinner lines
LEADERS_DRAWN = 20  # leaderboard bars
HIGHLIGHTED = 5  # agents of the leaderboard's top drawn in colour in score vs steps
SEARCH_FIGURES = ("fleet_parallel", "fleet_pareto")  # a search fleet's: the page shows them with its analysis


@dataclass(frozen=True)
class Plot:
    """One rendered figure: `name` is its file's stem (`--png DIR` writes `DIR/<name>.png`); `fleet`
    marks a fleet's figures, which the page shows in the fleet's section."""

    name: str
    title: str
    caption: str
    png: bytes
    fleet: bool = False


# ----- binning to the pixel width -----


def bin_edges(start: float, end: float, bins: int = PIXELS) -> np.ndarray:
    """`bins + 1` equally spaced edges from `start` to `end` (at least a second apart)."""
    return np.linspace(start, max(end, start + 1.0), bins + 1)


def binned(x: Sequence[float], y: Sequence[float], edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each bin's mean, minimum and maximum of the `y` whose `x` falls in it (NaN for an empty bin);
    `x` need not be sorted. Points outside the edges are dropped."""
    n = len(edges) - 1
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    index = np.searchsorted(edges, xs, side="right") - 1
    index[xs == edges[-1]] = n - 1  # the last edge belongs to the last bin
    keep = (index >= 0) & (index < n)
    index, ys = index[keep], ys[keep]
    counts = np.bincount(index, minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(index, weights=ys, minlength=n) / counts
    low, high = np.full(n, np.inf), np.full(n, -np.inf)
    np.minimum.at(low, index, ys)
    np.maximum.at(high, index, ys)
    empty = counts == 0
    low[empty] = high[empty] = np.nan
    return mean, low, high


def phase_share(transitions: Sequence[Transition], phase: str, edges: np.ndarray) -> np.ndarray:
    """The share of each bin's time (0..1) that a job spent in `phase`. Exact at any bin width: the
    time spent in the phase up to `t` is piecewise linear between transitions, so its value at each
    edge is an interpolation, and a bin's share is the difference across it."""
    if len(transitions) < 2:
        return np.zeros(len(edges) - 1)
    times = np.array([t for t, _ in transitions], dtype=float)
    inside = np.array([p == phase for _, p in transitions], dtype=float)
    spent = np.concatenate([[0.0], np.cumsum(np.diff(times) * inside[:-1])])
    at_edges = np.interp(edges, times, spent)
    return np.clip(np.diff(at_edges) / np.diff(edges), 0.0, 1.0)


def thinned(x: Sequence[float], y: Sequence[float], bins: int = PIXELS // 2) -> tuple[np.ndarray, np.ndarray]:
    """A line of at most `bins` points: the series itself when it is that short, else each bin's
    mean over equal spans of `x` (empty bins dropped)."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(xs) <= bins:
        return xs, ys
    edges = bin_edges(float(xs.min()), float(xs.max()), bins)
    mean_y, _, _ = binned(xs, ys, edges)
    mean_x, _, _ = binned(xs, xs, edges)
    keep = ~np.isnan(mean_y)
    return mean_x[keep], mean_y[keep]


def time_unit(span_s: float) -> tuple[float, str]:
    """Seconds per unit and the unit's name for a time axis `span_s` long."""
    if span_s > 3 * 3600:
        return 3600.0, "h"
    if span_s > 600:
        return 60.0, "min"
    return 1.0, "s"


# ----- the figures -----


def _figure(height_in: float) -> Figure:
    fig = Figure(figsize=(WIDTH_IN, height_in), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)  # Agg draws it: no GUI backend, no display
    return fig


def _say(ax: Axes, text: str, *, narrow: bool = False) -> None:
    """An axis that holds a sentence instead of a plot (no GPU, nothing recorded); a `narrow` one
    (a third of the figure's width) gets it on short lines."""
    shown = textwrap.fill(text, 28) if narrow else text
    ax.text(
        0.5,
        0.5,
        shown,
        ha="center",
        va="center",
        fontsize=11 if narrow else 13,
        color="#555555",
        transform=ax.transAxes,
    )
    # Hidden, not removed: an axis that shares its x with the lanes must leave their ticks alone.
    ax.tick_params(bottom=False, left=False, labelbottom=False, labelleft=False)


def _job_ticks(ax: Axes, ids: Sequence[str]) -> None:
    """Job ids on a lane axis; every k-th one when there are too many to read."""
    step = max(1, math.ceil(len(ids) / 24))
    ax.set_yticks(range(0, len(ids), step), [ids[i] for i in range(0, len(ids), step)], fontsize=8)


def gpu_and_phases(series: RunSeries) -> Figure:
    """GPU utilization over time, with each job's rollout and train phases as lanes under it on the
    same time axis: the training bursts line up with the jobs that caused them."""
    jobs = series.jobs
    lanes_in = min(max(0.25 * len(jobs), 0.8), 7.0)
    fig = _figure(3.0 + lanes_in)
    grid = fig.add_gridspec(2, 1, height_ratios=[3.0, lanes_in])
    ax = fig.add_subplot(grid[0])
    lanes = fig.add_subplot(grid[1], sharex=ax)
    scale, unit = time_unit(series.end - series.start)
    edges = bin_edges(series.start, series.end)
    span = ((edges[0] - series.start) / scale, (edges[-1] - series.start) / scale)
    tel = series.telemetry
    ax.set_title("GPU busy (any kernel) and each job's phases")
    handles: list[Artist] = []
    if not series.has_gpu:
        _say(ax, NO_GPU)
    elif not tel.gpu_t:
        _say(ax, NO_GPU_SAMPLES)
    else:
        # Fewer readings than pixels (a short run): bins of about two readings, so that a gap in the
        # line is a gap in the readings, not a pixel that fell between two of them.
        gpu_edges = bin_edges(series.start, series.end, max(1, min(PIXELS, len(tel.gpu_t) // 2)))
        mean, low, high = binned(tel.gpu_t, tel.gpu_util, gpu_edges)
        at = ((gpu_edges[:-1] + gpu_edges[1:]) / 2 - series.start) / scale
        (line,) = ax.plot(at, mean, color=GPU_COLOR, linewidth=0.9, label="GPU: mean")
        spread = ax.fill_between(
            at, low, high, color="#bbbbbb", step="mid", linewidth=0, label="GPU: range within a pixel"
        )
        handles += [line, spread]
        ax.set_ylim(0, 105)
        ax.set_ylabel("GPU busy % (any kernel)")
        ax.tick_params(labelbottom=False)
    if not jobs:
        _say(lanes, "no jobs recorded")
    else:
        rollout, train = np.array(to_rgb(ROLLOUT_COLOR)), np.array(to_rgb(TRAIN_COLOR))
        image = np.ones((len(jobs), len(edges) - 1, 3))
        for row, job in enumerate(jobs):
            in_rollout = phase_share(job.phases, "rollout", edges)[:, None]
            in_train = phase_share(job.phases, "train", edges)[:, None]
            image[row] = 1.0 - in_rollout * (1.0 - rollout) - in_train * (1.0 - train)
        lanes.imshow(
            np.clip(image, 0.0, 1.0), aspect="auto", interpolation="nearest", extent=(*span, len(jobs) - 0.5, -0.5)
        )
        _job_ticks(lanes, [job.id for job in jobs])
        lanes.set_ylabel("job")
        handles += [Patch(color=ROLLOUT_COLOR, label="rollout"), Patch(color=TRAIN_COLOR, label="train")]
    lanes.set_xlim(*span)
    lanes.set_xlabel(f"time since the run started ({unit})")
    if handles:  # below the plots, where it hides no data
        fig.legend(handles=handles, loc="outside lower right", ncols=len(handles), fontsize=8, frameon=False)
    return fig


def _bars(ax: Axes, jobs: Sequence[JobRecord], value: str, ylabel: str) -> None:
    """Grouped bars per job: `value` of its rollout and of its train phase (a missing figure: no bar)."""
    x = np.arange(len(jobs))
    width = 0.4
    for offset, phase, color in ((-width / 2, "rollout", ROLLOUT_COLOR), (width / 2, "train", TRAIN_COLOR)):
        figures = [getattr(job.phases[phase], value) if phase in job.phases else None for job in jobs]
        shown = [(i, v) for i, v in zip(x, figures, strict=True) if v is not None]
        ax.bar([i + offset for i, _ in shown], [v for _, v in shown], width, color=color, label=phase)
    ax.set_ylabel(ylabel)
    _job_axis(ax, jobs)


def _job_axis(ax: Axes, jobs: Sequence[JobRecord]) -> None:
    """Job ids under a third of the figure's width: at most 8, so that a fleet's ids stay legible."""
    step = max(1, math.ceil(len(jobs) / 8))
    ax.set_xticks(range(0, len(jobs), step), [jobs[i].id for i in range(0, len(jobs), step)], fontsize=8)
    ax.set_xlabel("job")


def utilization_by_phase(series: RunSeries) -> Figure:
    """Per job: the GPU % and its process tree's CPU % in each phase, and its time in each phase
    (run.toml's phase accounting); the title has the share of time some job was training."""
    record = series.record
    jobs = [job for job in record.jobs if job.phases]
    fig = _figure(3.6)
    gpu_ax, cpu_ax, time_ax = fig.subplots(1, 3)
    util = record.utilization
    title = "utilization by phase"
    if util is not None and util.train_share is not None:
        title += f"; time with at least one job training: {util.train_share:.0%}"
    if series.has_gpu and util is not None and util.gpu_util_while_training is not None:
        otherwise = util.gpu_util_while_not_training
        title += f" (GPU busy {util.gpu_util_while_training:.0f}% then, " + (
            f"{otherwise:.0f}% otherwise)" if otherwise is not None else "none otherwise)"
        )
    fig.suptitle(title)
    gpu_ax.set_title("GPU busy % by phase", fontsize=10)
    cpu_ax.set_title("CPU % by phase (the job's processes)", fontsize=10)
    time_ax.set_title("seconds in each phase", fontsize=10)
    if not jobs:
        for ax in (gpu_ax, cpu_ax, time_ax):
            _say(ax, "no phases recorded", narrow=True)
        return fig
    if series.has_gpu:
        _bars(gpu_ax, jobs, "gpu_util_mean", "GPU busy %")
        gpu_ax.set_ylim(0, 105)
        gpu_ax.legend(fontsize=8)
    else:
        _say(gpu_ax, NO_GPU, narrow=True)
    _bars(cpu_ax, jobs, "cpu_percent_mean", "CPU % (100 = one core)")
    cpu_ax.legend(fontsize=8)
    x = np.arange(len(jobs))
    rollout = np.array([job.phases["rollout"].seconds if "rollout" in job.phases else 0.0 for job in jobs])
    train = np.array([job.phases["train"].seconds if "train" in job.phases else 0.0 for job in jobs])
    time_ax.bar(x, rollout, 0.7, color=ROLLOUT_COLOR, label="rollout")
    time_ax.bar(x, train, 0.7, bottom=rollout, color=TRAIN_COLOR, label="train")
    time_ax.set_ylabel("seconds")
    time_ax.legend(fontsize=8)
    _job_axis(time_ax, jobs)
    return fig


def throughput_and_return(series: RunSeries) -> Figure:
    """Per job, against its steps: the throughput the cockpit measured (steps per second over whole
    rollout + train cycles, at each rollout start) and the mean return of its last episodes."""
    fig = _figure(4.0)
    sps_ax, ret_ax = fig.subplots(1, 2)
    sps_ax.set_title("throughput (SPS over whole rollout + train cycles)", fontsize=10)
    ret_ax.set_title("return (ep_rew_mean)", fontsize=10)
    many = len(series.jobs) > LABELLED_JOBS
    style = {"linewidth": 0.8 if many else 1.3, "alpha": 0.6 if many else 1.0}
    for ax, points, empty in ((sps_ax, "sps", "no whole cycle recorded"), (ret_ax, "returns", "no episode ended")):
        drawn = 0
        for job in series.jobs:
            line: tuple[tuple[int, float], ...] = getattr(job, points)
            if line:
                x, y = thinned([p[0] for p in line], [p[1] for p in line])
                ax.plot(x, y, label=job.id, **style)
                drawn += 1
        if not drawn:
            _say(ax, empty)
            continue
        ax.set_xlabel("steps")
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))
        if not many:
            ax.legend(title="job", fontsize=8)
    sps_ax.set_ylabel("steps per second")
    ret_ax.set_ylabel("mean return")
    return fig


def cpu_per_core(series: RunSeries) -> Figure:
    """Each core's CPU % over time, as a heatmap: one row per core, one column per pixel (its mean)."""
    tel = series.telemetry
    cores = max((len(c) for c in tel.cpu_cores), default=0)
    fig = _figure(min(1.6 + 0.18 * cores, 8.0))
    ax = fig.add_subplot()
    ax.set_title("CPU per core")
    if not cores:
        _say(ax, "no CPU samples recorded")
        return fig
    scale, unit = time_unit(series.end - series.start)
    edges = bin_edges(series.start, series.end, max(1, min(PIXELS, len(tel.cpu_t) // 2)))  # as the GPU curve's
    table = np.full((len(tel.cpu_t), cores), np.nan)
    for i, values in enumerate(tel.cpu_cores):
        table[i, : len(values)] = values
    heat = np.empty((cores, len(edges) - 1))
    for core in range(cores):
        known = ~np.isnan(table[:, core])
        heat[core], _, _ = binned(np.asarray(tel.cpu_t)[known], table[known, core], edges)
    extent = ((edges[0] - series.start) / scale, (edges[-1] - series.start) / scale, cores - 0.5, -0.5)
    image = ax.imshow(heat, aspect="auto", interpolation="nearest", cmap="viridis", vmin=0, vmax=100, extent=extent)
    step = max(1, math.ceil(cores / 24))
    ax.set_yticks(range(0, cores, step), [f"c{i}" for i in range(0, cores, step)], fontsize=8)
    ax.set_xlabel(f"time since the run started ({unit})")
    fig.colorbar(image, ax=ax, label="CPU %", pad=0.01)
    return fig


def tier_funnel(fleet: FleetSeries) -> Figure:
    """Per tier: agents planned, entered, finished, promoted, culled and failed."""
    tiers = fleet.summary.tiers
    fig = _figure(3.6)
    ax = fig.add_subplot()
    ax.set_title(f"fleet {fleet.summary.name}: tier funnel ({fleet.summary.promotion} promotion)")
    kinds = ("planned", "entered", "finished", "promoted", "culled", "failed")
    colors = ("#dddddd", "#9ecae1", "#3182bd", "#31a354", "#969696", "#d62728")
    width = 0.8 / len(kinds)
    x = np.arange(len(tiers))
    for k, (kind, color) in enumerate(zip(kinds, colors, strict=True)):
        counts = [getattr(tier, kind) for tier in tiers]
        bars = ax.bar(
            x + (k - (len(kinds) - 1) / 2) * width,
            counts,
            width,
            color=color,
            label=kind,
            edgecolor="#888888" if kind == "planned" else None,
        )
        ax.bar_label(bars, fontsize=7, padding=1)
    labels = [
        f"tier {t.tier}\n{t.episodes:,} episodes"
        if t.episodes is not None
        else f"tier {t.tier}\n{t.timesteps or 0:,} steps"
        for t in tiers
    ]
    ax.set_xticks(x, labels)
    ax.set_ylabel("agents")
    ax.legend(fontsize=8, ncols=len(kinds), loc="upper right")
    ax.margins(y=0.15)
    return fig


def leaderboard(fleet: FleetSeries) -> Figure:
    """The leaderboard's top (the highest tier first, then the best score), with each score's spread
    over its evaluation episodes."""
    leaders = fleet.summary.leaderboard[:LEADERS_DRAWN]
    fig = _figure(1.2 + 0.28 * max(len(leaders), 3))
    ax = fig.add_subplot()
    total = len(fleet.summary.leaderboard)
    ax.set_title(f"leaderboard: top {len(leaders)} of {total:,} scored (the highest tier first)")
    if not leaders:
        _say(ax, "no agent scored yet")
        return fig
    y = np.arange(len(leaders))
    errors = [leader.score_std or 0.0 for leader in leaders]
    colors = [TRAIN_COLOR if leader.tier == leaders[0].tier else ROLLOUT_COLOR for leader in leaders]
    ax.barh(y, [leader.score for leader in leaders], xerr=errors, color=colors, capsize=2)
    overrides = [", ".join(f"{k}={v}" for k, v in sorted(leader.overrides.items())) for leader in leaders]
    ax.set_yticks(
        y,
        [
            f"#{leader.rank} {leader.agent} (tier {leader.tier}) {text}".rstrip()
            for leader, text in zip(leaders, overrides, strict=True)
        ],
        fontsize=8,
    )
    ax.invert_yaxis()
    ax.set_xlabel("evaluation score (mean return, ± std)")
    return fig


def scores_by_steps(fleet: FleetSeries) -> Figure:
    """Each agent's evaluation score at the end of each tier it finished, against its steps there:
    the leaderboard's top in colour, every other agent in grey."""
    fig = _figure(4.2)
    ax = fig.add_subplot()
    ax.set_title("score against steps, per agent")
    by_agent: dict[str, list[tuple[int, int, float]]] = {}
    for result in fleet.results:
        by_agent.setdefault(result.agent, []).append((result.tier, result.steps, result.score))
    if not by_agent:
        _say(ax, "no agent scored yet")
        return fig
    top = [leader.agent for leader in fleet.summary.leaderboard[:HIGHLIGHTED]]
    for agent, points in by_agent.items():
        if agent not in top:
            points.sort()
            ax.plot(
                [p[1] for p in points],
                [p[2] for p in points],
                color="#999999",
                alpha=0.45,
                linewidth=0.8,
                marker="o",
                markersize=2.5,
            )
    for agent in top:
        points = sorted(by_agent.get(agent, []))
        ax.plot([p[1] for p in points], [p[2] for p in points], linewidth=1.8, marker="o", markersize=4, label=agent)
    ax.set_xlabel("steps")
    ax.set_ylabel("evaluation score")
    ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))
    ax.legend(title=f"top {len(top)}", fontsize=8)
    return fig


def searched_keys(fleet: FleetSeries) -> list[str]:
    """The preset keys the agents differ in with numbers (a grid's lists, a search's draws): at
    least two distinct numeric values among the agents' overrides, in key order."""
    values: dict[str, set[float]] = {}
    for agent in fleet.summary.agents:
        for key, value in agent.overrides.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                values.setdefault(key, set()).add(float(value))
    return sorted(key for key, seen in values.items() if len(seen) >= 2)


def score_by_value(fleet: FleetSeries) -> Figure:
    """Each scored agent's latest score against each value it was given (`searched_keys`), one
    panel per key, coloured by the tier the score is from; a key spanning 20x or more of positive
    values on a log axis."""
    keys = searched_keys(fleet)
    scored = [agent for agent in fleet.summary.agents if agent.score is not None]
    fig = _figure(3.2 if len(keys) <= 3 else 3.2 * math.ceil(len(keys) / 3))
    if not keys or not scored:
        _say(fig.add_subplot(), "no agents that differ in a number" if not keys else "no agent scored yet")
        return fig
    columns = min(3, len(keys))
    tiers = sorted({agent.score_tier or 0 for agent in scored})
    colors = {tier: (TRAIN_COLOR if tier == tiers[-1] else ROLLOUT_COLOR) for tier in tiers}
    for i, key in enumerate(keys):
        ax = fig.add_subplot(math.ceil(len(keys) / columns), columns, i + 1)
        points = [(float(a.overrides[key]), a.score or 0.0, a.score_tier or 0) for a in scored if key in a.overrides]
        for tier in tiers:
            xs = [x for x, _, t in points if t == tier]
            ax.scatter(xs, [y for _, y, t in points if t == tier], s=14, color=colors[tier], label=f"tier {tier}")
        positive = [x for x, _, _ in points if x > 0]
        if positive and len(positive) == len(points) and max(positive) >= 20 * min(positive):
            ax.set_xscale("log")
        ax.set_xlabel(key)
        if i % columns == 0:
            ax.set_ylabel("score")
        if i == 0 and len(tiers) > 1:
            ax.legend(fontsize=7)
    fig.suptitle("score against each value the agents differ in (latest score of each agent)", fontsize=10)
    return fig


def best_so_far(fleet: FleetSeries) -> Figure:
    """The fleet's best score as its results came in, against the steps it had trained by then
    (`search_progress`), every result a dot: what a search buys for its steps."""
    points = search_progress(fleet.results)
    fig = _figure(3.4)
    ax = fig.add_subplot()
    ax.set_title("best score so far against the steps trained")
    if not points:
        _say(ax, "no agent scored yet")
        return fig
    steps = [p.steps_so_far for p in points]
    ax.scatter(steps, [p.score for p in points], s=8, color="#999999", alpha=0.6, label="each score")
    ax.step(steps, [p.best_so_far for p in points], where="post", color=TRAIN_COLOR, linewidth=1.8, label="best so far")
    ax.set_xlabel("steps trained by the fleet's scored tiers")
    ax.set_ylabel("evaluation score")
    ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))
    ax.legend(fontsize=8, loc="lower right")
    return fig


def _axis_position(
    distribution: Distribution | None, values: Sequence[Any]
) -> tuple[list[float], list[tuple[float, str]]]:
    """Each of `values` placed on a parallel-coordinates axis from 0 to 1, and the axis's labelled
    ticks: a range's two ends (a loguniform one on a log scale), a choice's every value, evenly
    spaced; with no distribution (a plan that no longer parses), the values' own span."""
    if distribution is not None and not distribution.numeric:
        choices = [json.dumps(c) if not isinstance(c, str) else c for c in distribution.choices]
        at = {text: i / max(1, len(choices) - 1) for i, text in enumerate(choices)}
        keys = [json.dumps(v) if not isinstance(v, str) else v for v in values]
        return [at.get(k, 0.5) for k in keys], [(at[c], c) for c in choices]
    numbers = [float(v) for v in values]
    low = distribution.low if distribution is not None else min(numbers, default=0.0)
    high = distribution.high if distribution is not None else max(numbers, default=1.0)
    log = distribution is not None and distribution.kind == "loguniform"

    def scale(x: float) -> float:
        return math.log10(x) if log else x

    span = scale(high) - scale(low) or 1.0
    return [(scale(x) - scale(low)) / span for x in numbers], [(0.0, f"{low:.3g}"), (1.0, f"{high:.3g}")]


def parallel_coordinates(fleet: FleetSeries) -> Figure:
    """Each scored draw as a line across one axis per searched key and a last one for its score,
    coloured by the score (dark: best); the Pareto front's draws drawn thicker. A range's axis runs
    from its low end (bottom) to its high end, a loguniform one on a log scale, a choice's values
    evenly spaced."""
    analysis = fleet.analysis
    fig = _figure(4.4)
    ax = fig.add_subplot()
    ax.set_title("the draws in parallel coordinates: each searched value and the score")
    scored = analysis.scored if analysis is not None else ()
    search = fleet.summary.search
    if analysis is None or search is None or len(scored) < 2:
        _say(ax, "fewer than 2 scored draws to draw")
        return fig
    keys = list(search.keys)
    space = search.space
    columns: list[list[float]] = []
    for i, key in enumerate(keys):
        positions, ticks = _axis_position(space.get(key) if space else None, [p.values.get(key) for p in scored])
        columns.append(positions)
        for at, label in ticks:
            ax.annotate(label, (i, at), xytext=(-4, 0), textcoords="offset points", ha="right", va="center", fontsize=8)
    scores = [p.score or 0.0 for p in scored]
    low, high = min(scores), max(scores)
    columns.append([(x - low) / ((high - low) or 1.0) for x in scores])
    for at, label in ((0.0, f"{low:,.1f}"), (1.0, f"{high:,.1f}")):
        ax.annotate(
            label, (len(keys), at), xytext=(4, 0), textcoords="offset points", ha="left", va="center", fontsize=8
        )
    cmap = colormaps["viridis_r"]
    x = list(range(len(keys) + 1))
    order = sorted(range(len(scored)), key=lambda i: scores[i])  # the best drawn last, on top
    for i in order:
        colour = cmap((scores[i] - low) / ((high - low) or 1.0))
        front = scored[i].pareto
        ax.plot(x, [column[i] for column in columns], color=colour, linewidth=2.4 if front else 1.2, alpha=0.9)
    for i in x:
        ax.axvline(i, color="#444444", linewidth=0.8)
    ax.set_xticks(x, [*keys, "score"])
    ax.set_xlim(-0.45, len(keys) + 0.45)
    ax.set_ylim(-0.05, 1.05)
    ax.tick_params(left=False, labelleft=False)
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    image = ScalarMappable(norm=Normalize(low, high), cmap=cmap)
    fig.colorbar(image, ax=ax, label="score", pad=0.01)
    return fig


def pareto_front(fleet: FleetSeries) -> Figure:
    """Each scored draw's score against its cost (dollars at the fleet's measured cost per step, or
    its steps without a rate), every draw a dot numbered by its draw; the Pareto front in colour and
    joined as a step: the best score each cost bought."""
    analysis = fleet.analysis
    fig = _figure(4.0)
    ax = fig.add_subplot()
    ax.set_title("best score against cost: the Pareto front")
    scored = analysis.scored if analysis is not None else ()
    if analysis is None or not scored:
        _say(ax, "no draw scored yet")
        return fig
    dollars = all(p.cost_usd is not None for p in scored)

    def cost(p: Any) -> float:
        return float(p.cost_usd) if dollars else float(p.steps)

    rest = [p for p in scored if not p.pareto]
    front = list(analysis.front)
    ax.scatter([cost(p) for p in rest], [p.score for p in rest], s=28, color="#999999", label="a draw")
    ax.step([cost(p) for p in front], [p.score for p in front], where="post", color=TRAIN_COLOR, linewidth=1.4)
    ax.scatter(
        [cost(p) for p in front], [p.score for p in front], s=44, color=TRAIN_COLOR, label="on the front", zorder=3
    )
    for p in front:  # the others share costs with each other (same tiers): their numbers would overlap
        ax.annotate(f"draw {p.draw}", (cost(p), p.score or 0.0), xytext=(6, 2), textcoords="offset points", fontsize=8)
    ax.set_xlabel(
        r"cost: \$ at the fleet's rate (its steps at its measured \$ per step)" if dollars else "cost: steps trained"
    )
    ax.set_ylabel("score (the draw's last tier)")
    if not dollars:
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))
    ax.margins(x=0.08, y=0.1)
    ax.legend(fontsize=8, loc="best")
    return fig


# ----- rendering -----


def png(fig: Figure) -> bytes:
    """The figure as PNG bytes, drawn by Agg."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def plots(series: RunSeries) -> list[Plot]:
    """Every figure of the run's report, rendered, in the page's order; a fleet's three last."""
    if series.has_gpu:
        gpu_caption = (
            "GPU busy: the share of time any kernel ran, as NVML measures it, not SM occupancy (each "
            "pixel's mean, and the range of the readings within it) over the run, "
            "and under it one lane per job: light for rollout, dark for train. A train burst lines up with "
            "the GPU's."
        )
    else:
        why = series.record.gpu.telemetry if series.record.gpu is not None else "no [gpu] in run.toml"
        gpu_caption = f"{NO_GPU} ({why}). The lanes show each job's rollout (light) and train (dark) phases."
    made = [
        ("gpu_phases", "GPU busy (any kernel) and phases", gpu_caption, gpu_and_phases),
        (
            "utilization_by_phase",
            "Utilization by phase",
            "Per job, from run.toml's phase accounting: GPU busy % and the job's CPU % in rollout and in train, "
            "and its time in each.",
            utilization_by_phase,
        ),
        (
            "sps_return",
            "Throughput and return",
            "Per job against its steps: steps per second over whole rollout + train cycles (the cockpit's SPS, at "
            "each rollout start) and the mean return of its last 100 episodes.",
            throughput_and_return,
        ),
        ("cpu_cores", "CPU per core", "Each core's CPU % over the run (each pixel's mean).", cpu_per_core),
    ]
    out = [Plot(name, title, caption, png(draw(series))) for name, title, caption, draw in made]
    if series.fleet is not None:
        fleet = series.fleet
        drawn = [
            (
                "fleet_funnel",
                "Tier funnel",
                "Agents per tier: planned, entered, finished (scored), promoted, culled and failed.",
                tier_funnel,
            ),
            (
                "fleet_leaderboard",
                "Leaderboard",
                "The best agents, the highest tier first, then by evaluation "
                "score; the bars of the highest tier reached are dark.",
                leaderboard,
            ),
            (
                "fleet_scores",
                "Score against steps",
                "Each agent's evaluation score at the end of each tier it "
                "finished; the leaderboard's top agents in colour.",
                scores_by_steps,
            ),
            (
                "fleet_best",
                "Best so far",
                "The fleet's best score as its results came in, against the steps its "
                "scored tiers had trained by then: what the search (or the grid) bought for its steps.",
                best_so_far,
            ),
        ]
        if searched_keys(fleet):
            drawn.append(
                (
                    "fleet_values",
                    "Score against each value",
                    "Each scored agent's latest score against each value the agents differ in (a grid's "
                    "lists, a search's draws); dark dots scored in the highest tier reached.",
                    score_by_value,
                )
            )
        if fleet.analysis is not None:
            drawn += [
                (
                    "fleet_parallel",
                    "The draws in parallel coordinates",
                    "Each scored draw as a line through its value of each searched key and its score, coloured by "
                    "the score (dark: best); the Pareto front's draws thicker.",
                    parallel_coordinates,
                ),
                (
                    "fleet_pareto",
                    "Best score against cost",
                    "Each scored draw's score (its agents' mean in its last tier) against what its agents trained, "
                    "in dollars at the fleet's measured cost per step (in steps without a rate); red: the Pareto "
                    "front, the draws no other beat on both.",
                    pareto_front,
                ),
            ]
        out += [Plot(name, title, caption, png(draw(fleet)), fleet=True) for name, title, caption, draw in drawn]
    return out
