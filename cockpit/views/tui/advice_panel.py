"""The advice panel: the advisor's items for this run with their reasons (one selected, `A`
applies it), the --auto loop's decisions, and what the supervisor warns about."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from cockpit.core.feed.snapshot import RunState

MAX_AUTO = 2


class AdvicePanel(Static):
    """Shows advice and warnings; redraws only when they or the selection change."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self._shown: tuple[object, ...] | None = None
        self.selected = 0

    def show(self, state: RunState) -> None:
        """Display the state's suggestions, auto decisions and warnings."""
        self.selected = min(self.selected, max(0, len(state.suggestions) - 1))
        key = (state.suggestions, state.advice[-MAX_AUTO:], state.warnings, self.selected)
        if key == self._shown:
            return
        self._shown = key
        lines = Text()
        for i, item in enumerate(state.suggestions):
            mark = "▶ " if i == self.selected else "  "
            lines.append(mark, style="bold").append(f"{item.setting} {item.current} -> {item.suggested}", style="bold")
            lines.append(f": {item.effect} ({item.reason})\n")
        for line in state.advice[-MAX_AUTO:] + tuple(w.removeprefix("warning: ") for w in state.warnings):
            lines.append(f"  {line}\n")
        if not lines.plain:
            self.update(Text("Advice: nothing to act on.", style="dim"))
            return
        lines.rstrip()
        title = "Advice (v: next, A: apply)\n" if state.suggestions else "Advice\n"
        self.update(Text(title, style="bold").append_text(lines))
