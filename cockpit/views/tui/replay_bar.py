"""The replay timeline: where in a finished run the cockpit is, with keys to scrub."""

from __future__ import annotations

import time

from rich.text import Text
from textual.widget import Widget

from cockpit.views.tui.timeaxis import hbar


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


class ReplayBar(Widget):
    """One line: the position within the run's span as a bar, and the times."""

    COMPONENT_CLASSES = {"replay--bar"}  # noqa: RUF012

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.span = (0.0, 0.0)
        self.at = 0.0

    def show(self, span: tuple[float, float], at: float) -> None:
        """Draw position `at` within `span`."""
        if (span, at) != (self.span, self.at):
            self.span, self.at = span, at
            self.refresh()

    def render(self) -> Text:
        start, end = self.span
        length = max(end - start, 1e-9)
        head = f"replay {_clock(self.at)} (+{self.at - start:,.0f} s) "
        tail = f" {_clock(end)}  ←/→ 5 s, [ ] 60 s, home/end"
        width = max(4, self.size.width - len(head) - len(tail))
        bar = hbar((self.at - start) / length, width)
        style = self.get_component_rich_style("replay--bar", partial=True)
        return Text(head).append(bar, style=style).append(tail)
