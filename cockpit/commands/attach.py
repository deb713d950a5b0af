"""`cockpit attach RUN_DIR|NAME`: the cockpit on a live run (its control socket) or a replay of a
finished one, given its directory or its name.

An argument that is an existing directory is that run. Anything else that is a run name (`--name`,
or a fleet plan's name) is looked up under `runs/`: the newest run of that name, by the UTC time
that starts its directory's name (`cockpit.core.record.find_runs.named_run`)."""

from __future__ import annotations

import sys
from pathlib import Path

from cockpit.commands.console import interactive
from cockpit.contract.rundir import RUN_NAME_PATTERN, RUNS
from cockpit.core.feed.source import SourceError
from cockpit.core.record.find_runs import named_run
from cockpit.core.session.front_ends import FrontEnds, watch_run


def find(run_dir: Path, root: Path = RUNS) -> Path:
    """The run directory `run_dir` names: itself when it is a directory, else the newest run under
    `root` whose name it is. SourceError (one line) naming what was looked for and where when it
    is a run name that no run under `root` has; any other missing path is left to `open_run`."""
    text = str(run_dir)
    if run_dir.is_dir() or not RUN_NAME_PATTERN.fullmatch(text):
        return run_dir
    found = named_run(text, root)
    if found is None:
        raise SourceError(
            f"no run directory {text} here, and no run named {text!r} in {root}/ "
            f"(runs get a name with: cockpit run --name {text})"
        )
    return found


def main(run_dir: Path, front: FrontEnds) -> int:
    """Open the cockpit on the run `run_dir` names (its directory, or its name: `find`); exit 2 with
    one line when it is no run or there is no terminal."""
    try:
        run_dir = find(run_dir)
    except SourceError as exc:
        print(f"cockpit attach: error: {exc}", file=sys.stderr)
        return 2
    return watch_run(run_dir, front, terminal=interactive())
