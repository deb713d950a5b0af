"""`cockpit export mlflow`: a run's jobs as MLflow runs, exported again without duplicates.

The cockpit process exports a run from its files (`cockpit.core.export.run_export`) through MLflow's own
client; the workers never write to MLflow. Each job of the run becomes one MLflow run in one
experiment (by default named after the run directory), found again on a later export by its tags
`cockpit.run_dir` (the run directory's absolute path) and `cockpit.job` (the job's id):

- params (what the job was) are logged once: keys the MLflow run already holds are skipped;
- metric points are logged only past the step each key already reached in MLflow (its latest
  value's step), so exporting twice adds nothing and exporting a live run again adds its new points;
- tags (`cockpit.status`, a fleet's `cockpit.tier` and `cockpit.score`) are set when they changed,
  and so is the MLflow run's status (RUNNING, SCHEDULED for a queued job, FINISHED, FAILED, KILLED
  for a stopped or paused one);
- `run.toml` (this job's record) is logged again only while the job can still change (it is not in
  a terminal state, or its status changed since it was logged), and the final model
  (`model/`) only when its SHA-256 differs from the one the run's `cockpit.model_sha256` names.

Every write of one job goes through one `MlflowClient.log_batch` (MLflow splits it into requests
within its limits), so a fleet of hundreds of jobs costs a few calls per job.

`--register NAME ...` registers a fleet's best collected models in MLflow's model registry: the
first name gets the best agent's model, the second the next best (models.toml's order). A version
is created from the logged `model/` artifact (no MLflow flavor: the source is the artifact's own
URI) and tagged with the agent, its score and the model's SHA-256; a version of the same run and
SHA-256 already under that name is reused, so registering again creates none.

The default store is SQLite beside the runs: `sqlite:///<run dir's parent>/mlflow.db`, with
artifacts in `mlartifacts/` beside the database file.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cockpit.contract.states import JobState
from cockpit.core.export.run_export import JobExport, RunExport
from cockpit.core.machine.tempdirs import owned_tempdir

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

INSTALL_HINT = "mlflow is not installed: pip install 'cockpit[mlflow]' to export runs to MLflow"
DB_FILE = "mlflow.db"
ARTIFACTS_DIR = "mlartifacts"  # beside a SQLite store's file, as `mlflow server` names its own
TAG_RUN_DIR = "cockpit.run_dir"
TAG_JOB = "cockpit.job"
TAG_RUN_TOML = "cockpit.run_toml_status"  # the job's status when its run.toml was logged
TAG_MODEL = "cockpit.model_sha256"
TAG_AGENT = "cockpit.agent"
TAG_SHA256 = "cockpit.sha256"
TAG_SCORE = "cockpit.score"
MODEL_ARTIFACTS = "model"
PAGE = 10_000  # runs per search page

# A job's state as an MLflow run status.
_STATUS = {
    JobState.QUEUED: "SCHEDULED",
    JobState.DONE: "FINISHED",
    JobState.FAILED: "FAILED",
    JobState.STOPPED: "KILLED",
    JobState.PAUSED: "KILLED",
}


class ExportError(ValueError):
    """Bad input found before anything was written (exit 2): one line naming the flag or file."""


class ExportFailed(RuntimeError):
    """MLflow refused a write during the export (exit 1): one line; what was written stays."""


@dataclass
class Registered:
    """A model version the export registered or found already registered."""

    name: str
    version: str
    agent: str
    score: float
    created: bool


@dataclass
class ExportSummary:
    """What one export did."""

    tracking_uri: str
    experiment: str
    experiment_id: str
    runs_created: int = 0
    runs_found: int = 0  # already there from an earlier export
    points: int = 0
    params: int = 0
    artifacts: int = 0
    registered: list[Registered] = field(default_factory=list)


def default_tracking_uri(run_dir: Path) -> str:
    """`sqlite:///<run_dir's parent>/mlflow.db`, absolute: one store for all the runs beside it."""
    return f"sqlite:///{run_dir.resolve().parent / DB_FILE}"


def check_installed() -> None:
    """ExportError with the line that says how to install MLflow, when it cannot be imported."""
    try:
        import mlflow  # noqa: F401
    except ImportError:
        raise ExportError(INSTALL_HINT) from None


def check_register(run: RunExport, names: Sequence[str]) -> None:
    """ExportError (one line naming --register) unless each name can take a collected model: the
    run is a fleet, it collected at least as many models as names were given (checksums verified),
    and the names are distinct, non-empty, free of quotes (MLflow's search filters quote them) and
    of the '/' and ':' MLflow refuses in a model name."""
    if not names:
        return
    if run.fleet is None:
        raise ExportError(f"--register: {run.run_dir} is not a fleet (no fleet.db): only a fleet's models are ranked")
    if len(set(names)) != len(names):
        raise ExportError(f"--register: each name once, got {', '.join(names)}")
    for name in names:
        if not name.strip() or any(c in name for c in "'\"/:"):
            raise ExportError(f"--register {name!r}: a model name is non-empty text without quotes, '/' or ':'")
    ready = len(run.ranked_models)
    if ready < len(names):
        raise ExportError(
            f"--register: {len(names)} name(s) for the best models, but {run.run_dir}/models/models.toml lists "
            f"{ready} verified model(s) of finished agents; give at most {ready}"
        )


def connect(tracking_uri: str) -> MlflowClient:
    """An MLflow client on `tracking_uri`; ExportError (one line naming --tracking-uri) when MLflow
    has no store for it or cannot open it."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    # MLflow and alembic narrate a new database's creation at INFO level; the export prints its own lines.
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
        client.search_experiments(max_results=1)  # opens the store: a bad path or scheme fails here
    except (MlflowException, SQLAlchemyError, OSError, ValueError) as exc:
        raise ExportError(f"--tracking-uri {tracking_uri}: {_line(exc)}") from None
    return client


def export(
    run: RunExport,
    client: MlflowClient,
    *,
    experiment: str,
    register: Sequence[str] = (),
    progress: Callable[[int, int], None] | None = None,
) -> ExportSummary:
    """Export `run` into `client`'s store under `experiment` (created when missing), then register
    the best models under `register`; `progress(done, total)` after each job. ExportFailed (one line)
    when MLflow refuses a write; what was exported before it stays and a later export goes on."""
    from mlflow.exceptions import MlflowException

    try:
        experiment_id = _experiment(client, experiment)
        summary = ExportSummary(client.tracking_uri, experiment, experiment_id)
        run_dir = str(run.run_dir.resolve())
        existing = _existing(client, experiment_id, run_dir)
        run_ids: dict[str, str] = {}
        for done, job in enumerate(run.jobs, start=1):
            run_ids[job.job_id] = _export_job(client, experiment_id, run_dir, job, existing.get(job.job_id), summary)
            if progress is not None:
                progress(done, len(run.jobs))
        # check_register made sure there are models enough for the names.
        for name, entry in zip(register, run.ranked_models[: len(register)], strict=True):
            summary.registered.append(
                _register(client, name, run_ids[entry.agent], entry.agent, entry.score, entry.sha256)
            )
    except MlflowException as exc:
        raise ExportFailed(f"MLflow refused the export: {_line(exc)}") from None
    except OSError as exc:
        raise ExportFailed(f"cannot log an artifact: {_line(exc)}") from None
    return summary


def _line(exc: BaseException) -> str:
    """An exception's message on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _experiment(client: MlflowClient, name: str) -> str:
    """The id of the experiment `name`, created when missing: with a SQLite store, its artifacts go
    to `mlartifacts/` beside the database file rather than into the working directory."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        if found.lifecycle_stage == "deleted":
            raise ExportError(
                f"--experiment {name!r}: deleted in MLflow; restore it (mlflow experiments restore) or choose another"
            )
        return str(found.experiment_id)
    return str(client.create_experiment(name, artifact_location=_artifact_root(client.tracking_uri)))


def _artifact_root(tracking_uri: str) -> str | None:
    """`mlartifacts/` beside a SQLite store's file, as a file URI; None (the store's default) for
    any other store."""
    if not tracking_uri.startswith("sqlite:"):
        return None
    from sqlalchemy.engine import make_url

    database = make_url(tracking_uri).database
    if not database or database == ":memory:":
        return None
    return (Path(database).resolve().parent / ARTIFACTS_DIR).as_uri()


def _existing(client: MlflowClient, experiment_id: str, run_dir: str) -> dict[str, Run]:
    """The experiment's live MLflow runs of `run_dir`, by job id, in as many pages as there are."""
    found: dict[str, Run] = {}
    token = None
    while True:
        page = client.search_runs([experiment_id], max_results=PAGE, page_token=token)
        for mlflow_run in page:
            tags = mlflow_run.data.tags
            if tags.get(TAG_RUN_DIR) == run_dir and TAG_JOB in tags:
                found.setdefault(tags[TAG_JOB], mlflow_run)
        token = page.token
        if not token:
            return found


def _latest_steps(mlflow_run: Run | None) -> dict[str, int]:
    """The step each metric of `mlflow_run` reached: its latest value's (MLflow keeps, per key, the
    value of the highest step as the latest)."""
    if mlflow_run is None:
        return {}
    return {metric.key: metric.step for metric in mlflow_run.data.to_proto().metrics}


def _export_job(
    client: MlflowClient, experiment_id: str, run_dir: str, job: JobExport, held: Run | None, summary: ExportSummary
) -> str:
    """Bring the MLflow run of `job` up to date (creating it when `held` is None); its run id."""
    from mlflow.entities import Metric, Param, RunTag

    if held is None:
        start = round(job.started_at * 1000) if job.started_at is not None else None
        created = client.create_run(
            experiment_id, start_time=start, tags={TAG_RUN_DIR: run_dir, TAG_JOB: job.job_id}, run_name=job.job_id
        )
        run_id, params, tags, status = created.info.run_id, {}, dict(created.data.tags), created.info.status
        summary.runs_created += 1
    else:
        run_id, params, tags, status = held.info.run_id, held.data.params, held.data.tags, held.info.status
        summary.runs_found += 1
    wanted = dict(job.tags)
    wanted.update(_artifacts(client, run_id, job, tags, summary))
    reached = _latest_steps(held)
    metrics = [Metric(p.key, p.value, round(p.t * 1000), p.step) for p in job.points if p.step > reached.get(p.key, -1)]
    new_params = [Param(key, value) for key, value in job.params.items() if key not in params]
    new_tags = [RunTag(key, value) for key, value in wanted.items() if tags.get(key) != value]
    if metrics or new_params or new_tags:
        client.log_batch(run_id, metrics=metrics, params=new_params, tags=new_tags)
    summary.points += len(metrics)
    summary.params += len(new_params)
    _set_status(client, run_id, job, status)
    return str(run_id)


def _artifacts(
    client: MlflowClient, run_id: str, job: JobExport, tags: Mapping[str, str], summary: ExportSummary
) -> dict[str, str]:
    """Log the job's run.toml and final model where the MLflow run lacks them or holds an older
    one; the tags that record what is now logged."""
    out: dict[str, str] = {}
    status = str(job.status)
    if tags.get(TAG_RUN_TOML) != status or not job.status.terminal:
        with owned_tempdir("mlflow") as tmp:
            path = tmp / "run.toml"
            path.write_text(job.run_toml, encoding="utf-8")
            client.log_artifact(run_id, str(path))
        out[TAG_RUN_TOML] = status
        summary.artifacts += 1
    if job.model is not None and tags.get(TAG_MODEL) != job.model.sha256:
        for path in job.model.files:
            client.log_artifact(run_id, str(path), artifact_path=MODEL_ARTIFACTS)
        out[TAG_MODEL] = job.model.sha256
        summary.artifacts += len(job.model.files)
    return out


def _set_status(client: MlflowClient, run_id: str, job: JobExport, status: str) -> None:
    """The MLflow run's status as the job's, with its end time once the job ended."""
    wanted = _STATUS.get(job.status, "RUNNING")
    if wanted == status:
        return
    if job.status.terminal:
        end = round(job.ended_at * 1000) if job.ended_at is not None else None
        client.set_terminated(run_id, status=wanted, end_time=end)
    else:
        client.update_run(run_id, status=wanted)


def _register(client: MlflowClient, name: str, run_id: str, agent: str, score: float, sha256: str) -> Registered:
    """A version of registered model `name` from `run_id`'s `model/` artifact: the one already there
    for this run and SHA-256, else a new one."""
    from mlflow.exceptions import MlflowException

    try:
        client.get_registered_model(name)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        client.create_registered_model(name, description="PPO agents exported by cockpit (cockpit export mlflow)")
    for version in client.search_model_versions(f"name = '{name}'"):
        if version.run_id == run_id and version.tags.get(TAG_SHA256) == sha256:
            return Registered(name, str(version.version), agent, score, created=False)
    # The artifact's own URI, as `runs:/<run_id>/model` resolves on this store.
    source = f"{client.get_run(run_id).info.artifact_uri}/{MODEL_ARTIFACTS}"
    tags: dict[str, Any] = {TAG_AGENT: agent, TAG_SCORE: f"{score:g}", TAG_SHA256: sha256}
    version = client.create_model_version(
        name, source, run_id=run_id, tags=tags, description=f"agent {agent}, score {score:g} (SB3 PPO zip)"
    )
    return Registered(name, str(version.version), agent, score, created=True)
