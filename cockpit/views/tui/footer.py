"""The key bar at the bottom of a screen: Textual's Footer, recomposed only when its keys change.

Textual's Footer removes and mounts a widget per key whenever its screen's bindings may have
changed, and a screen says so each time it is shown or hidden (and at every focus change). On the
cockpit, closing the fleet or help screen then styled, laid out and drew eight new widgets on the
UI thread on top of the screen itself: the largest part of that key's time. This one first
compares the keys it would show with those it shows.
"""

from __future__ import annotations

from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer

Shown = tuple[tuple[Binding, bool, str], ...]


def shown_keys(screen: Screen[object]) -> Shown:
    """What a footer on `screen` shows: each binding it offers, enabled or not, and its tooltip."""
    return tuple(
        (active.binding, active.enabled, active.tooltip)
        for active in screen.active_bindings.values()
        if active.binding.show
    )


class Keys(Footer):
    """A Footer that recomposes only when the keys it shows changed."""

    _shown: Shown | None = None

    def bindings_changed(self, screen: Screen[object]) -> None:
        if not (screen.app.app_focus and self.is_attached and screen is self.screen):
            super().bindings_changed(screen)  # nothing is recomposed then
            return
        shown = shown_keys(screen)
        if shown == self._shown:
            return
        self._shown = shown
        super().bindings_changed(screen)
