"""The advice panel: the --auto loop's decisions with their numbers, then what the supervisor
warns about (an oversubscribed CPU thread budget, a run log that could not be written)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from cockpit.core.state import RunState

MAX_ADVICE = 3


class AdvicePanel(Static):
    """Shows the run's advice and warnings, newest last; redraws only when they change."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self._shown: tuple[str, ...] | None = None

    def show(self, state: RunState) -> None:
        """Display `state.advice` and `state.warnings` (or that there is nothing to act on)."""
        lines = state.advice[-MAX_ADVICE:] + tuple(w.removeprefix("warning: ") for w in state.warnings)
        if lines == self._shown:
            return
        self._shown = lines
        if not lines:
            self.update(Text("Advice: nothing to act on.", style="dim"))
            return
        self.update(Text("Advice\n", style="bold").append("\n".join(lines)))
