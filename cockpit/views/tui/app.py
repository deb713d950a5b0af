"""The Textual app: the start screen (bare `cockpit`) or the cockpit over one run's `RunSource`.

`make_app()` is the only way in, so tests hand it a scripted source and fake openers. The app's
return value is the last `Frame` shown (None if none arrived), from which the command line tells
whether the run ended or was left running.
"""

from __future__ import annotations

import gc

from textual.app import App

from cockpit.core.feed.source import Frame, RunSource
from cockpit.views.tui.cockpit_screen import CockpitScreen
from cockpit.views.tui.start_screen import Opener, StartScreen

# How often the app runs a full collection itself; Python's own are turned off while it runs.
FULL_GC_S = 30.0
NEVER = 1 << 30


class CockpitApp(App[Frame | None]):
    """One source at a time; the start screen swaps in the run it starts or reopens."""

    CSS_PATH = "cockpit.tcss"
    TITLE = "cockpit"
    ENABLE_COMMAND_PALETTE = False

    def __init__(self, source: RunSource | None, opener: Opener | None) -> None:
        super().__init__()
        self.source = source
        self.opener = opener
        self._replays: list[RunSource] = []

    def on_mount(self) -> None:
        self.call_after_refresh(self._quiet_gc)
        if self.source is not None:
            self.push_screen(CockpitScreen(self.source))
        elif self.opener is not None:
            self.push_screen(StartScreen(self.opener))
        else:
            raise ValueError("make_app needs a source or an opener")

    def open_run(self, source: RunSource) -> None:
        """Show the cockpit for `source` (a run just started, attached or replayed)."""
        self.source = source
        self.switch_screen(CockpitScreen(source))

    def replay_ended(self, replay: RunSource, ended: Frame) -> None:
        """Show a replay of the run that just ended in place of its cockpit. `source` stays the
        run's own (the command line reads how it ended from it) and quitting returns `ended`;
        the replay is closed with the app."""
        self._replays.append(replay)
        self.switch_screen(CockpitScreen(replay, outcome=ended))

    def _quiet_gc(self) -> None:
        """Keep the collector's pauses out of key presses.

        Everything built so far (Textual, the stylesheet, the screens) lives as long as the app:
        moving it out of the collector's reach keeps full collections short. What is built later
        is mostly drawn lines, and many of Textual's Strips (a line) cache themselves, so only the
        collector frees them; a full collection walks them all, 10-50 ms of a busy core. Python
        starts one when enough objects were allocated, which is when a key redraws a screen: on
        a 500-agent fleet a key that met one took 170-380 ms. So the app collects every
        `FULL_GC_S` itself, after a refresh (not between a key and its screen); young cycles are
        still collected as they come."""
        gc.freeze()
        self._gc_threshold = gc.get_threshold()
        young, middle, _ = self._gc_threshold
        gc.set_threshold(young, middle, NEVER)
        self.set_interval(FULL_GC_S, lambda: self.call_after_refresh(gc.collect))

    _gc_threshold: tuple[int, int, int] | None = None

    def on_unmount(self) -> None:
        if self._gc_threshold is not None:
            gc.set_threshold(*self._gc_threshold)
        if self.source is not None:
            self.source.close()
        for replay in self._replays:
            replay.close()


def make_app(source: RunSource | None = None, *, opener: Opener | None = None) -> CockpitApp:
    """The cockpit on `source`, or the start screen when only an `opener` is given."""
    return CockpitApp(source, opener)
