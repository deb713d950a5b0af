"""The report screen (`r` once a run is over): `cockpit report RUN_DIR` in a page that scrolls both
ways, drawn at least as wide as the report prints to a file, so its wide tables keep their columns
on a narrow terminal."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import ScrollableContainer
from textual.screen import Screen
from textual.widgets import Static

from cockpit.commands.console import PIPE_WIDTH
from cockpit.commands.report import print_report
from cockpit.views.tui.footer import Keys


def report_text(run_dir: Path, width: int) -> Text:
    """The report of the run in `run_dir` as `cockpit report` prints it `width` columns wide (at
    least `PIPE_WIDTH`), its styles kept; ConfigError (one line) when the run has no readable record."""
    width = max(width, PIPE_WIDTH)
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system="truecolor", record=True)
    print_report(run_dir, console)
    return Text.from_ansi(console.export_text(styles=True))


class ReportScreen(Screen[None]):
    """One run's report, full screen; escape, q or r goes back to the cockpit."""

    BINDINGS = [Binding("escape,q,r", "dismiss", "Close")]  # noqa: RUF012

    def __init__(self, run_dir: Path, text: Text) -> None:
        super().__init__()
        self.run_dir = run_dir
        self.text = text

    def compose(self) -> ComposeResult:
        yield Static(Text(f"report  {self.run_dir}  (cockpit report {self.run_dir})"), id="report-title")
        with ScrollableContainer(id="report"):
            yield Static(self.text, id="report-text")
        yield Keys()
