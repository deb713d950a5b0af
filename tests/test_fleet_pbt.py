"""Population-based training's rules without training: the plan's `[pbt]` validation, who exploits
whom, the explore rule (seeded, clipped, ints, choices, resampling), the checkpoint copy, and the
projection of a pbt plan (every agent through every tier)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

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
    ("", "[pbt]\nfraction = 0.2", "unknown key 'pbt.fraction' (valid: quantile, resample_probability, seed)"),
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


def test_explore_multiplies_each_number_by_0_8_or_1_2_clipped_and_resamples_choices() -> None:
    values = {"activation": "tanh", "learning_rate": 1e-3, "n_epochs": 10, "gamma": 0.95}
    seen: dict[str, set[object]] = {key: set() for key in values}
    for seed in range(60):
        out = pbt.explore(values, SPACE, random.Random(seed), 0.0)
        for key, value in out.items():
            seen[key].add(value)
    assert sorted(seen["learning_rate"]) == pytest.approx([8e-4, 1.2e-3])  # type: ignore[type-var]
    assert seen["n_epochs"] == {8, 10}  # 10 x 1.2 clipped to the range's 10; 10 x 0.8 = 8, an int
    assert sorted(seen["gamma"]) == pytest.approx([0.9, 0.999])  # type: ignore[type-var]  # 0.76 and 1.14 clipped
    assert seen["activation"] == {"tanh", "relu"}  # a choice has no x0.8: always drawn again
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
    first = pbt.pairs(ranked, 0.25, pbt.rng_for(5, 1))
    assert first == pbt.pairs(ranked, 0.25, pbt.rng_for(5, 1))
    assert [agent for agent, _ in first] == ["a0006", "a0007"]  # floor(8 x 0.25) = the bottom 2
    assert all(source in ("a0000", "a0001") for _, source in first)  # each copies one of the top 2
    assert pbt.pairs(ranked[:3], 0.25, random.Random(0)) == []  # floor(3 x 0.25) = 0: nobody
    values = {"activation": "relu", "learning_rate": 1e-3, "n_epochs": 5, "gamma": 0.95}
    assert pbt.explore(values, SPACE, pbt.rng_for(5, 1), 0.3) == pbt.explore(values, SPACE, pbt.rng_for(5, 1), 0.3)


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
    assert pbt.newest_checkpoint(mine) == copied and (copied / "model.zip").read_bytes() == b"top"
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
