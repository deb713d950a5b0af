"""The launcher's real opener: validate the form like `cockpit run` does, start the run in the
background and attach; reopen recent runs (attach if live, else replay)."""

from __future__ import annotations

from pathlib import Path

from cockpit.background import attach_when_ready, spawn
from cockpit.config import ConfigError, build_spec
from cockpit.core.control import AttachSource
from cockpit.core.feed import RunSource, SourceError
from cockpit.core.host import host_info
from cockpit.core.replay import open_replay
from cockpit.core.runs import RecentRun, recent_runs
from cockpit.tui.launcher_screen import LaunchChoice, LaunchError

RUNS = Path("runs")


def open_run(run_dir: Path) -> RunSource:
    """A live run's socket, or a replay of a finished one; SourceError when it is neither."""
    try:
        return AttachSource.connect(run_dir)
    except SourceError as live_error:
        if not (run_dir / "run.toml").exists():
            raise live_error from None
    return open_replay(run_dir)


class LocalOpener:
    """Starts runs on this machine as `cockpit run --headless` in the background."""

    def __init__(self, runs: Path = RUNS) -> None:
        self.runs = runs
        self.physical_cores = host_info().physical_cores

    def start(self, choice: LaunchChoice) -> RunSource:
        """Validate, spawn, attach; LaunchError (one line) on bad input or a run that dies early."""
        try:
            spec = build_spec(jobs=choice.jobs, agents=None, preset=choice.preset, env=choice.env,
                              timesteps=choice.timesteps, seed=0, run_dir=None, max_restarts=3, pin=False,
                              headless=True, command_line=("cockpit",))  # fmt: skip
        except ConfigError as exc:
            raise LaunchError(str(exc)) from None
        args = ["--jobs", str(choice.jobs), "--preset", choice.preset, "--run-dir", str(spec.run_dir)]
        if choice.env:
            args += ["--env", choice.env]
        if choice.timesteps:
            args += ["--timesteps", str(choice.timesteps)]
        try:
            return attach_when_ready(spawn(args, spec.run_dir))
        except SourceError as exc:
            raise LaunchError(str(exc)) from None

    def open(self, run_dir: Path) -> RunSource:
        """Attach to or replay `run_dir`."""
        try:
            return open_run(run_dir)
        except SourceError as exc:
            raise LaunchError(str(exc)) from None

    def recent(self) -> list[RecentRun]:
        """The newest runs under ./runs."""
        return recent_runs(self.runs)
