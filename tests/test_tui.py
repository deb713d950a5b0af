"""Pilot tests of the cockpit screens against a scripted source (no processes, no sockets)."""

from __future__ import annotations

import gc
from dataclasses import replace
from pathlib import Path

import pytest
from rich.text import Text
from textual.geometry import Region
from textual.widgets import Input, Static

from cockpit.contract.advice import Advice
from cockpit.contract.controls import AddJob, ApplyAdvice, KillJob, RestartJob, StopAll, StopJob
from cockpit.contract.states import RunStatus
from cockpit.core.feed.source import Frame, RunSource
from cockpit.core.record.find_runs import RecentRun
from cockpit.views.tui import cockpit_screen
from cockpit.views.tui.advice_panel import AdvicePanel
from cockpit.views.tui.app import NEVER, make_app
from cockpit.views.tui.cockpit_screen import CockpitScreen
from cockpit.views.tui.detail_screen import JobDetailScreen
from cockpit.views.tui.footer import Keys
from cockpit.views.tui.gpu_panel import GpuPanel
from cockpit.views.tui.help_screen import HelpScreen
from cockpit.views.tui.jobs_table import JobsTable
from cockpit.views.tui.quit_screen import QuitScreen
from cockpit.views.tui.report_screen import ReportScreen
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


# ----- a run that is over, the layout, the advice (issue 33) -----

# What AttachSource says when the run's socket closes: after a final state too, since a run that
# ends closes its socket once every viewer fetched its last frame.
CLOSED = "lost the run in /home/u/runs/20261122T010000Z-heavy-LunarLander-v3: the run closed the connection"


def _ended(status: RunStatus, job_state: str) -> Frame:
    """The last frame of a run that ended `status`, as a viewer attached to it holds it."""
    return replace(frame(status=status, state=job_state), link_error=CLOSED)


def _offered(app) -> list[str]:
    return [key.description for key in app.screen.query_one(Keys).query("FooterKey")]


@pytest.mark.parametrize(
    ("status", "job_state", "counts"),
    [
        (RunStatus.DONE, "done", "4 done"),
        (RunStatus.FAILED, "failed", "4 failed"),
        (RunStatus.INTERRUPTED, "stopped", "4 stopped"),
    ],
)
async def test_a_run_that_ended_says_how_and_offers_its_report_a_replay_and_quit(
    monkeypatch: pytest.MonkeyPatch, status: RunStatus, job_state: str, counts: str
) -> None:
    ended = _ended(status, job_state)
    replay = ScriptedReplay(frame(status=RunStatus.DONE))
    opened: list[Path] = []
    monkeypatch.setattr(cockpit_screen, "open_replay", lambda run_dir: opened.append(run_dir) or replay)
    monkeypatch.setattr(cockpit_screen, "report_text", lambda run_dir, width: Text(f"report of {run_dir}"))
    app = make_app(ScriptedSource(ended))
    async with app.run_test(size=(140, 36)) as pilot:
        await pilot.pause()
        header = str(app.screen.query_one("#run-header").render())
        assert header == (f"cockpit  heavy on LunarLander-v3  {status} in 10m 20s · {counts} · "
                          "runs/20261122T010000Z-heavy-LunarLander-v3")  # fmt: skip
        assert "lost" not in header and "disconnected" not in header
        line = app.screen.query_one("#ended", Static)
        assert line.display and "r open its report  p replay it  q quit" in str(line.render())
        assert _offered(app) == ["Report", "Replay", "Help", "Quit"]
        await pilot.press("r")
        await pilot.pause()
        assert isinstance(app.screen, ReportScreen)
        assert "report of runs/20261122T010000Z-heavy-LunarLander-v3" in str(
            app.screen.query_one("#report-text", Static).render()
        )
        await pilot.press("escape")
        await pilot.press("p")
        await pilot.pause()
        assert opened == [Path("runs/20261122T010000Z-heavy-LunarLander-v3")]
        assert isinstance(app.screen, CockpitScreen) and app.screen.source is replay
        assert "replay" in str(app.screen.query_one("#run-header").render())
        await pilot.press("q")
        await pilot.pause()
    # Quitting the replay still tells the command line how the run ended; the replay is closed.
    assert app.return_value is ended and replay.closed


async def test_a_run_lost_while_it_ran_still_says_lost() -> None:
    lost = replace(frame(), link_error="lost the run in /home/u/runs/r: the run stopped answering")
    app = make_app(ScriptedSource(lost))
    async with app.run_test(size=(140, 36)) as pilot:
        await pilot.pause()
        header = str(app.screen.query_one("#run-header").render())
        assert "running (disconnected: lost the run in /home/u/runs/r: the run stopped answering)" in header
        assert " in 10m 20s" not in header
        assert str(app.screen.query_one("#ended", Static).render()).startswith("Lost the run while it ran")
        assert "Stop all" not in _offered(app) and "Quit" in _offered(app)


@pytest.mark.parametrize(("jobs", "size"), [(2, (120, 36)), (4, (140, 42)), (12, (140, 42))])
async def test_the_jobs_table_is_as_tall_as_its_rows_and_the_panels_take_the_rest(
    jobs: int, size: tuple[int, int]
) -> None:
    source = ScriptedSource(frame(gpu=False, jobs=jobs))
    app = make_app(source)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        table, top, advice = (
            app.screen.query_one(JobsTable),
            app.screen.query_one("#top"),
            app.screen.query_one("#advice"),
        )
        assert table.size.height == 1 + jobs  # the header and a row per job, no blank rows
        assert advice.outer_size.height == 2  # its top border and "Advice: nothing to act on."
        # Header, panels, table, advice and footer fill the screen: the spare rows went to the panels.
        assert 1 + top.outer_size.height + table.size.height + 2 + 1 == size[1]
        assert top.outer_size.height > 12  # the fixed height the panels had before
        later = frame(gpu=False, jobs=jobs, now=NOW + 1)
        source.current = replace(later, state=replace(later.state, jobs=(*later.state.jobs, job_view(jobs, gpu=False))))
        await pilot.pause(0.5)
        assert table.size.height == 2 + jobs  # one more job: one more row


async def test_with_more_jobs_than_the_screen_holds_the_table_gives_way_to_the_panels_needs() -> None:
    app = make_app(ScriptedSource(frame(gpu=True, jobs=12)))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        table, top = app.screen.query_one(JobsTable), app.screen.query_one("#top")
        assert top.outer_size.height == 12  # the lanes' and cores' rows, at most half the screen
        assert 3 <= table.size.height < 13  # it scrolls, as before
        assert app.screen.query_one(Keys).region.bottom == 24  # nothing pushed off the screen


LONG = Advice(
    "n_envs", "8", "16", "x1.16 on a rollout-bound run",
    "rollout takes 80 % of each cycle and the GPU waits on a single env thread per job while the cores idle",
)  # fmt: skip
OTHER = Advice(
    "jobs", "2", "3", "one more job fills the gaps",
    "GPU 25 % on average but 80 % while a job trains, and the train phases of the four jobs never overlap",
)  # fmt: skip
WARNING = (
    "warning: 4 parallel jobs x 1 env thread(s) = 4 env threads on 2 physical cores; jobs will contend (try --jobs 2)"
)


def _panel_text(panel: AdvicePanel) -> list[str]:
    """What the panel shows on screen, row by row (its top border first)."""
    width, height = panel.outer_size
    return [strip.text for strip in panel.render_lines(Region(0, 0, width, height))]


async def test_long_advice_wraps_whole_and_the_other_items_open_when_selected() -> None:
    state = replace(frame().state, suggestions=(LONG, OTHER), warnings=(WARNING,))
    app = make_app(ScriptedSource(replace(frame(), state=state)))
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        panel = app.screen.query_one(AdvicePanel)
        rows = _panel_text(panel)
        shown = " ".join(" ".join(rows).split())
        # No text lost: the selected item and the warning are there whole, over several rows.
        assert "▶ n_envs 8 -> 16: x1.16 on a rollout-bound run (" + LONG.reason + ")" in shown
        assert WARNING.removeprefix("warning: ") in shown
        other = next(row for row in rows if "jobs 2 -> 3" in row)
        assert other.rstrip().endswith("…")  # the other item: its first line, until selected
        await pilot.press("v")
        await pilot.pause()
        shown = " ".join(" ".join(_panel_text(panel)).split())
        assert "▶ jobs 2 -> 3: one more job fills the gaps (" + OTHER.reason + ")" in shown
