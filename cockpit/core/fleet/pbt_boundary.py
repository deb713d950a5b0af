"""A pbt fleet's tier boundary (`promotion = "pbt"`): the exploits decided, recorded, then copied.

`cockpit.core.fleet.pbt` holds the rules (who exploits whom, the explore rule, the copy); this
module applies them to a running fleet's `Roster`: when a tier is complete, `PbtBoundary.cross`
ranks its scores, pairs each bottom agent with a strictly better top one within its group (env,
preset, grid overrides and searched architecture keys: a checkpoint resumes only under its own env,
network and normaliser), perturbs the values, records
the exploits with everyone's move to the next tier in one fleet.db transaction, and only then
makes the copies (`apply_exploits`, which a resumed fleet calls too: a kill between a decision and
its copy is finished before any worker starts).

With `synch = false` (`arrive`), each agent's boundary is its own: as it is scored it exploits
against its group's agents already scored there and goes on, as Ray Tune's `synch=False` does.
Their sources may have trained on by then, so each agent's checkpoint at each boundary is kept
(`pin`) until no agent can reach that boundary any more. A replay (`[pbt] schedule`, `cockpit fleet
--replay`) exploits nothing: at each boundary every agent takes the next tier's values (`_retune`).
"""

from __future__ import annotations

import dataclasses
import random
import shutil
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from cockpit.contract.checkpoint_files import newest_checkpoint, unverified
from cockpit.contract.fleetplan import FleetPlan, with_values
from cockpit.contract.presets import PresetError
from cockpit.contract.rundir import RunDir
from cockpit.contract.searchspace import ARCHITECTURE_KEYS
from cockpit.core.fleet import pbt
from cockpit.core.fleet.promotion import ranked
from cockpit.core.fleet.roster import Roster, preset_file
from cockpit.core.fleet.schedule import exploited_values
from cockpit.core.fleet.store import Exploit, FleetStore


class PbtBoundary:
    """The pbt boundaries of `plan`'s fleet in `run_dir`, recorded in `store`, applied to `roster`.
    `stir` is told the agents that moved to a new tier (their draws have a tier to tell again)."""

    def __init__(
        self, plan: FleetPlan, store: FleetStore, roster: Roster, run_dir: Path, stir: Callable[[Iterable[str]], None]
    ) -> None:
        self.plan = plan
        self.store = store
        self.roster = roster
        self.run_dir = run_dir
        self.stir = stir
        self._unpinned: set[int] = set()  # boundaries whose kept checkpoints are dropped for good

    def cross(self, tier: int) -> None:
        """The end of the complete pbt tier `tier` (`cockpit.core.fleet.pbt`): the exploits decided
        and recorded with everyone's move to the next tier in one transaction, then each copy made.
        An exploiter whose score is from fewer steps than `burn_in_period` keeps its own training.
        A replay (`[pbt] schedule`) exploits nothing: everyone takes the next tier's values."""
        settings = self.plan.pbt
        assert settings is not None  # parse_plan requires it for pbt
        roster = self.roster
        order = ranked(roster.results[tier])
        if settings.schedule:
            self._retune(tier, [r.agent for r in order])
            return
        scores = {r.agent: r.score for r in order}
        rng = pbt.rng_for(settings.seed, tier)
        exploits: list[Exploit] = []
        for agent_id, source_id in self._pairs([r.agent for r in order], scores, rng):
            if roster.result_of(agent_id, tier).steps < settings.burn_in_period:
                continue
            source = newest_checkpoint(RunDir(self.run_dir).job(source_id).checkpoints)
            exploit = self._exploit(agent_id, source_id, tier, scores, rng, source)
            if exploit is not None:
                exploits.append(exploit)
        everyone = [r.agent for r in order]
        self._commit(tier, everyone, exploits, decided=True)
        best = f", best {order[0].agent} {order[0].score:.1f}" if order else ""
        burn = ""
        if settings.burn_in_period and any(r.steps < settings.burn_in_period for r in order):
            burn = f" (no exploit before step {settings.burn_in_period:,}: the burn-in)"
        roster.notice(
            f"tier {tier} done: {len(order)} scored, all go on, {len(exploits)} exploited a top agent{burn}{best}"
        )

    def arrive(self, tier: int, agent_id: str) -> None:
        """`agent_id` scored at the end of tier `tier` of an asynchronous pbt fleet (`synch =
        false`): it exploits now or never at this boundary, against its group's agents already scored
        there (`pbt.source_for`), copying the source's checkpoint from the end of the tier (kept by
        `pin`, however far the source has trained since), and goes on alone."""
        settings = self.plan.pbt
        assert settings is not None
        roster = self.roster
        self.pin(agent_id, tier)  # pinned at its harvest, unless a kill came between: it has not trained on since
        mine = self._group_of(agent_id)
        order = [r for r in ranked(roster.results[tier]) if self._group_of(r.agent) == mine]
        scores = {r.agent: r.score for r in order}
        # One RNG per agent and boundary: the same plan and arrivals make the same decisions.
        rng = random.Random(f"{settings.seed}:{tier}:{agent_id}")
        exploits: list[Exploit] = []
        own = roster.result_of(agent_id, tier)
        source_id = pbt.source_for(agent_id, [r.agent for r in order], scores, settings, rng)
        if source_id is not None and own.steps >= settings.burn_in_period:
            pinned = pbt.pinned_dir(RunDir(self.run_dir).job(source_id).checkpoints, tier)
            exploit = self._exploit(agent_id, source_id, tier, scores, rng, newest_checkpoint(pinned))
            if exploit is not None:
                exploits.append(exploit)
        self._commit(tier, [agent_id], exploits, decided=False)
        if not exploits:
            place = [r.agent for r in order].index(agent_id) + 1
            burn = (
                f"; no exploit before step {settings.burn_in_period:,}: the burn-in"
                if source_id and own.steps < settings.burn_in_period
                else ""
            )
            roster.notice(f"{agent_id} goes on to tier {tier + 1} ({place} of {len(order)} scored there so far{burn})")

    def pin(self, agent_id: str, tier: int) -> None:
        """Keep `agent_id`'s checkpoint from the end of `tier` for the asynchronous exploits of the
        agents that reach that boundary after it has trained on (`pbt.pin`); a no-op for a sync
        fleet (every agent waits at the boundary) and the last tier (no boundary after it)."""
        settings = self.plan.pbt
        if settings is None or settings.synch or settings.schedule or tier >= len(self.plan.tiers) - 1:
            return
        newest = newest_checkpoint(RunDir(self.run_dir).job(agent_id).checkpoints)
        if newest is not None:
            try:
                pbt.pin(newest, tier)
            except OSError as exc:  # it is then no source at this boundary; its own training goes on
                self.roster.notice(f"{agent_id}: its tier {tier} checkpoint is not kept for exploits: {exc}")

    def drop_unreachable_pins(self) -> None:
        """Drop the checkpoints `pin` kept at each boundary no agent can reach any more. Called once
        at the end of each of the fleet's updates (after its arrivals), so a boundary whose last
        agent short of it failed instead (in its tier, in its exploit's copy, or with its draw refused), which no
        arrival follows, is dropped too, by the fleet's end at the latest. A resumed fleet drops
        again what a kill left (the removal is idempotent). A no-op but for `synch = false`."""
        settings = self.plan.pbt
        if settings is None or settings.synch or settings.schedule:
            return
        for tier in range(len(self.plan.tiers) - 1):
            if tier not in self._unpinned and self._unpin(tier):
                self._unpinned.add(tier)

    def _unpin(self, tier: int) -> bool:
        """Drop every agent's kept tier-`tier` checkpoint once no agent can still reach that boundary
        (each went past it or failed: neither comes back), and every exploit of it is copied; True
        when dropped."""
        agents = self.roster.agents.values()
        if not all(a.tier > tier or a.status == "failed" for a in agents):
            return False
        if any(not e.applied for exploits in self.roster.lineage.values() for e in exploits):
            return False
        jobs = RunDir(self.run_dir)
        for agent in agents:
            shutil.rmtree(pbt.pinned_dir(jobs.job(agent.row.id).checkpoints, tier), ignore_errors=True)
        return True

    def _exploit(
        self,
        agent_id: str,
        source_id: str,
        tier: int,
        scores: dict[str, float],
        rng: random.Random,
        newest: Path | None,
    ) -> Exploit | None:
        """`agent_id`'s exploit of `source_id`'s checkpoint `newest` at the end of `tier`, its values
        the source's explored; None (a notice says why) when that checkpoint is missing or corrupt."""
        search, settings, roster = self.plan.search, self.plan.pbt, self.roster
        assert search is not None and settings is not None  # parse_plan requires both for pbt
        row = roster.agents[agent_id].row
        if newest is None:  # cannot happen for a scored agent (its worker saves before it scores)
            roster.notice(f"{agent_id} cannot exploit {source_id}: it has no checkpoint")
            return None
        problem = unverified(newest)
        if problem is not None:  # copied, it would be thrown away by the worker, which would start from step 0
            roster.notice(f"{agent_id} cannot exploit {source_id}: {problem}")
            return None
        planned = self.plan.agents[row.index]
        base = planned.unsearched or planned.preset  # the grid's preset: a batch size rounds from its own
        old = self._values_at(source_id, tier)
        try:
            preset = with_values(base, pbt.explore(old, search, rng, settings.resample_probability))
        except PresetError as exc:  # keys checked one at a time up front; together a preset may refuse them
            roster.notice(f"{agent_id} takes {source_id}'s values unperturbed: {exc}")
            preset = with_values(base, old)
        new = {key: preset.as_dict()[key] for key in search.keys}  # as resolved (a batch size rounded)
        overrides = {**dict(planned.overrides), **row.overrides, **new}
        changes = {key: (old[key], new[key]) for key in search.keys}  # what the exploiter took, and made of it
        steps = roster.result_of(source_id, tier).steps
        return Exploit(
            agent_id,
            tier,
            source_id,
            steps,
            newest.name,
            changes,
            scores[agent_id],
            scores[source_id],
            preset=preset_file(preset, self.run_dir),
            overrides=overrides,
        )

    def _values_at(self, agent_id: str, tier: int) -> dict[str, Any]:
        """The searched values `agent_id` trained with in `tier`, what its checkpoint from the tier's
        end was trained with: its latest exploit's before that tier, else its draw's. Its values now,
        unless it exploited at that boundary or later (possible only with `synch = false`, where a
        source may have gone on, or have exploited on arriving there, before it is copied)."""
        search = self.plan.search
        assert search is not None
        row = self.roster.agents[agent_id].row
        exploits = self.roster.lineage.get(agent_id, [])
        taken = exploited_values(exploits, tier)
        if taken is not None:
            return taken
        planned = self.plan.agents[row.index]
        if not exploits or planned.draw is None:
            return pbt.current_values(search, row.overrides, planned.preset)
        _trial, drawn = self.store.draws()[planned.draw]
        return pbt.current_values(search, drawn, planned.preset)

    def _commit(
        self,
        tier: int,
        everyone: list[str],
        exploits: list[Exploit],
        *,
        decided: bool,
        retuned: Sequence[tuple[str, str, dict[str, Any]]] = (),
    ) -> None:
        """Record `exploits` (and `retuned` values) with `everyone`'s move to the next tier in one
        transaction, then the same in memory, a notice per exploit, and the copies."""
        roster = self.roster
        self.store.pbt_boundary(tier, everyone, exploits, decided=decided, retuned=retuned)
        if decided:
            roster.decided.add(tier)
        roster.promoted[tier] |= set(everyone)
        for agent_id, preset, overrides in retuned:
            agent = roster.agents[agent_id]
            agent.row = dataclasses.replace(agent.row, preset=preset, overrides=overrides)
            agent.preset_arg = preset
        for exploit in exploits:
            # An architecture key is the source's and the exploiter's alike, never changed: not news.
            perturbed = {key: change for key, change in exploit.changes.items() if key not in ARCHITECTURE_KEYS}
            agent = roster.agents[exploit.agent]
            agent.row = dataclasses.replace(agent.row, preset=exploit.preset, overrides=exploit.overrides or {})
            agent.preset_arg = exploit.preset
            roster.lineage.setdefault(exploit.agent, []).append(exploit)
            roster.notice(
                f"{exploit.agent} exploits {exploit.source} (score {exploit.source_score:.1f} > "
                f"{exploit.score:.1f}): {pbt.changes_text(perturbed)}"
            )
        for agent_id in everyone:
            agent = roster.agents[agent_id]
            agent.tier, agent.status, agent.handed = tier + 1, "training", False
        self.stir(everyone)
        self.apply_exploits()

    def _retune(self, tier: int, everyone: list[str]) -> None:
        """A replay's boundary (`[pbt] schedule`): every agent goes on with the next tier's values
        set on its own checkpoint, nobody copies anything."""
        settings = self.plan.pbt
        assert settings is not None
        values = dict(settings.schedule[tier + 1])
        retuned = []
        for agent_id in everyone:
            row = self.roster.agents[agent_id].row
            planned = self.plan.agents[row.index]
            preset = with_values(planned.unsearched or planned.preset, values)  # checked up front, per tier
            overrides = {**dict(planned.overrides), **values}
            retuned.append((agent_id, preset_file(preset, self.run_dir), overrides))
            changes = {key: (row.overrides.get(key), v) for key, v in values.items() if row.overrides.get(key) != v}
            said = pbt.changes_text(changes) or "the same values"
            self.roster.notice(f"{agent_id} trains tier {tier + 1} as its schedule says: {said}")
        self._commit(tier, everyone, [], decided=True, retuned=retuned)
        self.roster.notice(f"tier {tier} done: {len(everyone)} scored, all go on with tier {tier + 1}'s values")

    def _group_of(self, agent_id: str) -> tuple[Any, ...]:
        """Whom `agent_id` may pair with: env, preset, grid overrides and the values of the searched
        architecture keys (a checkpoint resumes only under its own env, network and normaliser)."""
        search = self.plan.search
        assert search is not None
        row = self.roster.agents[agent_id].row
        agent = self.plan.agents[row.index]
        values = pbt.current_values(search, row.overrides, agent.preset)
        fixed = tuple(repr(values[key]) for key in search.keys if key in ARCHITECTURE_KEYS)
        return (agent.env, agent.preset_name, agent.overrides, fixed)

    def _pairs(self, order: list[str], scores: dict[str, float], rng: random.Random) -> list[tuple[str, str]]:
        """`pbt.pairs` within each group of agents (`_group_of`), the groups in order of their
        first agent in the matrix."""
        settings = self.plan.pbt
        assert settings is not None
        agents = self.roster.agents
        groups: dict[tuple[Any, ...], list[str]] = {}
        for agent_id in sorted(order, key=lambda a: agents[a].row.index):
            groups.setdefault(self._group_of(agent_id), [])
        for agent_id in order:  # best first within each group
            groups[self._group_of(agent_id)].append(agent_id)
        return [pair for members in groups.values() for pair in pbt.pairs(members, scores, settings, rng)]

    def apply_exploits(self) -> None:
        """Put each recorded exploit's copy in place that is not yet (`pbt.copy_checkpoint`), and
        record it applied; a copy that cannot be made fails its agent (one line saying why)."""
        for exploits in self.roster.lineage.values():
            for exploit in exploits:
                if exploit.applied:
                    continue
                jobs = RunDir(self.run_dir)
                theirs = jobs.job(exploit.source).checkpoints
                places = (
                    pbt.pinned_dir(theirs, exploit.tier),  # an asynchronous exploit's: kept at the boundary
                    theirs,
                    theirs / pbt.REPLACED_DIR,  # set aside by an exploit of the source's own
                )
                found = [place / exploit.checkpoint for place in places]
                source = next((path for path in found if path.is_dir()), found[1])
                try:
                    pbt.copy_checkpoint(source, jobs.job(exploit.agent).checkpoints)
                except (OSError, ValueError) as exc:
                    error = f"could not copy {exploit.source}'s checkpoint {exploit.checkpoint}: {exc}"
                    self.store.fail(exploit.agent, exploit.tier + 1, error)
                    self.roster.agents[exploit.agent].status = "failed"
                    self.roster.notice(f"{exploit.agent} failed in tier {exploit.tier + 1}: {error}")
                self.store.applied(exploit.agent, exploit.tier)
                exploits[exploits.index(exploit)] = dataclasses.replace(exploit, applied=True)
