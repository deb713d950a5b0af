"""The start screen's real opener: validate the form like `cockpit run` does, start the run in the
background and attach; reopen recent runs (attach if live, else replay)."""

from __future__ import annotations

from pathlib import Path

from cockpit.contract.rundir import RUNS
from cockpit.contract.runspec import ConfigError, build_spec
from cockpit.contract.settings import RunSettings
from cockpit.core.feed.source import RunSource, SourceError
from cockpit.core.machine.host import host_info
from cockpit.core.record.find_runs import RecentRun, open_run, recent_runs
from cockpit.core.session.background import attach_when_ready, headless_argv, spawn
from cockpit.views.tui.start_screen import LaunchChoice, LaunchError


class LocalOpener:
    """Starts runs on this machine as `cockpit run --headless` in the background."""

    def __init__(self, runs: Path = RUNS) -> None:
        self.runs = runs
        self.physical_cores = host_info().physical_cores

    def start(self, choice: LaunchChoice) -> RunSource:
        """Validate, spawn, attach; LaunchError (one line) on bad input or a run that dies early."""
        # run.toml records the `cockpit run` line that would have started the same run.
        typed = ["cockpit", "run", "--jobs", str(choice.jobs), "--preset", choice.preset]
        typed += ["--env", choice.env] if choice.env else []
        typed += ["--timesteps", str(choice.timesteps)] if choice.timesteps else []
        try:
            settings = RunSettings(jobs=choice.jobs, preset=choice.preset, env=choice.env, timesteps=choice.timesteps)
            spec = build_spec(settings, command_line=tuple(typed))
        except ConfigError as exc:
            raise LaunchError(str(exc)) from None
        try:
            return attach_when_ready(spawn(headless_argv(spec), spec.run_dir))
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
