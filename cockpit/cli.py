"""The `cockpit` command line."""

from __future__ import annotations

import argparse
import sys

from rich import box
from rich.console import Console
from rich.table import Table

from cockpit.arguments import ArgumentParser
from cockpit.presets import PRESET_KEYS, Preset, PresetError, builtin_names, load


def presets_table(presets: list[Preset]) -> Table:
    """One column per preset and one row per resolved value, plus the derived batch figures."""
    table = Table(title="cockpit presets", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("key", style="bold", no_wrap=True)
    for preset in presets:
        table.add_column(preset.name, justify="right", no_wrap=True)
    derived = [
        ("total batch", lambda p: f"{p.total_batch:,}"),
        ("minibatches/epoch", lambda p: str(p.minibatches)),
        ("grad steps/update", lambda p: f"{p.gradient_steps_per_update:,}"),
    ]
    hidden = {"description", "batch_size_cap"}
    for key in PRESET_KEYS:
        if key in hidden:
            continue
        cells = []
        for preset in presets:
            value = getattr(preset, key)
            if key == "net_arch":
                cells.append(",".join(map(str, value)))
            elif key == "batch_size" and preset.batch_size_auto:
                cells.append(f"{value:,} (auto, cap {preset.batch_size_cap:,})")
            elif isinstance(value, bool):
                cells.append(str(value).lower())
            elif isinstance(value, int):
                cells.append(f"{value:,}")
            else:
                cells.append(f"{value:g}" if isinstance(value, float) else str(value))
        table.add_row(key, *cells)
    table.add_section()
    for label, fmt in derived:
        table.add_row(label, *(fmt(p) for p in presets))
    return table


def _cmd_presets(args: argparse.Namespace) -> int:
    specs = args.preset or builtin_names()
    try:
        presets = [load(spec) for spec in specs]
    except PresetError as exc:
        print(f"cockpit presets: error: {exc}", file=sys.stderr)
        return 2
    console = Console()
    if not console.is_terminal:
        # Piped output has no width to fit; don't truncate values to rich's 80-column default.
        console = Console(width=120)
    console.print(presets_table(presets))
    for preset in presets:
        console.print(f"[bold]{preset.name}[/] ({preset.source}): {preset.description}")
    return 0


def build_parser() -> ArgumentParser:
    """The `cockpit` command and its subcommands."""
    parser = ArgumentParser(
        prog="cockpit",
        description="Keep one GPU workstation busy with parallel PPO training jobs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    presets = sub.add_parser(
        "presets",
        help="list the training presets with their resolved values",
        description="Show every preset's resolved PPO settings, its total batch per rollout and "
        "its gradient steps per update. Give names or .toml paths to show just those.",
    )
    presets.add_argument("preset", nargs="*", help="preset names or .toml files (default: all built-in presets)")
    presets.set_defaults(func=_cmd_presets)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `cockpit` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return args.func(args)
