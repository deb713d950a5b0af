"""The help screen (`?`): what each panel shows and what each key does.

It is plain text in one Static rather than Markdown widgets: it opens on a machine whose cores
are all busy training, and a few nodes restyle much faster than a Markdown tree."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from cockpit.views.tui.reused_screen import ShownAgain

PANELS = """\
GPU panel: "busy", NVML's utilization: the share of time in which any kernel ran on the GPU, not
how much of the GPU the kernels used (a single small kernel at a time reads 100%); the peak in each
column, from NVML's own sample buffer. The head line says how it is read: "buffer, 167 ms samples"
(the driver's measured sample spacing: a burst shorter than that can be missed), "1 Hz poll", or
"not per MIG slice". Memory below it, over the last 60 s. Below them, one lane per job on the
same time axis: ░ rollout (CPU: env stepping and inference), █ train (PPO epochs: the GPU burst).
When the █ cells line up with the busy bursts and the gaps between them stay empty, more jobs
would fill the gaps.

CPU panel: every core, then each job's process tree as % of one core; a full bar is its
env-thread budget.

Jobs: one row per job. SPS is its throughput: steps per wall-clock second over its recent whole
rollout + train cycles (at least 30 s), lowered at once by a cycle that runs long; "-" until its
first cycle ends. ETA is its steps left at that rate; the header adds the run's, queued jobs
included. GPU mem and SM% (wide terminals) are its processes' GPU memory and their share of the
SM as NVML samples it, "-" when NVML cannot say (no sample yet, or a container without the host's
PIDs). Enter opens its detail: config, events, stderr, learning curve, rollout SPS over time
(the rate while stepping, not the throughput) and checkpoints.

Fleets (cockpit fleet PLAN.toml): a line under the header gives each tier's finished/entered
agents, the ETA and, with a rate, the cost; the jobs table holds the running and the latest
ended agents, not all of them. f opens the fleet screen: per tier the agents planned, entered,
queued, running, finished, promoted, culled and failed, with its ETA; the leaderboard (each
agent's best tier and score, its settings and seed); the cost so far and projected; and the
latest promotions.
"""

KEYS = (
    ("a", "add a job (next seed, same preset)"),
    ("s", "stop the selected job (it checkpoints, then stops)"),
    ("r", "restart the selected job (from its checkpoint)"),
    ("k", "kill the selected job now (SIGKILL; it resumes from its last checkpoint)"),
    ("S", "stop all jobs: the run ends, resumable with cockpit run --resume RUN_DIR"),
    ("c", "clip: record the selected job's newest checkpoint playing, in the background, into its videos/"),
    ("enter", "job detail"),
    ("f", "fleet screen (a fleet's tiers, leaderboard, ETA and cost)"),
    ("q", "quit: stop all jobs, or leave them running and cockpit attach RUN_DIR later"),
    ("r (ended)", "once the run is over (or in a replay): its report, as cockpit report RUN_DIR prints it"),
    ("p (ended)", "once the run is over: replay it, from its end"),
    ("← → [ ]", "replay: scrub 5 s or 60 s; home and end jump"),
)


def help_text() -> Table:
    """The whole help page."""
    keys = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    keys.add_column("key", no_wrap=True)
    keys.add_column("action")
    for key, action in KEYS:
        keys.add_row(key, action)
    page = Table.grid()
    page.add_row(Text("cockpit\n", style="bold"))
    # One line per paragraph, so the text wraps to the terminal instead of at 100 columns.
    paragraphs = [" ".join(p.split()) for p in PANELS.split("\n\n")]
    page.add_row(Text("\n\n".join(paragraphs)))
    page.add_row(keys)
    page.add_row(Text("\nPress escape or ? to close.", style="dim"))
    return page


class HelpScreen(ShownAgain):
    """A scrollable page of help, full screen: a modal would re-render the busy cockpit beneath
    it, dimmed, at every refresh."""

    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]  # noqa: RUF012

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static(help_text())
