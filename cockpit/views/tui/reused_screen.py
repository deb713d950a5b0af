"""A screen made once and pushed again and again (help, fleet, job detail) that is not restyled
each time it shows.

Textual restyles every node of a screen it pushes (it may have missed an app-wide style change
while hidden), which also throws away every line each widget had drawn: on a busy machine the
largest part of `?` or `f`. Only a change of the app's theme, classes or pseudo-classes (focus,
dark, ansi...) reaches the screens that are not shown, so the restyle is kept for when one of
those changed since the screen was last styled.
"""

from __future__ import annotations

from textual import events, on
from textual.screen import Screen


class ShownAgain(Screen[None]):
    """Restyled when pushed only if the app's styling changed since it was last shown."""

    _styled_for: tuple[object, ...] | None = None

    @on(events.ScreenResume)
    def _restyle_if_needed(self, event: events.ScreenResume) -> None:
        # Runs before Screen's own handler, which restyles (Textual calls a class's handlers before
        # its base's), and besides a subclass's on_screen_resume.
        styled_for = (self.app.theme, frozenset(self.app.classes), self.app.pseudo_classes)
        if styled_for == self._styled_for:
            event.refresh_styles = False
        self._styled_for = styled_for
