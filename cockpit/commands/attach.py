"""`cockpit attach RUN_DIR`: the cockpit on a live run (its control socket) or a replay of a
finished one."""

from __future__ import annotations

import sys
from pathlib import Path

from cockpit.commands.console import interactive
from cockpit.commands.frontends import FrontEnds
from cockpit.core.feed import SourceError
from cockpit.core.runs import open_run


def main(run_dir: Path, front: FrontEnds) -> int:
    """Open the cockpit on `run_dir`; exit 2 with one line when it is no run or there is no terminal."""
    try:
        source = open_run(run_dir)
    except SourceError as exc:
        print(f"cockpit attach: error: {exc}", file=sys.stderr)
        return 2
    if not interactive():
        source.close()
        print(f"cockpit attach: error: the cockpit needs a terminal; without one, read: cockpit report {run_dir}",
              file=sys.stderr)  # fmt: skip
        return 2
    return front.watch(source, who="cockpit attach")
