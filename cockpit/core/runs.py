"""The runs under a runs directory, newest first, as the launcher lists them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cockpit.config import RUN_LOG
from cockpit.core.runlog import read_run_log


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
    A run.toml that cannot be parsed is skipped: this is a menu, not a check."""
    try:
        logs = sorted(root.glob(f"*/{RUN_LOG}"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return []
    runs = []
    for log in logs:
        try:
            doc = read_run_log(log.parent)
            config = doc.get("config", {})
            runs.append(RecentRun(log.parent, str(config.get("preset", "?")), str(config.get("env", "?")),
                                  str(doc.get("status", "?")), int(config.get("agents", 0)),
                                  str(doc.get("started_at", ""))))  # fmt: skip
        except (OSError, ValueError, TypeError):
            continue
        if len(runs) >= limit:
            break
    return runs
