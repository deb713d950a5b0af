"""`cockpit export TARGET RUN_DIR`: a run's jobs into another tool; `mlflow` is the one target now.

`cockpit export mlflow RUN_DIR [--tracking-uri URI] [--experiment NAME] [--register NAME ...]`
logs each job of a finished or live run as an MLflow run (`cockpit.core.export.mlflow`): params,
metrics over the job's steps, tags, run.toml and the final model; again, it adds only what is new.
Exit codes: 0 exported, 1 MLflow refused a write midway (what was written stays; run it again),
2 bad input or MLflow not installed (one line; nothing written).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console

from cockpit.commands.console import output_console


def main(args: argparse.Namespace) -> int:
    """Run `cockpit export <target>`; returns the exit code."""
    if args.target == "mlflow":
        return mlflow(
            args.run_dir, tracking_uri=args.tracking_uri, experiment=args.experiment, register=args.register or ()
        )
    raise AssertionError(f"no exporter for {args.target!r}")  # argparse allows only the targets it knows


def mlflow(
    run_dir: Path,
    *,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    register: Sequence[str] = (),
    console: Console | None = None,
) -> int:
    """Export `run_dir` to MLflow and print what was done (see the module docstring)."""
    from cockpit.core.export.mlflow import (
        ExportError,
        ExportFailed,
        check_installed,
        check_register,
        connect,
        default_tracking_uri,
        export,
    )
    from cockpit.core.export.run_export import RunExportError, read_run

    console = console or output_console()

    def line(text: str) -> None:
        # Paths and URIs are long: a line wraps on the terminal, never mid-path with a newline in a log.
        console.print(text, highlight=False, markup=False, soft_wrap=True)

    try:
        check_installed()
        if not run_dir.is_dir():
            raise ExportError(f"{run_dir}: no such run directory")
        run = read_run(run_dir)
        check_register(run, register)
        uri = tracking_uri or default_tracking_uri(run_dir)
        client = connect(uri)
    except (ExportError, RunExportError) as exc:
        print(f"cockpit export mlflow: {exc}", file=sys.stderr)
        return 2
    name = experiment or run_dir.resolve().name
    try:
        summary = export(run, client, experiment=name, register=register, progress=_progress(line))
    except ExportError as exc:
        print(f"cockpit export mlflow: {exc}", file=sys.stderr)
        return 2
    except ExportFailed as exc:
        print(f"cockpit export mlflow: {exc}", file=sys.stderr)
        return 1
    for notice in run.notices:
        line(notice)
    line(
        f"{run_dir}: {len(run.jobs)} job(s) in experiment {name!r} ({summary.experiment_id}): "
        f"{summary.runs_created} MLflow run(s) created, {summary.runs_found} found from before; "
        f"{summary.points} metric point(s), {summary.params} param(s), {summary.artifacts} artifact(s) logged"
    )
    for version in summary.registered:
        what = "registered as" if version.created else "already registered as"
        line(f"agent {version.agent} (score {version.score:g}): {what} {version.name} version {version.version}")
    line(f"open it: mlflow ui --backend-store-uri {uri}")
    return 0


def _progress(line: Callable[[str], None]) -> Callable[[int, int], None]:
    """A progress callback printing `mlflow: done/total jobs` each time another tenth of a long
    export (more than 10 jobs) is done; a handful of jobs prints nothing."""

    def report(done: int, total: int) -> None:
        if total > 10 and done * 10 // total > (done - 1) * 10 // total:
            line(f"mlflow: {done}/{total} jobs")

    return report
