"""A search fleet's draws analysed for `cockpit report`: each searched key's importance, and the best
score against cost as a Pareto front.

Everything comes from fleet.db as `cockpit.core.fleet.report` reads it, never from `optuna.db`:

- **a draw's score** is its agents' mean score in the last tier any of them scored in (the draw's
  last tier); its agents culled lower down are not in that mean. In a pbt fleet an agent's scores
  after its first exploit are not the draw's (it trains another agent's checkpoint with perturbed
  values), so its last tier there is the one it exploited at, at the latest. A draw none of whose
  agents scored (a refused draw, one still in its first tier) has no score and is left out of both
  analyses. With several envs that mean mixes their raw returns, which are on different scales: the
  front is still drawn (say so), and no importance is computed;
- **its cost** is the steps its agents trained, every agent and tier (each agent's latest result:
  a promoted agent resumes, so its steps include the tiers below), and those steps in dollars at the
  fleet's measured cost per step: the run's recorded duration at the fleet's rate (`--rate`, else
  the plan's `rate_usd_per_h`: what the fleet's projection and `$ spent` price a fleet's wall time
  at) over all the steps its agents trained. Without a rate the dollars are unknown and the front is
  drawn against steps;
- **the Pareto front** holds each scored draw that no other draw beats on both: none scores as much
  or more for as little or less (and strictly better in one). Those are the draws that gave the
  most score for their dollars; every other draw has one on the front that did at least as well for
  no more;
- **importance** is Optuna's PED-ANOVA (`optuna.importance.PedAnovaImportanceEvaluator`, through
  `get_param_importances`) on a study built in memory from the scored draws (`create_trial` with the
  search space's Optuna distributions, `search.to_optuna`): how much each key's values in the best
  draws differ from its values over all of them, as shares that sum to 1. PED-ANOVA, not fANOVA:
  fANOVA fits a random forest (scikit-learn, another dependency) to the scores, which a search of a
  few dozen draws does not feed, while PED-ANOVA fits a density of each key's values among the top
  draws and one among all of them and measures how far apart they are (a Pearson divergence, in
  closed form): exactly which keys set the best apart. The top is Optuna's default 10 % of the
  draws, and at least `TOP_DRAWS`; it needs `MIN_DRAWS` scored draws and a top that does not tie
  with the rest, else one line says why there is none (no number).

Optuna is imported here lazily, in `importance` only (the module docstring of `search` says where
else); a fleet without Optuna installed gets the front and a line saying how to install it.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cockpit.contract.runrecord import RunRecord
from cockpit.contract.searchspace import SearchSpace
from cockpit.core.fleet.report import FleetSummary
from cockpit.core.fleet.search import INSTALL, to_optuna
from cockpit.core.fleet.store import Result

EVALUATOR = "PED-ANOVA"
MIN_DRAWS = 6  # scored draws below which no importance is computed
TOP_DRAWS = 2  # the fewest draws PED-ANOVA's top quantile holds
TOP_QUANTILE = 0.1  # PedAnovaImportanceEvaluator's default target_quantile
_PRIMITIVE = (type(None), bool, int, float, str)


@dataclass(frozen=True)
class DrawPoint:
    """One draw: its values, agents, the tier its score is from and that score (None: unscored),
    the steps its agents trained, those in dollars (None without a rate or a measured cost per
    step), and whether it is on the Pareto front (module docstring)."""

    draw: int
    values: dict[str, Any]
    agents: tuple[str, ...]
    tier: int | None
    score: float | None
    steps: int
    cost_usd: float | None
    pareto: bool = False

    @property
    def values_text(self) -> str:
        """Its values on one line, 4 significant digits: `gamma=0.9507, learning_rate=0.002533`."""
        return values_text(self.values)


@dataclass(frozen=True)
class SearchAnalysis:
    """A search fleet's analysis (module docstring): `importance` is each searched key's share, the
    largest first, empty with `importance_note` saying why there is none; `draws` are every draw
    made, in order; `usd_per_step` the measured cost per step (None without a rate or a duration)."""

    evaluator: str
    importance: tuple[tuple[str, float], ...]
    importance_note: str | None
    top: int  # the draws PED-ANOVA's top held (0 without an importance)
    draws: tuple[DrawPoint, ...]
    rate_usd_per_h: float | None
    usd_per_step: float | None
    envs: int = 1  # the envs the draws' agents train: with several, a score is a mean of their raw returns

    @property
    def scored(self) -> tuple[DrawPoint, ...]:
        """The draws with a score."""
        return tuple(p for p in self.draws if p.score is not None)

    @property
    def front(self) -> tuple[DrawPoint, ...]:
        """The Pareto-optimal draws, cheapest first."""
        return tuple(sorted((p for p in self.draws if p.pareto), key=lambda p: (p.steps, p.draw)))


def search_analysis(fleet: FleetSummary, record: RunRecord | None) -> SearchAnalysis | None:
    """A search fleet's analysis (`analyse`), its dollars at the cost per step `record` measured
    (unknown without one); None for a fleet without `[agents.search]`."""
    return analyse(fleet, usd_per_step(record, fleet.rate_usd_per_h))


def usd_per_step(record: RunRecord | None, rate_usd_per_h: float | None) -> float | None:
    """The fleet's measured dollars per step: the run's duration at `rate_usd_per_h` over the steps
    its jobs trained (run.toml); None without a rate, a duration or a step."""
    if record is None or rate_usd_per_h is None or not record.duration_s:
        return None
    steps = sum(job.steps for job in record.jobs)
    return record.duration_s / 3600 * rate_usd_per_h / steps if steps else None


def analyse(fleet: FleetSummary, cost_per_step: float | None) -> SearchAnalysis | None:
    """The analysis of `fleet`'s search (module docstring), None for a fleet without one; dollars at
    `cost_per_step` (`usd_per_step`), unknown when it is None."""
    search = fleet.search
    if search is None:
        return None
    by_draw: dict[int, list[str]] = {}
    for agent in fleet.agents:
        if agent.draw is not None:
            by_draw.setdefault(agent.draw, []).append(agent.id)
    steps = {agent.id: agent.steps for agent in fleet.agents}
    last = _own_results(fleet)
    points = []
    for draw, _trial, values in search.draws:
        agents = tuple(by_draw.get(draw, ()))
        scored = [last[a] for a in agents if a in last]
        tier = max((r.tier for r in scored), default=None)
        at_last = [r.score for r in scored if r.tier == tier]
        trained = sum(steps.get(a, 0) for a in agents)
        cost = trained * cost_per_step if cost_per_step is not None else None
        score = math.fsum(at_last) / len(at_last) if at_last else None
        points.append(DrawPoint(draw, values, agents, tier, score, trained, cost))
    marked = _pareto(points)
    envs = len({agent.env for agent in fleet.agents})
    shares, note, top = importance(search.space, [p for p in marked if p.score is not None], envs)
    return SearchAnalysis(EVALUATOR, shares, note, top, tuple(marked), fleet.rate_usd_per_h, cost_per_step, envs)


def _own_results(fleet: FleetSummary) -> dict[str, Result]:
    """Each agent's latest result with its draw's values: in a pbt fleet, none after the tier of
    its first exploit (module docstring)."""
    first_exploit = {a.id: min(e.tier for e in a.lineage) for a in fleet.agents if a.lineage}
    out: dict[str, Result] = {}
    for r in fleet.results:
        if r.tier > first_exploit.get(r.agent, r.tier):
            continue
        if r.agent not in out or r.tier > out[r.agent].tier:
            out[r.agent] = r
    return out


def _pareto(points: Sequence[DrawPoint]) -> list[DrawPoint]:
    """`points` with each scored one marked when no other scored one dominates it: a score as high
    or higher at a cost as low or lower, one of them strictly. The cost is dollars when every scored
    point has them, else steps (the same order: dollars are steps at one price)."""
    scored = [p for p in points if p.score is not None]
    dollars = bool(scored) and all(p.cost_usd is not None for p in scored)

    def cost(p: DrawPoint) -> float:
        return float(p.cost_usd) if dollars and p.cost_usd is not None else float(p.steps)

    def dominated(p: DrawPoint) -> bool:
        assert p.score is not None
        for q in scored:
            assert q.score is not None
            if q.score >= p.score and cost(q) <= cost(p) and (q.score > p.score or cost(q) < cost(p)):
                return True
        return False

    return [replace(p, pareto=p.score is not None and not dominated(p)) for p in points]


def top_count(n: int) -> int:
    """The draws PED-ANOVA's top quantile holds out of `n`: Optuna's 10 %, rounded up, at least
    `TOP_DRAWS`."""
    return max(TOP_DRAWS, math.ceil(TOP_QUANTILE * n))


def importance(
    space: SearchSpace | None, scored: Sequence[DrawPoint], envs: int = 1
) -> tuple[tuple[tuple[str, float], ...], str | None, int]:
    """(each key's importance share, the largest first; None or the line saying why there is none;
    the draws in the top) for the `scored` draws over `space`, whose agents train `envs` envs
    (module docstring)."""
    if envs > 1:  # raw returns of different envs are on different scales: their mean ranks nothing
        return (), f"no importance: the draws train {envs} envs, whose returns are on different scales", 0
    if space is None:
        return (), "no importance: the recorded plan's [agents.search] no longer parses", 0
    n = len(scored)
    if n < MIN_DRAWS:
        return (), f"no importance: {n} scored draw(s); PED-ANOVA needs {MIN_DRAWS} or more", 0
    top = top_count(n)
    cutoff = sorted((p.score or 0.0 for p in scored), reverse=True)[top - 1]
    if all((p.score or 0.0) >= cutoff for p in scored):
        return (), f"no importance: all {n} scored draws tie with the best {top}, so none sets the best apart", 0
    try:
        import optuna
    except ImportError:
        return (), f"no importance: Optuna, which computes it, is not installed: {INSTALL}", 0
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    distributions = to_optuna(space)
    study = optuna.create_study(direction="maximize")  # in memory: fleet.db's draws, not optuna.db's trials
    for p in scored:
        params = {key: _param(distributions[key], p.values.get(key)) for key in distributions}
        try:
            study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=p.score))
        except ValueError:  # a value outside its distribution: the draws are not this space's
            return (), f"no importance: draw {p.draw}'s values are not [agents.search]'s ({values_text(p.values)})", 0
    # Half a draw under `top`, so that Optuna's ceil(quantile x n) is `top` whatever the rounding.
    evaluator = optuna.importance.PedAnovaImportanceEvaluator(target_quantile=(top - 0.5) / n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        raw = optuna.importance.get_param_importances(study, evaluator=evaluator, normalize=False)
    total = math.fsum(raw.values())
    if total <= 0:
        return (), f"no importance: the best {top} of {n} draws' values do not differ from the rest's", top
    shares = sorted(((key, value / total) for key, value in raw.items()), key=lambda kv: (-kv[1], kv[0]))
    return tuple(shares), None, top


def _param(distribution: Any, value: Any) -> Any:
    """A draw's value as its Optuna distribution holds it: a choice that is no primitive (a list
    such as net_arch) as its JSON text, as `search.to_optuna` stores the choices."""
    if hasattr(distribution, "choices") and not isinstance(value, _PRIMITIVE):
        return json.dumps(value)
    return value


def values_text(values: Mapping[str, Any]) -> str:
    """A draw's values on one line, 4 significant digits: `gamma=0.9507, learning_rate=0.002533`."""
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(values.items()))
