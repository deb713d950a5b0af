"""A run directory is code: what `--resume` checks before it trusts one, and what it says it will run.

A run directory's `run.toml` records an `--on-done` shell command and, for a script run, the
command template each job runs (`cockpit run -- COMMAND`); `--resume` (and `cockpit-pod`, which
resumes by itself) runs both, as the user who resumes. Its checkpoints hold cloudpickle and pickle,
which run code when loaded. So a resume treats the directory as OpenSSH's StrictModes treats
`~/.ssh`: it must belong to the user resuming it and be writable by nobody else, and so must
`run.toml`; else another user of the machine could have written the commands it is about to run.
And before anything starts, the commands it recorded are printed, one line each, so that a
command added by hand is seen, not just run. docs/security.md says what else is trusted and why.
"""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

from cockpit.contract.rundir import RunDir
from cockpit.contract.settings import RunSettings

GROUP_OR_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def untrusted(run_dir: Path) -> str | None:
    """Why the run directory `run_dir` may not be resumed, in one line (it, or its `run.toml`, is
    not owned by this process's effective user, or is writable by its group or by others); None
    when it may. A path that cannot be read is left to the resume's own errors (None)."""
    for path in (run_dir, RunDir(run_dir).run_toml):
        try:
            info = os.stat(path)
        except OSError:
            continue
        mode = stat.S_IMODE(info.st_mode)
        if info.st_uid != os.geteuid():
            why = f"owned by uid {info.st_uid}, not by you (uid {os.geteuid()})"
            fix = "resume only a run directory of your own"
        elif mode & GROUP_OR_OTHERS_WRITE:
            why = f"writable by its group or by others (mode {mode:o})"
            fix = f"once you have checked it, chmod go-w {shlex.quote(str(path))}"
        else:
            continue
        return (
            f"{path} is {why}: a run directory holds commands the resume runs (run.toml's --on-done and "
            f"script) and pickles it loads; {fix}"
        )
    return None


def recorded_commands(config: RunSettings) -> list[str]:
    """What a resume of a run recorded with `config` will run beside cockpit's own worker, one line
    each: its `--on-done` command and its script's command template (none when it has neither)."""
    lines = []
    if config.on_done is not None:
        lines.append(f"--on-done from run.toml: {config.on_done!r}")
    if config.script is not None:
        lines.append(f"script from run.toml: {shlex.join(config.script)!r}")
    return lines
