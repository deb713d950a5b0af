"""`cockpit report` on a fleet's run dir: the summary read from fleet.db and models.toml (tier
counts, agent statuses, the leaderboard), the fleet object of `report --json`, and the models'
checksums. The fleets are written straight into fleet.db and models/: no training."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from cockpit.cli import main
from cockpit.commands.report import print_report
from cockpit.contract.fleetplan import parse_plan
from cockpit.contract.model_manifest import MODELS_DIR, ModelEntry, copy_atomic, write_manifest
from cockpit.contract.toml import tomllib
from cockpit.core.fleet.promotion import async_promotions, sync_promotions
from cockpit.core.fleet.report import fleet_summary
from cockpit.core.fleet.store import FleetStore
from tests.test_commands_report_json import GOLDEN_RUN, validate

PLAN = """
name = "screen"
jobs = 2
promotion = "{promotion}"
rate_usd_per_h = 1.99
[agents]
env = "CartPole-v1"
preset = "cartpole"
seeds = {seeds}
[agents.overrides]
learning_rate = [0.001, 0.0003]
[[tiers]]
timesteps = 4096
promote = 0.5
[[tiers]]
timesteps = 8192
"""
# Tier-0 scores of the 8 agents of the sync fleet; a0003 fails in tier 0.
SCORES = {"a0000": 40.0, "a0001": 90.0, "a0002": 70.0, "a0004": 120.0, "a0005": 60.0, "a0006": 20.0, "a0007": 100.0}


def _fleet(run_dir: Path, promotion: str = "sync", seeds: int = 4) -> FleetStore:
    """A run dir (the golden run's run.toml and files) with a fresh fleet.db of the plan."""
    shutil.copytree(GOLDEN_RUN, run_dir)
    text = PLAN.format(promotion=promotion, seeds=seeds)
    plan = parse_plan(tomllib.loads(text), "screen.toml")
    store = FleetStore.in_run_dir(run_dir)
    store.create(text, "screen.toml", [(a.id, a.index, a.env, a.preset_name, dict(a.overrides), a.seed)
                                       for a in plan.agents])  # fmt: skip
    return store


def _sync_fleet(run_dir: Path) -> None:
    """8 agents, sync, half promoted. Tier 0: a0003 fails, the other 7 are scored, the best 4 of the
    8 that entered are promoted (a0004, a0007, a0001, a0002), the other 3 culled. Tier 1: a0004 and
    a0007 are done, with their models collected; a0001 fails; a0002 still trains."""
    store = _fleet(run_dir)
    for agent in [f"a{i:04d}" for i in range(8)]:
        store.start(agent, 0)
    store.fail("a0003", 0, "worker exited with code 1: CUDA error")
    for agent, score in SCORES.items():
        store.record(agent, 0, steps=4096, score=score, score_std=1.5, train_return=score / 2)
    promoted = sync_promotions(store.results(0), 4)
    assert promoted == ["a0004", "a0007", "a0001", "a0002"]
    store.promote(promoted, 0, decided=True)
    store.record("a0004", 1, steps=8192, score=480.0, score_std=3.0, train_return=300.0)
    store.record("a0007", 1, steps=8192, score=500.0, score_std=0.0, train_return=310.0)
    store.fail("a0001", 1, "stalled: no events for 240 s")
    store.close()
    models = run_dir / MODELS_DIR
    models.mkdir()
    entries = []
    for agent, score in (("a0007", 500.0), ("a0004", 480.0)):
        source = run_dir / f"{agent}-model.bin"
        source.write_bytes(f"the model of {agent}".encode())
        digest = copy_atomic(source, models / f"{agent}.zip")
        entries.append(ModelEntry(agent, f"{agent}.zip", digest, "CartPole-v1", "cartpole", int(agent[-1]) % 4, score,
                                  8192, {"learning_rate": 0.0003}))  # fmt: skip
    write_manifest(run_dir, "screen", entries)


def test_a_directory_without_fleet_db_is_no_fleet(tmp_path: Path) -> None:
    assert fleet_summary(tmp_path) is None


def test_a_sync_fleet_counts_its_tiers_and_tells_each_agent_where_it_is(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _sync_fleet(run_dir)
    fleet = fleet_summary(run_dir)
    assert fleet is not None
    assert (fleet.name, fleet.promotion, fleet.rate_usd_per_h, fleet.source) == ("screen", "sync", 1.99, "screen.toml")
    tiers = [(t.tier, t.timesteps, t.planned, t.entered, t.training, t.finished, t.promoted, t.culled, t.failed)
             for t in fleet.tiers]  # fmt: skip
    assert tiers == [(0, 4096, 8, 8, 0, 7, 4, 3, 1), (1, 8192, 4, 4, 1, 2, 0, 0, 1)]
    status = {a.id: (a.status, a.tier, a.steps, a.score, a.score_tier) for a in fleet.agents}
    assert status == {
        "a0000": ("culled", 0, 4096, 40.0, 0),
        "a0001": ("failed", 1, 4096, 90.0, 0),  # its tier-0 result is its latest
        "a0002": ("training", 1, 4096, 70.0, 0),
        "a0003": ("failed", 0, 0, None, None),
        "a0004": ("done", 1, 8192, 480.0, 1),
        "a0005": ("culled", 0, 4096, 60.0, 0),
        "a0006": ("culled", 0, 4096, 20.0, 0),
        "a0007": ("done", 1, 8192, 500.0, 1),
    }
    errors = {a.id: a.error for a in fleet.agents if a.error is not None}
    assert errors == {"a0003": "worker exited with code 1: CUDA error", "a0001": "stalled: no events for 240 s"}
    settings = {a.id: (a.env, a.preset, a.overrides, a.seed) for a in fleet.agents}
    assert settings["a0002"] == ("CartPole-v1", "cartpole", {"learning_rate": 0.001}, 2)
    assert settings["a0007"] == ("CartPole-v1", "cartpole", {"learning_rate": 0.0003}, 3)
    # Each agent's highest-tier result: the last tier first, then by score.
    board = [(leader.rank, leader.agent, leader.tier, leader.score) for leader in fleet.leaderboard]
    assert board == [(1, "a0007", 1, 500.0), (2, "a0004", 1, 480.0), (3, "a0001", 0, 90.0), (4, "a0002", 0, 70.0),
                     (5, "a0005", 0, 60.0), (6, "a0000", 0, 40.0), (7, "a0006", 0, 20.0)]  # fmt: skip
    assert [m.agent for m in fleet.models.entries] == ["a0007", "a0004"]
    assert fleet.models.verified and fleet.models.problems == ()


def test_a_sync_tier_culls_no_one_until_its_promotion_is_decided(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    store = _fleet(run_dir)
    for agent in ("a0000", "a0001", "a0002"):
        store.start(agent, 0)
    store.record("a0000", 0, steps=4096, score=10.0, score_std=None, train_return=None)
    store.record("a0001", 0, steps=4096, score=30.0, score_std=None, train_return=None)
    store.close()
    fleet = fleet_summary(run_dir)
    assert fleet is not None
    assert [a.status for a in fleet.agents] == ["scored", "scored", "training"] + ["waiting"] * 5
    assert [a.tier for a in fleet.agents][2:4] == [0, None]
    assert [(t.entered, t.training, t.finished, t.promoted, t.culled) for t in fleet.tiers] == [
        (3, 1, 2, 0, 0),
        (0, 0, 0, 0, 0),
    ]
    assert fleet.models.entries == () and fleet.models.verified  # nothing collected yet, nothing wrong


def test_an_async_tier_culls_once_nothing_more_can_come_of_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    store = _fleet(run_dir, promotion="async", seeds=2)  # 4 agents, half promoted
    scores = {"a0000": 10.0, "a0001": 40.0, "a0002": 30.0}
    for agent in scores:
        store.start(agent, 0)
        store.record(agent, 0, steps=4096, score=scores[agent], score_std=None, train_return=None)
        chosen = async_promotions(store.results(0), 0.5, set().union(*store.promotions().values()))
        store.promote(chosen, 0)
    assert store.promotions() == {0: {"a0001"}}
    store.close()
    fleet = fleet_summary(run_dir)
    assert fleet is not None
    assert [a.status for a in fleet.agents] == ["scored", "training", "scored", "waiting"]
    assert fleet.tiers[0].culled == 0
    store = FleetStore.in_run_dir(run_dir)
    store.start("a0003", 0)
    store.record("a0003", 0, steps=4096, score=20.0, score_std=None, train_return=None)
    store.close()
    # 4 results: the top 2 (a0001, a0002) are owed a promotion, so the tier is not closed yet.
    fleet = fleet_summary(run_dir)
    assert fleet is not None and fleet.tiers[0].culled == 0 and fleet.agents[0].status == "scored"
    store = FleetStore.in_run_dir(run_dir)
    store.promote(["a0002"], 0)
    store.close()
    fleet = fleet_summary(run_dir)
    assert fleet is not None
    assert [a.status for a in fleet.agents] == ["culled", "training", "training", "culled"]
    assert [(t.entered, t.finished, t.promoted, t.culled) for t in fleet.tiers] == [(4, 4, 2, 2), (2, 0, 0, 0)]


def test_report_json_has_the_fleet_with_every_agent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "run"
    _sync_fleet(run_dir)
    assert main(["report", str(run_dir), "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    report = json.loads(captured.out)
    validate(report)
    fleet: dict[str, Any] = report["fleet"]
    assert (fleet["name"], fleet["promotion"], fleet["rate_usd_per_h"]) == ("screen", "sync", 1.99)
    assert fleet["counts"] == {"training": 1, "culled": 3, "failed": 2, "done": 2}
    assert fleet["tiers"][0] == {"tier": 0, "timesteps": 4096, "planned": 8, "entered": 8, "training": 0,
                                 "finished": 7, "promoted": 4, "culled": 3, "failed": 1, "episodes": None}  # fmt: skip
    agents = {agent["id"]: agent for agent in fleet["agents"]}
    assert list(agents) == [f"a{i:04d}" for i in range(8)]
    assert agents["a0007"] == {
        "id": "a0007", "tier": 1, "status": "done", "steps": 8192, "score": 500.0, "score_std": 0.0,
        "score_tier": 1, "env": "CartPole-v1", "preset": "cartpole", "overrides": {"learning_rate": 0.0003},
        "seed": 3, "error": None, "lineage": [],
    }  # fmt: skip
    assert agents["a0003"] == {
        "id": "a0003", "tier": 0, "status": "failed", "steps": 0, "score": None, "score_std": None,
        "score_tier": None, "env": "CartPole-v1", "preset": "cartpole", "overrides": {"learning_rate": 0.001},
        "seed": 3, "error": "worker exited with code 1: CUDA error", "lineage": [],
    }  # fmt: skip
    assert [agents[a]["status"] for a in ("a0000", "a0002", "a0005")] == ["culled", "training", "culled"]
    leader = fleet["leaderboard"][0]
    assert (leader["rank"], leader["id"], leader["tier"], leader["score"], leader["overrides"]) == (
        1, "a0007", 1, 500.0, {"learning_rate": 0.0003})  # fmt: skip
    assert [entry["id"] for entry in fleet["leaderboard"]][:3] == ["a0007", "a0004", "a0001"]
    models = fleet["models"]
    assert models["verified"] is True and models["problems"] == []
    assert [m["agent"] for m in models["collected"]] == ["a0007", "a0004"]
    assert models["dir"] == str(run_dir / MODELS_DIR)


def test_the_text_report_has_the_fleet_section(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _sync_fleet(run_dir)
    console = Console(record=True, width=250)
    fleet = print_report(run_dir, console)
    text = console.export_text()
    assert fleet is not None
    assert "fleet screen (screen.toml): 8 agents, sync promotion, 2 tier(s), $1.99/h" in text
    assert "agents: 1 training, 3 culled, 2 failed, 2 done" in text
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in text.splitlines() if line.startswith("│")]
    assert ["0", "4,096", "8", "8", "0", "7", "4", "3", "1"] in rows
    assert ["1", "8,192", "4", "4", "1", "2", "0", "0", "1"] in rows
    assert ["1", "a0007", "1", "8,192", "500.0", "0.0", "310.0", "CartPole-v1", "cartpole", "learning_rate=0.0003",
            "3"] in rows  # fmt: skip
    assert "failed: a0003 in tier 0: worker exited with code 1: CUDA error" in text
    assert "models: 2 collected, checksums verified" in text


@pytest.mark.parametrize("as_json", [False, True])
def test_a_tampered_model_fails_the_report_after_printing_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    run_dir = tmp_path / "run"
    _sync_fleet(run_dir)
    tampered = run_dir / MODELS_DIR / "a0004.zip"
    tampered.write_bytes(b"not the model that was collected")
    assert main(["report", str(run_dir), *(["--json"] if as_json else [])]) == 1
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and str(tampered) in captured.err
    assert "a0007.zip" not in captured.err  # the intact one is not named
    if as_json:
        report = json.loads(captured.out)
        validate(report)
        models = report["fleet"]["models"]
        assert models["verified"] is False
        assert models["problems"] == [f"{tampered}: does not match its SHA-256 in models.toml"]
        assert len(report["fleet"]["agents"]) == 8  # everything else is still there
    else:
        assert "fleet screen" in captured.out and "leaderboard" in captured.out
        assert "checksums verified" not in captured.out and str(tampered) in captured.out.replace("\n", "")


def test_a_missing_model_fails_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "run"
    _sync_fleet(run_dir)
    (run_dir / MODELS_DIR / "a0007.zip").unlink()
    assert main(["report", str(run_dir), "--json"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a0007.zip: missing" in err


def test_a_plan_that_no_longer_resolves_is_still_reported(tmp_path: Path) -> None:
    """A plan whose preset was a relative path resolves only where the fleet started; the report
    still gives its tiers and names the presets from the agents' rows."""
    run_dir = tmp_path / "run"
    shutil.copytree(GOLDEN_RUN, run_dir)
    text = PLAN.format(promotion="sync", seeds=2).replace('preset = "cartpole"', 'preset = "mine/fast.toml"')
    generated = str(run_dir / "presets" / "fast-0123456789.toml")
    store = FleetStore.in_run_dir(run_dir)
    store.create(text, "screen.toml", [("a0000", 0, "CartPole-v1", generated, {"learning_rate": 0.001}, 0),
                                       ("a0001", 1, "CartPole-v1", "/home/me/mine/fast.toml", {}, 1)])  # fmt: skip
    store.close()
    fleet = fleet_summary(run_dir)
    assert fleet is not None
    assert [(t.timesteps, t.planned) for t in fleet.tiers] == [(4096, 2), (8192, 1)]
    assert [a.preset for a in fleet.agents] == ["fast", "fast"]


def test_an_unreadable_fleet_db_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(GOLDEN_RUN, run_dir)
    (run_dir / "fleet.db").write_bytes(b"this is not a database" * 100)
    assert main(["report", str(run_dir)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "fleet.db" in captured.err
