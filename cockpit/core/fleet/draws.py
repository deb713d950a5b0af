"""A searching fleet's draws (`[agents.search]`): asked of the study as agents start, told as they rest.

`cockpit.core.fleet.search` holds the Optuna study; this module is what a running fleet does with
it. `SearchDraws.drawn` makes a draw when the fleet feeds the draw's first agent: it asks the
study, records the values in fleet.db with every agent of the draw (each with its grid pairs and
the drawn ones as overrides, and a preset file with them), and fails the draw's agents in tier 0
when a preset refuses the values together. `SearchDraws.tell` tells the study each tier a draw's
agents are done with, once none of them waits or trains in it or below; `stir` marks the draws
of promoted agents as having a tier to tell again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cockpit.contract.fleetplan import FleetPlan, with_values
from cockpit.contract.presets import PresetError
from cockpit.core.fleet.roster import Roster, Tracked, overrides_text, preset_arg
from cockpit.core.fleet.search import FleetSearch, verdict
from cockpit.core.fleet.store import FleetStore


def _refusal(draw: int) -> str:
    """How the error of each agent of a refused draw begins: `tell` knows a refusal by it after a
    resume, as fleet.db holds it."""
    return f"draw {draw} ("


class SearchDraws:
    """The draws of `plan`'s fleet in `run_dir`, recorded in `store`, applied to `roster`: with no
    `[agents.search]`, every agent counts as drawn and nothing is told. `load` opens the study."""

    def __init__(self, plan: FleetPlan, store: FleetStore, roster: Roster, run_dir: Path) -> None:
        self.plan = plan
        self.store = store
        self.roster = roster
        self.run_dir = run_dir
        self.search: FleetSearch | None = None
        self.agents_of: dict[int, list[str]] = {}  # each draw's agents
        self.made: dict[int, int] = {}  # the draws made: draw -> trial number
        self._untold: set[int] = set()  # draws made that may have a tier still to tell (`tell`)

    def load(self) -> None:
        """Open the study (a resumed fleet's own) and read the draws fleet.db holds."""
        if self.plan.search is None:
            return
        self.search = FleetSearch(self.plan.search, self.run_dir, self.plan.name)
        for agent in self.plan.agents:
            if agent.draw is not None:
                self.agents_of.setdefault(agent.draw, []).append(agent.id)
        self.made = {draw: trial for draw, (trial, _values) in self.store.draws().items()}
        self._untold = set(self.made)  # the first `tell` drops those with nothing left to tell

    def drawn(self, agent: Tracked) -> bool:
        """Make the agent's draw if it is not made yet (`cockpit.core.fleet.search`): ask the
        study, record the values in fleet.db with every agent of the draw, each with its grid pairs
        and the drawn ones as overrides and a preset file with them. False when a preset of the draw
        refuses its values together (each value alone was checked at its extremes up front, not
        every combination: n_envs x n_steps with no divisor >= 2 at or below the batch size, say):
        the draw's agents then fail in tier 0 with the preset's message, and its trial is told PRUNED
        (`FleetSearch.refuse`)."""
        draw = self.plan.agents[agent.row.index].draw
        if self.search is None or draw is None or draw in self.made:
            return agent.status != "failed"
        trial, values = self.search.draw(draw)
        changed: list[tuple[str, str, dict[str, Any]]] = []
        refused: str | None = None
        roster = self.roster
        for agent_id in self.agents_of[draw]:
            member = roster.agents[agent_id]
            planned = self.plan.agents[member.row.index]
            base = planned.unsearched or planned.preset
            pairs = (*planned.overrides, *sorted(values.items()))
            try:
                drawn = dataclasses.replace(planned, preset=with_values(base, values), overrides=pairs)
            except PresetError as exc:
                refused = refused or f"{_refusal(draw)}{overrides_text(values)}) refused: {exc}"
                drawn = dataclasses.replace(planned, overrides=pairs)  # recorded; never trained
            changed.append((agent_id, preset_arg(drawn, self.run_dir), dict(drawn.overrides)))
        self.store.record_draw(draw, trial, values, changed, refused=refused)
        for agent_id, arg, overrides in changed:
            member = roster.agents[agent_id]
            member.preset_arg = arg
            member.row = dataclasses.replace(member.row, preset=arg, overrides=overrides)
        self.made[draw] = trial
        self._untold.add(draw)
        if refused is None:
            roster.notice(f"draw {draw}: " + overrides_text(values))
            return True
        for agent_id in self.agents_of[draw]:
            member = roster.agents[agent_id]
            member.tier, member.status = 0, "failed"
            member.row = dataclasses.replace(member.row, tier=0, status="failed", error=refused)
            if agent_id in roster.waiting:
                roster.waiting.remove(agent_id)
        roster.notice(refused)
        self.search.refuse(draw, trial)
        return False

    def tell(self) -> None:
        """Tell the study each tier a draw's agents are done with (`cockpit.core.fleet.search`): once
        none of them waits or trains in it or below. A draw at rest is not looked at again until
        one of its agents is promoted again (`stir`)."""
        if self.search is None:
            return
        last = len(self.plan.tiers) - 1
        for draw in sorted(self._untold):
            members = [self.roster.agents[agent_id] for agent_id in self.agents_of[draw]]
            if any(a.status == "waiting" for a in members):
                continue
            training = [a.tier for a in members if a.status == "training"]
            below = min(training, default=max(a.tier for a in members) + 1)  # the tiers before it are done
            if all((a.row.error or "").startswith(_refusal(draw)) for a in members):
                self.search.refuse(draw, self.made[draw])  # a kill came between the record and `drawn`'s refuse
                self._untold.discard(draw)
                continue
            ids = {a.row.id for a in members}
            for tier in range(below):
                if self.search.observed(draw, tier) or (tier and self._exploited(members, tier)):
                    continue
                scores = {t: [r.score for r in self.roster.results[t] if r.agent in ids] for t in range(tier + 1)}
                self.search.tell(draw, self.made[draw], verdict(tier, scores, last))
            if not training:
                self._untold.discard(draw)

    def _exploited(self, members: list[Tracked], tier: int) -> bool:
        """True when one of `members` copied another agent's checkpoint (pbt) before `tier`: from
        then on its values are not its draw's."""
        return any(e.tier < tier for a in members for e in self.roster.lineage.get(a.row.id, ()))

    def stir(self, agent_ids: Iterable[str]) -> None:
        """The draws of agents promoted to a new tier have a tier to tell again (`tell`)."""
        if self.search is None:
            return
        draws = (self.plan.agents[self.roster.agents[agent_id].row.index].draw for agent_id in agent_ids)
        self._untold |= {draw for draw in draws if draw is not None}
