"""What a background run makes of the arguments it is started with: the spec it validates."""

from __future__ import annotations

from collections.abc import Sequence

from cockpit.cli import build_parser
from cockpit.commands import run as run_command
from cockpit.contract.runspec import RunSpec
from cockpit.core.session.background import typed_command_line


def child_spec(argv: Sequence[str]) -> RunSpec:
    """The spec `cockpit run --headless ARGV` validates (as `background.spawn` starts it, with
    `headless_argv`'s ARGV), on a machine without GPUs, recording the command line it was handed."""
    args = build_parser().parse_args(["run", "--headless", *argv])
    args.script, args.argv = None, list(argv)
    command_line = typed_command_line(args.typed, argv)
    assert command_line is not None
    return run_command._spec(args, None, command_line)
