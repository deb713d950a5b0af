"""The run screen's plot of aggregate SPS and best return: its columns, labels and scales, and
snapshots of the screen with a rising trend and before the first progress."""

from __future__ import annotations

from dataclasses import replace

from cockpit.core.telemetry.trend import Trend
from cockpit.views.tui.app import make_app
from cockpit.views.tui.trend_panel import WAITING, TrendPanel, columns, fmt_return, heights, span_for
from tests.tui_fakes import NOW, ScriptedSource, frame, rising_trend


def test_each_column_shows_the_newest_point_of_its_bucket_and_a_gap_stays_blank() -> None:
    times = [100.0, 101.0, 102.0, 110.0, 111.0, 140.0]
    values = [1.0, 2.0, 3.0, None, 5.0, 6.0]
    # Buckets of 10 s ending at 110, 120 ... 160 (a bucket holds its start, not its end).
    assert columns(times, values, 160.0, 10.0, 6) == [3.0, 5.0, None, None, 6.0, None]
    assert columns(times, values, 111.0, 10.0, 1) == [None]  # the newest point of [101, 111) knows no value
    # Buckets narrower than the points' spacing reach back 2 s rather than leave holes.
    assert columns([110.0, 111.0], [4.0, 5.0], 114.0, 0.5, 8) == [4.0, 4.0, 5.0, 5.0, 5.0, 5.0, None, None]
    assert columns([], [], 10.0, 1.0, 3) == [None, None, None]


def test_bars_rise_from_the_bottom_of_the_range_and_a_known_value_is_never_invisible() -> None:
    assert heights([None, 0.0, 50.0, 100.0], 0.0, 100.0, 2) == [None, 1 / 16, 1 / 16 + 15 / 16 / 2, 1.0]
    assert heights([-3.0, -3.0], -3.0, -3.0, 1) == [1.0, 1.0]  # a flat series: full bars, the label says its value


def test_the_axis_spans_the_trends_age_rounded_up() -> None:
    assert span_for(Trend(), NOW) == 60.0
    assert span_for(rising_trend(seconds=90), NOW) == 120.0
    assert span_for(rising_trend(seconds=600), NOW) == 600.0
    assert span_for(rising_trend(seconds=600), NOW + 3600) == 600.0  # an old history: the longest span
    assert [fmt_return(v) for v in (-0.5, 21.54, -162.5, 487.0, -1234.0)] == ["-0.5", "21.5", "-162", "487", "-1.2k"]


async def test_the_panel_labels_each_series_with_its_latest_value_and_its_range() -> None:
    app = make_app(ScriptedSource(frame(gpu=False)))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        lines = [line.plain for line in app.screen.query_one(TrendPanel).lines()]
    assert lines[0] == "SPS 6.6k"
    best = next(i for i, line in enumerate(lines) if line.startswith("best return"))
    # The SPS scale: 0 to its max, over however many rows the panel has (it takes the screen's spare height).
    assert lines[1].startswith("6.6k ") and lines[best - 1].startswith("   0 ")
    assert lines[best] == "best return -0.5"
    assert lines[best + 1].startswith("-0.5 ") and lines[-2].startswith("-162 ")  # the returns' range
    assert lines[-1].split() == ["-10m", "now"]
    bars = lines[1:best]
    assert all(set(row[5:]) <= set(" ▁▂▃▄▅▆▇█") for row in bars)
    # A rising SPS: the top row fills from the right, the bottom row is full once SPS is known.
    assert bars[0][5:].rstrip()[-1] == "█" and bars[0][5] == " " and bars[-1].endswith("█")


async def test_a_one_row_chart_puts_its_range_in_its_label() -> None:
    app = make_app(ScriptedSource(frame(gpu=False, jobs=1)))
    async with app.run_test(size=(160, 14)) as pilot:
        await pilot.pause()
        panel = app.screen.query_one(TrendPanel)
        assert panel.size.height == 5
        lines = [line.plain for line in panel.lines()]
    assert lines[0] == "SPS 1.5k (max 1.5k)"
    assert lines[1].startswith("1.5k ")  # its one row still has the top of its scale
    assert lines[2] == "best return -120 (min -282, max -120)"


def test_the_run_screen_plots_a_rising_sps_and_best_return(snap_compare) -> None:
    # Four minutes into the run: the axis spans 5 minutes; SPS is known after 40 s, returns after 60 s.
    rising = frame(trend=rising_trend(NOW, seconds=240, sps=6600.0, best=-0.5))
    rising = replace(rising, state=replace(rising.state, started_at=NOW - 240))
    assert snap_compare(make_app(ScriptedSource(rising)), terminal_size=(120, 30))


def test_before_the_first_progress_the_plot_says_it_is_waiting(snap_compare) -> None:
    # 20 s into the run: no job through its first whole cycle, no episode finished.
    young = Trend(tuple(NOW - 20 + k for k in range(21)), (None,) * 21, (None,) * 21)
    starting = frame(trend=young, sps=None, ep_rew_mean=None, eta_s=None)
    starting = replace(starting, state=replace(starting.state, started_at=NOW - 20, eta_s=None))
    assert WAITING == "waiting for the first progress"
    assert snap_compare(make_app(ScriptedSource(starting)), terminal_size=(100, 30))
