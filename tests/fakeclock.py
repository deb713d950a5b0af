"""A clock that moves only when a test moves it (the `cockpit.core.machine.clock.Clock` protocol)."""

from __future__ import annotations


class FakeClock:
    """Wall and monotonic time are the same number, advanced by `sleep` or by setting `t`."""

    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def time(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += max(0.0, seconds)
