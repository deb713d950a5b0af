"""The one injectable clock: wall time for records, monotonic time for schedules and back-off."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """What the supervisor and the sampler need to know about time."""

    def time(self) -> float:
        """Unix time in seconds (for records and for lining up with job events)."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary start, never going backwards (for schedules)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait `seconds`."""
        ...


class SystemClock:
    """The real clock."""

    def time(self) -> float:
        """`time.time()`."""
        return time.time()

    def monotonic(self) -> float:
        """`time.monotonic()`."""
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        """`time.sleep()`, ignoring non-positive waits."""
        if seconds > 0:
            time.sleep(seconds)
