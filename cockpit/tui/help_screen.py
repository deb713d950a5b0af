"""The help screen (`?`): what each panel shows and what each key does."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = """\
# cockpit

**GPU panel**: utilization (peaks per column, from NVML's own 5 Hz+ sample buffer) and memory over
the last 60 s. Below, one lane per running job on the same time axis: `░` rollout (CPU: env
stepping and inference), `█` train (PPO epochs: the GPU burst). When the lanes' `█` line up with
the utilization bursts and the gaps between them are empty, more jobs would fill the gaps.

**CPU panel**: every core, then each job's process tree as % of one core against its env-thread
budget.

**Jobs**: one row per job. Enter opens a job's detail: config, events, stderr, learning curve,
SPS over time and checkpoints.

| key | action |
|---|---|
| `a` | add a job (next seed, same preset) |
| `s` | stop the selected job (it checkpoints, then stops) |
| `r` | restart the selected job (from its checkpoint) |
| `k` | kill the selected job now (SIGKILL; it resumes from its last checkpoint) |
| `S` | stop all jobs: the run ends and can be resumed with `cockpit run --resume` |
| `enter` | job detail |
| `q` | quit: stop all jobs, or leave them running and `cockpit attach RUN_DIR` later |
| `←` `→` `[` `]` | replay: scrub 5 s or 60 s |

Press `escape` or `?` to close.
"""


class HelpScreen(ModalScreen[None]):
    """A scrollable page of help."""

    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]  # noqa: RUF012

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Markdown(HELP)
