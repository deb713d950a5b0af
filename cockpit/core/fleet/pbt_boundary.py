"""A pbt fleet's tier boundary (`promotion = "pbt"`): the exploits decided, recorded, then copied.

`cockpit.core.fleet.pbt` holds the rules (who exploits whom, the explore rule, the copy); this
module applies them to a running fleet's `Roster`: when a tier is complete, `PbtBoundary.cross`
ranks its scores, pairs each bottom agent with a strictly better top one within its group (env,
preset, grid overrides and searched architecture keys: a checkpoint resumes only under its own env,
network and normaliser), perturbs the values, records
the exploits with everyone's move to the next tier in one fleet.db transaction, and only then
makes the copies (`apply_exploits`, which a resumed fleet calls too: a kill between a decision and
its copy is finished before any worker starts).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable
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

    def cross(self, tier: int) -> None:
        """The end of the complete pbt tier `tier` (`cockpit.core.fleet.pbt`): the exploits decided
        and recorded with everyone's move to the next tier in one transaction, then each copy made."""
        settings, search = self.plan.pbt, self.plan.search
        assert settings is not None and search is not None  # parse_plan requires both for pbt
        roster = self.roster
        order = ranked(roster.results[tier])
        scores = {r.agent: r.score for r in order}
        rng = pbt.rng_for(settings.seed, tier)
        checkpoints = RunDir(self.run_dir)
        exploits: list[Exploit] = []
        for agent_id, source_id in self._pairs([r.agent for r in order], scores, rng):
            source_row, row = roster.agents[source_id].row, roster.agents[agent_id].row
            newest = newest_checkpoint(checkpoints.job(source_id).checkpoints)
            if newest is None:  # cannot happen for a scored agent (its worker saves before it scores)
                roster.notice(f"{agent_id} cannot exploit {source_id}: it has no checkpoint")
                continue
            problem = unverified(newest)
            if problem is not None:  # copied, it would be thrown away by the worker, which would start from step 0
                roster.notice(f"{agent_id} cannot exploit {source_id}: {problem}")
                continue
            planned = self.plan.agents[row.index]
            base = planned.unsearched or planned.preset  # the grid's preset: a batch size rounds from its own
            old = pbt.current_values(search, source_row.overrides, self.plan.agents[source_row.index].preset)
            try:
                preset = with_values(base, pbt.explore(old, search, rng, settings.resample_probability))
            except PresetError as exc:  # keys checked one at a time up front; together a preset may refuse them
                roster.notice(f"{agent_id} takes {source_id}'s values unperturbed: {exc}")
                preset = with_values(base, old)
            new = {key: preset.as_dict()[key] for key in search.keys}  # as resolved (a batch size rounded)
            overrides = {**dict(self.plan.agents[row.index].overrides), **row.overrides, **new}
            changes = {key: (old[key], new[key]) for key in search.keys}  # what the exploiter took, and made of it
            steps = roster.result_of(source_id, tier).steps
            exploits.append(
                Exploit(
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
            )
        everyone = [r.agent for r in order]
        self.store.pbt_boundary(tier, everyone, exploits)
        roster.decided.add(tier)
        roster.promoted[tier] |= set(everyone)
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
        best = f", best {order[0].agent} {order[0].score:.1f}" if order else ""
        roster.notice(f"tier {tier} done: {len(order)} scored, all go on, {len(exploits)} exploited a top agent{best}")

    def _pairs(self, order: list[str], scores: dict[str, float], rng: random.Random) -> list[tuple[str, str]]:
        """`pbt.pairs` within each group of agents that share env, preset, grid overrides and the
        values of their searched architecture keys (a checkpoint resumes only under its own env,
        network and normaliser), the groups in order of their first agent in the matrix."""
        settings, search = self.plan.pbt, self.plan.search
        assert settings is not None and search is not None
        agents = self.roster.agents
        fixed = tuple(key for key in search.keys if key in ARCHITECTURE_KEYS)
        groups: dict[tuple[Any, ...], list[str]] = {}

        def group_of(agent_id: str) -> tuple[Any, ...]:
            row = agents[agent_id].row
            agent = self.plan.agents[row.index]
            values = pbt.current_values(search, row.overrides, agent.preset)
            return (agent.env, agent.preset_name, agent.overrides, tuple(repr(values[key]) for key in fixed))

        for agent_id in sorted(order, key=lambda a: agents[a].row.index):
            groups.setdefault(group_of(agent_id), [])
        for agent_id in order:  # best first within each group
            groups[group_of(agent_id)].append(agent_id)
        return [pair for members in groups.values() for pair in pbt.pairs(members, scores, settings, rng)]

    def apply_exploits(self) -> None:
        """Put each recorded exploit's copy in place that is not yet (`pbt.copy_checkpoint`), and
        record it applied; a copy that cannot be made fails its agent (one line saying why)."""
        for exploits in self.roster.lineage.values():
            for exploit in exploits:
                if exploit.applied:
                    continue
                jobs = RunDir(self.run_dir)
                source = jobs.job(exploit.source).checkpoints / exploit.checkpoint
                replaced = source.parent / pbt.REPLACED_DIR / exploit.checkpoint  # copied by an earlier exploit
                try:
                    pbt.copy_checkpoint(source if source.is_dir() else replaced, jobs.job(exploit.agent).checkpoints)
                except (OSError, ValueError) as exc:
                    error = f"could not copy {exploit.source}'s checkpoint {exploit.checkpoint}: {exc}"
                    self.store.fail(exploit.agent, exploit.tier + 1, error)
                    self.roster.agents[exploit.agent].status = "failed"
                    self.roster.notice(f"{exploit.agent} failed in tier {exploit.tier + 1}: {error}")
                self.store.applied(exploit.agent, exploit.tier)
                exploits[exploits.index(exploit)] = dataclasses.replace(exploit, applied=True)
