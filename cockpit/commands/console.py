"""The rich Console the command line prints with, and whether a terminal is there to take over."""

from __future__ import annotations

import sys
from collections.abc import Callable

from rich.console import Console

PIPE_WIDTH = 160


def output_console() -> Console:
    """A console for stdout; piped output gets a wide fixed width instead of rich's 80 columns,
    so tables are not truncated in logs and files."""
    console = Console()
    return console if console.is_terminal else Console(width=PIPE_WIDTH)


def interactive() -> bool:
    """True when stdin and stdout are a terminal the TUI can take over."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def say(console: Console) -> Callable[[str], None]:
    """A line printer on `console` that prints text as it is (no markup, no highlighting)."""
    return lambda text: console.print(text, highlight=False, markup=False)
