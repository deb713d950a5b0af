"""Fleet benchmarks, one subcommand each: `python -m benchmarks.fleet SUBCOMMAND [ARGS]`.

- `overlap` (benchmarks/fleet_overlap.py): the fleet model's predicted aggregate SPS of N slots
  (`cockpit.core.sizing.overlap.speed_of`, from one job's probed costs) against N real concurrent workers;
- `run` (benchmarks/fleet_run.py, once it exists): a whole fleet, end to end.

Each subcommand lives in its own module with a `main(argv) -> int`; this module only dispatches,
importing the subcommand's module when it is asked for, so adding one touches nothing else's code.

Run from the repo root:
    .venv/bin/python -m benchmarks.fleet overlap --seconds 20
    .venv/bin/python -m benchmarks.fleet overlap --help
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

# subcommand: (module with `main(argv) -> int`, one line of help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "overlap": ("benchmarks.fleet_overlap", "predicted aggregate SPS of 1-4 slots against measured concurrent workers"),
    "run": ("benchmarks.fleet_run", "a whole fleet, end to end"),
    "threads": ("benchmarks.fleet_threads", "one job alone at 1 vs K env threads, in turns"),
}
NOT_BUILT_EXIT = 2


def _entry(module_name: str) -> Callable[[list[str]], int] | None:
    """The subcommand module's `main`, or None when that module does not exist yet."""
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:  # the module itself is missing, not something it imports
            return None
        raise
    entry: Callable[[list[str]], int] = module.main
    return entry


def main(argv: list[str] | None = None) -> int:
    """Parse the subcommand and hand the rest of the command line to its module."""
    listing = "\n".join(f"  {name:<8} {help_}" for name, (_, help_) in SUBCOMMANDS.items())
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.fleet",
        description=__doc__.split("\n\n")[0],
        epilog=f"subcommands:\n{listing}\n\n`python -m benchmarks.fleet SUBCOMMAND --help` for a subcommand's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("subcommand", choices=sorted(SUBCOMMANDS), metavar="SUBCOMMAND")
    parser.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    module_name, _ = SUBCOMMANDS[ns.subcommand]
    entry = _entry(module_name)
    if entry is None:
        print(f"python -m benchmarks.fleet {ns.subcommand}: not built yet ({module_name} does not exist)",
              file=sys.stderr)  # fmt: skip
        return NOT_BUILT_EXIT
    return entry(list(ns.args))


if __name__ == "__main__":
    sys.exit(main())
