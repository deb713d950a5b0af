"""Every text a run brings to the TUI (its path and name, an env id, an error, a job's exit reason,
a warning, a fleet's name, a command's refusal) is drawn as it is, never parsed as markup: a `[/`
once crashed the TUI with Textual's MarkupError, and a `[x]` silently disappeared."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rich.text import Text
from textual.geometry import Region
from textual.widget import Widget
from textual.widgets import Static

from cockpit.contract.events import ErrorEvent
from cockpit.contract.states import RunStatus
from cockpit.core.feed.source import JobDetail
from cockpit.core.record.find_runs import RecentRun
from cockpit.views.tui.app import make_app
from cockpit.views.tui.cockpit_screen import CockpitScreen
from cockpit.views.tui.detail_screen import JobDetailScreen
from cockpit.views.tui.jobs_table import JobsTable
from cockpit.views.tui.quit_screen import QuitScreen
from cockpit.views.tui.report_screen import ReportScreen
from cockpit.views.tui.start_screen import StartScreen
from tests.test_tui import FakeOpener
from tests.tui_fakes import NOW, ScriptedSource, fleet_frame, frame

SIZE = (220, 60)
ODD = "a[/]b[x]"  # a closing tag with nothing open (MarkupError), and a tag that would vanish


def drawn(widget: Widget) -> str:
    """What `widget` puts on the screen, line by line (its strips as rendered)."""
    strips = widget.render_lines(Region(0, 0, *widget.outer_size))
    return "\n".join(strip.text for strip in strips)


def screen_text(app: object) -> str:
    """Every widget's drawn text on the current screen, the notifications over it too."""
    screen = app.screen  # type: ignore[attr-defined]
    widgets = [w for w in screen.walk_children(with_self=False) if w.outer_size.area]
    return "\n".join(drawn(w) for w in widgets)


class OddSource(ScriptedSource):
    """A run whose every text holds `ODD`."""

    def detail(self, job_id: str) -> JobDetail:
        base = super().detail(job_id)
        error = ErrorEvent(NOW, "RuntimeError", f"boom {ODD}")
        return replace(base, job_dir=f"runs/{ODD}/jobs/{job_id}", stderr_tail=(f"stderr {ODD}",),
                       events=(*base.events, error))  # fmt: skip


def odd_frame(status: RunStatus = RunStatus.RUNNING):
    base = frame(status=status, error=f"RuntimeError: {ODD}", exit_reason=f"stalled: {ODD}",
                 warnings=(f"warning: {ODD} in a warning",))  # fmt: skip
    state = replace(base.state, run_dir=f"runs/{ODD}", name=f"name{ODD}", env=f"Env{ODD}-v0", preset=f"p{ODD}")
    return replace(base, state=state)


async def test_a_runs_texts_are_drawn_literally_on_the_cockpit_and_its_screens() -> None:
    source = OddSource(odd_frame(), refuse=f"refused: {ODD}")
    app = make_app(source)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.pause()
        shown = screen_text(app)
        assert f"name{ODD}: p{ODD} on Env{ODD}-v0" in shown  # the header
        assert f"Env{ODD}-v0" in drawn(app.screen.query_one(JobsTable))  # each job's env
        assert f"{ODD} in a warning" in shown  # the advice panel's warnings
        await pilot.press("s")  # the source refuses: its error is told in a notification
        await pilot.pause(0.3)
        assert f"refused: {ODD}" in screen_text(app)
        await pilot.press("enter")  # the job's detail: its directory in the title, its stderr
        await pilot.pause(0.5)
        assert isinstance(app.screen, JobDetailScreen)
        shown = screen_text(app)
        assert f"runs/{ODD}/jobs/000" in shown and f"stderr {ODD}" in shown and f"RuntimeError: boom {ODD}" in shown
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("q")  # the quit dialog names the run's directory
        await pilot.pause()
        assert isinstance(app.screen, QuitScreen)
        assert f"cockpit attach runs/{ODD}" in screen_text(app)
        await pilot.press("escape")
        await pilot.pause()
        source.current = odd_frame(RunStatus.FAILED)  # over: the header names the directory
        await pilot.pause(0.5)
        assert isinstance(app.screen, CockpitScreen)
        assert f"runs/{ODD}" in screen_text(app)
        app.push_screen(ReportScreen(Path(f"runs/{ODD}"), Text(f"report body {ODD}")))
        await pilot.pause()
        assert f"report  runs/{ODD}  (cockpit report runs/{ODD})" in screen_text(app)


async def test_a_fleets_name_is_drawn_literally() -> None:
    base = fleet_frame()
    fleet = replace(base.state.fleet, name=f"screen{ODD}")
    app = make_app(ScriptedSource(replace(base, state=replace(base.state, fleet=fleet))))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("f")
        await pilot.pause(0.3)
        assert f"fleet screen{ODD}" in screen_text(app)


class OddOpener(FakeOpener):
    def recent(self) -> list[RecentRun]:
        return [RecentRun(Path(f"runs/r{ODD}"), f"p{ODD}", f"Env{ODD}-v0", "done", 2, "2026-11-22T00:00:00Z",
                          name=f"n{ODD}")]  # fmt: skip


async def test_the_start_screen_draws_recent_runs_and_a_typed_env_ids_error_literally() -> None:
    opener = OddOpener(ScriptedSource(frame()), fail=f"--env Env{ODD}-v0: unknown env")
    app = make_app(opener=opener)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, StartScreen)
        shown = screen_text(app)
        for cell in (f"n{ODD}", Path(f"runs/r{ODD}").name, f"p{ODD}", f"Env{ODD}-v0"):
            assert cell in shown, cell
        await pilot.click("#env")
        await pilot.press(*f"Env{ODD}-v0")  # typed into the env field
        await pilot.press("ctrl+r")
        await pilot.pause(0.5)
        assert opener.started[-1].env == f"Env{ODD}-v0"
        assert f"--env Env{ODD}-v0: unknown env" in drawn(app.screen.query_one("#launch-error", Static))
