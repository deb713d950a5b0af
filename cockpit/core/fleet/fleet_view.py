"""A running fleet as the views show it: the tier funnel, the leaderboard, ETA and cost, the search.

`FleetViewBuilder.view` builds the `FleetView` snapshot (`cockpit.core.feed.snapshot`) from the
fleet's `Roster` and its supervisor's jobs. ETAs are at the fleet's measured rate (`rate_sps`),
cost at its rate in dollars; a plan in episodes converts the episodes left into steps at the
measured episode lengths. The search's lines (`SearchView`) are rebuilt only when a result, a draw
or an exploit was added since the last view.
"""

from __future__ import annotations

from typing import Any

from cockpit.contract.fleetplan import FleetPlan
from cockpit.contract.searchspace import SearchSpace
from cockpit.core.feed.snapshot import FleetView, LeaderView, SearchView, TierView
from cockpit.core.fleet.draws import SearchDraws
from cockpit.core.fleet.promotion import rank_key
from cockpit.core.fleet.report import search_progress
from cockpit.core.fleet.roster import Roster, lineage_text, overrides_text
from cockpit.core.fleet.store import Result
from cockpit.core.supervise.supervisor import Supervisor
from cockpit.formatting import short

SEARCH_TOP = 5  # the best agents whose values the fleet screen's search lines place in each range
LEADERS = 10


class FleetViewBuilder:
    """Views of `plan`'s fleet, tracked in `roster`, whose agents are `supervisor`'s jobs and whose
    draws are `draws`; `rate` is its price in dollars an hour (None: no cost shown)."""

    def __init__(
        self, plan: FleetPlan, roster: Roster, supervisor: Supervisor, draws: SearchDraws, rate: float | None
    ) -> None:
        self.plan = plan
        self.roster = roster
        self.supervisor = supervisor
        self.draws = draws
        self.rate = rate
        # The last SearchView and what it was built from: results, draws and exploits only grow,
        # so their counts say when it is stale (it sorts every result: not once per 5 Hz tick).
        self._search_cache: tuple[tuple[int, int, int], SearchView | None] | None = None

    def rate_sps(self, live_sps: float | None, elapsed_s: float) -> float | None:
        """The fleet's measured speed: the steps its agents trained in this session per second of
        it, start-ups and tier boundaries included (what the rest of the fleet will pay too); the
        live throughput until a minute has passed."""
        trained = sum(
            j.steps - j.steps_at_first_start
            for j in self.supervisor.jobs.values()
            if j.steps_at_first_start is not None
        )
        if elapsed_s >= 60 and trained > 0:
            return trained / elapsed_s
        return live_sps

    def _episode_lengths(self) -> list[tuple[int, float]]:
        """(tier, measured episode length) of every agent whose worker has reported one."""
        return [
            (a.tier, j.ep_len_mean)
            for a in self.roster.agents.values()
            if (j := self.supervisor.jobs.get(a.row.id)) is not None and j.ep_len_mean
        ]

    def view(self, live_sps: float | None, elapsed_s: float, *, done: bool) -> FleetView:
        """The fleet now (`done`: every agent is resolved); ETAs at its measured rate (`rate_sps`),
        cost at the rate in dollars. A plan in episodes converts the episodes left into steps at
        the measured episode lengths (each running agent's own, `_episode_steps` for the rest),
        updated as they change."""
        live_sps = self.rate_sps(live_sps, elapsed_s)
        sup, roster = self.supervisor, self.roster
        planned = self.plan.funnel()
        last = len(self.plan.tiers) - 1
        tiers = []
        steps_left: float | None = 0.0
        eta_known = live_sps is not None and live_sps > 0
        in_episodes = self.plan.unit == "episodes"
        lengths = self._episode_lengths() if in_episodes else []  # once a view, not once a tier
        for i, tier in enumerate(self.plan.tiers):
            entered = roster.entered(i)
            running = sum(1 for a in entered if a.tier == i and (j := sup.jobs.get(a.row.id)) and j.state.live)
            finished = len(roster.results[i])
            failed = sum(1 for a in entered if a.tier == i and a.status == "failed")
            promoted = len(roster.promoted[i])
            # The last tier culls no one: its finished agents are the fleet's result.
            culled = finished - promoted if i < last and (roster.tier_complete(i) or done) else 0
            before = self.plan.tiers[i - 1].target if i else 0
            mean_length = _episode_steps(lengths, i) if in_episodes else 1.0
            # Steps this tier still needs: its unfinished entrants' remainders, and the planned rest.
            todo = max(planned[i], len(entered)) - finished - failed
            for a in entered:
                if a.tier == i and a.status == "training" and (j := sup.jobs.get(a.row.id)) is not None:
                    todo -= 1
                    steps_done = (j.episodes or 0) if in_episodes else j.steps
                    per = (j.ep_len_mean or mean_length) if in_episodes else 1.0
                    steps_left = _add(steps_left, max(0, tier.target - max(steps_done, before)), per)
            steps_left = _add(steps_left, max(0, todo) * (tier.target - before), mean_length)
            eta = (
                None
                if steps_left is None
                else steps_left / live_sps
                if eta_known and live_sps
                else (0.0 if steps_left == 0 else None)
            )
            tiers.append(
                TierView(
                    i,
                    tier.timesteps,
                    planned[i],
                    len(entered),
                    running,
                    finished,
                    promoted,
                    culled,
                    failed,
                    eta,
                    tier.episodes,
                )
            )
        best: dict[str, Result] = {}
        for results in roster.results.values():
            for r in results:
                if r.agent not in best or r.tier > best[r.agent].tier:
                    best[r.agent] = r
        top = sorted(best.values(), key=lambda r: (-r.tier, *rank_key(r)))[:LEADERS]
        rows = [roster.agents[r.agent].row for r in top]
        leaders = tuple(
            LeaderView(
                r.agent,
                row.env,
                self.plan.agents[row.index].preset.name,
                overrides_text(row.overrides),
                r.seed,
                r.tier,
                r.steps,
                r.score,
                lineage_text(roster.lineage.get(r.agent, [])),
            )
            for r, row in zip(top, rows, strict=True)
        )
        eta_s = tiers[-1].eta_s
        spent = elapsed_s / 3600 * self.rate if self.rate is not None else None
        projected = spent + eta_s / 3600 * self.rate if spent is not None and eta_s is not None and self.rate else None
        return FleetView(
            self.plan.name,
            self.plan.promotion,
            len(roster.agents),
            tuple(tiers),
            leaders,
            eta_s,
            self.rate,
            spent,
            projected,
            tuple(roster.notices),
            roster.notice_count,
            search=self._search_view(),
        )

    def _search_view(self) -> SearchView | None:
        """The search so far (`SearchView`), None without `[agents.search]`. The best agents whose
        values a range line gives are the `SEARCH_TOP` best by their latest score."""
        space = self.plan.search
        if space is None:
            return None
        results = self.roster.all_results()
        key = (len(results), len(self.draws.made), sum(len(e) for e in self.roster.lineage.values()))
        if self._search_cache is not None and self._search_cache[0] == key:
            return self._search_cache[1]
        view = self._build_search_view(space, results)
        self._search_cache = (key, view)
        return view

    def _build_search_view(self, space: SearchSpace, results: list[Result]) -> SearchView:
        agents = self.roster.agents
        points = search_progress(results)
        best = max(points, key=lambda p: (p.score, -p.steps_so_far)) if points else None
        first = next((p for p in points if p.best_so_far == best.score), None) if best else None
        latest: dict[str, Result] = {}
        for r in results:
            if r.agent not in latest or r.tier > latest[r.agent].tier:
                latest[r.agent] = r
        top = [agents[r.agent].row.overrides for r in sorted(latest.values(), key=rank_key)[:SEARCH_TOP]]
        drawn = [a.row.overrides for a in agents.values() if self.plan.agents[a.row.index].draw in self.draws.made]
        ranges = tuple(
            _range_line(key, [o[key] for o in drawn if key in o], [o[key] for o in top if key in o])
            for key in space.keys
        )
        values = agents[best.agent].row.overrides if best else {}
        return SearchView(
            space.sampler,
            space.samples,
            len(self.draws.made),
            best.score if best else None,
            best.agent if best else None,
            overrides_text({k: v for k, v in values.items() if k in space.keys}),
            first.steps_so_far if first else None,
            ranges,
        )


def _range_line(key: str, drawn: list[Any], top: list[Any]) -> str:
    """`key: drawn LOW..HIGH, the best N at LOW..HIGH` (a choice key lists its values instead)."""

    def span(values: list[Any]) -> str:
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            return f"{short(min(values))}..{short(max(values))}"
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
