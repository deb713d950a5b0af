"""A pbt agent's schedule: the values its weights were trained with in each tier, through its lineage.

An agent that exploited at the end of tier t resumed its source's checkpoint from there, so its
weights were trained up to that boundary by the source, with the source's values then, and before
that by whomever the source had copied. `schedule` follows the lineage back from the agent: in each
tier, who trained the weights it ends with (`trained_by`), with which searched values, to how many
steps, and whose checkpoint it resumed at the tier's start when that was a copy (`copied_from`).
This is Ray Tune's PBT policy log read as a schedule; `replay_text` turns one into a plan that
trains it again from scratch as a one-agent fleet (`cockpit fleet --replay`, Ray's
PopulationBasedTrainingReplay): the same env, preset, grid overrides and seed as the agent that
trained tier 0, the same tiers, and at each boundary the next tier's values (`[pbt] schedule`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from cockpit.contract.fleetplan import FleetPlan, PlanError, parse_plan
from cockpit.contract.toml import tomllib
from cockpit.core.fleet.store import AgentRow, Exploit, FleetStore, FleetStoreError, Result


class ReplayError(ValueError):
    """A schedule that cannot be replayed; the message is one line naming the agent or run dir."""


@dataclass(frozen=True)
class ScheduleStep:
    """One tier of an agent's schedule: its weights were trained in `tier` by `trained_by`'s worker
    with `values` (the searched keys) to `steps` (None while that tier has no score); `copied_from`:
    the agent whose checkpoint from the end of the tier before `trained_by` resumed (None when it
    resumed its own, and in tier 0)."""

    tier: int
    trained_by: str
    values: dict[str, Any]
    steps: int | None
    copied_from: str | None = None


def exploited_values(exploits: Sequence[Exploit], tier: int) -> dict[str, Any] | None:
    """The values an agent trained with in `tier` by its `exploits` (oldest first): those its latest
    exploit before that tier (taken at an earlier tier's end) set; None when it had not exploited
    by then, so it trained with its draw's."""
    before = [e for e in exploits if e.tier < tier]
    return {key: new for key, (_old, new) in before[-1].changes.items()} if before else None


def schedule(
    agent: str,
    reached: Mapping[str, int],
    exploits: Mapping[str, Sequence[Exploit]],
    first: Mapping[str, dict[str, Any]],
    results: Sequence[Result],
) -> tuple[ScheduleStep, ...]:
    """`agent`'s schedule over the tiers 0 to the one it `reached` (each agent's tier, -1 before it
    starts: () then). `exploits`: each agent's, oldest first; `first`: each agent's values before any
    exploit (its draw's); `results`: every score recorded (their steps)."""
    steps = {(r.agent, r.tier): r.steps for r in results}

    def values(who: str, tier: int) -> dict[str, Any]:
        taken = exploited_values(exploits.get(who, ()), tier)
        return taken if taken is not None else dict(first.get(who, {}))

    out: list[ScheduleStep] = []
    trainer, copied = agent, None
    for tier in range(reached.get(agent, -1), -1, -1):
        copy = next((e for e in exploits.get(trainer, ()) if e.tier == tier - 1), None)
        copied = copy.source if copy is not None else None
        out.append(ScheduleStep(tier, trainer, values(trainer, tier), steps.get((trainer, tier)), copied))
        trainer = copied or trainer
    return tuple(reversed(out))


def schedules(
    plan_text: str,
    rows: Sequence[AgentRow],
    results: Sequence[Result],
    lineage: Sequence[Exploit],
    draws: Mapping[int, tuple[int, dict[str, Any]]],
    draw_of: Mapping[int, int],
) -> dict[str, tuple[ScheduleStep, ...]]:
    """Every agent's schedule in a pbt fleet as fleet.db records it (its plan's text, agents,
    results, lineage and draws; `draw_of`: each agent's index to its draw, as the plan made them): a
    searched fleet's from its draws and exploits, a replay's from its `[pbt] schedule`; {} for any
    other fleet (or a plan that no longer reads as TOML)."""
    try:
        raw = tomllib.loads(plan_text)
    except tomllib.TOMLDecodeError:
        return {}
    table = raw.get("pbt")
    table = table if isinstance(table, dict) else {}
    if raw.get("promotion") != "pbt" or not rows:
        return {}
    reached = {row.id: row.tier for row in rows}
    replayed = table.get("schedule")
    if isinstance(replayed, list) and all(isinstance(values, dict) for values in replayed):
        # A replay: the schedule its plan says, each agent its own trainer.
        steps = {(r.agent, r.tier): r.steps for r in results}
        return {
            row.id: tuple(
                ScheduleStep(t, row.id, dict(replayed[t]), steps.get((row.id, t)))
                for t in range(min(row.tier + 1, len(replayed)))
            )
            for row in rows
        }
    if not draw_of:
        return {}
    first = {row.id: dict(draws[draw_of[row.index]][1]) for row in rows if draw_of.get(row.index, -1) in draws}
    by_agent: dict[str, list[Exploit]] = {}
    for exploit in sorted(lineage, key=lambda e: e.tier):
        by_agent.setdefault(exploit.agent, []).append(exploit)
    return {row.id: schedule(row.id, reached, by_agent, first, results) for row in rows}


def replay_text(run_dir: Path, agent: str) -> tuple[FleetPlan, str]:
    """The plan that trains `agent`'s schedule (in the pbt fleet in `run_dir`) again from scratch,
    and its TOML text (module docstring); ReplayError (one line) when `run_dir` holds no fleet, its
    fleet is no pbt search, `agent` is none of its agents or has not reached the last tier (its
    later values are not known yet)."""
    try:
        store = FleetStore.in_run_dir(run_dir, read_only=True)
    except FleetStoreError as exc:
        raise ReplayError(f"--replay {run_dir}: no fleet there ({exc})") from None
    try:
        text, source = store.meta("plan"), store.meta("plan_source") or str(run_dir)
        replay_source = str(store.path.resolve())  # what the replay's plan comes from
        if text is None:
            raise ReplayError(f"--replay {run_dir}: its fleet.db records no plan")
        rows, results, lineage, draws = store.agents(), store.results(), store.lineage(), store.draws()
    except FleetStoreError as exc:
        raise ReplayError(f"--replay {run_dir}: {exc}") from None
    except sqlite3.Error as exc:
        raise ReplayError(f"--replay {run_dir}: {store.path}: not a readable fleet database ({exc})") from None
    finally:
        store.close()
    try:
        plan = parse_plan(tomllib.loads(text), source)
    except (tomllib.TOMLDecodeError, PlanError) as exc:
        raise ReplayError(f"--replay {run_dir}: its recorded plan does not read here: {exc}") from None
    if plan.promotion != "pbt" or plan.search is None:
        kind = "a pbt replay" if plan.promotion == "pbt" else f"promoted by {plan.promotion}"
        raise ReplayError(f"--replay {run_dir}: its fleet is {kind}, not a pbt search: only a pbt agent has a schedule")
    ids = [row.id for row in rows]
    if agent not in ids:
        raise ReplayError(f"--replay {agent}: no such agent in {run_dir} (its agents: {ids[0]} to {ids[-1]})")
    last = len(plan.tiers) - 1
    row = next(r for r in rows if r.id == agent)
    if row.tier < last:
        raise ReplayError(
            f"--replay {agent}: it has not reached the last tier ({last}) of {run_dir}, so its later values "
            "are not known: pick an agent that has (cockpit report lists them)"
        )
    draw_of = {planned.index: planned.draw for planned in plan.agents if planned.draw is not None}
    steps = schedules(text, rows, results, lineage, draws, draw_of)[agent]
    root = next(r for r in rows if r.id == steps[0].trained_by)  # the weights began with its seed
    planned = plan.agents[row.index]
    data: dict[str, Any] = {
        "name": f"{plan.name}-replay-{agent}"[-64:].lstrip("-._") or f"replay-{agent}",
        "jobs": 1,
        "promotion": "pbt",
        "agents": {"env": planned.env, "preset": planned.preset_name, "seeds": [root.seed]},
        "tiers": [{tier.unit: tier.target} for tier in plan.tiers],
        "score": {"episodes": plan.score_episodes},
        "pbt": {"schedule": [step.values for step in steps]},
    }
    if planned.overrides:
        data["agents"]["overrides"] = {key: [value] for key, value in planned.overrides}
    if plan.rate_usd_per_h is not None:
        data["rate_usd_per_h"] = plan.rate_usd_per_h
    lines = [f"# {agent}'s schedule in {run_dir}, trained again from scratch (cockpit fleet --replay)"]
    for step in steps:
        copied = f", resuming {step.copied_from}'s checkpoint" if step.copied_from else ""
        lines.append(f"# tier {step.tier}: trained by {step.trained_by}{copied}")
    replay = "\n".join(lines) + "\n" + tomli_w.dumps(data)
    try:
        return parse_plan(tomllib.loads(replay), replay_source), replay
    except PlanError as exc:
        raise ReplayError(f"--replay {agent}: its schedule does not make a plan here: {exc}") from None
