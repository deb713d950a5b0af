"""The front ends the command line hands to commands: the headless view and the cockpit (TUI).

Textual is imported only when the cockpit is actually opened, so a headless run never pays for it.
"""

from __future__ import annotations

from pathlib import Path

from cockpit.contract.rundir import RunDir
from cockpit.core.feed.source import Frame, Replay, RunSource
from cockpit.core.session.run_session import View, exit_code
from cockpit.views.headless import HeadlessView, summary_lines


class TerminalFrontEnds:
    """`session.front_ends.FrontEnds` on this terminal: `HeadlessView` and the Textual cockpit."""

    def headless(self) -> View:
        """A fresh headless view on stdout."""
        return HeadlessView()

    def watch(self, source: RunSource, *, who: str) -> int:
        """Run the cockpit on `source`, then say what became of the run."""
        from cockpit.views.tui.app import make_app

        return after_view(make_app(source).run(), source, who=who)

    def start_screen(self) -> int:
        """The start screen (bare `cockpit`): pick and start a run, or reopen a recent one."""
        from cockpit.views.tui.app import make_app
        from cockpit.views.tui.opener import LocalOpener

        app = make_app(opener=LocalOpener())
        frame = app.run()
        return after_view(frame, app.source, who="cockpit") if app.source is not None else 0


def after_view(frame: Frame | None, source: RunSource, *, who: str) -> int:
    """The exit code and closing lines once the viewer quit: 0 when the run goes on without it
    (or was a replay), else the run's own exit code (0 done, 1 failed, 130 stopped)."""
    if frame is None or isinstance(source, Replay):
        return 0
    state = frame.state
    if frame.link_error is None and state.status.live:
        print(f"{who}: the run goes on in the background; see it again with: cockpit attach {state.run_dir}")
        return 0
    for line in summary_lines(state, str(RunDir(Path(state.run_dir)).run_toml)):
        print(line)
    return exit_code(state)
