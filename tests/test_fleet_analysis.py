"""A search fleet's analysis (`cockpit.core.fleet.analysis`): each draw's score and cost from
fleet.db, the Pareto front, and each key's importance by Optuna's PED-ANOVA.

The fleets are written through FleetStore as a running fleet writes them (the plan, each draw with
its agents' values, each tier's results and promotions) beside the golden run's run.toml, and read
back through `fleet_summary`, as `cockpit report` reads them.
"""

from __future__ import annotations

import json
import math
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cockpit.contract.fleetplan import parse_plan
from cockpit.contract.runrecord import read
from cockpit.contract.toml import tomllib
from cockpit.core.fleet.analysis import MIN_DRAWS, analyse, top_count, usd_per_step
from cockpit.core.fleet.promotion import sync_promotions
from cockpit.core.fleet.report import fleet_summary
from cockpit.core.fleet.store import Exploit, FleetStore
from tests.test_commands_report_json import GOLDEN_RUN

SEARCH_PLAN = """
name = "searched"
jobs = 2
promotion = "{promotion}"
rate_usd_per_h = 3.6
[agents]
env = {envs}
preset = "cartpole"
seeds = {seeds}
[agents.search]
samples = {draws}
learning_rate = {{ loguniform = [1e-4, 1e-2] }}
gamma = {{ uniform = [0.9, 0.999] }}
net_arch = {{ choice = [[64, 64], [128, 128]] }}
[[tiers]]
timesteps = 1024
{promote}
[[tiers]]
timesteps = 4096
"""

Score = Callable[[dict[str, Any], int, int], float]  # a draw's values, the agent's seed, the tier


def lr_decides(values: dict[str, Any], seed: int, tier: int) -> float:
    """A score set by the learning rate alone: highest at 1e-3, falling a decade either side."""
    return round(400.0 * max(0.0, 1.0 - abs(math.log10(values["learning_rate"]) + 3.0)) + 10.0 * tier + seed, 3)


def search_fleet(
    run_dir: Path,
    score: Score = lr_decides,
    *,
    draws: int = 8,
    seeds: int = 1,
    promotion: str = "sync",
    scored: int | None = None,
    envs: tuple[str, ...] = ("CartPole-v1",),
) -> Path:
    """A search fleet of `draws` draws x `seeds` seeds in `run_dir` (the golden run's run.toml):
    every draw made with seeded random values, its agents scored `score` in tier 0 (the first
    `scored` draws' only, when given), half of them promoted (sync) and scored in tier 1."""
    shutil.copytree(GOLDEN_RUN, run_dir)
    promote = "promote = 0.5" if promotion == "sync" else ""
    text = SEARCH_PLAN.format(promotion=promotion, seeds=seeds, draws=draws, promote=promote, envs=json.dumps(envs))
    plan = parse_plan(tomllib.loads(text), "search.toml")
    store = FleetStore.in_run_dir(run_dir)
    store.create(text, "search.toml", [(a.id, a.index, a.env, a.preset_name, dict(a.overrides), a.seed)
                                       for a in plan.agents])  # fmt: skip
    rng = random.Random(7)
    drawn: dict[int, dict[str, Any]] = {}
    for draw in range(draws):
        values = {"gamma": rng.uniform(0.9, 0.999), "learning_rate": 10 ** rng.uniform(-4, -2),
                  "net_arch": rng.choice([[64, 64], [128, 128]])}  # fmt: skip
        drawn[draw] = values
        store.record_draw(draw, draw, values, [(a.id, "cartpole", values) for a in plan.agents if a.draw == draw])
    agents = [a for a in plan.agents if scored is None or (a.draw or 0) < scored]
    for agent in agents:
        store.start(agent.id, 0)
        store.record(agent.id, 0, steps=1024, score=score(drawn[agent.draw or 0], agent.seed, 0), score_std=1.0,
                     train_return=1.0)  # fmt: skip
    if promotion == "sync":
        promoted = sync_promotions(store.results(0), plan.funnel()[1])
        store.promote(promoted, 0, decided=True)
        for agent in plan.agents:
            if agent.id in promoted:
                store.record(agent.id, 1, steps=4096, score=score(drawn[agent.draw or 0], agent.seed, 1),
                             score_std=1.0, train_return=1.0)  # fmt: skip
    store.close()
    return run_dir


def analysed(run_dir: Path) -> Any:
    fleet = fleet_summary(run_dir)
    assert fleet is not None
    analysis = analyse(fleet, usd_per_step(read(run_dir), fleet.rate_usd_per_h))
    assert analysis is not None
    return analysis


def test_a_draws_score_is_its_agents_mean_in_its_last_tier_and_its_cost_every_agents_steps(tmp_path: Path) -> None:
    # Seed 1 outscores seed 0 everywhere: each draw's seed 1 goes on to tier 1 and its seed 0 is culled.
    run_dir = search_fleet(tmp_path / "run", lambda v, seed, tier: lr_decides(v, seed, tier) + 1000.0 * seed, draws=4,
                           seeds=2)  # fmt: skip
    fleet = fleet_summary(run_dir)
    assert fleet is not None
    analysis = analysed(run_dir)
    results = {(r.agent, r.tier): r for r in fleet.results}
    record = read(run_dir)
    per_step = (record.duration_s or 0) / 3600 * 3.6 / sum(job.steps for job in record.jobs)
    assert analysis.usd_per_step == pytest.approx(per_step) and analysis.rate_usd_per_h == 3.6
    for point in analysis.draws:
        agents = [f"a{2 * point.draw:04d}", f"a{2 * point.draw + 1:04d}"]  # draw-major, 2 seeds a draw
        assert point.agents == tuple(agents)
        last = max(tier for agent in agents for tier in (0, 1) if (agent, tier) in results)
        at_last = [results[(agent, last)].score for agent in agents if (agent, last) in results]
        assert point.tier == last and point.score == pytest.approx(sum(at_last) / len(at_last))
        assert last == 1 and len(at_last) == 1  # the culled seed is not in the mean
        steps = sum(max(results[(a, t)].steps for t in (0, 1) if (a, t) in results) for a in agents)
        assert point.steps == steps == 1024 + 4096 and point.cost_usd == pytest.approx(steps * per_step)


def test_the_pareto_front_is_every_draw_no_other_beats_on_score_and_cost(tmp_path: Path) -> None:
    run_dir = search_fleet(tmp_path / "run", draws=8)
    analysis = analysed(run_dir)
    scored = analysis.scored
    assert len(scored) == 8
    for p in scored:
        beaten = any(q.score >= p.score and q.steps <= p.steps and (q.score > p.score or q.steps < p.steps)
                     for q in scored)  # fmt: skip
        assert p.pareto == (not beaten), p
    # Here: the best of tier 0 (cheapest) and the best of tier 1.
    front = analysis.front
    assert [p.tier for p in front] == [0, 1]
    assert front[0].score == max(p.score for p in scored if p.tier == 0)
    assert front[1].score == max(p.score for p in scored)


def test_importance_ranks_the_key_that_decides_the_score_first(tmp_path: Path) -> None:
    analysis = analysed(search_fleet(tmp_path / "run", draws=30))
    assert analysis.importance_note is None and analysis.evaluator == "PED-ANOVA"
    assert analysis.top == top_count(30) == 3
    shares = dict(analysis.importance)
    assert set(shares) == {"learning_rate", "gamma", "net_arch"}
    assert sum(shares.values()) == pytest.approx(1.0)
    assert analysis.importance[0][0] == "learning_rate" and shares["learning_rate"] > 0.5, shares


def test_too_few_scored_draws_give_one_line_and_no_number(tmp_path: Path) -> None:
    analysis = analysed(search_fleet(tmp_path / "run", draws=8, scored=MIN_DRAWS - 1))
    assert analysis.importance == () and analysis.top == 0
    assert (
        analysis.importance_note
        == f"no importance: {MIN_DRAWS - 1} scored draw(s); PED-ANOVA needs {MIN_DRAWS} or more"
    )
    assert len(analysis.scored) == MIN_DRAWS - 1 and [p.score for p in analysis.draws[MIN_DRAWS - 1 :]] == [None] * 3


def test_draws_that_all_tie_give_one_line_and_no_number(tmp_path: Path) -> None:
    analysis = analysed(search_fleet(tmp_path / "run", lambda values, seed, tier: 500.0, draws=8))
    assert analysis.importance == ()
    assert (
        analysis.importance_note == "no importance: all 8 scored draws tie with the best 2, so none sets the best apart"
    )


def test_a_pbt_agents_scores_after_its_first_exploit_are_not_its_draws(tmp_path: Path) -> None:
    run_dir = search_fleet(tmp_path / "run", draws=4, promotion="pbt")
    store = FleetStore.in_run_dir(run_dir)
    exploit = Exploit("a0003", 0, "a0000", 1024, "step-000000001024-1", {"learning_rate": (1e-3, 1.2e-3)}, 1.0, 2.0)
    store.pbt_boundary(0, [f"a{i:04d}" for i in range(4)], [exploit])
    for i in range(4):
        store.record(f"a{i:04d}", 1, steps=4096, score=300.0 + i, score_std=1.0, train_return=1.0)
    store.close()
    by_draw = {p.draw: p for p in analysed(run_dir).draws}
    assert (by_draw[0].tier, by_draw[0].score) == (1, 300.0)
    # a0003 trained a0000's checkpoint from tier 1 on: its draw's score is its own tier 0's.
    fleet = fleet_summary(run_dir)
    assert fleet is not None
    tier0 = next(r.score for r in fleet.results if (r.agent, r.tier) == ("a0003", 0))
    assert (by_draw[3].tier, by_draw[3].score, by_draw[3].steps) == (0, tier0, 4096)


def test_the_dollars_are_at_the_rate_the_fleet_ran_at(tmp_path: Path) -> None:
    run_dir = search_fleet(tmp_path / "run", draws=4)
    store = FleetStore.in_run_dir(run_dir)
    store.set_meta("rate_usd_per_h", repr(1.8))  # `cockpit fleet --rate 1.8` over the plan's 3.6
    store.close()
    fleet = fleet_summary(run_dir)
    assert fleet is not None and fleet.rate_usd_per_h == 1.8
    record = read(run_dir)
    analysis = analysed(run_dir)
    assert analysis.usd_per_step == pytest.approx(
        (record.duration_s or 0) / 3600 * 1.8 / sum(j.steps for j in record.jobs)
    )


def test_draws_over_several_envs_give_no_importance_and_say_their_scores_mix_them(tmp_path: Path) -> None:
    analysis = analysed(search_fleet(tmp_path / "run", draws=8, envs=("CartPole-v1", "Acrobot-v1")))
    assert analysis.envs == 2 and len(analysis.scored) == 8 and analysis.importance == ()
    assert analysis.importance_note == "no importance: the draws train 2 envs, whose returns are on different scales"
    assert all(len(p.agents) == 2 for p in analysis.draws) and any(p.pareto for p in analysis.draws)
