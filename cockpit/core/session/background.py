"""A supervised run in the background: `cockpit run --headless` detached from the terminal, and
the wait until its control socket answers.

`cockpit run` on a terminal, and the TUI's start screen, start the run this way and then attach the TUI to
it. The run lives in its own session, so quitting the viewer, a closed terminal or a dropped ssh
login leaves it training; `cockpit attach RUN_DIR` finds it again.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cockpit.contract.files import user_umask
from cockpit.contract.rundir import RunDir
from cockpit.contract.runspec import LOCAL_RAY, RunSpec
from cockpit.contract.settings import encode
from cockpit.core.feed.control import AttachSource
from cockpit.core.feed.source import SourceError
from cockpit.core.launch.local import log_tail

ATTACH_TIMEOUT_S = 60.0


@dataclass
class BackgroundRun:
    """A detached `cockpit run --headless` and where it writes."""

    run_dir: Path
    process: subprocess.Popen[bytes]

    @property
    def log(self) -> Path:
        """The run's console output (plain, timestamped lines)."""
        return RunDir(self.run_dir).log


def headless_argv(spec: RunSpec, *, resume: bool = False, auto_window_s: int | None = None) -> list[str]:
    """`cockpit run --headless` arguments that carry out the validated `spec` (`resume`: continue
    the run in `spec.run_dir`; `auto_window_s`: with --auto): the spec as data (`spec_argv`), not
    its flags spelled again. run.toml records what the user typed (`spec.command_line`), not these."""
    auto = ["--auto", "--auto-window", str(auto_window_s)] if auto_window_s is not None else []
    return [*(["--resume", str(spec.run_dir)] if resume else []), *auto, *spec_argv(spec)]


def spec_argv(spec: RunSpec) -> list[str]:
    """What a background `cockpit run` or `cockpit fleet` needs to carry out the validated `spec`:
    its settings as data (`--spec JSON`, `settings.encode`; the child reads them back with
    `settings.decode` and validates them again), where it runs (`cluster_argv`) and what the user
    typed (`typed_argv`)."""
    return ["--spec", encode(spec), *cluster_argv(spec), *typed_argv(spec)]


def typed_argv(spec: RunSpec) -> list[str]:
    """`--typed JSON`: what the user typed (`spec.command_line`), for the background run's run.toml
    to record instead of its own `--headless` command line (`typed_command_line` reads it back)."""
    return ["--typed", json.dumps(spec.command_line)]


def typed_command_line(typed: str | None, argv: Sequence[str]) -> tuple[str, ...] | None:
    """The command line a run records: `typed` (a `--typed` value, when a terminal's cockpit started
    this run in the background), else `cockpit` and `argv`; None when `typed` is not a JSON list of
    strings."""
    if typed is None:
        return ("cockpit", *argv)
    try:
        words = json.loads(typed)
    except json.JSONDecodeError:
        return None
    ok = isinstance(words, list) and words and all(isinstance(word, str) for word in words)
    return tuple(words) if ok else None


def cluster_argv(spec: RunSpec) -> list[str]:
    """The `--ray [ADDRESS]` and `--storage DIR` flags that carry `spec.cluster` (none without it)."""
    if spec.cluster is None:
        return []
    storage = ["--storage", str(spec.cluster.storage)] if spec.cluster.storage is not None else []
    return [f"--ray={spec.cluster.address or LOCAL_RAY}", *storage]


def spawn(run_args: Sequence[str], run_dir: Path, verb: str = "run") -> BackgroundRun:
    """Start `cockpit VERB --headless *run_args` (`run`, or `fleet`) in a new session, output to
    RUN_DIR/cockpit.log."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with RunDir(run_dir).log.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "cockpit", verb, "--headless", *run_args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            umask=user_umask(),  # the run sets its own (`files.private_files`), and keeps the user's for commands
        )
    return BackgroundRun(run_dir, process)


def attach_when_ready(run: BackgroundRun, timeout_s: float = ATTACH_TIMEOUT_S) -> AttachSource:
    """Attach to the run once its control socket answers. If the run exits first (bad input, a
    run dir another cockpit holds), raise SourceError with the last line it printed."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return AttachSource.connect(run.run_dir)
        except SourceError:
            code = run.process.poll()
            if code is not None:
                said = log_tail(run.log, 1) or f"exited with code {code}"
                raise SourceError(said.split(": error: ", 1)[-1]) from None
            if time.monotonic() > deadline:
                raise
        time.sleep(0.1)


BACKGROUND_EXIT_WAIT_S = 2.0


def watch_to_exit(run: BackgroundRun, watch: Callable[[AttachSource], int], who: str) -> int:
    """Attach to the background `run` and hand it to `watch` (the cockpit) until the user quits;
    returns the exit code to end with. A run that exits before it can be attached is one line
    on stderr and 2; a run that ends with the viewer gives its own exit code, which says more than
    the last state the viewer saw (3: its directory was lost). `who` prefixes the line."""
    try:
        source = attach_when_ready(run)
    except SourceError as exc:
        print(f"{who}: error: {exc}", file=sys.stderr)
        return 2
    code = watch(source)
    exited = run.process.poll()
    if exited is None and code != 0:
        with contextlib.suppress(subprocess.TimeoutExpired):
            exited = run.process.wait(timeout=BACKGROUND_EXIT_WAIT_S)
    return code if exited is None else exited
