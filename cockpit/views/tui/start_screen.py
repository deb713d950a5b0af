"""The start screen (bare `cockpit`): pick env, preset, jobs and timesteps and start a run, or reopen
a recent one (live runs are attached, finished ones replayed)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Button, DataTable, Input, Label, Select, Static

from cockpit.contract.presets import Preset, PresetError, builtin_names, load
from cockpit.core.feed.source import RunSource
from cockpit.core.machine.host import thread_budget
from cockpit.core.record.find_runs import RecentRun
from cockpit.views.tui.footer import Keys


@dataclass(frozen=True)
class LaunchChoice:
    """What the start screen's form asks for; None means the preset's own value."""

    preset: str
    env: str | None
    jobs: int
    timesteps: int | None


class LaunchError(Exception):
    """A one-line reason the run could not start or open (bad input, run gone)."""


class Opener(Protocol):
    """Starts and opens runs for the start screen (the command line gives a real one)."""

    physical_cores: int

    def start(self, choice: LaunchChoice) -> RunSource:
        """Start a supervised run in the background and attach to it; raises LaunchError."""
        ...

    def open(self, run_dir: Path) -> RunSource:
        """Attach to a live run or replay a finished one; raises LaunchError."""
        ...

    def recent(self) -> list[RecentRun]:
        """The most recent runs, newest first."""
        ...


def preset_summary(preset: Preset) -> Text:
    """A preset's resolved values in two lines (as text: a preset file's description is no markup)."""
    net = ",".join(map(str, preset.net_arch))
    return Text(
        f"{preset.description}\n"
        f"env {preset.env}  timesteps {preset.timesteps:,}  n_envs {preset.n_envs}  n_steps {preset.n_steps}  "
        f"batch {preset.batch_size:,}  epochs {preset.n_epochs}  net {net}  total batch {preset.total_batch:,}"
    )


class StartScreen(Screen[None]):
    """The form, and the recent runs below it."""

    BINDINGS = [  # noqa: RUF012
        Binding("ctrl+r", "start", "Start run"),
        Binding("q", "app.exit", "Quit"),
    ]

    def __init__(self, opener: Opener) -> None:
        super().__init__()
        self.opener = opener
        self.presets: dict[str, Preset] = {}
        for name in builtin_names():
            try:
                self.presets[name] = load(name)
            except PresetError:  # a broken built-in is reported by `cockpit presets`
                continue
        self.recent: list[RecentRun] = []

    def compose(self) -> ComposeResult:
        names = list(self.presets)
        first = "cartpole" if "cartpole" in names else names[0]
        with Vertical(id="start-form"):
            yield Static("Start a run", id="run-header")
            with Horizontal():
                yield Label("preset")
                yield Select([(n, n) for n in names], value=first, allow_blank=False, id="preset")
            yield Static(preset_summary(self.presets[first]), id="preset-values")
            with Horizontal():
                yield Label("env")
                yield Input(placeholder=self.presets[first].env, id="env")
            with Horizontal():
                yield Label("jobs")
                yield Input(value="2", type="integer", id="jobs")
            yield Static("", id="budget")
            with Horizontal():
                yield Label("timesteps")
                yield Input(placeholder=f"{self.presets[first].timesteps}", type="integer", id="timesteps")
                yield Button("Start (ctrl+r)", variant="primary", id="start")
            yield Static("", id="launch-error")
        yield Label("Recent runs (enter opens: live runs attach, finished ones replay)")
        yield DataTable(id="recent", cursor_type="row")
        yield Keys()

    def on_mount(self) -> None:
        table = self.query_one("#recent", DataTable)
        table.add_columns("name", "run", "preset", "env", "agents", "status", "started")
        self.recent = self.opener.recent()
        for run in self.recent:
            # Text cells: a DataTable parses a str cell as markup, and a run's name, path or env is text.
            cells = (
                run.name or "-",
                run.run_dir.name,
                run.preset,
                run.env,
                str(run.agents),
                run.status,
                run.started_at,
            )
            table.add_row(*(Text(cell) for cell in cells), key=str(run.run_dir))
        self.show_budget()

    def _preset(self) -> Preset:
        return self.presets[str(self.query_one("#preset", Select).value)]

    def on_select_changed(self, event: Select.Changed) -> None:
        preset = self._preset()
        self.query_one("#preset-values", Static).update(preset_summary(preset))
        self.query_one("#env", Input).placeholder = preset.env
        self.query_one("#timesteps", Input).placeholder = str(preset.timesteps)

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "jobs":
            self.show_budget()

    def show_budget(self) -> None:
        """The jobs against the CPU-core budget, as the supervisor will divide it."""
        raw = self.query_one("#jobs", Input).value
        cores = self.opener.physical_cores
        if not raw.isdigit() or int(raw) < 1:
            self.query_one("#budget", Static).update("jobs: a whole number, 1 or more")
            return
        budget = thread_budget(int(raw), cores)
        used = budget.slots * budget.threads_per_job
        line = f"{budget.slots} job(s) x {budget.threads_per_job} env thread(s) = {used} of {cores} physical cores"
        if budget.oversubscribed:
            line += f": oversubscribed, jobs will contend for CPU (at most {cores} fit)"
        self.query_one("#budget", Static).update(line)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_start()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "start":
            self.action_start()

    def action_start(self) -> None:
        """Validate the form and start the run."""
        jobs_raw = self.query_one("#jobs", Input).value.strip()
        steps_raw = self.query_one("#timesteps", Input).value.strip()
        error = self.query_one("#launch-error", Static)
        if not jobs_raw.isdigit() or int(jobs_raw) < 1:
            error.update("jobs: give a whole number, 1 or more")
            return
        if steps_raw and (not steps_raw.isdigit() or int(steps_raw) < 1):
            error.update("timesteps: give a whole number, 1 or more, or leave it empty for the preset's")
            return
        env = self.query_one("#env", Input).value.strip() or None
        choice = LaunchChoice(self._preset().name, env, int(jobs_raw), int(steps_raw) if steps_raw else None)
        error.update("starting…")
        self.launch(choice)

    @work(thread=True, exclusive=True)
    def launch(self, choice: LaunchChoice) -> None:
        """Start the run off the UI thread (the worker needs a few seconds to come up)."""
        try:
            source = self.opener.start(choice)
        except LaunchError as exc:
            self.app.call_from_thread(self.query_one("#launch-error", Static).update, Text(str(exc)))
            return
        self.app.call_from_thread(self.app.open_run, source)  # type: ignore[attr-defined]

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is None:
            return
        try:
            source = self.opener.open(Path(event.row_key.value))
        except LaunchError as exc:
            self.query_one("#launch-error", Static).update(Text(str(exc)))
            return
        self.app.open_run(source)  # type: ignore[attr-defined]
