"""`cockpit presets`: every preset's resolved values, its total batch and its gradient steps."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from rich import box
from rich.table import Table

from cockpit.commands.console import output_console
from cockpit.contract.presets import PRESET_KEYS, Preset, PresetError, builtin_names, load


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


def main(specs: Sequence[str]) -> int:
    """Print the presets named (built-in names or .toml paths; all built-ins when empty)."""
    try:
        presets = [load(spec) for spec in specs or builtin_names()]
    except PresetError as exc:
        print(f"cockpit presets: error: {exc}", file=sys.stderr)
        return 2
    console = output_console()
    console.print(presets_table(presets))
    for preset in presets:
        console.print(f"[bold]{preset.name}[/] ({preset.source}): {preset.description}")
    return 0
