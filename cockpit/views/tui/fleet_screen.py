"""A fleet's screen (`f` on the cockpit of a fleet): the tier funnel, the leaderboard, the ETA and
cost, and the latest promotions.

Everything shown comes from `RunState.fleet`, a few tiers and at most a few leaders and notices
however many agents the fleet has, so the screen costs the same at 500 agents as at 5. Like the
job detail it is composed once and pushed again, and it reads the source's newest frame at 5 Hz
only while it is shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widget import Widget

from cockpit.core.feed.snapshot import FleetView, SearchView, TierView
from cockpit.core.feed.source import Frame, RunSource
from cockpit.formatting import eta, money, num, si, tier_target
from cockpit.views.tui.lines_widget import LinesWidget
from cockpit.views.tui.reused_screen import ShownAgain

POLL_S = 0.2
NOTICES_SHOWN = 8

# The ETA early: at 80 columns the last column is the one the edge may crop.
TIER_COLUMNS = (
    "tier",
    "target",
    "ETA",
    "planned",
    "entered",
    "queued",
    "running",
    "finished",
    "promoted",
    "culled",
    "failed",
)
# Seed before the overrides: an override list can be long, and the screen's edge crops the last column.
LEADER_COLUMNS = ("#", "agent", "score", "tier", "steps", "env", "preset", "seed", "overrides")
LEFT = frozenset({"agent", "env", "preset", "overrides"})  # the rest are figures, right-aligned


def preset_name(preset: str) -> str:
    """A built-in preset's name, or a preset file's name without its folders."""
    return PurePath(preset).name


def queued(tier: TierView) -> int:
    """A tier's agents that entered it and wait for a slot."""
    return max(0, tier.entered - tier.running - tier.finished - tier.failed)


def fleet_summary(fleet: FleetView) -> str:
    """The fleet in one line for the cockpit: name, each tier's finished/entered, ETA and cost."""
    tiers = " ".join(f"{t.finished}/{t.entered}" for t in fleet.tiers)
    cost = f"  {money(fleet.spent_usd)} of {money(fleet.projected_usd)} spent" if fleet.rate_usd_per_h else ""
    return f"fleet {fleet.name}  tiers {tiers} finished  ETA {eta(fleet.eta_s)}{cost}"


def fleet_title(fleet: FleetView) -> str:
    """The fleet screen's first line: name, promotion, size, ETA, rate and cost."""
    rate = f"{money(fleet.rate_usd_per_h)}/h" if fleet.rate_usd_per_h else "no rate set (--rate)"
    line = f"fleet {fleet.name}  {fleet.agents} agents  {fleet.promotion} promotion"
    line += f"  ETA {eta(fleet.eta_s)}  rate {rate}"
    if fleet.rate_usd_per_h:
        line += f"  spent {money(fleet.spent_usd)}  projected {money(fleet.projected_usd)}"
    return line


def search_lines(search: SearchView | None) -> list[str]:
    """A fleet's search: the draws made and the best so far, whose, with its values and after how
    many steps; then one line per searched key (the range drawn, where the best agents lie). Empty
    for a fleet without a search."""
    if search is None:
        return []
    head = f"search: {search.sampler}, {search.drawn} of {search.samples} draws made"
    if search.best_score is not None:
        steps = f" after {search.best_steps:,} steps" if search.best_steps is not None else ""
        head += f"; best so far {search.best_score:.1f} by {search.best_agent}{steps}"
        head += f" ({search.best_values})" if search.best_values else ""
    return [head, *(f"  {line}" for line in search.ranges)]


def tier_rows(fleet: FleetView) -> list[tuple[str, ...]]:
    """The tier funnel, a row per tier, in `TIER_COLUMNS` order."""
    return [
        (
            str(t.tier),
            tier_target(t.timesteps, t.episodes),
            eta(t.eta_s),
            str(t.planned),
            str(t.entered),
            str(queued(t)),
            str(t.running),
            str(t.finished),
            str(t.promoted),
            str(t.culled),
            str(t.failed),
        )
        for t in fleet.tiers
    ]


def _agent_cell(agent: str, lineage: str) -> str:
    return f"{agent} ← {lineage}" if lineage else agent


def leader_rows(fleet: FleetView) -> list[tuple[str, ...]]:
    """The leaderboard, best first, in `LEADER_COLUMNS` order; a pbt agent that copied another's
    checkpoint shows whose and when (`a0003 ← a0007@t1`: a0007's, at the end of tier 1)."""
    return [
        (
            str(rank),
            _agent_cell(r.agent, r.lineage),
            num(r.score, "{:.1f}"),
            str(r.tier),
            si(r.steps),
            r.env,
            preset_name(r.preset),
            str(r.seed),
            r.overrides or "-",
        )
        for rank, r in enumerate(fleet.leaders, 1)
    ]


class Line(Widget):
    """One line of text that repaints only when it changes (a Static's update() re-lays-out the
    screen)."""

    def __init__(self, text: str = "", **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.text = text

    def show(self, text: str) -> None:
        """Draw `text` at the next refresh (only if it changed)."""
        if text != self.text:
            self.text = text
            self.refresh()

    def render(self) -> Text:
        return Text(self.text)  # a fleet's name, an agent's values: text, never markup


class FittedLines(LinesWidget):
    """Lines whose widget is as high as they are many (`height: auto`)."""

    def redraw_fit(self) -> None:
        """Redraw, and lay the screen out again when the line count (the height) changed."""
        before = len(self._rows)
        self.redraw()
        if len(self._rows) != before:
            self.refresh(layout=True)


class FleetTable(FittedLines):
    """A header and rows of short cells, each column as wide as its widest cell, one space apart
    (a fleet's tiers fit 80 columns)."""

    COMPONENT_CLASSES = {"fleet-table--header", "fleet-table--odd"}  # noqa: RUF012

    def __init__(self, columns: Sequence[str], empty: str, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.columns = tuple(columns)
        self.empty = empty
        self.rows: list[tuple[str, ...]] = []

    def show(self, rows: list[tuple[str, ...]]) -> None:
        """Take new rows; the lines that changed are repainted (the height follows the row count)."""
        if rows != self.rows or not self._rows:
            self.rows = rows
            self.redraw_fit()

    def cell(self, row: int, column: str) -> str:
        """The text of a cell (for tests and tools)."""
        return self.rows[row][self.columns.index(column)]

    def lines(self) -> list[Text]:
        widths = [max([len(label), *(len(row[i]) for row in self.rows)]) for i, label in enumerate(self.columns)]

        def line(cells: Sequence[str]) -> str:
            return " " + " ".join(
                cell.ljust(w) if label in LEFT else cell.rjust(w)
                for cell, label, w in zip(cells, self.columns, widths, strict=True)
            )

        header = Text(line(self.columns), style=self.component_style("fleet-table--header"))
        out = [header]
        for index, row in enumerate(self.rows):
            text = Text(line(row))
            if index % 2:
                text.stylize(self.component_style("fleet-table--odd"))
            out.append(text)
        if not self.rows:
            out.append(Text(f" {self.empty}", style="dim"))
        return out


class Notices(FittedLines):
    """The fleet's latest notices (promotions, tier summaries), the newest last."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.notices: tuple[str, ...] = ()

    def show(self, notices: tuple[str, ...]) -> None:
        """Take the fleet's notices; only the last `NOTICES_SHOWN` are drawn."""
        notices = notices[-NOTICES_SHOWN:]
        if notices != self.notices or not self._rows:
            self.notices = notices
            self.redraw_fit()

    def lines(self) -> list[Text]:
        title = Text("latest notices", style="bold")
        return [title, *(Text(f" {n}") for n in self.notices)] if self.notices else [title, Text(" none yet", "dim")]


class SearchLines(FittedLines):
    """`search_lines`: none at all for a fleet without a search."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.texts: list[str] = []

    def show(self, texts: list[str]) -> None:
        """Take the lines; redrawn (and the height fitted) only when they changed."""
        if texts != self.texts:
            self.texts = texts
            self.redraw_fit()

    def lines(self) -> list[Text]:
        return [Text(f" {line}", style="bold" if i == 0 else "") for i, line in enumerate(self.texts)]


class FleetScreen(ShownAgain):
    """The fleet's tiers, leaderboard, ETA and cost; escape (or f, or q) goes back."""

    BINDINGS = [Binding("escape,f,q", "app.pop_screen", "Back")]  # noqa: RUF012

    def __init__(self, source: RunSource) -> None:
        super().__init__()
        self.source = source
        self.frame: Frame | None = None

    def compose(self) -> ComposeResult:
        yield Line("not a fleet", id="fleet-title")
        yield SearchLines(id="fleet-search")
        yield Line("tiers", classes="fleet-label")
        yield FleetTable(TIER_COLUMNS, "no tiers", id="fleet-tiers")
        yield Line("leaderboard (each agent's best tier, best first)", classes="fleet-label")
        yield FleetTable(LEADER_COLUMNS, "no agent has a score yet", id="fleet-leaders")
        yield Notices(id="fleet-notices")
        # A line rather than a Footer: a footer recomposes its keys each time the screen shows.
        yield Line("escape, f or q: back to the cockpit", id="fleet-keys")

    def on_mount(self) -> None:
        self._timer = self.set_interval(POLL_S, self.poll, pause=True)

    def on_screen_resume(self) -> None:
        self.poll()
        self._timer.resume()

    def on_screen_suspend(self) -> None:
        self._timer.pause()

    def poll(self) -> None:
        """Take the source's newest frame and redraw if it is new."""
        frame = self.source.frame()
        if frame is None or frame is self.frame:
            return
        self.frame = frame
        self.show(frame.state.fleet)

    def show(self, fleet: FleetView | None) -> None:
        """Fill every part of the screen from `fleet`."""
        if fleet is None:
            self.query_one("#fleet-title", Line).show("not a fleet")
            return
        with self.app.batch_update():
            self.query_one("#fleet-title", Line).show(fleet_title(fleet))
            self.query_one("#fleet-tiers", FleetTable).show(tier_rows(fleet))
            self.query_one("#fleet-leaders", FleetTable).show(leader_rows(fleet))
            self.query_one(Notices).show(fleet.notices)
            self.query_one(SearchLines).show(search_lines(fleet.search))
