"""`cockpit report` on a search fleet: the analysis (`cockpit.core.fleet.analysis`) in the text report,
`--json` (validated against docs/report.schema.json), the figures, and the HTML page, which headless
Chromium opens with no request beyond the file and its own `data:` URIs.

The fleets are `tests.test_fleet_analysis.search_fleet`'s: written through FleetStore beside the
golden run's run.toml.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgb
from PIL import Image

from cockpit.cli import main
from cockpit.commands.htmlreport import page
from cockpit.commands.plots import SEARCH_FIGURES, TRAIN_COLOR, parallel_coordinates, pareto_front, plots
from cockpit.core.fleet.analysis import SearchAnalysis
from cockpit.core.record.series import read_series
from tests.chromium import Chromium
from tests.cockpitproc import required_tool
from tests.test_commands_report_html import network_references
from tests.test_commands_report_json import validate
from tests.test_fleet_analysis import MIN_DRAWS, search_fleet


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sync search fleet of 12 draws over learning_rate, gamma and net_arch, half promoted."""
    return search_fleet(tmp_path_factory.mktemp("search") / "run", draws=12)


def analysis_of(run_dir: Path) -> SearchAnalysis:
    fleet = read_series(run_dir).fleet
    assert fleet is not None and fleet.analysis is not None
    return fleet.analysis


def test_the_text_report_gives_each_keys_importance_and_the_front(
    fleet_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(fleet_dir)]) == 0
    out = capsys.readouterr().out
    analysis = analysis_of(fleet_dir)
    assert analysis.importance
    text = out[out.index("search: 12 draws, 12 scored") :]
    assert "importance (Optuna's PED-ANOVA: how the values of the best 2 of 12 draws differ" in text
    for key, share in analysis.importance:
        assert re.search(rf"│ {key} +│ +{share:.2f} │", text), key
    assert "score against cost (* the Pareto front" in text and "$3.6/h" in text
    rows = re.findall(r"│ +(\d+) │ (\*?) +│ +(\d) │ +([\d.,]+) │", text)
    assert len(rows) == 12
    assert {int(draw) for draw, mark, _, _ in rows if mark} == {p.draw for p in analysis.front}
    assert [int(draw) for draw, _, _, _ in rows][: len(analysis.front)] == [p.draw for p in analysis.front]


def test_too_few_draws_print_one_line_and_no_importance(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = search_fleet(tmp_path / "run", draws=8, scored=3)
    assert main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert f"no importance: 3 scored draw(s); PED-ANOVA needs {MIN_DRAWS} or more\n" in out
    assert "importance (Optuna's" not in out


def test_draws_over_several_envs_say_their_scores_mix_raw_returns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = search_fleet(tmp_path / "run", draws=8, envs=("CartPole-v1", "Acrobot-v1"))
    assert main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    first = "search: 8 draws, 8 scored (a draw's score: its agents' mean in the last tier they scored in"
    assert f"{first}, over 2 envs' raw returns)\n" in out
    assert "no importance: the draws train 2 envs, whose returns are on different scales\n" in out


def test_report_json_has_the_analysis_as_its_schema_says(fleet_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(fleet_dir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    validate(report)
    got = report["fleet"]["analysis"]
    analysis = analysis_of(fleet_dir)
    assert got["evaluator"] == "PED-ANOVA" and got["importance_note"] is None and got["top"] == 2
    assert got["importance"] == [{"key": key, "importance": share} for key, share in analysis.importance]
    assert got["rate_usd_per_h"] == 3.6 and got["usd_per_step"] == analysis.usd_per_step
    assert [(d["draw"], d["score"], d["steps"], d["cost_usd"], d["pareto"]) for d in got["draws"]] == [
        (p.draw, p.score, p.steps, p.cost_usd, p.pareto) for p in analysis.draws
    ]
    assert sum(d["pareto"] for d in got["draws"]) == len(analysis.front) >= 1


def test_a_fleet_without_a_search_has_no_analysis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.report_render import synthesize_fleet

    run_dir = synthesize_fleet(tmp_path / "run", agents=8, slots=2, tier0=2_560, tier1=5_120)
    assert main(["report", str(run_dir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    validate(report)
    assert report["fleet"]["analysis"] is None
    assert [plot.name for plot in plots(read_series(run_dir)) if plot.name in SEARCH_FIGURES] == []


def test_parallel_coordinates_draw_each_scored_draw_through_its_values(fleet_dir: Path) -> None:
    fleet = read_series(fleet_dir).fleet
    assert fleet is not None and fleet.analysis is not None
    ax = parallel_coordinates(fleet).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["gamma", "learning_rate", "net_arch", "score"]
    lines = [line for line in ax.get_lines() if len(line.get_xdata()) == 4]
    scored = fleet.analysis.scored
    assert len(lines) == len(scored) == 12
    scores = [p.score or 0.0 for p in scored]
    expected = {
        (
            round((p.values["gamma"] - 0.9) / 0.099, 6),
            round((np.log10(p.values["learning_rate"]) + 4) / 2, 6),  # loguniform [1e-4, 1e-2]: a log axis
            0.0 if p.values["net_arch"] == [64, 64] else 1.0,
            round(((p.score or 0.0) - min(scores)) / (max(scores) - min(scores)), 6),
        )
        for p in scored
    }
    assert {tuple(round(float(y), 6) for y in line.get_ydata()) for line in lines} == expected


def test_the_pareto_figure_draws_every_scored_draw_and_marks_the_front(fleet_dir: Path) -> None:
    fleet = read_series(fleet_dir).fleet
    assert fleet is not None and fleet.analysis is not None
    ax = pareto_front(fleet).axes[0]
    rest, front = (c.get_offsets() for c in ax.collections)
    analysis = fleet.analysis
    assert {(float(x), float(y)) for x, y in front} == {(p.cost_usd, p.score) for p in analysis.front}
    assert {(float(x), float(y)) for x, y in rest} == {(p.cost_usd, p.score) for p in analysis.scored if not p.pareto}
    assert ax.collections[1].get_facecolor()[0][:3] == pytest.approx(to_rgb(TRAIN_COLOR))


def test_the_page_has_the_search_section_with_its_figures_inline(fleet_dir: Path) -> None:
    series = read_series(fleet_dir)
    figures = plots(series)
    html = page(series, figures)
    assert network_references(html) == []
    section = html[html.index('<section id="search">') : html.index("</section>")]
    for name in SEARCH_FIGURES:
        assert f'<figure id="{name}">' in section and f'<figure id="{name}">' not in html.replace(section, "")
    assert section.count('src="data:image/png;base64,') == 2
    assert '<td class="l">learning_rate</td>' in section and "PED-ANOVA" in section


# ----- in a real browser -----


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Chromium]:
    chromium = required_tool("chromium", "the browser test of the search report")
    profile = tmp_path / "chromium-profile"
    with Chromium(chromium, profile) as browser:
        yield browser
    shutil.rmtree(profile, ignore_errors=True)


def _near(pixels: np.ndarray, color: tuple[float, float, float], tolerance: float = 14.0) -> int:
    return int(np.all(np.abs(pixels - np.array(color) * 255) <= tolerance, axis=-1).sum())


VIRIDIS_DARK = (0.267, 0.005, 0.329)  # viridis at 0: the best draw's line in parallel coordinates


def test_chromium_renders_the_search_section_offline(
    fleet_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], browser: Chromium
) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(fleet_dir), "--html", str(out)]) == 0
    requested = browser.load(out.resolve().as_uri())
    assert requested[0] == out.resolve().as_uri()
    assert [url for url in requested[1:] if not url.startswith("data:image/png;base64,")] == []
    assert len(requested) == 1 + out.read_text().count('src="data:image/png;base64,')
    with Image.open(browser.screenshot("#search", tmp_path / "search.png")) as image:
        shot = np.asarray(image.convert("RGB"), dtype=float)
    # The control: the same page with its figures' data broken, as a page whose plots failed looks.
    broken = tmp_path / "broken.html"
    broken.write_text(re.sub(r"base64,[^\"]+", "base64,bm90IGEgcG5n", out.read_text()))
    browser.load(broken.resolve().as_uri())
    with Image.open(browser.screenshot("#search", tmp_path / "broken.png")) as image:
        control = np.asarray(image.convert("RGB"), dtype=float)
    # The section holds both figures: the best draw's dark line and colour bar, the front's red dots.
    assert shot.shape[0] > 900 and shot.shape[1] >= 1200, shot.shape
    assert _near(shot, VIRIDIS_DARK) > 500 and _near(shot, to_rgb(TRAIN_COLOR)) > 300
    assert _near(control, VIRIDIS_DARK) == 0 and _near(control, to_rgb(TRAIN_COLOR)) == 0
