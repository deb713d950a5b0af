"""`[agents.search]` sampled by real Optuna studies: the mapping, the resume rules, and a scripted
fleet that draws lazily, puts the values in its agents' overrides, reports each tier of a draw as
an intermediate value of its one trial and tells that trial once, when the draw leaves."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import warnings
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from cockpit.contract.fleetplan import with_values
from cockpit.contract.presets import PresetError
from cockpit.contract.searchspace import SAMPLERS, SearchSpace, parse_search
from cockpit.contract.toml import tomllib
from cockpit.core.feed.wire import decode_state, encode_state
from cockpit.core.fleet.report import search_progress
from cockpit.core.fleet.search import STUDY_DB, FleetSearch, Standing, from_optuna, study_names, to_optuna
from cockpit.core.fleet.store import AgentRow, FleetStore, Result
from cockpit.views.headless import fleet_line
from cockpit.views.tui.fleet_screen import search_lines
from tests.test_fleet_run import ScriptedFleet, by_index, first_best, plan_text

KEYS = ("learning_rate", "gamma", "n_epochs", "net_arch", "activation")
ENV = "CartPole-v1"


def space(sampler: str = "random", samples: int = 6, **extra: object) -> SearchSpace:
    raw = {"samples": samples, "sampler": sampler, "learning_rate": {"loguniform": [1e-5, 1e-3]},
           "n_epochs": {"int": [4, 30]}, "net_arch": {"choice": [[64, 64], [256, 256]]}, **extra}  # fmt: skip
    parsed, problems = parse_search(raw, preset_keys=KEYS)
    assert parsed is not None and not problems
    return parsed


def trials(path: Path, name: str = "fleet") -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{path / STUDY_DB}").get_trials()


def test_the_distributions_map_to_optunas_and_a_list_choice_comes_back_as_the_list() -> None:
    s = space(gamma={"uniform": [0.9, 0.999]}, activation={"choice": ["tanh", "relu"]})
    mapped = to_optuna(s)
    assert mapped["learning_rate"] == FloatDistribution(1e-5, 1e-3, log=True)
    assert mapped["gamma"] == FloatDistribution(0.9, 0.999)
    assert mapped["n_epochs"] == IntDistribution(4, 30)
    assert mapped["activation"] == CategoricalDistribution(("tanh", "relu"))
    assert mapped["net_arch"] == CategoricalDistribution(("[64, 64]", "[256, 256]"))
    values = from_optuna(s, {"learning_rate": 1e-4, "gamma": 0.95, "n_epochs": 7, "activation": "relu",
                             "net_arch": "[256, 256]"})  # fmt: skip
    assert values["net_arch"] == [256, 256] and values["activation"] == "relu" and values["n_epochs"] == 7


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_a_resumed_study_takes_up_each_trial_a_kill_left_for_its_draw_and_asks_none_twice(
        tmp_path: Path, sampler: str) -> None:  # fmt: skip
    first = FleetSearch(space(sampler), tmp_path, "fleet", [ENV])
    trial0, values0 = first.draw(0)  # recorded in fleet.db (by the caller)
    trial1, values1 = first.draw(1)  # killed before fleet.db recorded it
    first.studies[ENV].ask()  # an older cockpit's ask, killed before it set the draw attr
    first.studies[ENV].enqueue_trial({}, user_attrs={"draw": 2})
    partial = first.studies[ENV].ask()  # killed inside the ask, one param of three set
    partial.suggest_float("learning_rate", 1e-5, 1e-3, log=True)
    second = FleetSearch(space(sampler), tmp_path, "fleet", [ENV])
    assert second.draw(1) == (trial1, values1)  # taken up, not drawn again
    assert second.draw(2)[0] == 3
    second.studies[ENV].enqueue_trial({}, user_attrs={"draw": 3})  # killed between the trial's creation and its ask
    third = FleetSearch(space(sampler), tmp_path, "fleet", [ENV])
    assert third.draw(3)[0] == 4
    trial4, values4 = third.draw(4)
    assert trial4 == 5  # the study goes on from where it was
    told = trials(tmp_path)
    assert [t.state for t in told] == [TrialState.RUNNING] * 2 + [TrialState.FAIL] + [TrialState.RUNNING] * 3
    assert [t.user_attrs.get("draw") for t in told] == [0, 1, None, 2, 3, 4]
    assert all(len(t.params) == 3 for t in told if t.state is TrialState.RUNNING)
    assert told[3].params["learning_rate"] == partial.params["learning_rate"]  # the param set before the kill
    # A sampler seeded once would replay draw 0's values after the resume.
    assert values4 != values0 and trial0 == 0


def test_a_draw_reports_each_step_once_and_is_told_once_and_a_resumed_study_knows_both(tmp_path: Path) -> None:
    search = FleetSearch(space(), tmp_path, "fleet", [ENV])
    numbers = [search.draw(d)[0] for d in range(3)]
    search.report(0, ENV, 1000, 2.0)
    search.report(0, ENV, 1000, 9.0)  # reported already: a second value at one step is not a step
    search.report(0, ENV, 2000, 5.0)
    search.finish(0, ENV, complete=True)
    search.report(0, ENV, 4000, 7.0)  # told: nothing more
    search.report(1, ENV, 1000, 4.0)
    search.finish(2, ENV, complete=False)  # never scored
    resumed = FleetSearch(space(), tmp_path, "fleet", [ENV])
    assert [resumed.told(d) for d in range(3)] == [True, False, True]
    assert resumed.reported(0, ENV) == {1000: 2.0, 2000: 5.0} and resumed.reported(1, ENV) == {1000: 4.0}
    resumed.report(1, ENV, 1000, 8.0)
    resumed.finish(0, ENV, complete=True)
    resumed.finish(1, ENV, complete=False)
    told = trials(tmp_path)
    assert [t.number for t in told] == numbers
    assert [(t.state, t.value, t.intermediate_values) for t in told] == [
        (TrialState.COMPLETE, 5.0, {1000: 2.0, 2000: 5.0}), (TrialState.PRUNED, 4.0, {1000: 4.0}),
        (TrialState.FAIL, None, {}),
    ]  # fmt: skip


SEARCH = '[agents.search]\nsamples = 4\nsampler = "tpe"\nlearning_rate = { loguniform = [1e-5, 1e-3] }\n'


def searched_plan(promotion: str = "async", promote: float = 0.5) -> str:
    text = plan_text(2, promotion, tiers=((1000, promote), (2000, None)))
    return text.replace("[[tiers]]", SEARCH + "[[tiers]]", 1)


def test_a_scripted_fleet_draws_lazily_puts_the_values_in_overrides_and_tells_each_draw(tmp_path: Path) -> None:
    fleet = ScriptedFleet(tmp_path, searched_plan(promote=0.25), lambda a, t: 10.0, by_index)
    fleet.step()
    # Two slots, two seeds a draw: the first tick draws draw 0 alone.
    assert list(fleet.fleet.store.draws()) == [0]
    assert len(trials(tmp_path, "scripted")) == 1
    fleet.run()
    store = fleet.fleet.store
    draws = store.draws()
    assert sorted(draws) == [0, 1, 2, 3] and [trial for trial, _ in draws.values()] == [0, 1, 2, 3]
    rows = store.agents()
    for row in rows:
        draw = row.index // 2
        lr = draws[draw][1]["learning_rate"]
        assert row.overrides == {"learning_rate": lr}
        assert tomllib.loads(Path(row.preset).read_text())["learning_rate"] == lr
    # What the views show of each job: the drawn value (the supervisor keeps each job's overrides).
    for row in rows:
        assert dict(fleet.sup.jobs[row.id].overrides) == {"learning_rate": f"{row.overrides['learning_rate']:.4g}"}
    # optuna.db, opened as optuna-dashboard opens it: one trial per draw, its learning curve the
    # mean of its agents at each tier's steps, told COMPLETE at the last tier or PRUNED before it.
    assert_one_trial_per_draw(tmp_path, "scripted", store.results(), rows, (1000, 2000))
    assert {t.state for t in trials(tmp_path, "scripted")} == {TrialState.COMPLETE, TrialState.PRUNED}


def assert_one_trial_per_draw(run_dir: Path, name: str, results: list[Result], rows: list[AgentRow],
                              steps: tuple[int, ...], env: str | None = None, per_draw: int = 2) -> None:  # fmt: skip
    """`name`'s study holds one trial per draw of the fleet (its agents on `env`, every env for
    None; `per_draw` agents in a draw), each told, with the mean of its agents' scores at each
    tier's `steps` as intermediate values and its last one as its value."""
    study = trials(run_dir, name)
    members = {row.id: row.index // per_draw for row in rows if env is None or row.env == env}
    draws = sorted(set(members.values()))
    assert [t.user_attrs["draw"] for t in study] == draws
    for t in study:
        by_tier: dict[int, list[float]] = {}
        for r in results:
            if members.get(r.agent) == t.user_attrs["draw"]:
                by_tier.setdefault(steps[r.tier], []).append(r.score)
        curve = {step: pytest.approx(sum(v) / len(v)) for step, v in by_tier.items()}
        last = max(by_tier)
        state = TrialState.COMPLETE if last == steps[-1] else TrialState.PRUNED
        assert (t.state, t.intermediate_values, t.value) == (state, curve, curve[last]), t.number


def test_a_draw_promoted_at_once_stays_running_and_a_late_promotion_of_its_other_agent_is_in_its_curve(
    tmp_path: Path,
) -> None:
    # ASHA: a0001 is the top one of two at once; a0000 rests in tier 0 until the third and fourth
    # results put it in the top two, after a0001 scored tier 1. Its tier-1 score is draw 0's too.
    def score(agent: str, tier: int) -> float:
        index = int(agent[1:])
        return {0: 50.0, 1: 60.0}.get(index, 40.0 - index) + 100 * tier + (7 * index if tier else 0)

    fleet = ScriptedFleet(tmp_path, searched_plan(promote=0.5), lambda a, t: 10.0 if t == 0 else 1.0, score)
    roster = fleet.fleet.roster
    while not any(r.agent == "a0001" for r in roster.results[1]):
        fleet.step()
    assert fleet.fleet.agents["a0000"].status == "scored" and fleet.fleet.agents["a0000"].tier == 0
    (trial,) = [t for t in trials(tmp_path, "scripted") if t.user_attrs["draw"] == 0]
    # Tier 0 is the draw's for good (both scored there); tier 1 is not while a0000 may still go on.
    assert (trial.state, trial.intermediate_values) == (TrialState.RUNNING, {1000: 55.0})
    fleet.run()
    assert [r.agent for r in roster.results[1]][:2] == ["a0001", "a0000"]  # a0000 promoted late
    (trial,) = [t for t in trials(tmp_path, "scripted") if t.user_attrs["draw"] == 0]
    tier1 = (score("a0000", 1) + score("a0001", 1)) / 2
    assert (trial.state, trial.value, trial.intermediate_values) == (TrialState.COMPLETE, tier1,
                                                                     {1000: 55.0, 2000: tier1})  # fmt: skip
    assert_one_trial_per_draw(tmp_path, "scripted", fleet.fleet.store.results(), fleet.fleet.store.agents(),
                              (1000, 2000))  # fmt: skip


def test_a_random_search_draws_the_same_points_whatever_the_timing_of_its_tiers(tmp_path: Path) -> None:
    # A sampler seeded by the trial count would draw by the timing of the tells.
    plan = searched_plan(promote=0.5).replace('sampler = "tpe"', 'sampler = "random"')
    drawn = []
    for name, duration in (("even", lambda a, t: 10.0), ("quick", lambda a, t: 10.0 if t == 0 else 1.0)):
        fleet = ScriptedFleet(tmp_path / name, plan, duration, first_best)
        fleet.run()
        drawn.append({draw: values for draw, (_trial, values) in fleet.fleet.store.draws().items()})
    assert len(drawn[0]) == 4 and drawn[0] == drawn[1]


@pytest.mark.parametrize("stop_after_s", [5.0, 15.0, 25.0])
def test_a_search_fleet_rebuilt_from_fleet_db_draws_no_sample_twice(tmp_path: Path, stop_after_s: float) -> None:
    first = ScriptedFleet(tmp_path, searched_plan("sync"), lambda a, t: 10.0, by_index)
    while first.clock.t - 1_800_000_000.0 < stop_after_s:
        first.step()
    before = first.fleet.store.draws()
    first.fleet.store.close()
    second = ScriptedFleet(tmp_path, searched_plan("sync"), lambda a, t: 10.0, by_index, resume=True)
    second.run()
    after = second.fleet.store.draws()
    assert {d: after[d] for d in before} == before  # a recorded draw keeps its values
    # One trial per draw, each told once with each tier it scored in reported once.
    assert_one_trial_per_draw(tmp_path, "scripted", second.fleet.store.results(), second.fleet.store.agents(),
                              (1000, 2000))  # fmt: skip
    store = FleetStore.in_run_dir(tmp_path, read_only=True)
    assert all(json.dumps(row.overrides) != "{}" for row in store.agents())
    store.close()


def test_without_optuna_a_searching_plan_is_one_line_naming_the_install_and_its_dry_run_still_projects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from cockpit.cli import main

    monkeypatch.setitem(sys.modules, "optuna", None)  # what `import optuna` finds where it is not installed
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    plan = tmp_path / "plan.toml"
    plan.write_text(searched_plan())
    run = tmp_path / "run"
    assert main(["fleet", str(plan), "--run-dir", str(run), "--headless"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(plan) in err and "pip install 'cockpit[search]'" in err
    assert not run.exists()  # nothing started
    golden = Path(__file__).parent / "data" / "run-v1"
    assert main(["fleet", str(plan), "--dry-run", "--from", str(golden)]) == 0
    out, err = capsys.readouterr()
    assert "note:" in err and "pip install 'cockpit[search]'" in err
    assert "searching learning_rate: 4 draws by tpe (seed 0), each crossed with 2 agent(s)" in out


def test_a_drawn_rollout_rounds_the_plans_batch_size_down_not_the_midpoints(tmp_path: Path) -> None:
    text = searched_plan().replace("learning_rate = { loguniform = [1e-5, 1e-3] }", "n_steps = { int = [16, 64] }")
    fleet = ScriptedFleet(tmp_path, text, lambda a, t: 10.0, by_index)
    fleet.run()
    base = fleet.plan.agents[0].unsearched
    assert base is not None
    for row in fleet.fleet.store.agents():
        preset = tomllib.loads(Path(row.preset).read_text())
        rollout = preset["n_envs"] * row.overrides["n_steps"]
        assert preset["n_steps"] == row.overrides["n_steps"]
        assert preset["batch_size"] == max(d for d in range(1, base.batch_size + 1) if rollout % d == 0)


def test_report_json_has_the_search_and_its_draws_in_the_agents_overrides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    from cockpit.cli import main
    from cockpit.contract.fleetplan import parse_plan
    from tests.test_commands_report_json import GOLDEN_RUN, validate

    run_dir = tmp_path / "run"
    shutil.copytree(GOLDEN_RUN, run_dir)
    text = searched_plan()
    plan = parse_plan(tomllib.loads(text), "plan.toml")
    store = FleetStore.in_run_dir(run_dir)
    store.create(text, "plan.toml", [(a.id, a.index, a.env, a.preset_name, dict(a.overrides), a.seed)
                                     for a in plan.agents])  # fmt: skip
    store.record_draw(
        0, 0, {"learning_rate": 2e-4}, [(a, "cartpole", {"learning_rate": 2e-4}) for a in ("a0000", "a0001")]
    )
    store.start("a0000", 0)
    store.record("a0000", 0, steps=1000, score=50.0, score_std=1.0, train_return=20.0)
    store.close()
    assert main(["report", str(run_dir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    validate(report)
    fleet = report["fleet"]
    assert fleet["search"] == {"sampler": "tpe", "samples": 4, "seed": 0, "keys": ["learning_rate"],
                               "draws": [{"draw": 0, "trial": 0, "values": {"learning_rate": 2e-4}}]}  # fmt: skip
    agents = {agent["id"]: agent["overrides"] for agent in fleet["agents"]}
    assert agents["a0000"] == agents["a0001"] == {"learning_rate": 2e-4} and agents["a0002"] == {}
    assert fleet["leaderboard"][0]["overrides"] == {"learning_rate": 2e-4}


def test_a_draw_whose_values_a_preset_refuses_together_fails_its_agents_and_its_trial_is_pruned(tmp_path: Path) -> None:
    # Each value alone suits the preset (checked up front), and so do the midpoints (the first
    # choices); 1 x 7 with a batch of 4 has no divisor >= 2 at or below 4: those draws are refused.
    refused = "n_envs = { choice = [8, 1] }\nn_steps = { choice = [32, 7] }\nbatch_size = { choice = [64, 4] }\n"
    text = searched_plan().replace("learning_rate = { loguniform = [1e-5, 1e-3] }\n", refused)
    text = text.replace("samples = 4", "samples = 16\nseed = 3")  # a seed that draws refused points
    fleet = ScriptedFleet(tmp_path, text, lambda a, t: 10.0, by_index)
    fleet.run()
    base = fleet.plan.agents[0].unsearched
    assert base is not None
    rows = fleet.fleet.store.agents()
    told = {t.user_attrs["draw"]: t for t in trials(tmp_path, "scripted") if "draw" in t.user_attrs}
    refusals = 0
    for draw, (_trial, values) in fleet.fleet.store.draws().items():
        try:
            with_values(base, values)
            ok = True
        except PresetError:
            ok, refusals = False, refusals + 1
        members = [row for row in rows if row.index // 2 == draw]
        assert all((row.status == "failed") != ok for row in members), (draw, values)
        assert all("batch_size" in (row.error or "") for row in members if not ok)
        # PRUNED with no score, as rl-zoo3 tells such a trial: TPE ranks it below every scored one
        # (a FAIL it would ignore); a draw that trained reported its tier 0's mean at its steps.
        trial = told[draw]
        if ok:
            assert 1000 in trial.intermediate_values, (draw, trial.state)
        else:
            assert (trial.state, trial.intermediate_values) == (TrialState.PRUNED, {}), draw
    assert refusals >= 1 and len(told) == 16


def test_a_plan_whose_midpoints_a_preset_refuses_together_is_one_plan_error_line() -> None:
    from cockpit.contract.fleetplan import PlanError, parse_plan

    refused = "n_envs = { choice = [1, 8] }\nn_steps = { choice = [7, 32] }\nbatch_size = { choice = [4, 64] }\n"
    text = searched_plan().replace("learning_rate = { loguniform = [1e-5, 1e-3] }\n", refused)
    with pytest.raises(PlanError, match=r"^plan.toml: 'agents.search' at each key's midpoint \(batch_size=4, "):
        parse_plan(tomllib.loads(text), "plan.toml")


def test_the_fleet_view_says_the_draws_made_and_the_best_so_far_with_its_values(tmp_path: Path) -> None:
    # The first agent scores best, in each tier: the best so far is not simply the newest score.
    fleet = ScriptedFleet(tmp_path, searched_plan(promote=0.25), lambda a, t: 10.0,
                          lambda a, t: 100.0 - int(a[1:]) + 10 * t)  # fmt: skip
    fleet.step()
    early = fleet.fleet.view(None, 0.0).search
    assert early is not None and (early.sampler, early.samples, early.drawn) == ("tpe", 4, 1)
    assert early.best_score is None and early.ranges[0].startswith("learning_rate: drawn ")
    fleet.run()
    view = fleet.fleet.view(None, 0.0)
    search = view.search
    assert search is not None and search.drawn == 4
    # Nothing new since: the view reuses the search's (built from every result, not once a tick).
    assert fleet.fleet.view(None, 0.0).search is search
    results = fleet.fleet.results()
    best = max(results, key=lambda r: r.score)
    assert (search.best_score, search.best_agent) == (best.score, best.agent)
    lr = fleet.fleet.agents[best.agent].row.overrides["learning_rate"]
    assert search.best_values == f"learning_rate={lr:.4g}"
    points = search_progress(results)
    assert search.best_steps == next(p.steps_so_far for p in points if p.best_so_far == best.score)
    drawn = [values["learning_rate"] for _trial, values in fleet.fleet.store.draws().values()]
    (line,) = search.ranges
    assert line.startswith(f"learning_rate: drawn {min(drawn):.3g}..{max(drawn):.3g}, the best ")
    # The fleet screen and the plain line say it; the view crosses to an attached viewer whole.
    lines = search_lines(search)
    assert lines[0].startswith(f"search: tpe, 4 of 4 draws made; best so far {best.score:.1f} by {best.agent} after ")
    assert lines[1] == f"  {line}"
    assert f"4/4 drawn, best so far {best.score:.1f} ({best.agent})" in fleet_line(view)
    assert search_lines(None) == []
    state = fleet.sup.snapshot()
    state = dataclasses.replace(state, fleet=view)
    assert decode_state(json.loads(json.dumps(encode_state(state)))).fleet == view


def values_of(search: FleetSearch, draws: int) -> list[str]:
    """Draws 0 to `draws` - 1 of `search`, each its values as JSON (a net_arch is a list)."""
    return [json.dumps(search.draw(d)[1], sort_keys=True) for d in range(draws)]


def study_in(path: Path) -> Path:
    path.mkdir()
    return path


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_the_draws_made_before_the_first_tell_are_distinct_on_every_sampler(tmp_path: Path, sampler: str) -> None:
    # A fleet asks up to `jobs` draws before any is told: they must be different points.
    drawn = values_of(FleetSearch(space(sampler, gamma={"uniform": [0.9, 0.999]}), tmp_path, "fleet", [ENV]), 6)
    assert len(set(drawn)) == 6, drawn


def test_qmc_draws_follow_the_plans_seed_and_the_same_seed_draws_the_same_points(tmp_path: Path) -> None:
    def qmc(seed: int, where: str) -> list[str]:
        return values_of(FleetSearch(space("qmc", seed=seed), study_in(tmp_path / where), "fleet", [ENV]), 6)

    zero, one, again = qmc(0, "zero"), qmc(1, "one"), qmc(0, "again")
    assert zero == again
    # Every draw moves with the seed, the sequence's too (an unscrambled one would not).
    assert all(a != b for a, b in zip(zero, one, strict=True)), (zero, one)


def test_a_qmc_draw_asked_after_every_earlier_one_failed_is_a_new_point(tmp_path: Path) -> None:
    # With no trial scored or pruned, Optuna's QMCSampler starts from its independent sampler again.
    search = FleetSearch(space("qmc"), tmp_path, "fleet", [ENV])
    _trial0, values0 = search.draw(0)
    search.finish(0, ENV, complete=False)  # every agent failed in tier 0: FAIL
    assert trials(tmp_path)[0].state is TrialState.FAIL
    assert search.draw(1)[1] != values0


def test_a_refused_draw_is_pruned_once_and_a_resumed_study_knows_it_was_told(tmp_path: Path) -> None:
    search = FleetSearch(space("tpe"), tmp_path, "fleet", [ENV])
    search.draw(0)
    search.refuse(0)
    search.refuse(0)
    search.finish(0, ENV, complete=False)  # the tell after it changes nothing
    (told,) = trials(tmp_path)
    assert (told.state, told.value, told.intermediate_values) == (TrialState.PRUNED, None, {})
    assert FleetSearch(space("tpe"), tmp_path, "fleet", [ENV]).told(0)


def test_multivariate_tpe_models_the_keys_together_and_draws_other_points_than_univariate(tmp_path: Path) -> None:
    # The same seed, the same scores told: past TPE's random start only the model differs.
    drawn = []
    for multivariate in (False, True):
        search = FleetSearch(
            space("tpe", samples=8, multivariate=multivariate), study_in(tmp_path / str(multivariate)), "fleet", [ENV]
        )
        standings: dict[int, Standing] = {}
        for draw in range(4):
            _trial, values = search.draw(draw, standings)
            standings[draw] = Standing({0: values["learning_rate"] * 1e4}, last=True)
        drawn.append([json.dumps(search.draw(draw, standings)[1], sort_keys=True) for draw in (4, 5)])
    assert search.space.multivariate and drawn[0] != drawn[1], drawn


def test_a_refused_draw_recorded_before_a_kill_is_told_pruned_by_the_next_tell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cockpit.core.fleet.draws import SearchDraws

    drawn = SearchDraws.drawn

    def killed_before_its_refuse(self: SearchDraws, agent: object) -> bool:
        # fleet.db records the refusal, the study is not told: what a kill between the two leaves.
        told = self.search.refuse if self.search is not None else None
        setattr(self.search, "refuse", lambda draw: None)  # noqa: B010
        try:
            return drawn(self, agent)  # type: ignore[arg-type]
        finally:
            setattr(self.search, "refuse", told)  # noqa: B010

    monkeypatch.setattr(SearchDraws, "drawn", killed_before_its_refuse)
    refused = "n_envs = { choice = [8, 1] }\nn_steps = { choice = [32, 7] }\nbatch_size = { choice = [64, 4] }\n"
    text = searched_plan().replace("learning_rate = { loguniform = [1e-5, 1e-3] }\n", refused)
    fleet = ScriptedFleet(tmp_path, text.replace("samples = 4", "samples = 16\nseed = 3"), lambda a, t: 10.0, by_index)
    fleet.run()
    failed = {row.index // 2 for row in fleet.fleet.store.agents() if row.status == "failed"}
    told = {t.user_attrs["draw"]: t for t in trials(tmp_path, "scripted") if "draw" in t.user_attrs}
    assert failed and all((told[d].state, told[d].intermediate_values) == (TrialState.PRUNED, {}) for d in failed)


def test_each_env_has_its_own_study_told_that_envs_scores_with_the_same_draws(tmp_path: Path) -> None:
    # A CartPole return and an Acrobot one are on other scales: an average of them means nothing.
    text = searched_plan(promote=0.5).replace('env = "CartPole-v1"', 'env = ["CartPole-v1", "Acrobot-v1"]')
    text = text.replace("seeds = 2", "seeds = 1")  # agent index = draw x 2 + env

    def score(agent: str, tier: int) -> float:
        index = int(agent[1:])
        return (100.0 if index % 2 == 0 else -400.0) + 3 * index + 10 * tier

    fleet = ScriptedFleet(tmp_path, text, lambda a, t: 10.0, score)
    fleet.run()
    store = fleet.fleet.store
    names = study_names("scripted", ["CartPole-v1", "Acrobot-v1"])
    assert names == {"CartPole-v1": "scripted/CartPole-v1", "Acrobot-v1": "scripted/Acrobot-v1"}
    assert sorted(optuna.get_all_study_names(f"sqlite:///{tmp_path / STUDY_DB}")) == sorted(names.values())
    for env, name in names.items():
        assert_one_trial_per_draw(tmp_path, name, store.results(), store.agents(), (1000, 2000), env)
    cartpole, acrobot = (trials(tmp_path, name) for name in names.values())
    assert [t.params for t in cartpole] == [t.params for t in acrobot]  # a draw's values, on both envs
    assert all(t.value is not None and t.value > 0 for t in cartpole)
    assert all(t.value is not None and t.value < 0 for t in acrobot)
    # fleet.db records the lead (first) env's trial numbers.
    assert [trial for trial, _values in store.draws().values()] == [t.number for t in cartpole]


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_the_draws_a_fleet_makes_before_its_first_tell_are_distinct_on_every_sampler(
    tmp_path: Path, sampler: str
) -> None:
    # Six slots, one agent a draw: the first tick asks all six draws before any is told.
    text = searched_plan().replace("samples = 4", "samples = 6").replace('sampler = "tpe"', f'sampler = "{sampler}"')
    text = text.replace("jobs = 2", "jobs = 6").replace("seeds = 2", "seeds = 1")
    text = text.replace("[[tiers]]", "gamma = { uniform = [0.9, 0.999] }\n[[tiers]]", 1)
    fleet = ScriptedFleet(tmp_path, text, lambda a, t: 10.0, by_index)
    fleet.step()
    drawn = [json.dumps(values, sort_keys=True) for _trial, values in fleet.fleet.store.draws().values()]
    assert len(drawn) == 6 and len(set(drawn)) == 6, drawn
    assert all(t.state is TrialState.RUNNING for t in trials(tmp_path, "scripted"))


def test_tpe_learns_from_the_draws_scores_while_their_trials_still_run(tmp_path: Path) -> None:
    # A sync fleet tells no draw before its first tier is complete, after its last draw is asked:
    # TPE reads the draws as they stand. Here a higher learning rate scores more.
    text = searched_plan("sync").replace("samples = 4", "samples = 16").replace("seeds = 2", "seeds = 1")
    fleet: ScriptedFleet

    def score(agent: str, tier: int) -> float:
        return 600.0 + 100 * math.log10(fleet.fleet.agents[agent].row.overrides["learning_rate"])

    fleet = ScriptedFleet(tmp_path, text, lambda a, t: 10.0, score)
    while len(fleet.fleet.store.draws()) < 16:
        fleet.step()
    assert all(t.state is TrialState.RUNNING for t in trials(tmp_path, "scripted"))
    drawn = [values["learning_rate"] for _trial, values in fleet.fleet.store.draws().values()]
    # The last four, TPE's after 11 scores (past its random start of 4), all in the box's top
    # quarter in log space; drawn at random, as TPE draws with no score told, they are not.
    assert all(math.log10(lr) > -3.5 for lr in drawn[-4:]), drawn


class Killed(BaseException):
    """What a kill -9 leaves of a process: nothing after the write it came before."""


@pytest.mark.slow  # about 20 fleets and their studies per sampler
@pytest.mark.parametrize("sampler", SAMPLERS)
def test_a_kill_before_any_write_to_optuna_db_then_a_resume_asks_reports_and_tells_each_draw_once(
    tmp_path: Path, sampler: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from optuna.storages import RDBStorage

    # Every method through which Optuna's SQLite storage writes: a kill before each one, in turn.
    writes = ("create_new_trial", "set_trial_state_values", "set_trial_intermediate_value", "_set_trial_param",
              "set_trial_user_attr", "set_trial_system_attr", "set_study_system_attr")  # fmt: skip
    count = {"n": 0, "kill_at": 0}

    def killing(real: Any) -> Any:
        def write(self: RDBStorage, *args: object, **kwargs: object) -> Any:
            count["n"] += 1
            if count["n"] == count["kill_at"]:
                raise Killed
            return real(self, *args, **kwargs)

        return write

    for name in writes:
        monkeypatch.setattr(RDBStorage, name, killing(getattr(RDBStorage, name)))
    plan = searched_plan("async").replace("seeds = 2", "seeds = 1").replace('"tpe"', f'"{sampler}"')
    ScriptedFleet(tmp_path / "whole", plan, lambda a, t: 10.0, by_index).run()
    total = count["n"]
    assert total > 12  # 4 draws: each created, asked, its 1 param set, 2 tiers reported, told
    for kill_at in range(1, total + 1):
        run_dir = tmp_path / str(kill_at)
        count.update(n=0, kill_at=kill_at)
        with pytest.raises(Killed):
            ScriptedFleet(run_dir, plan, lambda a, t: 10.0, by_index).run()
        count["kill_at"] = 0
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*already reported")  # Optuna's word for a step reported twice
            resumed = ScriptedFleet(run_dir, plan, lambda a, t: 10.0, by_index, resume=True)
            resumed.step()  # a resumed session ticks at least once, even with every agent done
            resumed.run()
        store = resumed.fleet.store
        assert_one_trial_per_draw(run_dir, "scripted", store.results(), store.agents(), (1000, 2000), per_draw=1)
        store.close()


def test_a_pbt_draw_leaves_at_its_first_exploit_and_the_rest_are_told_their_whole_curve(tmp_path: Path) -> None:
    from tests.test_fleet_run_pbt import PLAN, CheckpointingFleet, score

    # One agent a draw: an agent that copied another's checkpoint trains other values than its
    # draw's, so its draw's curve ends at the tier it exploited at, PRUNED there.
    fleet = CheckpointingFleet(tmp_path, PLAN, lambda a, t: 1.0, score)
    while not fleet.fleet.lineage:
        fleet.step()
    fleet.step()
    # Told at once, at the boundary: the draw has left, though its agent trains on.
    (first,) = [e for exploits in fleet.fleet.lineage.values() for e in exploits]
    draw = int(first.agent[1:])
    states = {t.user_attrs["draw"]: t.state for t in trials(tmp_path, "scripted-pbt")}
    assert states == {d: TrialState.PRUNED if d == draw else TrialState.RUNNING for d in range(4)}
    fleet.run()
    store = fleet.fleet.store
    exploited = {e.agent: e.tier for e in store.lineage()}
    # What TPE would learn from it: its tier-0 score alone, not its tier-1 one on the source's values.
    assert fleet.fleet.draws._standings()[draw].means == {0: score(first.agent, 0)}
    targets = [t.target for t in fleet.plan.tiers]
    for t in trials(tmp_path, "scripted-pbt"):
        agent = f"a{t.user_attrs['draw']:04d}"
        last = exploited.get(agent, len(targets) - 1)
        curve = {targets[tier]: score(agent, tier) for tier in range(last + 1)}
        state = TrialState.PRUNED if agent in exploited else TrialState.COMPLETE
        assert (t.state, t.intermediate_values, t.value) == (state, curve, curve[targets[last]]), agent
    assert len(trials(tmp_path, "scripted-pbt")) == len(store.draws()) == 4
