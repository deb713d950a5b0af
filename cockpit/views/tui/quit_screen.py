"""The quit dialog: stop every job, or leave the run going and attach again later."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid
from textual.screen import ModalScreen
from textual.widgets import Button, Label

STOP_ALL = "stop"
LEAVE = "leave"


class QuitScreen(ModalScreen[str | None]):
    """Dismisses with `STOP_ALL`, `LEAVE`, or None (cancel)."""

    BINDINGS = [  # noqa: RUF012
        Binding("s", "choose('stop')", "Stop all jobs"),
        Binding("l", "choose('leave')", "Leave running"),
        Binding("escape", "choose('')", "Cancel"),
    ]

    def __init__(self, run_dir: str) -> None:
        super().__init__()
        self.run_dir = run_dir

    def compose(self) -> ComposeResult:
        with Grid(id="quit-dialog"):
            yield Label(
                Text(
                    "Quit the cockpit. Stop every job (each checkpoints first), or leave them training and "
                    f"come back with:\n  cockpit attach {self.run_dir}"
                ),
                id="quit-question",
            )
            yield Button("Stop all jobs [s]", variant="error", id=STOP_ALL)
            yield Button("Leave running [l]", variant="primary", id=LEAVE)
            yield Button("Cancel [esc]", id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_choose(event.button.id or "")

    def action_choose(self, choice: str) -> None:
        """Close the dialog with the choice ("" or "cancel" cancels)."""
        self.dismiss(choice if choice in (STOP_ALL, LEAVE) else None)
