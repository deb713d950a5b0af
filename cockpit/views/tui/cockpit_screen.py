"""The main screen: GPU and phase lanes, the run's SPS and best return over time, CPU, jobs,
advice, and the controls in the footer.

It polls its `RunSource` at 5 Hz and redraws only when a new frame arrived. Controls go to the
source as supervisor commands; nothing here keeps run state."""

from __future__ import annotations

import contextlib

from textual.app import ComposeResult, ScreenStackError
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widget import Widget

from cockpit.contract.controls import AddJob, ApplyAdvice, Control, KillJob, RestartJob, StopAll, StopJob
from cockpit.contract.states import JobState
from cockpit.core.feed.source import Frame, Replay, RunSource, SourceError
from cockpit.views.formatting import eta, si
from cockpit.views.tui import cpu_panel, gpu_panel
from cockpit.views.tui.advice_panel import AdvicePanel
from cockpit.views.tui.cpu_panel import CpuPanel
from cockpit.views.tui.detail_screen import JobDetailScreen
from cockpit.views.tui.fleet_screen import FleetScreen, fleet_summary
from cockpit.views.tui.footer import Keys
from cockpit.views.tui.gpu_panel import GpuPanel
from cockpit.views.tui.help_screen import HelpScreen
from cockpit.views.tui.jobs_table import JobsTable
from cockpit.views.tui.quit_screen import LEAVE, STOP_ALL, QuitScreen
from cockpit.views.tui.replay_bar import ReplayBar
from cockpit.views.tui.trend_panel import TrendPanel

POLL_S = 0.2
MIN_TOP = 7
CONTROLS = ("add", "stop", "restart", "kill", "stop_all", "apply_advice", "next_advice")
SCRUB = ("seek",)


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def header_line(frame: Frame, *, replay: bool) -> str:
    """The run in one line: its name (when it has one), preset, env, "MPS" when its jobs are MPS
    clients (`--mps`), status, counts, its throughput (the jobs' live SPS together) and ETA while
    it runs, and the elapsed time. A fleet's
    agents differ in preset and env, and its state holds only the latest ended agents: its header
    gives its size and counts only the live agents (the fleet line under it has the rest)."""
    state = frame.state
    shown = (JobState.RUNNING, JobState.STALLED, JobState.QUEUED, JobState.DONE, JobState.FAILED, JobState.STOPPED,
             JobState.PAUSED)  # fmt: skip
    what = f"{state.preset} on {state.env}"
    if state.fleet is not None:
        shown = tuple(s for s in shown if not s.terminal)
        what = f"fleet of {state.fleet.agents} agents"
    if state.name is not None:  # first: the name is how the user knows this run from the others
        what = f"{state.name}: {what}"
    if state.mps:  # MPS changes what a GPU's figures mean (kernels side by side) and its fault domain
        what = f"{what}  MPS"
    counts = "  ".join(f"{state.count(s)} {s}" for s in shown if state.count(s))
    status = "replay" if replay else state.status.value
    if frame.link_error:
        status = f"{status} (disconnected: {frame.link_error})"
    figures = ""
    if state.status.live:
        sps = state.sps
        figures += f"  {si(sps)} SPS" if sps is not None else ""
        figures += f"  ETA {eta(state.eta_s)}" if state.eta_s is not None else ""
    elapsed = _duration(state.now - state.started_at)
    return f"cockpit  {what}  {status}  {counts}{figures}  {elapsed}"


class RunHeader(Widget):
    """The run's one-line summary. A widget of its own rather than a Static: it changes at every
    tick, and a Static's update() would re-lay-out the whole screen each time."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.line = "connecting to the run…"

    def show(self, line: str) -> None:
        """Draw `line` at the next refresh (only if it changed)."""
        if line != self.line:
            self.line = line
            self.refresh()

    def render(self) -> str:
        return self.line


class FleetLine(RunHeader):
    """A fleet's one-line summary under the run's (hidden unless the run is a fleet)."""


class CockpitScreen(Screen[None]):
    """The live (or replayed) run."""

    BINDINGS = [  # noqa: RUF012
        Binding("a", "add", "Add job"),
        Binding("s", "stop", "Stop"),
        Binding("r", "restart", "Restart"),
        Binding("k", "kill", "Kill"),
        Binding("S", "stop_all", "Stop all"),
        Binding("A", "apply_advice", "Apply advice"),
        Binding("v", "next_advice", "Next advice", show=False),
        # Two bindings for f: the footer offers the first only for a fleet; otherwise the second
        # answers that this run is not one.
        Binding("f", "fleet", "Fleet"),
        Binding("f", "not_fleet", "Fleet", show=False),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit_run", "Quit"),
        Binding("left", "seek(-5)", "-5 s", show=False, priority=True),
        Binding("right", "seek(5)", "+5 s", show=False, priority=True),
        Binding("left_square_bracket", "seek(-60)", "-60 s", show=False),
        Binding("right_square_bracket", "seek(60)", "+60 s", show=False),
        Binding("home", "seek(-1e12)", "start", show=False, priority=True),
        Binding("end", "seek(1e12)", "end", show=False, priority=True),
    ]

    def __init__(self, source: RunSource) -> None:
        super().__init__()
        self.source = source
        self.replay = isinstance(source, Replay)
        self.frame: Frame | None = None
        self.stopping_all = False
        # Screens made (and installed) once and pushed again: composing them anew is the slow part
        # of a key press on a busy machine.
        self._detail = JobDetailScreen(source, "")
        self._names = {"help": f"help-{id(self)}", "detail": f"detail-{id(self)}", "fleet": f"fleet-{id(self)}"}

    def compose(self) -> ComposeResult:
        yield RunHeader(id="run-header")
        yield FleetLine(id="fleet-line")
        with Horizontal(id="top"):
            yield GpuPanel(id="gpu")
            yield TrendPanel(id="trend")
            yield CpuPanel(id="cpu")
        yield JobsTable(id="jobs")
        yield AdvicePanel(id="advice")
        if self.replay:
            yield ReplayBar(id="replay")
        yield Keys()

    def on_mount(self) -> None:
        self.app.install_screen(HelpScreen(), self._names["help"])
        self.app.install_screen(self._detail, self._names["detail"])
        self.app.install_screen(FleetScreen(self.source), self._names["fleet"])
        self.query_one(JobsTable).focus()
        self.poll()
        self.set_interval(POLL_S, self.poll)

    def poll(self) -> None:
        """Take the source's newest frame and redraw if it is new."""
        frame = self.source.frame()
        if frame is None or frame is self.frame:
            return
        first = self.frame is None
        self.frame = frame
        fleet = frame.state.fleet
        self.set_class(frame.state.gpu is None, "-no-gpu")
        self.set_class(fleet is not None, "-fleet")
        with self.app.batch_update():
            self._fit_top(frame)
            self.query_one("#run-header", RunHeader).show(header_line(frame, replay=self.replay))
            if fleet is not None:
                self.query_one(FleetLine).show(fleet_summary(fleet))
            self.query_one(GpuPanel).show(frame)
            self.query_one(TrendPanel).show(frame)
            self.query_one(CpuPanel).show(frame)
            self.query_one(JobsTable).show(frame.state)
            self.query_one(AdvicePanel).show(frame.state)
            if isinstance(self.source, Replay):
                self.query_one(ReplayBar).show(self.source.span, frame.state.now)
        # Which keys the footer offers depends on these; refresh it only when they change.
        offers = (self._ended(frame), bool(frame.state.suggestions), fleet is not None)
        if first or offers != self._offers:
            self._offers = offers
            self.refresh_bindings()
        if self.stopping_all and self._ended(frame):
            self.app.exit(frame)

    _offers: tuple[bool, bool, bool] | None = None

    def _fit_top(self, frame: Frame) -> None:
        """Give the GPU and CPU panels the rows their content needs, at most half the screen,
        so the jobs table keeps room at 80x24."""
        needed = 2 + max(gpu_panel.rows_needed(frame), cpu_panel.rows_needed(frame))
        height = max(MIN_TOP, min(needed, self.size.height // 2))
        top = self.query_one("#top")
        if top.styles.height is None or top.styles.height.value != height:
            top.styles.height = height

    def on_resize(self) -> None:
        if self.frame is not None:
            self._fit_top(self.frame)

    @staticmethod
    def _ended(frame: Frame) -> bool:
        return frame.link_error is not None or not frame.state.status.live

    def on_unmount(self) -> None:
        for name in self._names.values():
            with contextlib.suppress(ScreenStackError):  # the app is exiting with it still shown
                self.app.uninstall_screen(name)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Controls only for a live run that has not ended; scrubbing only in a replay."""
        if action in CONTROLS:
            live = not self.replay and self.frame is not None and not self._ended(self.frame)
            if action in ("apply_advice", "next_advice"):
                return live and bool(self.frame and self.frame.state.suggestions)
            return live
        if action in SCRUB:
            return self.replay
        if action in ("fleet", "not_fleet"):
            return self._is_fleet() == (action == "fleet")
        return True

    def _is_fleet(self) -> bool:
        return self.frame is not None and self.frame.state.fleet is not None

    # ----- controls -----

    def _send(self, command: Control, done: str) -> None:
        try:
            self.source.submit(command)
        except SourceError as exc:
            self.notify(str(exc), title="command not sent", severity="error")
            return
        self.notify(done)

    def _selected(self) -> str | None:
        job = self.query_one(JobsTable).selected_job
        if job is None:
            self.notify("no job selected", severity="warning")
        return job

    def action_add(self) -> None:
        """Queue one more agent with the next seed."""
        self._send(AddJob(), "job added (next seed, same preset)")

    def action_stop(self) -> None:
        """Checkpoint and stop the selected job."""
        if (job := self._selected()) is not None:
            self._send(StopJob(job), f"job {job}: stopping (checkpoint first)")

    def action_restart(self) -> None:
        """Restart the selected job from its checkpoint."""
        if (job := self._selected()) is not None:
            self._send(RestartJob(job), f"job {job}: restarting")

    def action_kill(self) -> None:
        """SIGKILL the selected job."""
        if (job := self._selected()) is not None:
            self._send(KillJob(job), f"job {job}: killed")

    def action_stop_all(self) -> None:
        """Checkpoint and stop every job; the run ends (resumable)."""
        self._send(StopAll(), "stopping every job (each checkpoints first)")

    def action_next_advice(self) -> None:
        """Select the next advice item."""
        if self.frame is not None and self.frame.state.suggestions:
            panel = self.query_one(AdvicePanel)
            panel.selected = (panel.selected + 1) % len(self.frame.state.suggestions)
            panel.show(self.frame.state)

    def action_apply_advice(self) -> None:
        """Apply the selected advice item through the run's supervisor."""
        if self.frame is None or not self.frame.state.suggestions:
            return
        panel = self.query_one(AdvicePanel)
        item = self.frame.state.suggestions[min(panel.selected, len(self.frame.state.suggestions) - 1)]
        self._send(ApplyAdvice(item.setting, item.suggested), f"applying {item.setting} -> {item.suggested}")

    def action_help(self) -> None:
        """Show the help screen."""
        self.app.push_screen(self._names["help"])

    def action_fleet(self) -> None:
        """Show the fleet screen: tiers, leaderboard, ETA and cost."""
        self.app.push_screen(self._names["fleet"])

    def action_not_fleet(self) -> None:
        """f on a run that is no fleet."""
        self.notify("not a fleet", severity="warning")

    def action_seek(self, delta: float) -> None:
        """Move the replay by `delta` seconds."""
        if isinstance(self.source, Replay) and self.frame is not None:
            start, end = self.source.span
            self.source.seek(min(end, max(start, self.frame.state.now + delta)))
            self.poll()

    def on_jobs_table_selected(self, event: JobsTable.Selected) -> None:
        """Enter on a job opens its detail screen."""
        self._detail.show_job(event.job_id)
        self.app.push_screen(self._names["detail"])

    def action_quit_run(self) -> None:
        """Quit; for a live run, first ask whether to stop the jobs or leave them running."""
        if self.frame is None or self.replay or self._ended(self.frame):
            self.app.exit(self.frame)
            return

        def chosen(choice: str | None) -> None:
            if choice == LEAVE:
                self.app.exit(self.frame)
            elif choice == STOP_ALL:
                self.stopping_all = True
                self.action_stop_all()
                self.notify("the cockpit closes when every job has stopped")

        self.app.push_screen(QuitScreen(self.frame.state.run_dir), chosen)
