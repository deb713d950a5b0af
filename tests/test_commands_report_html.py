"""`cockpit report RUN_DIR --html OUT.html [--png DIR]`: the plotted report.

The figures are built from runs written through the contract's writers (`benchmarks.report_render`:
run.toml, the run log's CSVs, EventWriter, fleet.db) and from the golden run (a real CPU run), and
inspected as matplotlib objects: what each axis holds, not pixels. The page is parsed for network
references. The end-to-end test renders a real CartPole run's report and opens it in headless
Chromium (Debian's package), checking the screenshot's pixels where the plots must be.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgb
from PIL import Image

from benchmarks.report_render import synthesize_fleet, synthesize_run
from cockpit.cli import main
from cockpit.commands.htmlreport import page
from cockpit.commands.plots import (
    NO_GPU,
    ROLLOUT_COLOR,
    TRAIN_COLOR,
    Plot,
    best_so_far,
    binned,
    cpu_per_core,
    gpu_and_phases,
    leaderboard,
    phase_share,
    plots,
    score_by_value,
    scores_by_steps,
    searched_keys,
    thinned,
    throughput_and_return,
    tier_funnel,
    utilization_by_phase,
)
from cockpit.core.record.series import RunSeries, read_series
from tests.cockpitproc import PLAIN_RUN, Cockpit, required_tool, run_cockpit
from tests.test_commands_report_json import GOLDEN_RUN

RUN_FIGURES = {"gpu_phases", "utilization_by_phase", "sps_return", "cpu_cores"}
FLEET_FIGURES = {"fleet_funnel", "fleet_leaderboard", "fleet_scores", "fleet_best", "fleet_values"}


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory: pytest.TempPathFactory) -> RunSeries:
    """8 minutes of 2 jobs on a GPU, written as a run writes it: more than two NVML readings a pixel."""
    return read_series(synthesize_run(tmp_path_factory.mktemp("gpu") / "run", jobs=2, seconds=480.0, gpu=True))


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory: pytest.TempPathFactory) -> RunSeries:
    """A sync fleet of 8 agents in 2 slots, 2 of them promoted to the second tier."""
    run_dir = tmp_path_factory.mktemp("fleet") / "run"
    return read_series(synthesize_fleet(run_dir, agents=8, slots=2, tier0=2_560, tier1=5_120))


@pytest.fixture(scope="module")
def golden_run() -> RunSeries:
    """A real 9-second run of 3 CartPole agents, 2 at a time, on a CPU without a GPU."""
    return read_series(GOLDEN_RUN)


@pytest.fixture(scope="module")
def rendered(gpu_run: RunSeries, fleet_run: RunSeries, golden_run: RunSeries) -> dict[str, list[Plot]]:
    """Each run's figures, drawn once for the module's tests."""
    return {"gpu": plots(gpu_run), "fleet": plots(fleet_run), "golden": plots(golden_run)}


# ----- the binning to pixels -----


def test_phase_share_is_each_bins_exact_share_of_time_in_the_phase() -> None:
    transitions = [(0.0, "rollout"), (1.5, "train"), (2.0, "rollout"), (3.0, None)]
    edges = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    assert phase_share(transitions, "rollout", edges).tolist() == [1.0, 0.5, 1.0, 0.0]
    assert phase_share(transitions, "train", edges).tolist() == [0.0, 0.5, 0.0, 0.0]
    assert phase_share([], "train", edges).tolist() == [0.0, 0.0, 0.0, 0.0]


def test_binned_keeps_each_bins_mean_and_range_and_leaves_empty_bins_empty() -> None:
    mean, low, high = binned([0.1, 0.2, 0.9, 2.5, 3.0], [10.0, 30.0, 20.0, 90.0, 40.0], np.array([0, 1, 2, 3.0]))
    assert mean[0] == 20.0 and (low[0], high[0]) == (10.0, 30.0)
    assert np.isnan(mean[1]) and np.isnan(low[1]) and np.isnan(high[1])
    assert mean[2] == 65.0 and (low[2], high[2]) == (40.0, 90.0)  # the last edge belongs to the last bin


# ----- the figures -----


def test_a_run_without_a_gpu_says_so_instead_of_drawing_a_gpu_curve(
    tmp_path: Path, golden_run: RunSeries, rendered: dict[str, list[Plot]]
) -> None:
    synthetic = read_series(synthesize_run(tmp_path / "run", jobs=2, seconds=20.0, gpu=False))
    for series in (golden_run, synthetic):
        gpu_ax, lanes = gpu_and_phases(series).axes
        assert [text.get_text() for text in gpu_ax.texts] == [NO_GPU]
        assert not gpu_ax.lines and not gpu_ax.collections  # no curve, no zeros
        # The lanes are measured without a GPU all the same: both phases are there for every job.
        image = np.asarray(lanes.images[0].get_array())
        assert image.shape[0] == len(series.jobs) == len(series.record.jobs)
        for row in image:
            assert _has_color(row, TRAIN_COLOR) and _has_color(row, ROLLOUT_COLOR)
        gpu_by_phase = utilization_by_phase(series).axes[0]
        assert [" ".join(text.get_text().split()) for text in gpu_by_phase.texts] == [NO_GPU]  # on short lines
        assert not gpu_by_phase.patches
    assert f"{NO_GPU} (no GPU telemetry: NVML library not found" in page(golden_run, rendered["golden"])


def test_a_gpu_run_draws_the_measured_utilization_over_its_phase_lanes(gpu_run: RunSeries) -> None:
    gpu_ax, lanes = gpu_and_phases(gpu_run).axes
    assert not gpu_ax.texts
    (mean,) = gpu_ax.lines
    drawn = np.asarray(mean.get_ydata(), dtype=float)
    readings = np.asarray(gpu_run.telemetry.gpu_util)
    assert len(readings) > 2_400 and len(drawn) == 1_200  # NVML's readings, binned to the pixel width
    assert not np.isnan(drawn).any()  # no pixel without a reading: the run sampled throughout
    assert drawn.min() >= readings.min() and drawn.max() <= readings.max()
    assert abs(drawn.mean() - readings.mean()) < 3
    (bursts,) = gpu_ax.collections  # each pixel's range: the bursts within it
    assert max(path.vertices[:, 1].max() for path in bursts.get_paths()) == readings.max()
    assert lanes.images[0].get_array().shape[:2] == (2, 1_200)
    bars = utilization_by_phase(gpu_run).axes[0].patches
    recorded = [job.phases[phase].gpu_util_mean for job in gpu_run.record.jobs for phase in ("rollout", "train")]
    assert sorted(bar.get_height() for bar in bars) == sorted(recorded)  # run.toml's phase accounting


def test_a_fleet_gets_its_funnel_leaderboard_and_score_against_steps(
    fleet_run: RunSeries, rendered: dict[str, list[Plot]]
) -> None:
    figures = rendered["fleet"]
    assert [f.name for f in figures if not f.fleet] == ["gpu_phases", "utilization_by_phase", "sps_return",
                                                        "cpu_cores"]  # fmt: skip
    assert [f.name for f in figures if f.fleet] == ["fleet_funnel", "fleet_leaderboard", "fleet_scores", "fleet_best",
                                                    "fleet_values"]  # fmt: skip
    fleet = fleet_run.fleet
    assert fleet is not None
    funnel = tier_funnel(fleet).axes[0]
    entered = next(c for c in funnel.containers if c.get_label() == "entered")
    promoted = next(c for c in funnel.containers if c.get_label() == "promoted")
    assert [bar.get_height() for bar in entered] == [8, 2]
    assert [bar.get_height() for bar in promoted] == [2, 0]
    scores = scores_by_steps(fleet).axes[0]
    assert len(scores.lines) == 8  # one line per agent
    promoted_lines = [line for line in scores.lines if len(line.get_xdata()) == 2]
    assert len(promoted_lines) == 2 and all(list(line.get_xdata()) == [2560, 5120] for line in promoted_lines)
    assert {line.get_label() for line in scores.lines} >= {leader.agent for leader in fleet.summary.leaderboard[:5]}
    html = page(fleet_run, figures)
    assert "Fleet bench" in html and "Leaderboard (top 8 of 8 scored)" in html


def test_the_best_so_far_steps_up_with_each_better_score_against_the_steps_the_fleet_trained(
    fleet_run: RunSeries,
) -> None:
    fleet = fleet_run.fleet
    assert fleet is not None
    ax = best_so_far(fleet).axes[0]
    (line,) = ax.lines
    ordered = sorted(fleet.results, key=lambda r: (r.t, r.tier, r.agent))
    scores = [r.score for r in ordered]
    assert list(line.get_ydata()) == [max(scores[: i + 1]) for i in range(len(scores))]
    # 8 agents to 2,560 steps, then the 2 promoted 2,560 more: every step of the scored tiers.
    assert list(line.get_xdata())[-1] == 8 * 2_560 + 2 * 2_560
    assert list(line.get_xdata()) == sorted(line.get_xdata())


def test_score_against_each_value_has_a_panel_per_number_the_agents_differ_in(fleet_run: RunSeries) -> None:
    fleet = fleet_run.fleet
    assert fleet is not None
    assert searched_keys(fleet) == ["learning_rate"]  # the plan's grid
    (ax,) = score_by_value(fleet).axes
    assert ax.get_xlabel() == "learning_rate"
    dots = {(float(x), float(y)) for dots in ax.collections for x, y in dots.get_offsets()}
    latest = {(a.overrides["learning_rate"], a.score) for a in fleet.summary.agents if a.score is not None}
    assert dots == latest and len(latest) == 8
    by_tier = {dots.get_label(): len(dots.get_offsets()) for dots in ax.collections}
    assert by_tier == {"tier 0": 6, "tier 1": 2}  # the 2 promoted agents' latest scores are their tier 1's


def test_a_plain_run_has_no_fleet_figures(rendered: dict[str, list[Plot]]) -> None:
    assert [figure.name for figure in rendered["gpu"]] == ["gpu_phases", "utilization_by_phase", "sps_return",
                                                           "cpu_cores"]  # fmt: skip
    assert [figure.name for figure in rendered["golden"]] == [figure.name for figure in rendered["gpu"]]


def test_only_the_plots_load_matplotlib_and_they_draw_on_agg_without_pyplot() -> None:
    code = f"""
import sys
from pathlib import Path
import cockpit.cli, cockpit.commands.report
assert "matplotlib" not in sys.modules, "the text report and --json load matplotlib"
from cockpit.commands.plots import gpu_and_phases, png
from cockpit.core.record.series import read_series
assert png(gpu_and_phases(read_series(Path({str(GOLDEN_RUN)!r})))).startswith(b"\\x89PNG")
gui = ("matplotlib.pyplot", "tkinter", "PyQt5", "PyQt6", "PySide2", "PySide6", "gi", "wx")
print(sorted(name for name in sys.modules if name in gui or name.startswith("matplotlib.backends.backend_")))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['matplotlib.backends.backend_agg']"


# ----- the command -----


def test_png_dir_gets_one_png_per_figure_alone_or_with_html(tmp_path: Path, fleet_run: RunSeries,
                                                            capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    pngs = tmp_path / "plots"  # made by the command: its parent exists
    assert main(["report", str(fleet_run.run_dir), "--png", str(pngs)]) == 0
    assert {p.name for p in pngs.iterdir()} == {f"{name}.png" for name in RUN_FIGURES | FLEET_FIGURES}
    for path in pngs.iterdir():
        with Image.open(path) as image:
            assert image.format == "PNG" and image.width == 1200
    out = tmp_path / "report.html"
    again = tmp_path / "again"
    assert main(["report", str(GOLDEN_RUN), "--html", str(out), "--png", str(again)]) == 0
    assert {p.name for p in again.iterdir()} == {f"{name}.png" for name in RUN_FIGURES}
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert f"wrote {out} (4 figures)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--html", "{tmp}/missing/report.html"], "--html {tmp}/missing/report.html: directory {tmp}/missing does not "
                                                  "exist"),
        (["--html", "{tmp}"], "--html {tmp}: is a directory"),
        (["--png", "{tmp}/missing/plots"], "--png {tmp}/missing/plots: directory {tmp}/missing does not exist"),
        (["--png", "{tmp}/file.txt"], "--png {tmp}/file.txt: not a directory"),
        (["--json", "--html", "{tmp}/r.html"], "--json prints the run as JSON; --html and --png write its plots"),
    ],
)  # fmt: skip
def test_a_bad_output_flag_is_one_line_exit_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    (tmp_path / "file.txt").write_text("not a directory")
    before = sorted(tmp_path.rglob("*"))
    argv = [arg.format(tmp=tmp_path) for arg in args]
    assert main(["report", str(GOLDEN_RUN), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message.format(tmp=tmp_path) in err, err
    assert sorted(tmp_path.rglob("*")) == before


def test_a_run_dir_with_no_run_is_one_line_exit_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(empty), "--html", str(tmp_path / "r.html"), "--png", str(tmp_path / "plots")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{empty}: not a run directory" in err
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "plots").exists()


# ----- self-contained -----


class _References(HTMLParser):
    """Every URL-bearing attribute, every tag, and the style blocks' text of a page."""

    URL_ATTRIBUTES = frozenset({"src", "href", "srcset", "action", "poster", "data", "xlink:href", "background"})

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.tags: set[str] = set()
        self.styles: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self._in_style = tag == "style"
        self.urls += [value or "" for name, value in attrs if name in self.URL_ATTRIBUTES]
        self.styles += [value or "" for name, value in attrs if name == "style"]

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.styles.append(data)


def network_references(html: str) -> list[str]:
    """What in `html` would reach outside the page: a URL that is no `data:` URI or `#fragment`, a
    script, a stylesheet link, a frame or an embed, a CSS `url()` or `@import` that is no data URI."""
    parser = _References()
    parser.feed(html)
    found = [url for url in parser.urls if not url.startswith(("data:", "#"))]
    found += sorted(parser.tags & {"script", "link", "iframe", "frame", "object", "embed", "base"})
    for css in parser.styles:
        found += [f"@import in {css[:40]!r}" for _ in range(css.count("@import"))]
        found += [f"url({part[:30]}" for part in css.split("url(")[1:] if not part.lstrip("'\" ").startswith("data:")]
    return found


def test_the_checker_finds_network_references() -> None:
    for bad in ('<img src="https://example.com/a.png">', '<link rel="stylesheet" href="//cdn/x.css">',
                "<script>1</script>", "<style>body { background: url(http://x/y.png) }</style>",
                "<style>@import 'x.css';</style>", '<img src="/etc/plot.png">'):  # fmt: skip
        assert network_references(f"<html><body>{bad}</body></html>"), bad
    assert network_references('<img src="data:image/png;base64,AAAA"><a href="#x">x</a>') == []


def test_the_page_references_nothing_outside_itself(
    gpu_run: RunSeries, fleet_run: RunSeries, golden_run: RunSeries, rendered: dict[str, list[Plot]]
) -> None:
    for series, figures in ((gpu_run, rendered["gpu"]), (fleet_run, rendered["fleet"]),
                            (golden_run, rendered["golden"])):  # fmt: skip
        html = page(series, figures)
        assert network_references(html) == []
        assert html.count('src="data:image/png;base64,') == len(figures)


def test_text_from_the_run_is_escaped(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(GOLDEN_RUN, run_dir)
    toml = run_dir / "run.toml"
    toml.write_text(toml.read_text().replace("warnings = []", 'warnings = ["<script>alert(1)</script>"]'))
    html = page(read_series(run_dir), [])
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>" not in html


# ----- in a real browser -----


def screenshot(chromium: str, url: str, out: Path, profile: Path) -> np.ndarray:
    """Chromium's headless screenshot of `url` at 1280x2400, as an RGB array."""
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
         f"--user-data-dir={profile}", f"--screenshot={out}", "--window-size=1280,2400", url],
        capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.is_file(), f"chromium wrote no screenshot of {url}"
    with Image.open(out) as image:
        return np.asarray(image.convert("RGB"), dtype=float)


def _near(pixels: np.ndarray, color: str, tolerance: float = 14.0) -> np.ndarray:
    return np.all(np.abs(pixels - np.array(to_rgb(color)) * 255) <= tolerance, axis=-1)


def _has_color(row: np.ndarray, color: str) -> bool:
    return bool(np.any(np.all(np.abs(row - np.array(to_rgb(color))) < 0.02, axis=-1)))


@pytest.fixture
def chromium_profile(tmp_path: Path) -> Iterator[Path]:
    profile = tmp_path / "chromium-profile"
    yield profile
    shutil.rmtree(profile, ignore_errors=True)


@PLAIN_RUN
@pytest.mark.slow
def test_a_real_runs_report_opens_in_headless_chromium(plain_cartpole_run: Cockpit, tmp_path: Path,
                                                       chromium_profile: Path) -> None:  # fmt: skip
    chromium = required_tool("chromium", "the browser test of report --html")
    assert plain_cartpole_run.proc.returncode == 0, plain_cartpole_run.text()[-3000:]
    out = tmp_path / "report.html"
    result = run_cockpit("report", str(plain_cartpole_run.run_dir), "--html", str(out))
    assert result.returncode == 0 and result.stderr == "", result.stderr
    shot = screenshot(chromium, out.resolve().as_uri(), tmp_path / "report.png", chromium_profile)
    # The control: the same page with its figures' data broken, as a page whose plots failed looks.
    broken = tmp_path / "broken.html"
    broken.write_text(re.sub(r"base64,[^\"]+", "base64,bm90IGEgcG5n", out.read_text()))
    control = screenshot(chromium, broken.resolve().as_uri(), tmp_path / "broken.png", chromium_profile)
    assert shot.shape == control.shape == (2400, 1280, 3)
    # The first figure, under the header (its first 650 rows): a real CPU run's phase lanes, mostly
    # train on CartPole (thin rollout stripes blend into them), and the legend's two colours.
    first = shot[:650]
    assert _near(first, TRAIN_COLOR).sum() > 2_000 and _near(first, ROLLOUT_COLOR).sum() > 100
    assert _near(shot, ROLLOUT_COLOR).sum() > 2_000  # the bars of utilization by phase
    # The page is plots, far from white; the control is mostly white and has neither colour.
    non_white = np.any(shot < 235, axis=-1).mean()
    assert non_white > 0.08, non_white
    assert np.any(control < 235, axis=-1).mean() < non_white / 2
    assert _near(control, TRAIN_COLOR).sum() == 0 and _near(control, ROLLOUT_COLOR).sum() == 0


# ----- each figure's data is the run's (issue 30: a figure checked by name passes with empty axes) -----


def test_throughput_and_return_draw_each_jobs_recorded_points(golden_run: RunSeries) -> None:
    sps_ax, ret_ax = throughput_and_return(golden_run).axes
    for ax, points in ((sps_ax, "sps"), (ret_ax, "returns")):
        drawn = {line.get_label(): line for line in ax.lines}
        recorded = {job.id: getattr(job, points) for job in golden_run.jobs if getattr(job, points)}
        assert recorded and set(drawn) == set(recorded), (points, set(drawn))
        for job_id, line in recorded.items():
            x, y = thinned([p[0] for p in line], [p[1] for p in line])
            assert list(drawn[job_id].get_xdata()) == list(x) and list(drawn[job_id].get_ydata()) == list(y)


def test_cpu_per_core_draws_each_cores_recorded_cpu(golden_run: RunSeries) -> None:
    (ax, _colorbar) = cpu_per_core(golden_run).axes
    heat = np.asarray(ax.images[0].get_array(), dtype=float)
    tel = golden_run.telemetry
    cores = max(len(c) for c in tel.cpu_cores)
    assert heat.shape[0] == cores and heat.shape[1] > 1
    for core in range(cores):
        readings = np.asarray([c[core] for c in tel.cpu_cores if len(c) > core], dtype=float)
        row = heat[core][~np.isnan(heat[core])]
        assert row.size and row.min() >= readings.min() - 1e-9 and row.max() <= readings.max() + 1e-9
        assert abs(row.mean() - readings.mean()) < 10  # each pixel the mean of its readings


def test_the_leaderboard_draws_each_leaders_score_in_rank_order(fleet_run: RunSeries) -> None:
    fleet = fleet_run.fleet
    assert fleet is not None
    ax = leaderboard(fleet).axes[0]
    leaders = fleet.summary.leaderboard[: len(ax.patches)]
    assert leaders and [bar.get_width() for bar in ax.patches] == [leader.score for leader in leaders]
    labels = [tick.get_text() for tick in ax.get_yticklabels()]
    assert [label.split()[:2] for label in labels] == [[f"#{lead.rank}", lead.agent] for lead in leaders]
