"""Finding runs: the ones under a runs directory, newest first, a run by its name, and opening
one to view."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cockpit.contract.rundir import RUN_NAME_PATTERN, RUN_TOML, RUNS, RunDir, stamp_time
from cockpit.contract.runrecord import RunRecordError, parse, read, unix
from cockpit.core.feed.control import AttachSource
from cockpit.core.feed.source import RunSource, SourceError
from cockpit.core.record.replay import open_replay


@dataclass(frozen=True)
class RecentRun:
    """One earlier or live run, from its run.toml (`name`: its name, None when it has none)."""

    run_dir: Path
    preset: str
    env: str
    status: str
    agents: int
    started_at: str
    name: str | None = None


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
        runs.append(
            RecentRun(
                log.parent, *config.shown(), recorded.status.value, config.agents, recorded.started_at, recorded.name
            )
        )
        if len(runs) >= limit:
            break
    return runs


def named_run(name: str, root: Path = RUNS) -> Path | None:
    """The newest run under `root` named `name` (`--name`, or a fleet plan's name), None when none is.

    A run's name is the one its run.toml records; a run that has not written its first run.toml
    yet (it does within a second of starting) is known by its directory, `<UTC time>-<name>`.
    Newest is by the UTC time that starts the directory's name, else the run's recorded start.
    Unreadable run.toml files (or a newer cockpit's) are skipped, as in `recent_runs`.
    """
    if not RUN_NAME_PATTERN.fullmatch(name):
        return None
    try:
        dirs = [path for path in root.iterdir() if path.is_dir()]
    except OSError:
        return None
    found: list[tuple[float, str, Path]] = []
    for run_dir in dirs:
        stamp = stamp_time(run_dir)
        try:
            text = RunDir(run_dir).run_toml.read_text(encoding="utf-8")
        except FileNotFoundError:
            if stamp is not None and run_dir.name.partition("-")[2] == name:
                found.append((stamp, run_dir.name, run_dir))
            continue
        except (OSError, UnicodeDecodeError):
            continue
        if name not in text:  # most runs are not the one: skip parsing their files
            continue
        try:
            recorded = parse(text, str(run_dir))
        except RunRecordError:
            continue
        if recorded.name == name:
            when = stamp if stamp is not None else unix(recorded.started_at)
            found.append((when or 0.0, run_dir.name, run_dir))
    return max(found)[2] if found else None


def open_run(run_dir: Path) -> RunSource:
    """A live run's socket, or a replay of a finished one; SourceError when it is neither."""
    try:
        return AttachSource.connect(run_dir)
    except SourceError as live_error:
        if not RunDir(run_dir).run_toml.exists():
            raise live_error from None
    return open_replay(run_dir)
