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
   perturbing its searched values (with `synch = false`, each agent as soon as it is scored). A
   promoted agent's job is queued again with the next tier's total as its target: its worker
   resumes from the job's newest checkpoint and trains only the difference;
3. **feeds** the supervisor's queue up to its free slots, promoted agents first (the highest tier
   first, the best first), then agents that have not started, in matrix order. The supervisor's
   queue never holds more than its free slots, so a promotion never waits behind 500 new agents.

Agents that finish the last tier have their final model copied to `models/` (`cockpit.contract.model_manifest`).

Durability: each of those steps is a transaction in `fleet.db`, written before the supervisor
acts on it. `FleetRun.resume` rebuilds the run from it: agents with a score stay done; agents in
a tier without one are queued again and resume from their checkpoints; an agent whose worker had
already written its `evaluated` event before the kill is scored from that event, not trained again.

`FleetRun` composes the parts that have their own modules: what it knows in memory (`roster`,
shared by all of them), a pbt tier boundary (`pbt_boundary`), the search's draws (`draws`) and the
fleet's view (`fleet_view`).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cockpit.contract.checkpoint_files import (
    MODEL_FILE,
    VECNORMALIZE_FILE,
    newest_checkpoint,
    recorded_sums,
    unverified,
)
from cockpit.contract.fleetplan import FleetPlan, PlanError, parse_plan, pbt_notes
from cockpit.contract.model_manifest import MODELS_DIR, ModelEntry, copy_atomic, read_manifest, write_manifest
from cockpit.contract.rundir import RunDir
from cockpit.contract.states import JobState
from cockpit.contract.toml import tomllib
from cockpit.core.feed.snapshot import FleetView, override_pairs
from cockpit.core.fleet.draws import SearchDraws
from cockpit.core.fleet.fleet_view import FleetViewBuilder
from cockpit.core.fleet.pbt_boundary import PbtBoundary
from cockpit.core.fleet.promotion import async_promotions, ranked, sync_promotions
from cockpit.core.fleet.roster import Roster, Tracked, preset_arg, reached
from cockpit.core.fleet.store import Exploit, FleetStore, Result, disk_full
from cockpit.core.machine.clock import Clock, SystemClock
from cockpit.core.supervise.jobs import Job
from cockpit.core.supervise.supervisor import Supervisor


class FleetRun:
    """Drives one fleet on `supervisor` (see the module docstring). Build it with `new` or `resume`."""

    def __init__(
        self,
        plan: FleetPlan,
        store: FleetStore,
        supervisor: Supervisor,
        *,
        clock: Clock | None = None,
        rate_usd_per_h: float | None = None,
    ) -> None:
        self.plan = plan
        self.store = store
        self.supervisor = supervisor
        self._db_full = False  # fleet.db refused the last tick's writes for want of space (a notice said so)
        self.clock = clock or SystemClock()
        self.rate = rate_usd_per_h if rate_usd_per_h is not None else plan.rate_usd_per_h
        self.run_dir = supervisor.run_dir
        self.roster = Roster(len(plan.tiers))
        self._models: dict[str, ModelEntry] = {}
        self._fractions = self._async_fractions()
        self.draws = SearchDraws(plan, store, self.roster, self.run_dir)  # [agents.search]
        self.boundary = PbtBoundary(plan, store, self.roster, self.run_dir, self.draws.stir)
        self._views = FleetViewBuilder(plan, self.roster, supervisor, self.draws, self.rate)
        supervisor.pending_work = self.pending
        supervisor.before_launch = self.update
        supervisor.view_limit = 2 * supervisor.slots

    @property
    def agents(self) -> dict[str, Tracked]:
        """Every agent as the fleet tracks it, by id."""
        return self.roster.agents

    @property
    def lineage(self) -> dict[str, list[Exploit]]:
        """pbt: each agent's exploits, oldest first."""
        return self.roster.lineage

    @property
    def notices(self) -> list[str]:
        """The latest notices (promotions, tier summaries, failures), the newest last."""
        return self.roster.notices

    # ----- construction -----

    @classmethod
    def new(cls, plan: FleetPlan, plan_text: str, supervisor: Supervisor, **kwargs: Any) -> FleetRun:
        """A fresh fleet in the supervisor's run dir: fleet.db records the plan and every agent."""
        run_dir = supervisor.run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        store = FleetStore.in_run_dir(run_dir)
        store.create(
            plan_text,
            str(Path(plan.source).resolve()),
            [(a.id, a.index, a.env, preset_arg(a, run_dir), dict(a.overrides), a.seed) for a in plan.agents],
        )
        fleet = cls(plan, store, supervisor, **kwargs)
        if fleet.rate is not None:
            store.set_meta("rate_usd_per_h", repr(fleet.rate))
        fleet._load()
        for note in pbt_notes(plan):  # once, as the fleet starts (a resume does not say it again)
            fleet.roster.notice(note)
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
        fleet.boundary.apply_exploits()  # a kill between a pbt decision and its copy: the copy, before any worker
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
        """The agents, results, promotions, models and draws from fleet.db and the run dir."""
        self.roster.load(self.store)
        self._models = {entry.agent: entry for entry in read_manifest(self.run_dir)}
        self.draws.load()

    def _restore(self) -> None:
        """Give the supervisor a job for every agent that started, in the state fleet.db says,
        brought up to date with the events its worker wrote."""
        sup = self.supervisor
        now = self.clock.time()
        for agent in self.roster.agents.values():
            if agent.tier < 0:
                continue
            job = self._job(agent, queued=False)
            sup.restore(job)
            agent.handed = True
            if agent.status == "scored":
                job.change_state(JobState.DONE, now)
                job.exit_reason = "done in an earlier session"
                if agent.tier == len(self.plan.tiers) - 1 and agent.row.id not in self._models:
                    self._collect(agent, self.roster.result_of(agent.row.id, agent.tier))
            elif agent.status == "failed":
                job.change_state(JobState.FAILED, now)
                job.error = agent.row.error
            elif reached(job.evaluation, self.plan.tiers[agent.tier]):
                # Scored just before the kill: record it at the next update, train nothing again.
                job.change_state(JobState.DONE, now)
                job.exit_reason = "done in an earlier session"
            else:
                agent.handed = False  # fed again, ahead of agents that have not started

    # ----- the loop -----

    def pending(self) -> bool:
        """True while the fleet has work the supervisor has not been given yet (or not harvested)."""
        if any(not a.handed and a.status == "training" for a in self.roster.agents.values()) or self.roster.waiting:
            return True
        return any(self._ended(job) is not None for job in self.supervisor.jobs.values())

    def update(self) -> None:
        """Harvest ended jobs, promote, and feed free slots (see the module docstring).

        fleet.db on a full disk is waited out as the workers' checkpoints are: each write goes to
        the store before the fleet's memory, so a write refused for want of space (`disk_full`)
        leaves both as they were, and the next tick does that work again. One notice says so."""
        try:
            for job in list(self.supervisor.jobs.values()):
                self._harvest(job)
            self._decide()
            self._fill_slots()
            self.draws.tell()
            self.boundary.drop_unreachable_pins()  # after this tick's arrivals, and a failure short of a boundary
        except sqlite3.OperationalError as exc:
            if not disk_full(exc):
                raise
            if not self._db_full:
                self.roster.notice(f"fleet.db not updated ({exc}): the fleet goes on once there is room")
            self._db_full = True
        else:
            self._db_full = False

    def _ended(self, job: Job) -> str | None:
        """'done' or 'failed' for a job whose tier ended and is not recorded yet, else None."""
        agent = self.roster.agents.get(job.id)
        if agent is None or agent.status != "training" or not agent.handed:
            return None
        if job.state is JobState.DONE:
            return "done"
        return "failed" if job.state is JobState.FAILED else None

    def _harvest(self, job: Job) -> None:
        ended = self._ended(job)
        if ended is None:
            return
        agent = self.roster.agents[job.id]
        tier = agent.tier
        evaluation = job.evaluation
        if ended == "failed" or evaluation is None or not reached(evaluation, self.plan.tiers[tier]):
            error = job.error or "its worker finished without an evaluation"
            self.store.fail(job.id, tier, error)
            agent.status = "failed"
            self.roster.notice(f"{job.id} failed in tier {tier}: {error}")
            return
        self.store.record(
            job.id,
            tier,
            steps=evaluation.step,
            score=evaluation.mean_reward,
            score_std=evaluation.std_reward,
            train_return=job.ep_rew_mean,
        )
        agent.status = "scored"
        result = Result(
            job.id,
            tier,
            evaluation.step,
            evaluation.mean_reward,
            evaluation.std_reward,
            job.ep_rew_mean,
            agent.row.seed,
            self.clock.time(),
        )
        self.roster.results[tier].append(result)
        self.boundary.pin(job.id, tier)  # pbt with synch = false: its checkpoint here, for later arrivals
        if tier == len(self.plan.tiers) - 1:
            self._collect(agent, result)

    def _decide(self) -> None:
        roster = self.roster
        last = len(self.plan.tiers) - 1
        settings = self.plan.pbt
        if settings is not None and not settings.synch and not settings.schedule:
            for tier in range(last):  # each agent's boundary its own, in the order they were scored
                for result in sorted(roster.results[tier], key=lambda r: (r.t, r.agent)):
                    agent = roster.agents[result.agent]
                    if result.agent not in roster.promoted[tier] and agent.tier == tier and agent.status == "scored":
                        self.boundary.arrive(tier, result.agent)
            return
        if self.plan.promotion in ("sync", "pbt"):
            for tier in range(last):
                if tier in roster.decided:
                    continue
                entered = roster.entered(tier)
                complete = not roster.waiting if tier == 0 else roster.tier_complete(tier - 1)
                if not complete or any(a.tier == tier and a.status == "training" for a in entered):
                    return  # later tiers wait for this one
                if self.plan.promotion == "pbt":
                    self.boundary.cross(tier)
                    continue
                quota = self.plan.tiers[tier].promoted(len(entered))
                self._promote(sync_promotions(roster.results[tier], quota), tier)
            return
        for tier in reversed(range(last)):  # the highest tier's promotions are fed first anyway
            chosen = async_promotions(roster.results[tier], self._fractions[tier], roster.promoted[tier])
            if chosen:
                self._promote(chosen, tier)

    def _promote(self, chosen: list[str], tier: int) -> None:
        roster = self.roster
        decided = self.plan.promotion == "sync"
        self.store.promote(chosen, tier, decided=decided)
        roster.promoted[tier] |= set(chosen)
        self.draws.stir(chosen)
        if decided:
            roster.decided.add(tier)
        for agent_id in chosen:
            agent = roster.agents[agent_id]
            agent.tier, agent.status, agent.handed = tier + 1, "training", False
            score = roster.result_of(agent_id, tier).score
            roster.notice(f"{agent_id} promoted to tier {tier + 1} (score {score:.1f} in tier {tier})")
        if self.plan.promotion == "sync":
            results = roster.results[tier]
            best = f", best {ranked(results)[0].agent} {ranked(results)[0].score:.1f}" if results else ""
            roster.notice(
                f"tier {tier} done: {len(results)} scored, {len(chosen)} promoted, "
                f"{len(results) - len(chosen)} culled{best}"
            )

    def _fill_slots(self) -> None:
        sup, roster = self.supervisor, self.roster
        free = sup.slots - sum(1 for j in sup.jobs.values() if j.state.holds_slot) - len(sup.queue)
        if free <= 0 or sup.interrupted:
            return
        promoted = sorted(
            (a for a in roster.agents.values() if a.status == "training" and not a.handed),
            key=lambda a: (-a.tier, a.row.index),
        )
        for agent in promoted[:free]:
            self._hand(agent)
            free -= 1
        while free > 0 and roster.waiting:
            agent = roster.agents[roster.waiting.popleft()]
            if not self.draws.drawn(agent):
                continue  # its draw's values were refused: it failed, with the rest of its draw
            try:
                self.store.start(agent.row.id, 0)
            except sqlite3.OperationalError:
                roster.waiting.appendleft(agent.row.id)  # not started: it waits for the next try
                raise
            agent.tier, agent.status = 0, "training"
            self._hand(agent)
            free -= 1

    def _hand(self, agent: Tracked) -> None:
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

    def _job(self, agent: Tracked, *, queued: bool) -> Job:
        row = agent.row
        tier = self.plan.tiers[max(agent.tier, 0)]
        # A tier in episodes: the worker stops at the rollout boundary after its agent's whole
        # episodes reach the target, counted across tiers (a checkpoint keeps the count).
        # The views show the preset the plan named and the agent's overrides, not the file written for them.
        return self.supervisor.add_job(
            row.id,
            row.seed,
            tier.timesteps or 0,
            preset_arg=agent.preset_arg,
            env=row.env,
            eval_episodes=self.plan.score_episodes,
            queued=queued,
            episodes=tier.episodes,
            preset_name=self.plan.agents[row.index].preset.name,
            overrides=override_pairs(row.overrides),
        )

    def _collect(self, agent: Tracked, result: Result) -> None:
        """Copy the agent's final model into models/ and rewrite models.toml."""
        checkpoints = RunDir(self.run_dir).job(agent.row.id).checkpoints
        newest = newest_checkpoint(checkpoints)
        if newest is None:
            self.roster.notice(f"{agent.row.id}: no checkpoint to collect its model from")
            return
        directory = self.run_dir / MODELS_DIR
        directory.mkdir(exist_ok=True)
        vn_name = vn_digest = None
        try:  # held to the sums its worker recorded, so models.toml never vouches for a corrupt file
            problem = unverified(newest)
            if problem is not None:
                raise ValueError(problem)
            sums = recorded_sums(newest)
            digest = copy_atomic(newest / MODEL_FILE, directory / f"{agent.row.id}.zip", sums[MODEL_FILE])
            if (newest / VECNORMALIZE_FILE).is_file():
                vn_name = f"{agent.row.id}.vecnormalize.pkl"
                vn_digest = copy_atomic(newest / VECNORMALIZE_FILE, directory / vn_name, sums[VECNORMALIZE_FILE])
        except ValueError as exc:
            self.roster.notice(f"{agent.row.id}: its model is not collected: {exc}")
            return
        row = agent.row
        preset = self.plan.agents[row.index].preset.name
        self._models[row.id] = ModelEntry(
            row.id,
            f"{row.id}.zip",
            digest,
            row.env,
            preset,
            row.seed,
            result.score,
            result.steps,
            row.overrides,
            vn_name,
            vn_digest,
        )
        order = {r.agent: i for i, r in enumerate(ranked(self.roster.results[result.tier]))}
        entries = sorted(self._models.values(), key=lambda e: order.get(e.agent, math.inf))
        write_manifest(self.run_dir, self.plan.name, entries)

    def close(self) -> None:
        """Close fleet.db (its WAL is checkpointed into it)."""
        self.store.close()

    # ----- the view -----

    @property
    def done(self) -> bool:
        """Every agent is resolved: failed, culled, or scored in the last tier."""
        return not self.pending() and all(a.status != "training" for a in self.roster.agents.values())

    def view(self, live_sps: float | None, elapsed_s: float) -> FleetView:
        """The fleet now (`FleetViewBuilder.view`): ETAs at its measured rate, cost at the rate in dollars."""
        return self._views.view(live_sps, elapsed_s, done=self.done)

    def results(self) -> list[Result]:
        """Every score recorded, each at the fleet clock's time of its harvest."""
        return self.roster.all_results()


FleetFactory = Callable[[Supervisor], FleetRun]
