"""Finding runs: the ones under a runs directory, newest first, and opening one to view."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cockpit.contract.rundir import RUN_TOML, RunDir
from cockpit.contract.runrecord import RunRecordError, read
from cockpit.core.control import AttachSource
from cockpit.core.feed import RunSource, SourceError
from cockpit.core.replay import open_replay


@dataclass(frozen=True)
class RecentRun:
    """One earlier or live run, from its run.toml."""

    run_dir: Path
    preset: str
    env: str
    status: str
    agents: int
    started_at: str


def recent_runs(root: Path, limit: int = 10) -> list[RecentRun]:
    """Up to `limit` runs under `root` that have a readable run.toml, most recently updated first.
    A run.toml that cannot be read (or is from a newer cockpit) is skipped: this is a menu, not a check."""
    try:
        logs = sorted(root.glob(f"*/{RUN_TOML}"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return []
    runs = []
    for log in logs:
        try:
            recorded = read(log.parent)
        except RunRecordError:
            continue
        config = recorded.config
        runs.append(RecentRun(log.parent, *config.shown(), recorded.status.value, config.agents,
                              recorded.started_at))  # fmt: skip
        if len(runs) >= limit:
            break
    return runs


def open_run(run_dir: Path) -> RunSource:
    """A live run's socket, or a replay of a finished one; SourceError when it is neither."""
    try:
        return AttachSource.connect(run_dir)
    except SourceError as live_error:
        if not RunDir(run_dir).run_toml.exists():
            raise live_error from None
    return open_replay(run_dir)
