"""The advice panel: the advisor's items for this run with their reasons (one selected, `A`
applies it), the --auto loop's decisions, and what the supervisor warns about.

A sentence cut at the panel's edge reads as a different piece of advice, so the selected item,
the decisions and the warnings wrap whole; the other items keep to their first line (`v` selects
the next one, which then opens whole)."""

from __future__ import annotations

from rich.text import Text
from textual.geometry import Size
from textual.widgets import Static

from cockpit.core.feed.snapshot import RunState

MAX_AUTO = 2
PADDING = 2  # the panel's padding left and right (cockpit.tcss)


class AdvicePanel(Static):
    """Shows advice and warnings; redraws only when they, the selection or the width change."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self._shown: tuple[object, ...] | None = None
        self.selected = 0

    def show(self, state: RunState) -> None:
        """Display the state's suggestions, auto decisions and warnings."""
        self.selected = min(self.selected, max(0, len(state.suggestions) - 1))
        # Before the first layout the panel has no width: it will be as wide as the screen.
        width = (self.size.width or self.app.size.width) - PADDING
        key = (state.suggestions, state.advice[-MAX_AUTO:], state.warnings, self.selected, width)
        if key == self._shown:
            return
        self._shown = key
        lines = Text()
        for i, item in enumerate(state.suggestions):
            line = Text("▶ " if i == self.selected else "  ", style="bold")
            line.append(f"{item.setting} {item.current} -> {item.suggested}", style="bold")
            line.append(f": {item.effect} ({item.reason})")
            if i != self.selected and width > 0:
                line.truncate(width, overflow="ellipsis")
            lines.append_text(line).append("\n")
        for line in state.advice[-MAX_AUTO:] + tuple(w.removeprefix("warning: ") for w in state.warnings):
            lines.append(f"  {line}\n")
        if not lines.plain:
            self.update(Text("Advice: nothing to act on.", style="dim"))
            return
        lines.rstrip()
        title = "Advice (v: next, A: apply)\n" if state.suggestions else "Advice\n"
        self.update(Text(title, style="bold").append_text(lines))

    def rows(self, width: int, most: int) -> int:
        """The panel's height on a screen `width` columns wide: its text wrapped to its width, plus
        its top border, but at most `most` rows."""
        inside = max(1, width - PADDING)
        needed = self.get_content_height(Size(width, most), Size(width, most), inside)
        return max(2, min(most, needed + 1))
