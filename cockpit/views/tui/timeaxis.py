"""Pure drawing arithmetic for the time-aligned panels: buckets, peaks, dominant phases, bars.

Every row the GPU panel draws (utilization, memory, one phase lane per job) covers the same
window `[left, right)` split into the same `width` buckets, so a column means the same moment in
every row. That is what lets a user see a training phase line up with a utilization burst.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

BLOCKS = " ▁▂▃▄▅▆▇█"


def bucket_max(points: Sequence[tuple[float, float]], left: float, right: float, width: int) -> list[float | None]:
    """The largest value in each of `width` equal buckets of `[left, right)` (None where a bucket
    holds no point). `points` are `(t, value)`, sorted by t. Peaks, not means: a 40 ms burst must
    stay visible in a bucket a second wide."""
    out: list[float | None] = [None] * width
    if width <= 0 or right <= left:
        return out
    step = (right - left) / width
    start = bisect.bisect_left(points, left, key=lambda p: p[0])
    for t, value in points[start:]:
        if t >= right:
            break
        i = min(width - 1, int((t - left) / step))
        current = out[i]
        out[i] = value if current is None else max(current, value)
    return out


def dominant_phases(
    transitions: Sequence[tuple[float, str | None]], left: float, right: float, width: int, *, end: float
) -> list[str | None]:
    """For each bucket of `[left, right)`, the phase that took most of its time (None: no phase or
    in the future). `transitions` are `(t, phase)` sorted by t; the last one lasts until `end`."""
    out: list[str | None] = [None] * width
    if width <= 0 or right <= left or not transitions:
        return out
    step = (right - left) / width
    shares: list[dict[str | None, float]] = [{} for _ in range(width)]
    for k, (t0, phase) in enumerate(transitions):
        t1 = transitions[k + 1][0] if k + 1 < len(transitions) else end
        a, b = max(t0, left), min(t1, right)
        if b <= a or phase is None:
            continue
        first, last = int((a - left) / step), min(width - 1, int((b - left) / step))
        for i in range(first, last + 1):
            lo, hi = left + i * step, left + (i + 1) * step
            overlap = min(b, hi) - max(a, lo)
            if overlap > 0:
                shares[i][phase] = shares[i].get(phase, 0.0) + overlap
    for i, share in enumerate(shares):
        if share and sum(share.values()) >= step * 0.25:  # a sliver of a phase is not a lane cell
            out[i] = max(share, key=lambda p: share[p])
    return out


def bar_rows(values: Sequence[float | None], rows: int, top: float) -> list[str]:
    """Vertical bars, `rows` characters tall, for values on a 0..top scale; returned top row
    first. Each row has one character per value; a missing value is blank."""
    levels = len(BLOCKS) - 1
    lines = []
    for row in range(rows - 1, -1, -1):
        chars = []
        for value in values:
            if value is None or top <= 0:
                chars.append(" ")
                continue
            eighths = round(max(0.0, min(1.0, value / top)) * rows * levels) - row * levels
            chars.append(BLOCKS[max(0, min(levels, eighths))])
        lines.append("".join(chars))
    return lines


def hbar(fraction: float, width: int) -> str:
    """A horizontal bar `width` cells wide, filled to `fraction` (clamped to 0..1) in eighths."""
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    full, part = divmod(eighths, 8)
    partial = "▏▎▍▌▋▊▉"[part - 1] if part else ""
    return ("█" * full + partial).ljust(width)


class LaneCells:
    """`dominant_phases` for one job's lane, frame after frame, computing only the buckets that can
    still change. Buckets are identified by their absolute index (start / width), so a bucket
    that ended before `settled` keeps its phase as the window slides."""

    def __init__(self) -> None:
        self._step = 0.0
        self._final: dict[int, str | None] = {}

    def cells(
        self,
        transitions: Sequence[tuple[float, str | None]],
        left: float,
        right: float,
        width: int,
        *,
        end: float,
        settled: float,
    ) -> list[str | None]:
        """Like `dominant_phases(transitions, left, right, width, end=end)`; buckets ending at or
        before `settled` are remembered (transitions before it must not change any more)."""
        if width <= 0 or right <= left:
            return [None] * max(0, width)
        step = (right - left) / width
        if step != self._step:
            self._step, self._final = step, {}
        k0 = round(left / step)
        out: list[str | None] = []
        while len(out) < width and k0 + len(out) in self._final:
            out.append(self._final[k0 + len(out)])
        done = len(out)
        if done < width:
            start = left + done * step
            first = max(0, bisect.bisect_right(transitions, start, key=lambda tr: tr[0]) - 1)
            fresh = dominant_phases(transitions[first:], start, right, width - done, end=end)
            for i, phase in enumerate(fresh):
                if left + (done + i + 1) * step <= settled:
                    self._final[k0 + done + i] = phase
            out.extend(fresh)
        for k in [k for k in self._final if k < k0]:
            del self._final[k]
        return out
