"""A job's detail (Enter on a row): resolved config, learning curve, rollout SPS over time (the
worker's own rate while it steps, labelled so: the throughput and ETA are in the title),
checkpoints, the event log and the stderr tail. The files are re-read every 2 s off the UI thread."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Label, Sparkline, Static

from cockpit.contract.events import CheckpointEvent, ErrorEvent, Event, FinishedEvent, StartedEvent
from cockpit.core.feed.snapshot import preset_label
from cockpit.core.feed.source import JobDetail, RunSource, SourceError
from cockpit.formatting import eta, num, steps_of
from cockpit.views.tui.footer import Keys
from cockpit.views.tui.reused_screen import ShownAgain

REFRESH_S = 2.0


def _config_text(config: Any, indent: str = "") -> str:
    lines = []
    for key, value in config.items():
        if isinstance(value, dict):
            lines.append(f"{indent}{key}:")
            lines.append(_config_text(value, indent + "  "))
        else:
            lines.append(f"{indent}{key} = {value}")
    return "\n".join(lines)


def _event_line(event: Event) -> str:
    stamp = time.strftime("%H:%M:%S", time.localtime(event.t))
    if isinstance(event, CheckpointEvent):
        what = f"checkpoint at step {event.step:,}"
    elif isinstance(event, StartedEvent):
        resumed = event.resumed_from_step
        what = f"started on {event.device}" + (f", resumed from step {resumed:,}" if resumed else "")
    elif isinstance(event, FinishedEvent):
        what = f"finished: {event.status} at {event.steps:,} steps"
    elif isinstance(event, ErrorEvent):
        what = f"error {event.reason}"
    else:
        what = event.kind
    return f"{stamp} {what}"


class JobDetailScreen(ShownAgain):
    """Everything about one job; escape goes back to the cockpit.

    One instance serves every job (`show_job()` before pushing it): composing a screen costs more
    than a frame's worth of time on a busy machine, so it is done once."""

    BINDINGS = [Binding("escape,q", "app.pop_screen", "Back")]  # noqa: RUF012

    def __init__(self, source: RunSource, job_id: str) -> None:
        super().__init__()
        self.source = source
        self.job_id = job_id

    def compose(self) -> ComposeResult:
        yield Label(Text(f"job {self.job_id}"), id="detail-title")
        with Horizontal(id="detail-body"):
            with VerticalScroll(id="detail-config"):
                yield Static("reading the job's files…", id="config")
            with Vertical(id="detail-right"):
                yield Label("ep_rew_mean over steps", id="curve-label")
                yield Sparkline([], id="curve")
                yield Label("rollout SPS over time", id="sps-label")
                yield Sparkline([], id="sps")
                yield Static("", id="checkpoints")
                yield Static("", id="events")
                yield Static("", id="stderr")
        yield Keys()

    def show_job(self, job_id: str) -> None:
        """Switch to another job; its files are read when the screen is shown."""
        if job_id != self.job_id:
            self.job_id = job_id
            if self.is_mounted:
                self.query_one("#detail-title", Label).update(Text(f"job {job_id}"))
                self.query_one("#config", Static).update("reading the job's files…")

    def on_mount(self) -> None:
        self._timer = self.set_interval(REFRESH_S, self.load, pause=True)

    def on_screen_resume(self) -> None:
        # Paint the screen first, then read the files: the key press shows at once.
        self.call_after_refresh(self.load)
        self._timer.resume()

    def on_screen_suspend(self) -> None:
        self._timer.pause()

    @work(thread=True, exclusive=True)
    def load(self) -> None:
        """Read the job's files (in a thread) and show them."""
        try:
            detail = self.source.detail(self.job_id)
        except SourceError as exc:
            self.app.call_from_thread(self.query_one("#config", Static).update, Text(f"cannot read job: {exc}"))
            return
        self.app.call_from_thread(self.show, detail)

    def show(self, detail: JobDetail) -> None:
        """Fill every part of the screen from `detail`."""
        frame = self.source.frame()
        job = next((j for j in frame.state.jobs if j.id == self.job_id), None) if frame else None
        title = f"job {self.job_id}  {detail.job_dir}"
        if job is not None:
            title += f"  {job.state}  {steps_of(job.steps, job.target)} steps  seed {job.seed}  restarts {job.restarts}"
            # The jobs table drops its preset column at narrow widths: the preset (and overrides) are here.
            title += f"  preset {preset_label(job.preset or frame.state.preset, job.overrides)}" if frame else ""
            if job.state.stepping:
                title += f"  {num(job.sps)} SPS  ETA {eta(job.eta_s)}"
            if job.memory is not None:  # the leak watch: the flag with its rate, "no growth", or not yet
                title += f"  {job.memory}" if job.memory_growing else f"  memory: {job.memory}"
        self.query_one("#detail-title", Label).update(Text(title))
        # A running job without events: a script without CockpitCallback (the reason says so).
        silent = job.exit_reason if job is not None and job.state.stepping and job.exit_reason else None
        self.query_one("#config", Static).update(
            Text(_config_text(detail.config) if detail.config else silent or "the worker has not started yet")
        )
        rewards = [r for _, r in detail.curve]
        curve_label = "ep_rew_mean over steps: no episode finished yet"
        if rewards:
            curve_label = (
                f"ep_rew_mean over steps {detail.curve[0][0]:,}..{detail.curve[-1][0]:,}: "
                f"min {min(rewards):.1f}  max {max(rewards):.1f}  last {rewards[-1]:.1f}"
            )
        self.query_one("#curve-label", Label).update(curve_label)
        self.query_one("#curve", Sparkline).data = rewards
        sps = [v for _, v in detail.sps]
        sps_label = "rollout SPS over time: none yet"
        if sps:
            sps_label = f"rollout SPS over time: last {num(sps[-1])}  max {num(max(sps))}"
        self.query_one("#sps-label", Label).update(sps_label)
        self.query_one("#sps", Sparkline).data = sps
        checkpoints = "\n".join(f"  step {c.step:,}  {c.path}" for c in detail.checkpoints) or "  none yet"
        self.query_one("#checkpoints", Static).update(Text(f"checkpoints\n{checkpoints}"))
        events = "\n".join(_event_line(e) for e in detail.events[-12:]) or "none yet"
        self.query_one("#events", Static).update(Text(f"events\n{events}"))
        stderr = "\n".join(detail.stderr_tail[-8:]) or "empty"
        self.query_one("#stderr", Static).update(Text(f"stderr tail\n{stderr}"))
