"""Population-based training's rules without training: the plan's `[pbt]` validation, who exploits
whom, the explore rule (seeded, clipped, ints, choices, resampling), the checkpoint copy, and the
projection of a pbt plan (every agent through every tier)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from cockpit.contract import fleetplan
from cockpit.contract.checkpoint_files import newest_checkpoint
from cockpit.contract.costs import Costs
from cockpit.contract.files import sha256_of
from cockpit.contract.fleetplan import PbtSettings, PlanError, load_plan, parse_plan
from cockpit.contract.searchspace import Distribution, SearchSpace
from cockpit.contract.toml import tomllib
from cockpit.core.fleet import pbt
from cockpit.core.fleet.projection import project
from cockpit.core.sizing.overlap import speed_of

PLAN = """
name = "pbt"
jobs = 2
promotion = "pbt"
[agents]
env = "CartPole-v1"
preset = "cartpole"
seeds = 1
[agents.search]
samples = 8
learning_rate = {{ loguniform = [1e-4, 1e-2] }}
[[tiers]]
timesteps = 1000
{promote}
[[tiers]]
timesteps = 2000
{pbt}
"""


def plan_of(promote: str = "", table: str = "", text: str = PLAN) -> object:
    return parse_plan(tomllib.loads(text.format(promote=promote, pbt=table)), "plan.toml")


def error_of(promote: str = "", table: str = "", text: str = PLAN) -> str:
    with pytest.raises(PlanError) as info:
        plan_of(promote, table, text)
    message = str(info.value)
    assert "\n" not in message and message.startswith("plan.toml: ")
    return message


def test_a_pbt_plan_takes_its_settings_and_defaults() -> None:
    plan = plan_of()
    assert plan.promotion == "pbt" and plan.pbt == PbtSettings(0.25, 0.25, 0)  # type: ignore[attr-defined]
    assert plan.funnel() == [8, 8]  # type: ignore[attr-defined]
    plan = plan_of(table="[pbt]\nquantile = 0.5\nresample_probability = 0\nseed = 7")
    assert plan.pbt == PbtSettings(0.5, 0.0, 7)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("promote", "table", "says"), [
    ("promote = 0.5", "", "'tiers[0].promote': promotion = \"pbt\" trains every agent through every tier"),
    ("", "[pbt]\nquantile = 0.75", "'pbt.quantile' must be a fraction in (0, 0.5]"),
    ("", "[pbt]\nquantile = 0", "'pbt.quantile' must be a fraction in (0, 0.5]"),
    ("", "[pbt]\nresample_probability = 1.5", "'pbt.resample_probability' must be a probability in [0, 1]"),
    ("", "[pbt]\nseed = -1", "'pbt.seed' must be an integer in [0, 2^32)"),
    ("", "[pbt]\nfraction = 0.2",
     "unknown key 'pbt.fraction' (valid: quantile, resample_probability, seed, synch, burn_in_period, schedule, "
     "exploit)"),
    ("", "[pbt]\nexploit = 0", "'pbt.exploit' must be true or false (false: nobody copies or perturbs), got 0"),
])  # fmt: skip
def test_a_bad_pbt_plan_is_one_line_naming_the_key(promote: str, table: str, says: str) -> None:
    assert says in error_of(promote, table)


def test_pbt_needs_a_search_and_a_pbt_table_needs_pbt() -> None:
    no_search = PLAN.replace("[agents.search]\nsamples = 8\nlearning_rate = {{ loguniform = [1e-4, 1e-2] }}\n", "")
    assert "add an [agents.search] table" in error_of(text=no_search)
    sync = PLAN.replace('promotion = "pbt"', 'promotion = "sync"')
    assert "'pbt' is only for promotion = \"pbt\"" in error_of("promote = 0.5", "[pbt]\nquantile = 0.25", sync)
    assert "'pbt' must be a table" in error_of(text=PLAN.replace('promotion = "pbt"', 'promotion = "pbt"\npbt = 3'))


def test_the_cockpit_refuses_a_bad_pbt_plan_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cockpit.cli import main

    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(promote="promote = 0.5", pbt="[pbt]\nquantile = 0.9"))
    assert main(["fleet", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'tiers[0].promote'" in err and "'pbt.quantile'" in err
    with pytest.raises(PlanError):
        load_plan(path)


def test_the_projection_trains_every_pbt_agent_through_every_tier() -> None:
    plan = plan_of()
    costs = Costs("cpu", step_overhead_us=400.0, env_policy_us=10.0, env_step_us=5.0, train_sample_us=2.0)
    projection = project(plan, lambda preset: speed_of(preset, costs, 2, 2))  # type: ignore[arg-type]
    # 8 agents x 1,000, then the same 8 resume for 1,000 more: nothing saved against all-to-the-last.
    assert [(s.agents, s.each, s.amount) for s in projection.tiers] == [(8, 1000, 8000), (8, 1000, 8000)]
    assert projection.total.steps == projection.all_to_last.steps == 16_000


SPACE = SearchSpace(4, "random", 0, (
    Distribution("activation", "choice", choices=("tanh", "relu")),
    Distribution("learning_rate", "loguniform", 1e-4, 1e-2),
    Distribution("n_epochs", "int", 3, 10),
    Distribution("gamma", "uniform", 0.9, 0.999),
))  # fmt: skip


def test_explore_multiplies_each_number_by_0_8_or_1_2_clipped_and_keeps_an_architecture_key() -> None:
    values = {"activation": "tanh", "learning_rate": 1e-3, "n_epochs": 10, "gamma": 0.95}
    seen: dict[str, set[object]] = {key: set() for key in values}
    for seed in range(60):
        out = pbt.explore(values, SPACE, random.Random(seed), 0.0)
        for key, value in out.items():
            seen[key].add(value)
    assert sorted(seen["learning_rate"]) == pytest.approx([8e-4, 1.2e-3])  # type: ignore[type-var]
    assert seen["n_epochs"] == {8, 10}  # 10 x 1.2 clipped to the range's 10; 10 x 0.8 = 8, an int
    assert sorted(seen["gamma"]) == pytest.approx([0.9, 0.999])  # type: ignore[type-var]  # 0.76 and 1.14 clipped
    assert seen["activation"] == {"tanh"}  # an architecture key: the copied network's, never perturbed
    assert all(isinstance(v, int) for v in seen["n_epochs"])


def test_explore_rounds_an_int_and_resamples_with_the_stated_probability() -> None:
    out = pbt.explore({"activation": "relu", "learning_rate": 1e-3, "n_epochs": 5, "gamma": 0.95}, SPACE,
                      random.Random(3), 0.0)  # fmt: skip
    assert out["n_epochs"] in (4, 6)  # 5 x 0.8 = 4, 5 x 1.2 = 6
    # Resampled always: anywhere in the range, not only x0.8 / x1.2, and loguniform in log space.
    draws = [pbt.explore({"activation": "relu", "learning_rate": 1e-3, "n_epochs": 5, "gamma": 0.95}, SPACE,
                         random.Random(seed), 1.0)["learning_rate"] for seed in range(400)]  # fmt: skip
    assert all(1e-4 <= d <= 1e-2 for d in draws)
    below = sum(1 for d in draws if d < 1e-3) / len(draws)  # 1e-3 is the log-midpoint
    assert 0.4 < below < 0.6
    # With probability 0.25: about a quarter of the learning rates are neither 8e-4 nor 1.2e-3.
    other = [pbt.explore({"activation": "relu", "learning_rate": 1e-3, "n_epochs": 5, "gamma": 0.95}, SPACE,
                         random.Random(seed), 0.25)["learning_rate"] for seed in range(800)]  # fmt: skip
    resampled = sum(1 for d in other if not (math.isclose(d, 8e-4) or math.isclose(d, 1.2e-3))) / len(other)
    assert 0.18 < resampled < 0.32


def test_explore_and_pairs_are_reproducible_from_the_seed() -> None:
    ranked = [f"a{i:04d}" for i in range(8)]
    scores = {agent: 100.0 - i for i, agent in enumerate(ranked)}
    settings = PbtSettings(quantile=0.25)
    first = pbt.pairs(ranked, scores, settings, pbt.rng_for(5, 1))
    assert first == pbt.pairs(ranked, scores, settings, pbt.rng_for(5, 1))
    assert [agent for agent, _ in first] == ["a0006", "a0007"]  # ceil(8 x 0.25) = the bottom 2
    assert all(source in ("a0000", "a0001") for _, source in first)  # each copies one of the top 2
    values = {"activation": "relu", "learning_rate": 1e-3, "n_epochs": 5, "gamma": 0.95}
    assert pbt.explore(values, SPACE, pbt.rng_for(5, 1), 0.3) == pbt.explore(values, SPACE, pbt.rng_for(5, 1), 0.3)


@pytest.mark.parametrize(
    ("agents", "quantile", "share"),
    [(1, 0.25, 0), (2, 0.25, 1), (3, 0.25, 1), (4, 0.25, 1), (5, 0.25, 2), (8, 0.25, 2), (9, 0.1, 1),
     (10, 0.3, 3), (3, 0.5, 1), (5, 0.5, 2), (2, 0.01, 1)],
)  # fmt: skip
def test_the_shares_are_ceil_of_n_times_quantile_capped_at_half(agents: int, quantile: float, share: int) -> None:
    assert PbtSettings(quantile=quantile).share(agents) == share
    ranked = [f"a{i:04d}" for i in range(agents)]
    scores = {agent: float(agents - i) for i, agent in enumerate(ranked)}  # no ties
    got = pbt.pairs(ranked, scores, PbtSettings(quantile=quantile), random.Random(0))
    assert [agent for agent, _ in got] == ranked[agents - share :]
    assert all(source in ranked[:share] for _, source in got)


def test_an_exploit_needs_a_strictly_better_source() -> None:
    ranked = ["a0000", "a0001", "a0002", "a0003"]
    settings = PbtSettings(quantile=0.5)  # bottom 2 copy one of the top 2
    tied = dict.fromkeys(ranked, 500.0)  # CartPole's ceiling: nobody is worse than anybody
    assert pbt.pairs(ranked, tied, settings, random.Random(0)) == []
    # a0002 ties a0001 but not a0000: it copies a0000 every time; a0003 either of the two.
    scores = {"a0000": 500.0, "a0001": 480.0, "a0002": 480.0, "a0003": 20.0}
    for seed in range(30):
        got = dict(pbt.pairs(ranked, scores, settings, random.Random(seed)))
        assert got["a0002"] == "a0000" and got["a0003"] in ("a0000", "a0001")


CHOICE = SearchSpace(4, "random", 0, (Distribution("n_steps", "choice", choices=(16, 32, 64, 128)),))


def test_a_choice_moves_to_a_neighbour_or_is_drawn_again_with_the_resample_probability() -> None:
    def seen(value: int, probability: float, draws: int = 200) -> list[int]:
        return [pbt.explore({"n_steps": value}, CHOICE, random.Random(s), probability)["n_steps"] for s in range(draws)]

    assert set(seen(32, 0.0)) == {16, 64}  # one to the left or right, a fair coin
    assert 0.35 < seen(32, 0.0).count(16) / 200 < 0.65
    assert set(seen(16, 0.0)) == {16, 32}  # at the end: left stays put
    assert set(seen(128, 0.0)) == {64, 128}
    assert set(seen(32, 1.0)) == {16, 32, 64, 128}  # drawn again: anywhere, 128 too
    far = sum(1 for v in seen(32, 0.25, 800) if v == 128) / 800  # only a redraw reaches 128: 0.25 x 1/4
    assert 0.03 < far < 0.1
    # A value its choices do not list (a preset's own, before a draw) is drawn again.
    assert {pbt.explore({"n_steps": 2048}, CHOICE, random.Random(s), 0.0)["n_steps"] for s in range(40)} <= {
        16, 32, 64, 128}  # fmt: skip


def test_no_architecture_key_is_ever_perturbed_even_when_resampled_always() -> None:
    space = SearchSpace(4, "random", 0, (
        Distribution("activation", "choice", choices=("tanh", "relu")),
        Distribution("learning_rate", "loguniform", 1e-4, 1e-2),
        Distribution("net_arch", "choice", choices=([32, 32], [64, 64], [128, 128])),
        Distribution("normalize", "choice", choices=(False, True)),
    ))  # fmt: skip
    values = {"activation": "relu", "learning_rate": 1e-3, "net_arch": [64, 64], "normalize": True}
    for seed in range(40):
        out = pbt.explore(values, space, random.Random(seed), 1.0)
        assert (out["activation"], out["net_arch"], out["normalize"]) == ("relu", [64, 64], True)
        assert out["learning_rate"] != 1e-3


def test_exploit_false_is_the_control_nobody_copies_and_the_plan_says_so_once() -> None:
    plan = plan_of(table="[pbt]\nexploit = false")
    assert plan.pbt == PbtSettings(0.25, 0.25, 0, exploit=False)  # type: ignore[attr-defined]
    assert plan.funnel() == [8, 8]  # type: ignore[attr-defined]  # everyone still trains through every tier
    ranked = [f"a{i:04d}" for i in range(8)]
    scores = {agent: float(100 - i) for i, agent in enumerate(ranked)}  # the bottom are far worse: no ties
    assert plan.pbt.share(8) == 0 and pbt.pairs(ranked, scores, plan.pbt, random.Random(0)) == []  # type: ignore[attr-defined]
    assert PbtSettings(0.25).share(8) == 2 and pbt.pairs(ranked, scores, PbtSettings(0.25), random.Random(0))
    small = plan_of(table="[pbt]\nexploit = false", text=SMALL)  # its groups of one are not news: nobody exploits
    assert fleetplan.pbt_notes(small) == [  # type: ignore[arg-type]
        "pbt: exploit = false: every agent trains through every tier and is scored; nobody copies or perturbs"
    ]


SMALL = PLAN.replace("samples = 8", "samples = 1").replace(
    "[agents.search]", "[agents.overrides]\nn_epochs = [4, 8]\n[agents.search]"
)


def test_a_group_too_small_to_exploit_is_said_once_before_the_fleet_runs() -> None:
    notes = fleetplan.pbt_notes(plan_of(table="", text=SMALL))  # type: ignore[arg-type]
    assert notes == [
        "pbt: the group CartPole-v1 cartpole n_epochs=4 has 1 agent(s): it never exploits (a group needs 2 "
        "agents; add samples or seeds)",
        "pbt: the group CartPole-v1 cartpole n_epochs=8 has 1 agent(s): it never exploits (a group needs 2 "
        "agents; add samples or seeds)",
    ]
    assert fleetplan.pbt_notes(plan_of(table="")) == []  # type: ignore[arg-type]  # 8 agents: 2 exploit
    two = SMALL.replace("samples = 1", "samples = 2")  # groups of 2: ceil(2 x 0.25) = 1 each
    assert fleetplan.pbt_notes(plan_of(table="", text=two)) == []  # type: ignore[arg-type]
    arch = PLAN.replace("[[tiers]]", "net_arch = {{ choice = [[32, 32], [64, 64]] }}\n[[tiers]]", 1)
    (note,) = fleetplan.pbt_notes(plan_of(table="", text=arch))  # type: ignore[arg-type]
    assert note.startswith("pbt: net_arch shapes the saved network: an agent exploits only agents that drew the same")


def _checkpoint(directory: Path, step: int, stamp: int, payload: bytes) -> Path:
    path = directory / f"step-{step:012d}-{stamp}"
    path.mkdir(parents=True)
    (path / "model.zip").write_bytes(payload)
    sums = {"model.zip": sha256_of(path / "model.zip")}  # as the worker records them
    (path / "meta.json").write_text(json.dumps({"step": step, "files": sums}))
    return path


def test_the_copy_becomes_the_only_checkpoint_and_a_rerun_is_harmless(tmp_path: Path) -> None:
    source = _checkpoint(tmp_path / "a0001" / "checkpoints", 1024, 5, b"top")
    mine = tmp_path / "a0007" / "checkpoints"
    _checkpoint(mine, 1024, 9, b"mine")  # newer than the source's: it would be resumed if it stayed
    _checkpoint(mine, 512, 3, b"older")
    (mine / f".tmp-{source.name}").mkdir()  # a copy a kill cut short
    copied = pbt.copy_checkpoint(source, mine)
    assert newest_checkpoint(mine) == copied and (copied / "model.zip").read_bytes() == b"top"
    assert sorted(p.name for p in (mine / pbt.REPLACED_DIR).iterdir()) == [
        "step-000000000512-3", "step-000000001024-9"]  # fmt: skip
    assert not list(mine.glob(".tmp-*"))
    assert pbt.copy_checkpoint(source, mine) == copied  # redone on resume: nothing changes
    assert [p.name for p in mine.glob("step-*")] == [source.name]


def test_a_pbt_dry_run_projects_every_agent_through_every_tier(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from cockpit.cli import main
    from tests.test_contract_fleetplan import cache_costs, forbid_processes

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(promote="", pbt=""))
    plan = load_plan(path)
    # The searched keys at their midpoints are what a projection measures: one preset, as a probe caches it.
    cache_costs(plan)
    forbid_processes(monkeypatch)
    assert main(["fleet", str(path), "--dry-run", "--rate", "2"]) == 0
    out = capsys.readouterr().out
    assert "pbt promotion" in out and "pbt trains every agent through every tier: 16,000 steps" in out
    assert "saved" not in out and "$" in out


def test_a_copy_that_does_not_match_the_sources_recorded_sums_is_never_put_in_place(tmp_path: Path) -> None:
    source = _checkpoint(tmp_path / "a0001" / "checkpoints", 1024, 5, b"top")
    (source / "model.zip").write_bytes(b"bit rot")  # after its worker recorded its sum
    mine = tmp_path / "a0007" / "checkpoints"
    own = _checkpoint(mine, 512, 3, b"mine")
    with pytest.raises(ValueError) as raised:
        pbt.copy_checkpoint(source, mine)
    assert str(raised.value) == (f"the copy of checkpoint {source}: model.zip does not match the SHA-256 its worker "
                                 "recorded")  # fmt: skip
    assert sorted(p.name for p in mine.iterdir()) == [own.name]  # its own stays its newest; no half copy left
