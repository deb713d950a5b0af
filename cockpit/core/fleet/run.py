"""Running a fleet: agents through tiers on the run's supervisor, promoted by score, durably.

`FleetRun` sits beside the `Supervisor` of an ordinary run session and drives its queue: each
agent is one job (`jobs/<agent id>/`), trained by the ordinary worker with `--eval-episodes`, so it
ends each tier with an `evaluated` event. In every supervisor tick, once ended workers are reaped
and before free slots are filled (`Supervisor.before_launch`), `update`:

1. **harvests** the jobs that ended: a done job's score is recorded in `fleet.db`
   (`cockpit.core.fleet.store`), a failed one is taken out of the ranking;
2. **promotes** as the plan says (`cockpit.core.fleet.promotion`): sync when a tier is complete, async
   as soon as an agent is in its tier's top share; pbt (`cockpit.core.fleet.pbt`) when a tier is
   complete, as sync, everyone, the bottom share first copying a top agent's checkpoint and
   perturbing its searched values. A promoted agent's job is queued again with the
   next tier's total as its target: its worker resumes from the job's newest checkpoint and trains
   only the difference;
3. **feeds** the supervisor's queue up to its free slots, promoted agents first (the highest tier
   first, the best first), then agents that have not started, in matrix order. The supervisor's
   queue never holds more than its free slots, so a promotion never waits behind 500 new agents.

Agents that finish the last tier have their final model copied to `models/` (`cockpit.contract.model_manifest`).

Durability: each of those steps is a transaction in `fleet.db`, written before the supervisor
acts on it. `FleetRun.resume` rebuilds the run from it: agents with a score stay done; agents in
a tier without one are queued again and resume from their checkpoints; an agent whose worker had
already written its `evaluated` event before the kill is scored from that event, not trained again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.contract.events import EvaluatedEvent
from cockpit.contract.fleetplan import Agent, FleetPlan, PlanError, Tier, parse_plan, with_values
from cockpit.contract.model_manifest import MODELS_DIR, ModelEntry, copy_atomic, read_manifest, write_manifest
from cockpit.contract.presets import Preset, PresetError, builtin_names, to_toml
from cockpit.contract.rundir import RunDir
from cockpit.contract.searchspace import SearchSpace
from cockpit.contract.states import JobState
from cockpit.contract.toml import tomllib
from cockpit.core.feed.snapshot import FleetView, LeaderView, SearchView, TierView, override_pairs
from cockpit.core.fleet import pbt
from cockpit.core.fleet.promotion import async_promotions, rank_key, ranked, sync_promotions
from cockpit.core.fleet.report import search_progress
from cockpit.core.fleet.search import FleetSearch, verdict
from cockpit.core.fleet.store import AgentRow, Exploit, FleetStore, Result
from cockpit.core.machine.clock import Clock, SystemClock
from cockpit.core.supervise.jobs import Job
from cockpit.core.supervise.supervisor import Supervisor

PRESETS_DIR = "presets"
SEARCH_TOP = 5  # the best agents whose values the fleet screen's search lines place in each range
LEADERS = 10
NOTICES_KEPT = 20


@dataclass
class _Agent:
    """An agent as the fleet tracks it in memory (fleet.db is the durable copy)."""

    row: AgentRow
    preset_arg: str
    tier: int
    status: str
    handed: bool = False  # its job for this tier is in the supervisor (queued, running or ended)


def _preset_arg(agent: Agent, run_dir: Path) -> str:
    """What the agent's worker gets as --preset: the plan's built-in name or file when the agent has
    no overrides, else a preset file written into the run dir (one per distinct preset)."""
    if not agent.overrides and agent.preset_name in builtin_names():
        return agent.preset_name
    if not agent.overrides and Path(agent.preset_name).is_file():
        return str(Path(agent.preset_name).resolve())
    return _preset_file(agent.preset, run_dir)


def _preset_file(preset: Preset, run_dir: Path) -> str:
    """`preset` written into the run dir's presets/ (one file per distinct preset), its path."""
    text = to_toml(preset)
    path = run_dir / PRESETS_DIR / f"{preset.name}-{hashlib.sha256(text.encode()).hexdigest()[:10]}.toml"
    if not path.exists():
        from cockpit.contract.files import write_atomic

        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
    return str(path.resolve())


def lineage_text(exploits: list[Exploit]) -> str:
    """An agent's latest exploit as `a0007@t1` (whose checkpoint, at the end of which tier), "" for none."""
    return f"{exploits[-1].source}@t{exploits[-1].tier}" if exploits else ""


def overrides_text(overrides: dict[str, Any]) -> str:
    """`key=value, ...` in key order ("" for none)."""
    return ", ".join(f"{key}={value}" for key, value in override_pairs(overrides))


class FleetRun:
    """Drives one fleet on `supervisor` (see the module docstring). Build it with `new` or `resume`."""

    def __init__(self, plan: FleetPlan, store: FleetStore, supervisor: Supervisor, *, clock: Clock | None = None,
                 rate_usd_per_h: float | None = None) -> None:  # fmt: skip
        self.plan = plan
        self.store = store
        self.supervisor = supervisor
        self.clock = clock or SystemClock()
        self.rate = rate_usd_per_h if rate_usd_per_h is not None else plan.rate_usd_per_h
        self.run_dir = supervisor.run_dir
        self.agents: dict[str, _Agent] = {}
        self._waiting: deque[str] = deque()
        self._results: dict[int, list[Result]] = {i: [] for i in range(len(plan.tiers))}
        self._promoted: dict[int, set[str]] = {i: set() for i in range(len(plan.tiers))}
        self._models: dict[str, ModelEntry] = {}
        self._decided: set[int] = set()  # tiers whose sync promotion is made (even of no one)
        self.lineage: dict[str, list[Exploit]] = {}  # pbt: each agent's exploits, oldest first
        self.notices: list[str] = []
        self.notice_count = 0
        self._fractions = self._async_fractions()
        # [agents.search]: the study, each draw's agents, and the draws made (draw -> trial number).
        self.search: FleetSearch | None = None
        self._draw_agents: dict[int, list[str]] = {}
        self._draws: dict[int, int] = {}
        self._untold: set[int] = set()  # draws made that may have a tier still to tell (`_tell`)
        # The last SearchView and what it was built from: results, draws and exploits only grow,
        # so their counts say when it is stale (it sorts every result: not once per 5 Hz tick).
        self._search_cache: tuple[tuple[int, int, int], SearchView | None] | None = None
        supervisor.pending_work = self.pending
        supervisor.before_launch = self.update
        supervisor.view_limit = 2 * supervisor.slots

    # ----- construction -----

    @classmethod
    def new(cls, plan: FleetPlan, plan_text: str, supervisor: Supervisor, **kwargs: Any) -> FleetRun:
        """A fresh fleet in the supervisor's run dir: fleet.db records the plan and every agent."""
        run_dir = supervisor.run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        store = FleetStore.in_run_dir(run_dir)
        store.create(plan_text, str(Path(plan.source).resolve()), [
            (a.id, a.index, a.env, _preset_arg(a, run_dir), dict(a.overrides), a.seed) for a in plan.agents
        ])  # fmt: skip
        fleet = cls(plan, store, supervisor, **kwargs)
        if fleet.rate is not None:
            store.set_meta("rate_usd_per_h", repr(fleet.rate))
        fleet._load()
        return fleet

    @classmethod
    def resume(cls, supervisor: Supervisor, **kwargs: Any) -> FleetRun:
        """The fleet recorded in the supervisor's run dir, continued where it stopped. PlanError
        (one line) when the run dir holds no fleet or its recorded plan no longer validates."""
        run_dir = supervisor.run_dir
        store = FleetStore.in_run_dir(run_dir)
        text, source = store.meta("plan"), store.meta("plan_source")
        if text is None or source is None:
            store.close()
            raise PlanError(f"--resume {run_dir}: no fleet recorded there (no plan in {store.path})")
        plan = parse_plan(tomllib.loads(text), source)
        recorded = store.meta("rate_usd_per_h")
        if kwargs.get("rate_usd_per_h") is None and recorded is not None:
            kwargs["rate_usd_per_h"] = float(recorded)  # the rate the fleet began with, unless given anew
        fleet = cls(plan, store, supervisor, **kwargs)
        fleet._load()
        fleet._apply_exploits()  # a kill between a pbt decision and its copy: the copy, before any worker
        fleet._restore()
        return fleet

    def _async_fractions(self) -> list[float]:
        """Each tier's promoted share for async: the fraction, or the count over the agents the plan
        sends into the tier."""
        funnel = self.plan.funnel()
        out = []
        for i, tier in enumerate(self.plan.tiers[:-1]):
            out.append(tier.promote if isinstance(tier.promote, float) else funnel[i + 1] / funnel[i])
        return out

    def _load(self) -> None:
        """The agents, results and promotions from fleet.db."""
        for row in self.store.agents():
            self.agents[row.id] = _Agent(row, row.preset, row.tier, row.status)
            if row.status == "waiting":
                self._waiting.append(row.id)
        for result in self.store.results():
            self._results[result.tier].append(result)
        for tier, agents in self.store.promotions().items():
            self._promoted[tier] |= agents
        self._decided = {i for i in range(len(self.plan.tiers)) if self.store.meta(f"decided:{i}") is not None}
        self._models = {entry.agent: entry for entry in read_manifest(self.run_dir)}
        for exploit in self.store.lineage():
            self.lineage.setdefault(exploit.agent, []).append(exploit)
        if self.plan.search is not None:
            self.search = FleetSearch(self.plan.search, self.run_dir, self.plan.name)
            for agent in self.plan.agents:
                if agent.draw is not None:
                    self._draw_agents.setdefault(agent.draw, []).append(agent.id)
            self._draws = {draw: trial for draw, (trial, _values) in self.store.draws().items()}
            self._untold = set(self._draws)  # the first `_tell` drops those with nothing left to tell

    def _restore(self) -> None:
        """Give the supervisor a job for every agent that started, in the state fleet.db says,
        brought up to date with the events its worker wrote."""
        sup = self.supervisor
        now = self.clock.time()
        for agent in self.agents.values():
            if agent.tier < 0:
                continue
            job = self._job(agent, queued=False)
            sup.restore(job)
            agent.handed = True
            if agent.status == "scored":
                job.change_state(JobState.DONE, now)
                job.exit_reason = "done in an earlier session"
                if agent.tier == len(self.plan.tiers) - 1 and agent.row.id not in self._models:
                    self._collect(agent, self._result_of(agent.row.id, agent.tier))
            elif agent.status == "failed":
                job.change_state(JobState.FAILED, now)
                job.error = agent.row.error
            elif _reached(job.evaluation, self.plan.tiers[agent.tier]):
                # Scored just before the kill: record it at the next update, train nothing again.
                job.change_state(JobState.DONE, now)
                job.exit_reason = "done in an earlier session"
            else:
                agent.handed = False  # fed again, ahead of agents that have not started

    def _result_of(self, agent: str, tier: int) -> Result:
        return next(r for r in self._results[tier] if r.agent == agent)

    # ----- the loop -----

    def pending(self) -> bool:
        """True while the fleet has work the supervisor has not been given yet (or not harvested)."""
        if any(not a.handed and a.status == "training" for a in self.agents.values()) or self._waiting:
            return True
        return any(self._ended(job) is not None for job in self.supervisor.jobs.values())

    def update(self) -> None:
        """Harvest ended jobs, promote, and feed free slots (see the module docstring)."""
        for job in list(self.supervisor.jobs.values()):
            self._harvest(job)
        self._decide()
        self._fill_slots()
        self._tell()

    def _ended(self, job: Job) -> str | None:
        """'done' or 'failed' for a job whose tier ended and is not recorded yet, else None."""
        agent = self.agents.get(job.id)
        if agent is None or agent.status != "training" or not agent.handed:
            return None
        if job.state is JobState.DONE:
            return "done"
        return "failed" if job.state is JobState.FAILED else None

    def _harvest(self, job: Job) -> None:
        ended = self._ended(job)
        if ended is None:
            return
        agent = self.agents[job.id]
        tier = agent.tier
        evaluation = job.evaluation
        if ended == "failed" or evaluation is None or not _reached(evaluation, self.plan.tiers[tier]):
            error = job.error or "its worker finished without an evaluation"
            self.store.fail(job.id, tier, error)
            agent.status = "failed"
            self._notice(f"{job.id} failed in tier {tier}: {error}")
            return
        self.store.record(job.id, tier, steps=evaluation.step, score=evaluation.mean_reward,
                          score_std=evaluation.std_reward, train_return=job.ep_rew_mean)  # fmt: skip
        agent.status = "scored"
        result = Result(job.id, tier, evaluation.step, evaluation.mean_reward, evaluation.std_reward, job.ep_rew_mean,
                        agent.row.seed, self.clock.time())  # fmt: skip
        self._results[tier].append(result)
        if tier == len(self.plan.tiers) - 1:
            self._collect(agent, result)

    def _entered(self, tier: int) -> list[_Agent]:
        return [a for a in self.agents.values() if a.tier >= tier]

    def _decide(self) -> None:
        last = len(self.plan.tiers) - 1
        if self.plan.promotion in ("sync", "pbt"):
            for tier in range(last):
                if tier in self._decided:
                    continue
                entered = self._entered(tier)
                complete = not self._waiting if tier == 0 else self._tier_complete(tier - 1)
                if not complete or any(a.tier == tier and a.status == "training" for a in entered):
                    return  # later tiers wait for this one
                if self.plan.promotion == "pbt":
                    self._pbt_boundary(tier)
                    continue
                quota = self.plan.tiers[tier].promoted(len(entered))
                self._promote(sync_promotions(self._results[tier], quota), tier)
            return
        for tier in reversed(range(last)):  # the highest tier's promotions are fed first anyway
            chosen = async_promotions(self._results[tier], self._fractions[tier], self._promoted[tier])
            if chosen:
                self._promote(chosen, tier)

    def _tier_complete(self, tier: int) -> bool:
        return tier in self._decided

    def _promote(self, chosen: list[str], tier: int) -> None:
        decided = self.plan.promotion == "sync"
        self.store.promote(chosen, tier, decided=decided)
        self._promoted[tier] |= set(chosen)
        self._stir(chosen)
        if decided:
            self._decided.add(tier)
        for agent_id in chosen:
            agent = self.agents[agent_id]
            agent.tier, agent.status, agent.handed = tier + 1, "training", False
            score = self._result_of(agent_id, tier).score
            self._notice(f"{agent_id} promoted to tier {tier + 1} (score {score:.1f} in tier {tier})")
        if self.plan.promotion == "sync":
            results = self._results[tier]
            best = f", best {ranked(results)[0].agent} {ranked(results)[0].score:.1f}" if results else ""
            self._notice(f"tier {tier} done: {len(results)} scored, {len(chosen)} promoted, "
                         f"{len(results) - len(chosen)} culled{best}")  # fmt: skip

    def _pbt_boundary(self, tier: int) -> None:
        """The end of a complete pbt tier (`cockpit.core.fleet.pbt`): the exploits decided and
        recorded with everyone's move to the next tier in one transaction, then each copy made."""
        settings, search = self.plan.pbt, self.plan.search
        assert settings is not None and search is not None  # parse_plan requires both for pbt
        order = ranked(self._results[tier])
        scores = {r.agent: r.score for r in order}
        rng = pbt.rng_for(settings.seed, tier)
        checkpoints = RunDir(self.run_dir)
        exploits: list[Exploit] = []
        for agent_id, source_id in self._pbt_pairs([r.agent for r in order], settings.quantile, rng):
            source_row, row = self.agents[source_id].row, self.agents[agent_id].row
            newest = pbt.newest_checkpoint(checkpoints.job(source_id).checkpoints)
            if newest is None:  # cannot happen for a scored agent (its worker saves before it scores)
                self._notice(f"{agent_id} cannot exploit {source_id}: it has no checkpoint")
                continue
            planned = self.plan.agents[row.index]
            base = planned.unsearched or planned.preset  # the grid's preset: a batch size rounds from its own
            old = pbt.current_values(search, source_row.overrides, self.plan.agents[source_row.index].preset)
            mine = pbt.current_values(search, row.overrides, base)
            try:
                preset = with_values(base, pbt.explore(old, search, rng, settings.resample_probability))
            except PresetError as exc:  # keys checked one at a time up front; together a preset may refuse them
                self._notice(f"{agent_id} takes {source_id}'s values unperturbed: {exc}")
                preset = with_values(base, old)
            new = {key: preset.as_dict()[key] for key in search.keys}  # as resolved (a batch size rounded)
            overrides = {**dict(self.plan.agents[row.index].overrides), **row.overrides, **new}
            changes = {key: (mine[key], new[key]) for key in search.keys}
            steps = self._result_of(source_id, tier).steps
            exploits.append(Exploit(agent_id, tier, source_id, steps, newest.name, changes, scores[agent_id],
                                    scores[source_id], preset=_preset_file(preset, self.run_dir),
                                    overrides=overrides))  # fmt: skip
        everyone = [r.agent for r in order]
        self.store.pbt_boundary(tier, everyone, exploits)
        self._decided.add(tier)
        self._promoted[tier] |= set(everyone)
        for exploit in exploits:
            agent = self.agents[exploit.agent]
            agent.row = dataclasses.replace(agent.row, preset=exploit.preset, overrides=exploit.overrides or {})
            agent.preset_arg = exploit.preset
            self.lineage.setdefault(exploit.agent, []).append(exploit)
            ahead = ">" if (exploit.source_score or 0.0) > (exploit.score or 0.0) else "="  # "=": a tie ranked ahead
            self._notice(f"{exploit.agent} exploits {exploit.source} (score {exploit.source_score:.1f} {ahead} "
                         f"{exploit.score:.1f}): {pbt.changes_text(exploit.changes)}")  # fmt: skip
        for agent_id in everyone:
            agent = self.agents[agent_id]
            agent.tier, agent.status, agent.handed = tier + 1, "training", False
        self._stir(everyone)
        self._apply_exploits()
        best = f", best {order[0].agent} {order[0].score:.1f}" if order else ""
        self._notice(f"tier {tier} done: {len(order)} scored, all go on, {len(exploits)} exploited a top agent{best}")

    def _pbt_pairs(self, order: list[str], quantile: float, rng: Any) -> list[tuple[str, str]]:
        """`pbt.pairs` within each group of agents that share env, preset and grid overrides (a
        checkpoint resumes only under its own env and network), the groups in matrix order."""
        groups: dict[tuple[str, str, tuple[tuple[str, Any], ...]], list[str]] = {}
        for agent_id in sorted(order, key=lambda a: self.agents[a].row.index):
            agent = self.plan.agents[self.agents[agent_id].row.index]
            groups.setdefault((agent.env, agent.preset_name, agent.overrides), [])
        for agent_id in order:  # best first within each group
            agent = self.plan.agents[self.agents[agent_id].row.index]
            groups[agent.env, agent.preset_name, agent.overrides].append(agent_id)
        return [pair for members in groups.values() for pair in pbt.pairs(members, quantile, rng)]

    def _apply_exploits(self) -> None:
        """Put each recorded exploit's copy in place that is not yet (`pbt.copy_checkpoint`), and
        record it applied; a copy that cannot be made fails its agent (one line saying why)."""
        for exploits in self.lineage.values():
            for exploit in exploits:
                if exploit.applied:
                    continue
                jobs = RunDir(self.run_dir)
                source = jobs.job(exploit.source).checkpoints / exploit.checkpoint
                replaced = source.parent / pbt.REPLACED_DIR / exploit.checkpoint  # copied by an earlier exploit
                try:
                    pbt.copy_checkpoint(source if source.is_dir() else replaced, jobs.job(exploit.agent).checkpoints)
                except OSError as exc:
                    error = f"could not copy {exploit.source}'s checkpoint {exploit.checkpoint}: {exc}"
                    self.store.fail(exploit.agent, exploit.tier + 1, error)
                    self.agents[exploit.agent].status = "failed"
                    self._notice(f"{exploit.agent} failed in tier {exploit.tier + 1}: {error}")
                self.store.applied(exploit.agent, exploit.tier)
                exploits[exploits.index(exploit)] = dataclasses.replace(exploit, applied=True)

    def _fill_slots(self) -> None:
        sup = self.supervisor
        free = sup.slots - sum(1 for j in sup.jobs.values() if j.state.holds_slot) - len(sup.queue)
        if free <= 0 or sup.interrupted:
            return
        promoted = sorted((a for a in self.agents.values() if a.status == "training" and not a.handed),
                          key=lambda a: (-a.tier, a.row.index))  # fmt: skip
        for agent in promoted[:free]:
            self._hand(agent)
            free -= 1
        while free > 0 and self._waiting:
            agent = self.agents[self._waiting.popleft()]
            if not self._drawn(agent):
                continue  # its draw's values were refused: it failed, with the rest of its draw
            self.store.start(agent.row.id, 0)
            agent.tier, agent.status = 0, "training"
            self._hand(agent)
            free -= 1

    def _drawn(self, agent: _Agent) -> bool:
        """Make the agent's draw if it is not made yet (`cockpit.core.fleet.search`): ask the
        study, record the values in fleet.db with every agent of the draw, each with its grid pairs
        and the drawn ones as overrides and a preset file with them. False when a preset of the draw
        refuses its values together (each value alone was checked at its extremes up front, not
        every combination: n_envs x n_steps with no divisor >= 2 at or below the batch size, say):
        the draw's agents then fail in tier 0 with the preset's message, and its trial is told FAIL."""
        draw = self.plan.agents[agent.row.index].draw
        if self.search is None or draw is None or draw in self._draws:
            return agent.status != "failed"
        trial, values = self.search.draw(draw)
        changed: list[tuple[str, str, dict[str, Any]]] = []
        refused: str | None = None
        for agent_id in self._draw_agents[draw]:
            member = self.agents[agent_id]
            planned = self.plan.agents[member.row.index]
            base = planned.unsearched or planned.preset
            pairs = (*planned.overrides, *sorted(values.items()))
            try:
                drawn = dataclasses.replace(planned, preset=with_values(base, values), overrides=pairs)
            except PresetError as exc:
                refused = refused or f"draw {draw} ({overrides_text(values)}) refused: {exc}"
                drawn = dataclasses.replace(planned, overrides=pairs)  # recorded; never trained
            changed.append((agent_id, _preset_arg(drawn, self.run_dir), dict(drawn.overrides)))
        self.store.record_draw(draw, trial, values, changed, refused=refused)
        for agent_id, preset_arg, overrides in changed:
            member = self.agents[agent_id]
            member.preset_arg = preset_arg
            member.row = dataclasses.replace(member.row, preset=preset_arg, overrides=overrides)
        self._draws[draw] = trial
        self._untold.add(draw)
        if refused is None:
            self._notice(f"draw {draw}: " + overrides_text(values))
            return True
        for agent_id in self._draw_agents[draw]:
            member = self.agents[agent_id]
            member.tier, member.status = 0, "failed"
            member.row = dataclasses.replace(member.row, tier=0, status="failed", error=refused)
            if agent_id in self._waiting:
                self._waiting.remove(agent_id)
        self._notice(refused)
        return False

    def _tell(self) -> None:
        """Tell the study each tier a draw's agents are done with (`cockpit.core.fleet.search`): once
        none of them waits or trains in it or below. A draw at rest leaves `_untold` until one of
        its agents is promoted again (`_stir`)."""
        if self.search is None:
            return
        last = len(self.plan.tiers) - 1
        for draw in sorted(self._untold):
            members = [self.agents[agent_id] for agent_id in self._draw_agents[draw]]
            if any(a.status == "waiting" for a in members):
                continue
            training = [a.tier for a in members if a.status == "training"]
            below = min(training, default=max(a.tier for a in members) + 1)  # the tiers before it are done
            ids = {a.row.id for a in members}
            for tier in range(below):
                if self.search.observed(draw, tier) or (tier and self._exploited(members, tier)):
                    continue
                scores = {t: [r.score for r in self._results[t] if r.agent in ids] for t in range(tier + 1)}
                self.search.tell(draw, self._draws[draw], verdict(tier, scores, last))
            if not training:
                self._untold.discard(draw)

    def _exploited(self, members: list[_Agent], tier: int) -> bool:
        """True when one of `members` copied another agent's checkpoint (pbt) before `tier`: from
        then on its values are not its draw's."""
        return any(e.tier < tier for a in members for e in self.lineage.get(a.row.id, ()))

    def _stir(self, agent_ids: Iterable[str]) -> None:
        """The draws of agents promoted to a new tier have a tier to tell again (`_tell`)."""
        if self.search is None:
            return
        draws = (self.plan.agents[self.agents[agent_id].row.index].draw for agent_id in agent_ids)
        self._untold |= {draw for draw in draws if draw is not None}

    def _hand(self, agent: _Agent) -> None:
        tier = self.plan.tiers[agent.tier]
        job = self.supervisor.jobs.get(agent.row.id)
        if job is None:
            self._job(agent, queued=True)
        elif job.state.terminal:
            # A pbt exploit changed its preset: the worker it starts now resumes under the new one.
            job.preset_arg, job.overrides = agent.preset_arg, override_pairs(agent.row.overrides)
            self.supervisor.extend(job.id, tier.timesteps or 0, episodes=tier.episodes)
        else:  # restored in an earlier session's tier, still queued
            job.target, job.target_episodes = tier.timesteps or 0, tier.episodes
            if job.id not in self.supervisor.queue:
                self.supervisor.queue.append(job.id)
        agent.handed = True

    def _job(self, agent: _Agent, *, queued: bool) -> Job:
        row = agent.row
        tier = self.plan.tiers[max(agent.tier, 0)]
        # A tier in episodes: the worker stops at the rollout boundary after its agent's whole
        # episodes reach the target, counted across tiers (a checkpoint keeps the count).
        # The views show the preset the plan named and the agent's overrides, not the file written for them.
        return self.supervisor.add_job(row.id, row.seed, tier.timesteps or 0, preset_arg=agent.preset_arg, env=row.env,
                                       eval_episodes=self.plan.score_episodes, queued=queued,
                                       episodes=tier.episodes, preset_name=self.plan.agents[row.index].preset.name,
                                       overrides=override_pairs(row.overrides))  # fmt: skip

    def _collect(self, agent: _Agent, result: Result) -> None:
        """Copy the agent's final model into models/ and rewrite models.toml."""
        checkpoints = RunDir(self.run_dir).job(agent.row.id).checkpoints
        found = sorted((p for p in checkpoints.glob("step-*-*") if p.is_dir()),
                       key=lambda p: tuple(int(x) for x in p.name.split("-")[1:]))  # fmt: skip
        if not found:
            self._notice(f"{agent.row.id}: no checkpoint to collect its model from")
            return
        newest = found[-1]
        directory = self.run_dir / MODELS_DIR
        directory.mkdir(exist_ok=True)
        digest = copy_atomic(newest / "model.zip", directory / f"{agent.row.id}.zip")
        vecnorm = newest / "vecnormalize.pkl"
        vn_name = vn_digest = None
        if vecnorm.is_file():
            vn_name = f"{agent.row.id}.vecnormalize.pkl"
            vn_digest = copy_atomic(vecnorm, directory / vn_name)
        row = agent.row
        preset = self.plan.agents[row.index].preset.name
        self._models[row.id] = ModelEntry(row.id, f"{row.id}.zip", digest, row.env, preset, row.seed, result.score,
                                          result.steps, row.overrides, vn_name, vn_digest)  # fmt: skip
        order = {r.agent: i for i, r in enumerate(ranked(self._results[result.tier]))}
        entries = sorted(self._models.values(), key=lambda e: order.get(e.agent, math.inf))
        write_manifest(self.run_dir, self.plan.name, entries)

    def close(self) -> None:
        """Close fleet.db (its WAL is checkpointed into it)."""
        self.store.close()

    def _notice(self, line: str) -> None:
        self.notices = [*self.notices[-(NOTICES_KEPT - 1) :], line]
        self.notice_count += 1

    # ----- the view -----

    @property
    def done(self) -> bool:
        """Every agent is resolved: failed, culled, or scored in the last tier."""
        return not self.pending() and all(a.status != "training" for a in self.agents.values())

    def rate_sps(self, live_sps: float | None, elapsed_s: float) -> float | None:
        """The fleet's measured speed: the steps its agents trained in this session per second of
        it, start-ups and tier boundaries included (what the rest of the fleet will pay too); the
        live throughput until a minute has passed."""
        trained = sum(j.steps - j.steps_at_first_start for j in self.supervisor.jobs.values()
                      if j.steps_at_first_start is not None)  # fmt: skip
        if elapsed_s >= 60 and trained > 0:
            return trained / elapsed_s
        return live_sps

    def _episode_lengths(self) -> list[tuple[int, float]]:
        """(tier, measured episode length) of every agent whose worker has reported one."""
        return [(a.tier, j.ep_len_mean) for a in self.agents.values()
                if (j := self.supervisor.jobs.get(a.row.id)) is not None and j.ep_len_mean]  # fmt: skip

    def view(self, live_sps: float | None, elapsed_s: float) -> FleetView:
        """The fleet now; ETAs at its measured rate (`rate_sps`), cost at the rate in dollars. A
        plan in episodes converts the episodes left into steps at the measured episode lengths
        (each running agent's own, `_episode_steps` for the rest), updated as they change."""
        live_sps = self.rate_sps(live_sps, elapsed_s)
        sup = self.supervisor
        planned = self.plan.funnel()
        last = len(self.plan.tiers) - 1
        tiers = []
        steps_left: float | None = 0.0
        eta_known = live_sps is not None and live_sps > 0
        in_episodes = self.plan.unit == "episodes"
        lengths = self._episode_lengths() if in_episodes else []  # once a view, not once a tier
        for i, tier in enumerate(self.plan.tiers):
            entered = self._entered(i)
            running = sum(1 for a in entered if a.tier == i and (j := sup.jobs.get(a.row.id)) and j.state.live)
            finished = len(self._results[i])
            failed = sum(1 for a in entered if a.tier == i and a.status == "failed")
            promoted = len(self._promoted[i])
            # The last tier culls no one: its finished agents are the fleet's result.
            culled = finished - promoted if i < last and (self._tier_complete(i) or self.done) else 0
            before = self.plan.tiers[i - 1].target if i else 0
            mean_length = _episode_steps(lengths, i) if in_episodes else 1.0
            # Steps this tier still needs: its unfinished entrants' remainders, and the planned rest.
            todo = max(planned[i], len(entered)) - finished - failed
            for a in entered:
                if a.tier == i and a.status == "training" and (j := sup.jobs.get(a.row.id)) is not None:
                    todo -= 1
                    done = (j.episodes or 0) if in_episodes else j.steps
                    per = (j.ep_len_mean or mean_length) if in_episodes else 1.0
                    steps_left = _add(steps_left, max(0, tier.target - max(done, before)), per)
            steps_left = _add(steps_left, max(0, todo) * (tier.target - before), mean_length)
            eta = None if steps_left is None else \
                steps_left / live_sps if eta_known and live_sps else (0.0 if steps_left == 0 else None)  # fmt: skip
            tiers.append(TierView(i, tier.timesteps, planned[i], len(entered), running, finished, promoted, culled,
                                  failed, eta, tier.episodes))  # fmt: skip
        best: dict[str, Result] = {}
        for results in self._results.values():
            for r in results:
                if r.agent not in best or r.tier > best[r.agent].tier:
                    best[r.agent] = r
        top = sorted(best.values(), key=lambda r: (-r.tier, *rank_key(r)))[:LEADERS]
        rows = [self.agents[r.agent].row for r in top]
        leaders = tuple(
            LeaderView(r.agent, row.env, self.plan.agents[row.index].preset.name, overrides_text(row.overrides), r.seed,
                       r.tier, r.steps, r.score, lineage_text(self.lineage.get(r.agent, [])))
            for r, row in zip(top, rows, strict=True)
        )  # fmt: skip
        eta_s = tiers[-1].eta_s
        spent = elapsed_s / 3600 * self.rate if self.rate is not None else None
        projected = spent + eta_s / 3600 * self.rate if spent is not None and eta_s is not None and self.rate else None
        return FleetView(self.plan.name, self.plan.promotion, len(self.agents), tuple(tiers), leaders, eta_s,
                         self.rate, spent, projected, tuple(self.notices), self.notice_count,
                         search=self._search_view())  # fmt: skip

    def results(self) -> list[Result]:
        """Every score recorded, each at the fleet clock's time of its harvest."""
        return [r for tier in self._results.values() for r in tier]

    def _search_view(self) -> SearchView | None:
        """The search so far (`SearchView`), None without `[agents.search]`. The best agents whose
        values a range line gives are the `SEARCH_TOP` best by their latest score."""
        space = self.plan.search
        if space is None:
            return None
        results = self.results()
        key = (len(results), len(self._draws), sum(len(e) for e in self.lineage.values()))
        if self._search_cache is not None and self._search_cache[0] == key:
            return self._search_cache[1]
        view = self._build_search_view(space, results)
        self._search_cache = (key, view)
        return view

    def _build_search_view(self, space: SearchSpace, results: list[Result]) -> SearchView:
        points = search_progress(results)
        best = max(points, key=lambda p: (p.score, -p.steps_so_far)) if points else None
        first = next((p for p in points if p.best_so_far == best.score), None) if best else None
        latest: dict[str, Result] = {}
        for r in results:
            if r.agent not in latest or r.tier > latest[r.agent].tier:
                latest[r.agent] = r
        top = [self.agents[r.agent].row.overrides for r in sorted(latest.values(), key=rank_key)[:SEARCH_TOP]]
        drawn = [a.row.overrides for a in self.agents.values() if self.plan.agents[a.row.index].draw in self._draws]
        ranges = tuple(_range_line(key, [o[key] for o in drawn if key in o], [o[key] for o in top if key in o])
                       for key in space.keys)  # fmt: skip
        values = self.agents[best.agent].row.overrides if best else {}
        return SearchView(space.sampler, space.samples, len(self._draws), best.score if best else None,
                          best.agent if best else None,
                          overrides_text({k: v for k, v in values.items() if k in space.keys}),
                          first.steps_so_far if first else None, ranges)  # fmt: skip


FleetFactory = Callable[[Supervisor], FleetRun]


def _range_line(key: str, drawn: list[Any], top: list[Any]) -> str:
    """`key: drawn LOW..HIGH, the best N at LOW..HIGH` (a choice key lists its values instead)."""

    def span(values: list[Any]) -> str:
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            return f"{pbt.short(min(values))}..{pbt.short(max(values))}"
        return ", ".join(dict.fromkeys(str(v) for v in values))

    if not drawn:
        return f"{key}: nothing drawn yet"
    line = f"{key}: drawn {span(drawn)}"
    return f"{line}, the best {len(top)} at {span(top)}" if top else line


def _episode_steps(lengths: list[tuple[int, float]], tier: int) -> float | None:
    """Steps per episode to project a plan in episodes with: the mean of the measured episode
    `lengths` (tier, length) of the agents now in `tier`, else of all measured so far (episodes grow
    as agents learn: those in the tier are the nearest measure); None before any is measured."""
    chosen = [n for t, n in lengths if t == tier] or [n for _, n in lengths]
    return sum(chosen) / len(chosen) if chosen else None


def _add(steps: float | None, amount: float, steps_each: float | None) -> float | None:
    """`steps` plus `amount` (steps or episodes) at `steps_each`; unknown once either is."""
    if steps is None or not amount:
        return steps
    return None if steps_each is None else steps + amount * steps_each


def _reached(evaluation: EvaluatedEvent | None, tier: Tier) -> bool:
    """True when `evaluation` scored the agent at the end of `tier`, not of a tier before it: at or
    past the tier's steps, or its whole training episodes."""
    if evaluation is None:
        return False
    if tier.episodes is not None:
        return (evaluation.trained_episodes or 0) >= tier.episodes
    return evaluation.step >= (tier.timesteps or 0)
