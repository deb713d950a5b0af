"""Which model `cockpit play` plays: a run's job, a fleet's best agent, a collected model, a checkpoint.

`playable(run_dir, job=..., best=..., checkpoint=...)` answers with a `JobModel`
(`cockpit.core.launch.player`): the files a player loads, the env and the preset's `env_kwargs`, and
what they came from, or a `PlayableError` (one line naming the flag or file and what would do):

- `--job ID`: that job's final model (the worker checkpoints at its end), else its newest
  checkpoint; for a fleet's agent listed in `models/models.toml`, its collected model;
- `--best`: a fleet's leaderboard's first (`cockpit.core.fleet.report`), as `--job` would play it;
- neither: the run's one job (a run of several asks for `--job` or, for a fleet, `--best`);
- `--checkpoint PATH`: a checkpoint directory (`jobs/<id>/checkpoints/step-...`, the job's own when
  `--job` names none) or a fleet's collected `models/<agent>.zip`;
- RUN_DIR may also be one job's directory (with its `events.jsonl`), as `--job-dir` made it.

Every model is checked against its SHA-256 before anything loads it: a checkpoint against its
meta.json (`checkpoint_files.unverified`), a collected model against models.toml
(`model_manifest.verify`). The env and its `env_kwargs` are the ones the job's worker recorded in
its newest `started` event (`trained_env`), a collected model's too, whether or not its job's
checkpoints are still there; a collected model whose job's events are gone is not played (nothing
says which env settings it needs).
"""

from __future__ import annotations

from pathlib import Path

from cockpit.contract.events import EVENTS_FILE
from cockpit.contract.model_manifest import MANIFEST, MODELS_DIR, ModelEntry, read_manifest, verify
from cockpit.contract.rundir import RUN_TOML, RunDir
from cockpit.core.fleet.report import FleetReportError, fleet_summary
from cockpit.core.launch.player import JobModel, job_model, trained_env


class PlayableError(ValueError):
    """No model to play as asked; the message is one line naming the flag or file and what would do."""


def playable(run_dir: Path, *, job: str | None = None, best: bool = False, checkpoint: Path | None = None) -> JobModel:
    """The model to play (see the module's docstring); PlayableError when there is none."""
    if not run_dir.is_dir():
        raise PlayableError(f"{run_dir}: no such run directory")
    if (run_dir / EVENTS_FILE).is_file() and not (run_dir / RUN_TOML).is_file():
        if job is not None or best:
            raise PlayableError(f"{run_dir} is one job's directory: --job and --best choose among a run's jobs")
        return _from_job(run_dir, checkpoint)
    if best:
        job = _best(run_dir)
    if checkpoint is not None and job is None:
        return _from_checkpoint(run_dir, checkpoint)
    if job is None:
        job = _only_job(run_dir)
    collected = _collected_entry(run_dir, job)
    if collected is not None and checkpoint is None:
        return _from_collected(run_dir, collected)
    job_dir = RunDir(run_dir).job(job).path
    if not (job_dir / EVENTS_FILE).is_file():
        raise PlayableError(
            f"--job {job}: no such job in {run_dir} (its jobs: {', '.join(_job_ids(run_dir)) or 'none'})"
        )
    return _from_job(job_dir, checkpoint)


def _job_ids(run_dir: Path) -> list[str]:
    jobs = RunDir(run_dir).jobs
    if not jobs.is_dir():
        return []
    ids = [p.name for p in jobs.iterdir() if (p / EVENTS_FILE).is_file()]
    return sorted(ids, key=lambda name: (len(name), name))  # 2 before 10


def _only_job(run_dir: Path) -> str:
    ids = _job_ids(run_dir)
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise PlayableError(f"{run_dir}: holds no job (not a run directory, or no job has started)")
    fleet = " or --best (the leaderboard's first)" if (run_dir / "fleet.db").is_file() else ""
    shown = ", ".join(ids[:8]) + (", ..." if len(ids) > 8 else "")
    raise PlayableError(f"{run_dir} holds {len(ids)} jobs: name one with --job ID ({shown}){fleet}")


def _best(run_dir: Path) -> str:
    try:
        fleet = fleet_summary(run_dir)
    except FleetReportError as exc:
        raise PlayableError(f"--best: {exc}") from None
    if fleet is None:
        raise PlayableError(f"--best: {run_dir} is not a fleet (no fleet.db); name a job with --job ID")
    if not fleet.leaderboard:
        raise PlayableError(f"--best: fleet {fleet.name!r} has no scored agent yet")
    return fleet.leaderboard[0].agent


def _collected_entry(run_dir: Path, agent: str) -> ModelEntry | None:
    return next((entry for entry in _entries(run_dir) if entry.agent == agent), None)


def _from_collected(run_dir: Path, entry: ModelEntry) -> JobModel:
    """A fleet's collected model, checked against models.toml's SHA-256 first."""
    problems = verify(run_dir, [entry])
    if problems:
        raise PlayableError(f"{problems[0]}: not played (a model must match its checksum)")
    directory = run_dir / MODELS_DIR
    try:
        # The env's settings (an Atari frame stack) are the job's, whether or not its checkpoints
        # survive: a model played on other settings would be scored on a game it never saw.
        env, env_kwargs = trained_env(RunDir(run_dir).job(entry.agent).path)
    except ValueError as exc:
        raise PlayableError(
            f"{directory / entry.file}: not played: the env settings it trained with are unknown ({exc})"
        ) from None
    return JobModel(
        source=directory / entry.file,
        model=directory / entry.file,
        vecnormalize=None if entry.vecnormalize is None else directory / entry.vecnormalize,
        env=env,
        env_kwargs=env_kwargs,
    )


def _from_job(job_dir: Path, checkpoint: Path | None) -> JobModel:
    try:
        return job_model(job_dir, checkpoint)
    except ValueError as exc:
        raise PlayableError(str(exc)) from None


def _from_checkpoint(run_dir: Path, checkpoint: Path) -> JobModel:
    """`--checkpoint` alone: a checkpoint directory of one of the run's jobs, or a collected model."""
    if checkpoint.is_file() and checkpoint.parent.name == MODELS_DIR:
        entry = next((e for e in _entries(checkpoint.parent.parent) if e.file == checkpoint.name), None)
        if entry is None:
            raise PlayableError(f"--checkpoint {checkpoint}: not listed in {checkpoint.parent / MANIFEST}")
        return _from_collected(checkpoint.parent.parent, entry)
    if not checkpoint.is_dir():
        raise PlayableError(
            f"--checkpoint {checkpoint}: not a checkpoint directory (jobs/<id>/checkpoints/step-...) "
            f"nor a collected {MODELS_DIR}/<agent>.zip"
        )
    return _from_job(checkpoint.resolve().parent.parent, checkpoint)


def _entries(run_dir: Path) -> list[ModelEntry]:
    try:
        return read_manifest(run_dir)
    except ValueError as exc:
        raise PlayableError(str(exc)) from None
