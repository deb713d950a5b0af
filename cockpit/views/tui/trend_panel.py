"""The trend panel: the run's aggregate SPS and its best return over the last minutes.

Two bar charts on one time axis, each under a label with its latest value (`SPS 6.6k`, `best
return 412`) and with its range on a scale at its left (its top and bottom values; in the label,
`(max 7.0k)` or `(min -180, max 415)`, when the chart has one row), drawn from the state's `Trend`
(`cockpit.core.telemetry.trend`). SPS bars rise from zero, returns from the lowest return. The axis spans
the trend's age rounded up to 1, 2, 5 or 10 minutes, so a young run fills the width. A series
with no value yet says so instead of drawing zeros, and a moment without a value (no job through
its first cycle, none training) is a blank column.

Each column shows the newest point in its time bucket, found by bisection: drawing costs
O(width log points), whatever the history holds.
"""

from __future__ import annotations

import bisect
import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.text import Text

from cockpit.core.telemetry.trend import TREND_EVERY_S, Trend
from cockpit.formatting import si
from cockpit.views.tui.lines_widget import FramePanel
from cockpit.views.tui.timeaxis import bar_rows

SPANS_S = (60.0, 120.0, 300.0, 600.0)
WAITING = "waiting for the first progress"
# A column shows a point up to this long before its right edge, even when its bucket is narrower:
# points come about once a second, and a late one must not leave a hole.
GAP_S = 2 * TREND_EVERY_S


def span_for(trend: Trend, now: float) -> float:
    """The axis's span: the trend's age rounded up to one of `SPANS_S` (the longest at most)."""
    age = now - trend.t[0] if len(trend) else 0.0
    return next((span for span in SPANS_S if age <= span), SPANS_S[-1])


def columns(
    times: Sequence[float], values: Sequence[float | None], right: float, step: float, width: int
) -> list[float | None]:
    """For each of `width` buckets of `step` seconds ending at `right`, the value of the newest
    point in it (or, for a bucket narrower than `GAP_S`, within `GAP_S` before its end); None
    where there is none. `times` are increasing. One bisection per bucket."""
    gap = max(step, GAP_S)
    out: list[float | None] = []
    for i in range(width):
        edge = right - (width - 1 - i) * step
        j = bisect.bisect_left(times, edge) - 1
        out.append(values[j] if j >= 0 and times[j] >= edge - gap else None)
    return out


def heights(values: Sequence[float | None], lo: float, hi: float, rows: int) -> list[float | None]:
    """`values` on a 0..1 scale from `lo` to `hi` for bars `rows` tall, every known value at least
    one eighth of a row high (so a value at the bottom of the range is not taken for no value)."""
    floor = 1 / (8 * max(1, rows))
    if hi <= lo:
        return [None if v is None else 1.0 for v in values]
    return [None if v is None else floor + (1 - floor) * max(0.0, min(1.0, (v - lo) / (hi - lo))) for v in values]


def fmt_return(value: float) -> str:
    """A return in a few characters: -0.5, 21.5, 487, -1.2k."""
    if abs(value) >= 1000:
        return ("-" if value < 0 else "") + si(abs(value))
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}"


def fmt_span(seconds: float) -> str:
    """The axis's left end: -1m, -10m."""
    return f"-{seconds / 60:.0f}m"


@dataclass(frozen=True)
class _Series:
    """One chart of the panel: its name, its points' values, their range (None before the first
    known value; from zero with `from_zero`), how a value is written, its colour and its rows."""

    name: str
    values: Sequence[float | None]
    range: tuple[float, float] | None
    fmt: Callable[[float], str]
    style: str
    rows: int
    from_zero: bool = False

    def scale(self) -> tuple[str, ...]:
        """The top and bottom of its scale as written (none before a value is known)."""
        return (self.fmt(self.range[1]), self.fmt(self.range[0])) if self.range is not None and self.rows else ()

    def detail(self) -> str:
        """Its range in words: "max 4.6k" from zero, or "min -200, max 487"."""
        assert self.range is not None
        lo, hi = self.range
        return f"max {self.fmt(hi)}" if self.from_zero else f"min {self.fmt(lo)}, max {self.fmt(hi)}"


class TrendPanel(FramePanel):
    """Renders the trend of the newest `Frame` given to `show()`; owns no run state."""

    COMPONENT_CLASSES = {"trend--title", "trend--label", "trend--sps", "trend--return"}  # noqa: RUF012

    def lines(self) -> list[Text]:
        frame = self._frame
        if frame is None:
            return [Text(WAITING, style=self.component_style("trend--label"))]
        trend, now = frame.state.trend, frame.state.now
        width, height = max(1, self.size.width), self.size.height
        axis = height >= 5  # room for a chart row under each label as well
        charts = max(0, height - (3 if axis else 2))
        sps_range = (0.0, trend.sps_max) if trend.sps_max is not None else None
        series = [
            _Series("SPS", trend.sps, sps_range, si, "trend--sps", (charts + 1) // 2, from_zero=True),
            _Series("best return", trend.best_return, trend.return_range, fmt_return, "trend--return", charts // 2),
        ]
        # One scale column for both charts, so their columns mean the same moments.
        scale_w = max((len(text) + 1 for one in series for text in one.scale()), default=0)
        chart_w = max(1, width - scale_w)
        span = span_for(trend, now)
        # Buckets on fixed multiples of their width, as in the GPU panel: a column keeps its moment
        # as time passes, and the picture moves a whole column at a time.
        step = span / chart_w
        right = (math.floor(now / step) + 1) * step
        lines: list[Text] = []
        for one in series:
            lines += self._series(one, trend.t, right, step, chart_w, scale_w)
        if axis:
            left = fmt_span(span)
            axis_line = f"{'':{scale_w}}{left}{'now':>{max(4, chart_w - len(left))}}"
            lines.append(Text(axis_line, style=self.component_style("trend--label")))
        for line in lines:
            line.truncate(width, overflow="ellipsis")
        return lines

    def _series(
        self, one: _Series, times: Sequence[float], right: float, step: float, chart_w: int, scale_w: int
    ) -> list[Text]:
        """The series' label, then its chart with its range on a scale at the left (the range in
        the label when the chart is one row tall)."""
        label, title = self.component_style("trend--label"), self.component_style("trend--title")
        if one.range is None:  # the message over its chart's rows, in place of bars at zero
            words = textwrap.wrap(WAITING, max(1, chart_w + scale_w - 1))
            if len(words) > one.rows:
                return [Text(f"{one.name}: {WAITING}", style=label)] + [Text() for _ in range(one.rows)]
            return (
                [Text(one.name, style=title)]
                + [Text(f" {line}", style=label) for line in words]
                + [Text() for _ in range(one.rows - len(words))]
            )
        lo, hi = one.range
        latest = one.values[-1]
        head = Text(f"{one.name} {one.fmt(latest) if latest is not None else '-'}", style=title)
        if one.rows <= 1:
            head.append(f" ({one.detail()})", style=label)
        out = [head]
        if not one.rows:
            return out
        values = heights(columns(times, one.values, right, step, chart_w), lo, hi, one.rows)
        top, bottom = one.scale()
        style = self.component_style(one.style)
        for row, bars in enumerate(bar_rows(values, one.rows, 1.0)):
            scale = top if row == 0 else bottom if row == one.rows - 1 else ""
            out.append(Text(f"{scale:>{scale_w - 1}} ", style=label).append(bars, style=style))
        return out
