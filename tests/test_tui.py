"""Pilot tests of the cockpit screens against a scripted source (no processes, no sockets)."""

from __future__ import annotations

import gc
from dataclasses import replace
from pathlib import Path

import pytest
from textual.widgets import Input, Static

from cockpit.contract.advice import Advice
from cockpit.contract.controls import AddJob, ApplyAdvice, KillJob, RestartJob, StopAll, StopJob
from cockpit.contract.states import RunStatus
from cockpit.core.feed.source import RunSource
from cockpit.core.record.find_runs import RecentRun
from cockpit.views.tui.app import NEVER, make_app
from cockpit.views.tui.cockpit_screen import CockpitScreen
from cockpit.views.tui.detail_screen import JobDetailScreen
from cockpit.views.tui.footer import Keys
from cockpit.views.tui.gpu_panel import GpuPanel
from cockpit.views.tui.help_screen import HelpScreen
from cockpit.views.tui.jobs_table import JobsTable
from cockpit.views.tui.quit_screen import QuitScreen
from cockpit.views.tui.start_screen import LaunchChoice, LaunchError, StartScreen
from tests.tui_fakes import NOW, ScriptedReplay, ScriptedSource, frame, job_view

SIZE = (100, 30)


def _cell(app, job: str, column: str) -> str:
    return app.screen.query_one(JobsTable).cell(job, column)


async def test_each_control_reaches_the_supervisor() -> None:
    source = ScriptedSource(frame())
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.screen.check_action("apply_advice", ()) is False  # no advice, no A in the footer
        await pilot.press("a")
        await pilot.press("down", "s")  # cursor on job 001
        await pilot.press("r", "k", "S")
        await pilot.pause()
    assert source.commands == [AddJob(), StopJob("001"), RestartJob("001"), KillJob("001"), StopAll()]


async def test_rows_update_in_place_and_the_cursor_follows_its_job() -> None:
    source = ScriptedSource(frame())
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("down", "down")
        table = app.screen.query_one(JobsTable)
        assert table.selected_job == "002"
        assert _cell(app, "002", "status") == "running"
        later = frame(now=NOW + 1)
        jobs = list(later.state.jobs)
        jobs[2] = replace(jobs[2], state="failed", steps=777_000, error="boom")
        jobs.append(job_view(4, gpu=True, now=NOW + 1, state="queued"))
        source.current = replace(later, state=replace(later.state, jobs=tuple(jobs)))
        await pilot.pause(0.5)
        assert _cell(app, "002", "status") == "failed"
        assert "777k" in _cell(app, "002", "steps")
        assert _cell(app, "004", "status") == "queued"
        assert table.row_count == 5
        assert table.selected_job == "002"


async def test_enter_opens_the_job_detail_and_escape_returns() -> None:
    app = make_app(ScriptedSource(frame()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("down", "enter")
        await pilot.pause(0.3)
        assert isinstance(app.screen, JobDetailScreen)
        assert app.screen.job_id == "001"
        config = str(app.screen.query_one("#config", Static).render())
        assert "env = LunarLander-v3" in config
        assert "n_envs = 16" in config
        assert "step 40,000" in str(app.screen.query_one("#checkpoints", Static).render())
        assert "max -10.0" in str(app.screen.query_one("#curve-label").render())
        await pilot.press("escape")
        assert isinstance(app.screen, CockpitScreen)


async def test_quit_can_leave_the_run_going() -> None:
    source = ScriptedSource(frame())
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("q")
        assert isinstance(app.screen, QuitScreen)
        await pilot.press("l")
        await pilot.pause()
    assert source.commands == []
    assert app.return_value is not None and app.return_value.state.status is RunStatus.RUNNING
    assert source.closed


async def test_quit_with_stop_all_waits_for_the_jobs_to_stop() -> None:
    source = ScriptedSource(frame())
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("q", "s")
        await pilot.pause(0.5)
        assert source.commands == [StopAll()]
        assert app.is_running  # still showing the jobs checkpointing
        ended = frame(now=NOW + 5, status=RunStatus.INTERRUPTED, state="stopped")
        source.current = ended
        await pilot.pause(0.5)
    assert app.return_value is ended


async def test_escape_cancels_the_quit_dialog() -> None:
    source = ScriptedSource(frame())
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("q", "escape")
        assert isinstance(app.screen, CockpitScreen)
        assert app.is_running
    assert source.commands == []


async def test_a_refused_command_is_reported_not_raised() -> None:
    source = ScriptedSource(frame(), refuse="the run's control socket is gone")
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("s")
        await pilot.pause()
        assert any("control socket is gone" in n.message for n in app._notifications)


async def test_an_ended_run_takes_no_commands_and_quits_without_asking() -> None:
    source = ScriptedSource(frame(status=RunStatus.DONE, state="done"))
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("a", "s", "S", "q")
        await pilot.pause()
    assert source.commands == []
    assert not app.is_running


async def test_replay_scrubs_and_refuses_controls() -> None:
    source = ScriptedReplay(frame(status=RunStatus.DONE))
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("left", "left", "left_square_bracket", "s")
        await pilot.pause()
        assert source.seeks == [NOW - 5, NOW - 10, NOW - 70]
        assert "replay" in str(app.screen.query_one("#run-header").render())
        await pilot.press("home")
        assert source.seeks[-1] == NOW - 600
    assert source.commands == []


async def test_without_a_gpu_the_panel_says_so() -> None:
    app = make_app(ScriptedSource(frame(gpu=False)))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        text = "\n".join(line.plain for line in app.screen.query_one(GpuPanel).lines())
        assert "No GPU: CPU training" in text
        assert app.screen.has_class("-no-gpu")


class FakeOpener:
    """Records what the start screen asks for."""

    physical_cores = 8

    def __init__(self, source: RunSource, fail: str | None = None) -> None:
        self.source = source
        self.fail = fail
        self.started: list[LaunchChoice] = []
        self.opened: list[Path] = []

    def start(self, choice: LaunchChoice) -> RunSource:
        self.started.append(choice)
        if self.fail:
            raise LaunchError(self.fail)
        return self.source

    def open(self, run_dir: Path) -> RunSource:
        self.opened.append(run_dir)
        return self.source

    def recent(self) -> list[RecentRun]:
        return [RecentRun(Path("runs/r1"), "cartpole", "CartPole-v1", "done", 2, "2026-11-22T00:00:00Z")]


async def test_launcher_starts_a_run_and_shows_its_cockpit() -> None:
    opener = FakeOpener(ScriptedSource(frame()))
    app = make_app(opener=opener)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, StartScreen)
        jobs = app.screen.query_one("#jobs", Input)
        jobs.value = "12"
        await pilot.pause()
        assert "oversubscribed" in str(app.screen.query_one("#budget", Static).render())
        jobs.value = "4"
        app.screen.query_one("#timesteps", Input).value = "5000"
        await pilot.press("ctrl+r")
        await pilot.pause(0.5)
        assert isinstance(app.screen, CockpitScreen)
    assert opener.started == [LaunchChoice("cartpole", None, 4, 5000)]


async def test_launcher_reports_a_start_failure_and_stays() -> None:
    opener = FakeOpener(ScriptedSource(frame()), fail="--env Nope-v0: unknown env")
    app = make_app(opener=opener)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+r")
        await pilot.pause(0.5)
        assert isinstance(app.screen, StartScreen)
        assert "unknown env" in str(app.screen.query_one("#launch-error", Static).render())


async def test_launcher_reopens_a_recent_run() -> None:
    opener = FakeOpener(ScriptedReplay(frame(status=RunStatus.DONE)))
    app = make_app(opener=opener)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.screen.query_one("#recent").focus()
        await pilot.press("enter")
        await pilot.pause(0.3)
        assert isinstance(app.screen, CockpitScreen)
    assert opener.opened == [Path("runs/r1")]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "no-gpu"])
def test_main_screen_snapshot(snap_compare, gpu: bool) -> None:
    warnings = ("warning: 4 parallel jobs x 2 env thread(s) = 8 env threads on 2 physical cores",)
    app = make_app(ScriptedSource(frame(gpu=gpu, warnings=warnings)))
    assert snap_compare(app, terminal_size=(100, 30))


async def test_advice_is_shown_with_its_reasons_and_the_selected_item_is_applied() -> None:
    suggestions = (
        Advice("jobs", "1", "4", "train phases overlap", "GPU 25 % on average but 80 % while a job trains"),
        Advice("n_envs", "32", "16", "less contention", "CPU 97 % across 16 logical cores, GPU 12 %"),
    )
    source = ScriptedSource(replace(frame(), state=replace(frame().state, suggestions=suggestions)))
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = str(app.screen.query_one("#advice", Static).render())
        assert "▶ jobs 1 -> 4: train phases overlap (GPU 25 % on average but 80 % while a job trains)" in text
        assert app.screen.check_action("apply_advice", ()) is True  # the footer offers A
        await pilot.press("v", "A")
        await pilot.pause()
    assert source.commands == [ApplyAdvice("n_envs", "16")]


async def test_the_footer_keeps_its_keys_across_screens_and_follows_what_is_offered() -> None:
    source = ScriptedSource(frame())
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        footer = app.screen.query_one(Keys)
        keys = list(footer.query("FooterKey"))
        assert "Stop all" in [key.description for key in keys]
        assert "Apply advice" not in [key.description for key in keys]
        # Help and back, twice: the cockpit's footer is not built again (a widget per key, each
        # styled and laid out: the slow part of closing a screen on a busy machine).
        for _ in range(2):
            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            await pilot.press("question_mark")
            await pilot.pause(0.3)
            assert isinstance(app.screen, CockpitScreen)
        assert all(new is old for new, old in zip(footer.query("FooterKey"), keys, strict=True))
        # Advice arrives: the footer offers A.
        advice = (Advice("jobs", "1", "4", "train phases overlap", "GPU 25 % on average"),)
        source.current = replace(frame(now=NOW + 1), state=replace(frame(now=NOW + 1).state, suggestions=advice))
        await pilot.pause(0.5)
        assert "Apply advice" in [key.description for key in footer.query("FooterKey")]


async def test_the_app_runs_full_collections_itself_while_it_runs() -> None:
    before = gc.get_threshold()
    app = make_app(ScriptedSource(frame()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        # Python's own full collections would start mid-key (they follow allocations, and a key
        # redraws a screen); the app's timer runs them after a refresh instead.
        assert gc.get_threshold() == (before[0], before[1], NEVER)
    assert gc.get_threshold() == before
