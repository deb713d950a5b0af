"""The main screen: GPU and phase lanes, the run's SPS and best return over time, CPU, jobs,
advice, and the controls in the footer.

It polls its `RunSource` at 5 Hz and redraws only when a new frame arrived. Controls go to the
source as supervisor commands; nothing here keeps run state."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult, ScreenStackError
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Static

from cockpit.contract.checkpoint_files import newest_checkpoint
from cockpit.contract.controls import AddJob, ApplyAdvice, Control, KillJob, RestartJob, StopAll, StopJob
from cockpit.contract.rundir import RunDir
from cockpit.contract.runspec import ConfigError
from cockpit.contract.states import JobState
from cockpit.core.feed.source import Frame, Replay, RunSource, SourceError
from cockpit.core.record.replay import open_replay
from cockpit.core.session.clips import ClipRecorder, JobClip
from cockpit.formatting import eta, si
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
from cockpit.views.tui.report_screen import ReportScreen, report_text
from cockpit.views.tui.trend_panel import TrendPanel

POLL_S = 0.2
MIN_TOP = 7
MIN_TABLE = 3  # the jobs table's header and two rows, however many jobs and however short the screen
MIN_ADVICE = 5  # the advice may take a quarter of the screen, and never less than this
CONTROLS = ("add", "stop", "restart", "kill", "stop_all", "apply_advice", "next_advice")
SCRUB = ("seek",)


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def took(seconds: float) -> str:
    """How long a run took, to the second: "45s", "12m 03s", "2h 05m 10s"."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds // 60 % 60:02d}m {seconds % 60:02d}s"


def shown_dir(run_dir: str) -> str:
    """`run_dir` as a user would type it here: relative to the working directory when inside it."""
    relative = os.path.relpath(run_dir) if os.path.isabs(run_dir) else run_dir
    return run_dir if relative.startswith("..") else relative


def lost(frame: Frame) -> bool:
    """The link to a run that had not ended went away (its process was killed, say). A run that
    ended closes its socket after its last frame was fetched, so a closed link after a final state
    is the end of the run, not a loss."""
    return frame.link_error is not None and frame.state.status.live


def ended_line(frame: Frame, *, replay: bool) -> str:
    """The small panel under the jobs of a run that is over: how it ended and the keys that take a
    user on from there (`r` report, `p` replay, `q` quit); "" while the run goes on."""
    if replay:
        return ""
    if lost(frame):  # the header says why, with the run's directory
        return "Lost the run while it ran: its last frame stays.  r its report  p replay what it recorded  q quit"
    if frame.state.status.live:
        return ""
    return f"The run is over: {frame.state.status}.  r open its report  p replay it  q quit"


def header_line(frame: Frame, *, replay: bool) -> str:
    """The run in one line: its name (when it has one), preset, env, "MPS" when its jobs are MPS
    clients (`--mps`; without it, of a daemon found running, named), status, counts, its throughput
    (the jobs' live SPS together) and ETA while it runs, a wait for disk space
    (`waiting for disk: ...`) while there is one, and the elapsed time. A fleet's agents
    differ in preset and env, and its state holds only the latest ended agents: its header gives
    its size and counts only the live agents (the fleet line under it has the rest).

    A run that is over says how it ended, how long it took and where it lies ("done in 12m 03s ·
    runs/..."); one whose link was lost while it ran says so instead (`lost`)."""
    state = frame.state
    shown = (
        JobState.RUNNING,
        JobState.STALLED,
        JobState.QUEUED,
        JobState.DONE,
        JobState.FAILED,
        JobState.STOPPED,
        JobState.PAUSED,
    )
    what = f"{state.preset} on {state.env}"
    if state.fleet is not None:
        shown = tuple(s for s in shown if not s.terminal)
        what = f"fleet of {state.fleet.agents} agents"
    if state.name is not None:  # first: the name is how the user knows this run from the others
        what = f"{state.name}: {what}"
    if state.mps:  # MPS changes what a GPU's figures mean (kernels side by side) and its fault domain
        what = f"{what}  MPS"
    elif state.mps_external is not None:  # clients all the same, of a daemon the run did not start
        what = f"{what}  MPS (not --mps: the daemon at {state.mps_external})"
    counts = "  ".join(f"{state.count(s)} {s}" for s in shown if state.count(s))
    status = "replay" if replay else state.status.value
    if lost(frame):
        status = f"{status} (disconnected: {frame.link_error})"
    elif not replay and not state.status.live:
        # The directory goes last: the longest part, and the one a narrow terminal can best lose.
        ended = [f"{status} in {took(state.now - state.started_at)}", counts, shown_dir(state.run_dir)]
        return f"cockpit  {what}  " + " · ".join(part for part in ended if part)
    figures = ""
    if state.status.live:
        figures += f"  {state.disk_wait}" if state.disk_wait else ""
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

    def render(self) -> Text:
        return Text(self.line)  # a run's name, path or error is text, never markup


class FleetLine(RunHeader):
    """A fleet's one-line summary under the run's (hidden unless the run is a fleet)."""


class CockpitScreen(Screen[None]):
    """The live (or replayed) run."""

    BINDINGS = [  # noqa: RUF012
        Binding("a", "add", "Add job"),
        Binding("s", "stop", "Stop"),
        Binding("r", "restart", "Restart"),
        # Once the run is over, r and p take the user on: its report, or a replay of it.
        Binding("r", "report", "Report"),
        Binding("p", "replay", "Replay"),
        Binding("k", "kill", "Kill"),
        # Off the footer, which is full: the help screen and docs/tui.md list it.
        Binding("c", "clip", "Clip", show=False),
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

    def __init__(self, source: RunSource, *, outcome: Frame | None = None) -> None:
        """`outcome`: what quitting returns instead of the frame shown (the live run's last frame,
        when this screen replays a run that just ended)."""
        super().__init__()
        self.source = source
        self.outcome = outcome
        self.replay = isinstance(source, Replay)
        self.frame: Frame | None = None
        self.stopping_all = False
        # Screens made (and installed) once and pushed again: composing them anew is the slow part
        # of a key press on a busy machine.
        self._detail = JobDetailScreen(source, "")
        self._names = {"help": f"help-{id(self)}", "detail": f"detail-{id(self)}", "fleet": f"fleet-{id(self)}"}
        self._clips: ClipRecorder | None = None  # made at the first clip key

    def compose(self) -> ComposeResult:
        yield RunHeader(id="run-header")
        yield FleetLine(id="fleet-line")
        with Horizontal(id="top"):
            yield GpuPanel(id="gpu")
            yield TrendPanel(id="trend")
            yield CpuPanel(id="cpu")
        yield JobsTable(id="jobs")
        yield Static(id="ended")
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
        ended = ended_line(frame, replay=self.replay)
        self.set_class(bool(ended), "-ended")
        with self.app.batch_update():
            self.query_one("#run-header", RunHeader).show(header_line(frame, replay=self.replay))
            self.query_one("#ended", Static).update(Text(ended))
            if fleet is not None:
                self.query_one(FleetLine).show(fleet_summary(fleet))
            self.query_one(GpuPanel).show(frame)
            self.query_one(TrendPanel).show(frame)
            self.query_one(CpuPanel).show(frame)
            self.query_one(JobsTable).show(frame.state)
            self.query_one(AdvicePanel).show(frame.state)
            if isinstance(self.source, Replay):
                self.query_one(ReplayBar).show(self.source.span, frame.state.now)
            self._fit(frame)
        # Which keys the footer offers depends on these; refresh it only when they change.
        offers = (self._ended(frame), bool(frame.state.suggestions), fleet is not None)
        if first or offers != self._offers:
            self._offers = offers
            self.refresh_bindings()
        if self.stopping_all and self._ended(frame):
            self.app.exit(frame)

    _offers: tuple[bool, bool, bool] | None = None

    def _fit(self, frame: Frame) -> None:
        """Make the jobs table as tall as its rows and the advice as tall as its wrapped text (at
        most a quarter of the screen); the panels above take the rest (`#top` is 1fr), which is
        where the lanes and the trend show more. With too many jobs for the screen, the table
        gives way down to the rows the GPU and CPU panels need (at most half the screen), so it
        still keeps room at 80x24."""
        height, width = self.size.height, self.size.width
        if not height:
            return  # not laid out yet: on_resize fits it
        top = max(MIN_TOP, min(2 + max(gpu_panel.rows_needed(frame), cpu_panel.rows_needed(frame)), height // 2))
        advice = self.query_one(AdvicePanel).rows(width, max(MIN_ADVICE, height // 4))
        # The header and the footer, and the fleet line, the replay bar and the ended line when shown.
        chrome = 2 + (frame.state.fleet is not None) + self.replay + self.has_class("-ended")
        table = max(MIN_TABLE, min(1 + self.query_one(JobsTable).row_count, height - chrome - advice - top))
        for widget, rows in ((self.query_one(JobsTable), table), (self.query_one(AdvicePanel), advice)):
            if widget.styles.height is None or widget.styles.height.value != rows:
                widget.styles.height = rows

    def on_resize(self) -> None:
        if self.frame is not None:
            self.query_one(AdvicePanel).show(self.frame.state)  # its items are cut to the new width
            self._fit(self.frame)

    @staticmethod
    def _ended(frame: Frame) -> bool:
        return frame.link_error is not None or not frame.state.status.live

    def on_unmount(self) -> None:
        if self._clips is not None:
            self._clips.close()
        for name in self._names.values():
            with contextlib.suppress(ScreenStackError):  # the app is exiting with it still shown
                self.app.uninstall_screen(name)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Controls only for a live run that has not ended; scrubbing only in a replay; the report
        once the run is over (a replay's too), and a replay of it once it ended here."""
        if action == "report":
            return self.frame is not None and (self.replay or self._ended(self.frame))
        if action == "replay":
            return self.frame is not None and not self.replay and self._ended(self.frame)
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
            self.notify(str(exc), title="command not sent", severity="error", markup=False)
            return
        self.notify(done, markup=False)

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

    def action_clip(self) -> None:
        """Record a clip of the selected job's newest checkpoint in the background (a niced player
        process, never the worker), into its videos/ and TensorBoard; say where it goes, then where
        it went."""
        if self.frame is None or (job := self._selected()) is None:
            return
        job_dir = RunDir(Path(self.frame.state.run_dir)).job(job)
        checkpoint = newest_checkpoint(job_dir.checkpoints)  # a listing; the rest is read on the recorder's thread
        if checkpoint is None:
            self.notify(f"{job_dir.path}: no checkpoint yet (a job checkpoints every checkpoint_every steps and at "
                        "its end)", title="no clip", severity="warning", markup=False)  # fmt: skip
            return
        if self._clips is None:
            self._clips = ClipRecorder()
            self.set_interval(1.0, self._clips_done)
        self._clips.submit(JobClip(job_dir.path, f"job {job}", checkpoint, tensorboard=job_dir.tensorboard.is_dir()))
        self.notify(f"job {job}: recording a clip of {checkpoint.name} in the background, to "
                    f"{job_dir.clip_for(checkpoint)}", markup=False)  # fmt: skip

    def _clips_done(self) -> None:
        """Say where each clip recorded since the last look went (or why it was not made)."""
        for done in self._clips.take_done() if self._clips is not None else ():
            self.notify(
                done.line(), title="clip", severity="information" if done.clip else "error", markup=False, timeout=15
            )  # where it went: longer than the default few seconds

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

    def action_report(self) -> None:
        """Show `cockpit report RUN_DIR` for this run; a run without a readable record costs a
        notice."""
        if self.frame is None:
            return
        run_dir = Path(self.frame.state.run_dir)
        try:
            text = report_text(run_dir, max(40, self.size.width - 2))
        except (ConfigError, OSError) as exc:
            self.notify(str(exc), title="no report", severity="error", markup=False)
            return
        self.app.push_screen(ReportScreen(run_dir, text))

    def action_replay(self) -> None:
        """Reopen the run that ended as a replay, at its end; quitting it still tells the command
        line how the run ended (`outcome`)."""
        if self.frame is None:
            return
        try:
            replay = open_replay(Path(self.frame.state.run_dir))
        except SourceError as exc:
            self.notify(str(exc), title="no replay", severity="error", markup=False)
            return
        self.app.replay_ended(replay, self.frame)  # type: ignore[attr-defined]

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
            self.app.exit(self.outcome if self.outcome is not None else self.frame)
            return

        def chosen(choice: str | None) -> None:
            if choice == LEAVE:
                self.app.exit(self.frame)
            elif choice == STOP_ALL:
                self.stopping_all = True
                self.action_stop_all()
                self.notify("the cockpit closes when every job has stopped")

        self.app.push_screen(QuitScreen(self.frame.state.run_dir), chosen)
