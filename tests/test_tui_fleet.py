"""Pilot tests of a fleet in the cockpit: the summary line, the fleet screen (`f`) and its live
figures, and a 500-agent fleet whose jobs list is limited as the supervisor limits it."""

from __future__ import annotations

import io
from dataclasses import replace

from rich.console import Console

from cockpit.views.tui.app import make_app
from cockpit.views.tui.cockpit_screen import CockpitScreen, FleetLine
from cockpit.views.tui.fleet_screen import FleetScreen, FleetTable, Notices, leader_rows
from cockpit.views.tui.gpu_panel import GpuPanel, lane_jobs
from cockpit.views.tui.help_screen import HelpScreen, help_text
from cockpit.views.tui.jobs_table import JobsTable
from tests.tui_fakes import NOW, ScriptedSource, agent_id, fleet_frame, fleet_view, frame

SIZE = (100, 30)


def _text(app, selector: str) -> str:
    return str(app.screen.query_one(selector).render())


async def test_a_fleet_gets_a_summary_line_and_a_plain_run_does_not() -> None:
    app = make_app(ScriptedSource(fleet_frame(agents=40, finished=12)))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        line = app.screen.query_one(FleetLine)
        assert line.display
        assert line.region.height == 1
        text = _text(app, "#fleet-line")
        assert text == "fleet screen  tiers 12/40 0/3 0/0 finished  ETA 2h28m  $0.34 of $5.25 spent"
        assert app.screen.active_bindings["f"].binding.action == "fleet"  # the footer offers f

    app = make_app(ScriptedSource(frame()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert not app.screen.query_one(FleetLine).display
        assert app.screen.query_one(FleetLine).region.height == 0
        assert not app.screen.active_bindings["f"].binding.show  # no Fleet in the footer


async def test_without_a_rate_the_summary_leaves_out_the_cost() -> None:
    app = make_app(ScriptedSource(fleet_frame(rate=None)))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = _text(app, "#fleet-line")
        assert "ETA " in text and "$" not in text
        await pilot.press("f")
        await pilot.pause()
        assert "no rate set" in _text(app, "#fleet-title")


async def test_f_opens_the_fleet_screen_which_follows_the_run_and_escape_returns() -> None:
    source = ScriptedSource(fleet_frame(agents=500, finished=120))
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("f")
        await pilot.pause()
        assert isinstance(app.screen, FleetScreen)
        title = _text(app, "#fleet-title")
        assert "fleet screen  500 agents  sync promotion" in title
        assert "rate $1.99/h  spent $0.34  projected $" in title
        tiers = app.screen.query_one("#fleet-tiers", FleetTable)
        assert [tiers.cell(0, c) for c in ("tier", "target", "planned", "entered", "queued", "running", "finished",
                                           "promoted", "culled", "failed")] == [
            "0", "500k", "500", "500", "374", "4", "120", "30", "0", "2"]  # fmt: skip
        assert [tiers.cell(1, c) for c in ("planned", "entered", "queued", "finished")] == ["125", "30", "30", "0"]
        assert len(tiers.rows) == 3
        leaders = app.screen.query_one("#fleet-leaders", FleetTable)
        assert len(leaders.rows) == 10
        assert [leaders.cell(1, c) for c in ("#", "agent", "score", "tier", "steps", "env", "preset", "seed",
                                             "overrides")] == [
            "2", "a0007", "477.7", "0", "500k", "CartPole-v1", "cartpole", "7", "learning_rate=0.0003"]  # fmt: skip
        assert leaders.cell(0, "overrides") == "-"
        shown = "\n".join(line.plain for line in leaders.lines())
        assert "  2 a0007 477.7    0  500k CartPole-v1 cartpole    7 learning_rate=0.0003" in shown
        notices = "\n".join(line.plain for line in app.screen.query_one(Notices).lines())
        assert "120 of 500 agents scored in tier 0" in notices

        # A new state: the figures follow it while the screen is shown.
        source.current = fleet_frame(agents=500, finished=200, now=NOW + 1)
        await pilot.pause(0.5)
        assert [tiers.cell(0, c) for c in ("queued", "finished", "promoted")] == ["294", "200", "50"]
        assert leaders.cell(0, "score") == "482.0"
        assert "200 of 500 agents scored in tier 0" in "\n".join(
            line.plain for line in app.screen.query_one(Notices).lines()
        )

        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, CockpitScreen)
        assert "tiers 200/500 0/50 0/0 finished" in _text(app, "#fleet-line")
        await pilot.press("f")  # opened again, then f closes it too
        await pilot.pause()
        assert isinstance(app.screen, FleetScreen)
        await pilot.press("f")
        await pilot.pause()
        assert isinstance(app.screen, CockpitScreen)
    assert source.commands == []


async def test_f_on_a_plain_run_says_it_is_not_a_fleet() -> None:
    source = ScriptedSource(frame())
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("f")
        await pilot.pause()
        assert isinstance(app.screen, CockpitScreen)
        assert [n.message for n in app._notifications] == ["not a fleet"]
        assert app.screen.query_one(JobsTable).row_count == 4
    assert source.commands == []


async def test_a_500_agent_fleet_shows_its_live_and_latest_agents_not_500_rows() -> None:
    source = ScriptedSource(fleet_frame(agents=500, finished=120, slots=4))
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        table = app.screen.query_one(JobsTable)
        # The supervisor's view_limit: 4 running agents and the 8 that ended last.
        assert table.row_count == 12
        # Running agents first, then the ended ones, the latest first; ids shown whole.
        assert table.selected_job == "a0120"
        assert [table.cell(agent_id(i), "id") for i in (120, 123, 119, 112)] == ["a0120", "a0123", "a0119", "a0112"]
        assert table.cell("a0119", "status") == "done"
        # The header counts the live agents only: the done ones it holds are the latest 8, not all.
        header = _text(app, "#run-header")
        assert header.startswith("cockpit  fleet of 500 agents  running  4 running  ")
        assert "done" not in header
        lanes = [line.plain for line in app.screen.query_one(GpuPanel).lines()]
        assert any(line.startswith("a0121 ") for line in lanes)
        await pilot.press("down")
        assert table.selected_job == "a0121"

        # An agent finishes and the next starts: the oldest ended one leaves the table, the cursor
        # stays on its agent, and the row count stays what the supervisor sends.
        later = fleet_frame(agents=500, finished=121, slots=4, now=NOW + 1)
        source.current = later
        await pilot.pause(0.5)
        assert table.row_count == 12
        assert table.selected_job == "a0121"
        ids = {job.id for job in later.state.jobs}
        assert "a0112" not in ids and "a0124" in ids
        assert table.cell("a0120", "status") == "done"
        assert table.cell("a0124", "status") == "running"
        # The GPU panel keeps lane cells for the agents with a lane only, not for every one that ran.
        assert set(app.screen.query_one(GpuPanel)._lane_cells) == {job.id for job in lane_jobs(later)}
        try:
            table.cell("a0112", "status")
        except KeyError:
            pass
        else:
            raise AssertionError("a0112 left the state but kept its row")

        await pilot.press("f")
        await pilot.pause()
        assert isinstance(app.screen, FleetScreen)
        assert app.screen.query_one("#fleet-tiers", FleetTable).cell(0, "finished") == "121"


async def test_the_help_screen_lists_the_fleet_key() -> None:
    app = make_app(ScriptedSource(frame()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(help_text())
    assert any(line.split()[:2] == ["f", "fleet"] for line in console.export_text().splitlines() if line.strip())


def test_a_preset_file_is_shown_by_its_name() -> None:
    fleet = fleet_view(agents=20, finished=3)
    leader = replace(fleet.leaders[0], preset="/home/me/plans/presets/quick.toml")
    assert leader_rows(replace(fleet, leaders=(leader,)))[0][6] == "quick.toml"


def test_a_pbt_leader_shows_whose_checkpoint_it_copied() -> None:
    fleet = fleet_view(agents=20, finished=3)
    copied = replace(fleet.leaders[0], agent="a0003", lineage="a0007@t1")
    rows = leader_rows(replace(fleet, leaders=(copied, fleet.leaders[1])))
    assert rows[0][1] == "a0003 ← a0007@t1" and rows[1][1] == fleet.leaders[1].agent
    from cockpit.views.headless import leaderboard_lines

    assert leaderboard_lines(replace(fleet, leaders=(copied,)))[0].endswith(" (copied a0007@t1)")


async def test_the_jobs_table_names_each_agents_preset_and_overrides_and_narrow_the_detail_does() -> None:
    app = make_app(ScriptedSource(fleet_frame(agents=40, finished=12)))
    async with app.run_test(size=(140, 42)) as pilot:
        await pilot.pause()
        table = app.screen.query_one(JobsTable)
        assert table.cell(agent_id(12), "preset") == "cartpole learning_rate=0.001"
        assert table.cell(agent_id(13), "preset") == "cartpole learning_rate=0.0003"
        shown = [line.plain for line in table.lines()]
        assert shown[0].split()[:4] == ["job", "seed", "env", "preset"]
        assert "  cartpole learning_rate=0.0003 " in shown[2]  # a0013, the second running agent
    app = make_app(ScriptedSource(fleet_frame(agents=40, finished=12)))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert "preset" not in app.screen.query_one(JobsTable).lines()[0].plain  # no room for the column
        await pilot.press("enter")  # on a0012, the first running agent
        await pilot.pause(0.3)
        assert "  preset cartpole learning_rate=0.001" in str(app.screen.query_one("#detail-title").render())


def test_a_fleet_cockpit_snapshot(snap_compare) -> None:
    """The cockpit of a fleet at 140 columns: the jobs table names each agent's preset and overrides."""
    fleet = fleet_frame(agents=40, finished=12)
    app = make_app(ScriptedSource(replace(fleet, state=replace(fleet.state, warnings=()))))
    assert snap_compare(app, terminal_size=(140, 42))


def test_fleet_screen_snapshot(snap_compare) -> None:
    fleet = fleet_frame(agents=500, finished=120)
    app = make_app(ScriptedSource(replace(fleet, state=replace(fleet.state, warnings=()))))
    assert snap_compare(app, terminal_size=(100, 30), press=["f"])


async def test_the_fleet_screen_shown_again_keeps_what_it_drew_unless_the_theme_changed() -> None:
    app = make_app(ScriptedSource(fleet_frame(agents=500, finished=120)))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("f")
        await pilot.pause()
        tiers = app.screen.query_one("#fleet-tiers", FleetTable)
        drawn = dict(tiers._strips)
        title = app.screen.query_one("#fleet-title")
        background = title.styles.background
        assert drawn
        await pilot.press("f", "f")  # back, and shown again: not restyled, so nothing drawn again
        await pilot.pause()
        assert isinstance(app.screen, FleetScreen)
        assert all(tiers._strips.get(y) is strip for y, strip in drawn.items())
        await pilot.press("f")
        await pilot.pause()
        app.theme = "textual-light" if app.theme != "textual-light" else "textual-dark"
        await pilot.pause()
        await pilot.press("f")  # the theme changed while it was hidden: restyled in it
        await pilot.pause()
        assert isinstance(app.screen, FleetScreen)
        assert title.styles.background != background
