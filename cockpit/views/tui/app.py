"""The Textual app: the launcher (bare `cockpit`) or the cockpit over one run's `RunSource`.

`make_app()` is the only way in, so tests hand it a scripted source and fake openers. The app's
return value is the last `Frame` shown (None if none arrived), from which the command line tells
whether the run ended or was left running.
"""

from __future__ import annotations

import gc

from textual.app import App

from cockpit.core.feed import Frame, RunSource
from cockpit.views.tui.cockpit_screen import CockpitScreen
from cockpit.views.tui.launcher_screen import LauncherScreen, Opener


class CockpitApp(App[Frame | None]):
    """One source at a time; the launcher swaps in the run it starts or reopens."""

    CSS_PATH = "cockpit.tcss"
    TITLE = "cockpit"
    ENABLE_COMMAND_PALETTE = False

    def __init__(self, source: RunSource | None, opener: Opener | None) -> None:
        super().__init__()
        self.source = source
        self.opener = opener

    def on_mount(self) -> None:
        # Everything built so far (Textual, the stylesheet, the screens) lives as long as the app;
        # moving it out of the collector's reach keeps full collections short, and with them the
        # pauses a key press could land in.
        self.call_after_refresh(gc.freeze)
        if self.source is not None:
            self.push_screen(CockpitScreen(self.source))
        elif self.opener is not None:
            self.push_screen(LauncherScreen(self.opener))
        else:
            raise ValueError("make_app needs a source or an opener")

    def open_run(self, source: RunSource) -> None:
        """Show the cockpit for `source` (a run just started, attached or replayed)."""
        self.source = source
        self.switch_screen(CockpitScreen(source))

    def on_unmount(self) -> None:
        if self.source is not None:
            self.source.close()


def make_app(source: RunSource | None = None, *, opener: Opener | None = None) -> CockpitApp:
    """The cockpit on `source`, or the launcher when only an `opener` is given."""
    return CockpitApp(source, opener)
