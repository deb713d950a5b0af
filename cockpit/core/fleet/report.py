"""A fleet as `cockpit report` shows it: its tiers, leaderboard, agents and collected models.

`fleet_summary(run_dir)` reads a fleet's run directory without changing it: `fleet.db` opened
read-only (WAL lets it read while the cockpit writes, so a live fleet can be reported too), the plan
recorded in it, and `models/models.toml`, whose checksums it verifies. It runs a handful of queries
whatever the fleet's size (the agents, the results, the promotions, and a few `meta` keys), never
one per agent.

The tier counts are the live view's (`FleetRun.view`): an agent has *entered* a tier once it was
assigned to it or any later one; *finished* agents have a score there; *culled* ones finished, were
not promoted, and the tier can promote no more (the last tier culls no one). A sync tier can promote
no more once its promotion is decided (fleet.db records it); an async one once nothing can still
arrive in it or finish it and none of its agents is owed a promotion (the ASHA rule on its results).

Each agent's status, read from fleet.db:
- `waiting`: not started (its `tier` is None);
- `training`: assigned to its tier with no score there yet: queued, running, resuming, or left
  unfinished by an interrupted fleet. An agent promoted out of a tier is `training` in the next one
  (fleet.db moves it there in the promotion's own transaction), so "promoted" is no status: its
  `tier` says how far it went;
- `scored`: scored in its tier, whose promotion is not decided yet (a sync tier waits for its last
  agents; an async one may still promote it as more results come in);
- `culled`: scored in a tier that can promote no more, and not promoted;
- `failed`: its worker failed in its tier past the restart policy;
- `done`: scored in the last tier.

A pbt fleet (`promotion = "pbt"`) culls no one: each tier's decision moves every scored agent on,
and each agent's `lineage` lists the exploits it made (whose checkpoint it copied at the end of which
tier, and how its searched values changed), oldest first; its `schedule`, the values its weights were
trained with in each tier through that lineage (`cockpit.core.fleet.schedule`).
"""

from __future__ import annotations

import dataclasses
import math
import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cockpit.contract.fleetplan import PlanError, Tier, Unit, parse_plan
from cockpit.contract.model_manifest import ModelEntry, read_manifest, verify
from cockpit.contract.presets import PRESET_KEYS
from cockpit.contract.searchspace import SearchSpace, parse_search
from cockpit.contract.toml import tomllib
from cockpit.core.fleet.promotion import async_promotions, rank_key
from cockpit.core.fleet.schedule import ScheduleStep, schedules
from cockpit.core.fleet.store import FLEET_DB, AgentRow, Exploit, FleetStore, FleetStoreError, Result

Status = Literal["waiting", "training", "scored", "culled", "failed", "done"]
STATUSES: tuple[Status, ...] = ("waiting", "training", "scored", "culled", "failed", "done")
_GENERATED_PRESET = re.compile(r"(.+)-[0-9a-f]{10}")  # FleetRun's presets/<name>-<hash>.toml


class FleetReportError(ValueError):
    """The run dir's fleet.db, recorded plan or models.toml cannot be read; one line naming the file."""


@dataclass(frozen=True)
class TierSummary:
    """One tier: its target and how many agents are where in it (see the module docstring)."""

    tier: int
    timesteps: int | None  # its target: steps, or (a plan in episodes) None and `episodes`
    planned: int  # agents the plan sends into it (async may send more)
    entered: int  # agents assigned to it or a later tier
    training: int  # assigned to it, no score there yet
    finished: int  # with a score in it
    promoted: int  # promoted out of it
    culled: int  # finished, not promoted, and the tier can promote no more (0 in the last tier)
    failed: int  # failed in it
    episodes: int | None = None  # its target in whole episodes, for a plan in episodes


@dataclass(frozen=True)
class AgentSummary:
    """One agent: its settings, how far it went and its latest score.

    `preset` is the plan's preset name (a built-in name or a file's stem); `tier` is the tier it is
    in or reached, None while it waits; `steps`, `score`, `score_std`, `train_return` and
    `score_tier` come from its latest (highest-tier) result: 0 and None before it has one.
    """

    id: str
    index: int
    env: str
    preset: str
    overrides: dict[str, Any]
    seed: int
    tier: int | None
    status: Status
    steps: int
    score: float | None
    score_std: float | None
    train_return: float | None
    score_tier: int | None
    error: str | None  # why it failed, for a failed agent
    lineage: tuple[Exploit, ...] = ()  # pbt: its exploits, oldest first
    draw: int | None = None  # with [agents.search]: the draw it trains
    schedule: tuple[ScheduleStep, ...] = ()  # pbt: its values per tier through its lineage (`schedule`)


@dataclass(frozen=True)
class Leader:
    """A place on the leaderboard: an agent's highest-tier result and its settings."""

    rank: int  # 1 for the best
    agent: str
    env: str
    preset: str
    overrides: dict[str, Any]
    seed: int
    tier: int
    steps: int
    score: float
    score_std: float | None
    train_return: float | None
    lineage: tuple[Exploit, ...] = ()  # pbt: its exploits, oldest first


@dataclass(frozen=True)
class ModelsSummary:
    """The collected models (models.toml, best first) and each problem `verify` found: a file
    missing or not matching its SHA-256, or a manifest that cannot be read (then `entries` is empty)."""

    entries: tuple[ModelEntry, ...]
    problems: tuple[str, ...]

    @property
    def verified(self) -> bool:
        """True when every listed file is there and matches its checksum."""
        return not self.problems


@dataclass(frozen=True)
class SearchSummary:
    """A searched fleet's `[agents.search]` and the draws made so far (fleet.db's `draws`), each
    (draw, Optuna trial number, values). Read from fleet.db alone: the report opens no study.
    `space` is the parsed `[agents.search]` (what `cockpit.core.fleet.analysis` needs of it)."""

    sampler: str
    samples: int
    seed: int
    keys: tuple[str, ...]
    draws: tuple[tuple[int, int, dict[str, Any]], ...]
    space: SearchSpace | None = None


@dataclass(frozen=True)
class FleetSummary:
    """A fleet as its run dir records it (see the module docstring).

    `leaderboard` holds every agent with a result, the highest tier first, then best first
    (`promotion.rank_key`); `agents` holds every agent of the plan's matrix, in matrix order.
    """

    name: str
    source: str  # the plan file it was started from
    promotion: str  # "sync" or "async"
    rate_usd_per_h: float | None
    tiers: tuple[TierSummary, ...]
    leaderboard: tuple[Leader, ...]
    agents: tuple[AgentSummary, ...]
    models: ModelsSummary
    results: tuple[Result, ...] = ()  # every recorded score, as fleet.db holds them
    search: SearchSummary | None = None  # None for a plan without [agents.search]

    def count(self, status: Status) -> int:
        """How many agents have `status`."""
        return sum(1 for agent in self.agents if agent.status == status)


@dataclass(frozen=True)
class _Plan:
    """What the report needs of the recorded plan."""

    name: str
    promotion: str
    rate: float | None
    tiers: tuple[Tier, ...]
    funnel: list[int]
    presets: dict[int, str]  # agent index -> the plan's preset name ({} when the plan no longer resolves)
    draws: dict[int, int] = field(default_factory=dict)  # agent index -> its draw ({} without a search)


def fleet_summary(run_dir: Path) -> FleetSummary | None:
    """The fleet in `run_dir`, or None when it holds no fleet.db. Reads only; FleetReportError
    (one line) when fleet.db or its recorded plan cannot be read. A models.toml that cannot be read
    is no error here: it is a problem in `models.problems`."""
    if not (run_dir / FLEET_DB).is_file():
        return None
    try:
        store = FleetStore.in_run_dir(run_dir, read_only=True)
    except (FleetStoreError, sqlite3.Error) as exc:
        raise FleetReportError(f"{run_dir / FLEET_DB}: cannot open ({exc})") from None
    try:
        text, source = store.meta("plan"), store.meta("plan_source") or "plan"
        if text is None:
            raise FleetReportError(f"{store.path}: records no plan")
        plan = _read_plan(text, source, store)
        # Each read is its own snapshot while a live fleet writes, so they go in the order its
        # transactions make things true: a decision before its promotions, a promotion after its
        # tier's results, and an agent's row last (at worst newer than the rest, never older).
        decided = {i for i in range(len(plan.tiers) - 1) if store.meta(f"decided:{i}") is not None}
        promotions = store.promotions()
        results = store.results()
        lineage = store.lineage()
        rows = store.agents()
        draws = store.draws()
        search = _search(text, draws)
        ran_at = store.meta("rate_usd_per_h")  # the fleet's --rate, else the plan's (FleetRun records it)
    except FleetStoreError as exc:
        raise FleetReportError(str(exc)) from None
    except sqlite3.Error as exc:
        raise FleetReportError(f"{store.path}: not a readable fleet database ({exc})") from None
    finally:
        store.close()
    by_tier: dict[int, list[Result]] = {i: [] for i in range(len(plan.tiers))}
    latest: dict[str, Result] = {}
    for result in results:
        by_tier.setdefault(result.tier, []).append(result)
        if result.agent not in latest or result.tier > latest[result.agent].tier:
            latest[result.agent] = result
    closed = _closed(plan, rows, by_tier, promotions, decided)
    last = len(plan.tiers) - 1
    exploits: dict[str, list[Exploit]] = {}
    for exploit in lineage:
        exploits.setdefault(exploit.agent, []).append(exploit)
    agents = tuple(_agent(row, latest.get(row.id), plan, last, closed, tuple(exploits.get(row.id, ()))) for row in rows)
    plans = schedules(text, rows, results, lineage, draws, plan.draws)
    agents = tuple(dataclasses.replace(a, schedule=plans.get(a.id, ())) for a in agents)
    return FleetSummary(
        name=plan.name,
        source=source,
        promotion=plan.promotion,
        rate_usd_per_h=float(ran_at) if ran_at is not None else plan.rate,
        tiers=_tiers(plan, rows, by_tier, promotions, closed),
        leaderboard=_leaderboard(latest, agents),
        agents=agents,
        models=_models(run_dir),
        results=tuple(results),
        search=search,
    )


def _search(text: str, draws: dict[int, tuple[int, dict[str, Any]]]) -> SearchSummary | None:
    """The recorded plan's `[agents.search]` with the draws made; None when it has none (or it no
    longer parses: what was drawn is in the agents' overrides still)."""
    try:
        agents = tomllib.loads(text).get("agents")
    except tomllib.TOMLDecodeError:
        return None
    space, _problems = parse_search(agents.get("search") if isinstance(agents, dict) else None, preset_keys=PRESET_KEYS)
    if space is None:
        return None
    made = tuple((draw, trial, values) for draw, (trial, values) in sorted(draws.items()))
    return SearchSummary(space.sampler, space.samples, space.seed, space.keys, made, space)


def _read_plan(text: str, source: str, store: FleetStore) -> _Plan:
    """The recorded plan, validated by `parse_plan`. A plan that no longer validates where the report
    runs (a preset given as a path relative to where the fleet started, say) still gives its name,
    promotion, rate and tiers; the presets are then named from the agents' rows."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise FleetReportError(f"{store.path}: its recorded plan is not TOML ({exc})") from None
    try:
        plan = parse_plan(raw, source)
        presets = {agent.index: agent.preset_name for agent in plan.agents}
        draws = {agent.index: agent.draw for agent in plan.agents if agent.draw is not None}
        return _Plan(plan.name, plan.promotion, plan.rate_usd_per_h, plan.tiers, plan.funnel(), presets, draws)
    except PlanError:
        pass
    try:
        unit: Unit = "episodes" if "episodes" in raw["tiers"][0] else "timesteps"
        tiers = tuple(Tier(int(t[unit]), t.get("promote"), unit) for t in raw["tiers"])
        funnel = [len(store.agents())]
        for tier in tiers[:-1]:
            funnel.append(funnel[-1] if raw.get("promotion") == "pbt" else tier.promoted(funnel[-1]))
        rate = raw.get("rate_usd_per_h")
        name = str(raw.get("name", Path(source).stem))
        samples = raw.get("agents", {}).get("search", {}).get("samples")
        per = funnel[0] // samples if isinstance(samples, int) and samples > 0 and funnel[0] % samples == 0 else 0
        draws = {index: index // per for index in range(funnel[0])} if per else {}  # the matrix is draw-major
        promotion = str(raw.get("promotion", "sync"))
        return _Plan(name, promotion, float(rate) if rate else None, tiers, funnel, {}, draws)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise FleetReportError(f"{store.path}: its recorded plan has no readable tiers") from None


def _closed(
    plan: _Plan,
    rows: list[AgentRow],
    by_tier: dict[int, list[Result]],
    promotions: dict[int, set[str]],
    decided: set[int],
) -> list[bool]:
    """Per tier, whether it can promote no more (see the module docstring); the last tier is closed
    to promotion from the start."""
    last = len(plan.tiers) - 1
    if plan.promotion in ("sync", "pbt"):
        return [i in decided for i in range(last)] + [True]
    training = {row.tier for row in rows if row.status == "training"}
    resolved = not any(row.status == "waiting" for row in rows)
    out = []
    for i in range(last):
        count = plan.tiers[i].promote
        fraction = count if isinstance(count, float) else plan.funnel[i + 1] / max(plan.funnel[i], 1)
        owed = async_promotions(by_tier.get(i, []), fraction, promotions.get(i, set()))
        resolved = resolved and i not in training and not owed
        out.append(resolved)
    return [*out, True]


def _tiers(
    plan: _Plan,
    rows: list[AgentRow],
    by_tier: dict[int, list[Result]],
    promotions: dict[int, set[str]],
    closed: list[bool],
) -> tuple[TierSummary, ...]:
    last = len(plan.tiers) - 1
    out = []
    for i, tier in enumerate(plan.tiers):
        entered = sum(1 for row in rows if row.tier >= i)
        training = sum(1 for row in rows if row.tier == i and row.status == "training")
        failed = sum(1 for row in rows if row.tier == i and row.status == "failed")
        finished = len(by_tier.get(i, []))
        promoted = len(promotions.get(i, ()))
        culled = finished - promoted if i < last and closed[i] else 0
        out.append(
            TierSummary(
                i, tier.timesteps, plan.funnel[i], entered, training, finished, promoted, culled, failed, tier.episodes
            )
        )
    return tuple(out)


def _preset_name(row: AgentRow, plan: _Plan) -> str:
    """The plan's preset name for the agent; from its preset argument when the plan did not resolve
    (a built-in name, or a file's stem without the hash `FleetRun` adds to the files it writes)."""
    if row.index in plan.presets:
        return plan.presets[row.index]
    if not row.preset.endswith(".toml"):
        return row.preset
    stem = Path(row.preset).stem
    generated = _GENERATED_PRESET.fullmatch(stem)
    return generated.group(1) if generated and Path(row.preset).parent.name == "presets" else stem


def _status(row: AgentRow, last: int, closed: list[bool]) -> Status:
    if row.status != "scored":
        return row.status
    if row.tier == last:
        return "done"
    return "culled" if closed[row.tier] else "scored"


def _agent(
    row: AgentRow, result: Result | None, plan: _Plan, last: int, closed: list[bool], lineage: tuple[Exploit, ...] = ()
) -> AgentSummary:
    return AgentSummary(
        id=row.id,
        index=row.index,
        env=row.env,
        preset=_preset_name(row, plan),
        overrides=row.overrides,
        seed=row.seed,
        tier=row.tier if row.tier >= 0 else None,
        status=_status(row, last, closed),
        steps=result.steps if result else 0,
        score=result.score if result else None,
        score_std=result.score_std if result else None,
        train_return=result.train_return if result else None,
        score_tier=result.tier if result else None,
        error=row.error if row.status == "failed" else None,
        lineage=lineage,
        draw=plan.draws.get(row.index),
    )


def _leaderboard(latest: dict[str, Result], agents: tuple[AgentSummary, ...]) -> tuple[Leader, ...]:
    by_id = {agent.id: agent for agent in agents}  # every result's agent is one (results reference agents)
    ordered = sorted(latest.values(), key=lambda r: (-r.tier, *rank_key(r)))
    return tuple(
        Leader(
            rank,
            r.agent,
            (a := by_id[r.agent]).env,
            a.preset,
            a.overrides,
            a.seed,
            r.tier,
            r.steps,
            r.score,
            r.score_std,
            r.train_return,
            a.lineage,
        )
        for rank, r in enumerate(ordered, start=1)
    )


def _models(run_dir: Path) -> ModelsSummary:
    try:
        entries = read_manifest(run_dir)
    except ValueError as exc:
        return ModelsSummary((), (str(exc),))
    return ModelsSummary(tuple(entries), tuple(verify(run_dir, entries)))


@dataclass(frozen=True)
class SearchPoint:
    """One result in the order fleet.db recorded it: the steps the fleet had trained by then (what
    its scored tiers trained: each result adds its agent's steps less its result's steps in the tier
    before, 0 before any; agents still training are not counted), the score, and the best so far."""

    agent: str
    tier: int
    steps_so_far: int
    score: float
    best_so_far: float


def search_progress(results: Sequence[Result]) -> tuple[SearchPoint, ...]:
    """The fleet's best score as its results came in (`SearchPoint`): what a search's "best so far"
    plots, and what a benchmark reads the steps to a score from."""
    before: dict[str, int] = {}
    total, best = 0, -math.inf
    out = []
    for r in sorted(results, key=lambda r: (r.t, r.tier, r.agent)):
        total += max(0, r.steps - before.get(r.agent, 0))
        before[r.agent] = r.steps
        best = max(best, r.score)
        out.append(SearchPoint(r.agent, r.tier, total, r.score, best))
    return tuple(out)
