"""Validated specs the session tests run."""

from __future__ import annotations

from pathlib import Path

from cockpit.contract.runspec import RunSpec, build_spec
from cockpit.contract.settings import RunSettings


def cartpole_spec(run_dir: Path, *, resuming: bool = False) -> RunSpec:
    """Two cartpole jobs to the preset's target in `run_dir`, never restarted (`build_spec`)."""
    settings = RunSettings(jobs=2, agents=2, preset="cartpole", run_dir=run_dir, max_restarts=0)
    return build_spec(settings, command_line=("cockpit", "run"), resuming=resuming)
