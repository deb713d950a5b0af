"""Running the real `cockpit run` as a subprocess, for end-to-end tests."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import psutil
import pytest

from benchmarks.common import small_preset_text
from cockpit.contract.events import read_events
from cockpit.contract.runrecord import RunRecord, read


def small_preset(directory: Path, *, checkpoint_every: int = 2048, timesteps: int = 20_000) -> Path:
    """A quick CartPole preset file."""
    path = directory / "small.toml"
    path.write_text(small_preset_text(checkpoint_every=checkpoint_every, timesteps=timesteps))
    return path


# The tests that read the session's plain run (conftest.py's `plain_cartpole_run`: two CartPole
# trainings to 100k steps) go to one pytest-xdist worker, so the run is made once, not per worker.
PLAIN_RUN = pytest.mark.xdist_group("plain_cartpole_run")


@dataclass
class Cockpit:
    """A running `cockpit run` and its run dir."""

    proc: subprocess.Popen
    run_dir: Path
    output: Path

    def text(self) -> str:
        return self.output.read_text()

    def events(self, job_id: str) -> list[dict[str, Any]]:
        return read_events(self.run_dir / "jobs" / job_id / "events.jsonl")

    def run_log(self) -> RunRecord:
        return read(self.run_dir)

    def workers(self) -> list[psutil.Process]:
        """The cockpit's live worker processes (its direct children)."""
        try:
            return [p for p in psutil.Process(self.proc.pid).children() if p.status() != psutil.STATUS_ZOMBIE]
        except psutil.Error:
            return []

    def wait_for(
        self, condition: Callable[[], bool], timeout: float = 90.0, poll: Callable[[], None] | None = None
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if poll is not None:
                poll()
            if condition():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"cockpit exited {self.proc.returncode} first:\n{self.text()[-3000:]}")
            time.sleep(0.1)
        raise AssertionError(f"timed out; output so far:\n{self.text()[-3000:]}")

    def finish(self, timeout: float = 240.0) -> int:
        return self.proc.wait(timeout=timeout)


STARTED: list[subprocess.Popen[bytes]] = []  # every cockpit `start_cockpit` started; conftest ends them


def start_cockpit(run_dir: Path, *args: str) -> Cockpit:
    """`cockpit run --run-dir run_dir *args` with plain (non-TTY) output captured to a file."""
    output = run_dir.parent / f"{run_dir.name}.out"
    with output.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cockpit", "run", "--run-dir", str(run_dir), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    STARTED.append(proc)
    return Cockpit(proc, run_dir, output)


def run_cockpit(*args: str, timeout: float = 60.0, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `cockpit *args` to completion, capturing its output (`env` adds to the environment)."""
    return subprocess.run([sys.executable, "-m", "cockpit", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})  # fmt: skip


def last_steps(events: list[dict[str, Any]]) -> int:
    """The newest step count in a job's events."""
    steps = 0
    for e in events:
        if e.kind in ("phase", "progress"):
            steps = e.num_timesteps
        elif e.kind == "finished":
            steps = e.steps
    return steps


def required_tool(tool: str, tests: str) -> str:
    """The path of `tool` (a Debian package of that name); where it is missing, the test fails
    under CI (whose `.ci/run` installs it, so a CI run never passes without those tests) and is
    skipped elsewhere with a warning naming `tests`."""
    import shutil

    found = shutil.which(tool)
    if found is not None:
        return found
    unavailable(f"{tool} is missing: .ci/run installs it",
                f"{tool.upper()} IS NOT INSTALLED: {tests} did not run; install {tool} (e.g. apt-get install "
                f"{tool}) to run them")  # fmt: skip


def unavailable(in_ci: str, elsewhere: str) -> NoReturn:
    """End a test whose means this machine lacks: under CI (`CI` set, as `.ci/run` sets it) it
    fails with `in_ci`, so a CI run never passes with the test silently not run; elsewhere it is
    skipped with `elsewhere` as a warning."""
    import warnings

    if os.environ.get("CI"):
        pytest.fail(in_ci)
    message = f"{elsewhere} (with CI=1 set, as .ci/run does, it fails instead)"
    warnings.warn(message, stacklevel=3)
    pytest.skip(message)


class Tmux:
    """A private tmux server (`-L`, no user config) with one session running `command`; skips
    the test where tmux is missing, except in CI, whose `.ci/run` installs it."""

    def __init__(self, name: str, command: str, size: tuple[int, int]) -> None:
        import os

        required_tool("tmux", "the terminal (TUI) tests")
        self.name = f"{name}-{os.getpid()}"
        self.tmux = ["tmux", "-L", self.name, "-f", "/dev/null"]
        subprocess.run([*self.tmux, "new-session", "-d", "-s", self.name, "-x", str(size[0]), "-y", str(size[1]),
                        command], check=True)  # fmt: skip

    def screen(self) -> str:
        """The pane as text (capture-pane)."""
        return subprocess.run(
            [*self.tmux, "capture-pane", "-p", "-t", self.name], capture_output=True, text=True
        ).stdout

    def scrollback(self) -> str:
        """The pane's whole history as text: the lines scrolled off its top, then the pane."""
        return subprocess.run(
            [*self.tmux, "capture-pane", "-p", "-S", "-", "-t", self.name], capture_output=True, text=True
        ).stdout

    def send(self, key: str) -> None:
        """Type a key into the pane."""
        subprocess.run([*self.tmux, "send-keys", "-t", self.name, key], check=True)

    def close(self) -> None:
        """Kill the server and whatever still runs in it."""
        subprocess.run([*self.tmux, "kill-server"], check=False)
