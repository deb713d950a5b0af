"""The jobs table: a header and a row per job, with a cursor, drawn through the line API.

Rows are keyed by job id and kept in the order jobs were added, so the cursor stays on its job as
rows update. A DataTable re-rendered every cell of every row whenever one cell changed, which at
5 Hz on a busy machine cost more than the rest of the screen together; here a row is rebuilt only
when one of its cells changed, and only that row is repainted.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.message import Message

from cockpit.core.feed.snapshot import JobView, RunState, preset_label
from cockpit.formatting import eta, mib, num, scoring_of, si, target_of
from cockpit.views.tui.lines_widget import LinesWidget

WIDE = 110
# (key, label, shown in the narrow layout, width: fixed so rows do not jump as values grow; None fits the content)
COLUMNS = (
    ("id", "job", True, None),
    ("seed", "seed", False, 5),
    ("env", "env", False, None),
    ("preset", "preset", False, None),
    ("status", "status", True, 8),
    ("phase", "phase", True, 7),
    ("steps", "steps", True, None),
    ("sps", "SPS", True, 6),
    ("eph", "ep/h", True, 5),
    ("eta", "ETA", True, 6),
    ("rew", "ep_rew", True, 7),
    ("restarts", "rst", True, 3),
    ("gpu", "GPU mem", False, 10),
    ("sm", "SM%", False, 4),
    ("memory", "memory", False, 11),
    ("cpu", "CPU%", True, 4),
)
NUMERIC = frozenset({"steps", "sps", "eph", "eta", "rew", "restarts", "gpu", "sm", "memory", "cpu"})
# Shown only when some job reports episode counts (a replay of older files may not), and in the
# narrow layout (80 columns hold one more figure) only where a job's target is in episodes.
EPISODES_COLUMN = "eph"
STATUS_CLASS = {
    "failed": "error",
    "backoff": "warning",
    "done": "success",
    "stopping": "warning",
    "paused": "warning",
    "stalled": "error",
}


def cells(job: JobView, state: RunState, *, wide: bool) -> dict[str, str]:
    """A job's row, keyed by column."""
    live = job.state.stepping
    steps = target_of(job.steps, job.target, job.target_episodes, job.episodes, wide=wide)
    if job.target_episodes is not None and not wide:
        steps = steps.removesuffix(" ep")  # the narrow column is labelled "episodes" instead
    scoring = job.phase == "score" and job.scored is not None and job.to_score is not None
    if scoring:  # a fleet's agent at its tier's end: the steps are done, the evaluation is not
        steps = scoring_of(job.scored or 0, job.to_score or 0).replace("score", "scored", 1)
    return {
        "id": job.id,
        "seed": str(job.seed),
        "env": job.env or state.env,  # a fleet's agents have their own
        # The preset the user named and a fleet agent's overrides, never the file written for them.
        "preset": preset_label(job.preset or state.preset, job.overrides),
        "status": job.state,
        # A running script without CockpitCallback has no phases: say so where they would be.
        "phase": job.phase or ("no events" if job.state.stepping and job.no_events else ""),
        # An episode target's cell is its unit and fraction already; narrow, it leaves room for ep/h.
        "steps": f"{steps} {job.fraction:4.0%}"
        if not scoring and (job.target or (job.target_episodes and wide))
        else steps,
        # SPS: throughput over whole rollout + train cycles (never the rollout rate); ETA at that rate.
        "sps": (num(job.sps) if wide else si(job.sps)) if job.sps is not None and live else "-",
        # Whole episodes per hour over the same window as SPS.
        # Always in 4 characters (12k, 1.2M): a CartPole agent plays hundreds of thousands an hour.
        "eph": si(job.episodes_per_h) if job.episodes_per_h is not None and live else "-",
        "eta": eta(job.eta_s) if live else "-",
        "rew": num(job.ep_rew_mean, "{:.1f}"),
        "restarts": str(job.restarts),
        "gpu": mib(job.gpu_mem_bytes),
        # Its own processes' share of the SM beside the GPU's "busy", which counts any kernel of any job.
        "sm": num(job.gpu_sm_percent),
        # Its RSS, or how fast it grows once the leak watch flags it (the detail and advice say more).
        "memory": growth(job) or mib(job.rss_bytes),
        "cpu": num(job.cpu_percent),
    }


def growth(job: JobView) -> str | None:
    """A flagged job's fastest-growing memory, "+120 MiB/h" (None when nothing is flagged)."""
    rates = [r for r in (job.memory_growth_mib_h, job.gpu_memory_growth_mib_h) if r is not None]
    return f"+{max(rates):,.0f} MiB/h" if rates else None


class JobsTable(LinesWidget, can_focus=True):
    """Shows `RunState.jobs`; up/down (or a click) moves the cursor, enter selects."""

    COMPONENT_CLASSES = {  # noqa: RUF012
        "jobs--header",
        "jobs--cursor",
        "jobs--odd",
        "jobs--error",
        "jobs--warning",
        "jobs--success",
    }
    BINDINGS = [  # noqa: RUF012
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "move(-10)", "Page up", show=False),
        Binding("pagedown", "move(10)", "Page down", show=False),
        Binding("home", "move(-1000000)", "First", show=False),
        Binding("end", "move(1000000)", "Last", show=False),
        Binding("enter", "select", "Detail", show=False),
    ]

    @dataclass
    class Selected(Message):
        """Enter on a job's row."""

        job_id: str

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._state: RunState | None = None
        self._cells: dict[str, dict[str, str]] = {}
        self._order: list[str] = []
        self.cursor = 0
        self._offset = 0
        self._row_texts: dict[str, tuple[tuple[object, ...], Text]] = {}
        self._with_episodes = False
        self._episode_target = False

    @property
    def row_count(self) -> int:
        """How many jobs the table holds."""
        return len(self._order)

    @property
    def selected_job(self) -> str | None:
        """The id of the job under the cursor, if any."""
        return self._order[self.cursor] if self._order else None

    def cell(self, job_id: str, key: str) -> str:
        """The text shown in a cell (for tests and tools)."""
        return self._cells[job_id][key]

    def show(self, state: RunState) -> None:
        """Take the new state; rows whose cells changed are repainted."""
        self._state = state
        self._with_episodes = any(job.episodes is not None for job in state.jobs)
        self._episode_target = any(job.target_episodes is not None for job in state.jobs)
        wide = self.size.width >= WIDE
        selected = self.selected_job
        shown = {job.id for job in state.jobs}
        if len(shown) != len(self._order) or not shown.issuperset(self._order):
            # A fleet's state holds only its live and latest ended agents: the rows of those that
            # left it go, and the cursor stays on its job while that one is still shown.
            self._order = [job_id for job_id in self._order if job_id in shown]
            self._cells = {job_id: row for job_id, row in self._cells.items() if job_id in shown}
        for job in state.jobs:
            if job.id not in self._cells:
                self._order.append(job.id)
            self._cells[job.id] = cells(job, state, wide=wide)
        if state.fleet is not None:
            # A fleet's running agents first (in the order they started), then the ended ones,
            # the latest first: the agents that matter now stay in view whatever the height.
            ended = {job.id: job.ended_at or 0.0 for job in state.jobs if job.state.terminal}
            self._order.sort(key=lambda job_id: (job_id in ended, -ended.get(job_id, 0.0)))
        if selected is not None and selected in self._cells:
            self.cursor = self._order.index(selected)
        self.redraw()

    def on_resize(self) -> None:
        if self._state is not None:
            self.show(self._state)
        super().on_resize()

    def _visible_rows(self) -> int:
        return max(1, self.size.height - 1)

    def lines(self) -> list[Text]:
        wide = self.size.width >= WIDE
        keys = [
            (key, label, width)
            for key, label, narrow, width in COLUMNS
            if (wide or narrow) and (key != EPISODES_COLUMN or (self._with_episodes and (wide or self._episode_target)))
        ]
        widths = {}
        if self._episode_target and not wide:  # its cells are episodes, without the unit (80 columns)
            keys = [(key, "episodes" if key == "steps" else label, width) for key, label, width in keys]
        for key, label, width in keys:
            widths[key] = width or max([len(label), *(len(row[key]) for row in self._cells.values())])
        header = Text(style=self.component_style("jobs--header"))
        for key, label, _ in keys:
            header.append(" " + (label.rjust(widths[key]) if key in NUMERIC else label.ljust(widths[key])) + " ")
        visible = self._visible_rows()
        self.cursor = max(0, min(self.cursor, len(self._order) - 1))
        if self.cursor < self._offset:
            self._offset = self.cursor
        elif self.cursor >= self._offset + visible:
            self._offset = self.cursor - visible + 1
        rows = [header]
        built: dict[str, tuple[tuple[object, ...], Text]] = {}
        for index in range(self._offset, min(len(self._order), self._offset + visible)):
            job_id = self._order[index]
            row = self._cells[job_id]
            if index == self.cursor:
                look = "jobs--cursor" if self.has_focus else "jobs--odd"
            else:
                look = "jobs--odd" if index % 2 else None
            # A row is built again only when its cells, the column widths or its look changed.
            key = (tuple(row[k] for k, _, _ in keys), tuple(widths[k] for k, _, _ in keys), look)
            kept = self._row_texts.get(job_id)
            line = kept[1] if kept is not None and kept[0] == key else self._row_text(row, keys, widths, look)
            built[job_id] = (key, line)
            rows.append(line)
        self._row_texts = built
        return rows

    def _row_text(
        self, row: dict[str, str], keys: list[tuple[str, str, int | None]], widths: dict[str, int], look: str | None
    ) -> Text:
        line = Text()
        for key, _, _ in keys:
            value = row[key][: widths[key]]
            cell = value.rjust(widths[key]) if key in NUMERIC else value.ljust(widths[key])
            status_class = STATUS_CLASS.get(value) if key == "status" else None
            if key == "memory" and value.startswith("+"):  # the leak watch's flag
                status_class = "warning"
            style = self.component_style(f"jobs--{status_class}") if status_class else ""
            line.append(" ").append(cell, style=style).append(" ")
        if look is not None:
            line.stylize(self.component_style(look))
        return line

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._row_texts = {}  # they carry the component styles

    def action_move(self, delta: int) -> None:
        """Move the cursor by `delta` rows (clamped)."""
        self.cursor = max(0, min(len(self._order) - 1, self.cursor + delta))
        self.redraw()

    def action_select(self) -> None:
        """Open the job under the cursor."""
        if self.selected_job is not None:
            self.post_message(self.Selected(self.selected_job))

    def on_click(self, event: events.Click) -> None:
        if event.y >= 1 and self._order:
            self.cursor = min(len(self._order) - 1, self._offset + event.y - 1)
            self.redraw()

    def on_focus(self) -> None:
        self.redraw()

    def on_blur(self) -> None:
        self.redraw()
