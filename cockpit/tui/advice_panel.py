"""The advice panel. Until the advisor lands it lists what the supervisor already warns about:
an oversubscribed CPU thread budget, a run log that could not be written, unknown commands."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from cockpit.core.state import RunState


class AdvicePanel(Static):
    """Shows the run's warnings, newest last; redraws only when they change."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self._shown: tuple[str, ...] | None = None

    def show(self, state: RunState) -> None:
        """Display `state.warnings` (or that there is nothing to act on)."""
        if state.warnings == self._shown:
            return
        self._shown = state.warnings
        if not state.warnings:
            self.update(Text("Advice: nothing to act on.", style="dim"))
            return
        text = Text("Advice\n", style="bold")
        text.append("\n".join(w.removeprefix("warning: ") for w in state.warnings))
        self.update(text)
