"""A run read back and assembled for `cockpit report`: its run record, a fleet's summary, a job's
live step count, the series its plots draw, and the run as the one JSON object `report --json`
prints (schema: docs/report.schema.json, documented in docs/report-json.md).

The command presents what this returns; every reading error comes out of here as one ConfigError
line, so the command has one thing to catch.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from cockpit.contract.events import FinishedEvent, PhaseEvent, ProgressEvent, read_events
from cockpit.contract.model_manifest import MODELS_DIR
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import RunRecord, RunRecordError, iso, read
from cockpit.contract.runspec import ConfigError
from cockpit.core.feed.snapshot import RunState
from cockpit.core.feed.source import Replay, SourceError
from cockpit.core.fleet.analysis import SearchAnalysis, search_analysis
from cockpit.core.fleet.report import STATUSES, FleetReportError, FleetSummary, fleet_summary
from cockpit.core.fleet.schedule import ScheduleStep
from cockpit.core.fleet.store import Exploit
from cockpit.core.record.find_runs import open_run
from cockpit.core.record.series import RunSeries, read_series


def read_record(run_dir: Path) -> RunRecord:
    """The run record of `run_dir`; ConfigError (one line) if it is missing, unreadable or from
    a newer cockpit."""
    try:
        return read(run_dir)
    except RunRecordError as exc:
        raise ConfigError(str(exc)) from exc


def live_steps(run_dir: Path, job_id: str) -> int | None:
    """The newest step count in a job's events (fresher than run.toml while the run is live)."""
    steps = None
    for event in read_events(RunDir(run_dir).job(job_id).events):
        if isinstance(event, (PhaseEvent, ProgressEvent)):
            steps = event.num_timesteps
        elif isinstance(event, FinishedEvent):
            steps = event.steps
    return steps


def read_fleet(run_dir: Path) -> FleetSummary | None:
    """The fleet in `run_dir` (None for an ordinary run); ConfigError (one line) when its fleet.db
    or recorded plan cannot be read."""
    try:
        return fleet_summary(run_dir)
    except FleetReportError as exc:
        raise ConfigError(str(exc)) from exc


def plot_series(run_dir: Path) -> RunSeries:
    """The series `report --html` and `--png` draw from `run_dir`; ConfigError (one line) for no
    readable run or an unreadable fleet.db."""
    try:
        return read_series(run_dir)
    except (RunRecordError, FleetReportError) as exc:
        raise ConfigError(str(exc)) from exc


JSON_SCHEMA_VERSION = 1
FIRST_FRAME_WAIT_S = 5.0


def json_report(run_dir: Path) -> dict[str, Any]:
    """The run as `report --json` prints it (schema: docs/report.schema.json, documented in
    docs/report-json.md): from the run's control socket while it is live, else from its files; a
    fleet's `fleet` object always from its files (fleet.db is readable while the fleet runs), null
    for an ordinary run. ConfigError (one line) when `run_dir` is no run or its fleet.db is unreadable."""
    fleet = read_fleet(run_dir)
    try:
        source = open_run(run_dir)
    except SourceError as exc:
        raise ConfigError(str(exc)) from exc
    try:
        frame = source.frame()
        deadline = time.monotonic() + FIRST_FRAME_WAIT_S
        while frame is None and time.monotonic() < deadline:  # attached before the run's first tick
            time.sleep(0.05)
            frame = source.frame()
        if frame is None:
            raise ConfigError(f"{run_dir}: the run answered but sent no state within {FIRST_FRAME_WAIT_S:.0f} s")
        live = not isinstance(source, Replay)
    finally:
        source.close()
    try:
        record: RunRecord | None = read(run_dir)
    except RunRecordError:
        record = None  # a live run that has not written its first run.toml yet
    command = record.command if record is not None else ""
    return {**state_json(frame.state, live=live, command=command), "fleet": fleet_json(fleet, run_dir, record)}


def state_json(state: RunState, *, live: bool, command: str) -> dict[str, Any]:
    """`state` in report --json's schema (see `json_report`)."""
    counts: dict[str, int] = {}
    for job in state.jobs:
        counts[job.state.value] = counts.get(job.state.value, 0) + 1
    rates = [job.sps for job in state.jobs if job.sps is not None and job.state.stepping]
    episode_rates = [j.episodes_per_h for j in state.jobs if j.episodes_per_h is not None and j.state.stepping]
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "run_dir": state.run_dir,
        "name": state.name,
        "live": live,
        "status": state.status.value,
        "command": command,
        "preset": state.preset,
        "env": state.env,
        "slots": state.slots,
        "mps": state.mps,
        "agents": len(state.jobs),
        "started_at": iso(state.started_at),
        "now": iso(state.now),
        "sps": _round(sum(rates)) if rates else None,
        "eta_s": _round(state.eta_s),
        "episodes_per_h": _round(sum(episode_rates)) if episode_rates else None,
        "counts": counts,
        "jobs": [
            {
                "id": job.id,
                "seed": job.seed,
                # The preset the user named (a fleet agent's own, else the run's) and its overrides.
                "preset": job.preset or state.preset,
                "overrides": dict(job.overrides),
                "state": job.state.value,
                "steps": job.steps,
                "target": job.target,
                "target_episodes": job.target_episodes,
                "episodes": job.episodes,
                "sps": _round(job.sps) if job.state.stepping else None,
                "episodes_per_h": _round(job.episodes_per_h) if job.state.stepping else None,
                "mean_sps": _round(job.mean_sps),
                "eta_s": _round(job.eta_s),
                "ep_rew_mean": job.ep_rew_mean,
                "restarts": job.restarts,
                "error": job.error,
                "reason": job.exit_reason,
                "memory": job.memory,
                "memory_growth_mib_h": job.memory_growth_mib_h,
                "gpu_memory_growth_mib_h": job.gpu_memory_growth_mib_h,
                "gpu": job.gpu,
            }
            for job in state.jobs
        ],
        "warnings": list(state.warnings),
    }


def lineage_json(lineage: tuple[Exploit, ...]) -> list[dict[str, Any]]:
    """A pbt agent's exploits as report --json lists them, oldest first ([] for none)."""
    return [
        {
            "tier": e.tier,
            "source": e.source,
            "source_steps": e.source_steps,
            "checkpoint": e.checkpoint,
            "score": e.score,
            "source_score": e.source_score,
            "changes": {key: [old, new] for key, (old, new) in sorted(e.changes.items())},
        }
        for e in lineage
    ]


def schedule_json(schedule: tuple[ScheduleStep, ...]) -> list[dict[str, Any]]:
    """A pbt agent's schedule as report --json lists it, tier by tier ([] outside pbt)."""
    return [
        {
            "tier": s.tier,
            "trained_by": s.trained_by,
            "copied_from": s.copied_from,
            "steps": s.steps,
            "values": s.values,
        }
        for s in schedule
    ]


def fleet_json(fleet: FleetSummary | None, run_dir: Path, record: RunRecord | None = None) -> dict[str, Any] | None:
    """`fleet` as report --json's `fleet` object (None for an ordinary run); a search's `analysis`
    prices its draws at the cost per step `record` measured (unknown without one)."""
    if fleet is None:
        return None
    counts = {status: n for status in STATUSES if (n := fleet.count(status))}
    return {
        "name": fleet.name,
        "plan": fleet.source,
        "promotion": fleet.promotion,
        "rate_usd_per_h": fleet.rate_usd_per_h,
        "counts": counts,
        "tiers": [dataclasses.asdict(tier) for tier in fleet.tiers],
        "leaderboard": [
            {
                "rank": leader.rank,
                "id": leader.agent,
                "tier": leader.tier,
                "steps": leader.steps,
                "score": leader.score,
                "score_std": leader.score_std,
                "train_return": leader.train_return,
                "env": leader.env,
                "preset": leader.preset,
                "overrides": leader.overrides,
                "seed": leader.seed,
                "lineage": lineage_json(leader.lineage),
            }
            for leader in fleet.leaderboard
        ],
        "agents": [
            {
                "id": agent.id,
                "tier": agent.tier,
                "status": agent.status,
                "steps": agent.steps,
                "score": agent.score,
                "score_std": agent.score_std,
                "score_tier": agent.score_tier,
                "env": agent.env,
                "preset": agent.preset,
                "overrides": agent.overrides,
                "seed": agent.seed,
                "error": agent.error,
                "lineage": lineage_json(agent.lineage),
                **({"schedule": schedule_json(agent.schedule)} if fleet.promotion == "pbt" else {}),
            }
            for agent in fleet.agents
        ],
        "models": {
            "dir": str(run_dir / MODELS_DIR),
            "verified": fleet.models.verified,
            "problems": list(fleet.models.problems),
            "collected": [
                {
                    "agent": m.agent,
                    "file": m.file,
                    "sha256": m.sha256,
                    "vecnormalize": m.vecnormalize,
                    "vecnormalize_sha256": m.vecnormalize_sha256,
                    "video": m.video,
                    "video_sha256": m.video_sha256,
                    "score": m.score,
                    "steps": m.steps,
                }
                for m in fleet.models.entries
            ],
        },
        "search": None
        if fleet.search is None
        else {
            "sampler": fleet.search.sampler,
            "samples": fleet.search.samples,
            "seed": fleet.search.seed,
            "keys": list(fleet.search.keys),
            "draws": [{"draw": draw, "trial": trial, "values": values} for draw, trial, values in fleet.search.draws],
        },
        "analysis": analysis_json(search_analysis(fleet, record)),
    }


def analysis_json(analysis: SearchAnalysis | None) -> dict[str, Any] | None:
    """A search fleet's analysis as report --json's `fleet.analysis` (docs/report-json.md)."""
    if analysis is None:
        return None
    return {
        "evaluator": analysis.evaluator,
        "envs": analysis.envs,
        "importance": [{"key": key, "importance": share} for key, share in analysis.importance],
        "importance_note": analysis.importance_note,
        "top": analysis.top,
        "rate_usd_per_h": analysis.rate_usd_per_h,
        "usd_per_step": analysis.usd_per_step,
        "draws": [
            {
                "draw": p.draw,
                "values": p.values,
                "agents": list(p.agents),
                "tier": p.tier,
                "score": p.score,
                "steps": p.steps,
                "cost_usd": p.cost_usd,
                "pareto": p.pareto,
            }
            for p in analysis.draws
        ],
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
