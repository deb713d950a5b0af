"""A bounded series that keeps its shape as it grows: the job detail's plots and the leak watch's
memory series both hold one."""

from __future__ import annotations

from typing import Generic, TypeVar

P = TypeVar("P")


class Thinned(Generic[P]):
    """A series thinned while it streams in: at most about `2 * limit` points are ever held.

    Points are kept at a stride that doubles whenever the held list grows past `2 * limit`, so
    the kept points stay evenly spread over the whole series; the newest point is always kept.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._stride = 1
        self._count = 0
        self._held: list[P] = []
        self._last: P | None = None
        self._last_held = False

    def add(self, point: P) -> None:
        """Offer the next point of the series."""
        self._last_held = self._count % self._stride == 0
        if self._last_held:
            self._held.append(point)
            if len(self._held) > 2 * self.limit:
                self._held = self._held[::2]  # keeps the first point and every 2·stride-th after it
                self._stride *= 2
                self._last_held = self._count % self._stride == 0
        self._count += 1
        self._last = point

    def points(self) -> tuple[P, ...]:
        """At most `limit` points, evenly spread, the first and the newest included."""
        held = list(self._held)
        if self._count and not self._last_held:
            held.append(self._last)  # type: ignore[arg-type]  # _count > 0: _last is a point
        if len(held) <= self.limit:
            return tuple(held)
        if self.limit < 2:
            return tuple(held[-self.limit :]) if self.limit else ()
        n = len(held)
        return tuple(held[round(i * (n - 1) / (self.limit - 1))] for i in range(self.limit))
