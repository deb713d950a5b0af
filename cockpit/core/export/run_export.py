"""A run read for export to a tracking system: per job, what it was, how it went, what it left.

`read_run(run_dir)` reads a finished or live run through the readers that exist (run.toml through
`cockpit.contract.runrecord`, each job's events through `cockpit.contract.events`, a fleet's
fleet.db and models.toml through `cockpit.core.fleet.report`) and turns each job of run.toml into a
`JobExport`, which knows nothing of any tracking system:

- `params`: what the job was: every key of its resolved preset (`preset.<key>`, from the worker's
  first `started` event, else run.toml's `[preset]`), `env`, `seed`, the run's target
  (`timesteps` or `episodes`, not for a fleet, whose targets grow with its tiers), a script's
  command (`script`), a fleet agent's `overrides.<key>`. They never change once a job has started.
- `points`: metrics over time, at the job's steps: from the events, `rollout/ep_rew_mean`,
  `rollout/ep_len_mean`, `rollout/episodes`, `train/<loss>` (PPO's train statistics), `time/sps`
  (the cockpit's whole-cycle throughput, `cockpit.core.telemetry.throughput`, at each rollout start),
  `phase/rollout_s` and `phase/train_s` (each iteration's time in each phase) and a fleet's scores
  `eval/mean_reward`, `eval/std_reward`. From run.toml, figures that exist only as totals, at the
  job's steps as run.toml records them: `phase/<phase>/seconds`, `.../gpu_util_mean`,
  `.../cpu_percent_mean`, and `job/mean_sps`, `job/cpu_percent_mean`, `job/peak_rss_mib`,
  `job/peak_gpu_mem_mib`, `job/restarts`. Each series only moves forward: a point at or below a step
  its key already reached is left out (a restarted worker trains again from its checkpoint), so a
  run exported in pieces gives the same series as one exported once.
- `tags`: the job's status and, in a fleet, its tier, latest score and agent status.
- `run_toml`: the run's record with only this job in `[[jobs]]` (the contract's own renderer): a
  fleet's run.toml lists hundreds of agents, and each job's copy needs only its own.
- `model`: the final model of a finished job: its last checkpoint's `model.zip` (and
  `vecnormalize.pkl`), or for a fleet the agent's collected `models/<agent>.zip` (best first in
  models.toml), checked against its SHA-256.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.contract.checkpoint_files import MODEL_FILE, VECNORMALIZE_FILE, recorded_sums, unverified
from cockpit.contract.events import (
    CheckpointEvent,
    ErrorEvent,
    EvaluatedEvent,
    Event,
    PhaseEvent,
    ProgressEvent,
    StartedEvent,
    read_events,
)
from cockpit.contract.model_manifest import MODELS_DIR, ModelEntry, verify
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import JobRecord, RunRecord, RunRecordError, read, render, unix
from cockpit.contract.states import JobState
from cockpit.core.fleet.report import AgentSummary, FleetReportError, FleetSummary, fleet_summary
from cockpit.core.telemetry.throughput import Throughput

PARAM_VALUE_MAX = 6000  # what MLflow, the strictest target, keeps of a param's value


class RunExportError(ValueError):
    """The run cannot be read for export; the message is one line naming the file and what is wrong."""


@dataclass(frozen=True)
class Point:
    """One metric value: `key` at the job's `step`, measured at Unix time `t`."""

    key: str
    value: float
    t: float
    step: int


@dataclass(frozen=True)
class ModelFiles:
    """A finished job's final model: its files (the SB3 zip first) and the zip's SHA-256."""

    files: tuple[Path, ...]
    sha256: str


@dataclass(frozen=True)
class JobExport:
    """One job as a tracking system takes it (see the module docstring)."""

    job_id: str
    status: JobState
    params: Mapping[str, str]
    tags: Mapping[str, str]
    points: tuple[Point, ...]
    run_toml: str
    model: ModelFiles | None
    started_at: float | None  # the first `started` event's time (Unix), None before one
    ended_at: float | None  # for a job in a terminal state: its last event's time, else None


@dataclass(frozen=True)
class RunExport:
    """A run read for export: its jobs in run.toml's order, its fleet (None for an ordinary run),
    the collected models best first (models.toml's order) of the jobs whose model is logged (those
    of run.toml's jobs whose files match their checksums), and a line for each thing left out."""

    run_dir: Path
    record: RunRecord
    jobs: tuple[JobExport, ...]
    fleet: FleetSummary | None
    ranked_models: tuple[ModelEntry, ...] = ()
    notices: tuple[str, ...] = ()


def read_run(run_dir: Path) -> RunExport:
    """`run_dir` read for export; RunExportError (one line naming the file) when it holds no
    readable run.toml or its fleet.db cannot be read. Reads only."""
    try:
        record = read(run_dir)
    except RunRecordError as exc:
        raise RunExportError(str(exc)) from None
    try:
        fleet = fleet_summary(run_dir)
    except FleetReportError as exc:
        raise RunExportError(str(exc)) from None
    agents = {agent.id: agent for agent in fleet.agents} if fleet is not None else {}
    models = {entry.agent: entry for entry in fleet.models.entries} if fleet is not None else {}
    notices: list[str] = []
    jobs = []
    for job in record.jobs:
        events = _events(RunDir(run_dir).job(job.id).events)
        agent = agents.get(job.id)
        if fleet is not None:
            model = _collected(run_dir, models[job.id], notices) if job.id in models else None
        else:
            model = _final_checkpoint(run_dir, job, events, notices) if job.status is JobState.DONE else None
        jobs.append(
            JobExport(
                job_id=job.id,
                status=job.status,
                params=_params(record, job, events, agent),
                tags=_tags(job, agent),
                points=(*forward(series(events)), *totals(record, job)),
                run_toml=_job_record(record, job),
                model=model,
                started_at=_first_start(events),
                ended_at=_ended(job, events, record),
            )
        )
    logged = {job.job_id for job in jobs if job.model is not None}
    ranked = tuple(entry for entry in fleet.models.entries if entry.agent in logged) if fleet is not None else ()
    return RunExport(run_dir, record, tuple(jobs), fleet, ranked, tuple(notices))


def _events(path: Path) -> list[Event]:
    """A job's events ([] before its worker wrote any); RunExportError when the file cannot be read."""
    try:
        return read_events(path)
    except OSError as exc:
        raise RunExportError(f"{path}: unreadable ({exc.strerror or exc})") from None


# ----- params and tags -----


def param_value(value: Any) -> str:
    """A param as text: strings as they are, everything else as JSON (`true`, `[64, 64]`,
    `{"size": 7}`), cut to `PARAM_VALUE_MAX` characters."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text[:PARAM_VALUE_MAX]


def _params(record: RunRecord, job: JobRecord, events: Sequence[Event], agent: AgentSummary | None) -> dict[str, str]:
    started = next((e for e in events if isinstance(e, StartedEvent)), None)
    config = started.config if started is not None else {}
    preset = config.get("preset")
    if not isinstance(preset, Mapping) and agent is None and record.preset is not None:
        preset = record.preset.as_dict()  # not started yet: the run's preset is what it will train
    values: dict[str, Any] = {f"preset.{k}": v for k, v in preset.items()} if isinstance(preset, Mapping) else {}
    values["env"] = config.get("env") or (agent.env if agent is not None else record.config.env) or None
    values["seed"] = job.seed
    if agent is not None:
        values.update({f"overrides.{k}": v for k, v in agent.overrides.items()})
    elif record.config.script is not None:
        values["script"] = " ".join(record.config.script)
    elif record.config.episodes is not None:
        values["episodes"] = record.config.episodes
    else:
        values["timesteps"] = record.config.timesteps
    return {key: param_value(value) for key, value in values.items() if value is not None}


def _tags(job: JobRecord, agent: AgentSummary | None) -> dict[str, str]:
    tags = {"cockpit.status": str(job.status)}
    if agent is not None:
        tags["cockpit.agent_status"] = agent.status
        if agent.tier is not None:
            tags["cockpit.tier"] = str(agent.tier)
        if agent.score is not None:
            tags["cockpit.score"] = f"{agent.score:g}"
    return tags


# ----- metrics -----


def series(events: Iterable[Event]) -> list[Point]:
    """The metric points a job's events hold, in event order (see the module docstring)."""
    points: list[Point] = []
    throughput = Throughput()
    rollout: PhaseEvent | None = None  # the rollout under way, if its start was seen
    train: PhaseEvent | None = None  # the train phase under way
    for event in events:
        throughput.observe(event)
        if isinstance(event, (StartedEvent, ErrorEvent)):
            rollout = train = None  # a phase cut by a crash or a restart has no duration
        elif isinstance(event, PhaseEvent) and event.phase == "rollout":
            if train is not None:
                points.append(Point("phase/train_s", event.t - train.t, event.t, train.num_timesteps))
            rollout, train = event, None
            sps = throughput.rate(event.t)
            if sps is not None:
                points.append(Point("time/sps", sps, event.t, event.num_timesteps))
        elif isinstance(event, PhaseEvent):
            if rollout is not None:
                points.append(Point("phase/rollout_s", event.t - rollout.t, event.t, event.num_timesteps))
            rollout, train = None, event
        elif isinstance(event, ProgressEvent):
            if event.losses is not None and train is not None:
                # The worker reports a train phase's statistics as soon as it ends.
                points.append(Point("phase/train_s", event.t - train.t, event.t, train.num_timesteps))
                train = None
            points.extend(_progress(event))
        elif isinstance(event, EvaluatedEvent):
            points.append(Point("eval/mean_reward", event.mean_reward, event.t, event.step))
            points.append(Point("eval/std_reward", event.std_reward, event.t, event.step))
    return points


def _progress(event: ProgressEvent) -> list[Point]:
    values: dict[str, float | None] = {
        "rollout/ep_rew_mean": event.ep_rew_mean,
        "rollout/ep_len_mean": event.ep_len_mean,
        "rollout/episodes": event.episodes,
    }
    values.update({f"train/{key}": value for key, value in (event.losses or {}).items()})
    t, step = event.t, event.num_timesteps
    return [Point(key, float(value), t, step) for key, value in values.items() if value is not None]


def forward(points: Iterable[Point]) -> list[Point]:
    """`points` without those at or below a step their key already reached (see the module
    docstring), and without values that are not finite numbers."""
    reached: dict[str, int] = {}
    kept = []
    for point in points:
        if point.step > reached.get(point.key, -1) and math.isfinite(point.value):
            reached[point.key] = point.step
            kept.append(point)
    return kept


def totals(record: RunRecord, job: JobRecord) -> list[Point]:
    """The job's figures that run.toml holds only as totals, at the job's steps in run.toml."""
    t = unix(record.updated_at) or unix(record.started_at) or 0.0
    values: dict[str, float | int | None] = {
        "job/mean_sps": job.mean_sps,
        "job/cpu_percent_mean": job.cpu_percent_mean,
        "job/peak_rss_mib": job.peak_rss_mib,
        "job/peak_gpu_mem_mib": job.peak_gpu_mem_mib,
        "job/restarts": job.restarts,
    }
    for phase, stats in job.phases.items():
        values[f"phase/{phase}/seconds"] = stats.seconds
        values[f"phase/{phase}/gpu_util_mean"] = stats.gpu_util_mean
        values[f"phase/{phase}/cpu_percent_mean"] = stats.cpu_percent_mean
    return [Point(key, float(value), t, job.steps) for key, value in values.items() if value is not None]


# ----- the record, times and the model -----


def _job_record(record: RunRecord, job: JobRecord) -> str:
    return render(dataclasses.replace(record, jobs=(job,)))


def _first_start(events: Sequence[Event]) -> float | None:
    return next((e.t for e in events if isinstance(e, StartedEvent)), None)


def _ended(job: JobRecord, events: Sequence[Event], record: RunRecord) -> float | None:
    if not job.status.terminal:
        return None
    return events[-1].t if events else unix(record.ended_at or record.updated_at)


def _final_checkpoint(run_dir: Path, job: JobRecord, events: Sequence[Event], notices: list[str]) -> ModelFiles | None:
    """The model of a done job's last checkpoint, when its files match the sums its worker recorded
    (`checkpoint_files.unverified`), with the model's recorded sum. Found by the checkpoint's
    directory name under the job's checkpoints/, so a run directory moved since still finds it."""
    last = next((e for e in reversed(events) if isinstance(e, CheckpointEvent)), None)
    if last is None:
        notices.append(f"job {job.id}: done, but its events name no checkpoint: no model logged")
        return None
    directory = RunDir(run_dir).job(job.id).checkpoints / Path(last.path).name
    model = directory / MODEL_FILE
    if not model.is_file():
        notices.append(f"job {job.id}: its final checkpoint {model} is missing: no model logged")
        return None
    problem = unverified(directory)
    if problem is not None:  # logged, a corrupt model would be registered with a fresh sum of its own
        notices.append(f"job {job.id}: {problem}: no model logged")
        return None
    vecnormalize = directory / VECNORMALIZE_FILE
    files = (model, vecnormalize) if vecnormalize.is_file() else (model,)
    return ModelFiles(files, recorded_sums(directory)[MODEL_FILE])


def _collected(run_dir: Path, entry: ModelEntry, notices: list[str]) -> ModelFiles | None:
    """A fleet agent's collected model, when its files match models.toml's checksums."""
    problems = verify(run_dir, [entry])
    if problems:
        notices.append(f"agent {entry.agent}: {problems[0]}: its model is not logged")
        return None
    directory = run_dir / MODELS_DIR
    files = [directory / entry.file, *([directory / entry.vecnormalize] if entry.vecnormalize else [])]
    return ModelFiles(tuple(files), entry.sha256)
