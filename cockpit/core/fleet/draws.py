"""A searching fleet's draws (`[agents.search]`): asked of the studies as agents start, told as they leave.

`cockpit.core.fleet.search` holds the Optuna studies (one per env, one trial per draw in each);
this module is what a running fleet does with them. `SearchDraws.drawn` makes a draw when the fleet
feeds the draw's first agent: it asks the studies, records the values in fleet.db with every agent
of the draw (each with its grid pairs and the drawn ones as overrides, and a preset file with
them), and fails the draw's agents in tier 0 when a preset refuses the values together.
`SearchDraws.tell` reports each tier of a draw on an env once no agent of it there can score in
that tier any more, and tells the trial once none can score in any tier:

- an agent waiting, or training in a tier, can still score in that tier and every later one;
- an agent at rest (scored) in tier t can still be promoted, and score in the tiers after t, while
  tier t is open: while any agent of the fleet waits or trains in t or below. The fleet's
  promotions are made before its draws are told in each tick, so once tier t has no agent left
  waiting or training there or below, the promotions out of it are all made: sync's at once (its
  tier complete), async's (ASHA's top share of every result the tier will ever have, including the
  late promotions of agents that rested there while it filled) and pbt's (everyone goes on);
- a pbt agent that copied another's checkpoint at the end of tier t trains other values than its
  draw's from then on: its scores after t are not the draw's, and it can score nothing more for it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cockpit.contract.fleetplan import FleetPlan, with_values
from cockpit.contract.presets import PresetError
from cockpit.core.fleet.roster import Roster, Tracked, overrides_text, preset_arg
from cockpit.core.fleet.search import FleetSearch, Standing
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
        self.envs: list[str] = list(dict.fromkeys(agent.env for agent in plan.agents))  # the plan's order
        self.made: dict[int, int] = {}  # the draws made: draw -> the lead study's trial number
        self._untold: set[int] = set()  # draws made whose trials are not all told (`tell`)
        self._moves = 0  # promotions and exploits so far (`stir`): with the results, what `tell` waits on
        self._seen: tuple[int, ...] | None = None  # the fleet as the last `tell` saw it

    def load(self) -> None:
        """Open the study (a resumed fleet's own) and read the draws fleet.db holds."""
        if self.plan.search is None:
            return
        self.search = FleetSearch(self.plan.search, self.run_dir, self.plan.name, self.envs)
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
        (`FleetSearch.refuse`). TPE learns from the draws made so far as the fleet stands
        (`_standings`)."""
        draw = self.plan.agents[agent.row.index].draw
        if self.search is None or draw is None or draw in self.made:
            return agent.status != "failed"
        standings = self._standings() if self.plan.search is not None and self.plan.search.sampler == "tpe" else None
        trial, values = self.search.draw(draw, standings)
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
        self.search.refuse(draw)
        return False

    def tell(self) -> None:
        """Report and tell what the draws' agents can no longer change (module docstring): each tier
        of a draw on an env once none of its agents there can score in it, at the tier's target, the
        mean of what they scored there; the trial once none can score anywhere. Looked at again only
        when a result, a failure, a draw, a promotion or an exploit came since."""
        if self.search is None:
            return
        roster = self.roster
        seen = (len(roster.all_results()), sum(a.status == "failed" for a in roster.agents.values()),
                len(self.made), self._moves)  # fmt: skip
        if seen == self._seen:
            return
        self._seen = seen
        training = [a.tier for a in roster.agents.values() if a.status == "training"]
        open_from = 0 if roster.waiting else min(training, default=len(self.plan.tiers))  # the tiers below are closed
        scores = self._scores()
        for draw in sorted(self._untold):
            members = [roster.agents[agent_id] for agent_id in self.agents_of[draw]]
            if all((a.row.error or "").startswith(_refusal(draw)) for a in members):
                self.search.refuse(draw)  # a kill came between the record and `drawn`'s refuse
            for env in self.envs:
                self._tell_env(draw, env, [a for a in members if a.row.env == env], scores, open_from)
            if self.search.told(draw):
                self._untold.discard(draw)

    def _tell_env(
        self, draw: int, env: str, members: list[Tracked], scores: dict[str, dict[int, float]], open_from: int
    ) -> None:
        """`tell` for `draw`'s agents on `env`: its tiers that none of them can score in any more (a
        prefix of the tiers: whoever can score in a tier can score in the next), then its trial."""
        assert self.search is not None
        tiers = self.plan.tiers
        for tier, planned in enumerate(tiers):
            if any(self._can_score(a, tier, open_from) for a in members):
                return
            values = [scores[a.row.id][tier] for a in members if tier in scores.get(a.row.id, {})]
            if values:
                self.search.report(draw, env, planned.target, math.fsum(values) / len(values))
        reported = self.search.reported(draw, env)
        self.search.finish(draw, env, complete=tiers[-1].target in reported)

    def _can_score(self, agent: Tracked, tier: int, open_from: int) -> bool:
        """True while `agent` may still score in `tier` for its draw (module docstring)."""
        exploits = self.roster.lineage.get(agent.row.id)
        if exploits and tier > exploits[0].tier:
            return False  # from its first exploit on it trains another agent's values
        if agent.status == "waiting":
            return True
        if agent.status == "training":
            return agent.tier <= tier
        return agent.status == "scored" and agent.tier < tier and agent.tier >= open_from

    def _scores(self) -> dict[str, dict[int, float]]:
        """Each agent's scores by tier, those it made for its draw only (none after its first exploit)."""
        out: dict[str, dict[int, float]] = {}
        for tier, results in self.roster.results.items():
            for result in results:
                exploits = self.roster.lineage.get(result.agent)
                if not exploits or tier <= exploits[0].tier:
                    out.setdefault(result.agent, {})[tier] = result.score
        return out

    def _standings(self) -> dict[int, Standing]:
        """Each draw made as the fleet stands, on the lead env (what TPE learns from): its agents'
        mean score so far at each tier they scored in for it."""
        scores, last = self._scores(), len(self.plan.tiers) - 1
        out: dict[int, Standing] = {}
        for draw in self.made:
            members = [self.roster.agents[a] for a in self.agents_of[draw]]
            if all((a.row.error or "").startswith(_refusal(draw)) for a in members):
                out[draw] = Standing({}, refused=True)
                continue
            lead = [a for a in members if a.row.env == self.envs[0]]
            by_tier: dict[int, list[float]] = {}
            for agent in lead:
                for tier, score in scores.get(agent.row.id, {}).items():
                    by_tier.setdefault(tier, []).append(score)
            means = {tier: math.fsum(values) / len(values) for tier, values in sorted(by_tier.items())}
            failed = not means and all(a.status == "failed" for a in lead)
            out[draw] = Standing(means, last=last in means, failed=failed)
        return out

    def stir(self, agent_ids: Iterable[str]) -> None:
        """Agents were promoted, or moved on at a pbt boundary (some of them exploiting): `tell`
        looks at the draws again."""
        if self.search is None:
            return
        self._moves += 1
