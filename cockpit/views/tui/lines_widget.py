"""A widget drawn as a list of text lines through Textual's line API, redrawing only the lines
that changed.

The GPU and CPU panels get a new frame five times a second, but most of their rows are the same
as before (the time buckets only move once a second, most cores and jobs hold steady). Rendering
through `render()` would rebuild every row each time; here a row that did not change is neither
converted again nor repainted, which keeps the cockpit's own CPU use small.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

from cockpit.core.feed.source import Frame


class LinesWidget(Widget):
    """Subclasses build their rows in `lines()`; `redraw()` diffs and repaints."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._rows: list[Text] = []
        self._strips: dict[int, Strip] = {}
        self._part_styles: dict[str, Style] = {}

    def lines(self) -> list[Text]:
        """The rows to show now, top first (override)."""
        return []

    def component_style(self, name: str) -> Style:
        """A component class's style (partial), kept until the widget's styles change: Textual's
        own cache of it is emptied at every refresh, which `redraw()` asks for at every frame."""
        style = self._part_styles.get(name)
        if style is None:
            style = self._part_styles[name] = self.get_component_rich_style(name, partial=True)
        return style

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._part_styles.clear()
        self._strips.clear()  # they carry the widget's own style

    def redraw(self) -> None:
        """Rebuild the rows and repaint the ones that differ from what is on screen."""
        rows = self.lines()
        old = self._rows
        self._rows = rows
        if len(rows) != len(old):
            self._strips.clear()
            self.refresh()
            return
        width = self.size.width
        for y, (new, before) in enumerate(zip(rows, old, strict=True)):
            if new.plain != before.plain or new.spans != before.spans:
                self._strips.pop(y, None)
                self.refresh(Region(0, y, width, 1))

    def on_resize(self) -> None:
        self._strips.clear()
        self.redraw()
        self.refresh()

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._rows)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        strip = self._strips.get(y)
        if strip is None:
            if y < len(self._rows):
                text = self._rows[y]
                segments = list(text.render(self.app.console, end=""))
                strip = Strip(segments).crop_extend(0, width, None)
            else:
                strip = Strip([Segment(" " * width)])
            strip = strip.apply_style(self.rich_style)
            self._strips[y] = strip
        return strip


class FramePanel(LinesWidget):
    """A panel that renders the newest `Frame` given to `show()` in `lines()`; owns no run state."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self._frame: Frame | None = None

    def show(self, frame: Frame) -> None:
        """Draw this frame (only the rows that changed are repainted)."""
        self._frame = frame
        self.redraw()
