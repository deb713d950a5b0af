"""The run's trend: its aggregate SPS and its best return over the last minutes, for the cockpit's plot.

A `Trend` is part of every `RunState`: a bounded, oldest-first series of points, each the run at
one moment: `sps`, the live throughput of its training jobs together (`throughput.run_sps`, the
header's figure), and `best_return`, the highest `ep_rew_mean` among its jobs (`best_return`;
ended jobs count with their last figure, so a finished agent's score stays in the best). A value
not known at that moment (no job through its first whole cycle, no episode finished yet) is None,
never 0.

The supervisor samples it with its clock through a `TrendRecorder` at most once every
`TREND_EVERY_S` and keeps `TREND_SPAN_S`; a replay rebuilds the same points from the run's events
at whole multiples of `TREND_EVERY_S` (`cockpit.core.record.replay`). Attached viewers get it inside the
state, through `cockpit.core.feed.wire`'s codec: the whole trend in their first frame, then only the
points newer than the newest they hold (`increment`), which they `merge` into it.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property

TREND_EVERY_S = 1.0  # one point a second
TREND_SPAN_S = 600.0  # the last 10 minutes: at most 601 points


@dataclass(frozen=True)
class Trend:
    """Points of the run's trend, oldest first, as three columns of one length: `t` (Unix time,
    increasing), `sps` and `best_return` (None where unknown). Empty before the first point."""

    t: tuple[float, ...] = ()
    sps: tuple[float | None, ...] = ()
    best_return: tuple[float | None, ...] = ()

    def __post_init__(self) -> None:
        if not len(self.t) == len(self.sps) == len(self.best_return):
            raise ValueError(
                f"trend: columns of different lengths (t {len(self.t)}, sps {len(self.sps)}, "
                f"best_return {len(self.best_return)})"
            )

    def __len__(self) -> int:
        return len(self.t)

    @cached_property
    def sps_max(self) -> float | None:
        """The highest aggregate SPS of the points (None when none is known)."""
        return max((v for v in self.sps if v is not None), default=None)

    @cached_property
    def return_range(self) -> tuple[float, float] | None:
        """The lowest and highest best return of the points (None when none is known)."""
        known = [v for v in self.best_return if v is not None]
        return (min(known), max(known)) if known else None

    def since(self, t: float) -> Trend:
        """The points after `t`."""
        first = bisect.bisect_right(self.t, t)
        return Trend(self.t[first:], self.sps[first:], self.best_return[first:]) if first else self


NO_TREND = Trend()


def increment(trend: Trend, held_t: float | None) -> Trend:
    """What a viewer holding `trend`'s points up to `held_t` (its newest point's time, None when it
    holds none) lacks: the points after `held_t`, or the whole trend when `held_t` is not one of its
    moments (a first frame, or a trend started again after the wall clock went back)."""
    if held_t is None or not len(trend) or not trend.t[0] <= held_t <= trend.t[-1]:
        return trend
    return trend.since(held_t)


def merge(held: Trend, new: Trend, now: float, *, span_s: float = TREND_SPAN_S) -> Trend:
    """`held` followed by `new` (an `increment`), without the points older than `span_s` before
    `now`; `new` alone when it does not follow on (a whole trend, sent again). `held` itself when
    `new` is empty: most frames bring no point."""
    if not len(new):
        return held
    if len(held) and new.t[0] <= held.t[-1]:
        return new
    first = bisect.bisect_left(held.t, now - span_s)
    return Trend(held.t[first:] + new.t, held.sps[first:] + new.sps, held.best_return[first:] + new.best_return)


def best_return(returns: Iterable[float | None]) -> float | None:
    """The highest of the jobs' `ep_rew_mean` figures; None when no job has one (or none is finite)."""
    return max((r for r in returns if r is not None and math.isfinite(r)), default=None)


class TrendRecorder:
    """Keeps the run's trend: `observe` is offered the run's figures as often as the caller likes
    (the session's 5 Hz loop) and keeps one point per `every_s`, for the last `span_s`."""

    def __init__(self, *, every_s: float = TREND_EVERY_S, span_s: float = TREND_SPAN_S) -> None:
        self.every_s = every_s
        self.span_s = span_s
        # Bounded by count as well as by age: a clock that jumps cannot make it grow.
        self._points: deque[tuple[float, float | None, float | None]] = deque(maxlen=int(span_s / every_s) + 1)
        self._due: float | None = None  # the monotonic time of the next point
        self._trend = NO_TREND

    def observe(self, monotonic: float, t: float, figures: Callable[[], tuple[float | None, float | None]]) -> Trend:
        """Offer the run's figures at wall time `t` (`monotonic` on the same clock's monotonic
        scale, which schedules the points); return the trend, with `figures()` (its SPS and best
        return) as its newest point when one was due. `figures` is called only then: the caller
        offers five times a second, and a fleet's best return walks every agent."""
        if self._due is not None and monotonic < self._due:
            return self._trend
        sps, best = figures()
        # Regular steps while the caller keeps up; after a stall, the next point a whole step on.
        self._due = self._due + self.every_s if self._due is not None else monotonic + self.every_s
        if self._due <= monotonic:
            self._due = monotonic + self.every_s
        if self._points and t <= self._points[-1][0]:
            self._points.clear()  # the wall clock went back: the old points no longer line up with now
        self._points.append((t, sps, best))
        while self._points[0][0] < t - self.span_s:
            self._points.popleft()
        self._trend = Trend(
            tuple(p[0] for p in self._points), tuple(p[1] for p in self._points), tuple(p[2] for p in self._points)
        )
        return self._trend

    @property
    def trend(self) -> Trend:
        """The trend as of the last point."""
        return self._trend
